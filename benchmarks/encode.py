"""Encoding throughput of toksmith against exact peers, on real text and on worst cases.

    .venv/bin/python benchmarks/encode.py [--mb N] [--quick] [--tokenizers cl100k_base,o200k_base]
                                          [--with-regex] [--no-worst | --worst-only]

See benchmarks/README.md for the method and results.

Corpora (all read locally, nothing is downloaded):
  - english:  an N MB sample (default 20) of ../shared/data/corpora/en/*.xz, an equal share of
              each file from its start, cut at a line end;
  - handbook: the Debian Handbook in several scripts (../shared/data/corpora/debian-handbook);
  - python:   Python source, the standard library's *.py files in sorted order.

Peers, each checked to give exactly the same ids as toksmith on the whole text before it is
timed (a peer that differs is reported and left out):
  - tiktoken, built from the same .tiktoken file as toksmith;
  - bpe-openai and quicktok (PyPI: bpe-openai, quicktok-v1), with their bundled vocabularies,
    if installed;
  - Hugging Face tokenizers, on the tokenizer.json that toksmith exports for the encoding (none
    ships in the shared data); the ids check shows it is equivalent. Its batch API runs on its own
    rayon pool: RAYON_NUM_THREADS is set to 2 at start-up.

Timings are the best of --repeat runs (3 by default). "1 thread": each document encoded in turn
on the calling thread. "2 threads": the batch APIs over 2 threads, on documents of --batch-kb KB.
The runs go in rounds (every encoder once, 1 thread then 2 threads, then the next round), and
each ratio is given twice: as the ratio of the best times, and as the median over the rounds of
the ratio within one round ("paired"). This machine's speed drifts by up to 2x between minutes:
a ratio of best times can set one encoder's lucky minute against another's usual one, while the
runs of one round are seconds apart. The targets are read on both.
Worst cases (1 MB of one pathological input each, best of 3 like English) run in subprocesses with a time limit, since
backtracking regexes and quadratic merges can take very long, or crash, on them. Their time per
byte is compared with the same encoder's on the English text, timed in that subprocess right
before each run of the case (the machine's speed drifts between minutes): best against best,
and the median of the 3 paired ratios.
--with-regex adds "toksmith-regex": toksmith with its pre-tokenization on fancy-regex instead of
the hand-written scanners (the same regex spelled "(?:...)", which is not recognised as a named
pattern), to measure what the scanners bring.
"""

from __future__ import annotations

import argparse
import glob
import lzma
import os
import queue
import random
import statistics
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TOKSMITH_DATA_DIR", ROOT.parent / "shared" / "data"))
TIKTOKEN_DIR = DATA / "tokenizers" / "tiktoken"
MB = 1 << 20

HANDBOOK_LANGS = ["en-US", "de-DE", "vi-VN", "ru-RU", "el-GR", "ar-MA", "fa-IR", "ja-JP", "zh-CN", "ko-KR"]
WORST_CASES = ["a", "^", "digits", "spaces", "latin1", "chinese"]


# ---------------------------------------------------------------------------- text


def read_xz(path: Path, max_bytes: int) -> str:
    """The first `max_bytes` bytes of an .xz text file, cut at the last line end."""
    with lzma.open(path, "rb") as fh:
        data = fh.read(max_bytes)
    if len(data) == max_bytes:
        data = data[: data.rfind(b"\n") + 1]
    return data.decode("utf-8", errors="replace")


def english(mb: float) -> tuple[str, str]:
    files = sorted((DATA / "corpora" / "en").glob("*.xz"))
    if not files:
        sys.exit(f"no English corpora under {DATA}/corpora/en")
    share = int(mb * MB / len(files))
    parts = [read_xz(f, share) for f in files]
    text = "".join(parts)
    used = ", ".join(f"{f.name} ({len(p.encode()) / MB:.1f})" for f, p in zip(files, parts))
    return text, f"english: {len(text.encode()) / MB:.1f} MB from {used}"


def handbook(mb_per_lang: float) -> tuple[str, str]:
    parts = []
    for lang in HANDBOOK_LANGS:
        path = DATA / "corpora" / "debian-handbook" / f"{lang}.txt.xz"
        if path.exists():
            parts.append((lang, read_xz(path, int(mb_per_lang * MB))))
    text = "".join(p for _, p in parts)
    used = ", ".join(f"{lang} ({len(p.encode()) / MB:.1f})" for lang, p in parts)
    return text, f"handbook: {len(text.encode()) / MB:.1f} MB from {used}"


