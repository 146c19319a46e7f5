"""Each Hugging Face component and option, in small tokenizer.json files, against `tokenizers`.

Normalizers and pre-tokenizers are checked through a WordLevel model whose vocabulary holds
every word `tokenizers` produces for the texts (see ``word_level_json``): equal ids then mean
equal words. Models are trained by `tokenizers`' own trainers; decoders see arbitrary ids.
"""

from __future__ import annotations

import json

import pytest

from conftest import data_path
from test_hf_support import (
    EDGE_STRINGS,
    chunks,
    compare_decodings,
    compare_encodings,
    load_both,
    random_id_lists,
    read_text,
    tokenizer_json,
    word_level_json,
)


def N(type_: str, **options) -> dict:
    return {"type": type_, **options}


BEHAVIORS = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
BERT_NORMALIZER = N("BertNormalizer", clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)

NORMALIZERS = {
    **{form: N(form) for form in ("NFC", "NFD", "NFKC", "NFKD")},
    "Lowercase": N("Lowercase"),
    "StripAccents": N("Sequence", normalizers=[N("NFD"), N("StripAccents")]),
    "Bert": BERT_NORMALIZER,
    "Bert-cased": N("BertNormalizer", clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=False),
    "Bert-strip-only": N("BertNormalizer", clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False),
    "Bert-lower-keep-accents": N("BertNormalizer", clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=True),
    "Replace-string": N("Replace", pattern={"String": " "}, content="\u2581"),
    "Replace-regex": N("Replace", pattern={"Regex": r"\s+"}, content=" "),
    "Replace-empty-matches": N("Replace", pattern={"Regex": r"x*"}, content="-"),
    "Replace-delete": N("Replace", pattern={"Regex": r"(?i)e\b"}, content=""),
    "Prepend": N("Prepend", prepend="\u2581"),
    "Strip": N("Strip", strip_left=True, strip_right=True),
    "Strip-left": N("Strip", strip_left=True, strip_right=False),
    "Strip-right": N("Strip", strip_left=False, strip_right=True),
    "ByteLevel": N("ByteLevel"),
    "Sequence": N("Sequence", normalizers=[N("NFKC"), N("Lowercase"), N("Replace", pattern={"String": "e"}, content="E")]),
}

