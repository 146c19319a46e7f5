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
    SpecialTokenError,
    TokenizerError,
    TrainingError,
)
from .tokenizer import Tokenizer
from .trainers import train

__version__ = "0.1.0"


def load(path: str | os.PathLike) -> Tokenizer:
    """Loads a tokenizer saved by :meth:`Tokenizer.save`."""
    return Tokenizer.load(path)


__all__ = [
    "Tokenizer",
    "train",
    "load",
    "TokenizerError",
    "SpecialTokenError",
    "InvalidPatternError",
    "TrainingError",
    "FormatError",
    "DecodeError",
    "EncodeError",
    "InternalError",
]
