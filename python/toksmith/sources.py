"""Training sources: paths, directories, globs, lists of paths, or any iterable of texts.

Files are streamed in blocks, never read whole. A block ends just after a newline that is
followed by a non-space character: with every named pattern, no chunk crosses such a point,
so the chunk counts are the same as for the whole file.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import lzma
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import TrainingError

BLOCK_CHARS = 1 << 22  # 4 Mi characters per block

_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def iter_texts(source) -> Iterator[str]:
    """Yields texts from ``source``: a path (file, directory or glob), a list of paths, or an
    iterable of strings (each string is one text)."""
    if isinstance(source, (str, os.PathLike)):
        yield from _iter_files(resolve_paths(source))
        return
    if isinstance(source, (bytes, bytearray)):
        raise TrainingError("source is bytes; pass text (str), a path, or an iterable of str")
    try:
        items = iter(source)
    except TypeError:
        raise TrainingError(
            f"cannot train on a {type(source).__name__}: pass a path, a list of paths, or an iterable of str"
        ) from None
    for item in items:
        if isinstance(item, os.PathLike):
            yield from _iter_files(resolve_paths(item))
        elif isinstance(item, str):
            yield item
        else:
            raise TrainingError(f"the source yielded a {type(item).__name__}; each item must be a str (a text) or a pathlib.Path")


def resolve_paths(path: str | os.PathLike) -> list[Path]:
    """A file, every file under a directory (sorted, hidden ones skipped), or a glob's matches."""
    text = os.fspath(path)
    p = Path(text)
    if p.is_file():
        return [p]
    if p.is_dir():
        return sorted(f for f in p.rglob("*") if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts))
    if any(c in text for c in "*?["):
        matches = sorted(Path(m) for m in glob.glob(text, recursive=True) if Path(m).is_file())
        if matches:
            return matches
        raise TrainingError(f"the glob {text!r} matches no file")
    raise TrainingError(
        f"no such file or directory: {text!r}. To train on a string itself, pass it in a list: [text]"
    )


def _iter_files(paths: Iterable[Path]) -> Iterator[str]:
    for path in paths:
        yield from read_blocks(path)


def read_blocks(path: Path) -> Iterator[str]:
    """Yields the text of ``path`` (decompressing .gz/.bz2/.xz) in blocks cut at safe points.
    Bytes that are not UTF-8 become U+FFFD."""
    opener = _OPENERS.get(path.suffix, open)
    try:
        f = opener(path, "rt", encoding="utf-8", errors="replace", newline="")
    except OSError as e:
        raise TrainingError(f"cannot read {path}: {e}") from None
    with f:
        carry = ""
        while True:
            block = f.read(BLOCK_CHARS)
            if not block:
                break
            text = carry + block
            cut = _safe_cut(text)
            yield text[:cut]
            carry = text[cut:]
        if carry:
            yield carry


def _safe_cut(text: str) -> int:
    """Position after the last newline followed by a non-space character (0 if none)."""
    pos = len(text) - 1
    while True:
        nl = text.rfind("\n", 0, pos)
        if nl < 0:
            return 0
        if not text[nl + 1].isspace():
            return nl + 1
        pos = nl
