"""tiktoken encodings loaded by toksmith give exactly tiktoken's ids, on real text."""

import lzma
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toksmith
from toksmith.formats.tiktoken import ENCODINGS

from conftest import DATA_DIR, data_path

tiktoken = pytest.importorskip("tiktoken")
from tiktoken.load import load_tiktoken_bpe  # noqa: E402

NAMES = ["r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base", "o200k_harmony"]


def peer(name):
    """tiktoken's own Encoding for `name`, from the shared file (its public constants, no download)."""
    import tiktoken_ext.openai_public as public

    path = data_path("tokenizers", "tiktoken", f"{ENCODINGS[name][0]}.tiktoken")
    ranks = load_tiktoken_bpe(str(path))
    # Patterns and specials: tiktoken's constructors, with the ranks file swapped for the local one.
    original = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *a, **k: ranks
    try:
        params = getattr(public, name)()
    finally:
        public.load_tiktoken_bpe = original
    return tiktoken.Encoding(params["name"], pat_str=params["pat_str"], mergeable_ranks=ranks,
                             special_tokens=params["special_tokens"])


_cache = {}


def pair(name):
    if name not in _cache:
        ours = toksmith.load(name, tiktoken_dir=data_path("tokenizers", "tiktoken"))
        _cache[name] = (ours, peer(name))
    return _cache[name]


def corpus_samples(n_chars=200_000):
    """Slices of real text: English corpora and the Debian Handbook in many scripts."""
    files = sorted((DATA_DIR / "corpora" / "en").glob("*.xz")) + sorted((DATA_DIR / "corpora" / "debian-handbook").glob("*.xz"))
    if not files:
        pytest.skip(f"real data not available under {DATA_DIR}/corpora")
    rng = random.Random(0)
    for f in files:
        with lzma.open(f, "rt", encoding="utf-8") as fh:
            text = fh.read(2_000_000)
        start = rng.randrange(max(1, len(text) - n_chars))
        yield f.name, text[start:start + n_chars]


@pytest.mark.parametrize("name", NAMES)
def test_specials_and_size_match(name):
    ours, theirs = pair(name)
    assert ours.special_tokens == theirs._special_tokens
    assert ours.vocab_size == theirs.n_vocab


@pytest.mark.slow
@pytest.mark.parametrize("name", ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"])
def test_real_text_identical(name):
    ours, theirs = pair(name)
    for fname, text in corpus_samples():
        lines = text.splitlines(keepends=True)
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), fname
        assert ours.encode_batch(lines, disallowed_special=()) == theirs.encode_ordinary_batch(lines), fname


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_harmony", "p50k_edit"])
def test_special_tokens_identical(name):
    ours, theirs = pair(name)
    text = "start " + " mid ".join(list(ours.special_tokens)[:6]) + " end"
    assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")
    with pytest.raises(ValueError):
        theirs.encode(text)
    with pytest.raises(toksmith.SpecialTokenError):
        ours.encode(text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_random_unicode_identical(text):
    for name in ["cl100k_base", "o200k_base", "r50k_base"]:
        ours, theirs = pair(name)
        ids = ours.encode_ordinary(text)
        assert ids == theirs.encode_ordinary(text)
        assert ours.decode_bytes(ids) == text.encode("utf-8")


def test_edge_strings_identical():
    edge = ["", " ", "  \n\n  ", "a" * 5000, "^" * 3000, "1" * 4000, " " * 4000 + "x", "\r\n\r\n", "don't WE'LL", "ǅungla", "🏳️‍🌈👨‍👩‍👧", "\u0300abc", "x\u200by"]
    for name in ["cl100k_base", "o200k_base", "r50k_base"]:
        ours, theirs = pair(name)
        for text in edge:
            assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), (name, text[:20])


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base"])
def test_long_runs_of_one_character_identical(name):
    """A chunk that is one byte repeated 1,000 times or more, give or take a few symbols on each
    side, is merged without spelling the run out (`merge_run`); every printable ASCII character
    and a few others, at lengths of each parity and with short heads and tails, against tiktoken."""
    ours, theirs = pair(name)
    rng = random.Random(3)
    chars = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", "\r\n", "é", "ー"]
    sides = ["", " ", "x", "'", "\n", "Hello ", "a" * 7, " " * 3 + "b", "==", "0"]
    for c in chars:
        for length in (1025, 1030, 1031, 2048, 2049 + rng.randrange(3000)):
            text = rng.choice(sides) + c * length + rng.choice(sides)
            assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), (name, repr(text[:12]), length)


