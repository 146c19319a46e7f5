"""save(format="hf") for SentencePiece-style tokenizers, checked with `tokenizers`.

A tokenizer loaded from a SentencePiece .model (BPE or Unigram) must encode in `tokenizers` as
the `sentencepiece` library does, and one trained by toksmith (Unigram, or SentencePiece-style BPE)
as toksmith does (special strings as plain text: SentencePiece never reads control, unknown or
byte pieces from text). Every expected id comes from the reference libraries at test time; the
texts are real corpora, edge strings and strings made to hit the reserved pieces.
"""

from __future__ import annotations

import functools
import json
import lzma
import random

import pytest
import regex

from conftest import data_path
from test_hf_support import EDGE_STRINGS, read_text
from test_sentencepiece_parity import EDGE, MODELS, corpus_samples, f32_viterbi, model_path

import toksmith
from toksmith.errors import FormatError
from toksmith.formats.hf import hf_float_text, load_hf, save_hf, serde_float
from toksmith.formats.sentencepiece import load_sentencepiece
from toksmith.train_subword import train_unigram, unigram_tokenizer

tokenizers = pytest.importorskip("tokenizers")
spm = pytest.importorskip("sentencepiece")

#: Strings aimed at the pieces SentencePiece never matches, and at its whitespace rules.
ADVERSARIAL = [
    "<s>", "</s>", "<unk>", "<0x41>", "<pad>", "<mask>", "<sep>", " <s> x </s> ", "a<s>b", "<<s>>", "</s></s>",
    "<unk><unk>", "x <0x41><0xE3><0x81>", "\t<s>\n", "☃<s>☃", "𝄞</s>𝄞", "<s<s>>", "<0x41 <0x4> 0x41>", "<\u0301s>",
    "   ", "  a  ", "a\n\nb", "a\tb", "\u2581", "\u2581\u2581x\u2581", "x \u2581 y", "\u3000x\u3000",
    "𐍈𐍉 unknown ☃☃ chars ꙮ", "ꙮ<s>ꙮ", "<sep> <sep>x<sep>", "ﬁ<s>Ⅻ", "a" * 200 + "<s>",
]


def export(tok, tmp_path, name="tokenizer.json"):
    path = tmp_path / name
    tok.save(path, format="hf")
    return tokenizers.Tokenizer.from_file(str(path)), path


@functools.lru_cache(maxsize=4)
def sample_lines(limit: int) -> list[str]:
    return [line for text in corpus_samples(limit).values() for line in text.split("\n")]


# ------------------------------------------------------------------ SentencePiece models


@pytest.mark.parametrize("name", MODELS)
def test_sentencepiece_model_encodes_as_sentencepiece(name, tmp_path):
    sp = spm.SentencePieceProcessor(model_file=str(model_path(name)))
    tok = load_sentencepiece(model_path(name))
    hf, path = export(tok, tmp_path)
    assert [hf.id_to_token(i) for i in range(sp.get_piece_size())] == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    texts = EDGE + EDGE_STRINGS + ADVERSARIAL + sample_lines(60_000)
    want = sp.encode(texts)
    got = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    differ = []
    for text, w, g in zip(texts, want, got):
        if w != g:
            differ.append(text)
            # Allowed only where SentencePiece's single-precision path sums decide between two
            # Unigram segmentations that double precision (Hugging Face's) orders the other way.
            assert "unigram" in name, text
            normalized = tok.pipeline.normalizer.normalize(text)
            model = tok.pipeline.model
            assert f32_viterbi(model, normalized) == w, text
            assert f32_viterbi(model, normalized, single_precision=False) == g, text
        assert hf.decode(g) == sp.decode(w), text
    assert len(differ) <= len(texts) // 10_000, differ[:5]
    # toksmith reads the export back as Hugging Face runs it.
    again = load_hf(path)
    assert [again.encode(t, disallowed_special=()) for t in texts[:3000]] == got[:3000]


