"""Exactness of the SentencePiece-style exports on real text (the figures of the README).

Every line of a sample of each shared corpus (``--chars`` characters of each English, Debian
Handbook and People's Daily file, and UDHR articles up to that size) is encoded by the reference
library reading the exported file and by the source of the export; decoding of those ids is
compared too:

- the four shared SentencePiece models (BPE and Unigram) saved as tokenizer.json: ``tokenizers``
  against ``sentencepiece`` on the original .model. A Unigram difference is then checked to be
  SentencePiece's single-precision path sums: the same pieces searched in double precision give
  ``tokenizers``' ids.
- the four shared .model files written back by toksmith: ``sentencepiece`` on both files;
- tokenizers trained by toksmith on botchan.txt and 1 MB of the Japanese handbook (Unigram, and
  SentencePiece-style BPE with byte fallback), saved as tokenizer.json and as .model: each
  library against toksmith's ``encode(text, disallowed_special=())``; a .model difference is
  checked for a normalizer difference (``sentencepiece.normalize`` against toksmith's). The
  Unigram also on the lines joined into documents of about 200,000 characters (path scores far
  beyond what float32 holds exactly), and what rounding its scores to multiples of 1/64 costs
  (bytes per token, log-likelihood, against the same training with the scores as learned).

    .venv/bin/python benchmarks/export_parity.py                 # 300,000 characters per file
    .venv/bin/python benchmarks/export_parity.py --chars 2000000
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("TOKSMITH_DATA_DIR", ROOT.parent / "shared" / "data"))
SP_DIR = DATA / "tokenizers" / "sentencepiece"


def corpus_lines(chars: int) -> list[str]:
    paths = [DATA / "corpora" / "en" / "botchan.txt", *sorted((DATA / "corpora" / "en").glob("*.xz")),
             *sorted((DATA / "corpora" / "debian-handbook").glob("*.xz")), *sorted((DATA / "corpora" / "zh").glob("*.xz"))]
    lines = []
    for path in paths:
        with (lzma.open(path, "rt", encoding="utf-8") if path.suffix == ".xz" else open(path, encoding="utf-8")) as f:
            lines += f.read(chars).split("\n")
    size = 0
    with lzma.open(DATA / "corpora" / "udhr" / "udhr.jsonl.xz", "rt", encoding="utf-8") as f:
        for record in f:
            for article in json.loads(record)["articles"].values():
                lines += article.split("\n")
                size += len(article)
            if size > chars:
                break
    return lines


def report(what: str, texts: list[str], differ: int, decode_differ: int, note: str = "") -> None:
    share = 100 * (len(texts) - differ) / len(texts)
    print(f"| {what} | {len(texts):,} | {sum(map(len, texts)):,} | {share:.4f}% ({differ}) | {decode_differ} | {note} |",
          flush=True)


def models_as_tokenizer_json(texts: list[str], tmp: Path) -> None:
    import sentencepiece as spm
    import tokenizers

    from toksmith import models
    from toksmith.formats.sentencepiece import load_sentencepiece

    for name in ("botchan_en_bpe_1000", "mistral-7b-v0.1", "botchan_en_unigram_1000", "kyoto_ja_unigram_8000"):
        sp = spm.SentencePieceProcessor(model_file=str(SP_DIR / f"{name}.model"))
        tok = load_sentencepiece(SP_DIR / f"{name}.model")
        tok.save(tmp / "t.json", format="hf")
        hf = tokenizers.Tokenizer.from_file(str(tmp / "t.json"))
        want = sp.encode(texts)
        got = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        differ = [(t, g) for t, w, g in zip(texts, want, got) if w != g]
        note = ""
        if "unigram" in name:
            core = tok.pipeline.model._core  # the same pieces, searched in double precision
            double = models.Unigram(core.pieces, unk_id=core.unk_id, byte_fallback=core.byte_fallback,
                                    exclude=core.exclude)
            explained = sum(double.encode_words([tok.pipeline.normalizer.normalize(t)]) == g for t, g in differ)
            note = f"{explained} of {len(differ)} are single- vs double-precision near-ties"
        decode_differ = sum(hf.decode(w) != sp.decode(w) for w in want)
        report(f"{name}.model as tokenizer.json: tokenizers vs sentencepiece", texts, len(differ), decode_differ, note)


def models_written_back(texts: list[str], tmp: Path) -> None:
    import sentencepiece as spm

    from toksmith.formats.sentencepiece import load_sentencepiece

    for name in ("botchan_en_bpe_1000", "mistral-7b-v0.1", "botchan_en_unigram_1000", "kyoto_ja_unigram_8000"):
        original = spm.SentencePieceProcessor(model_file=str(SP_DIR / f"{name}.model"))
        load_sentencepiece(SP_DIR / f"{name}.model").save(tmp / "w.model", format="sentencepiece")
        again = spm.SentencePieceProcessor(model_file=str(tmp / "w.model"))
        want = original.encode(texts)
        differ = sum(w != g for w, g in zip(want, again.encode(texts)))
        report(f"{name}.model written back: sentencepiece on both", texts, differ,
               sum(again.decode(w) != original.decode(w) for w in want))


def trained(texts: list[str], tmp: Path) -> None:
    import sentencepiece as spm
    import tokenizers

    import toksmith

    botchan = [line for line in (DATA / "corpora" / "en" / "botchan.txt").read_text(encoding="utf-8").splitlines()
               if line.strip()]
    with lzma.open(DATA / "corpora" / "debian-handbook" / "ja-JP.txt.xz", "rt", encoding="utf-8") as f:
        japanese = f.read(1_000_000).splitlines()
    for label, options in (("Unigram 8,000", {"algorithm": "unigram"}),
                           ("SentencePiece-style BPE 8,000, byte fallback",
                            {"level": "char", "pattern": "metaspace", "byte_fallback": True})):
        tok = toksmith.train(botchan + japanese, vocab_size=8000, **options)
        ours = [tok.encode(t, disallowed_special=()) for t in texts]
        tok.save(tmp / "t.json", format="hf")
        hf = tokenizers.Tokenizer.from_file(str(tmp / "t.json"))
        got = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        report(f"trained {label} as tokenizer.json: tokenizers vs toksmith", texts,
               sum(a != b for a, b in zip(ours, got)), sum(hf.decode(a) != tok.decode(a) for a in ours))
        tok.save(tmp / "t.model", format="sentencepiece")
        sp = spm.SentencePieceProcessor(model_file=str(tmp / "t.model"))
        got = sp.encode(texts)
        differ = [t for t, a, b in zip(texts, ours, got) if a != b]
        normalized = sum(sp.normalize(t) != tok.pipeline.normalizer.normalize(t) for t in differ)
        report(f"trained {label} as .model: sentencepiece vs toksmith", texts, len(differ),
               sum(sp.decode(a) != tok.decode(a) for a in ours), f"{normalized} of {len(differ)} normalize differently")
        if options.get("algorithm") == "unigram":
            docs = documents(texts)
            ours = [tok.encode(d, disallowed_special=()) for d in docs]
            for what, lib, got in (("sentencepiece", sp, sp.encode(docs)),
                                   ("tokenizers", hf, [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)])):
                report(f"the same Unigram on {len(docs)} documents of ~200,000 characters: {what} vs toksmith", docs,
                       sum(a != b for a, b in zip(ours, got)), sum(lib.decode(a) != tok.decode(a) for a in ours))
            score_rounding(botchan + japanese, tok, texts, docs, tmp)


def documents(texts: list[str], size: int = 200_000) -> list[str]:
    """The lines joined into documents of about ``size`` characters: their path scores go far
    beyond what single precision holds exactly (SentencePiece's float32 sums)."""
    docs, current, length = [], [], 0
    for t in texts:
        current.append(t)
        length += len(t) + 1
        if length >= size:
            docs.append("\n".join(current))
            current, length = [], 0
    return docs


def score_rounding(corpus: list[str], tok, texts: list[str], docs: list[str], tmp: Path) -> None:
    """What rounding the trained Unigram scores to multiples of 1/64 costs, and what it buys: the
    same training with the scores as learned, both encoding the texts (log-likelihoods under the
    scores as learned; the unknown piece scores the lowest score minus 10), and that one's
    .model in sentencepiece."""
    import sentencepiece as spm

    import toksmith
    from toksmith.train_subword import TrainedUnigram

    grid = TrainedUnigram.SCORE_GRID
    TrainedUnigram.SCORE_GRID = None
    try:
        exact = toksmith.train(corpus, vocab_size=8000, algorithm="unigram")
    finally:
        TrainedUnigram.SCORE_GRID = grid
    pieces = exact.pipeline.model.pieces
    if [p for p, _ in pieces] != [p for p, _ in tok.pipeline.model.pieces]:
        print("(score rounding: the two trainings learned different pieces; not compared)")
        return
    scores = exact.pipeline.model.lattice_scores
    unk = min(s for s in scores if s > -float("inf")) - 10
    ours = [tok.encode(t, disallowed_special=()) for t in texts]
    theirs = [exact.encode(t, disallowed_special=()) for t in texts]
    size = sum(len(t.encode("utf-8")) for t in texts)
    print()
    for what, ids in (("scores rounded to 1/64", ours), ("scores as learned", theirs)):
        n = sum(map(len, ids))
        ll = sum(scores[i] if i != 0 else unk for x in ids for i in x)
        print(f"Unigram 8,000, {what}: {size / n:.5f} bytes/token, log-likelihood {ll:,.1f} ({ll / n:.6f} per token)")
    print(f"{sum(a != b for a, b in zip(ours, theirs)):,} of {len(texts):,} lines segmented differently by the two")
    exact.save(tmp / "exact.model", format="sentencepiece")
    sp = spm.SentencePieceProcessor(model_file=str(tmp / "exact.model"))
    lines = sum(a != b for a, b in zip(theirs, sp.encode(texts)))
    long = sum(exact.encode(d, disallowed_special=()) != b for d, b in zip(docs, sp.encode(docs)))
    print(f"with the scores as learned, sentencepiece on its .model differs from toksmith on {lines:,} lines and "
          f"{long} of the {len(docs)} documents\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chars", type=int, default=300_000, help="characters read from each corpus file")
    args = ap.parse_args()
    if not (DATA / "corpora").exists():
        sys.exit(f"no shared data under {DATA} (set TOKSMITH_DATA_DIR)")
    start = time.perf_counter()
    texts = corpus_lines(args.chars)
    print(f"{len(texts):,} lines, {sum(map(len, texts)):,} characters\n")
    print("| export | texts | characters | identical ids (differ) | decode differs | note |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="toksmith-parity-") as tmp:
        models_as_tokenizer_json(texts, Path(tmp))
        models_written_back(texts, Path(tmp))
        trained(texts, Path(tmp))
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
