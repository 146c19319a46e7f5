"""Subword training benchmark: toksmith's Unigram vs SentencePiece, WordPiece vs Hugging Face.

Every trainer runs in its own process, single-threaded, so that its time and peak RSS are its
own. Wall time and CPU time are both reported (the machine may be shared: CPU time is the
steadier figure). Compression is measured on held-out text that no trainer saw, each
tokenizer encoding it line by line with its own library:

- **unigram**: vocabulary 32,000 on the 20 MB English sample of ``benchmarks/train.py``
  (``build_sample``); bytes per token, and the average log-likelihood per token of the Viterbi
  segmentation under each model's own scores (unknown token: lowest score minus 10).
- **botchan**: vocabulary 1,000 on ``botchan.txt``, against the shared
  ``botchan_en_unigram_1000.model`` trained by SentencePiece on the same text (vocabulary
  overlap, bytes per token per line) and against SentencePiece trained here.
- **ja**: vocabulary 8,000 on the Japanese Debian handbook (90% / 10% held out), toksmith vs
  SentencePiece trained here; the shared ``kyoto_ja_unigram_8000.model`` (trained on Kyoto
  Wikipedia text, not available here) encodes the same held-out text for reference.
- **wordpiece**: vocabulary 30,522 on the 20 MB sample: toksmith (the ratio criterion, the
  default, and the likelihood-gain criterion) vs Hugging Face's ``WordPieceTrainer`` (frequency
  BPE with ``##``), all with BERT's normalizer and pre-tokenizer: time, vocabulary overlap,
  bytes per token.

    .venv/bin/python benchmarks/train_subword.py                   # all four
    .venv/bin/python benchmarks/train_subword.py --only unigram botchan
    .venv/bin/python benchmarks/train_subword.py --mb 100          # a larger English sample

``benchmarks/train.py --algorithm unigram`` runs unigram, botchan and ja; ``--algorithm
wordpiece`` runs wordpiece.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import DATA, build_sample  # noqa: E402  (the same English sample as the BPE benchmark)

BENCHES = ["unigram", "botchan", "ja", "wordpiece"]
UNK_PENALTY = 10.0


def held_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---------------------------------------------------------------- workers (one per process)


def work_unigram_toksmith(train: Path, held: Path, vocab: int, out: Path, options: dict) -> dict:
    from toksmith.train_subword import train_unigram, unigram_nbest

    cpu, start = time.process_time(), time.perf_counter()
    tok = train_unigram(train, vocab_size=vocab, num_threads=1, **options)
    figures = {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}
    tokens, loglik = 0, 0.0
    for line in held_lines(held):
        ids, score = unigram_nbest(tok, line, 1, disallowed_special=())[0]
        tokens += len(ids)
        loglik += score
    pieces = [tok.id_to_token(i) for i in range(tok.vocab_size)]
    out.write_text(json.dumps(pieces), encoding="utf-8")
    return {**figures, "tokens": tokens, "loglik": loglik, "vocab": tok.vocab_size}


def work_unigram_sentencepiece(train: Path, held: Path, vocab: int, out: Path, options: dict) -> dict:
    import sentencepiece as spm

    prefix = str(out.with_suffix(""))
    cpu, start = time.process_time(), time.perf_counter()
    spm.SentencePieceTrainer.train(input=str(train), model_prefix=prefix, vocab_size=vocab, model_type="unigram",
                                   num_threads=1, minloglevel=2, **options)
    figures = {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    figures.update(spm_figures(sp, held))
    out.write_text(json.dumps([sp.id_to_piece(i) for i in range(sp.get_piece_size())]), encoding="utf-8")
    return figures


def spm_figures(sp, held: Path) -> dict:
    """Tokens of the held-out lines and the log-likelihood of their Viterbi segmentations: the
    sum of the pieces' scores, the unknown token scoring the lowest piece score minus 10 as in
    SentencePiece's lattice."""
    scores = [sp.get_score(i) for i in range(sp.get_piece_size())]
    normal = [s for i, s in enumerate(scores) if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i))]
    scores[sp.unk_id()] = min(normal) - UNK_PENALTY
    lines = held_lines(held)
    encoded = sp.encode(lines)
    return {"tokens": sum(map(len, encoded)), "loglik": sum(scores[i] for ids in encoded for i in ids),
            "vocab": sp.get_piece_size()}


def work_wordpiece_toksmith(train: Path, held: Path, vocab: int, out: Path, options: dict) -> dict:
    from toksmith.train_subword import train_wordpiece

    cpu, start = time.process_time(), time.perf_counter()
    tok = train_wordpiece(train, vocab_size=vocab, num_threads=1, **options)
    figures = {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}
    tokens = sum(len(tok.encode_ordinary(line)) for line in held_lines(held))
    out.write_text(json.dumps(list(tok.pipeline.model.get_vocab())), encoding="utf-8")
    return {**figures, "tokens": tokens, "vocab": tok.vocab_size}


