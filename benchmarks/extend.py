"""Vocabulary extension: tokens before and after adding domain merges, every old id kept.

Domains: Chinese news (../shared/data/corpora/zh, People's Daily; 1.5M characters to learn from, the next
0.3M held out) and Python code (the standard library's *.py files, alternate files learned
from / held out). Base tokenizers: gpt2 (vocab.json + merges.txt), llama3 and qwen3
(tokenizer.json), cl100k_base (tiktoken).

    .venv/bin/python benchmarks/extend.py --add 2000
"""

from __future__ import annotations

import argparse
import lzma
import sysconfig
import time
from pathlib import Path

import toksmith

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"


def domains() -> dict[str, tuple[str, str]]:
    with lzma.open(DATA / "corpora/zh/peoples-daily-199801.txt.xz", "rt", encoding="utf-8") as f:
        zh = f.read(1_800_000)
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    code = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    return {"Chinese news": (zh[:1_500_000], zh[1_500_000:]),
            "Python code": ("".join(code[0::2]), "".join(code[1::2])[:1_000_000])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--add", type=int, default=2000)
    args = ap.parse_args()
    bases = {
        "gpt2": lambda: toksmith.load(DATA / "tokenizers/hf/gpt2"),
        "llama3": lambda: toksmith.load(DATA / "tokenizers/hf/llama3/tokenizer.json.xz"),
        "qwen3": lambda: toksmith.load(DATA / "tokenizers/hf/qwen3/tokenizer.json.xz"),
        "cl100k_base": lambda: toksmith.load("cl100k_base", tiktoken_dir=DATA / "tokenizers/tiktoken"),
    }
    print(f"| base | domain | held-out chars | tokens before | tokens after (+{args.add:,}) | fewer | extend s |")
    print("|---|---|---|---|---|---|---|")
    for domain, (learn, held) in domains().items():
        for name, load in bases.items():
            base = load()
            start = time.perf_counter()
            ext = base.extend([learn], add=args.add)
            secs = time.perf_counter() - start
            before = len(base.encode(held, disallowed_special=()))
            after = len(ext.encode(held, disallowed_special=()))
            print(f"| {name} | {domain} | {len(held):,} | {before:,} | {after:,} | {100 * (1 - after / before):.1f}% | {secs:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
