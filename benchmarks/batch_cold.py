"""How much of toksmith's encoding time goes to filling its chunk caches, single thread and batch.

    .venv/bin/python benchmarks/batch_cold.py [--tokenizers o200k_base,cl100k_base] [--mb 20] [--rounds 2]

On the English sample of benchmarks/encode.py: "1t" encodes 256 KB documents one by one on the
calling thread, "2t" runs encode_batch over 4 KB documents on 2 threads (as encode.py does).
"cold" empties every thread's chunk caches before each run (as encode.py's timings do); "warm"
runs again over the same text with the caches kept. Each batch thread has caches of its own,
so cold, both threads pay the first encoding of the common words: the gap between the cold
and warm ratios is what sharing them could gain. Best of 3 runs per cell; the rounds repeat
the whole row, since this machine's speed drifts between minutes.
"""

import argparse

import encode as E  # the sample and documents of the encode benchmark

import toksmith


def best(fn, cold: bool) -> float:
    """encode.py's best of 3, the caches emptied before each run when `cold`."""
    return E.best_time(fn, 3, toksmith._core.clear_chunk_caches if cold else lambda: None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizers", default="o200k_base,cl100k_base")
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    text, about = E.english(args.mb)
    docs, small = E.documents(text, 256 * 1024), E.documents(text, 4 * 1024)
    print(about)
    print("| tokenizer | round | 1t cold ms | 1t warm ms | 2t cold ms | 2t warm ms | 2t/1t cold | 2t/1t warm |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in args.tokenizers.split(","):
        tok = toksmith.load(name, tiktoken_dir=str(E.TIKTOKEN_DIR))
        one = lambda: [tok.encode_ordinary(d) for d in docs]  # noqa: E731
        two = lambda: tok.encode_batch(small, num_threads=2, disallowed_special=())  # noqa: E731
        for r in range(args.rounds):
            c1, w1, c2, w2 = best(one, True), best(one, False), best(two, True), best(two, False)
            print(f"| {name} | {r + 1} | {c1 * 1e3:.0f} | {w1 * 1e3:.0f} | {c2 * 1e3:.0f} | {w2 * 1e3:.0f} "
                  f"| {c1 / c2:.2f}x | {w1 / w2:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
