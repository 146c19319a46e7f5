"""Unigram LM training (SentencePiece's algorithm) and subword regularization.

The Rust trainer is checked against the plain-Python reference (``toksmith.reference.unigram``)
step by step: the seed pieces exactly, the E-step's expected counts, and the final vocabulary.
The tokenizers are checked against the ``sentencepiece`` library where it applies (vocabulary
and compression on botchan.txt, n-best lists of a SentencePiece model), and sampling against
exact probabilities computed by enumerating every segmentation.
"""

import math
import random
from collections import Counter

import pytest

import toksmith
from toksmith import _core
from toksmith.reference import unigram as ref
from toksmith.train_subword import (
    metaspace_words,
    script_classes,
    train_unigram,
    unigram_nbest,
    unigram_sample,
    unigram_tokenizer,
)

from conftest import data_path

ENGLISH = """It was the best of times, it was the worst of times, it was the age of wisdom, it was the
age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season
of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair,
we had everything before us, we had nothing before us, we were all going direct to Heaven, we
were all going direct the other way - in short, the period was so far like the present period,
that some of its noisiest authorities insisted on its being received, for good or for evil, in
the superlative degree of comparison only. There were a king with a large jaw and a queen with a
plain face, on the throne of England; there were a king with a large jaw and a queen with a fair
face, on the throne of France. In both countries it was clearer than crystal to the lords of the
State preserves of loaves and fishes, that things in general were settled for ever. It was the
year of Our Lord one thousand seven hundred and seventy-five: 1775, 1776 and 1777."""


def random_words(seed):
    """A small random corpus of Metaspace words, with the options to train it."""
    rng = random.Random(seed)
    alphabet = rng.choice(["ab", "abc", "abcde", "abé", "ab1.", "abдж", "aあア", "xy,."])
    words = {}
    for _ in range(rng.randint(3, 40)):
        w = "\u2581" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
        words[w] = words.get(w, 0) + rng.randint(1, 20)
    options = dict(coverage=rng.choice([1.0, 1.0, 0.95]), max_len=rng.choice([16, 3, 5]),
                   seed_size=rng.choice([1_000_000, 20]), split_digits=rng.choice([False, True]))
    return words, options


def rust_trainer(words, vocab, *, stop_size=None, coverage=1.0, max_len=16, seed_size=1_000_000,
                 split_digits=False, classes=None, num_threads=None):
    classes = dict(script_classes(set("".join(words)))) if classes is None else classes
    return _core.UnigramTrainer(sorted(words.items()), sorted(classes.items()), vocab_size=vocab,
                                stop_size=vocab if stop_size is None else stop_size, character_coverage=coverage,
                                max_piece_length=max_len, seed_size=seed_size, split_digits=split_digits,
                                num_threads=num_threads)


def run(trainer):
    while True:
        for _ in range(2):
            trainer.em_iteration()
        if trainer.done() or trainer.prune() == 0:
            break
    return trainer.finalize()


def same_vocabulary(a, b, tol=1e-9):
    """Same pieces with the same scores (the order of pieces whose scores tie within rounding
    may differ between the two implementations)."""
    da, db = dict(a), dict(b)
    return da.keys() == db.keys() and all(abs(da[p] - db[p]) <= tol for p in da)


# ------------------------------------------------------------------ Rust vs the reference


@pytest.mark.parametrize("seed", range(60))
def test_seed_pieces_match_the_reference(seed):
    words, o = random_words(seed)
    classes = dict(script_classes(set("".join(words))))
    try:
        trainer = rust_trainer(words, 100, coverage=o["coverage"], max_len=o["max_len"], seed_size=o["seed_size"],
                               split_digits=o["split_digits"], classes=classes)
    except toksmith.TrainingError:
        pytest.skip("vocabulary smaller than the alphabet")
    expected = ref.seed_pieces(words, max_len=o["max_len"], seed_size=o["seed_size"], coverage=o["coverage"],
                               classes=classes, split_digits=o["split_digits"])
    assert trainer.seeds() == expected


