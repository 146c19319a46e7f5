"""Encoding throughput of loaded tokenizers against their own libraries.

- Llama 3, Qwen 3, Gemma 3 and BERT (uncased) ``tokenizer.json`` (../shared/data/tokenizers/hf): toksmith vs
  Hugging Face ``tokenizers``;
- SentencePiece models (../shared/data/tokenizers/sentencepiece: Mistral 7B's BPE, the small
  Unigram and BPE models trained on Botchan, whose normalizer is NFKC, and the Japanese Unigram
  model trained on Kyoto, run on the Japanese Debian Handbook): toksmith vs ``sentencepiece``.

Text: the same English sample as benchmarks/encode.py (an equal share of each
corpora/en/*.xz file), cut into documents of about 4 KB at line ends. Before timing, the ids of
every document are compared; a mismatch is printed and that tokenizer is skipped.
Single thread: the documents one after the other; batch: toksmith ``encode_batch(num_threads=2)``
vs ``tokenizers`` ``encode_batch`` (its own thread pool, 2 threads) and ``sentencepiece``
``encode(list, num_threads=2)``.

    .venv/bin/python benchmarks/encode_loaded.py --mb 5
    .venv/bin/python benchmarks/encode_loaded.py --mb 5 --allowed-special   # toksmith matching its special tokens

``--allowed-special``: toksmith encodes with ``allowed_special="all"`` (its special tokens cut out
of the text, as `tokenizers` always does; a SentencePiece pipeline then cuts its control symbols
out in Python before the one-call path), not ``disallowed_special=()``. sentencepiece cuts
nothing out, so its ids are checked against toksmith's with the text split at the special
tokens first (each piece encoded alone, each special token its id); it is timed on the texts
as they are.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode import DATA, MB, documents, english, read_xz  # noqa: E402

os.environ.setdefault("RAYON_NUM_THREADS", "2")

import toksmith  # noqa: E402


def best(fn, repeat=3):
    times = []
    for _ in range(repeat):
        toksmith._core.clear_chunk_caches()  # every run starts cold, like a peer without a cache
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def hf_peer(path: Path):
    import lzma

    from tokenizers import Tokenizer

    raw = lzma.open(path).read().decode("utf-8") if path.suffix == ".xz" else path.read_text(encoding="utf-8")
    tok = Tokenizer.from_str(raw)
    tok.no_padding()
    tok.no_truncation()
    return (lambda d: tok.encode(d, add_special_tokens=False).ids,
            lambda docs: [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)])


def sp_peer(path: Path):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(path))
    return (lambda d: sp.encode(d), lambda docs: sp.encode(docs, num_threads=2))


def cut_at_specials(encode, tok):
    """``encode`` of the pieces between ``tok``'s special tokens, each special token its id."""
    import re

    specials = tok.special_tokens
    pattern = re.compile("(" + "|".join(map(re.escape, sorted(specials, key=len, reverse=True))) + ")")

    def cut(text):
        return [i for piece in pattern.split(text) if piece
                for i in ([specials[piece]] if piece in specials else encode(piece))]

    return cut


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=5)
    ap.add_argument("--allowed-special", action="store_true", help='toksmith with allowed_special="all"')
    args = ap.parse_args()
    specials = dict(allowed_special="all") if args.allowed_special else dict(disallowed_special=())
    text, what = english(args.mb)
    print(f"text: {what}; {len(documents(text, 4096))} documents")
    # The Japanese model reads Japanese: the Handbook's, as much as the English sample.
    japanese = read_xz(DATA / "corpora" / "debian-handbook" / "ja-JP.txt.xz", int(args.mb * MB))
    print(f"text for kyoto: ja-JP of the Debian Handbook, {len(japanese.encode()) / MB:.1f} MB\n")
    cases = [
        ("llama3 tokenizer.json", DATA / "tokenizers/hf/llama3/tokenizer.json.xz", hf_peer, "tokenizers"),
        ("qwen3 tokenizer.json", DATA / "tokenizers/hf/qwen3/tokenizer.json.xz", hf_peer, "tokenizers"),
        ("gemma3 tokenizer.json", DATA / "tokenizers/hf/gemma3/tokenizer.json.xz", hf_peer, "tokenizers"),
        ("bert-base-uncased tokenizer.json", DATA / "tokenizers/hf/bert-base-uncased/tokenizer.json", hf_peer, "tokenizers"),
        ("mistral-7b .model", DATA / "tokenizers/sentencepiece/mistral-7b-v0.1.model", sp_peer, "sentencepiece"),
        ("botchan unigram .model", DATA / "tokenizers/sentencepiece/botchan_en_unigram_1000.model", sp_peer, "sentencepiece"),
        ("botchan bpe .model", DATA / "tokenizers/sentencepiece/botchan_en_bpe_1000.model", sp_peer, "sentencepiece"),
        ("kyoto unigram .model (Japanese)", DATA / "tokenizers/sentencepiece/kyoto_ja_unigram_8000.model", sp_peer,
         "sentencepiece"),
    ]
    rows = []
    for label, path, make_peer, peer_name in cases:
        if not path.exists():
            print(f"{label}: {path} absent, skipped")
            continue
        docs = documents(japanese if "Japanese" in label else text, 4096)
        n_mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
        ours = toksmith.load(str(path))
        one, batch = make_peer(path)
        mine = lambda d: ours.encode(d, add_special_tokens=False, **specials)  # noqa: E731
        check = one
        if args.allowed_special and peer_name == "sentencepiece":
            check = cut_at_specials(one, ours)
        bad = sum(mine(d) != check(d) for d in docs)
        if bad:
            print(f"{label}: {bad} of {len(docs)} documents differ from {peer_name}; not timed")
            continue
        t_ours = best(lambda: [mine(d) for d in docs])
        t_peer = best(lambda: [one(d) for d in docs])
        batch_ours = lambda: ours.encode_batch(docs, num_threads=2, add_special_tokens=False, **specials)  # noqa: E731
        bad = sum(a != b for a, b in zip(batch_ours(), batch(docs) if check is one else map(check, docs)))
        if bad:
            print(f"{label}: {bad} of {len(docs)} documents differ from {peer_name} in batch; not timed")
            continue
        b_ours = best(batch_ours)
        b_peer = best(lambda: batch(docs))
        rows.append((label, peer_name, n_mb / t_ours, n_mb / t_peer, n_mb / b_ours, n_mb / b_peer))
        print(f"{label}: identical on all {len(docs)} documents; 1 thread toksmith {n_mb / t_ours:.1f} MB/s, "
              f"{peer_name} {n_mb / t_peer:.1f} MB/s ({t_peer / t_ours:.1f}x); batch(2) toksmith {n_mb / b_ours:.1f} MB/s, "
              f"{peer_name} {n_mb / b_peer:.1f} MB/s ({b_peer / b_ours:.1f}x)", flush=True)
    print("\n| tokenizer | peer | toksmith MB/s (1 thread) | peer MB/s | ratio | toksmith batch (2) | peer batch (2) | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for label, peer, a, b, c, d in rows:
        print(f"| {label} | {peer} | {a:.1f} | {b:.1f} | {a / b:.1f}x | {c:.1f} | {d:.1f} | {c / d:.1f}x |")


if __name__ == "__main__":
    main()
