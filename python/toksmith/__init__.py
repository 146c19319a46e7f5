"""toksmith: train, run, convert and audit subword tokenizers.

>>> import toksmith
>>> tok = toksmith.train(["the lowest newest"] * 50, vocab_size=300)
>>> tok.decode(tok.encode("the newest"))
'the newest'
"""

from __future__ import annotations

import os

from .errors import (
    DecodeError,
    EncodeError,
    FormatError,
    InternalError,
    InvalidPatternError,
    SaveError,
    SpecialTokenError,
    TokenizerError,
    TrainingError,
    UnknownTokenError,
)
from .tiktoken_api import encoding_for_model, encoding_name_for_model, get_encoding, list_encoding_names
from .tokenizer import Tokenizer
from .trainers import train

__version__ = "0.1.0"


def load(path: str | os.PathLike, **options) -> Tokenizer:
    """Loads a tokenizer, detecting its format.

    - a file written by :meth:`Tokenizer.save` (toksmith JSON);
    - a Hugging Face ``tokenizer.json`` (or ``.json.xz``), ``vocab.json`` + ``merges.txt``,
      ``vocab.txt``, or a directory holding them;
    - a SentencePiece ``.model``; a GGUF vocabulary (``.gguf``, ``.gguf.xz``);
    - a tiktoken encoding by name (``"cl100k_base"``, ``"o200k_base"``, ...; the ``.tiktoken`` file
      is looked up in ``tiktoken_dir=``, ``$TOKSMITH_TIKTOKEN_DIR`` or tiktoken's download cache,
      never downloaded) or a ``.tiktoken`` file (``pattern=`` and ``special_tokens=`` for files of
      unknown encodings).
    """
    from .formats.tiktoken import ENCODINGS, load_tiktoken

    text = os.fspath(path)
    if text in ENCODINGS or text.endswith(".tiktoken"):
        return load_tiktoken(text, **options)
    if text.endswith(".model"):
        from .formats.sentencepiece import load_sentencepiece

        return load_sentencepiece(text, **options)
    if text.endswith((".gguf", ".gguf.xz")) or _starts_with(text, b"GGUF"):
        from .formats.gguf import load_gguf

        return load_gguf(text, **options)
    from pathlib import Path

    from .formats import hf

    p = Path(text)
    hf_dir = p.is_dir() and (
        any((p / n).is_file() for n in ("tokenizer.json", "tokenizer.json.xz", "vocab.txt"))
        or ((p / "vocab.json").is_file() and (p / "merges.txt").is_file())
    )
    if hf_dir or p.name in ("vocab.json", "merges.txt", "vocab.txt"):
        return hf.load_hf(p, **options)
    if p.name.endswith((".json", ".json.xz")) and p.is_file():
        d = hf.read_json(p)
        if hf.is_hf_dict(d):
            return hf.from_hf_dict(d, source=str(p))
        if options:
            raise TypeError(f"unexpected options for a toksmith file: {sorted(options)}")
        return Tokenizer.from_dict(d, source=str(p))
    if options:
        raise TypeError(f"unexpected options for a toksmith file: {sorted(options)}")
    return Tokenizer.load(path)


def _starts_with(path: str, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


__all__ = [
    "Tokenizer",
    "train",
    "load",
    "get_encoding",
    "encoding_for_model",
    "encoding_name_for_model",
    "list_encoding_names",
    "TokenizerError",
    "SpecialTokenError",
    "InvalidPatternError",
    "TrainingError",
    "FormatError",
    "DecodeError",
    "EncodeError",
    "SaveError",
    "UnknownTokenError",
    "InternalError",
]
