"""One exception hierarchy for everything toksmith refuses.

Every error is a ``TokenizerError``; most are also ``ValueError`` so that code written for
tiktoken (which raises ``ValueError``) keeps working. Messages say what was wrong and how to fix it.
"""


class TokenizerError(Exception):
    """Base class of every error toksmith raises on purpose."""


class SpecialTokenError(TokenizerError, ValueError):
    """Text contains a special-token string that the call did not allow."""


class InvalidPatternError(TokenizerError, ValueError):
    """A pre-tokenization pattern that does not compile or cannot be matched."""


class TrainingError(TokenizerError, ValueError):
    """Training parameters or data that cannot give a tokenizer."""


class FormatError(TokenizerError, ValueError):
    """A tokenizer file that is corrupted, truncated, of another format or of another version."""


class DecodeError(TokenizerError, ValueError):
    """Ids that are not in the vocabulary, or bytes that are not valid UTF-8 under errors='strict'."""


class EncodeError(TokenizerError, ValueError):
    """Text that cannot be encoded, e.g. a str holding lone surrogates."""


class UnknownTokenError(TokenizerError, KeyError):
    """A token, model or encoding name that a lookup does not know (``encode_single_token``,
    ``decode_single_token_bytes``, ``encoding_for_model``...). Also a ``KeyError``, as tiktoken
    raises for these, so that code written for it keeps working."""

    # KeyError would quote the message (it shows its argument as a key); say it as written.
    __str__ = Exception.__str__


class SaveError(TokenizerError, OSError):
    """A file that cannot be written (read-only folder, a directory in the way, a full disk). Also an
    ``OSError``, so that code that catches I/O failures, such as the on-disk cache, still does."""


class InternalError(TokenizerError, RuntimeError):
    """A bug in toksmith (a Rust panic caught at the binding layer). Please report it."""


__all__ = [
    "TokenizerError",
    "SpecialTokenError",
    "InvalidPatternError",
    "TrainingError",
    "FormatError",
    "DecodeError",
    "EncodeError",
    "UnknownTokenError",
    "SaveError",
    "InternalError",
]
