"""Load time and resident memory of a tiktoken encoding: toksmith vs tiktoken.

    .venv/bin/python benchmarks/load.py [--encodings o200k_base cl100k_base] [--repeat 3]

Each load runs in a fresh subprocess (so the memory is that load's alone): the time of building
the encoder from the shared ``.tiktoken`` file, then one short encode (so lazily built tables
count), and the process's peak RSS (``VmHWM``) minus its RSS before the load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TOKSMITH_DATA_DIR", ROOT.parent / "shared" / "data"))
TIKTOKEN_DIR = DATA / "tokenizers" / "tiktoken"

WORKER = r"""
import json, sys, time
def vm(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
lib, name, directory, benchmarks = sys.argv[1:5]
if lib == "toksmith":
    import toksmith
    load = lambda: toksmith.load(name, tiktoken_dir=directory)
else:
    import tiktoken
    sys.path.insert(0, benchmarks)
    from encode import tiktoken_encoding  # tiktoken's constants, the shared ranks file
    load = lambda: tiktoken_encoding(name)
before = vm("VmRSS")
start = time.perf_counter()
enc = load()
enc.encode_ordinary("Hello world, loading is done.")
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "rss": vm("VmHWM") - before}))
"""


def measure(lib: str, name: str) -> dict:
    out = subprocess.run([sys.executable, "-c", WORKER, lib, name, str(TIKTOKEN_DIR), str(Path(__file__).parent)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encodings", nargs="+", default=["o200k_base", "cl100k_base"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print("| encoding | library | load s (best) | added peak RSS MB |")
    print("|---|---|---|---|")
    for name in args.encodings:
        for lib in ("toksmith", "tiktoken"):
            runs = [measure(lib, name) for _ in range(args.repeat)]
            secs = min(r["seconds"] for r in runs)
            rss = min(r["rss"] for r in runs) / 1e6
            print(f"| {name} | {lib} | {secs:.2f} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()
