"""``make demo``: train on text that is always there (the Python standard library's own source
files), then show a held-out sample with token boundaries and the compression."""

from __future__ import annotations

import sysconfig
import time
from pathlib import Path

import toksmith

SAMPLE = '''def greet(name: str) -> str:
    """Return a friendly greeting."""
    return f"Hello, {name}! Tokenizers split text into subwords."
'''


def stdlib_files() -> list[Path]:
    """The top-level .py files of the running Python's standard library, sorted."""
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def run_demo(vocab_size: int = 4096, color: bool = False) -> None:
    files = stdlib_files()
    if len(files) < 10:
        raise toksmith.TrainingError(f"found only {len(files)} standard-library files under {sysconfig.get_paths()['stdlib']}")
    # Every tenth file is held out to measure compression on text the tokenizer has not seen.
    held_out = files[::10]
    train_files = [f for i, f in enumerate(files) if i % 10]
    size = sum(f.stat().st_size for f in train_files)
    print(f"training byte-level BPE (o200k pattern, vocab {vocab_size}) on {len(train_files)} standard-library files, {size / 1e6:.1f} MB ...")
    start = time.perf_counter()
    tok = toksmith.train(train_files, vocab_size=vocab_size, pattern="o200k", special_tokens=["<|endoftext|>"])
    print(f"trained in {time.perf_counter() - start:.1f} s: {tok!r}\n")

    ids = tok.encode(SAMPLE)
    print("sample, token boundaries shown" + (" by color:" if color else " as |:"))
    if color:
        from toksmith.cli import show_boundaries

        print(show_boundaries(tok, SAMPLE))
    else:
        print("|".join(tok.decode_bytes([i]).decode("utf-8", "replace") for i in ids))
    print(f"ids: {ids[:24]}{' ...' if len(ids) > 24 else ''}")
    assert tok.decode(ids) == SAMPLE
    print(f"{len(SAMPLE.encode())} bytes -> {len(ids)} tokens ({len(SAMPLE.encode()) / len(ids):.2f} bytes/token); decodes back exactly\n")

    text = "".join(f.read_text(encoding="utf-8", errors="replace") for f in held_out)
    n_bytes = len(text.encode())
    start = time.perf_counter()
    n_tokens = len(tok.encode_ordinary(text))
    secs = time.perf_counter() - start
    print(f"held-out ({len(held_out)} files, {n_bytes / 1e6:.2f} MB): {n_tokens} tokens, "
          f"{n_bytes / n_tokens:.2f} bytes per token (encoded in {secs:.2f} s)")
