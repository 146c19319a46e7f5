"""SuperBPE training, extending a tokenizer without moving ids, BPE-dropout."""

import lzma
import random

import pytest

import toksmith
from toksmith.trainers import count_words_in_token

from conftest import data_path

WORDS = ["by", "the", "way", "of", "and", "in", "model", "token", "text", "of the", "in the"]


def phrases(seed=0, n=400):
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        parts = [rng.choice(["by the way", ", and the", "in the middle of", "at the end of the day"])
                 if rng.random() < 0.5 else rng.choice(WORDS) for _ in range(rng.randint(3, 15))]
        texts.append(" ".join(parts) + f". {rng.randint(0, 9999)}\n")
    return texts


@pytest.fixture(scope="module")
def superbpe():
    return toksmith.train(phrases(), vocab_size=600, algorithm="superbpe", transition=350, max_words_per_token=3)


def test_stage1_is_plain_bpe_up_to_the_transition(superbpe):
    plain = toksmith.train(phrases(), vocab_size=350)
    assert superbpe.merges[:len(plain.merges)] == plain.merges


def test_superwords_span_whitespace_within_the_word_limit(superbpe):
    tokens = [superbpe.token_bytes(i) for i in range(superbpe.vocab_size)]
    spanning = [t for t in tokens if count_words_in_token(t) >= 2]
    assert spanning, "stage 2 learned no token spanning words"
    assert max(count_words_in_token(t) for t in tokens) <= 3
    assert any(b"by the way" in t for t in tokens)
    # Digits are still split off: no token mixes digits and letters.
    assert not any(any(c.isdigit() for c in t.decode("latin-1")) and any(c.isalpha() for c in t.decode("latin-1"))
                   for t in tokens)


def test_superbpe_round_trip_and_fewer_tokens(superbpe):
    plain = toksmith.train(phrases(), vocab_size=600)
    held = "".join(phrases(seed=1, n=100))
    assert superbpe.decode(superbpe.encode(held)) == held
    assert len(superbpe.encode(held)) < 0.9 * len(plain.encode(held))


def test_forbidden_patterns():
    tok = toksmith.train(phrases(), vocab_size=600, algorithm="superbpe", transition=350,
                         forbidden_patterns=[r"the way"])
    assert not any(b"the way" in tok.token_bytes(i) for i in range(tok.vocab_size))


def test_superbpe_parameter_errors():
    with pytest.raises(toksmith.TrainingError, match="transition"):
        toksmith.train(phrases(), vocab_size=600, algorithm="superbpe")
    with pytest.raises(toksmith.TrainingError, match="transition"):
        toksmith.train(phrases(), vocab_size=600, algorithm="superbpe", transition=700)


def test_superbpe_save_load(superbpe, tmp_path):
    superbpe.save(tmp_path / "s.json")
    again = toksmith.load(tmp_path / "s.json")
    held = "".join(phrases(seed=2, n=20))
    assert again.encode(held) == superbpe.encode(held)


# ---------------------------------------------------------------- extension

def check_extension(old, new, domain_text, unrelated_text):
    # Every old id keeps its bytes, and the special tokens their ids.
    for i in range(old.vocab_size):
        if i in old._tokens:
            assert new.token_bytes(i) == old.token_bytes(i)
    assert new.special_tokens == old.special_tokens
    # Text where no new merge applies encodes exactly as before.
    assert new.encode(unrelated_text) == old.encode(unrelated_text)
    ids = new.encode(domain_text)
    assert new.decode(ids) == domain_text
    # New ids appear only where new merges apply: undoing the new merges (each new id back into
    # the pair it was merged from) gives exactly the old encoding.
    made_from = {}
    for left, right in new._merge_ids():
        made_from[new._id_of_bytes[new._tokens[left] + new._tokens[right]]] = (left, right)

    def undo(i):
        return [i] if i < old.vocab_size else undo(made_from[i][0]) + undo(made_from[i][1])

    assert [j for i in ids for j in undo(i)] == old.encode(domain_text)
    assert any(i >= old.vocab_size for i in ids) and len(ids) < len(old.encode(domain_text))


def test_extend_a_trained_tokenizer():
    old = toksmith.train(phrases(), vocab_size=400, special_tokens=["<|endoftext|>"])
    domain = ["心肌梗死 民法典 IFRS17 心肌梗死的治疗 民法典第一条 " * 5] * 20
    new = old.extend(domain, add=30)
    assert new.vocab_size == old.vocab_size + 30
    check_extension(old, new, "患者心肌梗死，依据民法典。", "by the way, and the end")


def test_extend_tiktoken_cl100k_on_chinese_news():
    old = toksmith.load("cl100k_base", tiktoken_dir=data_path("tokenizers", "tiktoken"))
    with lzma.open(data_path("corpora", "zh", "peoples-daily-199801.txt.xz"), "rt", encoding="utf-8") as f:
        text = f.read(400_000)
    train, held = text[:300_000], text[300_000:]
    new = old.extend([train], add=300)
    assert new.vocab_size == old.vocab_size + 300
    assert new.uses_ranks  # still a tiktoken-style rank table
    check_extension(old, new, held[:5000], "The quick brown fox jumps over the lazy dog.")
    assert len(new.encode(held)) < 0.9 * len(old.encode(held))