def test_seeds_of_a_small_english_text():
    words = metaspace_words(Counter(ENGLISH.split()).items())
    classes = dict(script_classes(set("".join(words))))
    seeds = rust_trainer(words, 200, classes=classes).seeds()
    assert seeds == ref.seed_pieces(words, classes=classes)
    found = dict(seeds)
    assert not any("\u2581" in p[1:] for p in found)  # never across words
    assert found["\u2581was"] == sum(w.startswith("was") for w in ENGLISH.split())
    assert not any(any(c.isdigit() for c in p) and any(c.isalpha() for c in p) for p in found)  # scripts


@pytest.mark.parametrize("seed", range(20))
def test_expected_counts_match_forward_backward(seed):
    words, o = random_words(seed)
    try:
        trainer = rust_trainer(words, 100, coverage=1.0, max_len=o["max_len"])
    except toksmith.TrainingError:
        pytest.skip("vocabulary smaller than the alphabet")
    seeds = trainer.seeds()
    log_total = math.log(sum(f for _, f in seeds))
    pieces = {p: math.log(f) - log_total for p, f in seeds}
    expected = dict.fromkeys(pieces, 0.0)
    loglik = 0.0
    for w, n in words.items():
        logp, e = ref.forward_backward(w, pieces)
        loglik += n * logp
        for p, x in e.items():
            expected[p] += n * x
    got, got_loglik = trainer.expected_counts()
    assert got_loglik == pytest.approx(loglik, rel=1e-12)
    assert got == pytest.approx([expected[p] for p, _ in seeds], rel=1e-9, abs=1e-12)


def test_long_words_fall_back_to_log_space():
    """A word whose probability underflows in linear space gives the same expected counts."""
    words = {"\u2581" + "ab" * 400: 3, "\u2581ab": 5, "\u2581ba": 2}
    trainer = rust_trainer(words, 10, max_len=2)
    seeds = trainer.seeds()
    log_total = math.log(sum(f for _, f in seeds))
    pieces = {p: math.log(f) - log_total for p, f in seeds}
    got, loglik = trainer.expected_counts()
    assert math.isfinite(loglik)
    for (p, _), g in zip(seeds, got):
        e = sum(n * ref.forward_backward(w, pieces)[1].get(p, 0.0) for w, n in words.items())
        assert g == pytest.approx(e, rel=1e-9)


@pytest.mark.parametrize("seed", range(40))
def test_training_matches_the_reference(seed):
    words, o = random_words(seed)
    vocab = random.Random(seed).randint(6, 30)
    classes = dict(script_classes(set("".join(words))))
    try:
        trainer = rust_trainer(words, vocab, coverage=o["coverage"], max_len=o["max_len"], seed_size=o["seed_size"],
                               split_digits=o["split_digits"], classes=classes)
    except toksmith.TrainingError:
        pytest.skip("vocabulary smaller than the alphabet")
    got = run(trainer)
    expected = ref.train_unigram(words, vocab, coverage=o["coverage"], max_len=o["max_len"], seed_size=o["seed_size"],
                                 classes=classes, split_digits=o["split_digits"])
    if not same_vocabulary(got, expected):
        # Scores are floats: a piece whose loss or score ties with another's within rounding may
        # go either way. Only accept a difference that is such a tie.
        pytest.xfail("near-tie") if _only_near_ties(got, expected) else pytest.fail(f"{got} != {expected}")


def _only_near_ties(a, b):
    da, db = dict(a), dict(b)
    differ = da.keys() ^ db.keys()
    scores = sorted({*da.values(), *db.values()})
    return bool(differ) and all(any(abs(x - y) < 1e-9 and x != y for y in scores) for x in
                                (da.get(p, db.get(p)) for p in differ))