def test_repeated_chunks_from_the_cache_identical():
    """Chunks seen before are answered by the per-thread caches (short ones by a packed key,
    those of 16-256 bytes by their bytes); the ids must not change from the first encoding to
    the next, whatever the chunk lengths, and after the caches are emptied."""
    rng = random.Random(5)
    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 300)] + ["の", "は", "を", "ア", "ン"]
    runs = ["".join(rng.choice(cjk) for _ in range(rng.randrange(1, 120))) for _ in range(60)]
    words = ["x" * k for k in (1, 14, 15, 16, 17, 85, 86, 255, 256, 257, 300)] + ["Donaudampfschifffahrtsgesellschaft"]
    text = "。".join(rng.choice(runs + words) + rng.choice(["", " ", "、"]) for _ in range(3000))
    # Random letters first: chunks that never repeat make the merge-result map rest for a while
    # (its hit rate is too low); the ids must not depend on whether it is resting.
    noise = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzàéîõüß!?-") for _ in range(400_000))
    for name in ["cl100k_base", "o200k_base"]:
        ours, theirs = pair(name)
        toksmith._core.clear_chunk_caches()
        assert ours.encode_ordinary(noise + text) == theirs.encode_ordinary(noise + text)
        expected = theirs.encode_ordinary(text)
        assert ours.encode_ordinary(text) == expected
        assert ours.encode_ordinary(text) == expected
        toksmith._core.clear_chunk_caches()
        assert ours.encode_ordinary(text[::-1]) == theirs.encode_ordinary(text[::-1])
        assert ours.encode_ordinary(text) == expected


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_runs_of_129_to_1024_bytes_identical(name):
    """Chunks of 129 to 1,024 bytes (runs of Chinese or Japanese with no punctuation, long
    words) are merged by their own path (`merge_heap`); chunks just past 1,024 by the next one.
    Random runs of common hanzi, of rarer ones, of kana, of Cyrillic and of two letters, each
    encoded alone and all together, against tiktoken."""
    ours, theirs = pair(name)
    rng = random.Random(15)
    common = "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后"
    alphabets = [
        lambda: chr(rng.randrange(0x4E00, 0x4E00 + 400)),
        lambda: rng.choice(common),
        lambda: chr(rng.randrange(0x3041, 0x3097)),
        lambda: chr(rng.randrange(0x430, 0x450)),
        lambda: rng.choice("aaab"),
    ]
    runs = []
    for _ in range(400):
        char = rng.choice(alphabets)
        run = ""
        target = rng.randrange(129, 1100)
        while len(run.encode()) < target:
            run += char()
        runs.append(run)
    assert any(129 <= len(r.encode()) <= 1024 for r in runs) and any(len(r.encode()) > 1024 for r in runs)
    toksmith._core.clear_chunk_caches()
    for run in runs:
        assert ours.encode_ordinary(run) == theirs.encode_ordinary(run), run[:30]
    text = "。".join(runs)
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


