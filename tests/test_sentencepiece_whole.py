"""The one-call Rust path of SentencePiece models (Pipeline._whole_for: normalize and encode a
whole text in Rust; Unigram, and BPE without user-defined pieces) against the general path
(normalizer, added-token matchers, then the model's encode_words) and against ``sentencepiece``,
on real models, on models trained here with every option that changes normalization or pieces,
and on random text."""

from __future__ import annotations

import pickle
import random
import re

import pytest

from conftest import data_path

spm = pytest.importorskip("sentencepiece")
pytest.importorskip("google.protobuf")

from test_sentencepiece_parity import EDGE, PROBES, SYNTHETIC, model_path, train  # noqa: E402

from toksmith.formats.sentencepiece import load_sentencepiece, sentencepiece_from_bytes  # noqa: E402


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["the", "Tokenizer", "naïve", "日本語", "ｶﾀｶﾅ", "x", "foo", "<sep>", "<s>", "</s>", "<unk>", "1234",
             "é", "e\u0301", "\U0001f600", "▁", "▁▁", "ﬁ", "\x00", "İ"]
    spaces = [" ", "  ", "   ", "\n", "\t", " \n ", "\u3000", "\r\n", "\u00a0", ""]
    return ["".join(rng.choice(spaces) if rng.random() < 0.4 else rng.choice(words) for _ in range(rng.randrange(0, 30)))
            for _ in range(n)]


def general(pipeline, texts, **kw):
    """The ids of the general path: the same pipeline with the one-call path turned off."""
    pipeline._whole_for = lambda allowed: None
    try:
        return [pipeline.encode(t, **kw) for t in texts], pipeline.encode_batch(texts, num_threads=2, **kw)
    finally:
        del pipeline._whole_for  # the class's method again


def check(tok, sp, texts, one_call=True):
    pipeline = tok._pipeline
    assert (pipeline._whole_for(frozenset()) is not None) == one_call
    whole = [pipeline.encode(t, add_special_tokens=False) for t in texts]
    whole_batch = pipeline.encode_batch(texts, add_special_tokens=False, num_threads=2)
    slow, slow_batch = general(pipeline, texts, add_special_tokens=False)
    assert whole == slow
    assert whole_batch == slow_batch == slow
    assert whole == sp.encode(texts)


@pytest.mark.parametrize("name", ["botchan_en_unigram_1000", "kyoto_ja_unigram_8000", "botchan_en_bpe_1000", "mistral-7b-v0.1"])
def test_real_models(name):
    path = model_path(name)
    tok, sp = load_sentencepiece(path), spm.SentencePieceProcessor(model_file=str(path))
    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")
    check(tok, sp, text.split("\n")[:400] + EDGE + PROBES + random_texts(300, 1))


@pytest.fixture(scope="module")
def botchan_lines():
    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")
    return [line for line in text.split("\n") if line.strip()]


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
@pytest.mark.parametrize("variant", sorted(SYNTHETIC))
def test_trained_models(botchan_lines, model_type, variant):
    data = train(botchan_lines, model_type=model_type, **SYNTHETIC[variant])
    # BPE with user-defined pieces cuts them out in Python (the general path).
    one_call = not (model_type == "bpe" and "user_defined_symbols" in SYNTHETIC[variant])
    check(sentencepiece_from_bytes(data), spm.SentencePieceProcessor(model_proto=data),
          botchan_lines[:200] + EDGE + PROBES + random_texts(300, 2), one_call)


