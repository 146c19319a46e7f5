"""Encoding throughput of the GGUF vocabularies in ../shared/data/tokenizers/gguf.

    .venv/bin/python benchmarks/encode_gguf.py            # 1 MB of English, 1 MB of the Handbook
    .venv/bin/python benchmarks/encode_gguf.py --mb 2 --only falcon,mpt

No library that runs GGUF vocabularies is installed here (llama.cpp's own tokenizer is C++),
so the peer of each byte-level BPE vocabulary (split as llama.cpp's `unicode_regex_split` does,
by one or several regexes: GPT-2, Llama 3, DeepSeek, Falcon, MPT, StarCoder...) is toksmith's own
Python splitter (`llama_cpp_pre.split_in_python`, the reference the Rust one is tested
against): the same documents are encoded both ways, the ids compared, then both timed, best of
--repeat, caches emptied before each run. Exactness against llama.cpp itself is
tests/test_gguf_vectors.py (its test vectors). Text: the English sample of
benchmarks/encode.py (an equal share of each corpora/en file) and the Debian Handbook (an equal
share of ten languages), in documents of about 4 KB.
"""

from __future__ import annotations

import argparse
import lzma
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode import DATA, documents, english, handbook  # noqa: E402

import toksmith  # noqa: E402
from toksmith.formats import llama_cpp_pre  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        toksmith._core.clear_chunk_caches()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=1.0, help="MB of each text")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated vocabulary names (ggml-vocab-NAME.gguf.xz)")
    args = ap.parse_args()
    folder = DATA / "tokenizers" / "gguf"
    paths = sorted(folder.glob("ggml-vocab-*.gguf.xz"))
    if args.only:
        wanted = set(args.only.split(","))
        paths = [p for p in paths if p.name[len("ggml-vocab-"):-len(".gguf.xz")] in wanted]
    if not paths:
        sys.exit(f"no GGUF vocabularies under {folder}")
    texts = [("english", english(args.mb)[0]), ("handbook", handbook(args.mb / 10)[0])]
    print(f"texts: {', '.join(f'{n} {len(t.encode()) / 1e6:.1f} MB' for n, t in texts)}; 4 KB documents\n")
    print("| vocabulary | pre-tokenizer | text | toksmith MB/s | Python splitter MB/s | ratio |")
    print("|---|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            name = path.name[len("ggml-vocab-"):-len(".gguf.xz")]
            plain = Path(tmp) / f"{name}.gguf"
            plain.write_bytes(lzma.open(path).read())
            tok = toksmith.load(str(plain))
            model = tok.pipeline.model
            # llama.cpp's BPE types split with `llama_cpp_pre` (all their text but the ASCII
            # lines of the one-regex types GPT-2, Llama 3 and Qwen 2, which a scanner splits).
            splits = getattr(model, "regexes", None) is not None
            pre = getattr(getattr(model, "pre", None), "type", tok.metadata.get("model", "?"))
            for label, text in texts:
                docs = documents(text, 4096)
                mb = sum(len(d.encode()) for d in docs) / 1e6
                run = lambda: [tok.encode(d, add_special_tokens=False, disallowed_special=()) for d in docs]  # noqa: E731
                ids = run()
                ours = mb / best(run, args.repeat)
                peer_cell = ratio_cell = ""
                if splits:
                    original = llama_cpp_pre.rust_splitter
                    llama_cpp_pre.rust_splitter = lambda regexes: None  # the Python splitter
                    try:
                        if run() != ids:
                            print(f"| {name} | {pre} | {label} | MISMATCH with the Python splitter | | |")
                            continue
                        peer = mb / best(run, 1)
                    finally:
                        llama_cpp_pre.rust_splitter = original
                    peer_cell, ratio_cell = f"{peer:.1f}", f"{ours / peer:.1f}x"
                print(f"| {name} | {pre} | {label} | {ours:.1f} | {peer_cell} | {ratio_cell} |", flush=True)


if __name__ == "__main__":
    main()
