"""Encode/decode, special tokens (tiktoken's semantics), vocabulary lookups, save and load."""

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toksmith
from toksmith import DecodeError, SpecialTokenError

CORPUS = ["the lowest newest widest <|endoftext|> model " * 30, "Grüße, 世界! 😀 12345 don't stop", "def f(x):\n    return x\n"]


@pytest.fixture(scope="module")
def tok():
    return toksmith.train(CORPUS, vocab_size=400, special_tokens=["<|endoftext|>", "<|pad|>"])


def test_special_tokens_take_the_first_ids(tok):
    assert tok.special_tokens == {"<|endoftext|>": 0, "<|pad|>": 1}
    assert tok.token_bytes(2) == b"\x00"  # bytes follow the specials


def test_special_tokens_last():
    t = toksmith.train(CORPUS, vocab_size=300, special_tokens=["<|a|>", "<|b|>"], special_tokens_position="last",
                        min_frequency=1)
    assert t.token_bytes(0) == b"\x00"
    assert t.special_tokens == {"<|a|>": t.vocab_size - 2, "<|b|>": t.vocab_size - 1}
    assert t.vocab_size == 300


def test_merges_never_produce_special_tokens(tok):
    # The training text contains "<|endoftext|>" 30 times; it must not have been learned.
    assert tok.encode_ordinary("<|endoftext|>") != [0]
    assert all(a + b != b"<|endoftext|>" for a, b in tok.merges)
    assert b"endoftext" not in [a + b for a, b in tok.merges]


def test_disallowed_special_raises_with_a_fix(tok):
    with pytest.raises(SpecialTokenError, match="allowed_special") as e:
        tok.encode("hi <|endoftext|>")
    assert isinstance(e.value, ValueError)  # code written for tiktoken catches ValueError


def test_allowed_special_maps_to_id(tok):
    ids = tok.encode("hi<|endoftext|>", allowed_special={"<|endoftext|>"})
    assert ids[-1] == 0
    assert tok.encode("a<|pad|>b<|endoftext|>", allowed_special="all").count(1) == 1


def test_partially_allowed_still_raises_for_the_rest(tok):
    with pytest.raises(SpecialTokenError, match="<\\|pad\\|>"):
        tok.encode("<|endoftext|><|pad|>", allowed_special={"<|endoftext|>"})


def test_encode_ordinary_treats_specials_as_text(tok):
    ids = tok.encode_ordinary("x<|endoftext|>")
    assert 0 not in ids
    assert tok.decode(ids) == "x<|endoftext|>"
    assert ids == tok.encode("x<|endoftext|>", disallowed_special=())


def test_unknown_special_name_is_an_error(tok):
    with pytest.raises(SpecialTokenError, match="not special tokens"):
        tok.encode("x", allowed_special={"<|nope|>"})


def test_same_special_semantics_as_tiktoken(tok):
    tiktoken = pytest.importorskip("tiktoken")
    enc = tiktoken.Encoding("t", pat_str=tok.pattern, mergeable_ranks={bytes([i]): i for i in range(256)},
                            special_tokens={"<|endoftext|>": 300, "<|pad|>": 301})
    cases = [
        ("a<|endoftext|>", dict()),
        ("a<|endoftext|>", dict(allowed_special="all")),
        ("a<|endoftext|><|pad|>", dict(allowed_special={"<|endoftext|>"})),
        ("a<|endoftext|>", dict(disallowed_special=())),
        ("a<|pad|>", dict(allowed_special={"<|endoftext|>"}, disallowed_special={"<|pad|>"})),
    ]
    for text, kwargs in cases:
        try:
            theirs = ["S" if i >= 300 else "t" for i in enc.encode(text, **kwargs)].count("S")
        except ValueError:
            theirs = "raise"
        try:
            ours = sum(i in (0, 1) for i in tok.encode(text, **kwargs))
        except SpecialTokenError:
            ours = "raise"
        assert ours == theirs, (text, kwargs)


def test_encode_batch_equals_encode(tok):
    texts = [c * k for k, c in enumerate(CORPUS * 5)] + ["", "x"]
    assert tok.encode_batch(texts, disallowed_special=()) == [tok.encode_ordinary(t) for t in texts]
    assert tok.encode_batch(texts, num_threads=2, allowed_special="all") == [tok.encode(t, allowed_special="all") for t in texts]
    with pytest.raises(SpecialTokenError):
        tok.encode_batch(["fine", "<|pad|>"])


def test_decode_errors(tok):
    bad = [i for i in range(tok.vocab_size) if not tok.token_bytes(i).isascii()][:1]
    assert tok.decode(bad) == "\ufffd"
    with pytest.raises(DecodeError, match="not valid UTF-8"):
        tok.decode(bad, errors="strict")
    with pytest.raises(DecodeError, match="not in the vocabulary"):
        tok.decode([tok.vocab_size])
    with pytest.raises(DecodeError):
        tok.decode([-1])
    with pytest.raises(DecodeError):
        tok.decode(["x"])


def test_token_names_round_trip(tok):
    for i in range(tok.vocab_size):
        assert tok.token_to_id(tok.id_to_token(i)) == i
    space_the = tok.token_to_id("Ġthe")
    assert space_the is not None and tok.token_bytes(space_the) == b" the"
    assert tok.token_to_id("not a token at all ☃") is None


def test_save_load_round_trip(tok, tmp_path):
    path = tmp_path / "tok.json"
    tok.save(path)
    again = toksmith.load(path)
    assert again.to_dict() == tok.to_dict()
    for text in CORPUS:
        assert again.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "toksmith" and data["version"] == 1
    assert data["pre_tokenizer"]["pattern_name"] == "o200k"


def test_save_is_atomic(tok, tmp_path, monkeypatch):
    path = tmp_path / "tok.json"
    tok.save(path)
    before = path.read_bytes()

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        toksmith.train(CORPUS, vocab_size=300).save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok.json"]  # no temporary file left


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_round_trip_any_unicode(tok, text):
    # st.text() excludes lone surrogates by default: every such string is valid Unicode.
    assert tok.decode(tok.encode_ordinary(text)) == text
    assert tok.decode_bytes(tok.encode_ordinary(text)) == text.encode("utf-8")


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=400))
def test_round_trip_with_allowed_specials(tok, text):
    text = text + "<|endoftext|>" + text
    assert tok.decode(tok.encode(text, allowed_special="all")) == text
