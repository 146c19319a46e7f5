"""Atomic file writes: an interrupted save leaves the old file (or none), never half a file."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import SaveError


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` to a temporary file beside ``path``, syncs it, then renames it into place."""
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


@contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a new empty temporary file beside ``path`` to fill; when the block ends without an
    error it is renamed over ``path``, otherwise deleted. An ``OSError`` (read-only folder, full
    disk, a directory or a file in the way) becomes a :class:`SaveError` naming ``path``."""
    path = Path(path)
    if path.is_dir():
        raise SaveError(f"cannot write {path}: it is a directory; pass a file path (e.g. {path / 'tokenizer.json'})")
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _new_file_beside(path)
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        raise SaveError(f"cannot write {path}: {_reason(e, path)}") from None
    except BaseException:
        _remove(tmp)
        raise


def _new_file_beside(path: Path) -> Path:
    """Creates ``.<name>.<random>.tmp`` beside ``path`` as ``open(path, "w")`` would: mode 0o666 less
    the umask (mkstemp's 0o600 would make every saved file private to its owner)."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue  # a name another save took: draw again
    raise FileExistsError(f"no free temporary file name beside {path}")


def _remove(tmp: Path | None) -> None:
    if tmp is not None:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def _reason(e: OSError, path: Path) -> str:
    """Why writing ``path`` failed, and what to do, from the error of one of the steps."""
    if isinstance(e, PermissionError):
        return f"permission denied; check that the folder {path.parent} is writable, or save elsewhere"
    if isinstance(e, (FileExistsError, NotADirectoryError)):
        return "a part of its folder path is a file, not a folder; choose another path"
    if isinstance(e, IsADirectoryError):
        return f"it is a directory; pass a file path (e.g. {path / 'tokenizer.json'})"
    return f"{e.strerror or e} (in the folder {path.parent}); choose another path"
