"""GGUF vocabularies (llama.cpp's model files), encoded as llama.cpp encodes them.

A GGUF file starts with key/value metadata; the tokenizer is in the ``tokenizer.ggml.*`` keys:
``model`` (``llama``: SentencePiece-style BPE by score; ``gpt2``: byte-level BPE with merges;
``bert``: WordPiece; ``t5``: Unigram; ``gemma4``: BPE on raw UTF-8), ``tokens``, ``scores``,
``token_type``, ``merges``, ``pre`` (the pre-tokenizer, :mod:`.llama_cpp_pre`), the special ids
and flags. The file is parsed by the ``gguf`` package, llama.cpp's reader (with the small speed-up
described in :func:`_fast_reader_class`). ``.gguf.xz`` files are decompressed first.

What llama.cpp does, reproduced here (its ``llama_tokenize`` with ``parse_special=false``):
user-defined tokens are cut out of the text first (longest token first, everywhere); each
remaining fragment is tokenized on its own by the vocabulary's algorithm. Control tokens are
special tokens: only read from the text when the caller allows them.
"""

from __future__ import annotations

import lzma
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import _core, models
from .._char_table import CharTable
from .._pickling import RustBacked
from ..byte_level import BYTE_TO_CHAR, CHAR_TO_BYTE, bytes_to_token, token_to_bytes
from ..charsmap import KEPT, PrecompiledCharsmap
from ..errors import EncodeError, FormatError
from ..models import SPACE  # ▁, SentencePiece's visible space
from ..pipeline import AddedToken, Pipeline, sentencepiece_spans, utf8_origins
from ..pre_tokenizers import to_byte_level
from ..tokenizer import Tokenizer
from . import llama_cpp_pre


# tokenizer.ggml.token_type values (llama.cpp's LLAMA_TOKEN_TYPE_*)
UNDEFINED, NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 0, 1, 2, 3, 4, 5, 6

# ---------------------------------------------------------------------------- reading GGUF


def _fast_reader_class():
    """``gguf.GGUFReader`` with one change: it slices a plain ndarray instead of the ``np.memmap``.

    The stock reader takes two slices of the memmap per vocabulary entry, and every memmap slice
    runs numpy's ``memmap.__array_finalize__``: 12 s for Llama 3's 128k tokens and merges. The
    same slices of a plain view of the same buffer give the same fields about 5x faster. A slice
    that comes back shorter than asked for means the file ends early (the stock reader would read
    on with a short string): that is reported as truncation.
    """
    import gguf
    import numpy as np

    class FastReader(gguf.GGUFReader):
        def _get(self, offset, dtype, count=1, override_order=None):
            plain = self.__dict__.get("_plain")
            if plain is None:
                plain = self.__dict__["_plain"] = self.data.view(np.ndarray)
            count = int(count)
            dtype = np.dtype(dtype)
            raw = plain[offset:offset + dtype.itemsize * count]
            if len(raw) < dtype.itemsize * count:  # (a view of a partial item would fail in numpy's words)
                raise _Truncated(offset)
            arr = raw.view(dtype)
            return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))

    return FastReader


class _Truncated(Exception):
    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def read_gguf_metadata(data: bytes, source: str = "<bytes>") -> dict[str, object]:
    """The key/value metadata of a GGUF file held in memory (see :func:`read_gguf_file`)."""
    import tempfile

    # gguf's reader maps a file: hand it one, deleted once the metadata is copied out.
    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(data)
        f.flush()
        return _read_metadata(f.name, source)


