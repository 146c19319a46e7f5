"""Bad input: one typed exception per problem, with a message that says how to fix it."""

import json

import pytest

import toksmith
from toksmith import (DecodeError, EncodeError, FormatError, InvalidPatternError, SpecialTokenError,
                      TokenizerError, TrainingError)


@pytest.fixture(scope="module")
def tok():
    return toksmith.train(["some text to train on, some more text"] * 5, vocab_size=300)


def test_hierarchy():
    for cls in (SpecialTokenError, InvalidPatternError, TrainingError, FormatError, DecodeError, EncodeError):
        assert issubclass(cls, TokenizerError) and issubclass(cls, ValueError)


def test_invalid_regex():
    with pytest.raises(InvalidPatternError, match="does not compile"):
        toksmith.train(["x"], vocab_size=300, pattern="(unclosed")


def test_pattern_of_wrong_type():
    with pytest.raises(InvalidPatternError):
        toksmith.train(["x"], vocab_size=300, pattern=42)


def test_custom_pattern_with_lookahead_works():
    t = toksmith.train(["a  b   c"] * 3, vocab_size=260, pattern=r"\s+(?!\S)|\s+|\S+", min_frequency=1)
    assert t.decode(t.encode("a    b")) == "a    b"
    assert toksmith.patterns.split("a   b", r" ?\S+|\s+(?!\S)|\s+") == ["a", "  ", " b"]


@pytest.mark.parametrize("vocab_size,specials", [(255, ()), (256, ("<s>",)), (100, ())])
def test_vocab_size_too_small(vocab_size, specials):
    with pytest.raises(TrainingError, match="at least"):
        toksmith.train(["x"], vocab_size=vocab_size, special_tokens=specials)


def test_bad_training_arguments():
    with pytest.raises(TrainingError, match="not available"):
        toksmith.train(["x"], vocab_size=300, algorithm="magic")
    with pytest.raises(TrainingError, match="distinct"):
        toksmith.train(["x"], vocab_size=300, special_tokens=["<a>", "<a>"])
    with pytest.raises(TrainingError, match="list of strings"):
        toksmith.train(["x"], vocab_size=300, special_tokens="<a>")
    with pytest.raises(TrainingError, match="min_frequency"):
        toksmith.train(["x"], vocab_size=300, min_frequency=0)
    with pytest.raises(TrainingError, match="each item must be a str"):
        toksmith.train([b"bytes"], vocab_size=300)


@pytest.mark.parametrize("source", [[], [""], ["", ""]])
def test_empty_corpus(source):
    with pytest.raises(TrainingError, match="empty"):
        toksmith.train(source, vocab_size=300)


def test_missing_path(tmp_path):
    with pytest.raises(TrainingError, match="no such file"):
        toksmith.train(str(tmp_path / "nope.txt"), vocab_size=300)
    with pytest.raises(TrainingError, match="matches no file"):
        toksmith.train(str(tmp_path / "*.nothing"), vocab_size=300)


def test_unknown_id(tok):
    with pytest.raises(DecodeError, match="not in the vocabulary"):
        tok.decode([10**6])
    with pytest.raises(DecodeError):
        tok.id_to_token(10**6)


def test_lone_surrogates(tok):
    for text in ["abc\ud800", "\udfffx", "ok \ud83d"]:
        with pytest.raises(EncodeError, match="lone surrogate"):
            tok.encode(text)
        with pytest.raises(EncodeError, match="lone surrogate"):
            tok.encode_ordinary(text)
        with pytest.raises(EncodeError):
            tok.encode_batch(["fine", text])
    with pytest.raises(TrainingError, match="surrogate"):
        toksmith.train(["a\ud800b"], vocab_size=300)


def test_encode_non_str(tok):
    with pytest.raises(EncodeError, match="str"):
        tok.encode(b"bytes")


def test_truncated_file(tok, tmp_path):
    path = tmp_path / "t.json"
    tok.save(path)
    data = path.read_bytes()
    for cut in (0, 1, len(data) // 2, len(data) - 2):
        path.write_bytes(data[:cut])
        with pytest.raises(FormatError, match="not valid JSON|truncated"):
            toksmith.load(path)


def test_corrupted_files(tok, tmp_path):
    path = tmp_path / "t.json"
    good = tok.to_dict()

    def broken(mutate):
        d = json.loads(json.dumps(good))
        mutate(d)
        path.write_text(json.dumps(d), encoding="utf-8")
        with pytest.raises(FormatError):
            toksmith.load(path)

    broken(lambda d: d["model"]["merges"].append(["Ġ", "nonexistent"]))
    broken(lambda d: d["model"]["merges"].append(["a", "b"]))  # "ab" is not a token
    broken(lambda d: d["model"]["vocab"].pop("a"))  # a byte token is missing
    broken(lambda d: d["model"]["vocab"].__setitem__("zz", 5))  # duplicate id
    broken(lambda d: d["model"].__setitem__("vocab", [1, 2]))
    broken(lambda d: d["pre_tokenizer"].__setitem__("pattern", "(bad"))
    broken(lambda d: d.__setitem__("special_tokens", {"<x>": 3}))  # id of an ordinary token
    broken(lambda d: d.__setitem__("version", 99))
    broken(lambda d: d.__setitem__("model", None))


def test_file_of_another_format(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": "1.0", "colors": ["red"]}), encoding="utf-8")
    with pytest.raises(FormatError, match="not a toksmith tokenizer"):
        toksmith.load(path)
    broken_hf = tmp_path / "tokenizer.json"
    broken_hf.write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}), encoding="utf-8")
    with pytest.raises(FormatError, match="model.vocab"):
        toksmith.load(broken_hf)
    binary = tmp_path / "x.model"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(FormatError):
        toksmith.load(binary)
    with pytest.raises(FormatError, match="no such file"):
        toksmith.load(tmp_path / "missing.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatError, match="directory"):
        toksmith.load(tmp_path / "empty")


def test_batch_raises_the_error_of_any_text():
    # A character-level model with no unknown token and no byte fallback cannot encode "c":
    # wherever that text is in a batch (first group, middle, last), on one thread or two, the
    # batch raises its EncodeError (and the other threads stop taking groups, not hang).
    from toksmith import _core

    model = _core.BpeModel([(0, b"a"), (1, b"b"), (2, b"ab")], [(0, 1)], None, [], level="char")
    assert model.encode_batch(["ab", "ba"], [], 2) == [[2], [1, 0]]
    for position in (0, 2999, 5999):
        texts = ["ab"] * 6000
        texts[position] = "ac"
        for threads in (1, 2):
            with pytest.raises(EncodeError, match="'c' is not in the vocabulary"):
                model.encode_batch(texts, [], threads)


def test_tiktoken_file_errors_name_the_file(tmp_path):
    path = tmp_path / "dup.tiktoken"
    path.write_text("IQ== 0\nIQ== 1\n")  # the token "!" twice
    with pytest.raises(FormatError, match="appears twice") as e:
        toksmith.load(path, pattern="cl100k")
    assert str(path) in str(e.value)
