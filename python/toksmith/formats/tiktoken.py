"""tiktoken encodings: ``.tiktoken`` files (one ``base64(token) rank`` per line) and the
named OpenAI encodings with their regex patterns and special tokens.

The ``.tiktoken`` file carries neither the pattern nor the special tokens; for the public
encodings they are public constants, listed here. Nothing is downloaded: a named encoding is
read from the directory given by ``tiktoken_dir=`` or the ``TOKSMITH_TIKTOKEN_DIR`` variable, or
else from tiktoken's own download cache when that holds an intact copy (checked by its SHA-256).
"""

from __future__ import annotations

import os
from pathlib import Path

import base64
import json

from .._io import write_atomic
from ..errors import FormatError
from ..tokenizer import MAX_ID, Tokenizer, is_id

#: The sidecar of an exported ``.tiktoken`` file: what the rank table itself does not carry.
SIDECAR_SUFFIX = ".json"

#: tiktoken's current r50k pattern: equivalent to GPT-2's, but uses possessive quantifiers.
R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

_ENDOFTEXT, _ENDOFPROMPT = "<|endoftext|>", "<|endofprompt|>"
_FIM = {"<|fim_prefix|>": 0, "<|fim_middle|>": 1, "<|fim_suffix|>": 2}


def _harmony_specials() -> dict[str, int]:
    named = {
        "<|startoftext|>": 199998, _ENDOFTEXT: 199999, "<|return|>": 200002, "<|constrain|>": 200003,
        "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007, "<|message|>": 200008,
        "<|call|>": 200012, _ENDOFPROMPT: 200018,
    }
    # As in tiktoken, the reserved range overlaps <|endofprompt|>: both strings map to 200018.
    reserved = {f"<|reserved_{i}|>": i for i in [200000, 200001, 200004, 200009, 200010, 200011, *range(200013, 201088)]}
    return {**named, **reserved}


#: name -> (ranks file stem, pattern name or regex, special tokens)
ENCODINGS: dict[str, tuple[str, str, dict[str, int]]] = {
    "gpt2": ("r50k_base", R50K_PATTERN, {_ENDOFTEXT: 50256}),
    "r50k_base": ("r50k_base", R50K_PATTERN, {_ENDOFTEXT: 50256}),
    "p50k_base": ("p50k_base", R50K_PATTERN, {_ENDOFTEXT: 50256}),
    "p50k_edit": ("p50k_base", R50K_PATTERN, {_ENDOFTEXT: 50256, **{k: 50281 + v for k, v in _FIM.items()}}),
    "cl100k_base": ("cl100k_base", "cl100k", {_ENDOFTEXT: 100257, **{k: 100258 + v for k, v in _FIM.items()}, _ENDOFPROMPT: 100276}),
    "o200k_base": ("o200k_base", "o200k", {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018}),
    "o200k_harmony": ("o200k_base", "o200k", _harmony_specials()),
}