def read_gguf_file(path: str | os.PathLike) -> dict[str, object]:
    """The metadata of a ``.gguf`` file, or of a ``.gguf.xz`` (decompressed to a temporary file).

    Parsed by the ``gguf`` package (llama.cpp's own reader); every malformed file is a
    :class:`FormatError` naming it.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except OSError as e:
        raise FormatError(f"cannot read {path}: {e}") from None
    if path.suffix == ".xz" or head == b"\xfd7zXZ\x00":
        try:
            data = lzma.decompress(path.read_bytes())
        except lzma.LZMAError as e:
            raise FormatError(f"{path}: the xz data is corrupted or truncated ({e})") from None
        return read_gguf_metadata(data, str(path))
    return _read_metadata(str(path), str(path))


def _read_metadata(filename: str, source: str) -> dict[str, object]:
    if os.path.getsize(filename) < 4:
        raise FormatError(f"{source} is not a GGUF file (it is {os.path.getsize(filename)} bytes long)")
    with open(filename, "rb") as f:
        if f.read(4) != b"GGUF":
            raise FormatError(f"{source} is not a GGUF file (it does not start with 'GGUF')")
    try:
        reader = _fast_reader_class()(filename)
        metadata = {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}
    except _Truncated as e:
        raise FormatError(f"{source} is truncated (metadata runs past the end of the file at byte {e.offset})") from None
    except UnicodeDecodeError as e:
        raise FormatError(f"{source}: a string in the metadata is not valid UTF-8 ({e.reason})") from None
    except (ValueError, KeyError, IndexError, OverflowError, TypeError, MemoryError) as e:
        # gguf's reader says "Sorry, file appears to be version 9", "Duplicate key", "Unknown field type", ...
        raise FormatError(f"{source}: not a readable GGUF file: {e}") from None
    return metadata


# ---------------------------------------------------------------------------- vocabulary


class LlamaVocab:
    """Tokens, scores and types of a GGUF vocabulary, with llama.cpp's look-up rules (a
    repeated token string maps to its last id; an empty token is named ``[EMPTY_<id>]``)."""

    def __init__(self, tokens: Sequence[str], scores: Sequence[float], types: Sequence[int]) -> None:
        self.tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        self.scores = list(scores)
        self.types = list(types)
        self.ids = {t: i for i, t in enumerate(self.tokens)}  # last id wins, as in llama.cpp

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.ids)

    def token_to_id(self, token: str) -> int | None:
        return self.ids.get(token)

    def id_to_token(self, id: int) -> str | None:
        return self.tokens[id] if 0 <= id < len(self.tokens) else None


def _is_space(c: str) -> bool:
    return c in " \t\n\v\f\r"  # C's isspace, which llama.cpp uses for lstrip/rstrip


class _LlamaModel(RustBacked):
    """Shared by the four algorithms: cuts user-defined tokens out of each text first, as
    llama.cpp's ``tokenizer_st_partition`` does: longest token first, every occurrence."""

    def __init__(self, vocab: LlamaVocab, cut: Sequence[int], lstrip: frozenset[int], rstrip: frozenset[int]) -> None:
        self.vocab = vocab
        self._cut = sorted(cut, key=lambda i: (-len(vocab.tokens[i].encode("utf-8")), i))
        self._lstrip, self._rstrip = lstrip, rstrip
        self._make_cut_finder()

    _RUST_FIELDS = ("_cut_finder",)

    def _make_rust(self) -> None:
        self._make_cut_finder()

    def _make_cut_finder(self) -> None:
        # Which cut tokens occur in a text at all, in one pass (a part of the text, cut or
        # stripped, holds only what the text holds): DeepSeek's 2,398 searched one by one took
        # half of its encoding time.
        strings = [self.vocab.tokens[i] for i in self._cut]
        self._cut_finder = _core.LiteralMatcher(strings, overlapping=True) if strings and all(strings) else None

    # the model interface of toksmith's pipeline
    @property
    def vocab_size(self) -> int:
        return self.vocab.vocab_size

    def get_vocab(self) -> dict[str, int]:
        return self.vocab.get_vocab()

    def token_to_id(self, token: str) -> int | None:
        return self.vocab.token_to_id(token)

    def id_to_token(self, id: int) -> str | None:
        return self.vocab.id_to_token(id)

    def encode_words(self, words: Iterable[str]) -> list[int]:
        out: list[int] = []
        for word in words:
            for part in self._partition(word):
                if isinstance(part, int):
                    out.append(part)
                else:
                    self.encode_fragment(part, out)
        return out

    def encode_fragment(self, text: str, out: list[int]) -> None:
        raise NotImplementedError

    def _partition(self, text: str) -> list[str | int]:
        return [part for part, _, _ in self._partition_spans(text)]

    def _partition_spans(self, text: str) -> list[tuple[str | int, int, int]]:
        """The text cut at the user-defined tokens: (fragment or token id, start, end) in
        characters of ``text``; spaces an ``lstrip``/``rstrip`` token takes belong to no part."""
        parts: list[tuple[str | int, int, int]] = [(text, 0, len(text))] if text else []
        cut = self._cut
        if self._cut_finder is not None and text:
            cut = [cut[k] for k in self._cut_finder.occurring(text)]  # (same order: longest first)
        for token_id in cut:
            token = self.vocab.tokens[token_id]
            new: list[tuple[str | int, int, int]] = []
            for part in parts:
                rest, offset = part[0], part[1]
                if isinstance(rest, int) or token not in rest:
                    new.append(part)
                    continue
                while True:
                    at = rest.find(token)
                    if at < 0:
                        if rest:
                            new.append((rest, offset, offset + len(rest)))
                        break
                    left = rest[:at]
                    if token_id in self._lstrip:
                        left = left.rstrip(" \t\n\v\f\r")  # (C's isspace, as `_is_space`)
                    if left:
                        new.append((left, offset, offset + len(left)))
                    new.append((token_id, offset + at, offset + at + len(token)))
                    rest, offset = rest[at + len(token):], offset + at + len(token)
                    if token_id in self._rstrip:
                        kept = rest.lstrip(" \t\n\v\f\r")
                        rest, offset = kept, offset + len(rest) - len(kept)
            parts = new
        return parts

    # Whether `spans` can tell where each token of a fragment comes from (see `fragment_spans`).
    offsets_supported = False

    def spans(self, text: str) -> list[tuple[int, int, int]]:
        """(id, start, end) of each token of ``text``, in its characters (see `fragment_spans`); a
        user-defined token spans its match."""
        out: list[tuple[int, int, int]] = []
        for part, start, end in self._partition_spans(text):
            if isinstance(part, int):
                out.append((part, start, end))
            elif start == 0:  # (most texts: one fragment)
                out.extend(self.fragment_spans(part))
            else:
                out.extend((i, start + a, start + b) for i, a, b in self.fragment_spans(part))
        return out

    def fragment_spans(self, text: str) -> list[tuple[int, int, int]]:
        raise EncodeError(f"encode_with_offsets is not available for llama.cpp's {type(self).__name__} vocabularies")