def test_random_letters_then_words_identical():
    """Random letters of many scripts make most pairs merging looks up have no merge, which
    turns on the pair filter that answers those without the merge map; words after them turn it
    off again. Neither state may change an id."""
    rng = random.Random(9)
    ranges = [(0x20, 0x250), (0x370, 0x3FF), (0x400, 0x4FF), (0x4E00, 0x4F00)]
    noise = "".join(chr(rng.randrange(*rng.choice(ranges))) for _ in range(150_000))
    words = " ".join(rng.choice(["token", "tokenizer", "merging", "the", "of", "Haus", "naïve", "coöperate"]) for _ in range(30_000))
    for name in ["cl100k_base", "o200k_base"]:
        ours, theirs = pair(name)
        toksmith._core.clear_chunk_caches()
        for text in [noise + words + noise, words + noise[::-1] + words]:
            assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


def test_load_by_name_needs_a_directory(monkeypatch):
    monkeypatch.delenv("TOKSMITH_TIKTOKEN_DIR", raising=False)
    with pytest.raises(toksmith.FormatError, match="TOKSMITH_TIKTOKEN_DIR"):
        toksmith.load("cl100k_base")


def test_env_var_and_file_path(monkeypatch):
    directory = data_path("tokenizers", "tiktoken")
    monkeypatch.setenv("TOKSMITH_TIKTOKEN_DIR", str(directory))
    by_name = toksmith.load("cl100k_base")
    by_file = toksmith.load(str(directory / "cl100k_base.tiktoken"))
    assert by_name.special_tokens == by_file.special_tokens
    assert by_name.encode("hello world") == by_file.encode("hello world")


def test_bad_tiktoken_file(tmp_path):
    bad = tmp_path / "x.tiktoken"
    bad.write_text("this is not base64 !!! 1\n", encoding="utf-8")
    with pytest.raises(toksmith.FormatError, match="x.tiktoken:1"):
        toksmith.load(str(bad), pattern="cl100k")
    with pytest.raises(toksmith.FormatError, match="pattern"):
        toksmith.load(str(bad))


def test_save_load_keeps_ranks(tmp_path):
    ours, _ = pair("cl100k_base")
    path = tmp_path / "cl100k.json"
    ours.save(path)
    again = toksmith.load(path)
    text = "Round trip of a ranks-based tokenizer: 12345, émigré."
    assert again.encode(text) == ours.encode(text)
    assert again.special_tokens == ours.special_tokens


def udhr_texts():
    import json

    path = data_path("corpora", "udhr", "udhr.jsonl.xz")
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            yield record["code"], "\n".join(record["articles"].values())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"])
def test_all_udhr_texts_identical(name):
    ours, theirs = pair(name)
    n = 0
    for code, text in udhr_texts():
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), code
        n += 1
    assert n == 532