def test_training_on_english_text_matches_the_reference():
    words = metaspace_words(Counter(ENGLISH.split()).items())
    classes = dict(script_classes(set("".join(words))))
    for vocab in (60, 100):
        got = run(rust_trainer(words, vocab, stop_size=int(vocab * 1.1), classes=classes))
        assert same_vocabulary(got, ref.train_unigram(words, vocab, stop_size=int(vocab * 1.1), classes=classes))
        assert len(got) == vocab


def test_botchan_lines_match_the_reference():
    lines = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8").splitlines()[200:330]
    words = metaspace_words(Counter(" ".join(lines).split()).items())
    classes = dict(script_classes(set("".join(words))))
    got = run(rust_trainer(words, 120, stop_size=132, coverage=0.99, classes=classes))
    assert same_vocabulary(got, ref.train_unigram(words, 120, stop_size=132, coverage=0.99, classes=classes))


def test_result_does_not_depend_on_threads():
    rng = random.Random(5)
    syllables = ["ka", "ri", "to", "ne", "su", "mi", "ra", "lo", "pe", "de"]
    words = Counter("\u2581" + "".join(rng.choice(syllables) for _ in range(rng.randint(1, 5))) for _ in range(30000))
    assert len(words) > 2 * 4096  # several groups of words in the parallel passes
    one = run(rust_trainer(dict(words), 300, stop_size=330, num_threads=1))
    two = run(rust_trainer(dict(words), 300, stop_size=330, num_threads=2))
    assert one == two


# ------------------------------------------------------------------ the tokenizer


def corpus_lines():
    """English sentences, and made-up words from syllables for a larger vocabulary."""
    rng = random.Random(11)
    syllables = ["ka", "ri", "to", "ne", "su", "mi", "ra", "lo", "pe", "de", "tha", "wor"]
    made_up = [" ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(12))
               for _ in range(300)]
    return ENGLISH.replace("\n", " ").split(". ") * 3 + made_up


def test_vocabulary_layout_and_round_trip():
    tok = train_unigram(corpus_lines(), vocab_size=150, user_defined_symbols=["<sep>"], control_symbols=["<s>", "</s>"])
    assert tok.vocab_size == 150
    assert [tok.id_to_token(i) for i in range(4)] == ["<unk>", "<s>", "</s>", "<sep>"]
    pieces = [tok.id_to_token(i) for i in range(4, 150)]
    scores = [s for _, s in tok.pipeline.model.pieces[4:]]
    assert scores == sorted(scores, reverse=True)
    assert all("\u2581" not in p[1:] and len(p) <= 16 for p in pieces)
    text = "It was the season of Light, we had everything before us."
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("  the  worst   of  times ")) == "the worst of times"  # whitespace collapsed
    ids = tok.encode("hope<sep>despair")
    assert tok.token_to_id("<sep>") in ids  # a user-defined symbol is always one token
    with pytest.raises(toksmith.SpecialTokenError):
        tok.encode("a <s> b")
    assert tok.encode("<s>a", allowed_special={"<s>"})[0] == 1


def test_dummy_prefix_and_unknown_characters():
    tok = train_unigram(corpus_lines(), vocab_size=120, character_coverage=1.0)
    assert tok.id_to_token(tok.encode("was")[0]).startswith("\u2581")
    assert tok.encode("was ☃")[-1] == 0  # a character never seen: <unk>
    no_prefix = train_unigram(corpus_lines(), vocab_size=120, add_dummy_prefix=False)
    first = no_prefix.id_to_token(no_prefix.encode("was was")[0])
    assert not first.startswith("\u2581")
    assert no_prefix.decode(no_prefix.encode("was was")) == "was was"


def test_byte_fallback():
    tok = train_unigram(corpus_lines(), vocab_size=400, byte_fallback=True)
    assert [tok.id_to_token(i) for i in (3, 4, 258)] == ["<0x00>", "<0x01>", "<0xFF>"]
    ids = tok.encode("was ☃")
    assert [tok.id_to_token(i) for i in ids[-3:]] == ["<0xE2>", "<0x98>", "<0x83>"]
    assert tok.decode(ids) == "was ☃"


