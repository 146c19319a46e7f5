"""SuperBPE vs BPE: tokens on held-out English text at the same vocabulary size.

Trains byte-level BPE (o200k pattern) and SuperBPE at several transition points on a sample of
../shared/data/corpora/en (the same sample and held-out split as benchmarks/train.py), then
encodes the held-out text with each and prints tokens, bytes per token and the reduction.

    .venv/bin/python benchmarks/superbpe.py --mb 20 --vocab 32000 64000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import build_sample  # noqa: E402

import toksmith  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--vocab", type=int, nargs="+", default=[32_000, 64_000])
    ap.add_argument("--transitions", type=float, nargs="+", default=[0.25, 0.5, 0.75, 0.9],
                    help="transition points as fractions of the vocabulary size")
    ap.add_argument("--max-words", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="toksmith-superbpe-") as tmp:
        train, held, description = build_sample(args.mb, Path(tmp))
        text = held.read_text(encoding="utf-8")
        n_bytes = len(text.encode("utf-8"))
        print(f"training sample: {description}\nheld-out: {n_bytes / 1e6:.2f} MB\n")
        print("| vocab | tokenizer | transition | held-out tokens | bytes/token | fewer tokens than BPE | train s |")
        print("|---|---|---|---|---|---|---|")
        for vocab in args.vocab:
            start = time.perf_counter()
            bpe = toksmith.train(train, vocab_size=vocab)
            secs = time.perf_counter() - start
            base = len(bpe.encode_ordinary(text))
            print(f"| {vocab:,} | BPE | - | {base:,} | {n_bytes / base:.3f} | - | {secs:.1f} |", flush=True)
            for frac in args.transitions:
                t = int(vocab * frac)
                start = time.perf_counter()
                sup = toksmith.train(train, vocab_size=vocab, algorithm="superbpe", transition=t,
                                     max_words_per_token=args.max_words)
                secs = time.perf_counter() - start
                n = len(sup.encode_ordinary(text))
                print(f"| {vocab:,} | SuperBPE | {t:,} | {n:,} | {n_bytes / n:.3f} | {100 * (1 - n / base):.1f}% | {secs:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
