"""`encode_with_offsets` of Hugging Face Unigram pipelines (T5, XLM-R, ALBERT style): a
Precompiled normalizer (SentencePiece's rules), regex replacements, strips and lowercasing, then
whitespace splits, splits and Metaspace. Ids and char spans against `tokenizers`'
``Encoding.offsets``, on tokenizer.json files that `tokenizers` itself builds from the shared
SentencePiece Unigram models, and on the one toksmith writes for such a model."""

from __future__ import annotations

import base64
import json

import pytest

from test_hf_support import EDGE_STRINGS, corpus_texts
from test_offsets_pipelines import compare, random_texts

from conftest import data_path

import toksmith

tokenizers = pytest.importorskip("tokenizers", reason="the reference library tokenizers is not installed")

pytestmark = pytest.mark.slow  # about 30 s: thousands of texts through both libraries


def build(model_path, tmp_path, variant: str, byte_fallback: bool = False) -> str:
    """A tokenizer.json made by `tokenizers` from the vocabulary and rules of a SentencePiece
    Unigram model (read through toksmith's export), in the shape of a known pipeline."""
    from tokenizers import Regex, Tokenizer, models
    from tokenizers import normalizers as N
    from tokenizers import pre_tokenizers as P

    exported = tmp_path / "exported.json"
    toksmith.load(str(model_path)).save(exported, format="hf")
    spec = json.loads(exported.read_text(encoding="utf-8"))
    vocab = [tuple(v) for v in spec["model"]["vocab"]]
    if byte_fallback:
        have = {p for p, _ in vocab}
        vocab += [(f"<0x{b:02X}>", -20.0) for b in range(256) if f"<0x{b:02X}>" not in have]
    rules = next(n for n in spec["normalizer"]["normalizers"] if n["type"] == "Precompiled")
    charsmap = base64.b64decode(rules["precompiled_charsmap"])
    tok = Tokenizer(models.Unigram(vocab, spec["model"]["unk_id"], byte_fallback))
    squeeze = N.Replace(Regex(" {2,}"), " ")
    if variant == "t5":  # T5: whitespace split, then Metaspace
        tok.normalizer = N.Sequence([N.Precompiled(charsmap), squeeze])
        tok.pre_tokenizer = P.Sequence([P.WhitespaceSplit(), P.Metaspace(replacement="▁", prepend_scheme="always")])
    elif variant == "t5-first":  # T5 as transformers writes it with legacy=False: "▁" before the first word only
        tok.normalizer = N.Sequence([N.Precompiled(charsmap), squeeze])
        tok.pre_tokenizer = P.Sequence([P.WhitespaceSplit(), P.Metaspace(replacement="▁", prepend_scheme="first")])
    elif variant == "xlmr":  # XLM-R: Metaspace alone
        tok.normalizer = N.Sequence([N.Precompiled(charsmap), squeeze])
        tok.pre_tokenizer = P.Metaspace(replacement="▁", prepend_scheme="always")
    elif variant == "raw":  # the model alone
        pass
    else:  # strips, lowercasing, a literal replacement; digits split off, "▁" prepended to the first word only
        tok.normalizer = N.Sequence([N.Strip(), N.Lowercase(), N.Precompiled(charsmap), N.Replace("``", '"')])
        tok.pre_tokenizer = P.Sequence([P.Split(Regex(r"\d"), "isolated"),
                                        P.Metaspace(replacement="▁", prepend_scheme="first", split=False)])
    if variant != "raw":  # as in the published files, the control pieces are special added tokens
        tok.add_special_tokens([p for p, _ in vocab if p in ("<unk>", "<s>", "</s>", "<pad>")])
    path = tmp_path / f"{variant}.json"
    tok.save(str(path))
    return str(path)