def load_tiktoken(path_or_name: str | os.PathLike, *, tiktoken_dir: str | os.PathLike | None = None,
                  pattern: str | None = None, special_tokens: dict[str, int] | None = None) -> Tokenizer:
    """Loads a tiktoken encoding by name (``"cl100k_base"``) or from a ``.tiktoken`` file.

    A file whose stem is a known encoding gets that encoding's pattern and special tokens;
    for another file pass ``pattern`` (a name or regex) and ``special_tokens``.
    """
    from ..patterns import resolve

    text = os.fspath(path_or_name)
    name = text if text in ENCODINGS else Path(text).stem if Path(text).suffix == ".tiktoken" else None
    if text in ENCODINGS:
        stem = ENCODINGS[text][0]
        directory = tiktoken_dir or os.environ.get("TOKSMITH_TIKTOKEN_DIR")
        if directory:
            path = Path(directory) / f"{stem}.tiktoken"
            if not path.exists():
                raise FormatError(f"{path} does not exist; put {stem}.tiktoken in {directory}")
        else:
            path = _in_tiktoken_cache(stem)
            if path is None:
                raise FormatError(
                    f"to load {text!r} by name, set TOKSMITH_TIKTOKEN_DIR (or pass tiktoken_dir=) to a directory "
                    f"holding {stem}.tiktoken (tiktoken's download cache, {_tiktoken_cache_dir()}, has no intact "
                    f"copy); toksmith does not download it"
                )
    else:
        path = Path(text)
    known = ENCODINGS.get(name) if name else None
    sidecar = Path(str(path) + SIDECAR_SUFFIX)
    source = "special_tokens"  # where the special tokens come from, for an error
    if known is None and sidecar.is_file():
        meta = _read_sidecar(sidecar)
        pattern = pattern if pattern is not None else meta["pattern"]
        if special_tokens is None:
            special_tokens, source = meta["special_tokens"], str(sidecar)
    if pattern is None:
        if known is None:
            raise FormatError(f"{path}: a .tiktoken file does not carry its regex; pass pattern= (e.g. 'cl100k')")
        pattern = known[1]
    if special_tokens is None:
        special_tokens = dict(known[2]) if known else {}
    if not isinstance(special_tokens, dict) or not all(
            isinstance(k, str) and is_id(v) for k, v in special_tokens.items()):
        raise FormatError(f"{source}: special tokens must map strings to int ids from 0 to {MAX_ID}, "
                          f"e.g. {{'<|endoftext|>': 100257}}")
    pattern_name, regex = resolve(pattern)
    from .. import _core

    if not path.is_file():
        raise FormatError(f"{path}: no such file")
    try:
        model = _core.BpeModel.from_tiktoken_file(str(path), regex, list(special_tokens.items()))
    except FormatError as e:
        if str(path) in str(e):
            raise
        raise FormatError(f"{path}: {e}") from None
    return Tokenizer._from_ranks_model(model, pattern=regex, pattern_name=pattern_name or name,
                                       special_tokens=special_tokens, metadata={"source": "tiktoken", "encoding": name})


#: SHA-256 of the published ``.tiktoken`` files, to recognise an intact copy in tiktoken's cache.
_PUBLISHED_SHA256 = {
    "r50k_base": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    "p50k_base": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
_PUBLISHED_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


def _tiktoken_cache_dir() -> str:
    """Where tiktoken keeps the files it downloaded: $TIKTOKEN_CACHE_DIR, $DATA_GYM_CACHE_DIR,
    else data-gym-cache in the temporary directory."""
    import tempfile

    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return os.environ[var]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _in_tiktoken_cache(stem: str) -> Path | None:
    """The copy of ``<stem>.tiktoken`` that tiktoken downloaded (named by the SHA-1 of its URL),
    if there is one and its SHA-256 is the published file's; else None."""
    import hashlib

    directory = _tiktoken_cache_dir()
    if stem not in _PUBLISHED_SHA256 or not directory:
        return None
    path = Path(directory) / hashlib.sha1(_PUBLISHED_URL.format(stem).encode()).hexdigest()
    try:
        intact = hashlib.sha256(path.read_bytes()).hexdigest() == _PUBLISHED_SHA256[stem]
    except OSError:
        return None
    return path if intact else None


def _read_sidecar(path: Path) -> dict:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: not a readable sidecar ({e})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("pattern"), str) or not isinstance(meta.get("special_tokens"), dict):
        raise FormatError(f"{path}: a sidecar needs 'pattern' (str) and 'special_tokens' (object)")
    return meta


def save_tiktoken(tokenizer: Tokenizer, path: str | os.PathLike) -> None:
    """Writes ``path`` (a ``.tiktoken`` rank table: ``base64(token) rank`` per line, the rank being
    the token's id) and ``path + ".json"`` (pattern and special tokens), both atomically.

    tiktoken merges adjacent parts whose concatenation is a token, lowest rank first; that is
    the merge-list BPE of the tokenizer whenever each token's id orders it after its parts and no
    token is reachable by a split its merges did not learn, which holds for tokenizers trained by
    BPE; ``check-parity`` verifies it on a corpus."""
    if tokenizer.pipeline is not None:
        raise FormatError("the tiktoken format holds byte-level BPE only; this tokenizer runs another pipeline")
    lines = [base64.b64encode(b).decode("ascii") + f" {i}\n" for i, b in sorted(tokenizer._tokens.items())]
    path = Path(path)
    write_atomic(path, "".join(lines).encode("ascii"))
    meta = {"format": "tiktoken sidecar (toksmith)", "pattern": tokenizer.pattern, "pattern_name": tokenizer.pattern_name,
            "special_tokens": tokenizer.special_tokens}
    write_atomic(Path(str(path) + SIDECAR_SUFFIX), json.dumps(meta, ensure_ascii=False, indent=1).encode("utf-8"))
