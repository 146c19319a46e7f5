"""Named pre-tokenization patterns.

The regexes themselves live in the Rust core (``rust/pretokenize.rs``) so that there is one
copy; this module maps names and exposes them to Python.
"""

from __future__ import annotations

import difflib
import re

from . import _core

#: Names accepted wherever a ``pattern`` is: the r50k/GPT-2, cl100k and o200k regexes.
PATTERN_NAMES = ("gpt2", "cl100k", "o200k")

_ALIASES = {
    "gpt2": "gpt2", "r50k": "gpt2", "r50k_base": "gpt2", "p50k_base": "gpt2", "p50k_edit": "gpt2",
    "cl100k": "cl100k", "cl100k_base": "cl100k",
    "o200k": "o200k", "o200k_base": "o200k", "o200k_harmony": "o200k",
}


#: SuperBPE's stage-2 pre-tokenization: whitespace (newlines included) no longer separates
#: chunks, so merges can build superwords (", and the", " by the way"). Chunks still break at
#: digits (groups of up to three, as in o200k) and at runs of two or more punctuation marks or
#: symbols ("...", "->", "**"), which stand alone; a single mark stays inside the chunk.
SUPERBPE_PATTERN = (
    r"\p{N}{1,3}"
    r"|[^\s\p{L}\p{M}\p{N}]{2,}"
    r"|(?:[^\s\p{L}\p{M}\p{N}](?![^\s\p{L}\p{M}\p{N}])|[\s\p{L}\p{M}])+"
)


def is_name(pattern) -> bool:
    """Whether ``pattern`` is one of the names :func:`resolve` knows (``"gpt2"``, ``"o200k_base"``...)."""
    return isinstance(pattern, str) and (pattern in _ALIASES or pattern == "superbpe")


def resolve(pattern: str) -> tuple[str | None, str]:
    """Returns ``(name or None, regex)`` for a pattern name or a custom regex string.

    >>> resolve("cl100k")[0]
    'cl100k'
    >>> resolve(r"\\w+")
    (None, '\\\\w+')
    """
    if not isinstance(pattern, str):
        from .errors import InvalidPatternError

        raise InvalidPatternError(
            f"pattern must be a name ({', '.join(PATTERN_NAMES)}) or a regex string, not {type(pattern).__name__}"
        )
    if pattern == "superbpe":
        return "superbpe", SUPERBPE_PATTERN
    name = _ALIASES.get(pattern)
    if name is None and _NAME_LIKE.fullmatch(pattern):
        _unknown_name(pattern)
    return name, _core.pattern_regex(name) if name else pattern


# A plain word is a misspelled name far more often than a regex meant to match only that word
# (which would make every other character a chunk of its own).
_NAME_LIKE = re.compile(r"[A-Za-z0-9_-]+")


def _unknown_name(pattern: str) -> None:
    from .errors import InvalidPatternError

    names = [*_ALIASES, "superbpe"]
    close = difflib.get_close_matches(pattern.lower(), names, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    metaspace = " ('metaspace' goes with level='char')" if pattern == "metaspace" else ""
    raise InvalidPatternError(
        f"{pattern!r} is not a pattern name{metaspace}; {hint}the names are {', '.join(PATTERN_NAMES)} and superbpe "
        f"(aliases: {', '.join(a for a in _ALIASES if a not in PATTERN_NAMES)}). To use it as a regex that matches "
        f"that literal text, wrap it in a group: '(?:{pattern})'"
    )


def split(text: str, pattern: str = "o200k") -> list[str]:
    """Splits ``text`` into the chunks BPE works on; merges never cross a chunk.

    >>> split("Hello world!", "gpt2")
    ['Hello', ' world', '!']
    """
    return _core.split(resolve(pattern)[1], text)
