"""count, count_till_limit, truncate, streaming decode, offsets, numpy output."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toksmith

from conftest import data_path

TEXTS = ["Hello, world! Grüße 世界 😀👍🏽 12345", "def f(x):\n    return x  # 注释\n", " " * 50 + "x", ""]


@pytest.fixture(scope="module")
def tok():
    return toksmith.train(TEXTS * 20 + ["the quick brown fox jumps over the lazy dog " * 20], vocab_size=400,
                          special_tokens=["<|endoftext|>"])


def test_count_matches_encode(tok):
    for text in TEXTS:
        assert tok.count(text) == len(tok.encode(text))
    assert tok.count("a<|endoftext|>", allowed_special="all") == len(tok.encode("a<|endoftext|>", allowed_special="all"))
    with pytest.raises(toksmith.SpecialTokenError):
        tok.count("<|endoftext|>")


def test_count_till_limit(tok):
    text = "the quick brown fox " * 100
    n = tok.count(text)
    assert tok.count_till_limit(text, n) == n
    assert tok.count_till_limit(text, n + 5) == n
    assert tok.count_till_limit(text, n - 1) is None
    assert tok.count_till_limit("", 0) == 0
    with pytest.raises(toksmith.EncodeError):
        tok.count_till_limit(text, -1)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200), max_tokens=st.integers(0, 60))
def test_truncate_fits_the_budget(tok, text, max_tokens):
    cut = tok.truncate(text, max_tokens, disallowed_special=())
    assert text.startswith(cut)
    assert tok.count(cut, disallowed_special=()) <= max_tokens
    if tok.count(text, disallowed_special=()) <= max_tokens:
        assert cut == text


def test_truncate_keeps_as_much_as_fits(tok):
    text = "the quick brown fox jumps over the lazy dog " * 30
    for budget in (1, 7, 50, 120):
        cut = tok.truncate(text, budget)
        assert tok.count(cut) <= budget
        # One more character would pass the budget (plain English: no re-segmentation surprises).
        assert tok.count(text[:len(cut) + 1]) > budget


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_stream_decoder_equals_decode(tok, data):
    ids = data.draw(st.lists(st.integers(0, tok.vocab_size - 1), max_size=60))
    dec = tok.stream_decoder()
    streamed = "".join(dec.feed(i) for i in ids) + dec.flush()
    assert streamed == tok.decode(ids)


def test_stream_decoder_emits_only_complete_characters(tok):
    ids = tok.encode_ordinary("世界😀")
    dec = tok.stream_decoder()
    pieces = [dec.feed(i) for i in ids]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) + dec.flush() == "世界😀"


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_offsets_tile_the_input(tok, text):
    ids, byte_spans, char_spans = tok.encode_with_offsets(text)
    data = text.encode("utf-8")
    assert ids == tok.encode(text)
    pos = 0
    for i, (start, end) in zip(ids, byte_spans):
        assert start == pos and data[start:end] == tok.token_bytes(i)
        pos = end
    assert pos == len(data)
    for (cs, ce), (bs, be) in zip(char_spans, byte_spans):
        assert text[cs:ce].encode("utf-8").find(data[bs:be]) >= 0


def test_encode_to_numpy(tok):
    np = pytest.importorskip("numpy")
    arr = tok.encode_to_numpy(TEXTS[0], dtype="uint16")
    assert arr.dtype == np.uint16 and arr.tolist() == tok.encode(TEXTS[0])
    arrays = tok.encode_to_numpy(TEXTS, dtype=np.uint32)
    assert [a.tolist() for a in arrays] == [tok.encode(t) for t in TEXTS]
    with pytest.raises(toksmith.EncodeError, match="dtype"):
        tok.encode_to_numpy("x", dtype="int8")
    # Special tokens follow encode's rules; arrays are writable (one copy, no Python ints).
    text = "a<|endoftext|>b"
    assert tok.encode_to_numpy(text, allowed_special="all").tolist() == tok.encode(text, allowed_special="all")
    with pytest.raises(toksmith.SpecialTokenError):
        tok.encode_to_numpy([TEXTS[0], text])
    assert tok.encode_to_numpy(text, disallowed_special=()).tolist() == tok.encode(text, disallowed_special=())
    arr = tok.encode_to_numpy(TEXTS[1], num_threads=2)
    arr[0] = 0
    assert tok.encode_to_numpy([], dtype="uint16") == []


def test_encode_to_numpy_real_vocabulary():
    pytest.importorskip("numpy")
    o200k = toksmith.load("o200k_base", tiktoken_dir=data_path("tokenizers", "tiktoken"))
    text = "Grüße aus Köln, 世界! " * 50
    assert o200k.encode_to_numpy(text).tolist() == o200k.encode(text)
    with pytest.raises(toksmith.EncodeError, match="uint32"):
        o200k.encode_to_numpy(text, dtype="uint16")


def test_safe_from_many_python_threads(tok):
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"{t} {k}" * (k % 7 + 1) for k in range(200) for t in TEXTS[:2]]
    expected = [tok.encode(t) for t in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(tok.encode, texts))
        batches = list(pool.map(lambda k: tok.encode_batch(texts[k::8], num_threads=2), range(8)))
    assert got == expected
    assert [ids for k in range(8) for ids in batches[k]] == [expected[i] for k in range(8) for i in range(k, len(texts), 8)]


@pytest.mark.parametrize("num_threads", [1, 2, 3])
def test_batch_of_many_groups_keeps_order(tok, num_threads):
    """More texts than one group (64+): groups are encoded by the calling thread and the pool
    in any order and put back in the order given; the lists behave as ordinary lists."""
    import gc

    texts = [f"{TEXTS[k % 3]} {k}" * (k % 5) for k in range(1000)]
    got = tok.encode_batch(texts, num_threads=num_threads)
    assert got == [tok.encode(t) for t in texts]
    gc.collect()
    got[1].append("x")
    assert got[1][-1] == "x" and got[2] == tok.encode(texts[2])


@pytest.mark.parametrize("name", ["llama3", "qwen3"])
def test_offsets_of_byte_level_tokenizer_json(name):
    """Loaded byte-level tokenizer.json files give spans too; their ids are HF tokenizers' own."""
    from conftest import data_path

    hf = pytest.importorskip("tokenizers")
    folder = data_path("tokenizers", "hf", name)
    path = next(p for p in sorted(folder.iterdir()) if p.name.startswith("tokenizer.json"))
    tok = toksmith.load(path)
    import lzma

    raw = lzma.decompress(path.read_bytes()).decode() if path.suffix == ".xz" else path.read_text()
    ref = hf.Tokenizer.from_str(raw)
    for text in TEXTS + ["  leading spaces, Grüße\n\n\ttabs 1234567 ..."]:
        ids, byte_spans, char_spans = tok.encode_with_offsets(text)
        assert ids == ref.encode(text, add_special_tokens=False).ids
        data = text.encode("utf-8")
        assert b"".join(data[s:e] for s, e in byte_spans) == data
        assert all(data[s:e] == tok.token_bytes(i) for i, (s, e) in zip(ids, byte_spans))
        assert all(text[cs:ce].encode().find(data[bs:be]) >= 0 for (cs, ce), (bs, be) in zip(char_spans, byte_spans))


