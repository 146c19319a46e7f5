"""Decoders of the general pipeline: turn token strings back into text.

Each class is one Hugging Face decoder. ``decode(tokens) -> str`` joins the result of
``decode_chain(tokens) -> list[str]``, the per-token step that :class:`Sequence` chains.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Sequence as Seq

import regex

from .byte_level import CHAR_TO_BYTE
from .errors import FormatError
from .pre_tokenizers import compile_onig, find_spans


# How ByteLevel and ByteFallback turn bytes that are not valid UTF-8 into text: U+FFFD (as
# Hugging Face does), or, for `Decoder.decode_bytes`, one lone surrogate per byte that encoding
# with "surrogateescape" gives back (the other decoders pass such characters on unchanged).
_BYTE_ERRORS = contextvars.ContextVar("toksmith_decoder_byte_errors", default="replace")


def _bytes_as_text(data: bytes | bytearray) -> str:
    return data.decode("utf-8", _BYTE_ERRORS.get())


class Decoder:
    """Base class: ``decode_chain`` per token, ``decode`` joins."""

    def decode_chain(self, tokens: list[str]) -> list[str]:
        raise NotImplementedError

    def decode(self, tokens: list[str]) -> str:
        return "".join(self.decode_chain(list(tokens)))

    def decode_bytes(self, tokens: list[str]) -> bytes:
        """``decode``, but as bytes, with the bytes of byte tokens (ByteFallback) and of
        byte-level characters (ByteLevel) as they are where they are not valid UTF-8 (a token
        holding part of a character): ``decode`` would make each U+FFFD."""
        reset = _BYTE_ERRORS.set("surrogateescape")
        try:
            return self.decode(tokens).encode("utf-8", "surrogateescape")
        finally:
            _BYTE_ERRORS.reset(reset)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_hf()})"


_TO_LATIN1 = {ord(c): b for c, b in CHAR_TO_BYTE.items()}
_NOT_BYTE_LEVEL = re.compile("[^" + "".join(re.escape(c) for c in CHAR_TO_BYTE) + "]")


class ByteLevel(Decoder):
    """Maps byte-level characters back to bytes and decodes them as UTF-8 (invalid bytes
    become U+FFFD). A token with a character outside the byte-level alphabet stays as it is."""

    def decode_chain(self, tokens: list[str]) -> list[str]:
        text = "".join(tokens)
        if not _NOT_BYTE_LEVEL.search(text):  # every character maps to a byte
            return [_bytes_as_text(text.translate(_TO_LATIN1).encode("latin-1"))]
        data = bytearray()
        for t in tokens:
            try:
                data += bytes(CHAR_TO_BYTE[c] for c in t)
            except KeyError:
                data += t.encode("utf-8", "surrogateescape")
        return [_bytes_as_text(data)]

    def to_hf(self) -> dict:
        return {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}


class Metaspace(Decoder):
    """``▁`` back to spaces; in the first token, with a prepend scheme other than never, the
    ``▁`` characters are dropped."""

    def __init__(self, replacement: str = "\u2581", prepend_scheme: str = "always", split: bool = True) -> None:
        if prepend_scheme not in ("always", "first", "never"):
            raise FormatError(f"unknown Metaspace prepend_scheme {prepend_scheme!r}; expected always, first or never")
        self.replacement, self.prepend_scheme, self.split = replacement, prepend_scheme, split

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out = []
        for i, t in enumerate(tokens):
            drop = i == 0 and self.prepend_scheme != "never"
            out.append(t.replace(self.replacement, "" if drop else " "))
        return out

    def to_hf(self) -> dict:
        return {"type": "Metaspace", "replacement": self.replacement, "prepend_scheme": self.prepend_scheme,
                "split": self.split}


_CLEANUP = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]


def cleanup(text: str) -> str:
    """Hugging Face's clean-up of tokenization spaces: ``"a ."`` -> ``"a."``, ``" n't"`` -> ``"n't"``..."""
    for old, new in _CLEANUP:
        text = text.replace(old, new)
    return text


class WordPiece(Decoder):
    """Joins WordPiece tokens: ``##`` continuations glued on, other tokens after a space;
    optionally cleans up spaces before punctuation."""

    def __init__(self, prefix: str = "##", cleanup: bool = True) -> None:
        self.prefix, self.cleanup = prefix, cleanup

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out = []
        for i, t in enumerate(tokens):
            if i:
                t = t.replace(self.prefix, "", 1) if t.startswith(self.prefix) else " " + t
            out.append(cleanup(t) if self.cleanup else t)
        return out

    def to_hf(self) -> dict:
        return {"type": "WordPiece", "prefix": self.prefix, "cleanup": self.cleanup}