def _score_merges(vocab: LlamaVocab, targets: Iterable[int]) -> list[tuple[str, str]]:
    """Every split (left, right) of every target token into two tokens, ranked by the target's
    score (highest first; among equal scores the longer token first, see SentencePieceBPE)."""
    ranked = []
    for i in targets:
        token = vocab.tokens[i]
        if vocab.ids.get(token) != i:
            continue
        for k in range(1, len(token)):
            left, right = token[:k], token[k:]
            if left in vocab.ids and right in vocab.ids:
                ranked.append((-vocab.scores[i], -len(token), i, left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _unique_vocab(vocab: LlamaVocab) -> dict[str, int]:
    return dict(vocab.ids)


class LlamaSPM(_LlamaModel):
    """llama.cpp's ``llama`` vocabularies: SentencePiece BPE (the pair forming the best-scoring
    token merges first), no normalization, a space in front of every fragment, characters
    without a token as their bytes ``<0xAB>``."""

    def __init__(self, vocab: LlamaVocab, cut, lstrip, rstrip, *, add_space_prefix: bool) -> None:
        super().__init__(vocab, cut, lstrip, rstrip)
        self.add_space_prefix = add_space_prefix
        self.merges = _score_merges(vocab, range(vocab.vocab_size))
        self._byte_ids = [vocab.ids.get(f"<0x{b:02X}>", vocab.ids.get(chr(b)) if b < 0x80 else None) for b in range(256)]
        full_bytes = all(vocab.ids.get(f"<0x{b:02X}>") is not None for b in range(256))
        # Word by word where no merge crosses (see `word_split_pattern`): the same ids, cached.
        self._core = models.BPE(_unique_vocab(vocab), self.merges, byte_fallback=full_bytes,
                                split_pattern=models.word_split_pattern(a + b for a, b in self.merges))
        self._full_bytes = full_bytes

    def encode_fragment(self, text: str, out: list[int]) -> None:
        text = self.normalize(text)
        if not self._full_bytes:
            for c in text:
                if c not in self.vocab.ids:
                    raise EncodeError(f"{c!r} has no token and the vocabulary has no byte tokens <0xAB> for it")
        out.extend(self._core.encode_words([text]))

    def normalize(self, text: str) -> str:
        """A space in front (if the vocabulary adds one), then every space as ``▁``."""
        return ((" " + text) if self.add_space_prefix else text).replace(" ", SPACE)

    def normalize_with_offsets(self, text: str) -> tuple[str, list[int]]:
        """`normalize`'s text, and for each of its UTF-8 bytes, then for its end, the index of
        the character of ``text`` it comes from, as SentencePiece's ``norm_to_orig`` for the same
        normalization (identity, dummy prefix, spaces kept): the added space maps to the first
        character, every other character to itself."""
        normalized = self.normalize(text)
        return normalized, utf8_origins(normalized, [0] * self.add_space_prefix + list(range(len(text))), len(text))

    offsets_supported = True

    def fragment_spans(self, text: str) -> list[tuple[int, int, int]]:
        """Spans as SentencePiece's ``begin``/``end`` would give them for the same model (see
        `sentencepiece_spans`): the added space spans nothing of its own, each other ``▁`` its
        space, byte tokens their character (the last byte's token all of it, the others none)."""
        return sentencepiece_spans(text, self, lambda norm: self._core.encode_words([norm]), self.vocab.tokens, self.vocab.types)


# After a newline between two characters that are not whitespace (Python's \s holds all of
# llama.cpp's whitespace): no word of the GPT-2, Llama 3 or Qwen 2 regex spans that point (no
# alternative takes a newline then more, and the newline's word ends alike whether the text
# goes on or not), so the text on either side gives the same words alone.
_SAFE_LINE_CUT = re.compile(r"(?<=[^\s]\n)(?=[^\s])")

# llama.cpp pre-tokenizers of one regex that a Rust scanner splits the same way (on ASCII text).
_SCANNED = {llama_cpp_pre.REGEXES["gpt2"]: "gpt2", llama_cpp_pre.REGEXES["llama3"]: "llama3",
            llama_cpp_pre.REGEXES["qwen2"]: "qwen2"}


# Bytes that UTF-8 never uses: a vocabulary may lack their tokens and still encode any text.
_NEVER_IN_UTF8 = frozenset(BYTE_TO_CHAR[b] for b in (0xC0, 0xC1, *range(0xF5, 0x100)))


class LlamaBPE(_LlamaModel):
    """llama.cpp's ``gpt2`` (byte-level BPE with ranked merges after a regex pre-tokenizer)
    and ``gemma4`` (the same on raw UTF-8, spaces as ``▁``, byte tokens ``<0xAB>``) vocabularies."""

    def __init__(self, vocab: LlamaVocab, cut, lstrip, rstrip, *, merges: Sequence[str],
                 pre: llama_cpp_pre.PreOptions, source: str) -> None:
        super().__init__(vocab, cut, lstrip, rstrip)
        self.pre = pre
        self.regexes = llama_cpp_pre.REGEXES[pre.type]
        self.byte_encode = pre.type not in llama_cpp_pre.RAW_UTF8
        pairs = []
        for rank, m in enumerate(merges):
            at = m.find(" ", 1)
            left, right = (m[:at], m[at + 1:]) if at >= 0 else ("", "")
            if left not in vocab.ids or right not in vocab.ids or left + right not in vocab.ids:
                raise FormatError(f"{source}: merge #{rank} {m!r} names or forms a string that is not a token")
            pairs.append((left, right))
        self.merges = pairs
        if not self.byte_encode:
            missing = [b for b in range(256) if f"<0x{b:02X}>" not in vocab.ids]
            if missing:
                raise FormatError(f"{source}: a raw UTF-8 BPE vocabulary needs the 256 byte tokens <0xAB>; "
                                  f"<0x{missing[0]:02X}> is missing")
        # Bytes without a token (often 0xC0, 0xC1, 0xF5-0xFF, never in UTF-8) are dropped by
        # llama.cpp; they also stop merges across them, so a word is split around them.
        self._missing = frozenset(c for b in range(256) if (c := bytes_to_token(bytes([b]))) not in vocab.ids) \
            if self.byte_encode else frozenset()
        self._missing_chars = "".join(sorted(self._missing))
        self._core = models.BPE(_unique_vocab(vocab), pairs, byte_fallback=not self.byte_encode,
                                ignore_merges=pre.ignore_merges)
        self._make_byte_model()

    _RUST_FIELDS = ("_cut_finder", "_ascii_fast", "_byte_model")

    def _make_rust(self) -> None:
        super()._make_rust()
        self._make_byte_model()

    def _make_byte_model(self) -> None:
        """`_byte_model`: the vocabulary as a byte-level Rust model (see `_byte_level_model`), kept
        where every byte UTF-8 uses has a token; then the words of any text are encoded from
        their bytes, without byte characters. `_ascii_fast`: the same model for a pre-tokenizer of
        one regex that toksmith's Rust scanners reproduce (GPT-2's, Llama 3's, Qwen 2's), which
        splits and merges ASCII text in one call: only ASCII, where llama.cpp's Unicode tables
        cannot differ from the scanners'."""
        model = self._byte_level_model(self.merges)
        self._ascii_fast = model if self.regexes in _SCANNED else None
        # Falcon and StarCoder lack a lead byte of 4-byte characters (0xF2, 0xF1: planes 4-11,
        # unassigned): text below the first such character may still take the byte model.
        lead = sorted(CHAR_TO_BYTE[c] for c in self._missing - _NEVER_IN_UTF8)
        usable = model is not None and all(0xF1 <= b <= 0xF4 for b in lead)
        self._byte_model = model if usable else None
        self._byte_model_below = chr(0x40000 * (lead[0] - 0xF0)) if usable and lead else None

    def _byte_level_model(self, pairs):
        """A byte-level Rust model of this vocabulary (behind the scanner of its regex if it has
        one); None where the vocabulary is not byte-level BPE (then the general path)."""
        from ..fast_path import byte_level_model

        if not self.byte_encode or self.pre.escape_whitespaces:
            return None
        name = _SCANNED.get(self.regexes, "gpt2")
        # Tokens outside the byte alphabet (MPT's runs of raw spaces, user-defined tokens cut out
        # before) and the merges that use them cannot take part in byte-level merging, and a byte
        # without a token gets an id past the vocabulary's, never given out: only ASCII text
        # reaches the model then, or text whose bytes all have tokens (`_byte_model`).
        vocab = {t: i for t, i in _unique_vocab(self.vocab).items() if all(c in CHAR_TO_BYTE for c in t)}
        pairs = [(a, b) for a, b in pairs if a in vocab and b in vocab and a + b in vocab]
        unused = max(self.vocab.ids.values(), default=-1) + 1
        for b in range(128, 256):
            if BYTE_TO_CHAR[b] not in vocab:
                vocab[BYTE_TO_CHAR[b]] = unused
                unused += 1
        return byte_level_model(vocab, pairs, name, ignore_merges=self.pre.ignore_merges)

    def encode_fragment(self, text: str, out: list[int]) -> None:
        if self._ascii_fast is None:
            self._encode_general(text, out)
        elif text.isascii():
            out.extend(self._ascii_fast.encode_ordinary(text))
        else:
            # Lines apart, where no word can span the cut, so the ASCII ones take the fast path;
            # consecutive other lines go to the general path together (one call, not one each).
            others: list[str] = []
            for piece in _SAFE_LINE_CUT.split(text):
                if piece.isascii():
                    if others:
                        self._encode_general("".join(others), out)
                        others = []
                    out.extend(self._ascii_fast.encode_ordinary(piece))
                else:
                    others.append(piece)
            if others:
                self._encode_general("".join(others), out)

    def _encode_general(self, text: str, out: list[int]) -> None:
        if self.byte_encode and not self.pre.escape_whitespaces and self.pre.type != "gemma4":
            splitter = llama_cpp_pre.rust_splitter(self.regexes)
            if splitter is not None:
                # Splitting, byte characters and merging in one Rust call.
                spaced, collapsed = llama_cpp_pre.copies(text, self.regexes)
                try:
                    if self._byte_model is not None and (self._byte_model_below is None or max(text) < self._byte_model_below):
                        out.extend(self._byte_model.encode_split(splitter, text, spaced, collapsed))
                    else:
                        out.extend(self._core._core.encode_llama(splitter, text, spaced, collapsed, self._missing_chars))
                    return
                except (UnicodeEncodeError, EncodeError):
                    pass  # lone surrogates, or a regex's backtracking stack overflowed: the Python path
        if self.pre.escape_whitespaces:
            text = text.replace(" ", SPACE)
        words = llama_cpp_pre.split(text, self.regexes)
        if self.byte_encode:
            words = [to_byte_level(w) for w in words]
        # Words go to the model together (it encodes each apart): one call per run of them,
        # not one per word.
        plain: list[str] = []
        for word in words:
            # Gemma 4: a run of newlines that is a token is that token.
            if self.pre.type == "gemma4" and not word.strip("\n") and word in self.vocab.ids:
                if plain:
                    out.extend(self._core.encode_words(plain))
                    plain = []
                out.append(self.vocab.ids[word])
            elif self._missing and not self._missing.isdisjoint(word):
                pieces = "".join("\0" if c in self._missing else c for c in word).split("\0")
                plain += [p for p in pieces if p]
            else:
                plain.append(word)
        if plain:
            out.extend(self._core.encode_words(plain))


class LlamaWPM(_LlamaModel):
    """llama.cpp's ``bert`` vocabularies: BERT-style words, then the longest token at each
    position; a word's first token carries the ``▁`` prefix, and a word that cannot be covered
    is ``[UNK]``."""

    def __init__(self, vocab: LlamaVocab, cut, lstrip, rstrip, *, unk_id: int, lowercase: bool,
                 strip_accents: bool) -> None:
        super().__init__(vocab, cut, lstrip, rstrip)
        self.unk_id = unk_id
        self.lowercase, self.strip_accents = lowercase, strip_accents
        self._max_len = max(map(len, vocab.tokens), default=0)
        self._make_word_pieces()

    _RUST_FIELDS = ("_cut_finder", "_word_pieces", "_word_chars")

    def _make_rust(self) -> None:
        super()._make_rust()
        self._make_word_pieces()

    def _make_word_pieces(self) -> None:
        """The Rust WordPiece model doing this longest match (no continuation prefix, no length
        limit: the ``▁`` goes in front of each word), and the table that makes the words (see
        `_word_char`); the model None where the unknown token's string names another id."""
        ids = self.vocab.ids
        unk = self.vocab.tokens[self.unk_id] if 0 <= self.unk_id < len(self.vocab.tokens) else None
        self._word_pieces = None
        if unk is not None and ids.get(unk) == self.unk_id:
            self._word_pieces = _core.WordPieceModel(list(ids.items()), unk, "", 1 << 62)
        self._word_chars = CharTable(self._word_char)

    def encode_fragment(self, text: str, out: list[int]) -> None:
        if self._word_pieces is not None:
            # Words: the table maps each character to what `_words` does with it, so that
            # splitting the translated text at spaces gives the same words, in one C pass.
            words = text.translate(self._word_chars).split()
            out.extend(self._word_pieces.encode_words([SPACE + w for w in words]))
            return
        ids = self.vocab.ids
        for word in self._words(text):
            word = SPACE + word
            n, i, start = len(word), 0, len(out)
            while i < n:
                for j in range(min(n, i + self._max_len), i, -1):
                    token_id = ids.get(word[i:j])
                    if token_id is not None:
                        out.append(token_id)
                        i = j
                        break
                else:  # no token here: the whole word is unknown
                    del out[start:]
                    break
            if len(out) == start:
                out.append(self.unk_id)

    offsets_supported = True

    def fragment_spans(self, text: str) -> list[tuple[int, int, int]]:
        """Each token spans the characters of ``text`` its word's characters come from, as
        `tokenizers` gives BERT's offsets: a lowercased or accent-stripped character is its
        original, a dropped one (a mark, a control character) belongs to no token, the ``▁`` in
        front of a word is no character, and an unknown word spans all of it. Every character of
        a word comes from one of ``text`` (see `_word_char`)."""
        words: list[list[int]] = []  # per word, where each of its characters comes from
        current: list[int] = []
        for k, c in enumerate(text):
            made = self._word_char(ord(c))
            if made == "":
                continue
            if made == " " or len(made) == 3:  # whitespace, or a word of its own (" c ")
                if current:
                    words.append(current)
                    current = []
                if len(made) == 3:
                    words.append([k])
                continue
            current.append(k)
        if current:
            words.append(current)
        ids: list[int] = []
        self.encode_fragment(text, ids)
        tokens, out = iter(ids), []
        for origin in words:
            # Positions in SPACE + word: 0 is the "▁", k + 1 the word's character k.
            at, end = 0, len(origin) + 1
            while at < end:
                i = next(tokens, None)
                if i is None:
                    raise EncodeError(f"encode_with_offsets: the tokens of {text[:40]!r} do not cover its words; "
                                      "please report this input")
                if i == self.unk_id:
                    out.append((i, origin[0], origin[-1] + 1))
                    break
                n = len(self.vocab.tokens[i])
                first, last = max(at, 1) - 1, at + n - 2  # the word's characters it holds
                out.append((i, origin[first], origin[last] + 1) if last >= first else (i, origin[first], origin[first]))
                at += n
        if next(tokens, None) is not None:
            raise EncodeError(f"encode_with_offsets: the tokens of {text[:40]!r} do not follow its words; "
                              "please report this input")
        return out

    def _word_char(self, cp: int) -> str:
        """What `_words` makes of one character: " " for whitespace (a word ends), "" for what it
        drops, the character set apart by spaces for punctuation and CJK (a word of its own),
        else the character, lowercased and without accents as asked. (No other character
        `str.split` takes for whitespace comes out: those outside llama.cpp's whitespace,
        U+001C-U+001F, are controls, dropped.)"""
        c = chr(cp)
        if self.strip_accents:
            c = unicodedata.normalize("NFD", c)[0]
        f = llama_cpp_pre.flags(c)
        if f & llama_cpp_pre.WHITESPACE:
            return " "
        if c in ("\0", "\ufffd") or f & llama_cpp_pre.CONTROL:
            return ""
        if self.strip_accents and f & llama_cpp_pre.MARK:
            return ""
        if self.lowercase:
            c = _simple_lower(c)
        if f & llama_cpp_pre.PUNCTUATION or (ord(c) < 0x7F and f & llama_cpp_pre.SYMBOL) or _is_chinese(ord(c)):
            return f" {c} "
        return c

    def _words(self, text: str) -> list[str]:
        """The words of ``text`` as llama.cpp's WPM tokenizer makes them, character by
        character (the reference of `_word_char`)."""
        words, current = [], []
        for c in text:
            if self.strip_accents:
                c = unicodedata.normalize("NFD", c)[0]  # llama.cpp keeps the first character of NFD
            f = llama_cpp_pre.flags(c)
            if f & llama_cpp_pre.WHITESPACE:
                if current:
                    words.append("".join(current))
                    current = []
                continue
            if c in ("\0", "\ufffd") or f & llama_cpp_pre.CONTROL:
                continue
            if self.strip_accents and f & llama_cpp_pre.MARK:
                continue
            if self.lowercase:
                c = _simple_lower(c)
            cp = ord(c)
            if f & llama_cpp_pre.PUNCTUATION or (cp < 0x7F and f & llama_cpp_pre.SYMBOL) or _is_chinese(cp):
                if current:
                    words.append("".join(current))
                    current = []
                words.append(c)
            else:
                current.append(c)
        if current:
            words.append("".join(current))
        return words


def _simple_lower(c: str) -> str:
    """Unicode's one-character lowercase mapping (İ -> i, where str.lower gives two characters)."""
    low = c.lower()
    return low if len(low) == 1 else ("i" if c == "\u0130" else c)


def _is_chinese(cp: int) -> bool:
    # the ranges llama.cpp (and BERT) treat as CJK ideographs
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B920 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class LlamaUGM(_LlamaModel):
    """llama.cpp's ``t5`` vocabularies: the precompiled character map, spaces as ``▁``
    (one in front with ``add_space_prefix``, runs squeezed with ``remove_extra_whitespaces``),
    then Unigram Viterbi (f64 path scores; user-defined tokens score 0; runs of unknown
    characters are one unknown token)."""

    def __init__(self, vocab: LlamaVocab, cut, lstrip, rstrip, *, unk_id: int, charsmap: bytes,
                 add_space_prefix: bool, remove_extra_whitespaces: bool) -> None:
        super().__init__(vocab, cut, lstrip, rstrip)
        self.charsmap = PrecompiledCharsmap(charsmap)
        self.add_space_prefix, self.remove_extra_whitespaces = add_space_prefix, remove_extra_whitespaces
        self.user_defined = frozenset(vocab.tokens[i] for i, t in enumerate(vocab.types) if t == USER_DEFINED)
        lattice, exclude = [], []
        for i, (token, score, kind) in enumerate(zip(vocab.tokens, vocab.scores, vocab.types)):
            if kind in (NORMAL, UNUSED):
                lattice.append((token, score))
            elif kind == USER_DEFINED:
                lattice.append((token, 0.0))
            else:
                lattice.append((token, score))
                exclude.append(i)
        self._core = models.Unigram(lattice, unk_id=unk_id, fuse_unk=True, exclude=exclude)

    def encode_fragment(self, text: str, out: list[int]) -> None:
        chars = self.normalize(text)
        if chars:
            out.extend(self._core.encode_words([chars]))

    offsets_supported = True

    def fragment_spans(self, text: str) -> list[tuple[int, int, int]]:
        """Spans as SentencePiece's ``begin``/``end`` give them (see `sentencepiece_spans`), over
        llama.cpp's own normalization (`normalize_with_offsets`)."""
        return sentencepiece_spans(text, self, lambda norm: self._core.encode_words([norm]), self.vocab.tokens, self.vocab.types)

    def normalize(self, text: str) -> str:
        """The text as llama.cpp's UGM tokenizer normalizes it: the character map, then spaces."""
        return self._normalize(text, None)[0]

    def normalize_with_offsets(self, text: str) -> tuple[str, list[int]]:
        """`normalize`'s text, and for each of its UTF-8 bytes, then for its end, the index of
        the character of ``text`` it comes from, as SentencePiece's ``norm_to_orig``: a rule's
        replacement maps to where its source starts, a space to itself; the "▁" put in front
        of a word to the first space before it where a run of spaces became that one "▁"
        (``remove_extra_whitespaces``), else to the word's first character; the end to the end
        of the text, or to the first of the spaces dropped at its end."""
        origin: list[int] = []
        normalized, end = self._normalize(text, origin)
        return normalized, utf8_origins(normalized, origin, end)

    def _normalize(self, text: str, origin: list[int] | None) -> tuple[str, int]:
        """`normalize`'s text, and where its end maps to; the origin of each of its characters
        appended to ``origin`` if given (see `normalize_with_offsets`)."""
        out: list[str] = []
        started = prepended = False
        run_start = None  # where the current run of spaces started (after a word)
        for piece, kind, at in self.charsmap.pieces_from(text, self.user_defined):
            for k, c in enumerate(piece):
                source = at + k if kind == KEPT else at
                if c == " ":
                    started = False
                    if not self.remove_extra_whitespaces:
                        out.append(SPACE)
                        if origin is not None:
                            origin.append(source)
                    elif run_start is None and out:
                        run_start = source
                    continue
                if not started:
                    started = True
                    if (self.add_space_prefix and not prepended) or self.remove_extra_whitespaces:
                        out.append(SPACE)
                        if origin is not None:
                            origin.append(run_start if run_start is not None and self.remove_extra_whitespaces else source)
                        prepended = True
                run_start = None
                out.append(c)
                if origin is not None:
                    origin.append(source)
        return "".join(out), run_start if run_start is not None else len(text)


# ---------------------------------------------------------------------------- decoding


class LlamaDecoder:
    """llama.cpp's detokenizer: each token's text (``▁`` as a space, byte tokens as their byte,
    byte-level BPE tokens as their bytes), the first token's leading space dropped when the
    vocabulary adds one, then llama.cpp's clean-up of spaces before punctuation if it asks."""

    def __init__(self, vocab: LlamaVocab, *, kind: str, remove_leading_space: bool, clean_spaces: bool,
                 escape_whitespaces: bool) -> None:
        self.vocab = vocab
        self.kind = kind
        self.remove_leading_space = remove_leading_space
        self.clean_spaces = clean_spaces
        self.escape_whitespaces = escape_whitespaces
        # The clean-up drops a space up to 3 characters before where a later token ends it
        # (" 're"): a stream decoder holds that many back (see tokenizer.StreamDecoder).
        self.stream_holdback = 3 if clean_spaces else 0

    def piece(self, token: str) -> bytes:
        i = self.vocab.ids.get(token)
        kind = self.vocab.types[i] if i is not None else NORMAL
        if kind in (CONTROL, UNKNOWN, USER_DEFINED):
            return token.encode("utf-8")
        if kind == BYTE:
            return bytes([int(token[3:5], 16)])
        if kind != NORMAL:
            return b""
        if self.kind == "bpe" and not self.escape_whitespaces:
            try:
                return token_to_bytes(token)
            except KeyError:
                return token.encode("utf-8")
        return token.replace(SPACE, " ").encode("utf-8")

    def neutral(self, previous: str, token: str) -> bool:
        """Whether ``token`` after ``previous`` changes nothing, whatever follows: a token
        whose piece is empty (unused), not first (it would keep the next one's leading space)."""
        return self.piece(token) == b""

    def decode_bytes(self, tokens: list[str]) -> bytes:
        parts = [self.piece(t) for t in tokens]
        if parts and self.remove_leading_space and parts[0].startswith(b" "):
            parts[0] = parts[0][1:]
        text = b"".join(parts)
        return _clean_spaces(text) if self.clean_spaces else text

    def decode(self, tokens: list[str]) -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors="replace")


def _clean_spaces(text: bytes) -> bytes:
    """llama.cpp's three passes: no space before ? ! . , ; " ' " loses its spaces; no space
    before 's 'm 're 've."""
    out = bytearray(text[:1])
    for i in range(1, len(text)):
        if text[i - 1:i] == b" " and text[i:i + 1] in (b"?", b"!", b".", b","):
            out.pop()
        out.append(text[i])
    text, out = bytes(out), bytearray(out[:1])
    i = 1
    while i < len(text):
        if text[i:i + 1] == b"'" and i + 1 < len(text) and text[i - 1:i] == b" " and text[i + 1:i + 2] == b" ":
            out.pop()
            out.append(text[i])
            i += 2  # the space after it goes too
            continue
        out.append(text[i])
        i += 1
    text, out = bytes(out), bytearray(out[:1])
    for i in range(1, len(text)):
        if text[i - 1:i] == b" " and text[i:i + 1] == b"'" and i + 1 < len(text):
            nxt = text[i + 1:i + 3]
            if nxt[:1] in (b"s", b"m") or nxt in (b"re", b"ve"):
                out.pop()
        out.append(text[i])
    return bytes(out)


class LlamaSpecials:
    """Adds BOS/EOS (and BERT's SEP) around the ids, as llama.cpp does with ``add_special``."""

    def __init__(self, bos: int | None, eos: int | None, sep: int | None) -> None:
        self.bos, self.eos, self.sep = bos, eos, sep

    def process(self, ids: list[int], pair: list[int] | None = None) -> list[int]:
        out = ([self.bos] if self.bos is not None else []) + list(ids) + (list(pair) if pair else [])
        if self.eos is not None:
            out.append(self.eos)
        if self.sep is not None:
            out.append(self.sep)
        return out


# ---------------------------------------------------------------------------- loader

_EOG_LIKE = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>", "<|eom_id|>", "<|fim_prefix|>", "<fim-prefix>",
    "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>", "<|fim_suffix|>",
    "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
    "<|middle|>", "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
    "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "</s>", "[EOS]", "<eos>", "<turn|>", "<|tool_response>", "[e~[",
}


def _token_types(meta: dict, vocab_size: int, source: str) -> list[int]:
    types = meta.get("tokenizer.ggml.token_type")
    if types is None:
        return [NORMAL] * vocab_size
    if not isinstance(types, list) or len(types) < vocab_size or not all(isinstance(t, int) for t in types):
        raise FormatError(f"{source}: tokenizer.ggml.token_type must list a type for each of the {vocab_size} tokens")
    return [t if t in (NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE) else UNDEFINED for t in types[:vocab_size]]


def load_gguf(path: str | os.PathLike) -> Tokenizer:
    """Loads the tokenizer of a GGUF file (``.gguf`` or ``.gguf.xz``).

    ``encode(text, add_special_tokens=False)`` gives llama.cpp's ``llama_tokenize(text,
    add_special=false, parse_special=false)``; with ``add_special_tokens=True`` the BOS/EOS the
    file asks for are added. Control tokens are special tokens (see ``allowed_special``).
    """
    return gguf_from_metadata(read_gguf_file(path), source=str(path))


def gguf_from_metadata(meta: dict, *, source: str = "<gguf>") -> Tokenizer:
    """Builds the tokenizer of GGUF metadata, refusing what it cannot reproduce."""

    def get(key: str, kind: type | tuple, default=None):
        value = meta.get(key, default)
        if value is not default and not isinstance(value, kind):
            raise FormatError(f"{source}: {key} has the wrong type ({type(value).__name__})")
        return value

    model = get("tokenizer.ggml.model", str)
    if model is None:
        raise FormatError(f"{source}: no tokenizer.ggml.model key; the file carries no tokenizer")
    tokens = get("tokenizer.ggml.tokens", list)
    if not tokens or not all(isinstance(t, str) for t in tokens):
        raise FormatError(f"{source}: tokenizer.ggml.tokens is missing or not a list of strings")
    n = len(tokens)
    scores = get("tokenizer.ggml.scores", list)
    if scores is not None and (len(scores) < n or not all(isinstance(s, (int, float)) for s in scores)):
        raise FormatError(f"{source}: tokenizer.ggml.scores must be {n} numbers, one per token")
    vocab = LlamaVocab(tokens, [float(s) for s in scores[:n]] if scores else [0.0] * n, _token_types(meta, n, source))
    pre_name = get("tokenizer.ggml.pre", str)

    # llama.cpp's defaults per model type, then the file's keys
    kind = {"llama": "spm", "gpt2": "bpe", "gemma4": "bpe", "bert": "wpm", "t5": "ugm"}.get(model)
    if kind is None:
        raise FormatError(f"{source}: tokenizer.ggml.model {model!r} is not supported (llama, gpt2, gemma4, bert and t5 are)")
    defaults = {"spm": (1, 2, 0, None), "bpe": (11, 11, None, None), "wpm": (101, None, 100, 102), "ugm": (None, 1, 2, None)}
    bos, eos, unk, sep = defaults[kind]
    if model == "gemma4":
        bos = eos = None
        pre_name = "gemma4"
    add_space_prefix, add_bos, add_eos, add_sep, clean_spaces = {
        "spm": (True, True, False, False, False), "bpe": (False, False, False, False, True),
        "wpm": (False, True, False, True, True), "ugm": (False, False, True, False, False)}[kind]
    pre = None
    if kind == "bpe":
        pre = llama_cpp_pre.pre_options(pre_name, source)
        clean_spaces = pre.clean_spaces
        add_sep = pre.add_sep
        if pre.add_bos is not None:
            add_bos = pre.add_bos
        if pre.no_bos_token:
            bos = None
    add_space_prefix = get("tokenizer.ggml.add_space_prefix", bool, add_space_prefix)
    remove_extra_ws = get("tokenizer.ggml.remove_extra_whitespaces", bool, False)

    def special_id(key: str, default: int | None) -> int | None:
        if default is not None and default >= n:
            default = None
        value = get(key, int)
        return value if value is not None and 0 <= value < n else default

    bos = special_id("tokenizer.ggml.bos_token_id", bos)
    eos = special_id("tokenizer.ggml.eos_token_id", eos)
    unk = special_id("tokenizer.ggml.unknown_token_id", unk)
    sep = special_id("tokenizer.ggml.seperator_token_id", sep)
    add_bos = get("tokenizer.ggml.add_bos_token", bool, add_bos)
    add_eos = get("tokenizer.ggml.add_eos_token", bool, add_eos)
    add_sep = get("tokenizer.ggml.add_sep_token", bool, add_sep)
    if pre is not None and pre.type == "gemma4":
        add_bos = True  # llama.cpp forces it for Gemma 4

    types = _adjust_types(vocab, meta, source)
    vocab.types = types
    cut = [i for i, t in enumerate(types) if t == USER_DEFINED]
    name = str(meta.get("general.name", "")).lower()
    lstrip, rstrip = set(), set()
    if any(s in name for s in ("phi-3", "phi3")):
        rstrip = {i for i, t in enumerate(types) if t in (CONTROL, USER_DEFINED, UNKNOWN)}
        rstrip |= {vocab.ids[t] for t in ("</s>",) if t in vocab.ids}
        rstrip -= {vocab.ids[t] for t in ("<unk>", "<s>", "<|endoftext|>") if t in vocab.ids}
    elif "modern-bert" in name and "[MASK]" in vocab.ids:
        lstrip = {vocab.ids["[MASK]"]}
    elif pre_name in ("jina-v2-de", "jina-v2-es", "jina-v2-code") and "<mask>" in vocab.ids:
        lstrip = {vocab.ids["<mask>"]}
    common = (vocab, cut, frozenset(lstrip), frozenset(rstrip))

    if kind == "spm":
        model_obj = LlamaSPM(*common, add_space_prefix=add_space_prefix)
    elif kind == "bpe":
        merges = get("tokenizer.ggml.merges", list)
        if merges is not None and not all(isinstance(m, str) for m in merges):
            raise FormatError(f"{source}: tokenizer.ggml.merges must be a list of strings")
        if merges is None:
            raise FormatError(f"{source}: a {model} vocabulary needs tokenizer.ggml.merges")
        model_obj = LlamaBPE(*common, merges=merges, pre=pre, source=source)
    elif kind == "wpm":
        if unk is None:
            raise FormatError(f"{source}: a bert vocabulary needs an unknown token")
        lowercase = get("tokenizer.ggml.normalizer.lowercase", bool, True)
        strip_accents = get("tokenizer.ggml.normalizer.strip_accents", bool, lowercase)
        model_obj = LlamaWPM(*common, unk_id=unk, lowercase=lowercase, strip_accents=strip_accents)
    else:
        if unk is None:
            raise FormatError(f"{source}: a t5 vocabulary needs an unknown token")
        charsmap = meta.get("tokenizer.ggml.precompiled_charsmap", [])
        try:
            blob = bytes(b & 0xFF for b in charsmap)
        except TypeError:
            raise FormatError(f"{source}: tokenizer.ggml.precompiled_charsmap must be an array of bytes") from None
        model_obj = LlamaUGM(*common, unk_id=unk, charsmap=blob, add_space_prefix=add_space_prefix,
                             remove_extra_whitespaces=remove_extra_ws)

    decoder = LlamaDecoder(vocab, kind=kind, remove_leading_space=add_space_prefix, clean_spaces=clean_spaces,
                           escape_whitespaces=bool(pre and pre.escape_whitespaces))
    specials = [AddedToken(vocab.tokens[i], i, special=True) for i, t in enumerate(types)
                if t in (CONTROL, UNKNOWN) and vocab.ids.get(vocab.tokens[i]) == i]
    if kind == "wpm":  # llama.cpp always wraps BERT input in [CLS] ... [SEP]
        post = LlamaSpecials(bos, None, sep)
    else:  # (add_sep only matters to llama.cpp's reranking helpers, not to tokenize)
        post = LlamaSpecials(bos if add_bos else None, eos if add_eos else None, None)
    pipeline = Pipeline(model_obj, decoder=decoder, post_processor=post, added_tokens=specials)
    metadata = {"source": "gguf", "model": model, "pre": pre_name, "name": meta.get("general.name")}
    return Tokenizer.from_pipeline(pipeline, metadata=metadata)


def _adjust_types(vocab: LlamaVocab, meta: dict, source: str) -> list[int]:
    """llama.cpp's corrections of token types by token text (end-of-generation and FIM tokens
    are control tokens; a few chat tokens are user-defined)."""
    types = list(vocab.types)
    for text, i in vocab.ids.items():
        if text in _EOG_LIKE and types[i] != CONTROL:
            types[i] = CONTROL
    for text in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
        if text in vocab.ids:
            types[vocab.ids[text]] = USER_DEFINED
    ids = vocab.ids
    if all(t in ids for t in ("<|return|>", "<|call|>", "<|end|>")) or all(t in ids for t in ("<|calls|>", "<|flush|>", "<|end|>")):
        types[ids["<|end|>"]] = USER_DEFINED
    if "</s>" in ids and ("<|tool_response>" in ids or "<|plamo:eos|>" in ids):
        types[ids["</s>"]] = NORMAL
    return types
