"""Training sources: paths, directories, globs, lists of paths, or any iterable of texts.

Files are streamed, never read whole: plain text in blocks, JSON Lines line by line (the
``text_field`` of each object), Parquet in record batches (the ``text_field`` column).
``.gz``/``.bz2``/``.xz``/``.zst`` are decompressed on the fly. A plain-text block ends just
after a newline that follows a non-space character and comes before a non-space character
other than ``/``: with every named pattern no chunk crosses such a point, so the chunk counts
are the same as for the whole file (with SuperBPE's pattern and custom regexes, whose chunks can
span lines, the counts next to block ends may differ from the whole file's). The BPE trainer
reads uncompressed plain-text files in Rust instead, by the same rules (``rust/train/read.rs``).
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import json
import lzma
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import TrainingError

BLOCK_CHARS = 1 << 20  # 1 Mi characters per block

def _open_zstd(path, mode, **kwargs):
    # zstandard.open's reader ends quietly at a truncated frame, so a cut file would read as a
    # shorter (or empty) text: this one fails on an incomplete frame.
    return io.TextIOWrapper(io.BufferedReader(_ZstdReader(path), 1 << 20), **kwargs)


class _ZstdReader(io.RawIOBase):
    """The decompressed bytes of a .zst file, frame after frame; EOFError when the file ends
    inside a frame (a truncated file)."""

    def __init__(self, path) -> None:
        import zstandard  # a dependency: .zst is the usual compression of large text dumps

        self._dctx = zstandard.ZstdDecompressor()
        self._frame = self._dctx.decompressobj()
        self._in_frame = False  # part of a frame was read, its end not yet
        self._file = open(path, "rb")
        self._out = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._out:
            data = self._file.read(1 << 18)  # small reads bound the output held at once
            if not data:
                if self._in_frame:
                    raise EOFError("the compressed data ends inside a zstd frame")
                return 0
            out = []
            while data:
                out.append(self._frame.decompress(data))
                self._in_frame = not self._frame.eof
                data = self._frame.unused_data if self._frame.eof else b""
                if self._frame.eof:  # the frame is complete: the rest starts the next one
                    self._frame = self._dctx.decompressobj()
            self._out = memoryview(b"".join(out))
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def close(self) -> None:
        if getattr(self, "_file", None) is not None:  # None: __init__ failed to open it
            self._file.close()
        super().close()


def _read_errors() -> tuple[type[BaseException], ...]:
    """What the decompressors raise on a corrupt or truncated file."""
    import zstandard

    return OSError, EOFError, lzma.LZMAError, zstandard.ZstdError


_TEST_COMMANDS = {".gz": "gzip -t", ".bz2": "bzip2 -t", ".xz": "xz -t", ".zst": "zstd -t"}


def _corrupt(path: Path, e: BaseException) -> str:
    check = f" (`{_TEST_COMMANDS[path.suffix]} {path}` tests it)" if path.suffix in _TEST_COMMANDS else ""
    return f"cannot read {path}: it is corrupt or truncated ({e or type(e).__name__}); fetch or write it again{check}"


_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open, ".zst": _open_zstd}
_JSONL = {".jsonl", ".ndjson"}


def iter_texts(source, *, text_field: str = "text", lines: bool = False) -> Iterator[str]:
    """Yields texts from ``source``: a path (file, directory or glob), a list of paths, or an
    iterable of strings (each string is one text). ``lines``: a plain-text file's texts are its
    lines (documents, for ``max_chars_per_doc``), not blocks of many lines."""
    if isinstance(source, (str, os.PathLike)):
        yield from _iter_files(resolve_paths(source), text_field, lines)
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
            yield from _iter_files(resolve_paths(item), text_field, lines)
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


def split_plain_files(source) -> tuple[list[Path], object]:
    """The uncompressed plain-text files of ``source`` (a path, or a list of paths), which the
    BPE trainer reads in Rust, and what is left (the same kind of source; unchanged when it is
    an iterable of texts)."""
    if isinstance(source, (str, os.PathLike)):
        paths = resolve_paths(source)
    elif isinstance(source, (list, tuple)) and source and all(isinstance(s, os.PathLike) for s in source):
        paths = [p for item in source for p in resolve_paths(item)]
    else:
        return [], source
    plain = [p for p in paths if p.suffix not in _OPENERS and p.suffix not in _JSONL and p.suffix != ".parquet"]
    kept = set(plain)
    return plain, [p for p in paths if p not in kept]


def _iter_files(paths: Iterable[Path], text_field: str, lines: bool = False) -> Iterator[str]:
    for path in paths:
        kind = Path(path.stem).suffix if path.suffix in _OPENERS else path.suffix
        if kind in _JSONL:
            yield from read_jsonl(path, text_field)
        elif path.suffix == ".parquet":
            yield from read_parquet(path, text_field)
        elif lines:
            yield from read_lines(path)
        else:
            yield from read_blocks(path)


def _open_text(path: Path, error: type[Exception] = TrainingError):
    opener = _OPENERS.get(path.suffix, open)
    try:
        return opener(path, "rt", encoding="utf-8", errors="replace", newline="")
    except OSError as e:
        raise error(f"cannot read {path}: {e}") from None


def read_lines(path: Path, error: type[Exception] = TrainingError) -> Iterator[str]:
    """Yields the lines of ``path`` (decompressed); ``error`` naming the file when it is corrupt or
    truncated."""
    with _open_text(path, error) as f:
        while True:
            try:
                line = f.readline()
            except _read_errors() as e:
                raise error(_corrupt(path, e)) from None
            if not line:
                return
            yield line


def read_jsonl(path: Path, text_field: str) -> Iterator[str]:
    """Yields the ``text_field`` of each JSON object of a JSON Lines file."""
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise TrainingError(f"{path}:{lineno}: not a JSON object ({e})") from None
        text = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            raise TrainingError(
                f"{path}:{lineno}: no string field {text_field!r}; pass text_field= (CLI: --text-field) "
                f"naming the field that holds the text"
            )
        yield text


def read_parquet(path: Path, text_field: str) -> Iterator[str]:
    """Yields the ``text_field`` column of a Parquet file, one record batch at a time."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TrainingError(f"reading {path} needs pyarrow: pip install 'toksmith[parquet]'") from None
    import pyarrow as pa

    try:
        pf = pq.ParquetFile(path)
        if text_field not in pf.schema_arrow.names:
            raise TrainingError(f"{path} has no column {text_field!r} (columns: {pf.schema_arrow.names}); pass text_field=")
        for batch in pf.iter_batches(columns=[text_field], batch_size=4096):
            for text in batch.column(0).to_pylist():
                if isinstance(text, str):
                    yield text
                elif text is not None:
                    raise TrainingError(f"{path}: the column {text_field!r} holds {type(text).__name__} values "
                                        f"({batch.schema.field(0).type}), not text; pass text_field= naming a string column")
    except (OSError, pa.ArrowException) as e:  # ArrowInvalid: not a Parquet file, or a damaged one
        raise TrainingError(f"cannot read {path} as Parquet: {e}") from None


def read_blocks(path: Path) -> Iterator[str]:
    """Yields the text of ``path`` (decompressing .gz/.bz2/.xz/.zst) in blocks cut at safe points.
    Bytes that are not UTF-8 become U+FFFD."""
    f = _open_text(path)
    with f:
        carry = ""
        while True:
            try:
                block = f.read(BLOCK_CHARS)
            except _read_errors() as e:
                raise TrainingError(_corrupt(path, e)) from None
            if not block:
                break
            text = carry + block
            cut = _safe_cut(text)
            yield text[:cut]
            carry = text[cut:]
        if carry:
            yield carry


def _safe_cut(text: str) -> int:
    """Position of the last safe point of ``text`` (0 if none): just after a newline that follows
    a non-space character and comes before a non-space character other than ``/`` (the rule of
    ``rust/train/read.rs``, ``is_safe_cut``, which says why)."""
    pos = len(text) - 1
    while True:
        nl = text.rfind("\n", 0, pos)
        if nl < 1:
            return 0
        after, before = text[nl + 1], text[nl - 1]
        if not after.isspace() and after != "/" and not before.isspace():
            return nl + 1
        pos = nl