def odd_texts(n: int, seed: int) -> list[str]:
    """Short texts dense in what the rules change: runs of spaces, characters NFKC rewrites or
    removes (at the start too), unknown characters next to the unknown token's own string."""
    import random

    rng = random.Random(seed)
    odd = ["  ", " ", "\u200b", "\u00a0", "①", "ﬁ", "e\u0301", "Å", "Ⅻ", "\t", "\n", "☃", "😀", "ｶﾞ", "\u3000", "ß",
           "İ", "<unk>", "<s>", "\ufeff", "``"]
    return ["".join(rng.choice(odd) if rng.random() < 0.5 else rng.choice("abc DEF 123") for _ in range(rng.randrange(1, 12)))
            for _ in range(n)]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return (EDGE_STRINGS + [t for group in corpus_texts(600, udhr_every=24).values() for t in group]
            + random_texts(200, 3) + odd_texts(600, 4))


@pytest.mark.parametrize("variant,byte_fallback", [("t5", False), ("t5", True), ("t5-first", False), ("xlmr", False),
                                                    ("strip-lower", False)])
def test_unigram_pipeline_offsets_match_tokenizers(texts, tmp_path, variant, byte_fallback):
    from tokenizers import Tokenizer

    path = build(data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"), tmp_path, variant, byte_fallback)
    ours = toksmith.load(path)
    assert ours._pipeline.offsets_supported()
    compare(ours, Tokenizer.from_file(path), texts, "all")


def test_japanese_unigram_offsets_match_tokenizers(texts, tmp_path):
    from tokenizers import Tokenizer

    path = build(data_path("tokenizers", "sentencepiece", "kyoto_ja_unigram_8000.model"), tmp_path, "xlmr")
    compare(toksmith.load(path), Tokenizer.from_file(path), texts, "all")


def test_exported_unigram_offsets_match_tokenizers(texts, tmp_path):
    """The tokenizer.json toksmith writes for a SentencePiece Unigram model, read back."""
    from tokenizers import Tokenizer

    path = tmp_path / "botchan.json"
    toksmith.load(str(data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"))).save(path, format="hf")
    ours = toksmith.load(str(path))
    compare(ours, Tokenizer.from_file(str(path)), texts, "all")
    # A squeezed run of spaces comes from its last space; "ﬁ" gives "fi", both from it; "①" gives "1".
    ids, _, spans = ours.encode_with_offsets("Hello  wörld ①  ﬁne")
    assert spans[-3:] == [(12, 13), (13, 14), (15, 19)]


@pytest.mark.parametrize("byte_fallback", [False, True])
def test_unknown_token_string_fuses_with_unknown_characters(tmp_path, byte_fallback):
    """A model whose "<unk>" is not an added token: `tokenizers` matches the string "<unk>" as
    that piece and fuses it with the unknown characters next to it (one unknown id; with byte
    fallback, the bytes of the whole run, "<unk>" included, unless it stands alone)."""
    from tokenizers import Tokenizer

    path = build(data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"), tmp_path, "raw", byte_fallback)
    ours, ref = toksmith.load(path), Tokenizer.from_file(path)
    texts = ["☃<unk>", "<unk><unk>", "<unk>", "a☃☃b", "<unk>unk", "<unk>☃", "x<unk>", "<0x41>☃", "☃ <unk> ☃"]
    for text in texts:
        assert ours.encode(text, disallowed_special=()) == ref.encode(text).ids, text
    compare(ours, ref, texts + odd_texts(300, 5), "all")
    fused = ours.encode("☃<unk>", disallowed_special=())
    assert len(fused) == (8 if byte_fallback else 1)


@pytest.mark.parametrize("variant", ["t5-first", "strip-lower"])
def test_first_word_is_told_by_where_its_characters_come_from(tmp_path, variant):
    """Metaspace's prepend_scheme "first" puts "▁" before every word whose first character
    comes from the text's first: "¨" is " ̈" after NFKC, and its second word still starts the
    text; after a strip, or "``" -> '"' (from its last character), none does. `encode` and
    `encode_with_offsets` agree with `tokenizers` on both."""
    from tokenizers import Tokenizer

    path = build(data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"), tmp_path, variant)
    ours, ref = toksmith.load(path), Tokenizer.from_file(path)
    texts = ["¨", "´x", "¼", "``", "``c", " ¨x", "\t1", "x ¨", "①b"]
    for text in texts:
        assert ours.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False).ids, text
    compare(ours, ref, texts, "all")


def _botchan_vocab(tmp_path, byte_fallback: bool, without: tuple[str, ...] = ()):
    exported = tmp_path / "exported.json"
    toksmith.load(str(data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"))).save(exported, format="hf")
    spec = json.loads(exported.read_text(encoding="utf-8"))
    vocab = [tuple(v) for v in spec["model"]["vocab"] if v[0] not in without]
    if byte_fallback:
        have = {p for p, _ in vocab}
        vocab += [(f"<0x{b:02X}>", -20.0) for b in range(256) if f"<0x{b:02X}>" not in have]
    return vocab, spec


def test_metaspace_first_behind_a_normalizer_without_alignment(tmp_path):
    """NFKC (whose alignment toksmith does not track) and Metaspace "first": encode works, as
    tokenizers does (it raised AttributeError in an intermediate commit)."""
    from tokenizers import Tokenizer, models
    from tokenizers import normalizers as N
    from tokenizers import pre_tokenizers as P

    vocab, spec = _botchan_vocab(tmp_path, False)
    tok = Tokenizer(models.Unigram(vocab, spec["model"]["unk_id"], False))
    tok.normalizer = N.Sequence([N.NFKC(), N.Lowercase()])
    tok.pre_tokenizer = P.Metaspace(replacement="▁", prepend_scheme="first")
    path = str(tmp_path / "nfkc.json")
    tok.save(path)
    ours, ref = toksmith.load(path), Tokenizer.from_file(path)
    for text in ["Hello world", "  Hello", "ﬁne day"]:
        assert ours.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("byte_fallback", [False, True])
def test_unknown_runs_are_unknown_characters_or_the_unknown_string(tmp_path, byte_fallback):
    """A vocabulary without "<", "▁" and "n" on their own: the unknown token's string fuses with
    the unknown characters around it, across a "▁" that is no piece, and a token's string inside
    "<unk>" does not end the run early."""
    from tokenizers import Tokenizer, models

    vocab, spec = _botchan_vocab(tmp_path, byte_fallback, without=("<", "▁", "n"))
    path = str(tmp_path / "bare.json")
    Tokenizer(models.Unigram(vocab, spec["model"]["unk_id"], byte_fallback)).save(path)
    ours, ref = toksmith.load(path), Tokenizer.from_file(path)
    texts = ["<unk>▁", "<unk>▁☃", "a<unk>▁☃", "<unk>▁a", "é<unk>nÅ", "☃<0x41><unk>", "n<unk>n", "<<unk>"]
    for text in texts:
        assert ours.encode(text, disallowed_special=()) == ref.encode(text).ids, text
    compare(ours, ref, texts + odd_texts(200, 6), "all")


def test_bert_pre_tokenizer_then_metaspace_first(tmp_path):
    """BertPreTokenizer passes on how many of its first word's characters come from the text's
    first ("¨" is " ̈" after NFKC: the word " ̈" still starts the text)."""
    from tokenizers import Tokenizer, models
    from tokenizers import normalizers as N
    from tokenizers import pre_tokenizers as P

    vocab, spec = _botchan_vocab(tmp_path, False)
    rules = next(n for n in spec["normalizer"]["normalizers"] if n["type"] == "Precompiled")
    tok = Tokenizer(models.Unigram(vocab, spec["model"]["unk_id"], False))
    tok.normalizer = N.Precompiled(base64.b64decode(rules["precompiled_charsmap"]))
    tok.pre_tokenizer = P.Sequence([P.BertPreTokenizer(), P.Metaspace(replacement="▁", prepend_scheme="first")])
    path = str(tmp_path / "bert_first.json")
    tok.save(path)
    ours, ref = toksmith.load(path), Tokenizer.from_file(path)
    for text in ["¨x", "x ¨", " ¨x", "¼ y"]:
        assert ours.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False).ids, text
