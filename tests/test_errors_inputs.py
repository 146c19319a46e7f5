"""Bad parameters, corrupt sources and failed saves: typed errors naming the problem (and the file)."""

import bz2
import gzip
import lzma
import os
import stat

import pytest

import toksmith
from toksmith import FormatError, InvalidPatternError, TokenizerError, TrainingError
from toksmith.cli import main
from toksmith.errors import DecodeError, SaveError

TEXTS = ["ab ab abc abc"] * 4


@pytest.fixture(scope="module")
def tok():
    return toksmith.train(TEXTS, vocab_size=258)


# -- 1. num_threads ------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [10**4, 0, -1, 2**70, "2", True, 1.0])
def test_train_num_threads_checked(threads):
    with pytest.raises(TrainingError, match="num_threads .*from 1 to 256"):
        toksmith.train(TEXTS, vocab_size=300, num_threads=threads)


@pytest.mark.parametrize("algorithm", ["wordpiece", "unigram"])
def test_subword_num_threads_checked(algorithm):
    with pytest.raises(TrainingError, match="num_threads"):
        toksmith.train(TEXTS, algorithm=algorithm, vocab_size=300, num_threads=-1)
    from toksmith.train_subword import train_unigram, train_wordpiece

    trainer = train_wordpiece if algorithm == "wordpiece" else train_unigram
    with pytest.raises(TrainingError, match="num_threads"):
        trainer(TEXTS, vocab_size=300, num_threads=10**4)


def test_count_and_extend_num_threads_checked(tok, tmp_path):
    from toksmith.trainers import count

    with pytest.raises(TrainingError, match="num_threads"):
        count(TEXTS, tmp_path / "c.tsv", num_threads=-1)
    with pytest.raises(TrainingError, match="num_threads"):
        tok.extend(TEXTS, add=2, num_threads=10**4)


def test_cli_threads_checked(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("ab ab\n")
    rc = main(["train", str(tmp_path / "a.txt"), "--vocab-size", "300", "--threads", "0", "-q",
               "-o", str(tmp_path / "t.json")])
    assert rc == 2 and "--threads" in capsys.readouterr().err


# -- 2. other ints that reach Rust -------------------------------------------------------------


@pytest.mark.parametrize("options, phrase", [
    (dict(vocab_size=2**70), "vocab_size must be an int from"),
    (dict(min_frequency=2**70), "min_frequency must be an int from"),
    (dict(max_token_length=2**40), "max_token_length must be an int from"),
    (dict(max_memory=-1), "max_memory=-1 is not a usable size"),
    (dict(max_memory="99999999999TB"), "not a usable size"),
    (dict(level="char", limit_alphabet=-1), "limit_alphabet must be an int"),
    (dict(max_chars_per_doc="5"), "max_chars_per_doc must be an int >= 1"),
    (dict(max_chars_per_doc=-1), "max_chars_per_doc must be an int >= 1"),
    (dict(max_chars_per_doc=0), "max_chars_per_doc must be an int >= 1"),
    (dict(algorithm="superbpe", transition=280, max_words_per_token=-1), "max_words_per_token must be an int"),
    (dict(algorithm="superbpe", transition=280, forbidden_patterns=[5]), "forbidden_patterns must be regex strings"),
    (dict(algorithm="unigram", vocab_size=2**70), "vocab_size must be an int from"),
    (dict(algorithm="wordpiece", vocab_size=2**70), "vocab_size must be an int from"),
])
def test_int_options_checked(options, phrase):
    options = {"vocab_size": 300, **options}
    with pytest.raises(TrainingError, match=phrase):
        toksmith.train(TEXTS, **options)


@pytest.mark.parametrize("options, phrase", [
    (dict(algorithm="wordpiece", bogus=1), "unknown option.*'wordpiece': bogus; it takes .*lowercase"),
    (dict(algorithm="unigram", lowercase=True), "unknown option.*'unigram': lowercase; it takes .*character_coverage"),
    (dict(algorithm="unigram", pattern="gpt2"), "pattern: not options of algorithm='unigram'"),
    (dict(algorithm="wordpiece", max_memory="1GB", from_counts=True), "from_counts, max_memory: not options"),
    (dict(algorithm="wordpiece", level="char"), "level: not options"),
    (dict(algorithm="wordpiece", forbidden_patterns=["x"]), "forbidden_patterns: not options"),
    (dict(algorithm="unigram", max_words_per_token=2), "max_words_per_token: not options"),
    (dict(transition=280), "transition: options of algorithm='superbpe'"),
    (dict(forbidden_patterns=["x"]), "forbidden_patterns: options of algorithm='superbpe'"),
    (dict(algorithm="unigram", split_digits=1), "split_digits must be True or False"),
    (dict(algorithm="wordpiece", max_input_chars_per_word="9"), "max_input_chars_per_word must be a number"),
])
def test_options_another_algorithm_would_ignore_are_errors(options, phrase):
    """WordPiece and Unigram do not count chunks: BPE's options and misspelled ones were ignored
    silently or escaped as a TypeError."""
    with pytest.raises(TrainingError, match=phrase):
        toksmith.train(TEXTS, vocab_size=300, **options)


def test_extend_add_checked(tok):
    for add in (-1, 2**70):
        with pytest.raises(TrainingError, match="add must be an int"):
            tok.extend(TEXTS, add=add)


def test_count_max_memory_checked(tmp_path):
    from toksmith.trainers import count

    with pytest.raises(TrainingError, match="max_memory"):
        count(TEXTS, tmp_path / "c.tsv", max_memory="99999999999TB")


# -- 3. corrupt compressed sources ---------------------------------------------------------------


def _compressed(tmp_path, suffix, data: bytes) -> str:
    path = tmp_path / f"corpus.txt{suffix}"
    path.write_bytes(data)
    return str(path)


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


# Random-looking text, so that half of the compressed stream is not enough to decode it.
TEXT = " ".join(f"w{i * 7919 % 10007}" for i in range(3000)).encode()


@pytest.mark.parametrize("suffix, data", [
    (".gz", b"\x0c\xef not gzip at all" * 10),
    (".gz", gzip.compress(TEXT)[:200]),
    (".xz", b"not xz" * 10),
    (".xz", lzma.compress(TEXT)[:200]),
    (".bz2", b"not bz2" * 10),
    (".zst", b"not zstd" * 10),
    (".zst", _zstd(TEXT)[:200]),  # truncated: zstandard's own reader returns nothing, silently
], ids=["bad.gz", "trunc.gz", "bad.xz", "trunc.xz", "bad.bz2", "bad.zst", "trunc.zst"])
def test_corrupt_compressed_source(tmp_path, suffix, data):
    path = _compressed(tmp_path, suffix, data)
    with pytest.raises(TrainingError, match="corrupt or truncated") as e:
        toksmith.train(path, vocab_size=300)
    assert path in str(e.value)


def test_corrupt_jsonl_gz(tmp_path):
    path = _compressed(tmp_path, "", b"")
    path = path.replace(".txt", ".jsonl.gz")
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"text": "a"}\n' * 100)[:30])
    with pytest.raises(TrainingError, match="corrupt or truncated"):
        toksmith.train(path, vocab_size=300)


