"""Character-level BPE training: end-of-word suffix, limited alphabet, byte fallback."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toksmith

TEXT = ["low lower lowest newest widest héllo wörld 你好世界 " * 30]


def test_char_level_with_suffix_round_trips():
    tok = toksmith.train(TEXT, vocab_size=200, level="char", end_of_word_suffix="</w>")
    vocab = tok.pipeline.model.get_vocab()
    assert any(t.endswith("</w>") for t in vocab) and "<unk>" in vocab
    text = "lowest newest widest"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text)


def test_limit_alphabet_and_unknown_characters():
    tok = toksmith.train(TEXT, vocab_size=100, level="char", limit_alphabet=10, min_frequency=1)
    model = tok.pipeline.model
    single = [t for t in model.get_vocab() if len(t) == 1]
    assert len(single) <= 10
    ids = tok.encode("你好 zebra")
    assert model.token_to_id("<unk>") in ids


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=100))
def test_byte_fallback_round_trips_any_text(text):
    assert FALLBACK.decode(FALLBACK.encode(text, disallowed_special=())) == text


FALLBACK = toksmith.train(TEXT, vocab_size=400, level="char", byte_fallback=True, limit_alphabet=20,
                          special_tokens=["<|endoftext|>"])


def test_byte_fallback_layout_and_specials():
    model = FALLBACK.pipeline.model
    assert FALLBACK.special_tokens == {"<|endoftext|>": 0}
    assert [model.token_to_id(f"<0x{b:02X}>") for b in (0, 255)] == [1, 256]
    assert FALLBACK.encode("a<|endoftext|>", allowed_special="all")[-1] == 0
    assert FALLBACK.vocab_size <= 400


def test_char_level_option_errors():
    with pytest.raises(toksmith.TrainingError, match="level='char'"):
        toksmith.train(TEXT, vocab_size=300, end_of_word_suffix="</w>")
    with pytest.raises(toksmith.TrainingError, match="too small"):
        toksmith.train(TEXT, vocab_size=10, level="char")