def test_piece_options():
    lines = corpus_lines() + ["in 1775 and 31337 and 2024 and 1984"] * 20
    tok = train_unigram(lines, vocab_size=160, split_digits=True, max_piece_length=4)
    pieces = [p for p, _ in tok.pipeline.model.pieces[3:]]
    assert all(len(p) <= 4 for p in pieces)
    assert all(len(p) == 1 for p in pieces if any(c.isdigit() for c in p))
    together = train_unigram(lines, vocab_size=160, split_by_number=False)
    assert any(len(p) > 1 and any(c.isdigit() for c in p) for p, _ in together.pipeline.model.pieces)


def test_character_coverage_leaves_out_rare_characters():
    lines = corpus_lines() + ["ж"]
    tok = train_unigram(lines, vocab_size=120, character_coverage=0.999)
    assert tok.token_to_id("ж") is None
    assert 0 in tok.encode("ж")


def test_errors_say_what_to_change():
    with pytest.raises(toksmith.TrainingError, match="raise vocab_size or lower character_coverage"):
        train_unigram(corpus_lines(), vocab_size=20)
    with pytest.raises(toksmith.TrainingError, match="hard_vocab_limit=False"):
        train_unigram(["a b c ab bc"], vocab_size=100)
    assert train_unigram(["a b c ab bc"], vocab_size=100, hard_vocab_limit=False).vocab_size < 100
    with pytest.raises(toksmith.TrainingError, match="character_coverage"):
        train_unigram(corpus_lines(), vocab_size=200, character_coverage=0)
    with pytest.raises(toksmith.TrainingError, match="must all differ"):
        train_unigram(corpus_lines(), vocab_size=200, user_defined_symbols=["<s>"])
    with pytest.raises(toksmith.TrainingError, match="no room"):
        train_unigram(corpus_lines(), vocab_size=200, byte_fallback=True)
    with pytest.raises(toksmith.TrainingError, match="no words"):
        train_unigram(["   ", ""], vocab_size=200)
    with pytest.raises(toksmith.TrainingError, match="user-defined symbol"):
        train_unigram(corpus_lines(), vocab_size=200, user_defined_symbols=["ﬁ"])


def test_compared_with_sentencepiece_on_botchan():
    """Trained on botchan.txt like the shared SentencePiece model: most pieces in common and
    compression as good (per line, as SentencePiece trains and encodes lines)."""
    spm = pytest.importorskip("sentencepiece")
    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")
    sp = spm.SentencePieceProcessor(
        model_file=str(data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model")))
    tok = train_unigram(text.splitlines(), vocab_size=1000)
    theirs = {sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))}
    ours = {tok.id_to_token(i) for i in range(3, tok.vocab_size)}
    assert len(theirs & ours) / len(theirs) > 0.8
    lines = [line for line in text.splitlines() if line.strip()]
    size = sum(len(line.encode()) for line in lines)
    ours_bpt = size / sum(len(tok.encode_ordinary(line)) for line in lines)
    theirs_bpt = size / sum(len(ids) for ids in sp.encode(lines))
    assert ours_bpt >= 0.99 * theirs_bpt


# ------------------------------------------------------------------ n-best and sampling


@pytest.fixture(scope="module")
def tok():
    return train_unigram(corpus_lines(), vocab_size=150, byte_fallback=False)


def test_best_of_nbest_is_the_encoding(tok):
    for text in ["It was the age of wisdom.", "unforeseen ☃ words, 1234", "", "<s>x", "the"]:
        best = unigram_nbest(tok, text, 1, disallowed_special=())
        assert best[0][0] == tok.encode(text, disallowed_special=())