def test_zst_frames_read(tmp_path):
    """toksmith's own .zst reader still reads every frame, and an empty file as no text."""
    from toksmith.sources import iter_texts

    path = _compressed(tmp_path, ".zst", _zstd(b"one frame\n") + _zstd(b"another\n"))
    assert "".join(iter_texts(path)) == "one frame\nanother\n"
    assert list(iter_texts(_compressed(tmp_path, ".zst", b""))) == []


def test_cli_corrupt_source(tmp_path, capsys):
    path = _compressed(tmp_path, ".bz2", bz2.compress(TEXT)[:100])
    assert main(["count", path, "-q", "-o", str(tmp_path / "c.tsv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "corrupt or truncated" in err and path in err
    assert not (tmp_path / "c.tsv").exists()


# -- 4. Parquet ----------------------------------------------------------------------------------


def test_parquet_int_column(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"text": [1, 2, 3]}), path)
    with pytest.raises(TrainingError, match="column 'text' holds int values") as e:
        toksmith.train(str(path), vocab_size=300)
    assert str(path) in str(e.value)


def test_parquet_garbage(tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "garbage.parquet"
    path.write_bytes(b"this is not parquet" * 5)
    with pytest.raises(TrainingError, match="as Parquet") as e:
        toksmith.train(str(path), vocab_size=300)
    assert str(path) in str(e.value)


# -- 5. saving -----------------------------------------------------------------------------------


def test_save_to_directory(tok, tmp_path):
    with pytest.raises(SaveError, match="is a directory") as e:
        tok.save(tmp_path)
    assert str(tmp_path) in str(e.value) and isinstance(e.value, TokenizerError)


def test_save_under_a_file(tok, tmp_path):
    (tmp_path / "file").write_text("x")
    target = tmp_path / "file" / "tok.json"
    with pytest.raises(SaveError, match="is a file, not a folder") as e:
        tok.save(target)
    assert str(target) in str(e.value)


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True,
                    reason="root writes into read-only folders")
def test_save_read_only_folder(tok, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(SaveError, match="permission denied") as e:
            tok.save(folder / "tok.json")
        assert str(folder / "tok.json") in str(e.value)
    finally:
        folder.chmod(0o755)


def test_save_to_proc(tok):
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc")
    with pytest.raises(SaveError, match="cannot write /proc/x.json"):
        tok.save("/proc/x.json")


def test_save_error_is_os_error_and_leaves_no_temp(tok, tmp_path):
    """Still an OSError (the on-disk cache ignores those), and no temporary file stays behind."""
    (tmp_path / "out.json").mkdir()
    with pytest.raises(OSError):
        tok.save(tmp_path / "out.json")
    from toksmith._io import atomic_output

    with pytest.raises(SaveError):
        with atomic_output(tmp_path / "x.json") as tmp:
            tmp.write_text("half")
            raise OSError(28, "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_count_output_errors(tmp_path, capsys):
    from toksmith.trainers import count, merge_counts

    with pytest.raises(SaveError, match="is a directory"):
        count(TEXTS, tmp_path)
    (tmp_path / "c.tsv").write_text("ab\t3\n")
    with pytest.raises(SaveError, match="is a file, not a folder"):
        merge_counts([tmp_path / "c.tsv"], tmp_path / "c.tsv" / "m.tsv")
    rc = main(["convert", str(_saved(tmp_path)), str(tmp_path), "--to", "hf"])
    assert rc == 2 and capsys.readouterr().err.startswith("error: cannot write")


def _saved(tmp_path):
    path = tmp_path / "tok.json"
    toksmith.train(TEXTS, vocab_size=258).save(path)
    return path


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_saved_file_mode_follows_umask(tok, tmp_path, umask, mode):
    from toksmith.trainers import count

    old = os.umask(umask)
    try:
        tok.save(tmp_path / "tok.json")
        tok.save(tmp_path / "tok.tiktoken", format="tiktoken")
        count(TEXTS, tmp_path / "c.tsv")
    finally:
        os.umask(old)
    for name in ("tok.json", "tok.tiktoken", "tok.tiktoken.json", "c.tsv"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == mode, name


# -- 6. CLI: Ctrl-C, non-integer ids -------------------------------------------------------------


def test_cli_keyboard_interrupt(monkeypatch, tmp_path, capsys):
    import toksmith.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_cmd_inspect", interrupted)
    assert main(["inspect", "whatever.json"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_cli_decode_non_integer(tmp_path, capsys):
    path = _saved(tmp_path)
    assert main(["decode", "-t", str(path), "1", "abc"]) == 2
    err = capsys.readouterr().err
    assert "ids must be integers" in err and "'abc'" in err
    from toksmith.cli import _parse_id

    with pytest.raises(DecodeError):
        _parse_id("1.5")


# -- 7. check-parity -----------------------------------------------------------------------------


@pytest.mark.parametrize("library,module,says", [("hf", "tokenizers", "Hugging Face tokenizers cannot load it"),
                                                  ("sentencepiece", "sentencepiece", "sentencepiece cannot load it")])
def test_parity_reference_that_cannot_load_the_file(tmp_path, library, module, says):
    pytest.importorskip(module)
    from toksmith.parity import reference_encoder

    path = _saved(tmp_path)
    with pytest.raises(FormatError, match=says) as e:
        reference_encoder(library, str(path), toksmith.load(path))
    assert str(path) in str(e.value)


def test_parity_sentencepiece_reference_missing(tmp_path):
    pytest.importorskip("sentencepiece")
    from toksmith.parity import reference_encoder

    path = _saved(tmp_path)
    with pytest.raises(FormatError, match="no such file"):
        reference_encoder("sentencepiece", str(tmp_path / "missing.model"), toksmith.load(path))


def test_parity_tiktoken_reference_not_a_tiktoken_file(tmp_path):
    pytest.importorskip("tiktoken")
    from toksmith.parity import reference_encoder

    path = _saved(tmp_path)
    with pytest.raises(FormatError, match="tiktoken cannot load it"):
        reference_encoder("tiktoken", str(path), toksmith.load(path))


@pytest.mark.parametrize("name, data, phrase", [
    ("bad.gz", b"\x0c\xef not gzip" * 5, "corrupt or truncated"),
    ("garbage.jsonl", b"no json here\n", r"garbage.jsonl:1: not a JSON object"),
    ("list.jsonl", b"[1, 2]\n", r"list.jsonl:1: a JSON list"),
])
def test_parity_corpus_errors(tmp_path, name, data, phrase):
    from toksmith.parity import corpus_texts

    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(FormatError, match=phrase) as e:
        list(corpus_texts(str(path)))
    assert str(path) in str(e.value)


def test_cli_check_parity_bad_reference(tmp_path, capsys):
    pytest.importorskip("tokenizers")
    path = _saved(tmp_path)
    (tmp_path / "corpus.txt").write_text("ab ab\n")
    assert main(["check-parity", str(path), "--against", "hf", "--corpus", str(tmp_path / "corpus.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(path) in err


# -- 8. pattern names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name, suggestion", [("o300k", "o200k"), ("cl100K", "cl100k"), ("gpt4", None)])
def test_unknown_pattern_name(name, suggestion):
    with pytest.raises(InvalidPatternError, match="is not a pattern name") as e:
        toksmith.train(TEXTS, vocab_size=300, pattern=name)
    message = str(e.value)
    assert "gpt2, cl100k, o200k" in message and f"'(?:{name})'" in message
    if suggestion:
        assert f"did you mean {suggestion!r}" in message


def test_literal_regex_and_names_still_work():
    from toksmith.patterns import resolve

    assert resolve("(?:ab)") == (None, "(?:ab)")
    assert resolve("cl100k_base")[0] == "cl100k" and resolve("superbpe")[0] == "superbpe"
    assert resolve(r"\w+") == (None, r"\w+")
    with pytest.raises(InvalidPatternError, match="level='char'"):
        toksmith.patterns.split("ab", "metaspace")