def test_offsets_refused_where_the_pipeline_rewrites_text():
    from conftest import data_path

    # A normalizer whose alignment toksmith does not track (BERT, Gemma 3 and SentencePiece
    # have theirs: tests/test_offsets_pipelines.py).
    from toksmith import normalizers as norm
    from toksmith.formats.hf import HFBPE
    from toksmith.pipeline import Pipeline
    from toksmith.tokenizer import Tokenizer

    lowered = Tokenizer.from_pipeline(Pipeline(HFBPE({"a": 0, "b": 1}, []), normalizer=norm.Lowercase()))
    with pytest.raises(toksmith.EncodeError, match="rewrites the text"):
        lowered.encode_with_offsets("AB")
    qwen = toksmith.load(data_path("tokenizers", "hf", "qwen3", "tokenizer.json.xz"))
    assert qwen.encode_with_offsets("caf\u00e9")[0] == qwen.encode("caf\u00e9", add_special_tokens=False)
    with pytest.raises(toksmith.EncodeError, match="rewrites the text"):
        qwen.encode_with_offsets("cafe\u0301")  # NFC would compose it


@pytest.mark.parametrize("add_special_tokens", [False, True])
def test_batch_of_loaded_byte_level_pipeline_matches_hf(add_special_tokens):
    """encode_batch of a tokenizer.json on the Rust fast path (pieces encoded in parallel, added
    tokens and templates put back in order) gives HF tokenizers' ids."""
    import lzma

    from conftest import data_path

    hf = pytest.importorskip("tokenizers")
    path = data_path("tokenizers", "hf", "llama3", "tokenizer.json.xz")
    tok = toksmith.load(path)
    ref = hf.Tokenizer.from_str(lzma.decompress(path.read_bytes()).decode())
    texts = TEXTS + ["<|begin_of_text|>hello<|end_of_text|>", "a<|eot_id|>b<|eot_id|>c", "plain " * 500]
    got = tok.encode_batch(texts, num_threads=2, allowed_special="all", add_special_tokens=add_special_tokens)
    assert got == [e.ids for e in ref.encode_batch(texts, add_special_tokens=add_special_tokens)]
    assert got == [tok.encode(t, allowed_special="all", add_special_tokens=add_special_tokens) for t in texts]


def test_id_lists_outlive_many_freed_lists():
    """Result lists hold the shared int objects without taking a reference (see rust/py/ints.rs):
    freeing millions of such lists must never free an int. Were an int freed, its slot in the
    shared table would dangle and later lists would hold garbage or crash, so this runs in a
    subprocess."""
    import subprocess
    import sys

    script = r"""
import gc, sys, toksmith
tok = toksmith.train(["the quick brown fox jumps over the lazy dog 0123456789 " * 50], vocab_size=300)
text = "the quick brown fox jumps over the lazy dog 0123456789 " * 20
ids = tok.encode(text)
values = [int(str(i)) for i in ids]  # ints made here, not taken from the table
for _ in range(3000):
    tok.encode(text)  # made and freed at once
    tok.encode_batch([text, text[:50]], num_threads=2)
    tok.encode(text, dropout=0.3, seed=7)
gc.collect()
other = toksmith.train(["a b c d e f " * 50], vocab_size=270)  # grows or shares the same table
for _ in range(1000):
    other.encode("a b c d e f")
again = tok.encode(text)
assert again == values and ids == values, "ids changed after lists were freed"
dropped = tok.encode(text, dropout=0.3, seed=7)
assert all(type(i) is int and i == int(str(i)) for i in dropped) and tok.decode(dropped) == text
assert all(type(i) is int and i == int(str(i)) for i in again)
print("ok", len(again))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("ok ")