_BYTE_TOKEN = re.compile(r"<0x(\+?[0-9a-fA-F]+)>")


def byte_of_token(token: str) -> int | None:
    """The byte a ``<0xAB>`` token stands for in Hugging Face's ByteFallback, else None."""
    m = _BYTE_TOKEN.fullmatch(token) if len(token.encode("utf-8")) == 6 else None
    return int(m.group(1), 16) if m else None


class ByteFallback(Decoder):
    """Turns runs of ``<0xAB>`` byte tokens into text; bytes that are not valid UTF-8 give
    one U+FFFD each."""

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out: list[str] = []
        pending = bytearray()

        def flush() -> None:
            if pending:
                try:
                    out.append(pending.decode("utf-8"))
                except UnicodeDecodeError:
                    # Hugging Face: one U+FFFD per byte of the run (decode_bytes: the bytes).
                    out.extend("\ufffd" * len(pending) if _BYTE_ERRORS.get() == "replace" else _bytes_as_text(pending))
                pending.clear()

        for t in tokens:
            byte = byte_of_token(t)
            if byte is not None:
                pending.append(byte)
            else:
                flush()
                out.append(t)
        flush()
        return out

    def to_hf(self) -> dict:
        return {"type": "ByteFallback"}


class Fuse(Decoder):
    """Joins all tokens into one."""

    def decode_chain(self, tokens: list[str]) -> list[str]:
        return ["".join(tokens)]

    def to_hf(self) -> dict:
        return {"type": "Fuse"}


class Strip(Decoder):
    """Removes up to ``start`` leading and ``stop`` trailing ``content`` characters of each token
    (``Strip.ALL``: a whole run)."""

    ALL = 2**31 - 1

    def __init__(self, content: str, start: int, stop: int) -> None:
        if len(content) != 1:
            raise FormatError(f"the Strip decoder content must be one character, not {content!r}")
        self.content, self.start, self.stop = content, start, stop

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out = []
        for t in tokens:
            begin = 0
            while begin < min(self.start, len(t)) and t[begin] == self.content:
                begin += 1
            end = len(t)
            while len(t) - end < self.stop and end > begin and t[end - 1] == self.content:
                end -= 1
            out.append(t[begin:end])
        return out

    def to_hf(self) -> dict:
        return {"type": "Strip", "content": self.content, "start": self.start, "stop": self.stop}


class Replace(Decoder):
    """Replaces every match of a literal string or an Oniguruma regex in each token."""

    def __init__(self, pattern: str, content: str, *, is_regex: bool = False) -> None:
        self.pattern, self.content, self.is_regex = pattern, content, is_regex
        self._regex = compile_onig(pattern) if is_regex else regex.compile(regex.escape(pattern)) if pattern else None

    def _replace(self, text: str) -> str:
        if self._regex is None or not text:
            return text
        if not self.is_regex:
            return text.replace(self.pattern, self.content)
        parts, pos = [], 0
        for s, e in find_spans(self._regex, text):
            parts += [text[pos:s], self.content]
            pos = e
        parts.append(text[pos:])
        return "".join(parts)

    def decode_chain(self, tokens: list[str]) -> list[str]:
        return [self._replace(t) for t in tokens]

    def to_hf(self) -> dict:
        return {"type": "Replace", "pattern": {"Regex" if self.is_regex else "String": self.pattern}, "content": self.content}


class BPEDecoder(Decoder):
    """Classic BPE with an end-of-word ``suffix``: the suffix becomes a space (none at the end)."""

    def __init__(self, suffix: str = "</w>") -> None:
        self.suffix = suffix

    def decode_chain(self, tokens: list[str]) -> list[str]:
        n = len(tokens)
        return [t.replace(self.suffix, "" if i == n - 1 else " ") for i, t in enumerate(tokens)]

    def to_hf(self) -> dict:
        return {"type": "BPEDecoder", "suffix": self.suffix}


class Sequence(Decoder):
    """Applies decoders one after the other, each to the tokens the previous one gave."""

    def __init__(self, decoders: Seq[Decoder]) -> None:
        self.decoders = list(decoders)

    def decode_chain(self, tokens: list[str]) -> list[str]:
        for d in self.decoders:
            tokens = d.decode_chain(tokens)
        return tokens

    def to_hf(self) -> dict:
        return {"type": "Sequence", "decoders": [d.to_hf() for d in self.decoders]}


class SpaceJoin(Decoder):
    """What Hugging Face does without a decoder: the tokens joined by single spaces."""

    def decode(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    def decode_chain(self, tokens: list[str]) -> list[str]:
        return [" ".join(tokens)]

    def to_hf(self) -> None:
        return None
