"""Finding under-trained tokens from a model's embedding matrix, with numpy only.

A token the model never saw in training keeps an embedding row that gradient descent barely
moved: often of small norm, and pointing the same way as other never-seen rows. Given rows known
to be unused (tokens that are never emitted on a corpus, or that no text can produce), rows that
look like them are candidates for "glitch" tokens.

Reads ``.npy`` files and ``.safetensors`` files (an 8-byte little-endian header length, a JSON
header naming each tensor's dtype, shape and byte range, then the raw tensors).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ._common import AnalysisError

# Names under which common checkpoints keep the input (or tied) token embedding matrix.
_EMBEDDING_NAME_HINTS = ("word_embeddings", "embed_tokens", "tok_embeddings", "wte", "token_embd", "embedding", "embed")

_SAFETENSORS_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U8": "u1", "BOOL": "?",
}


def _numpy():
    try:
        import numpy
    except ImportError:
        raise AnalysisError("reading embeddings needs numpy: pip install 'toksmith[analysis]'") from None
    return numpy


def safetensors_header(path: str | os.PathLike) -> dict:
    """The JSON header of a ``.safetensors`` file: ``{name: {dtype, shape, data_offsets}}``."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise AnalysisError(f"{path} is too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            size = path.stat().st_size
            if n > size - 8 or n > 100 * 1024 * 1024:
                raise AnalysisError(f"{path}: header length {n} does not fit the file ({size} bytes); not a safetensors file?")
            header = json.loads(f.read(n).decode("utf-8"))
    except FileNotFoundError:
        raise AnalysisError(f"{path}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise AnalysisError(f"{path}: the safetensors header is not JSON; the file is corrupted or of another format") from None
    if not isinstance(header, dict):
        raise AnalysisError(f"{path}: the safetensors header is not a JSON object")
    header.pop("__metadata__", None)
    return header


def read_safetensor(path: str | os.PathLike, name: str):
    """One tensor of a ``.safetensors`` file as a numpy array (memory-mapped, float32 for bf16)."""
    np = _numpy()
    path = Path(path)
    header = safetensors_header(path)
    if name not in header:
        raise AnalysisError(f"{path} has no tensor {name!r}; it has {sorted(header)[:20]}")
    entry = header[name]
    dtype, shape, (start, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    offset = 8 + n + start
    count = 1
    for dim in shape:
        count *= dim
    if dtype == "BF16":
        raw = np.memmap(path, dtype="<u2", mode="r", offset=offset, shape=(count,))
        # bfloat16 is the top half of a float32: shift the bits into place.
        return (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dtype not in _SAFETENSORS_DTYPES:
        raise AnalysisError(f"{path}: tensor {name!r} has dtype {dtype}, which this reader does not handle")
    np_dtype = np.dtype(_SAFETENSORS_DTYPES[dtype])
    if end - start != count * np_dtype.itemsize:
        raise AnalysisError(f"{path}: tensor {name!r} holds {end - start} bytes, but shape {shape} of {dtype} needs "
                            f"{count * np_dtype.itemsize}; the file is corrupted")
    return np.memmap(path, dtype=np_dtype, mode="r", offset=offset, shape=tuple(shape))


def pick_embedding_tensor(header: Mapping[str, dict], vocab_size: int | None = None) -> str:
    """The name of the token embedding matrix in a safetensors header.

    2-D tensors only; with ``vocab_size``, those with at least that many... or nearly that many rows
    (models pad their matrices); then the first whose name has a usual embedding name.
    """
    matrices = {k: v for k, v in header.items() if len(v.get("shape", [])) == 2}
    if vocab_size:
        # Checkpoints pad the matrix to a multiple of 64 or 128, or drop trailing special rows.
        fitting = {k: v for k, v in matrices.items() if 0.9 * vocab_size <= v["shape"][0] <= vocab_size + 1024}
        matrices = fitting or matrices
    for hint in _EMBEDDING_NAME_HINTS:
        named = [k for k in matrices if hint in k.lower() and "position" not in k.lower() and "type" not in k.lower()]
        if named:
            return sorted(named, key=lambda k: -matrices[k]["shape"][0])[0]
    if matrices:
        return max(matrices, key=lambda k: matrices[k]["shape"][0])
    raise AnalysisError("no 2-D tensor in the file; pass the embedding matrix's name (tensor=...)")


def load_embeddings(path: str | os.PathLike, tensor: str | None = None, vocab_size: int | None = None):
    """Loads an embedding matrix (rows = token ids) from ``.npy`` or ``.safetensors``.

    ``tensor`` names the matrix inside a safetensors file; by default it is guessed from the
    usual names (``word_embeddings``, ``embed_tokens``, ``wte``, ...) and ``vocab_size``.
    """
    np = _numpy()
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            matrix = np.load(path, mmap_mode="r")
        except FileNotFoundError:
            raise AnalysisError(f"{path}: no such file") from None
        except ValueError as e:
            raise AnalysisError(f"{path} is not a readable .npy array ({e})") from None
    elif suffix == ".safetensors":
        name = tensor or pick_embedding_tensor(safetensors_header(path), vocab_size)
        matrix = read_safetensor(path, name)
    else:
        raise AnalysisError(f"{path}: embeddings must be a .npy or .safetensors file")
    if matrix.ndim != 2:
        raise AnalysisError(f"{path}: the embedding matrix must be 2-D (tokens x dimensions), got shape {matrix.shape}")
    return matrix


def rank_undertrained(
    matrix,
    tokens: Sequence[str] | Mapping[int, str] | None = None,
    unused: Iterable[int] = (),
    *,
    top: int = 50,
    exclude: Iterable[int] = (),
    include_reference: bool = False,
) -> list[dict]:
    """Ranks rows of ``matrix`` by how much they look like untrained embeddings.

    - ``tokens``: display names, one per row (a list) or ``{id: name}``.
    - ``unused``: ids known to be unused (never emitted, unreachable). Rows are compared with the
      mean of these rows after removing the mean of all rows (the direction every row shares);
      high cosine similarity means "looks untrained".
    - Without ``unused``, the ranking uses the norm alone (small norm = suspicious).

    Each result has ``id``, ``token``, ``norm``, ``cosine`` (None without reference rows) and
    ``score`` in [0, 1]: the mean of two percentiles, small norm and high cosine.
    ``exclude`` rows (e.g. special tokens) and, unless ``include_reference``, the reference rows
    are left out of the list.

    >>> import numpy as np
    >>> m = np.ones((4, 2)); m[3] = 0.01
    >>> rank_undertrained(m, ["a", "b", "c", "d"], top=1)[0]["token"]
    'd'
    """
    np = _numpy()
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] == 0:
        raise AnalysisError(f"the embedding matrix must be 2-D with at least one row, got shape {m.shape}")
    n = m.shape[0]
    reference = sorted({int(i) for i in unused if 0 <= int(i) < n})
    norms = np.linalg.norm(m, axis=1)
    norm_score = _percentile_rank(np, -norms)  # 1.0 for the smallest norm
    cosine = None
    if reference:
        centered = m - m.mean(axis=0)
        direction = centered[reference].mean(axis=0)
        denominator = np.linalg.norm(centered, axis=1) * np.linalg.norm(direction)
        with np.errstate(invalid="ignore", divide="ignore"):
            cosine = np.where(denominator > 0, centered @ direction / np.where(denominator > 0, denominator, 1), 0.0)
        score = (norm_score + _percentile_rank(np, cosine)) / 2
    else:
        score = norm_score
    skip = {int(i) for i in exclude}
    if not include_reference:
        skip.update(reference)
    order = [int(i) for i in np.argsort(-score, kind="stable") if int(i) not in skip]
    out = []
    for i in order[:top]:
        out.append({
            "id": i,
            "token": _name(tokens, i),
            "norm": float(norms[i]),
            "cosine": None if cosine is None else float(cosine[i]),
            "score": float(score[i]),
        })
    return out


def _percentile_rank(np, values):
    """Each value's rank scaled to [0, 1] (1 = largest); ties share the lower rank."""
    n = len(values)
    if n == 1:
        return np.ones(1)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(n)
    return ranks / (n - 1)


def _name(tokens, i: int):
    if tokens is None:
        return None
    if isinstance(tokens, Mapping):
        return tokens.get(i)
    return tokens[i] if i < len(tokens) else None