def test_nbest_lists_every_segmentation_in_order(tok):
    model = tok.pipeline.model
    pieces = {p: s for i, (p, s) in enumerate(model.pieces) if i >= 3}
    for word in ["wisdom", "foolishness", "season", "xyz"]:
        exact = ref.all_segmentations("\u2581" + word, pieces)
        got = unigram_nbest(tok, word, 1000)
        assert len(got) == len(exact)
        assert [s for _, s in got] == pytest.approx([s for _, s in exact], rel=1e-12)
        # Same segmentations (the order of exact ties aside).
        as_tokens = sorted(tuple(model.id_to_token(i) for i in ids) for ids, _ in got)
        assert as_tokens == sorted(tuple(p if p is not None else "<unk>" for p in path) for path, _ in exact)


def test_nbest_across_words_combines_the_best_of_each(tok):
    both = unigram_nbest(tok, "wisdom season", 6)
    assert [s for _, s in both] == sorted((s for _, s in both), reverse=True)
    first, second = unigram_nbest(tok, "wisdom", 6), unigram_nbest(tok, "season", 6)
    combined = sorted((a + b for _, a in first for _, b in second), reverse=True)[:6]
    assert [s for _, s in both] == pytest.approx(combined, rel=1e-12)


def sample_distribution(tok, word, n, **kwargs):
    return Counter(tuple(unigram_sample(tok, word, seed=i, **kwargs)) for i in range(n))


def test_sampling_follows_the_model_distribution(tok):
    """Frequencies of sampled segmentations match P(segmentation)^alpha, normalized."""
    model = tok.pipeline.model
    pieces = {p: s for i, (p, s) in enumerate(model.pieces) if i >= 3}
    exact = ref.all_segmentations("\u2581wisdom", pieces)
    for alpha, nbest_size in [(0.5, -1), (0.1, -1), (1.0, 4)]:
        pool = exact if nbest_size < 0 else exact[:nbest_size]
        z = sum(math.exp(alpha * s) for _, s in pool)
        expected = {tuple(model.token_to_id(p) for p in path): math.exp(alpha * s) / z for path, s in pool}
        n = 4000
        got = sample_distribution(tok, "wisdom", n, alpha=alpha, nbest_size=nbest_size)
        assert set(got) <= set(expected)
        distance = sum(abs(got.get(k, 0) / n - p) for k, p in expected.items()) / 2
        assert distance < 0.04, (alpha, nbest_size, distance)


def test_sampling_is_reproducible(tok):
    text = "it was the epoch of incredulity, the season of Darkness"
    a = unigram_sample(tok, text, alpha=0.1, seed=42)
    assert a == unigram_sample(tok, text, alpha=0.1, seed=42)
    assert len({tuple(unigram_sample(tok, text, alpha=0.05, seed=s)) for s in range(20)}) > 5
    assert tok.decode(a) == text
    assert unigram_sample(tok, text, nbest_size=1, seed=3) == tok.encode(text)
    assert unigram_sample(tok, text, alpha=50.0, nbest_size=-1, seed=3) == tok.encode(text)  # peaked
    with pytest.raises(toksmith.EncodeError):
        unigram_sample(tok, text, alpha=-1)


def test_sampling_with_byte_fallback_decodes_back():
    tok = train_unigram(corpus_lines(), vocab_size=400, byte_fallback=True)
    for seed in range(20):
        assert tok.decode(unigram_sample(tok, "crystal ☃ loaves", alpha=0.2, seed=seed)) == "crystal ☃ loaves"


def test_nbest_and_sampling_agree_with_sentencepiece():
    """On SentencePiece's own model, the n-best lists equal the library's, and samples over all
    segmentations come from the same distribution."""
    spm = pytest.importorskip("sentencepiece")
    path = data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model")
    sp = spm.SentencePieceProcessor(model_file=str(path))
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(3, sp.get_piece_size())]
    tok = unigram_tokenizer(pieces, control_symbols=["<s>", "</s>"], normalization=None)
    for text in ["I was a big boy.", "the school principal", "Porcupine and Red Shirt"]:
        assert [ids for ids, _ in unigram_nbest(tok, text, 5)] == sp.nbest_encode_as_ids(text, 5)
    word = "schoolmaster"
    n = 3000
    ours = sample_distribution(tok, word, n, alpha=0.3, nbest_size=-1)
    theirs = Counter(tuple(sp.encode(word, enable_sampling=True, alpha=0.3, nbest_size=-1)) for _ in range(n))
    keys = set(ours) | set(theirs)
    assert sum(abs(ours[k] - theirs[k]) for k in keys) / (2 * n) < 0.06


