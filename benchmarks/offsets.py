"""`encode_with_offsets` against the offsets of the reference libraries, on loaded tokenizers.

- BERT (uncased) and Gemma 3 ``tokenizer.json``, and the Botchan Unigram model as the
  tokenizer.json toksmith writes for it (T5-like: Precompiled, replacements, Unigram):
  `tokenizers`' ``encode(...).offsets`` (it computes offsets on every encode);
- SentencePiece models (Mistral 7B, Botchan Unigram) and llama.cpp's Llama 2 vocabulary (GGUF,
  written as a .model for sentencepiece): sentencepiece's ``encode(text, return_type="proto")``
  (``begin``/``end`` of each piece);
- o200k_base (tiktoken's file): tiktoken's ``decode_with_offsets`` of its ``encode_ordinary``.

Text: the English sample of benchmarks/encode.py, documents of about 4 KB. Before timing, the
spans of every document are compared (char offsets with `tokenizers`, byte offsets with
sentencepiece, ids with tiktoken); then each is timed (best of 3, one thread) and MB/s printed.

    .venv/bin/python benchmarks/offsets.py --mb 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode import DATA, TIKTOKEN_DIR, documents, english, tiktoken_encoding  # noqa: E402
from encode_loaded import best  # noqa: E402  (best of 3, caches emptied before each run)

import toksmith  # noqa: E402


def hf_case(path):
    import lzma

    from tokenizers import Tokenizer

    data = lzma.open(path).read().decode() if str(path).endswith(".xz") else Path(path).read_text()
    ref = Tokenizer.from_str(data)
    ref.no_padding()
    ref.no_truncation()
    ours = toksmith.load(str(path))

    def theirs(d):
        e = ref.encode(d, add_special_tokens=False)
        return e.ids, e.offsets

    return ours, theirs, lambda got: (got[0], got[2])


def exported_hf_case(model_path):
    """A SentencePiece model as the tokenizer.json toksmith writes for it (Unigram: Precompiled,
    replacements, Metaspace-like "▁"), read by both libraries."""
    import tempfile

    path = Path(tempfile.mkdtemp()) / "unigram.json"
    toksmith.load(str(model_path)).save(path, format="hf")
    return hf_case(path)


def sp_case(path):
    import sentencepiece as spm

    ours = toksmith.load(str(path))
    if str(path).endswith((".gguf", ".gguf.xz")):
        # llama.cpp's vocabulary as a .model (toksmith writes it; sentencepiece then gives llama.cpp's ids).
        from toksmith.formats.sentencepiece_writer import sentencepiece_model_bytes

        sp = spm.SentencePieceProcessor(model_proto=sentencepiece_model_bytes(ours))
    else:
        sp = spm.SentencePieceProcessor(model_file=str(path))

    def theirs(d):
        pieces = sp.encode(d, return_type="proto").pieces
        return [p.id for p in pieces], [(p.begin, p.end) for p in pieces]

    return ours, theirs, lambda got: (got[0], got[1])


def tiktoken_case(name):
    tt = tiktoken_encoding(name)
    ours = toksmith.load(name, tiktoken_dir=str(TIKTOKEN_DIR))

    def theirs(d):
        ids = tt.encode_ordinary(d)
        return ids, tt.decode_with_offsets(ids)[1]

    # tiktoken gives each token's start (in characters) only.
    return ours, theirs, lambda got: (got[0], [s for s, _ in got[2]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=1)
    args = ap.parse_args()
    text, what = english(args.mb)
    docs = documents(text, 4096)
    n_mb = len(text.encode()) / 1e6
    print(f"text: {what}; {len(docs)} documents\n")
    cases = [
        ("bert-base-uncased tokenizer.json", "tokenizers", lambda: hf_case(DATA / "tokenizers/hf/bert-base-uncased/tokenizer.json")),
        ("gemma3 tokenizer.json", "tokenizers", lambda: hf_case(DATA / "tokenizers/hf/gemma3/tokenizer.json.xz")),
        ("mistral-7b .model", "sentencepiece", lambda: sp_case(DATA / "tokenizers/sentencepiece/mistral-7b-v0.1.model")),
        ("botchan unigram .model", "sentencepiece", lambda: sp_case(DATA / "tokenizers/sentencepiece/botchan_en_unigram_1000.model")),
        ("botchan unigram tokenizer.json", "tokenizers", lambda: exported_hf_case(DATA / "tokenizers/sentencepiece/botchan_en_unigram_1000.model")),
        ("llama-spm GGUF (Llama 2)", "sentencepiece", lambda: sp_case(DATA / "tokenizers/gguf/ggml-vocab-llama-spm.gguf.xz")),
        ("o200k_base", "tiktoken", lambda: tiktoken_case("o200k_base")),
    ]
    print("| tokenizer | peer | toksmith encode_with_offsets MB/s | peer MB/s | ratio |")
    print("|---|---|---|---|---|")
    for label, peer, make in cases:
        ours, theirs, view = make()
        mine = lambda d: ours.encode_with_offsets(d, disallowed_special=())  # noqa: E731
        bad = sum(view(mine(d)) != tuple(theirs(d)) for d in docs)
        if bad:
            print(f"| {label} | {peer} | {bad} of {len(docs)} documents differ | | |")
            continue
        a = best(lambda: [mine(d) for d in docs])
        b = best(lambda: [theirs(d) for d in docs])
        print(f"| {label} | {peer} | {n_mb / a:.1f} | {n_mb / b:.1f} | {b / a:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
