"""A small on-disk cache for derived data that is slow to rebuild and never changes for the same
inputs (e.g. SentencePiece character maps: compiling one takes a second or two, reading one into
rules half a second). Entries are named by what they were made from, so a stale entry cannot be
read; writes are atomic; any I/O problem just means no cache.

The folder is ``$TOKSMITH_CACHE_DIR``, else ``$XDG_CACHE_HOME/toksmith``, else
``~/.cache/toksmith``; ``TOKSMITH_CACHE_DIR=""`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ._io import write_atomic


def _folder() -> Path | None:
    explicit = os.environ.get("TOKSMITH_CACHE_DIR")
    if explicit is not None:
        return Path(explicit) if explicit else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "toksmith"


def key(*parts: str | bytes) -> str:
    """A file name for an entry made from ``parts`` (a digest of them)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:32]


def load(kind: str, name: str) -> bytes | None:
    folder = _folder()
    if folder is None:
        return None
    try:
        return (folder / f"{kind}-{name}").read_bytes()
    except OSError:
        return None


def store(kind: str, name: str, data: bytes) -> None:
    folder = _folder()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / f"{kind}-{name}", data)
    except OSError:
        pass  # a read-only or full disk: the data is simply made again next time