@pytest.mark.slow
@pytest.mark.parametrize("name", ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"])
def test_whole_corpora_identical(name):
    """Every byte of the English corpora and of the 26 Debian Handbooks."""
    ours, theirs = pair(name)
    files = sorted((DATA_DIR / "corpora" / "en").glob("*.xz")) + sorted((DATA_DIR / "corpora" / "debian-handbook").glob("*.xz"))
    if not files:
        pytest.skip(f"real data not available under {DATA_DIR}/corpora")
    for f in files:
        with lzma.open(f, "rt", encoding="utf-8") as fh:
            text = fh.read()
        # Chunks of whole lines, encoded in parallel on our side.
        lines = text.splitlines(keepends=True)
        blocks = ["".join(lines[i:i + 2000]) for i in range(0, len(lines), 2000)]
        assert ours.encode_batch(blocks, disallowed_special=()) == theirs.encode_ordinary_batch(blocks), f.name


def test_check_parity_command(tmp_path, monkeypatch, capsys):
    from toksmith.cli import main

    monkeypatch.setenv("TOKSMITH_TIKTOKEN_DIR", str(data_path("tokenizers", "tiktoken")))
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\nGrüße 世界 😀\n  spaces   and\ttabs\n", encoding="utf-8")
    assert main(["check-parity", "cl100k_base", "--against", "tiktoken", "--corpus", str(corpus)]) == 0
    assert "3 of 3 texts identical" in capsys.readouterr().out


def test_export_tiktoken_round_trip(tmp_path):
    trained = toksmith.train(data_path("corpora", "en", "botchan.txt"), vocab_size=2000,
                             special_tokens=["<|endoftext|>"])
    path = tmp_path / "mine.tiktoken"
    trained.save(path, format="tiktoken")
    again = toksmith.load(str(path))
    meta_pattern = again.pattern
    enc = tiktoken.Encoding("mine", pat_str=meta_pattern, mergeable_ranks=load_tiktoken_bpe(str(path)),
                            special_tokens=again.special_tokens)
    for _, text in corpus_samples(50_000):
        assert again.encode_ordinary(text) == trained.encode_ordinary(text)
        assert enc.encode_ordinary(text) == trained.encode_ordinary(text)
    assert again.special_tokens == trained.special_tokens


def test_convert_command(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from toksmith.cli import main

    src = data_path("tokenizers", "tiktoken", "cl100k_base.tiktoken")
    assert main(["convert", str(src), str(tmp_path / "tokenizer.json"), "--to", "hf"]) == 0
    assert main(["convert", str(src), str(tmp_path / "copy.tiktoken"), "--to", "tiktoken"]) == 0
    ours = toksmith.load(str(src))
    text = "Converted tokenizers give the same ids: 12345, émigré, 世界 <|endoftext|>"
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert hf.encode(text).ids == ours.encode(text, allowed_special="all")
    assert toksmith.load(str(tmp_path / "copy.tiktoken")).encode(text, allowed_special="all") == ours.encode(text, allowed_special="all")


def test_mutated_tiktoken_files_load_or_raise_format_error(tmp_path):
    """Seeded mutations of a real .tiktoken file: the loader loads it or raises FormatError."""
    data = data_path("tokenizers", "tiktoken", "r50k_base.tiktoken").read_bytes()[:20_000]
    rng = random.Random(1)
    for k in range(60):
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            op = rng.randrange(3)
            i = rng.randrange(len(b))
            if op == 0:
                b[i] = rng.randrange(256)
            elif op == 1:
                del b[i:i + rng.randint(1, 50)]
            else:
                b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 10)))
        path = tmp_path / f"m{k}.tiktoken"
        path.write_bytes(bytes(b))
        try:
            toksmith.load(str(path), pattern="gpt2")
        except toksmith.FormatError:
            pass


def test_chunk_caches_of_many_tokenizers_in_turn():
    """Six encodings used in turn from one thread (more than the 4 chunk caches a thread keeps,
    so caches are recycled), with the caches also emptied midway: ids stay tiktoken's."""
    samples = [text[:20_000] for _, text in corpus_samples(60_000)][:6]
    for round_ in range(3):
        if round_ == 1:
            toksmith._core.clear_chunk_caches()
        for name in NAMES:
            ours, theirs = pair(name)
            for text in samples:
                assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), name


def test_random_latin1_then_words_identical():
    """Random printable Latin-1 (the benchmark's worst case) makes chunks of 5 to 15 bytes that
    never repeat, so those lengths rest: they are merged without the chunk cache or the
    vocabulary's table. Words after them (met while their lengths rest or just after) and a
    second noise part must keep every id. (Every token of cl100k and o200k up to 15 bytes comes
    back whole from merging its bytes, so resting never needs the table for them; the Rust test
    `resting_lengths_encode_as_words_alone` covers vocabularies where it does.)"""
    rng = random.Random(11)
    alphabet = [chr(c) for c in range(0x21, 0x7F)] + [chr(c) for c in range(0xA0, 0x100)]
    noise = "".join(rng.choice(alphabet) for _ in range(200_000))
    words = " ".join(rng.choice(["tokenizer", "merging", "the", "Straße", "größte", "façade", "élève"]) for _ in range(20_000))
    for name in ["cl100k_base", "o200k_base"]:
        ours, theirs = pair(name)
        toksmith._core.clear_chunk_caches()
        for text in [noise + words + noise, words + noise]:
            assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
