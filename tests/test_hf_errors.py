"""Malformed and unsupported Hugging Face files: a FormatError naming the file and the place."""

from __future__ import annotations

import copy
import json
import lzma
import re

import pytest

from test_hf_support import added_token, tokenizer_json

from toksmith.errors import FormatError
from toksmith.formats.hf import load_hf

BPE_MODEL = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "abc": 5}, "merges": ["a b", ["ab", "c"]]}
GOOD = tokenizer_json(BPE_MODEL, pre_tokenizer={"type": "WhitespaceSplit"}, decoder={"type": "Fuse"})
GOOD["added_tokens"] = [added_token(6, "<s>")]


def write(tmp_path, d, name="tokenizer.json"):
    path = tmp_path / name
    path.write_text(json.dumps(d) if not isinstance(d, str) else d, encoding="utf-8")
    return path


def changed(edit) -> dict:
    d = copy.deepcopy(GOOD)
    edit(d)
    return d


def expect_error(tmp_path, d, *fragments: str) -> FormatError:
    path = write(tmp_path, d)
    with pytest.raises(FormatError) as info:
        load_hf(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return info.value


def test_the_good_file_loads(tmp_path):
    tok = load_hf(write(tmp_path, GOOD))
    assert tok.encode("abc ab <s>", allowed_special="all") == [5, 4, 6]


def test_truncated_json(tmp_path):
    text = json.dumps(GOOD)
    expect_error(tmp_path, text[: len(text) // 2], "not valid JSON", "truncated")


def test_truncated_xz(tmp_path):
    data = lzma.compress(json.dumps(GOOD).encode())
    path = tmp_path / "tokenizer.json.xz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match=re.escape(str(path)) + ".*xz"):
        load_hf(path)


def test_missing_file_and_empty_directory(tmp_path):
    with pytest.raises(FormatError, match="no such file"):
        load_hf(tmp_path / "nothing.json")
    with pytest.raises(FormatError, match="holds no Hugging Face tokenizer"):
        load_hf(tmp_path)


@pytest.mark.parametrize("edit, fragments", [
    (lambda d: d.__setitem__("model", []), ["model:", "expected an object"]),
    (lambda d: d["model"].__setitem__("vocab", [["a", 1]]), ["model.vocab", "expected an object"]),
    (lambda d: d["model"]["merges"].__setitem__(1, 7), ["model.merges[1]", "expected"]),
    (lambda d: d["model"]["merges"].__setitem__(0, "a b c"), ["model.merges[0]", "two tokens"]),
    (lambda d: d["model"].__setitem__("fuse_unk", "yes"), ["model.fuse_unk", "expected a boolean"]),
    (lambda d: d["added_tokens"][0].__setitem__("id", "6"), ["added_tokens[0].id", "expected an integer"]),
    (lambda d: d["added_tokens"][0].__setitem__("special", 1), ["added_tokens[0].special", "expected a boolean"]),
    (lambda d: d["added_tokens"][0].__delitem__("lstrip"), ["added_tokens[0].lstrip", "missing"]),
    (lambda d: d.__setitem__("pre_tokenizer", {"type": "Split", "pattern": "x", "behavior": "Isolated"}),
     ["pre_tokenizer.pattern", "expected an object"]),
    (lambda d: d.__setitem__("pre_tokenizer", {"type": "Split", "pattern": {"Regex": " "}, "behavior": "Sideways"}),
     ["pre_tokenizer.behavior", "Sideways"]),
    (lambda d: d.__setitem__("normalizer", {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"typo": "NFD"}]}),
     ["normalizer.normalizers[1].type", "missing"]),
    (lambda d: d.__delitem__("model"), ["model", "missing"]),
], ids=["model", "vocab", "merge-type", "merge-string", "bool", "added-id", "added-flag", "added-missing", "pattern", "behavior",
        "nested", "no-model"])
def test_wrong_types(edit, fragments, tmp_path):
    expect_error(tmp_path, changed(edit), *fragments)


@pytest.mark.parametrize("edit, fragments", [
    (lambda d: d["model"]["vocab"].__setitem__("c", -1), ["model.vocab['c']", "out of range"]),
    (lambda d: d["model"]["vocab"].__setitem__("c", 2**40), ["model.vocab['c']", "out of range"]),
    (lambda d: d["model"]["vocab"].__setitem__("c", 2), ["model.vocab['c']", "also the id of 'b'"]),
    (lambda d: d["added_tokens"][0].__setitem__("id", 9), ["added_tokens[0].id", "gives it id 6"]),
    (lambda d: d["added_tokens"].append(added_token(7, "<s>")), ["added_tokens[1].content", "already"]),
    (lambda d: d["added_tokens"].append(added_token(4, "c", special=False)), ["added_tokens[1].id", "gives it id 3"]),
    (lambda d: d.__setitem__("post_processor", {"type": "BertProcessing", "sep": ["</s>", 99], "cls": ["<s>", 6]}),
     ["post_processor", "99"]),
    (lambda d: d.__setitem__("post_processor", {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "X", "type_id": 0}}],
                                                "pair": [], "special_tokens": {}}),
     ["post_processor.single[0]", "'X'"]),
], ids=["negative", "huge", "shared-id", "added-id", "added-twice", "added-in-vocab", "template-id", "template-name"])
def test_ids(edit, fragments, tmp_path):
    expect_error(tmp_path, changed(edit), *fragments)


