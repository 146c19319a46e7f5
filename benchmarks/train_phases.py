"""Where byte-level BPE training spends its time on 1 and 2 threads, phase by phase.

    .venv/bin/python benchmarks/train_phases.py                 # 20 MB sample, 3 rounds
    .venv/bin/python benchmarks/train_phases.py --mb 100 --rounds 5

Trains as `benchmarks/train.py` does (vocabulary 32,000, o200k pattern, the same English sample)
through the trainer's own steps (`toksmith._core.BpeTrainer`, what `toksmith.train` drives):
reading and counting the file in 8 MiB blocks, the step before merging (`start`), the merges in
ranges (timed per step of --step merges), and the model at the end. Each run is a fresh process;
1 and 2 threads alternate within a round, and each figure is the median over the rounds. The
ratio column is 1 thread's time over 2 threads': how well each phase scales. The merge ranges
are printed with the count of their first and last merge (a merge's count is the number of
occurrences it merges), which says how much work each merge has to share.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import build_sample  # noqa: E402  (the same sample as the training benchmark)

VOCAB = 32_000
RANGES = [0, 256, 1024, 4096, 8192, 16384, VOCAB - 256]


def worker(path: str, threads: int, step: int) -> None:
    """One training run; prints a JSON line of phase times (ms), per-step merge times and counts."""
    from toksmith import _core
    from toksmith.patterns import resolve

    pattern = resolve("o200k")[1]
    t0 = time.perf_counter()
    trainer = _core.BpeTrainer(pattern, [], num_threads=threads)
    size, offset = os.path.getsize(path), 0
    while offset < size:
        offset = trainer.add_file_block(path, offset, 1 << 23)
    t1 = time.perf_counter()
    trainer.start("byte", 2, None, build_model=True)
    t2 = time.perf_counter()
    target = VOCAB - 256
    trainer.set_merge_target(target)
    steps, done = [], 0
    while done < target:
        s = time.perf_counter()
        n = trainer.step(min(step, target - done))
        steps.append((done, (time.perf_counter() - s) * 1e3))
        done += n
        if n == 0:
            break
    t3 = time.perf_counter()
    trainer.byte_level_model(pattern, [], 0)
    t4 = time.perf_counter()
    _, counts = trainer.merges()
    ms = lambda a, b: (b - a) * 1e3  # noqa: E731
    print(json.dumps({"count": ms(t0, t1), "start": ms(t1, t2), "merges": ms(t2, t3), "model": ms(t3, t4),
                      "total": ms(t0, t4), "steps": steps, "counts": counts}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=20, help="size of the English sample (default 20)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of one run per thread count (default 3)")
    ap.add_argument("--step", type=int, default=256,
                    help="merges per timed step (default 256; each step is a call into Rust whose own cost, "
                         "tens of microseconds, adds up over small steps)")
    ap.add_argument("--worker", nargs=2, metavar=("PATH", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.step)
        return
    with tempfile.TemporaryDirectory() as tmp:
        train_path, _, desc = build_sample(args.mb, Path(tmp))
        print(f"sample: {desc}", flush=True)
        runs: dict[int, list[dict]] = {1: [], 2: []}
        for r in range(args.rounds):
            for threads in (1, 2):
                out = subprocess.run([sys.executable, __file__, "--worker", str(train_path), str(threads), "--step", str(args.step)],
                                     check=True, capture_output=True, text=True).stdout
                runs[threads].append(json.loads(out.strip().splitlines()[-1]))
            print(f"round {r + 1}: 1 thread {runs[1][-1]['total']:.0f} ms, 2 threads {runs[2][-1]['total']:.0f} ms", flush=True)
    med = lambda threads, f: statistics.median(f(run) for run in runs[threads])  # noqa: E731
    print(f"\n| phase | 1 thread ms | 2 threads ms | 1 / 2 |\n|---|---:|---:|---:|")
    rows = [(name, (lambda run, k=name: run[k])) for name in ("count", "start")]
    counts = runs[1][0]["counts"]
    for lo, hi in zip(RANGES, RANGES[1:]):
        if lo >= len(counts):
            break
        hi = min(hi, len(counts))
        label = f"merges {lo:,}-{hi:,} (counts {counts[lo]:,}-{counts[hi - 1]:,})"
        rows.append((label, (lambda run, lo=lo, hi=hi: sum(t for at, t in run["steps"] if lo <= at < hi))))
    rows += [(name, (lambda run, k=name: run[k])) for name in ("model", "total")]
    for label, f in rows:
        one, two = med(1, f), med(2, f)
        print(f"| {label} | {one:.1f} | {two:.1f} | {one / two:.2f}x |")
    print("\n(ratios of the rounds' totals: " + ", ".join(f"{a['total'] / b['total']:.2f}x" for a, b in zip(runs[1], runs[2])) + ")")


if __name__ == "__main__":
    main()