def work_wordpiece_hf(train: Path, held: Path, vocab: int, out: Path, options: dict) -> dict:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab, min_frequency=options.get("min_frequency", 2),
                                        special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"],
                                        show_progress=False)
    cpu, start = time.process_time(), time.perf_counter()
    tok.train([str(train)], trainer)
    figures = {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}
    tokens = sum(len(e.ids) for e in tok.encode_batch(held_lines(held), add_special_tokens=False))
    out.write_text(json.dumps(list(tok.get_vocab())), encoding="utf-8")
    return {**figures, "tokens": tokens, "vocab": tok.get_vocab_size()}


def run_worker(name: str, train: Path, held: Path, vocab: int, out: Path, options: dict) -> dict:
    """Runs one trainer in a child process; returns its figures plus peak RSS (MB)."""
    env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, __file__, "--worker", name, "--train-file", str(train), "--held-file", str(held),
           "--vocab", str(vocab), "--out", str(out), "--options", json.dumps(options)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["rss_mb"] = result.pop("rss_kb") / 1024
    return result


# ---------------------------------------------------------------- reporting


def held_bytes(path: Path) -> int:
    return sum(len(line.encode("utf-8")) for line in held_lines(path))


def overlap(a: Path, b: Path, skip=("<unk>", "<s>", "</s>")) -> float:
    """Share of b's pieces (meta pieces aside) that a has too."""
    ours = set(json.loads(a.read_text(encoding="utf-8"))) - set(skip)
    theirs = set(json.loads(b.read_text(encoding="utf-8"))) - set(skip)
    return len(ours & theirs) / len(theirs)


def row(label: str, r: dict, size: int) -> str:
    if "error" in r:
        return f"| {label} | failed: {r['error']} |"
    ll = f"{r['loglik'] / r['tokens']:.4f}" if "loglik" in r else "-"
    return (f"| {label} | {r['seconds']:.2f} | {r['cpu']:.2f} | {r['rss_mb']:.0f} | {r['vocab']:,} | "
            f"{size / r['tokens']:.4f} | {ll} |")


HEADER = ("| trainer | wall s | CPU s | peak RSS MB | vocab | bytes/token (held-out) | log-lik/token |\n"
          "|---|---|---|---|---|---|---|")


def compare(label: str, ours: dict, theirs: dict, size: int) -> None:
    if "error" in ours or "error" in theirs:
        return
    speed = theirs["seconds"] / ours["seconds"]
    cpu = theirs["cpu"] / ours["cpu"]
    bpt = (size / ours["tokens"]) / (size / theirs["tokens"]) - 1
    print(f"\n{label}: toksmith {speed:.1f}x faster (wall), {cpu:.1f}x (CPU); "
          f"bytes/token {bpt * 100:+.2f}% vs the other")


def bench_unigram(tmp: Path, mb: float) -> None:
    train, held, description = build_sample(mb, tmp)
    size = held_bytes(held)
    print(f"## Unigram, vocabulary 32,000, single thread\n\ntraining sample: {description}\n"
          f"held-out: {size / 1e6:.2f} MB in non-empty lines\n")
    ours = run_worker("unigram_toksmith", train, held, 32000, tmp / "u_ours.json", {})
    theirs = run_worker("unigram_sentencepiece", train, held, 32000, tmp / "u_spm.json", {})
    print(HEADER)
    print(row("toksmith", ours, size))
    print(row("sentencepiece", theirs, size))
    compare("unigram 32k", ours, theirs, size)
    if "error" not in ours and "error" not in theirs:
        print(f"vocabulary overlap: {overlap(tmp / 'u_ours.json', tmp / 'u_spm.json') * 100:.1f}% of sentencepiece's pieces")


def bench_botchan(tmp: Path) -> None:
    import sentencepiece as spm

    path = DATA / "corpora" / "en" / "botchan.txt"
    shared = DATA / "tokenizers" / "sentencepiece" / "botchan_en_unigram_1000.model"
    if not path.exists() or not shared.exists():
        print("botchan: data not available")
        return
    size = held_bytes(path)
    print(f"\n## botchan.txt, vocabulary 1,000 (measured on the training text itself, per line)\n")
    ours = run_worker("unigram_toksmith", path, path, 1000, tmp / "b_ours.json", {})
    theirs = run_worker("unigram_sentencepiece", path, path, 1000, tmp / "b_spm.json", {})
    sp = spm.SentencePieceProcessor(model_file=str(shared))
    (tmp / "b_shared.json").write_text(json.dumps([sp.id_to_piece(i) for i in range(sp.get_piece_size())]))
    ref = spm_figures(sp, path)
    print(HEADER)
    print(row("toksmith", ours, size))
    print(row("sentencepiece (here)", theirs, size))
    print(f"| shared botchan_en_unigram_1000.model | - | - | - | {ref['vocab']:,} | {size / ref['tokens']:.4f} | "
          f"{ref['loglik'] / ref['tokens']:.4f} |")
    compare("botchan", ours, theirs, size)
    if "error" not in ours:
        print(f"vocabulary overlap with the shared model: toksmith {overlap(tmp / 'b_ours.json', tmp / 'b_shared.json') * 100:.1f}%"
              + (f", sentencepiece here {overlap(tmp / 'b_spm.json', tmp / 'b_shared.json') * 100:.1f}%"
                 if "error" not in theirs else ""))