def test_duplicate_token_in_json(tmp_path):
    text = json.dumps(GOOD).replace('"ab": 4', '"ab": 4, "a": 7')
    expect_error(tmp_path, text, "model.vocab.a", "appears twice")


def test_duplicate_unigram_piece(tmp_path):
    d = tokenizer_json({"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -2.0], ["a", -3.0]],
                        "byte_fallback": False})
    expect_error(tmp_path, d, "model.vocab[3]", "'a'")


@pytest.mark.parametrize("merge, fragment", [("a x", "'x'"), (["b", "c"], "'bc'")])
def test_merge_with_unknown_token(merge, fragment, tmp_path):
    d = changed(lambda d: d["model"]["merges"].append(merge))
    expect_error(tmp_path, d, "model.merges[2]", fragment, "not in the vocabulary")


@pytest.mark.parametrize("edit, fragments", [
    (lambda d: d.__setitem__("normalizer", {"type": "Nmt"}), ["normalizer.type", "'Nmt'", "not supported"]),
    (lambda d: d.__setitem__("pre_tokenizer", {"type": "UnicodeScripts"}), ["pre_tokenizer.type", "'UnicodeScripts'"]),
    (lambda d: d.__setitem__("decoder", {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True}),
     ["decoder.type", "'CTC'"]),
    (lambda d: d.__setitem__("post_processor", {"type": "Bogus"}), ["post_processor.type", "'Bogus'"]),
    (lambda d: d["model"].__setitem__("type", "Bogus"), ["model.type", "'Bogus'"]),
    (lambda d: d["model"].__setitem__("dropout", 0.1), ["model.dropout", "dropout"]),
    (lambda d: d.__setitem__("normalizer", {"type": "NFC", "fast": True}), ["normalizer.fast", "'fast'"]),
    (lambda d: d.__setitem__("pre_tokenizer", {"type": "Split", "pattern": {"Regex": r"\G\w"}, "behavior": "Isolated"}),
     ["\\G", "not supported"]),
    (lambda d: d.__setitem__("extra", 1), ["extra", "not supported"]),
], ids=["normalizer", "pre_tokenizer", "decoder", "post_processor", "model", "dropout", "option", "regex", "top-level"])
def test_unsupported_components(edit, fragments, tmp_path):
    expect_error(tmp_path, changed(edit), *fragments)


def test_byte_fallback_needs_all_byte_tokens(tmp_path):
    def edit(d):
        d["model"]["byte_fallback"] = True
        d["model"]["vocab"]["<0x41>"] = 7
        d["added_tokens"] = []

    expect_error(tmp_path, changed(edit), "model.byte_fallback", "1 of the 256")


def test_legacy_files(tmp_path):
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2}), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\nb a\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"merges.txt:3: .*'ba'"):
        load_hf(tmp_path)
    (tmp_path / "merges.txt").write_text("#version: 0.2\na  b\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"merges.txt:2: .*two tokens"):
        load_hf(tmp_path / "vocab.json")
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n[UNK]\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"vocab.txt:6: .*\[UNK\].*line 2"):
        load_hf(bert)
    with pytest.raises(TypeError, match="lowercase"):
        load_hf(tmp_path / "vocab.json", lowercase=False)


@pytest.mark.parametrize("score", ["NaN", "Infinity", "-Infinity"])
def test_unigram_score_that_is_not_finite(tmp_path, score):
    """Python's json reads NaN and Infinity (no JSON has them); a Viterbi over such scores picks
    nonsense, so the file is refused."""
    d = tokenizer_json({"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0], ["b", 0.5]]})
    text = json.dumps(d).replace("0.5", score)
    expect_error(tmp_path, text, "model.vocab[2]", "not a finite number")