PRE_TOKENIZERS = {
    "ByteLevel": N("ByteLevel", add_prefix_space=True, trim_offsets=True, use_regex=True),
    "ByteLevel-plain": N("ByteLevel", add_prefix_space=False, trim_offsets=False, use_regex=False),
    **{f"Split-regex-{b}-{inv}": N("Split", pattern={"Regex": r"\s+|[,.]"}, behavior=b, invert=inv)
       for b in BEHAVIORS for inv in (False, True)},
    **{f"Split-string-{b}": N("Split", pattern={"String": " "}, behavior=b, invert=False) for b in BEHAVIORS},
    "Split-llama3": N("Split", behavior="Isolated", invert=False, pattern={"Regex": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")}),
    "Split-empty-matches": N("Split", pattern={"Regex": r"a*"}, behavior="MergedWithPrevious", invert=False),
    "Split-lookahead": N("Split", pattern={"Regex": r"(?=\s)"}, behavior="Isolated", invert=False),
    "Split-possessive-anchors": N("Split", pattern={"Regex": r"^\s*+|\w++$|\h+"}, behavior="Isolated", invert=False),
    **{f"Metaspace-{s}-{sp}": N("Metaspace", replacement="\u2581", prepend_scheme=s, split=sp)
       for s in ("always", "first", "never") for sp in (True, False)},
    "Metaspace-legacy": N("Metaspace", replacement="\u2581", add_prefix_space=True),
    "Metaspace-first-after-split": N("Sequence", pretokenizers=[
        N("WhitespaceSplit"), N("Metaspace", replacement="\u2581", prepend_scheme="first", split=True)]),
    "BertPreTokenizer": N("BertPreTokenizer"),
    "Whitespace": N("Whitespace"),
    "WhitespaceSplit": N("WhitespaceSplit"),
    "Digits": N("Digits", individual_digits=False),
    "Digits-individual": N("Digits", individual_digits=True),
    **{f"Punctuation-{b}": N("Punctuation", behavior=b) for b in BEHAVIORS},
    "CharDelimiterSplit": N("CharDelimiterSplit", delimiter="e"),
    "Sequence": N("Sequence", pretokenizers=[N("Whitespace"), N("Digits", individual_digits=True),
                                            N("ByteLevel", add_prefix_space=False, use_regex=False, trim_offsets=False)]),
}

# Normalizers that drop the first character, before Metaspace(prepend_scheme="first").
FIRST_WORD = {
    "Strip": N("Strip", strip_left=True, strip_right=False),
    "Bert": BERT_NORMALIZER,
    "Replace-delete": N("Replace", pattern={"Regex": r"^x"}, content=""),
    "StripAccents": N("StripAccents"),
}

ADDED = [
    ("<s>", {"special": True}),
    ("[x]", {"special": False, "normalized": False}),
    ("hello", {"special": False, "single_word": True, "normalized": False}),
    ("the", {"special": False, "lstrip": True, "rstrip": True, "normalized": True}),
    ("<|eot|>", {"special": True, "lstrip": True}),
    ("END", {"special": True, "rstrip": True, "normalized": True}),
    ("ing", {"special": False, "single_word": True, "normalized": True}),
    ("\ufb01x", {"special": False, "normalized": True}),
]
ADDED_TEXTS = ["<s>hello world", "hello<s> the end", "  the  ", "xhello hello_ hellox h\u00e9llo", "a <|eot|>   b END  c",
               "singing ing ing_ \u200ding", "[x]hello[x]", "The THE the\tthe\n", "\ufb01x fix FIX", "xthe", "\u0301the"]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    out = list(EDGE_STRINGS) + ADDED_TEXTS
    out += chunks(read_text(data_path("corpora", "en", "botchan.txt"), 12_000))
    for lang in ("ja-JP", "de-DE", "ar-MA", "ru-RU", "vi-VN"):
        out += chunks(read_text(data_path("corpora", "debian-handbook", f"{lang}.txt.xz"), 3_000))
    return out


def check_words(components: dict, added, texts, tmp_path) -> None:
    d = word_level_json(components, added, texts)
    ours, ref = load_both(d, tmp_path)
    problems = compare_encodings(ours, ref, texts, add_special_tokens=True)
    problems += compare_decodings(ours, ref, [e.ids for e in ref.encode_batch(texts[:40])])
    assert not problems, f"{len(problems)} differences, e.g.:\n" + "\n".join(problems[:5])


@pytest.mark.parametrize("name", NORMALIZERS)
@pytest.mark.parametrize("with_added", [False, True], ids=["plain", "added-tokens"])
def test_normalizer(name, with_added, texts, tmp_path):
    check_words({"normalizer": NORMALIZERS[name], "pre_tokenizer": N("WhitespaceSplit")},
                ADDED if with_added else [], texts, tmp_path)


@pytest.mark.parametrize("name", PRE_TOKENIZERS)
@pytest.mark.parametrize("with_added", [False, True], ids=["plain", "added-tokens"])
def test_pre_tokenizer(name, with_added, texts, tmp_path):
    check_words({"pre_tokenizer": PRE_TOKENIZERS[name]}, ADDED if with_added else [], texts, tmp_path)


@pytest.mark.parametrize("name", FIRST_WORD)
def test_metaspace_first_follows_the_original_offset(name, texts, tmp_path):
    """prepend_scheme="first" marks only the word at offset 0 of the original text, which a
    normalizer dropping the first character moves."""
    extra = ["  hello world", "\x01hello", "xhello x", "\u0301\u0301e", "<s> a", "a<s>b"]
    check_words({"normalizer": FIRST_WORD[name],
                 "pre_tokenizer": N("Metaspace", replacement="\u2581", prepend_scheme="first", split=True)},
                ADDED, texts + extra, tmp_path)


def test_added_tokens_without_normalizer(texts, tmp_path):
    check_words({"pre_tokenizer": N("ByteLevel", add_prefix_space=False, trim_offsets=True, use_regex=True)},
                ADDED, texts, tmp_path)


# ---------------------------------------------------------------------------------------------
# Post-processors

TEMPLATE = N("TemplateProcessing",
             single=[{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
             pair=[{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                   {"Sequence": {"id": "B", "type_id": 1}}],
             special_tokens={"[CLS]": {"id": "[CLS]", "ids": [1, 2], "tokens": ["[CLS]", "[X]"]},
                             "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}})
POST_PROCESSORS = {
    "TemplateProcessing": TEMPLATE,
    "BertProcessing": N("BertProcessing", sep=["[SEP]", 3], cls=["[CLS]", 1]),
    "RobertaProcessing": N("RobertaProcessing", sep=["[SEP]", 3], cls=["[CLS]", 1], trim_offsets=True, add_prefix_space=True),
    "ByteLevel": N("ByteLevel", add_prefix_space=True, trim_offsets=False, use_regex=True),
    "Sequence": N("Sequence", processors=[N("ByteLevel", add_prefix_space=True, trim_offsets=False, use_regex=True), TEMPLATE]),
}


@pytest.mark.parametrize("name", POST_PROCESSORS)
def test_post_processor(name, tmp_path):
    vocab = {"[UNK]": 0, "[CLS]": 1, "[X]": 2, "[SEP]": 3, "a": 4, "b": 5}
    d = tokenizer_json({"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
                       pre_tokenizer=N("WhitespaceSplit"), post_processor=POST_PROCESSORS[name])
    ours, ref = load_both(d, tmp_path)
    texts = ["", "a", "a b c", "b b"]
    for add in (False, True):
        assert not compare_encodings(ours, ref, texts, add_special_tokens=add)
    for a, b in [("a", "b b"), ("", "a")]:
        want = ref.encode(a, b).ids
        got = ours.pipeline.post_processor.process(ours.encode(a, add_special_tokens=False),
                                                   ours.encode(b, add_special_tokens=False))
        assert got == want


# ---------------------------------------------------------------------------------------------
# Decoders

DECODERS = {
    "ByteLevel": N("ByteLevel", add_prefix_space=True, trim_offsets=True, use_regex=True),
    **{f"Metaspace-{s}": N("Metaspace", replacement="\u2581", prepend_scheme=s, split=True) for s in ("always", "first", "never")},
    "Metaspace-legacy": N("Metaspace", replacement="\u2581", add_prefix_space=True, str_rep="\u2581"),
    "WordPiece": N("WordPiece", prefix="##", cleanup=True),
    "WordPiece-raw": N("WordPiece", prefix="##", cleanup=False),
    "ByteFallback": N("ByteFallback"),
    "Fuse": N("Fuse"),
    "Strip": N("Strip", content="\u2581", start=1, stop=0),
    "Strip-end": N("Strip", content="x", start=0, stop=2),
    "Replace-string": N("Replace", pattern={"String": "\u2581"}, content=" "),
    "Replace-regex": N("Replace", pattern={"Regex": r"#+|\s"}, content="_"),
    "BPEDecoder": N("BPEDecoder", suffix="</w>"),
    "gemma": N("Sequence", decoders=[N("Replace", pattern={"String": "\u2581"}, content=" "), N("ByteFallback"), N("Fuse")]),
    "llama2": N("Sequence", decoders=[N("Replace", pattern={"String": "\u2581"}, content=" "), N("ByteFallback"), N("Fuse"),
                                      N("Strip", content=" ", start=1, stop=0)]),
    "none": None,
}


def decoder_vocab() -> dict[str, int]:
    tokens = ["\u2581", "\u2581\u2581", "\u2581a", "b\u2581", "a", "##b", "##", "#", "xx", "xax", ",", " .", " ,", "'s",
              "n't", "do", " ", "ĠHello", "Ġ", "âĢ", "ľ", "ðŁ", "ĺ", "Ģ", "ãģ", "<0xZZ>", "<0x+A>", "ab</w>", "</w>",
              "c</w>d", "\u00e9", "<unk>"]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    return {t: i for i, t in enumerate(tokens)}


@pytest.mark.parametrize("name", DECODERS)
def test_decoder(name, tmp_path):
    vocab = decoder_vocab()
    d = tokenizer_json({"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}, decoder=DECODERS[name])
    d["added_tokens"] = [{"id": len(vocab), "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}]
    ours, ref = load_both(d, tmp_path)
    id_lists = random_id_lists(len(vocab) + 1, 400) + [[vocab[t] for t in ("<0xE2>", "<0x82>", "<0xAC>", "a")],
                                                       [vocab["<0xE2>"], vocab["<0x82>"], vocab["a"]]]
    problems = compare_decodings(ours, ref, id_lists)
    assert not problems, "\n".join(problems[:5])


# ---------------------------------------------------------------------------------------------
# Models, trained by `tokenizers` itself


def _train(kind: str, texts: list[str], **options):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    specials = ["<unk>", "<s>"]
    if kind == "BPE":
        affixes = {k: v for k, v in (("continuing_subword_prefix", options.get("prefix")),
                                     ("end_of_word_suffix", options.get("suffix"))) if v is not None}
        model = models.BPE(unk_token="<unk>", **affixes)
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False, **affixes)
    elif kind == "WordPiece":
        model = models.WordPiece(unk_token="<unk>")
        trainer = trainers.WordPieceTrainer(vocab_size=600, special_tokens=specials, show_progress=False)
    elif kind == "Unigram":
        model = models.Unigram()
        trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=specials, unk_token="<unk>", show_progress=False)
    else:
        model = models.WordLevel(unk_token="<unk>")
        trainer = trainers.WordLevelTrainer(vocab_size=600, special_tokens=specials, show_progress=False)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainer)
    return json.loads(tok.to_str())


@pytest.fixture(scope="module")
def training_text() -> list[str]:
    return chunks(read_text(data_path("corpora", "en", "botchan.txt"), 60_000), 300)


def _with_byte_tokens(d: dict) -> dict:
    """Adds the 256 ``<0xAB>`` tokens to a model's vocabulary (for byte fallback)."""
    m = d["model"]
    if isinstance(m["vocab"], list):
        m["vocab"] += [[f"<0x{b:02X}>", -20.0] for b in range(256)]
    else:
        n = len(m["vocab"])
        m["vocab"].update({f"<0x{b:02X}>": n + b for b in range(256)})
    return d


MODEL_CASES = {
    "BPE": ("BPE", {}, {}),
    "BPE-no-unk": ("BPE", {}, {"unk_token": None}),
    "BPE-no-unk-ignore-merges": ("BPE", {}, {"unk_token": None, "ignore_merges": True}),
    "BPE-fuse-unk": ("BPE", {}, {"fuse_unk": True}),
    "BPE-byte-fallback": ("BPE", {}, {"byte_fallback": True}),
    "BPE-ignore-merges": ("BPE", {}, {"ignore_merges": True}),
    "BPE-prefix": ("BPE", {"prefix": "##"}, {}),
    "BPE-suffix": ("BPE", {"suffix": "</w>"}, {"fuse_unk": True}),
    "BPE-string-merges": ("BPE", {}, {"merges": "strings"}),
    "WordPiece": ("WordPiece", {}, {}),
    "WordPiece-short-words": ("WordPiece", {}, {"max_input_chars_per_word": 5}),
    "Unigram": ("Unigram", {}, {}),
    "Unigram-byte-fallback": ("Unigram", {}, {"byte_fallback": True}),
    "WordLevel": ("WordLevel", {}, {}),
}


@pytest.mark.parametrize("name", MODEL_CASES)
def test_model(name, training_text, texts, tmp_path):
    kind, train_options, changes = MODEL_CASES[name]
    d = _train(kind, training_text, **train_options)
    for key, value in changes.items():
        if key == "byte_fallback":
            _with_byte_tokens(d)
        if key == "merges":
            d["model"]["merges"] = [" ".join(m) for m in d["model"]["merges"]]
            continue
        d["model"][key] = value
    d["decoder"] = N("ByteFallback") if changes.get("byte_fallback") else None
    ours, ref = load_both(d, tmp_path)
    problems = compare_encodings(ours, ref, texts + ["<unk> <s>", "\u00e9\u00e9\u00e9 \U0001f600x"], add_special_tokens=True)
    problems += compare_decodings(ours, ref, random_id_lists(ref.get_vocab_size(), 200))
    assert not problems, f"{len(problems)} differences, e.g.:\n" + "\n".join(problems[:5])


def _charsmap(model: str) -> bytes:
    pb = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    proto = pb.ModelProto()
    proto.ParseFromString(data_path("tokenizers", "sentencepiece", model).read_bytes())
    return proto.normalizer_spec.precompiled_charsmap


@pytest.mark.parametrize("model", ["botchan_en_unigram_1000.model", "kyoto_ja_unigram_8000.model"])
def test_precompiled_normalizer(model, texts, tmp_path):
    """SentencePiece's nmt_nfkc rules (from real models) as Hugging Face's Precompiled applies them."""
    import base64

    charsmap = base64.b64encode(_charsmap(model)).decode("ascii")
    extra = ["\uff76\uff9e\uff77", "x\u0308\u0301 e\u0301\u0302", "\uff21\uff42\uff43\u3000\uff11", "\u1100\u1161\u11a8"]
    check_words({"normalizer": N("Sequence", normalizers=[N("Precompiled", precompiled_charsmap=charsmap),
                                                          N("Replace", pattern={"String": " "}, content="\u2581")]),
                 "pre_tokenizer": N("Metaspace", replacement="\u2581", prepend_scheme="first", split=True)},
                ADDED, texts + extra, tmp_path)


def test_added_token_finder_matches_like_the_regex_alternation():
    """Added tokens are found by Rust's Aho-Corasick (leftmost, then longest); the spans, in
    characters, must be those of Python's `re` over the alternation of the strings, longest
    first, which it replaced. Random texts over a small alphabet, with overlapping tokens and
    lstrip/rstrip/single_word among them."""
    import random
    import re

    from toksmith.pipeline import AddedToken, _Matcher

    rng = random.Random(3)
    alphabet = ["a", "b", "é", "字", " ", "\n", "▁", "😀"]
    for trial in range(200):
        contents = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 12))}
        tokens = {c: AddedToken(c, k, special=False, lstrip=rng.random() < 0.2, rstrip=rng.random() < 0.2,
                                single_word=rng.random() < 0.2) for k, c in enumerate(sorted(contents))}
        fast = _Matcher(tokens)
        slow = _Matcher(tokens)
        slow.finder = None
        slow.regex = re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True))))
        assert fast.finder is not None
        for _ in range(20):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
            assert fast.split(text) == slow.split(text), (trial, text, sorted(tokens))


def test_split_on_a_string_it_does_not_find_keeps_the_pieces_whole():
    """`Split` on a literal string skips its machinery when no piece holds the string; the
    result must be the general path's for every behavior, with and without invert."""
    import random

    from toksmith.pre_tokenizers import BEHAVIORS, Split, _split_each, apply_behavior, regex_matches

    def matches(split, text):  # the regex's matches, as before any shortcut
        return [(s, e, m != split.invert) for s, e, m in regex_matches(split._regex, text)]

    rng = random.Random(5)
    for behavior in BEHAVIORS:
        for invert in (False, True):
            split = Split(" ", behavior, invert=invert)
            for _ in range(200):
                pieces = [("".join(rng.choice("ab ▁") for _ in range(rng.randint(0, 6))), rng.random() < 0.5)
                          for _ in range(rng.randint(1, 4))]
                general = _split_each(pieces, lambda t: apply_behavior(matches(split, t), split.behavior))
                assert split.split(pieces) == general, (behavior, invert, pieces)