def python_source(mb: float) -> tuple[str, str]:
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(f for f in glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True) if "site-packages" not in f)
    parts, size = [], 0
    for f in files:
        if size >= mb * MB:
            break
        try:
            src = Path(f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(src)
        size += len(src.encode())
    text = "".join(parts)
    return text, f"python: {len(text.encode()) / MB:.1f} MB, the first {len(parts)} *.py files of {stdlib}"


def documents(text: str, max_bytes: int) -> list[str]:
    """`text` cut at line ends into pieces of at most about `max_bytes` (bytes ~ chars here)."""
    docs, start = [], 0
    while start < len(text):
        end = min(len(text), start + max_bytes)
        if end < len(text):
            nl = text.rfind("\n", start, end)
            end = nl + 1 if nl > start else end
        docs.append(text[start:end])
        start = end
    return docs


def worst_case(name: str, size: int) -> str:
    rng = random.Random(0)
    if name == "a":
        return "a" * size
    if name == "^":
        return "^" * size
    if name == "digits":
        return "".join(rng.choice("0123456789") for _ in range(size))
    if name == "spaces":
        return " " * size
    if name == "latin1":  # printable Latin-1: letters, punctuation, NBSP, no spaces otherwise
        alphabet = [chr(c) for c in range(0x21, 0x7F)] + [chr(c) for c in range(0xA0, 0x100)]
        return "".join(rng.choice(alphabet) for _ in range(size // 2))
    if name == "chinese":  # CJK unified ideographs, 3 bytes each, no spaces
        return "".join(chr(rng.randrange(0x4E00, 0x9FA6)) for _ in range(size // 3))
    raise ValueError(name)


# ---------------------------------------------------------------------------- encoders


class Encoder:
    """One library's single-thread and 2-thread encode calls, giving lists of ids."""

    def __init__(self, name, encode, batch=None, note="", reset=None):
        self.name, self.encode, self.batch, self.note = name, encode, batch, note
        # Called before each timed run: toksmith empties its chunk caches, so that every run
        # starts cold instead of reusing what the previous run over the same text memoised.
        self.reset = reset or (lambda: None)


def tiktoken_encoding(name: str):
    import tiktoken
    import tiktoken_ext.openai_public as public
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(TIKTOKEN_DIR / f"{name}.tiktoken"))
    original = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *a, **k: ranks  # tiktoken's constants, the local ranks file
    try:
        params = getattr(public, name)()
    finally:
        public.load_tiktoken_bpe = original
    return tiktoken.Encoding(params["name"], pat_str=params["pat_str"], mergeable_ranks=ranks,
                             special_tokens=params["special_tokens"])


def load_toksmith(tok_name: str) -> Encoder:
    import toksmith

    ours = toksmith.load(tok_name, tiktoken_dir=str(TIKTOKEN_DIR))
    return Encoder("toksmith", ours.encode_ordinary,
                   lambda docs: ours.encode_batch(docs, num_threads=2, disallowed_special=()),
                   reset=toksmith._core.clear_chunk_caches)


def load_toksmith_regex(tok_name: str) -> Encoder:
    """toksmith as before the scanners: the same regex, spelled `(?:...)` so that it is not
    recognised as a named pattern and runs on fancy-regex."""
    import toksmith
    from toksmith.formats.tiktoken import ENCODINGS
    from toksmith.patterns import resolve

    regex = resolve(ENCODINGS[tok_name][1])[1]
    ours = toksmith.load(tok_name, tiktoken_dir=str(TIKTOKEN_DIR), pattern=f"(?:{regex})")
    return Encoder("toksmith-regex", ours.encode_ordinary,
                   lambda docs: ours.encode_batch(docs, num_threads=2, disallowed_special=()),
                   "toksmith with fancy-regex pre-tokenization instead of the scanner (the state before it)",
                   reset=toksmith._core.clear_chunk_caches)


def load_tiktoken(tok_name: str) -> Encoder:
    tt = tiktoken_encoding(tok_name)
    return Encoder("tiktoken", tt.encode_ordinary, lambda docs: tt.encode_ordinary_batch(docs, num_threads=2),
                   "built from the same .tiktoken file")


def load_bpe_openai(tok_name: str) -> Encoder:
    from concurrent.futures import ThreadPoolExecutor

    import bpe_openai

    raw = bpe_openai.get_encoding(tok_name)._backend.encode  # the Rust call; the wrapper refuses >= 1M chars

    def batch(docs):
        with ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(raw, docs))

    return Encoder("bpe-openai", raw, batch, "bundled vocabulary; 2 threads = a Python thread pool over its encode")


def load_quicktok(tok_name: str) -> Encoder:
    import quicktok

    qt = quicktok.get_encoding(tok_name)
    return Encoder("quicktok", qt.encode_ordinary, lambda docs: qt.encode_batch(docs, 2),
                   "bundled vocabulary; its batch returns one numpy array, not lists")


def load_hf_tokenizers(tok_name: str) -> Encoder:
    """Hugging Face tokenizers on the encoding written as tokenizer.json by toksmith (no such file
    ships in the shared data); the ids check before timing proves the file is equivalent."""
    import tempfile

    import toksmith
    from tokenizers import Tokenizer

    path = Path(tempfile.mkdtemp()) / f"{tok_name}.json"
    toksmith.load(tok_name, tiktoken_dir=str(TIKTOKEN_DIR)).save(path, format="hf")
    hf = Tokenizer.from_file(str(path))
    return Encoder("hf-tokenizers", lambda d: hf.encode(d, add_special_tokens=False).ids,
                   lambda docs: [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)],
                   "tokenizer.json exported by toksmith; its batch uses its own thread pool (RAYON_NUM_THREADS=2)")


LOADERS = {"toksmith": load_toksmith, "toksmith-regex": load_toksmith_regex, "tiktoken": load_tiktoken,
           "bpe-openai": load_bpe_openai, "quicktok": load_quicktok, "hf-tokenizers": load_hf_tokenizers}
PIP_NAMES = {"tiktoken": "tiktoken", "bpe-openai": "bpe-openai", "quicktok": "quicktok-v1", "hf-tokenizers": "tokenizers"}


def make_encoders(tok_name: str, messages: list[str], only: str | None = None, with_regex: bool = False) -> list[Encoder]:
    """toksmith first, then every peer that can be loaded (or just the encoder named `only`)."""
    encoders = []
    for name, load in LOADERS.items():
        if only not in (None, name) or (name == "toksmith-regex" and not with_regex and only is None):
            continue
        try:
            encoders.append(load(tok_name))
        except ImportError:
            if name.startswith("toksmith"):
                raise
            messages.append(f"{name}: not installed (pip install {PIP_NAMES[name]}); skipped")
        except Exception as e:  # noqa: BLE001 - a peer that cannot load is reported and skipped
            if name.startswith("toksmith"):
                raise
            messages.append(f"{name}: cannot load {tok_name} ({type(e).__name__}: {e}); skipped")
    return encoders


def flatten_batch(result) -> list[list[int]]:
    if isinstance(result, tuple):  # quicktok: (tokens, offsets)
        tokens, offsets = result
        tokens = tokens.tolist()
        return [tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    return [list(r) for r in result]


def round_trip_ns() -> float:
    """Nanoseconds for a flag to go to another thread and back (toksmith's measure): on a virtual
    machine it moves as the host moves the cores, and every 2-thread batch speed with it."""
    from toksmith import _core

    return _core.thread_round_trip_ns()


def best_time(fn, repeat: int, reset=lambda: None) -> float:
    best = float("inf")
    for _ in range(repeat):
        reset()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ---------------------------------------------------------------------------- worst cases


def worker(enc_name: str, tok_name: str, size: int, english_mb: float, cases: list[str]) -> None:
    """Subprocess: encodes each worst case (best of 3, each run cold like the English runs it
    is compared with) and prints `case seconds english-seconds-per-byte` (or `case error
    message`) as it goes. Each run of a case follows a run over the English documents, so the
    English reference is timed in the same minutes as the case: this machine's speed drifts
    by up to 2x from one minute to the next, and a ratio of two times taken minutes apart
    would measure that drift as much as the encoder."""
    enc = make_encoders(tok_name, [], only=enc_name)[0]
    enc.encode("warm-up: lazily built tables are not part of any case")
    text, _ = english(english_mb)
    english_bytes, docs = len(text.encode()), documents(text, 256 * 1024)
    print("ready", flush=True)
    for case in cases:
        text = worst_case(case, size)
        best, best_english, paired = float("inf"), float("inf"), []
        n = len(text.encode())
        try:
            for _ in range(3):
                english_time = best_time(lambda: [enc.encode(d) for d in docs], 1, enc.reset)
                case_time = best_time(lambda: enc.encode(text), 1, enc.reset)
                best_english, best = min(best_english, english_time), min(best, case_time)
                paired.append((case_time / n) / (english_time / english_bytes))
        except BaseException as e:  # noqa: BLE001 - also a Rust panic (pyo3's PanicException)
            message = f"{type(e).__name__}: {e}".replace("\n", " ")
            print(case, "error", message[:120], flush=True)
            continue
        print(case, best, best_english / english_bytes, statistics.median(paired), flush=True)


def run_worst_cases(enc_name: str, tok_name: str, size: int, english_mb: float, limit: float) -> dict[str, tuple[float, float, float] | str]:
    """Per case (seconds, seconds per byte of English timed next to it, median of the paired
    ratios of time per byte), or why there is no
    time: "timeout" (killed after `limit` seconds), "error: ..." (the encoder failed on it) or
    "crash" (the process died)."""
    results: dict[str, tuple[float, float, float] | str] = {}
    remaining = list(WORST_CASES)
    while remaining:
        cmd = [sys.executable, __file__, "--worker", enc_name, tok_name, str(size), str(english_mb), *remaining]
        # stderr is dropped: panicking Rust extensions print long backtraces there.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put(None)], daemon=True).start()
        if lines.get(timeout=300) is None:  # "ready" after loading the tokenizer, or None if it died
            return {case: "crash" for case in remaining} | results
        while remaining:
            try:
                line = lines.get(timeout=limit)
            except queue.Empty:
                results[remaining.pop(0)] = "timeout"  # too slow: kill it, go on with the next case
                proc.kill()
                proc.wait()
                break
            if line is None:
                results[remaining.pop(0)] = "crash"
                break
            case, value = line.rstrip("\n").split(" ", 1)
            results[case] = tuple(map(float, value.split())) if not value.startswith("error") else value
            remaining.remove(case)
        else:
            proc.wait()
    return results


def describe(result: float | str, limit: float, short: bool = False) -> str:
    if isinstance(result, float):
        return f"{result:.3f} s"
    if result == "timeout":
        return f"> {limit:.0f} s"
    if short and result.startswith("error "):  # "error ExceptionType: message" -> "error (ExceptionType)"
        return f"error ({result.split()[1].rstrip(':')})"
    return result


# ---------------------------------------------------------------------------- main


def fmt_ratio(ours: float | None, theirs: float) -> str:
    """toksmith's speed over the peer's: above 1 means toksmith is faster."""
    return "-" if not ours else f"{ours / theirs:.2f}x"


def paired_ratio(slow: list[float] | None, fast: list[float] | None) -> str:
    """The median over the rounds of slow / fast (seconds of one round each)."""
    return "-" if not slow or not fast else f"{statistics.median(a / b for a, b in zip(slow, fast)):.2f}x"


def main() -> None:
    os.environ.setdefault("RAYON_NUM_THREADS", "2")  # HF tokenizers' batch pool: 2 threads like the others
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=20, help="MB of English text (default 20)")
    ap.add_argument("--quick", action="store_true", help="small texts, one run each, 100 KB worst cases")
    ap.add_argument("--tokenizers", default="cl100k_base,o200k_base")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of runs (default 3; 1 with --quick)")
    ap.add_argument("--batch-kb", type=int, default=4, help="document size for the 2-thread batch (default 4 KB)")
    ap.add_argument("--no-worst", action="store_true", help="skip the worst cases")
    ap.add_argument("--worst-only", action="store_true", help="only the worst cases (English is still timed: it is their reference)")
    ap.add_argument("--worst-limit", type=float, default=60, help="seconds allowed per worst case (default 60)")
    ap.add_argument("--with-regex", action="store_true",
                    help="also time toksmith with fancy-regex pre-tokenization (as before the scanners)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        enc_name, tok_name, size, *cases = args.worker
        english_mb, *cases = cases
        worker(enc_name, tok_name, int(size), float(english_mb), cases)
        return

    mb = 2 if args.quick and args.mb == 20 else args.mb
    repeat = 1 if args.quick else args.repeat
    worst_size = 100_000 if args.quick else MB
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; best of {repeat} run(s)")
    corpora = [english(mb), handbook(0.25 if args.quick else 1.0), python_source(1 if args.quick else 8)]
    if args.worst_only:
        corpora = corpora[:1]
    for _, desc in corpora:
        print("corpus", desc)

    table = []  # (tokenizer, corpus, encoder, MB/s 1 thread, MB/s 2 threads, seconds per round 1t, 2t)
    worst_table = []  # (tokenizer, encoder, case, seconds or why not, (relative time per byte: best, paired median))
    for tok_name in args.tokenizers.split(","):
        messages: list[str] = []
        encoders = make_encoders(tok_name, messages, with_regex=args.with_regex)
        print(f"\n## {tok_name}")
        for m in messages:
            print("  note:", m)
        for e in encoders:
            if e.note:
                print(f"  note: {e.name}: {e.note}")
        for text, desc in corpora:
            corpus = desc.split(":")[0]
            size = len(text.encode())
            docs = documents(text, 256 * 1024)
            small = documents(text, args.batch_kb * 1024)
            expected = [encoders[0].encode(d) for d in docs]
            expected_small = [encoders[0].encode(d) for d in small]
            timed = []
            for e in encoders:
                bad = sum(e.encode(d) != x for d, x in zip(docs, expected))
                bad_small = sum(g != x for g, x in zip(flatten_batch(e.batch(small)), expected_small))
                if bad or bad_small:
                    print(f"  MISMATCH {e.name} on {corpus}: {bad}/{len(docs)} documents, "
                          f"{bad_small}/{len(small)} batch documents differ from toksmith; left out")
                else:
                    timed.append(e)
            # Runs interleave the encoders, so that a busy spell of the machine hits all alike.
            t1: dict[str, list[float]] = {e.name: [] for e in timed}  # seconds, one per round
            t2: dict[str, list[float]] = {e.name: [] for e in timed}
            trips = []  # the core-to-core round trip before each round (see round_trip_ns)
            for _ in range(repeat):
                trips.append(round_trip_ns())
                for e in timed:
                    t1[e.name].append(best_time(lambda: [e.encode(d) for d in docs], 1, e.reset))
                    t2[e.name].append(best_time(lambda: e.batch(small), 1, e.reset))
            print(f"  {corpus:9} core-to-core round trip before each round: "
                  + ", ".join(f"{t:.0f}" for t in trips) + " ns", flush=True)
            for e in timed:
                a, b = min(t1[e.name]), min(t2[e.name])
                table.append((tok_name, corpus, e.name, size / MB / a, size / MB / b, t1[e.name], t2[e.name]))
                print(f"  {corpus:9} {e.name:11} 1 thread {size / MB / a:7.1f} MB/s   "
                      f"2 threads {size / MB / b:7.1f} MB/s   ({len(small)} batch docs)", flush=True)
        if args.no_worst:
            continue
        for e in encoders:
            if e.name == "hf-tokenizers":  # a general pipeline, not a BPE encoder the targets name
                continue
            results = run_worst_cases(e.name, tok_name, worst_size, mb, args.worst_limit)
            for case in WORST_CASES:
                r = results.get(case, "crash")
                n = len(worst_case(case, worst_size).encode())
                rel = None
                if isinstance(r, tuple):
                    r, ref, paired = r  # the English timed next to this case
                    rel = (r / n / ref, paired)
                worst_table.append((tok_name, e.name, case, r, rel))
                rel_shown = f"{rel[0]:7.1f}x English per byte (paired median {rel[1]:.1f}x)" if rel else ""
                print(f"  worst {case:7} {e.name:14} {describe(r, args.worst_limit):>12}  {rel_shown}", flush=True)

    print("\n### Throughput (MB/s, best run; ratio = toksmith's speed / the peer's: above 1 means toksmith is faster;"
          " of the best runs, then the median of the ratios within a round; toksmith's own row: 2 threads / 1 thread)\n")
    print("| tokenizer | corpus | encoder | 1 thread MB/s | 2 threads MB/s | ratio 1t | paired 1t | ratio 2t | paired 2t |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    ours = {(t, c): (a, b, r1, r2) for t, c, e, a, b, r1, r2 in table if e == "toksmith"}
    for t, c, e, a, b, s1, s2 in table:
        oa, ob, o1, o2 = ours.get((t, c), (None, None, None, None))
        if e == "toksmith":  # its batch against its own single thread
            cells = [f"{b / a:.2f}x", paired_ratio(s1, s2), "", ""]
        else:
            cells = [fmt_ratio(oa, a), paired_ratio(s1, o1), fmt_ratio(ob, b), paired_ratio(s2, o2)]
        print(f"| {t} | {c} | {e} | {a:.1f} | {b:.1f} | " + " | ".join(cells) + " |")
    if worst_table:
        size_label = "100 KB" if args.quick else "1 MB"
        print(f"\n### Worst cases ({size_label} each, best of 3 single calls; time per byte relative to the same encoder on English timed next to each case:"
              " best against best; median of the 3 paired ratios)\n")
        print("| tokenizer | encoder | " + " | ".join(WORST_CASES) + " |")
        print("|---|---|" + "---:|" * len(WORST_CASES))
        rows: dict[tuple[str, str], dict[str, str]] = {}
        for t, e, case, r, rel in worst_table:
            cell = describe(r, args.worst_limit, short=True) + (f" ({rel[0]:.1f}x; {rel[1]:.1f}x)" if rel else "")
            rows.setdefault((t, e), {})[case] = cell
        for (t, e), cells in rows.items():
            print(f"| {t} | {e} | " + " | ".join(cells.get(c, "") for c in WORST_CASES) + " |")


if __name__ == "__main__":
    main()