@pytest.mark.slow
def test_botchan_model_from_the_sentencepiece_loader():
    """n-best lists through the SentencePiece loader's tokenizer too."""
    spm = pytest.importorskip("sentencepiece")
    try:
        from toksmith.formats.sentencepiece import load_sentencepiece
    except ImportError:
        pytest.skip("no SentencePiece loader in this toksmith")
    path = data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model")
    sp = spm.SentencePieceProcessor(model_file=str(path))
    tok = load_sentencepiece(path)
    lines = [line for line in data_path("corpora", "en", "botchan.txt").read_text().splitlines() if line.strip()][:150]
    differ = 0
    for line in lines:
        if [ids for ids, _ in unigram_nbest(tok, line, 3, disallowed_special=())] != sp.nbest_encode_as_ids(line, 3):
            differ += 1
    assert differ <= 2  # f32 near-ties in SentencePiece's search may order two paths differently


# ------------------------------------------------------------------ writing SentencePiece .model files

WRITER_EDGE = ["  leading and   multiple  spaces ", "ﬁne Ⅻ ｶﾀｶﾅ café naïve", "☃ snow 12345", "hello<sep>world",
               "hello <sep> world", "<sep>x", " <sep> a <sep>", "<sep><sep>", "", " ", "a", "1.5 x86 2024"]


@pytest.mark.parametrize("options", [
    {}, {"byte_fallback": True}, {"normalization": None}, {"add_dummy_prefix": False}, {"split_digits": True},
    {"user_defined_symbols": ["<sep>"], "control_symbols": ["<s>", "</s>", "<mask>"]},
], ids=lambda o: ",".join(o) or "default")
def test_written_model_encodes_like_the_tokenizer(tmp_path, options):
    """The sentencepiece library, given the written .model, gives the same ids and decodes to the
    same text."""
    spm = pytest.importorskip("sentencepiece")
    pytest.importorskip("google.protobuf")
    from toksmith.formats.sentencepiece_writer import write_sentencepiece

    lines = [line for line in data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    tok = train_unigram(lines + ["see <sep> it<sep>now"] * 3, vocab_size=1300 if options.get("byte_fallback") else 1000,
                        **options)
    write_sentencepiece(tok, tmp_path / "m.model")
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    assert sp.get_piece_size() == tok.vocab_size
    assert [sp.id_to_piece(i) for i in range(tok.vocab_size)] == [tok.id_to_token(i) for i in range(tok.vocab_size)]
    assert sp.unk_id() == 0 and sp.is_unknown(0)
    controls = options.get("control_symbols", ["<s>", "</s>"])
    assert [sp.is_control(i) for i in range(1, 1 + len(controls))] == [True] * len(controls)
    assert sp.bos_id() == 1 and sp.eos_id() == 2
    if options.get("byte_fallback"):
        assert sp.is_byte(tok.token_to_id("<0x41>"))
    for text in lines[:1500] + WRITER_EDGE:
        ours, theirs = tok.encode(text, disallowed_special=()), sp.encode(text)
        assert ours == theirs, text  # exact ties too: the scores are exact in float32 (multiples of 1/64)
        assert tok.decode(ours) == sp.decode(theirs), text


def test_only_toksmith_unigram_tokenizers_are_written(tmp_path):
    pytest.importorskip("sentencepiece")
    from toksmith.formats.sentencepiece_writer import write_sentencepiece
    from toksmith.train_subword import train_wordpiece

    with pytest.raises(toksmith.FormatError, match="Unigram tokenizers trained by toksmith"):
        write_sentencepiece(train_wordpiece(corpus_lines(), vocab_size=200), tmp_path / "w.model")
