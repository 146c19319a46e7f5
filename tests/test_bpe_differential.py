"""The Rust trainer and encoder against the readable reference (toksmith.reference), which
supports the Rust trainer's documented tie rule ("lowest_id"), so the comparison is exact."""

import random

import pytest

import toksmith
from toksmith.reference import train_bpe

ALPHABETS = [
    "abcdefgh ",
    "abc xyz,.!?0123456789 ",
    "лоукпрст ",  # Cyrillic
    "你好世界中文字 ",  # Han, no spaces needed
    "こんにちはカタ ",
    "مرحبا ",
    "😀👍🏽🎉❤️ a",  # emoji, skin tone modifier, variation selector
    "\t\n  ab",
]


def random_corpus(rng: random.Random, n_texts: int) -> list[str]:
    texts = []
    for _ in range(n_texts):
        alphabet = rng.choice(ALPHABETS)
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(1, 30))]
        texts.append(" ".join(words))
    return texts


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("pattern", ["gpt2", "o200k"])
def test_rust_trainer_matches_reference(seed, pattern):
    rng = random.Random(seed)
    texts = random_corpus(rng, 40)
    vocab_size = rng.randint(260, 420)
    tok = toksmith.train(texts, vocab_size=vocab_size, pattern=pattern, min_frequency=2)
    # The reference takes a dict of chunk counts; chunks come from the same regex per text.
    counts: dict[str, int] = {}
    for t in texts:
        for chunk in toksmith.patterns.split(t, pattern):
            counts[chunk] = counts.get(chunk, 0) + 1
    ref = train_bpe(counts, vocab_size=vocab_size, level="byte", tie_break="lowest_id", min_frequency=2)
    assert tok.merges == ref.merges
    # Encoding held-out text gives the reference's tokens too.
    for text in random_corpus(rng, 10):
        got = [tok.token_bytes(i) for i in tok.encode(text)]
        want = [tok_bytes for chunk in toksmith.patterns.split(text, pattern) for tok_bytes in ref.encode(chunk)]
        assert got == want, text


def test_reference_regex_and_rust_regex_agree_on_chunks():
    rng = random.Random(7)
    import regex

    for pattern in ["gpt2", "o200k", "cl100k"]:
        rx = toksmith.patterns.resolve(pattern)[1]
        for text in random_corpus(rng, 30):
            assert toksmith.patterns.split(text, pattern) == regex.findall(rx, text)


def test_long_chunk_encoding_matches_reference():
    # One chunk far longer than the short-path threshold exercises the heap merger.
    rng = random.Random(3)
    text = "".join(rng.choice("ab") for _ in range(3000))
    tok = toksmith.train([text], vocab_size=300, pattern=r"[ab]+", min_frequency=1)
    ref = train_bpe({text: 1}, vocab_size=300, level="byte", pattern=r"[ab]+", tie_break="lowest_id", min_frequency=1)
    assert tok.merges == ref.merges
    probe = "".join(rng.choice("ab") for _ in range(5000))
    assert [tok.token_bytes(i) for i in tok.encode(probe)] == ref.encode(probe)


def test_training_is_deterministic_across_threads_and_order():
    rng = random.Random(11)
    texts = random_corpus(rng, 200)
    a = toksmith.train(texts, vocab_size=500, num_threads=1)
    b = toksmith.train(list(reversed(texts)), vocab_size=500, num_threads=2)
    assert a.to_dict() == b.to_dict()
