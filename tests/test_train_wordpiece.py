"""WordPiece training by likelihood (count(ab) / (count(a) * count(b))), BERT-style.

The Rust trainer must give exactly the vocabulary of the plain-Python reference
(``toksmith.reference.wordpiece``); encoding must agree with the reference's greedy
longest-match-first and with the ``tokenizers`` library running the same vocabulary.
"""

import math
import random
from collections import Counter

import pytest

import toksmith
from toksmith import _core, normalizers
from toksmith.reference import wordpiece as ref
from toksmith.train_subword import WORDPIECE_SPECIALS, bert_words, train_wordpiece

from conftest import data_path

TEXT = """The Project Gutenberg EBook of Botchan, by Natsume Soseki. Because of an hereditary
recklessness, I have been playing always a losing game since my childhood. During my grammar school
days, I was once laid up for about a week by jumping from the second story of the school building.
Some may ask why I did such a fool thing. There was no particular reason for doing such a thing
except that I was looking out from the second floor of the new school building. Café, naïve, CAFÉ!
北京大学 and 東京: 1,234.56 (or so) -- "quoted", it's [bracketed]."""


def random_words(seed):
    rng = random.Random(seed)
    alphabet = rng.choice(["ab", "abc", "abcde", "xyzé", "ab12"])
    words = Counter()
    for _ in range(rng.randint(2, 60)):
        words["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))] += rng.randint(1, 30)
    return dict(words)


def rust(words, max_tokens, **kw):
    tokens, _, _ = _core.train_wordpiece(sorted(words.items()), max_tokens, kw.get("min_frequency", 1),
                                         kw.get("limit_alphabet"), kw.get("prefix", "##"), None,
                                         kw.get("criterion", "ratio"))
    return tokens


@pytest.mark.parametrize("seed", range(80))
def test_training_matches_the_reference(seed):
    words = random_words(seed)
    rng = random.Random(seed)
    options = dict(min_frequency=rng.choice([1, 1, 2, 5]), limit_alphabet=rng.choice([None, None, 3]),
                   prefix=rng.choice(["##", "@@"]), criterion=rng.choice(["ratio", "likelihood"]))
    chars = ref.alphabet(words, options["limit_alphabet"])
    max_tokens = 2 * len(chars) + rng.randint(0, 60)
    assert rust(words, max_tokens, **options) == ref.train_wordpiece(words, max_tokens, **options)


def test_training_on_text_matches_the_reference():
    words = bert_words(Counter(TEXT.split()).items(), normalizers.BertNormalizer())
    for max_tokens in (120, 250):
        for criterion in ("ratio", "likelihood"):
            assert rust(words, max_tokens, criterion=criterion) == ref.train_wordpiece(words, max_tokens,
                                                                                      criterion=criterion)


def test_botchan_matches_the_reference():
    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")[:60000]
    words = bert_words(Counter(text.split()).items(), normalizers.BertNormalizer())
    assert rust(words, 600, min_frequency=2) == ref.train_wordpiece(words, 600, min_frequency=2)
    assert rust(words, 600, min_frequency=2, criterion="likelihood") == ref.train_wordpiece(
        words, 600, min_frequency=2, criterion="likelihood")


def test_likelihood_criterion_weighs_the_ratio_by_count():
    """The ratio prefers x+##y (5 times, parts never apart); the likelihood gain prefers a+##b
    (60 times, positively associated): 60 ln(60 N / (100 * 60)) = 44.5 > 5 ln(5 N / 25) = 18.7."""
    words = {"ab": 60, "ac": 40, "xy": 5}
    n = 2 * 60 + 2 * 40 + 2 * 5  # symbols before training
    assert 60 * math.log(60 * n / (100 * 60)) > 40 * math.log(40 * n / (100 * 40)) > 5 * math.log(5 * n / 25)
    base = len(ref.alphabet(words)) * 2
    assert rust(words, base + 1)[-1] == "xy"
    assert rust(words, base + 1, criterion="likelihood")[-1] == "ab"


def test_the_criterion_is_likelihood_not_frequency():
    """BPE would merge the most frequent pair (a, ##b: 60 times); WordPiece merges the pair whose
    parts never occur apart (x, ##y: 5 times)."""
    words = {"ab": 60, "ac": 40, "xy": 5}
    tokens = rust(words, len(ref.alphabet(words)) * 2 + 1)
    assert tokens[-1] == "xy"
    # The scores, by hand: count(ab) / (count(a) * count(b)).
    assert 5 / (5 * 5) > 40 / (100 * 40) == 60 / (100 * 60)
    # Then a tie between a+##b and a+##c: the higher count wins.
    assert rust(words, len(ref.alphabet(words)) * 2 + 2)[-1] == "ab"


def test_merged_strings_are_not_duplicated():
    words = {"abc": 7, "bc": 4, "ab": 3, "xabc": 2}
    tokens = rust(words, 100)
    assert len(tokens) == len(set(tokens))


def test_result_does_not_depend_on_threads_or_word_order():
    words = bert_words(Counter(TEXT.split() * 3).items(), normalizers.BertNormalizer())
    a = _core.train_wordpiece(sorted(words.items()), 300, 1, None, "##", 1)
    b = _core.train_wordpiece(sorted(words.items(), reverse=True), 300, 1, None, "##", 2)
    assert a == b


# ------------------------------------------------------------------ the tokenizer


@pytest.fixture(scope="module")
def tok():
    return train_wordpiece([TEXT] * 5, vocab_size=300, min_frequency=2)


def test_layout_and_bert_pipeline(tok):
    assert [tok.id_to_token(i) for i in range(5)] == list(WORDPIECE_SPECIALS)
    assert tok.vocab_size == 300
    ids = tok.encode("Café naïve!")
    assert ids[0] == tok.token_to_id("[CLS]") and ids[-1] == tok.token_to_id("[SEP]")
    assert tok.decode(ids, skip_special_tokens=True) == "cafe naive!"  # lowercased, accents stripped
    tokens = [tok.id_to_token(i) for i in tok.encode_ordinary("北京, it's")]
    assert tokens[:3] == ["北", "京", ","]  # CJK characters and punctuation stand alone
    assert tok.encode_ordinary("zzzzqqqq ☃") == [tok.token_to_id("[UNK]")] * 2  # no segmentation
    long = train_wordpiece([TEXT] * 5, vocab_size=300, max_input_chars_per_word=5)
    assert long.encode_ordinary("because") == [long.token_to_id("[UNK]")]


def test_encoding_matches_the_reference(tok):
    vocab = tok.pipeline.model.get_vocab()
    rng = random.Random(3)
    letters = "abcdefghijklmnoprstuwy"
    words = [w.lower().strip('.,!:()"') for w in TEXT.split()] + [
        "".join(rng.choice(letters) for _ in range(rng.randint(1, 14))) for _ in range(300)]
    for w in filter(None, words):
        expected = [vocab[t] for t in ref.encode_word(w, vocab)]
        assert tok.pipeline.model.encode_words([w]) == expected, w


def test_encoding_matches_the_tokenizers_library(tok):
    """The same vocabulary in Hugging Face's BERT pipeline gives the same ids."""
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer(tokenizers.models.WordPiece(tok.pipeline.model.get_vocab(), unk_token="[UNK]"))
    hf.normalizer = tokenizers.normalizers.BertNormalizer()
    hf.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")[:20000]
    for line in [*TEXT.splitlines(), *text.splitlines()]:
        assert tok.encode_ordinary(line) == hf.encode(line, add_special_tokens=False).ids, line


def test_limit_alphabet_and_min_frequency():
    small = train_wordpiece([TEXT], vocab_size=200, limit_alphabet=20, min_frequency=1)
    singles = [t for t in small.pipeline.model.get_vocab() if len(t) == 1]
    assert len(singles) == 20
    assert small.metadata["skipped_words"] > 0
    stopped = train_wordpiece([TEXT], vocab_size=5000, min_frequency=3)
    assert stopped.vocab_size < 5000  # no pair is seen 3 times any more


def test_errors_say_what_to_change():
    with pytest.raises(toksmith.TrainingError, match="raise vocab_size or set limit_alphabet"):
        train_wordpiece([TEXT], vocab_size=30)
    with pytest.raises(toksmith.TrainingError, match="unk_token"):
        train_wordpiece([TEXT], vocab_size=300, special_tokens=["[CLS]"])
    with pytest.raises(toksmith.TrainingError, match="min_frequency"):
        train_wordpiece([TEXT], vocab_size=300, min_frequency=0)
    with pytest.raises(toksmith.TrainingError, match="no words"):
        train_wordpiece([" \n "], vocab_size=300)


def test_entry_point_for_toksmith_train():
    from toksmith.train_subword import train_subword

    wp = train_subword([TEXT] * 3, algorithm="wordpiece", vocab_size=200, min_frequency=1)
    assert wp.metadata["trainer"] == "toksmith wordpiece" and wp.vocab_size == 200
    uni = train_subword([TEXT] * 3, algorithm="unigram", vocab_size=150, special_tokens=["<s>"], max_token_length=4,
                        hard_vocab_limit=False)
    assert uni.metadata["trainer"] == "toksmith unigram" and uni.id_to_token(1) == "<s>"
    assert max(len(p) for p, _ in uni.pipeline.model.pieces[2:]) <= 4
    with pytest.raises(toksmith.TrainingError, match="not options of Unigram"):
        train_subword([TEXT], algorithm="unigram", vocab_size=150, min_frequency=5)
    with pytest.raises(toksmith.TrainingError, match="not options of WordPiece"):
        train_subword([TEXT], algorithm="wordpiece", vocab_size=150, byte_fallback=True)