def test_sentencepiece_model_with_user_defined_and_byte_pieces(tmp_path):
    """A .model with user-defined pieces and byte fallback (written by toksmith, read back by the
    SentencePiece loader): the export encodes as the sentencepiece library does."""
    from toksmith.formats.sentencepiece_writer import write_sentencepiece

    lines = [line for line in data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    trained = train_unigram(lines + ["see <sep> it<sep>now"] * 3, vocab_size=1400, byte_fallback=True,
                            user_defined_symbols=["<sep>"], control_symbols=["<s>", "</s>", "<mask>"])
    write_sentencepiece(trained, tmp_path / "m.model")
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    hf, _ = export(load_sentencepiece(tmp_path / "m.model"), tmp_path)
    texts = EDGE + ADVERSARIAL + lines[:2000] + sample_lines(5_000)
    want = sp.encode(texts)
    got = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert [t for t, w, g in zip(texts, want, got) if w != g] == []
    assert [t for t, w in zip(texts, want) if hf.decode(w) != sp.decode(w)] == []
    assert hf.encode("a<sep>b", add_special_tokens=False).ids == sp.encode("a<sep>b")


# ------------------------------------------------------------------ tokenizers trained by toksmith


@pytest.fixture(scope="module")
def botchan_lines() -> list[str]:
    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def trained_texts() -> list[str]:
    return EDGE + EDGE_STRINGS + ADVERSARIAL + sample_lines(20_000)


UNIGRAM = {"algorithm": "unigram"}
BPE = {"level": "char", "pattern": "metaspace"}  # SentencePiece-style BPE


@pytest.mark.parametrize("options", [
    UNIGRAM, {**UNIGRAM, "byte_fallback": True}, {**UNIGRAM, "normalization": None},
    {**UNIGRAM, "add_dummy_prefix": False},
    {**UNIGRAM, "user_defined_symbols": ["<sep>"], "control_symbols": ["<s>", "</s>", "<mask>"]},
    {**UNIGRAM, "japanese": True},
    BPE, {**BPE, "byte_fallback": True}, {**BPE, "normalization": None}, {**BPE, "add_dummy_prefix": False},
    {**BPE, "japanese": True, "special_tokens": ["<s>", "</s>", "<mask>"]},
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items() if k not in ("level", "control_symbols")))
def test_trained_tokenizers_encode_as_toksmith(options, botchan_lines, trained_texts, tmp_path):
    options = dict(options)
    corpus = botchan_lines
    if options.pop("japanese", False):
        corpus = corpus + read_text(data_path("corpora", "debian-handbook", "ja-JP.txt.xz"), 100_000).splitlines()
    tok = toksmith.train(corpus, vocab_size=1500 if options.get("byte_fallback") else 1200, **options)
    hf, path = export(tok, tmp_path)
    got = [e.ids for e in hf.encode_batch(trained_texts, add_special_tokens=False)]
    differ = [t for t, g in zip(trained_texts, got) if tok.encode(t, disallowed_special=()) != g]
    assert differ == []
    assert [t for t, g in zip(trained_texts, got) if hf.decode(g, skip_special_tokens=False) != tok.decode(g)] == []
    assert [hf.id_to_token(i) for i in range(tok.vocab_size)] == [tok.id_to_token(i) for i in range(tok.vocab_size)]
    again = load_hf(path)
    assert [again.encode(t, disallowed_special=()) for t in trained_texts[:3000]] == got[:3000]


# ------------------------------------------------------------------ exact agreement of the three (trained)
#
# Trained SentencePiece-style tokenizers normalize with the character map their .model carries,
# and trained Unigram scores are multiples of 1/64, so that toksmith, the .model in
# `sentencepiece` and the tokenizer.json in `tokenizers` give the same ids; the texts below are
# where that did not hold before (shared with test_sentencepiece_writer.py).

UDHR_COMBINING = ("arb", "pes_1", "vie", "mya", "evn")  # Arabic, Farsi, Vietnamese, Burmese, Evenki


def udhr_lines(codes) -> list[str]:
    lines = []
    with lzma.open(data_path("corpora", "udhr", "udhr.jsonl.xz"), "rt", encoding="utf-8") as f:
        for record in f:
            record = json.loads(record)
            if record["code"] in codes:
                lines += [line for article in record["articles"].values() for line in article.split("\n")]
    assert lines, f"no UDHR declaration among {codes}"
    return lines


@functools.lru_cache(maxsize=1)
def combining_texts() -> tuple[list[str], list[str]]:
    """(training lines, test lines) of Arabic (Debian Handbook, UDHR) and of UDHR languages with
    combining marks: text where Python's NFKC and SentencePiece's rules differ (NFKC puts an
    Arabic vowel sign before a shadda, composes Vietnamese and Burmese sequences)."""
    arabic = [line for line in read_text(data_path("corpora", "debian-handbook", "ar-MA.txt.xz"), 200_000).splitlines()
              if line.strip()]
    half = len(arabic) // 2
    return arabic[:half], arabic[half:] + udhr_lines(UDHR_COMBINING)


@functools.lru_cache(maxsize=1)
def near_tie_texts() -> tuple[list[str], list[str], list[str]]:
    """(training lines, test lines, documents): Linux documentation, whose runs of ``.``, ``-``,
    ``=`` give Unigram segmentations that tie or nearly tie, plus runs of such characters alone
    and within words; the documents join test lines into texts of about 25,000 characters (path
    scores near -100,000)."""
    lines = read_text(data_path("corpora", "en", "linux-doc-6.1.Documentation.txt.xz"), 400_000).splitlines()
    half = len(lines) // 2
    runs = [c * n for c in ".-=_*~" for n in range(1, 81)]
    runs += [f"{w}{c * n}{w}" for c in ".-" for n in range(1, 30) for w in ("a", " x ", "1")]
    runs += ["Place - Suite 330, Boston, MA 02111-1307, USA.", "500....989", "wait..... what?! -- no ---"]
    held = lines[half:]
    documents = ["\n".join(held[i:i + 700]) for i in range(0, len(held), 700)]
    return lines[:half], runs + held, documents


def nfkc_differs(texts: list[str]) -> list[str]:
    """The texts where Python's NFKC (what trained tokenizers used before) and SentencePiece's
    rules in toksmith's character map normalize differently."""
    from toksmith.charsmap import PrecompiledCharsmap
    from toksmith.formats.sentencepiece_writer import toksmith_charsmap
    from toksmith.normalizers import UnicodeForm

    rules, nfkc = PrecompiledCharsmap(toksmith_charsmap("nfkc")), UnicodeForm("NFKC")
    return [t for t in texts if rules.normalize(t) != nfkc.normalize(t)]


@pytest.mark.parametrize("options", [UNIGRAM, {**BPE, "byte_fallback": True}], ids=["unigram", "bpe"])
def test_trained_tokenizers_with_combining_marks_encode_as_toksmith(options, botchan_lines, tmp_path):
    train, texts = combining_texts()
    assert len(nfkc_differs(texts)) >= 20  # the texts do hold what used to differ
    tok = toksmith.train(botchan_lines + train, vocab_size=3000, **options)
    hf, path = export(tok, tmp_path)
    normalized = hf.normalizer.normalize_str
    got = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    differ = []
    for text, g in zip(texts, got):
        if tok.encode(text, disallowed_special=()) != g:
            # Allowed only where Hugging Face applies the character map differently (per grapheme
            # cluster, see formats/hf_sentencepiece.py): a cluster of several marks.
            assert normalized(text) != tok.pipeline.normalizer.normalize(text), text
            assert any(len(c) >= 3 for c in regex.findall(r"\X", text)), text
            differ.append(text)
    assert len(differ) <= len(texts) // 1000, differ[:3]
    assert [t for t, g in zip(texts, got) if hf.decode(g) != tok.decode(g)] == []
    again = load_hf(path)  # toksmith reads the export back with Hugging Face's normalizer
    assert [again.encode(t, disallowed_special=()) for t in texts] == got


def test_trained_unigram_near_ties_encode_as_toksmith(botchan_lines, tmp_path):
    """tokenizers adds path scores in double precision, as toksmith does: identical, on near-ties
    and documents too (the scores are multiples of 1/64, exact either way)."""
    train, texts, documents = near_tie_texts()
    tok = toksmith.train(botchan_lines + train, vocab_size=3000, algorithm="unigram")
    assert all(s * 64 == int(s * 64) for _, s in tok.pipeline.model.pieces)
    hf, _ = export(tok, tmp_path)
    for batch in (texts, documents):
        got = [e.ids for e in hf.encode_batch(batch, add_special_tokens=False)]
        assert [t[:80] for t, g in zip(batch, got) if tok.encode(t, disallowed_special=()) != g] == []


def test_reserved_pieces_that_cannot_be_kept_out_are_refused(tmp_path):
    pieces = [("\u2581", -1.0), ("<x", -2.0), ("x>", -2.0), ("<", -3.0), ("x", -3.0), (">", -3.0)]
    for controls in (["<x>"], ["|"]):  # every pair of characters is in a piece; one character
        tok = unigram_tokenizer(pieces, control_symbols=controls, normalization=None)
        with pytest.raises(FormatError, match="cannot be kept from matching"):
            tok.save(tmp_path / "t.json", format="hf")
        assert not (tmp_path / "t.json").exists()


# ------------------------------------------------------------------ scores as tokenizers reads them


def read_back_by_tokenizers(spellings: list[str]) -> list[float]:
    """The scores `tokenizers` reads from a Unigram tokenizer.json with these number spellings
    (serialized back by it with the shortest exact spelling, which Python reads exactly)."""
    vocab = ",".join(f'["p{i}",{s}]' for i, s in enumerate(spellings))
    text = ('{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,'
            '"pre_tokenizer":null,"post_processor":null,"decoder":null,'
            f'"model":{{"type":"Unigram","unk_id":0,"vocab":[{vocab}],"byte_fallback":false}}}}')
    return [score for _, score in json.loads(tokenizers.Tokenizer.from_str(text).to_str())["model"]["vocab"]]


def test_serde_float_reads_numbers_as_tokenizers_does():
    rnd = random.Random(7)
    values = [-rnd.uniform(0.01, 40.0) for _ in range(3000)] + [rnd.uniform(-1e-5, 1e-5) for _ in range(200)]
    spellings = [repr(v) for v in values] + ["-0.5", "1e-05", "-12345678901234567890.5", "0.1234567890123456789012",
                                             "3", "-2.5E3", "1.7976931348623157e308", "4.9e-324"]
    theirs = read_back_by_tokenizers(spellings)
    assert [serde_float(s) for s in spellings] == theirs
    assert sum(serde_float(s) != float(s) for s in spellings) > 50  # the cases where the two differ are there


def test_scores_are_spelled_so_tokenizers_reads_them_exactly():
    rnd = random.Random(11)
    values = [-rnd.uniform(0.5, 40.0) for _ in range(3000)]
    spellings = [hf_float_text(v) for v in values]
    assert [float(s) for s in spellings] == values
    theirs = read_back_by_tokenizers(spellings)
    exact = sum(a == b for a, b in zip(theirs, values))
    assert exact >= len(values) * 0.995  # the rest cannot be spelled so (see hf_float_text)


def test_bpe_model_with_user_defined_pieces_is_refused(tmp_path):
    from toksmith.formats.sentencepiece import USER_DEFINED, read_model_proto, sentencepiece_from_proto

    proto = read_model_proto(model_path("botchan_en_bpe_1000").read_bytes())
    proto.pieces[-1].type = USER_DEFINED
    tok = sentencepiece_from_proto(proto)
    with pytest.raises(FormatError, match="user-defined pieces"):
        tok.save(tmp_path / "t.json", format="hf")
    assert not (tmp_path / "t.json").exists()
