"""Helpers shared by the analysis modules: the error class and a uniform view of a tokenizer.

The analysis functions accept any object with toksmith's tokenizer interface
(``encode_ordinary``, ``decode_bytes``, ``token_bytes``, ``vocab_size``, ``special_tokens``),
so tiktoken encodings wrapped in a thin adapter work as well as ``toksmith.Tokenizer``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..errors import TokenizerError


class AnalysisError(TokenizerError, ValueError):
    """Analysis inputs that cannot be used: a missing corpus, an unknown language, a bad matrix."""


def load_tokenizer(spec):
    """Resolves a tokenizer spec: an object is returned as it is, a string goes to ``toksmith.load``."""
    if isinstance(spec, (str, os.PathLike)):
        import toksmith

        return toksmith.load(spec)
    return spec


def named_tokenizers(tokenizers) -> list[tuple[str, object]]:
    """Normalizes the ``tokenizers`` argument of the analysis functions to ``[(name, tokenizer)]``.

    Accepts a mapping ``{name: tokenizer}``, one tokenizer, or a list whose items are tokenizers,
    specs (strings, loaded with ``toksmith.load``) or ``(name, tokenizer)`` pairs. Names that
    would repeat get a ``#2``, ``#3`` suffix.

    >>> import toksmith
    >>> tok = toksmith.train(["a b"] * 5, vocab_size=257)
    >>> [n for n, _ in named_tokenizers([("a", tok), ("a", tok), tok])]
    ['a', 'a#2', 'tokenizer3']
    """
    if isinstance(tokenizers, Mapping):
        items = [(str(k), v) for k, v in tokenizers.items()]
    elif isinstance(tokenizers, (str, os.PathLike)) or hasattr(tokenizers, "encode_ordinary"):
        items = [(None, tokenizers)]
    else:
        items = []
        for item in tokenizers:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                items.append(item)
            else:
                items.append((None, item))
    if not items:
        raise AnalysisError("no tokenizer given; pass at least one tokenizer (or a path to one)")
    out: list[tuple[str, object]] = []
    seen: dict[str, int] = {}
    for index, (name, spec) in enumerate(items, 1):
        tok = load_tokenizer(spec)
        if not hasattr(tok, "encode_ordinary"):
            raise AnalysisError(
                f"tokenizer #{index} ({type(tok).__name__}) has no encode_ordinary(); pass a toksmith.Tokenizer, "
                f"a path toksmith.load() reads, or an object with the same interface"
            )
        name = name or display_name(tok, spec, index)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}#{seen[name]}"
        out.append((name, tok))
    return out


def display_name(tok, spec=None, index: int = 1) -> str:
    """A short name: the object's ``name``, else the spec's file stem, else ``tokenizer<index>``."""
    from ..tiktoken_api import name_of_file
    from ..tokenizer import Tokenizer

    # A toksmith tokenizer has tiktoken's `name` too ("toksmith" when nothing names it): here
    # only a tiktoken encoding's name beats the file's.
    name = tok.metadata.get("encoding") if isinstance(tok, Tokenizer) else getattr(tok, "name", None)
    if isinstance(name, str) and name:
        return name
    if isinstance(spec, (str, os.PathLike)):
        return name_of_file(spec)
    metadata = getattr(tok, "metadata", None)
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
        return metadata["name"]
    return f"tokenizer{index}"


def vocab_size(tok) -> int:
    """``tok.vocab_size``, or ``n_vocab`` for tiktoken-like objects."""
    size = getattr(tok, "vocab_size", None)
    if size is None:
        size = getattr(tok, "n_vocab", None)
    if not isinstance(size, int) or size <= 0:
        raise AnalysisError(f"{type(tok).__name__} has no positive int vocab_size; the analysis needs it")
    return size


def special_ids(tok) -> dict[str, int]:
    specials = getattr(tok, "special_tokens", None) or {}
    return dict(specials)


def token_bytes_or_none(tok, token_id: int) -> bytes | None:
    """The bytes of one id, or None when the id is a hole in the vocabulary."""
    try:
        data = tok.token_bytes(token_id)
    except (KeyError, ValueError, IndexError):  # DecodeError is a ValueError
        return None
    return bytes(data)


def ordinary_tokens(tok) -> dict[int, bytes]:
    """``{id: bytes}`` of every ordinary (non-special) id that exists, in id order."""
    specials = set(special_ids(tok).values())
    out: dict[int, bytes] = {}
    for i in range(vocab_size(tok)):
        if i in specials:
            continue
        data = token_bytes_or_none(tok, i)
        if data is not None:
            out[i] = data
    return out


def show_bytes(data: bytes) -> str:
    """Printable form of token bytes: the text when it is UTF-8, with invalid bytes as ``\\xNN``.

    >>> show_bytes(b" the")
    ' the'
    >>> show_bytes(b"\\xe4\\xb8")
    '\\\\xe4\\\\xb8'
    """
    return data.decode("utf-8", errors="backslashreplace")


def token_example(token_id: int, data: bytes, **extra) -> dict:
    """One JSON-able example row for a report."""
    return {"id": token_id, "token": show_bytes(data), **extra}


def encode_texts(tok, texts: Iterable[str]) -> list[list[int]]:
    """Encodes texts as ordinary text (special-token strings are plain text in a corpus)."""
    return [list(tok.encode_ordinary(t)) for t in texts]
