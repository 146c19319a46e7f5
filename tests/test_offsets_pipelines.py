"""`encode_with_offsets` of pipelines that normalize the text: BERT (WordPiece) and Gemma 3 (BPE
over characters, " " replaced by "▁", byte fallback). Ids and char spans against `tokenizers`'
``Encoding.offsets`` on the shared corpora, the edge strings and random text dense in what the
normalizer changes (accents, case, CJK, control characters) and in byte-fallback characters."""

from __future__ import annotations

import random

import pytest

from test_hf_parity import both
from test_hf_support import EDGE_STRINGS, bert_from_vocab_txt, corpus_texts

from conftest import data_path

from toksmith.formats.hf import load_hf


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["Héllo", "wörld", "e\u0301", "a\u0301\u0316b", "İstanbul", "ΣΑΣ", "中文", "字", "ﬁne", "x²", "Ⅻ", "ǅ",
             "[CLS]", "[SEP]", "[MASK]", "unaffable", "isn't", "\x00", "\x07", "\u200b", "\ufeff", "\U0001f600",
             "Ñandú", "ß", "ﬀ", "\u0301", "a" * 120, "😀x", "٣", "‍", "Å", "\u212b"]
    spaces = [" ", "  ", "\n", "\t", "\u3000", "\r\n", "\u00a0", ""]
    return ["".join(rng.choice(spaces) if rng.random() < 0.4 else rng.choice(words) for _ in range(rng.randrange(0, 25)))
            for _ in range(n)]


def compare(ours, ref, texts: list[str], allowed) -> None:
    problems = []
    for text in texts:
        expected = ref.encode(text, add_special_tokens=False)
        ids, byte_spans, char_spans = ours.encode_with_offsets(text, allowed_special=allowed, disallowed_special=())
        if ids != expected.ids or char_spans != expected.offsets:
            problems.append(f"{text[:60]!r}: {list(zip(ids, char_spans))[:8]} != {list(zip(expected.ids, expected.offsets))[:8]}")
            continue
        data = text.encode("utf-8")
        assert byte_spans == [(len(text[:s].encode()), len(text[:e].encode())) for s, e in char_spans]
        assert all(0 <= s <= e <= len(data) for s, e in byte_spans)
    assert not problems, f"{len(problems)} of {len(texts)} texts differ from tokenizers, e.g.:\n" + "\n".join(problems[:5])


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return EDGE_STRINGS + [t for group in corpus_texts(4_000, udhr_every=6).values() for t in group] + random_texts(600, 1)


def test_bert_offsets_match_tokenizers(texts):
    ours, ref = both("bert-base-uncased")
    assert any(not t.isascii() for t in texts)
    # tokenizers matches its added tokens ([CLS], [MASK]...) always: allow them all.
    compare(ours, ref, texts, "all")
    assert ours.encode_with_offsets("Héllo [MASK]", allowed_special="all")[2] == [(0, 5), (6, 12)]


@pytest.mark.parametrize("lowercase", [True, False])
def test_cased_and_uncased_vocab_txt(lowercase, texts):
    """The vocab.txt form: cased keeps accents and case, so the spans are of the characters as they are."""
    path = data_path("tokenizers", "hf", "bert-base-uncased", "vocab.txt")
    compare(load_hf(path, lowercase=lowercase), bert_from_vocab_txt(path, lowercase), texts[:800], "all")


def test_spans_without_the_special_tokens_allowed():
    """Not allowed (and not disallowed), a special-token string is text: its pieces span it."""
    ours, _ = both("bert-base-uncased")
    ids, _, spans = ours.encode_with_offsets("a [MASK] b", disallowed_special=())
    assert ids == ours.encode("a [MASK] b", disallowed_special=(), add_special_tokens=False)
    assert spans[0] == (0, 1) and spans[-1] == (9, 10) and len(ids) > 3
    assert [("a [MASK] b")[s:e] for s, e in spans[1:-1]] == ["[", "MASK", "]"]


def test_gemma3_offsets_match_tokenizers(texts):
    """Gemma 3: added tokens (newlines, space runs, HTML tags) cut out, each byte token of a
    character outside the vocabulary spans that character."""
    ours, ref = both("gemma3")
    extra = ["Hello  world", "\U000E0100x", "a\U0001FAE8b", " x", "x\n\ny", "𝔘𝔫𝔦", "<start_of_turn>user\nhi<end_of_turn>"]
    compare(ours, ref, extra + texts, "all")
    ids, _, spans = ours.encode_with_offsets("a\U0001FAE8b")
    assert len(ids) == 6 and spans[1:5] == [(1, 2)] * 4  # four byte tokens, one character


def test_tokens_that_do_not_follow_the_text_are_refused():
    """BPE that drops a character outside its vocabulary, or gives it the unknown token: no
    span can be told for it, so EncodeError (encode() still gives the ids)."""
    import toksmith
    from toksmith import normalizers as norm
    from toksmith.formats.hf import HFBPE
    from toksmith.pipeline import Pipeline
    from toksmith.tokenizer import Tokenizer

    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "▁": 4}
    for unk in (None, "<unk>"):
        model = HFBPE(vocab, [("a", "b")], unk_token=unk)
        tok = Tokenizer.from_pipeline(Pipeline(model, normalizer=norm.Replace(" ", "▁")))
        assert tok.encode_with_offsets("ab a")[2] == [(0, 2), (2, 3), (3, 4)]
        with pytest.raises(toksmith.EncodeError, match="encode\\(\\) gives its ids"):
            tok.encode_with_offsets("ab x")
        assert tok.encode("ab x", add_special_tokens=False)[:2] == [3, 4]