def test_extend_errors():
    old = toksmith.train(phrases(), vocab_size=300)
    with pytest.raises(toksmith.TrainingError, match="add"):
        old.extend(["x"], add=0)


# ---------------------------------------------------------------- dropout

def test_dropout():
    tok = toksmith.train(phrases(), vocab_size=500)
    text = "by the way, and the model of the text"
    assert tok.encode(text, dropout=0.0, seed=1) == tok.encode(text)
    assert len(tok.encode(text, dropout=1.0, seed=1)) == len(text.encode())
    a = tok.encode(text, dropout=0.4, seed=7)
    assert a == tok.encode(text, dropout=0.4, seed=7)
    samples = {tuple(tok.encode(text, dropout=0.4, seed=s)) for s in range(20)}
    assert len(samples) > 1
    assert all(tok.decode(list(s)) == text for s in samples)
    with pytest.raises(toksmith.EncodeError):
        tok.encode(text, dropout=1.5)


def test_superword_dropout_keeps_words_whole(superbpe):
    text = "by the way in the middle of the model"
    plain_words = {superbpe.decode([i]) for i in superbpe.encode(text) if count_words_in_token(superbpe.token_bytes(i)) < 2}
    for seed in range(10):
        ids = superbpe.encode(text, dropout=1.0, seed=seed, dropout_mode="superword")
        assert superbpe.decode(ids) == text
        # With every whitespace-spanning merge dropped, no token spans words.
        assert all(count_words_in_token(superbpe.token_bytes(i)) <= 1 or superbpe.token_bytes(i).strip() == b""
                   for i in ids)


def test_superbpe_saves_as_tokenizer_json_that_tokenizers_reads_identically(superbpe, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    path = tmp_path / "tokenizer.json"
    superbpe.save(path, format="hf")
    hf = tokenizers.Tokenizer.from_file(str(path))
    held = "".join(phrases(seed=3, n=50)) + "by the way, and the 12345 ... -> end\n\n  x"
    assert hf.encode(held).ids == superbpe.encode(held)
    assert hf.decode(superbpe.encode(held)) == held


@pytest.mark.parametrize("name", ["gpt2", "qwen3/tokenizer.json.xz"])
def test_extend_a_loaded_hugging_face_tokenizer(name, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    old = toksmith.load(data_path("tokenizers", "hf", *name.split("/")))
    with lzma.open(data_path("corpora", "zh", "peoples-daily-199801.txt.xz"), "rt", encoding="utf-8") as f:
        text = f.read(220_000)
    train, held = text[:200_000], text[200_000:]
    new = old.extend([train], add=200)
    assert new.vocab_size == old.vocab_size + 200
    old_vocab = old.pipeline.model.get_vocab()
    assert all(new.token_to_id(t) == i for t, i in old_vocab.items())
    assert new.special_tokens == old.special_tokens
    english = "The quick brown fox jumps over the lazy dog."
    assert new.encode(english) == old.encode(english)
    ids = new.encode(held, disallowed_special=())
    assert new.decode(ids) == held and len(ids) < len(old.encode(held, disallowed_special=()))
    # Saved in Hugging Face's format, the tokenizers library gives the same ids.
    path = tmp_path / "tokenizer.json"
    new.save(path, format="hf")
    hf = tokenizers.Tokenizer.from_file(str(path))
    assert hf.encode(held, add_special_tokens=False).ids == new.encode(held, add_special_tokens=False, disallowed_special=())


def test_extend_a_unigram_tokenizer():
    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8").splitlines()
    old = toksmith.train(text, algorithm="unigram", vocab_size=800)
    with lzma.open(data_path("corpora", "en", "linux-doc-6.1.Documentation.txt.xz"), "rt", encoding="utf-8") as f:
        domain = f.read(300_000)
    learn, held = domain[:250_000], "The kernel driver registers the device and the interrupt handler."
    new = old.extend([learn], add=200)
    assert new.vocab_size == old.vocab_size + 200
    assert all(new.id_to_token(i) == old.id_to_token(i) for i in range(old.vocab_size))
    assert new.special_tokens == old.special_tokens
    ids = new.encode(held)
    assert new.decode(ids) == held
    assert any(i >= old.vocab_size for i in ids) and len(ids) < len(old.encode(held))


def test_superbpe_counting_within_a_memory_budget(superbpe):
    """Both stages' counts spill to disk past max_memory; the tokenizer is the same."""
    bounded = toksmith.train(phrases(), vocab_size=600, algorithm="superbpe", transition=350, max_words_per_token=3,
                             max_memory=4000)
    assert bounded.merges == superbpe.merges