def bench_ja(tmp: Path) -> None:
    import sentencepiece as spm

    source = DATA / "corpora" / "debian-handbook" / "ja-JP.txt.xz"
    shared = DATA / "tokenizers" / "sentencepiece" / "kyoto_ja_unigram_8000.model"
    if not source.exists():
        print("ja: data not available")
        return
    with lzma.open(source, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    cut = int(len(lines) * 0.9)
    train, held = tmp / "ja_train.txt", tmp / "ja_held.txt"
    train.write_text("\n".join(lines[:cut]) + "\n", encoding="utf-8")
    held.write_text("\n".join(lines[cut:]) + "\n", encoding="utf-8")
    size = held_bytes(held)
    print(f"\n## Japanese (Debian handbook ja-JP: {train.stat().st_size / 1e6:.1f} MB train, {size / 1e6:.2f} MB held out), "
          f"vocabulary 8,000\n")
    ours = run_worker("unigram_toksmith", train, held, 8000, tmp / "j_ours.json", {})
    theirs = run_worker("unigram_sentencepiece", train, held, 8000, tmp / "j_spm.json", {})
    print(HEADER)
    print(row("toksmith", ours, size))
    print(row("sentencepiece", theirs, size))
    if shared.exists():
        ref = spm_figures(spm.SentencePieceProcessor(model_file=str(shared)), held)
        print(f"| shared kyoto_ja_unigram_8000.model (other domain) | - | - | - | {ref['vocab']:,} | "
              f"{size / ref['tokens']:.4f} | {ref['loglik'] / ref['tokens']:.4f} |")
    compare("ja 8k", ours, theirs, size)
    if "error" not in ours and "error" not in theirs:
        print(f"vocabulary overlap: {overlap(tmp / 'j_ours.json', tmp / 'j_spm.json') * 100:.1f}% of sentencepiece's pieces")


def bench_wordpiece(tmp: Path, mb: float) -> None:
    train, held, description = build_sample(mb, tmp)
    size = held_bytes(held)
    print(f"\n## WordPiece, vocabulary 30,522, single thread, min_frequency 2\n\ntraining sample: {description}\n")
    ours = run_worker("wordpiece_toksmith", train, held, 30522, tmp / "w_ours.json", {})
    gain = run_worker("wordpiece_toksmith", train, held, 30522, tmp / "w_gain.json", {"criterion": "likelihood"})
    theirs = run_worker("wordpiece_hf", train, held, 30522, tmp / "w_hf.json", {})
    print(HEADER)
    print(row("toksmith, criterion='ratio' (default)", ours, size))
    print(row("toksmith, criterion='likelihood'", gain, size))
    print(row("tokenizers WordPieceTrainer (frequency)", theirs, size))
    compare("wordpiece 30k, ratio", ours, theirs, size)
    compare("wordpiece 30k, likelihood", gain, theirs, size)
    for label, r, name in (("ratio", ours, "w_ours"), ("likelihood", gain, "w_gain")):
        if "error" not in r and "error" not in theirs:
            print(f"vocabulary overlap ({label}): {overlap(tmp / f'{name}.json', tmp / 'w_hf.json', skip=()) * 100:.1f}% "
                  f"of the tokenizers vocabulary")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--only", nargs="+", choices=BENCHES, default=BENCHES)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--train-file", help=argparse.SUPPRESS)
    ap.add_argument("--held-file", help=argparse.SUPPRESS)
    ap.add_argument("--vocab", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        import resource

        figures = globals()[f"work_{args.worker}"](Path(args.train_file), Path(args.held_file), args.vocab,
                                                  Path(args.out), json.loads(args.options))
        figures["rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps(figures))
        return

    run(args.only, args.mb)


def run(only: list[str], mb: float) -> None:
    """Runs the benchmarks named in ``only`` (of BENCHES) on ``mb`` MB of English."""
    with tempfile.TemporaryDirectory(prefix="toksmith-bench-subword-") as tmp:
        tmp = Path(tmp)
        if "unigram" in only:
            bench_unigram(tmp, mb)
        if "botchan" in only:
            bench_botchan(tmp)
        if "ja" in only:
            bench_ja(tmp)
        if "wordpiece" in only:
            bench_wordpiece(tmp, mb)


if __name__ == "__main__":
    main()
