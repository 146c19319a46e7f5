"""Every Unicode code point through toksmith's Hugging Face components and `tokenizers`'.

`tokenizers` mixes Unicode versions (Oniguruma 16.0, Rust std 17.0, normalization and
category tables of 10.0); toksmith's components carry tables for the differences. These
tests walk the whole code space (surrogates excepted) in chunks, each code point between
context characters, and compare the outputs.
"""

from __future__ import annotations

import pytest

from test_hf_support import REAL_TOKENIZERS

from toksmith import normalizers as norm
from toksmith import pre_tokenizers as pre

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex  # noqa: E402
from tokenizers import normalizers as hf_norm  # noqa: E402
from tokenizers import pre_tokenizers as hf_pre  # noqa: E402

CODE_POINTS = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def code_point_texts(template: str, size: int = 2048) -> list[str]:
    """All code points, ``size`` per text, each written as ``template`` with ``{c}`` replaced."""
    out = []
    for i in range(0, len(CODE_POINTS), size):
        out.append("".join(template.replace("{c}", c) for c in CODE_POINTS[i:i + size]))
    return out


def first_bad_code_point(ours, ref, template: str, chunk: str) -> str:
    for c in chunk:
        text = template.replace("{c}", c)
        if ours(text) != ref(text):
            return f"U+{ord(c):04X}: ours {ours(text)!r}, tokenizers {ref(text)!r}"
    return "(only in context)"


def compare_everywhere(ours, ref, template: str) -> None:
    bad = []
    for i, text in enumerate(code_point_texts(template)):
        if ours(text) != ref(text):
            bad.append(first_bad_code_point(ours, ref, template, CODE_POINTS[i * 2048:(i + 1) * 2048]))
    assert not bad, f"{len(bad)} chunks differ, e.g.:\n" + "\n".join(bad[:5])