@pytest.mark.parametrize("name", ["botchan_en_unigram_1000", "botchan_en_bpe_1000", "mistral-7b-v0.1"])
def test_allowed_special_tokens_are_cut_out_before_the_one_call_path(name):
    """With special tokens allowed, each is its id and the text between goes to Rust: the ids of
    the general path and of sentencepiece (which cuts control symbols nowhere: the pieces are
    compared with it one by one)."""
    path = model_path(name)
    tok, sp = load_sentencepiece(path), spm.SentencePieceProcessor(model_file=str(path))
    pipeline = tok._pipeline
    allowed = frozenset(tok.special_tokens)
    assert pipeline._whole_for(allowed) is not None
    texts = ["<s>hello</s> world", "a<s>b", "<unk>", "<s>", "<s><s>", " <s> ", "x</s>", "</s>  y <s>\n"] + random_texts(300, 4)
    assert sum("<s>" in t or "</s>" in t for t in texts) > 100
    ones = [pipeline.encode(t, allowed_special=allowed, add_special_tokens=False) for t in texts]
    batch = pipeline.encode_batch(texts, allowed_special=allowed, add_special_tokens=False, num_threads=2)
    slow, slow_batch = general(pipeline, texts, allowed_special=allowed, add_special_tokens=False)
    assert ones == slow == slow_batch == batch
    specials = {tok.token_to_id(s): s for s in allowed}
    for text, ids in zip(texts, ones):
        # Between the special ids, sentencepiece's ids of the pieces between the special tokens.
        pieces = re.split("(" + "|".join(map(re.escape, sorted(allowed, key=len, reverse=True))) + ")", text)
        expected = [i for p in pieces if p for i in ([tok.token_to_id(p)] if p in allowed else sp.encode(p))]
        assert ids == expected, text
    assert any(i in specials for ids in ones for i in ids)
    assert tok.encode("<s>hi", allowed_special={"<s>"}, add_special_tokens=False)[0] == tok.token_to_id("<s>")


def test_pickled_tokenizer_keeps_the_path():
    tok = load_sentencepiece(model_path("botchan_en_unigram_1000"))
    texts = random_texts(50, 3)
    before = tok.encode_batch(texts, disallowed_special=(), add_special_tokens=False)
    again = pickle.loads(pickle.dumps(tok))
    assert again._pipeline._whole_for(frozenset()) is not None
    assert again.encode_batch(texts, disallowed_special=(), add_special_tokens=False) == before


def test_bpe_fuses_unknowns_across_words():
    """A model without a "▁" piece: the text's words (cut before each ▁) start with an unknown
    character, so unknowns meet across words; SentencePiece reports each run as one <unk>, and
    so must the one-call path (the model fuses them only within a word)."""
    from toksmith.formats.sentencepiece import CONTROL, NORMAL, UNKNOWN, SentencePieceBPE, SentencePieceNormalizer

    pieces = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("a", -1.0, NORMAL), ("b", -2.0, NORMAL), ("ab", -0.5, NORMAL)]
    model = SentencePieceBPE(pieces, unk_id=0, byte_fallback=False)
    normalizer = SentencePieceNormalizer()
    for text in ["x a x", "ab ab", "x", "a  b", "xy zab"]:
        general = model.encode_words([normalizer.normalize(text)])
        assert model._core._core.encode_normalized(normalizer.rust(), text, 0) == general
    unfused = model._core._core.encode_normalized(normalizer.rust(), "x a x", None)
    assert unfused == [0, 0, 2, 0] and model.encode_words([normalizer.normalize("x a x")]) == [0, 2, 0]


def test_an_uncovered_character_without_unknown_raises_on_both_paths():
    """A Unigram model with no unknown id meeting a character no piece covers: EncodeError, on
    the one-call path as on the general one, single and batch."""
    import toksmith
    from toksmith.formats.sentencepiece import NORMAL, SentencePieceNormalizer, SentencePieceUnigram
    from toksmith.pipeline import Pipeline
    from toksmith.tokenizer import Tokenizer

    pieces = [("▁", -1.0, NORMAL), ("a", -1.0, NORMAL), ("b", -2.0, NORMAL), ("▁ab", -0.5, NORMAL)]
    tok = Tokenizer.from_pipeline(Pipeline(SentencePieceUnigram(pieces, unk_id=None, byte_fallback=False),
                                           normalizer=SentencePieceNormalizer()))
    pipeline = tok._pipeline
    assert pipeline._whole_for(frozenset()) is not None
    assert tok.encode("ab a") == general(pipeline, ["ab a"])[0][0]
    for encode in (lambda: tok.encode("ab x"), lambda: tok.encode_batch(["ab", "ab x"], num_threads=2)):
        with pytest.raises(toksmith.EncodeError):
            encode()
    pipeline._whole_for = lambda allowed: None
    with pytest.raises(toksmith.EncodeError):
        tok.encode("ab x")
