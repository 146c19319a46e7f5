"""BERT's words split and encoded in one Rust call (Pipeline.words_fast: BertPreTokenizer and
WordPiece), against the Python pre-tokenizer and the general path; `tokenizers` itself is the
reference in test_hf_parity.py, which goes through this path too."""

from __future__ import annotations

import random
import re

import pytest

from conftest import data_path

from toksmith import pre_tokenizers as pre
from toksmith.formats.hf import load_hf


def class_ranges(body: str) -> list[tuple[int, int]]:
    """The code points of the regex character class ``[body]``, as inclusive ranges: the runs it
    matches in the string of every code point."""
    every = "".join(map(chr, range(0x110000)))
    return [(m.start(), m.end() - 1) for m in re.finditer(f"[{body}]+", every)]


def test_the_splitters_ranges_are_the_regex_classes():
    assert pre._spec_ranges(pre._WHITESPACE_SPEC) == class_ranges(pre.WHITESPACE.pattern[1:-1])
    assert pre._spec_ranges(pre._HF_PUNCTUATION_SPEC) == class_ranges(pre._HF_PUNCTUATION)


def class_samples() -> list[str]:
    """Characters at and next to every boundary of the whitespace and punctuation ranges."""
    ranges = pre._spec_ranges(pre._WHITESPACE_SPEC) + pre._spec_ranges(pre._HF_PUNCTUATION_SPEC)
    points = {c + d for lo, hi in ranges for c in (lo, hi) for d in (-1, 0, 1)}
    return [chr(c) for c in sorted(points) if 0 <= c < 0x110000]


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    edges = class_samples()
    words = ["hello", "World", "naïve", "日本語", "x", "unaffable", "##ing", "[UNK]", "a" * 120, "é" * 60, ""]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randrange(0, 40)):
            r = rng.random()
            parts.append(rng.choice(edges) if r < 0.4 else chr(rng.randrange(0x20, 0x3000)) if r < 0.6 else rng.choice(words))
        out.append("".join(parts))
    return out


def test_rust_split_is_the_python_split():
    splitter = pre.BertPreTokenizer.rust()
    python = pre.BertPreTokenizer()
    texts = random_texts(3000, 1) + ["".join(class_samples()), " ".join(class_samples())]
    bad = [t for t in texts if splitter.split(t) != python.pre_tokenize(t)]
    assert not bad, f"{len(bad)} of {len(texts)} texts split differently, e.g. {bad[0]!r}"


@pytest.fixture(scope="module")
def bert():
    path = data_path("tokenizers", "hf", "bert-base-uncased", "tokenizer.json")
    return load_hf(path)


def general(pipeline, texts, **kw):
    """Ids of the general path (Python pre-tokenizer, then encode_words): words_fast off."""
    saved, pipeline.words_fast = pipeline.words_fast, None
    try:
        return [pipeline.encode(t, **kw) for t in texts], pipeline.encode_batch(texts, num_threads=2, **kw)
    finally:
        pipeline.words_fast = saved


@pytest.mark.parametrize("add_special_tokens", [False, True])
def test_bert_takes_the_rust_words_path_and_gives_the_general_paths_ids(bert, add_special_tokens):
    pipeline = bert._pipeline
    assert pipeline.words_fast is not None
    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")
    texts = text.split("\n")[:500] + random_texts(500, 2) + ["[CLS] a [SEP] b [MASK]", "[UNK][PAD]"]
    allowed = frozenset(bert.special_tokens)
    fast = [pipeline.encode(t, allowed_special=allowed, add_special_tokens=add_special_tokens) for t in texts]
    fast_batch = pipeline.encode_batch(texts, allowed_special=allowed, add_special_tokens=add_special_tokens, num_threads=2)
    slow, slow_batch = general(pipeline, texts, allowed_special=allowed, add_special_tokens=add_special_tokens)
    assert fast == slow
    assert fast_batch == slow_batch == slow


@pytest.mark.parametrize("lowercase", [True, False])
def test_bert_from_vocab_txt_takes_the_path(lowercase):
    tok = load_hf(data_path("tokenizers", "hf", "bert-base-uncased", "vocab.txt"), lowercase=lowercase)
    pipeline = tok._pipeline
    assert pipeline.words_fast is not None
    texts = random_texts(300, 3)
    fast = [pipeline.encode(t) for t in texts]
    assert fast == general(pipeline, texts)[0]
