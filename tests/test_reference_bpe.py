"""Tests for the textbook BPE in toksmith.reference.bpe."""
import importlib.util
import pathlib
import sys

import pytest

# Import the pure-Python module even if the toksmith package itself cannot be
# imported (e.g. its compiled extension is not built yet).
try:
    from toksmith.reference import bpe
except Exception:  # pragma: no cover - depends on the build state
    _path = pathlib.Path(__file__).resolve().parents[1] / "python/toksmith/reference/bpe.py"
    _spec = importlib.util.spec_from_file_location("toksmith_reference_bpe", _path)
    bpe = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = bpe
    _spec.loader.exec_module(bpe)

train_bpe = bpe.train_bpe

SENNRICH = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
PATTERN = r" ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|\s+"
BYTE_CORPUS = "low lower lowest newest widest " * 20 + "the newest model is the lowest risk. 你好世界 2025"


def sennrich(**kwargs):
    options = dict(level="char", end_of_word="_", tie_break="first", num_merges=8)
    options.update(kwargs)
    return train_bpe(SENNRICH, **options)


# --- helpers -----------------------------------------------------------------

def test_helpers_match_their_docstring_examples():
    assert bpe.count_pairs([([1, 2, 3, 1, 2], 1)]) == {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    assert bpe.count_pairs([([1, 2], 5), ([2, 1, 2], 2)]) == {(1, 2): 7, (2, 1): 2}
    assert bpe.merge_pair([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert bpe.merge_pair([7, 7, 7], (7, 7), 9) == [9, 7]
    assert bpe.pick_pair({(5, 6): 3, (1, 2): 3}, "first") == (5, 6)
    assert bpe.pick_pair({(5, 6): 3, (1, 2): 3}, "lowest_id") == (1, 2)
    assert bpe.encode_ids_of_word([1, 2, 3], {(2, 3): 4, (1, 4): 5}) == [5]
    assert bpe.count_words(["b", "a", "b"]) == {"b": 2, "a": 1}
    assert bpe.split_text("low lower", "char") == ["low", "lower"]
    assert bpe.split_text("low lower", "byte") == ["low lower"]


# --- fact 1: Sennrich toy corpus ----------------------------------------------

def test_sennrich_merges_encode_and_trace():
    result = sennrich()
    assert result.merges == [("e", "s"), ("es", "t"), ("est", "_"), ("l", "o"),
                             ("lo", "w"), ("n", "e"), ("ne", "w"), ("new", "est_")]
    assert result.encode("lowest") == ["low", "est_"]
    rows = result.trace()
    assert [row["count"] for row in rows] == [9, 9, 9, 7, 7, 6, 6, 6]
    assert [row["step"] for row in rows] == list(range(1, 9))
    assert rows[0]["pair"] == ("e", "s")
    assert rows[0]["corpus"] == "l o w _ (5) | l o w e r _ (2) | n e w es t _ (6) | w i d es t _ (3)"
    assert rows[-1]["corpus"] == "low _ (5) | low e r _ (2) | newest_ (6) | w i d est_ (3)"
    table = result.format_trace().splitlines()
    assert len(table) == 9 and table[0].split() == ["step", "pair", "count", "corpus"]
    assert "new est_" in table[-1]


def test_sennrich_ids_and_vocab_size():
    # Alphabet in order of first appearance, "_" after each word:
    # l0 o1 w2 _3 e4 r5 n6 s7 t8 i9 d10 -> n = 11; merge k creates 11 + k.
    result = sennrich()
    assert [result.vocab[i] for i in range(11)] == list("low_ernstid")
    assert len(result.vocab) == 19
    assert result.encode_ids("lowest") == [15, 13]  # lo w -> 15, est _ -> 13
    assert sennrich(num_merges=None, vocab_size=19).merges == result.merges


# --- fact 2: byte level with a split pattern ----------------------------------

def test_byte_level_pattern_example():
    result = train_bpe(BYTE_CORPUS, vocab_size=280, level="byte", pattern=PATTERN, tie_break="first")
    assert len(result.vocab) == 280 and len(result.merges) == 24
    text = "the lowest newest 你好"
    assert len(text.encode("utf-8")) == 24
    tokens = result.encode(text)
    assert len(tokens) == 12
    assert result.encode(" lowest") == [b" lowest"]
    assert result.encode(" newest") == [b" newest"]
    for char in "你好世界":
        assert result.encode(" " + char)[1:] == [bytes([b]) for b in char.encode("utf-8")]
    assert b"".join(tokens) == text.encode("utf-8")
    assert result.encode_ids(text) == [next(i for i, t in result.vocab.items() if t == tok)
                                       for tok in tokens]


# --- tie rules ----------------------------------------------------------------

def test_lowest_id_tie_rule_byte_level():
    # Bytes: b"a" = 97, b"b" = 98. Words "ba" (1) and "ab" (1).
    # Step 1: (98, 97) and (97, 98) both count 1.
    #   first     -> (98, 97) "b a" (seen first);  lowest_id -> (97, 98) "a b".
    # Step 2: only the other pair is left, with count 1.
    corpus = {"ba": 1, "ab": 1}
    lowest = train_bpe(corpus, num_merges=2, tie_break="lowest_id")
    first = train_bpe(corpus, num_merges=2, tie_break="first")
    assert lowest.merges == [(b"a", b"b"), (b"b", b"a")]
    assert lowest.merge_ids == [(97, 98), (98, 97)]
    assert first.merges == [(b"b", b"a"), (b"a", b"b")]


def test_lowest_id_tie_rule_with_merged_ids():
    # Char level, words "abab" (1) and "cd" (1); ids a0 b1 c2 d3.
    # Step 1: (0,1)=2, (1,0)=1, (2,3)=1 -> merge a b -> id 4 "ab" (no tie).
    #   words: [4, 4] and [2, 3]
    # Step 2: (4,4)=1 and (2,3)=1 tie.
    #   first     -> (4, 4) "ab ab" appears first -> id 5 "abab"
    #   lowest_id -> (2, 3) < (4, 4)             -> id 5 "cd"
    # Step 3: the remaining pair in each case.
    corpus = {"abab": 1, "cd": 1}
    lowest = train_bpe(corpus, level="char", num_merges=3, tie_break="lowest_id")
    first = train_bpe(corpus, level="char", num_merges=3, tie_break="first")
    assert lowest.merges == [("a", "b"), ("c", "d"), ("ab", "ab")]
    assert lowest.merge_ids == [(0, 1), (2, 3), (4, 4)]
    assert first.merges == [("a", "b"), ("ab", "ab"), ("c", "d")]
    assert first.merge_ids == [(0, 1), (4, 4), (2, 3)]


# --- corpus forms, round trips, scripts ---------------------------------------

def test_dict_and_str_corpus_agree():
    text = "low " * 5 + "lower " * 2 + "newest " * 6 + "widest " * 3
    for tie_break in ("first", "lowest_id"):
        from_str = train_bpe(text, level="char", end_of_word="_", num_merges=10, tie_break=tie_break)
        from_dict = train_bpe(SENNRICH, level="char", end_of_word="_", num_merges=10, tie_break=tie_break)
        assert from_str.merges == from_dict.merges and from_str.vocab == from_dict.vocab
    chunks = bpe.split_text(BYTE_CORPUS, "byte", PATTERN)
    from_str = train_bpe(BYTE_CORPUS, pattern=PATTERN, num_merges=30)
    from_dict = train_bpe(bpe.count_words(chunks), pattern=PATTERN, num_merges=30)
    assert from_str.merges == from_dict.merges


def test_encode_round_trips_every_training_word():
    result = train_bpe(BYTE_CORPUS, pattern=PATTERN, num_merges=60)
    for word in set(bpe.split_text(BYTE_CORPUS, "byte", PATTERN)):
        assert b"".join(result.encode(word)) == word.encode("utf-8")
    assert b"".join(result.encode(BYTE_CORPUS)) == BYTE_CORPUS.encode("utf-8")
    whole = train_bpe(BYTE_CORPUS, num_merges=60)  # no pattern: one chunk
    assert b"".join(whole.encode(BYTE_CORPUS)) == BYTE_CORPUS.encode("utf-8")


def test_non_latin_scripts_and_emoji_at_byte_level():
    text = "привет мир 🙂 مرحبا こんにちは 👩‍💻 " * 10
    result = train_bpe(text, pattern=PATTERN, num_merges=80)
    assert result.encode(" привет") == [" привет".encode("utf-8")]
    assert result.encode(" 🙂") == [" 🙂".encode("utf-8")]  # 5 bytes -> one token
    for sample in [text, "мир 🙂🙂 مرحبا", "👩‍💻 こんにちは"]:
        assert b"".join(result.encode(sample)) == sample.encode("utf-8")
    assert "␣привет" in result.format_trace()


def test_char_level_non_latin():
    result = train_bpe("日本 日本語 日本 語", level="char", num_merges=2)
    assert result.merges == [("日", "本"), ("日本", "語")]
    assert result.encode("日本語 日本") == ["日本語", "日本"]


# --- stopping -----------------------------------------------------------------

def test_min_frequency_stops_training():
    result = sennrich(num_merges=20, min_frequency=7)
    assert result.counts == [9, 9, 9, 7, 7]  # next best count is 6 < 7


def test_stops_when_no_pair_is_left():
    result = train_bpe({"ab": 3}, level="char", num_merges=5)
    assert result.merges == [("a", "b")]
    assert train_bpe("", num_merges=3).merges == []


# --- argument checking --------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(num_merges=3, vocab_size=300), "exactly one of num_merges or vocab_size"),
    (dict(), "exactly one of num_merges or vocab_size"),
    (dict(num_merges=3, level="word"), "level must be"),
    (dict(num_merges=3, tie_break="last"), "tie_break must be"),
    (dict(vocab_size=100), "vocab_size must be at least"),
    (dict(num_merges=3, end_of_word="_"), "end_of_word"),
])
def test_invalid_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        train_bpe("low lower", **kwargs)


def test_invalid_corpus():
    with pytest.raises(ValueError, match="corpus must be"):
        train_bpe(["low"], num_merges=1)
    with pytest.raises(ValueError, match="positive integers"):
        train_bpe({"low": 0}, num_merges=1)
    with pytest.raises(ValueError, match="not in the training alphabet"):
        train_bpe("ab", level="char", num_merges=1).encode("xyz")