NORMALIZERS = {
    "NFC": (norm.UnicodeForm("NFC"), hf_norm.NFC()),
    "NFD": (norm.UnicodeForm("NFD"), hf_norm.NFD()),
    "NFKC": (norm.UnicodeForm("NFKC"), hf_norm.NFKC()),
    "NFKD": (norm.UnicodeForm("NFKD"), hf_norm.NFKD()),
    "Lowercase": (norm.Lowercase(), hf_norm.Lowercase()),
    "StripAccents": (norm.StripAccents(), hf_norm.StripAccents()),
    "Bert": (norm.BertNormalizer(), hf_norm.BertNormalizer()),
    "Bert-clean": (norm.BertNormalizer(handle_chinese_chars=False, lowercase=False, strip_accents=False),
                   hf_norm.BertNormalizer(handle_chinese_chars=False, lowercase=False, strip_accents=False)),
    "Bert-strip-accents": (norm.BertNormalizer(clean_text=False, handle_chinese_chars=False, lowercase=False, strip_accents=True),
                           hf_norm.BertNormalizer(clean_text=False, handle_chinese_chars=False, lowercase=False, strip_accents=True)),
    "Strip": (norm.Strip(), hf_norm.Strip()),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", NORMALIZERS)
@pytest.mark.parametrize("template", ["{c} ", "a{c}\u0301b"], ids=["alone", "between"])
def test_normalizer_on_every_code_point(name, template):
    ours, ref = NORMALIZERS[name]
    compare_everywhere(ours.normalize, ref.normalize_str, template)


CHAR_CLASSES = [r"\s", r"\S", r"\w", r"\W", r"[\w\s]", r"\d", r"\D", r"\p{L}", r"\P{L}", r"\p{N}", r"\p{P}", r"\p{S}",
                r"\p{M}", r"\p{Cn}", r"\p{Han}", r"[^\s\p{L}\p{N}]", r"[[:alpha:]]", r"[[:punct:]]", r"[[:word:]]", r"\h"]


@pytest.mark.slow
@pytest.mark.parametrize("pattern", CHAR_CLASSES)
def test_regex_class_on_every_code_point(pattern):
    """Oniguruma's classes, translated for `regex`: the runs of code points each leaves out."""
    ours, ref = pre.Split(pattern, "removed", is_regex=True), hf_pre.Split(Regex(pattern), "removed")
    compare_everywhere(ours.pre_tokenize, lambda t: [w for w, _ in ref.pre_tokenize_str(t)], "{c}")


PRE_TOKENIZERS = {
    "BertPreTokenizer": (pre.BertPreTokenizer(), hf_pre.BertPreTokenizer()),
    "Punctuation": (pre.Punctuation("isolated"), hf_pre.Punctuation("isolated")),
    "Whitespace": (pre.Whitespace(), hf_pre.Whitespace()),
    "WhitespaceSplit": (pre.WhitespaceSplit(), hf_pre.WhitespaceSplit()),
    "Digits": (pre.Digits(individual_digits=True), hf_pre.Digits(individual_digits=True)),
    "Metaspace": (pre.Metaspace(), hf_pre.Metaspace()),
}  # ByteLevel and the Llama 3 regex: through the gpt2 and llama3 tokenizers below


@pytest.mark.slow
@pytest.mark.parametrize("name", PRE_TOKENIZERS)
def test_pre_tokenizer_on_every_code_point(name):
    ours, ref = PRE_TOKENIZERS[name]
    compare_everywhere(ours.pre_tokenize, lambda t: [w for w, _ in ref.pre_tokenize_str(t)], "a{c}1 {c}")


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL_TOKENIZERS)
def test_tokenizer_on_code_points(name):
    """Every code point of planes 0 and 1, every 31st above, in each real tokenizer."""
    from test_hf_parity import both

    ours, ref = both(name)
    points = [c for c in CODE_POINTS if ord(c) < 0x20000] + CODE_POINTS[0x20000 - 0x800::31]
    texts = ["".join(f"x{c}y {c}" for c in points[i:i + 4096]) for i in range(0, len(points), 4096)]
    expected = [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]
    bad = [i for i, (t, want) in enumerate(zip(texts, expected)) if ours.encode_ordinary(t) != want]
    assert not bad, f"{len(bad)} of {len(texts)} chunks differ, the first from U+{ord(points[bad[0] * 4096]):04X}"


def test_added_token_boundaries_on_sampled_code_points(tmp_path):
    """single_word, lstrip and rstrip look at the neighbouring characters (Unicode \\w and \\s)."""
    from test_hf_support import added_token, load_both, tokenizer_json

    vocab = {"[UNK]": 0}
    d = tokenizer_json({"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}, pre_tokenizer={"type": "WhitespaceSplit"})
    d["added_tokens"] = [added_token(1, "<w>", special=False, single_word=True, normalized=False),
                         added_token(2, "<l>", special=True, lstrip=True), added_token(3, "<r>", special=True, rstrip=True)]
    ours, ref = load_both(d, tmp_path)
    sample = CODE_POINTS[:0x3000] + CODE_POINTS[0x3000::97]
    texts = ["".join(f"{c}<w>{c} {c}<l>{c}<r>{c}" for c in sample[i:i + 512]) for i in range(0, len(sample), 512)]
    for text, enc in zip(texts, ref.encode_batch(texts)):
        assert ours.encode(text, allowed_special="all") == enc.ids


@pytest.mark.slow
def test_precompiled_on_every_code_point():
    pb = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    from conftest import data_path

    proto = pb.ModelProto()
    proto.ParseFromString(data_path("tokenizers", "sentencepiece", "kyoto_ja_unigram_8000.model").read_bytes())
    charsmap = proto.normalizer_spec.precompiled_charsmap
    ours, ref = norm.Precompiled(charsmap), hf_norm.Precompiled(charsmap)
    compare_everywhere(ours.normalize, ref.normalize_str, "{c} ")
    compare_everywhere(ours.normalize, ref.normalize_str, "a{c}\u0301\u0308")
