"""The command line, run as a user would (a subprocess of the installed entry point)."""

import subprocess
import sys

import pytest

TEXT = "low lower lowest newest widest " * 50


def run(*args, input=None, ok=True):
    proc = subprocess.run([sys.executable, "-m", "toksmith.cli", *args], capture_output=True, text=True, input=input)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    corpus = d / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    out = d / "tok.json"
    run("train", str(corpus), "--vocab-size", "300", "--special-token", "<|endoftext|>", "-o", str(out))
    return out


def test_train_encode_decode(trained):
    ids = run("encode", "-t", str(trained), "the lowest")
    numbers = ids.stdout.split()
    assert numbers and all(n.isdigit() for n in numbers)
    assert run("decode", "-t", str(trained), *numbers).stdout == "the lowest\n"
    # stdin when no text is given
    assert run("encode", "-t", str(trained), input="the lowest").stdout == ids.stdout


def test_special_token_handling(trained):
    bad = run("encode", "-t", str(trained), "x<|endoftext|>", ok=False)
    assert bad.returncode == 2 and "allowed_special" in bad.stderr
    assert run("encode", "-t", str(trained), "--allow-special", "<|endoftext|>").stdout.split() == ["0"]


def test_inspect(trained):
    out = run("inspect", str(trained)).stdout
    import toksmith

    assert f"vocab_size: {toksmith.load(trained).vocab_size}" in out and "<|endoftext|>" in out and "first #0" in out


def test_errors_are_one_line(tmp_path):
    proc = run("encode", "-t", str(tmp_path / "missing.json"), "x", ok=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


@pytest.mark.parametrize("cmd", ["train", "encode", "decode", "inspect", "demo"])
def test_help(cmd):
    assert "usage" in run(cmd, "--help").stdout


def test_train_character_level_from_the_command_line(tmp_path):
    """The issue asks for every training option in the CLI too: character level with an
    end-of-word suffix, limit_alphabet and byte fallback (saved as a tokenizer.json)."""
    import toksmith

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT + " 你好", encoding="utf-8")
    out = tmp_path / "char.json"
    run("train", str(corpus), "--vocab-size", "40", "--level", "char", "--end-of-word-suffix", "</w>", "-q", "-o", str(out))
    tok = toksmith.load(out)
    assert tok.pipeline is not None and any(name.endswith("</w>") for name in map(tok.id_to_token, range(tok.vocab_size)))
    assert tok.decode(tok.encode("lower newest")) == "lower newest"
    out = tmp_path / "fallback.json"
    run("train", str(corpus), "--vocab-size", "300", "--level", "char", "--limit-alphabet", "8", "--byte-fallback",
        "-q", "-o", str(out))
    tok = toksmith.load(out)
    names = [tok.id_to_token(i) for i in tok.encode("你好 lowest")]
    assert "<0xE4>" in names and tok.decode(tok.encode("你好 lowest")) == "你好 lowest"
    bad = run("train", str(corpus), "--vocab-size", "300", "--byte-fallback", "-q", "-o", str(tmp_path / "x.json"), ok=False)
    assert bad.returncode == 2 and "level='char'" in bad.stderr
    bad = run("train", str(corpus), "--vocab-size", "40", "--level", "char", "--trace", "-o", str(tmp_path / "y.json"), ok=False)
    assert bad.returncode == 2 and "--trace" in bad.stderr


def test_count_then_train_from_counts_keeps_the_pattern(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    counts = tmp_path / "c.tsv"
    run("count", str(corpus), "--pattern", "gpt2", "-o", str(counts), "-q")
    assert (tmp_path / "c.tsv.meta.json").is_file()
    out = tmp_path / "tok.json"
    run("train", str(counts), "--from-counts", "--vocab-size", "300", "-o", str(out), "-q")
    assert "gpt2" in run("inspect", str(out)).stdout
    proc = run("train", str(counts), "--from-counts", "--pattern", "cl100k", "--vocab-size", "300",
               "-o", str(tmp_path / "other.json"), ok=False)
    assert proc.returncode != 0 and "made with 'gpt2'" in proc.stderr and not (tmp_path / "other.json").exists()


def test_train_every_algorithm_from_the_command_line(tmp_path):
    """SuperBPE, WordPiece and Unigram were only in the Python API; their own options pass with
    --option KEY=VALUE, and the result is what toksmith.train gives."""
    import toksmith

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT.replace("widest ", "widest\n") + "\n", encoding="utf-8")
    runs = {
        "superbpe": (["--vocab-size", "300", "--transition", "280"], dict(vocab_size=300, transition=280)),
        "wordpiece": (["--vocab-size", "60", "--option", "lowercase=false", "--option", "criterion=likelihood"],
                      dict(vocab_size=60, lowercase=False, criterion="likelihood")),
        "unigram": (["--vocab-size", "20", "--option", "character_coverage=1.0", "--option", "split_digits=true"],
                    dict(vocab_size=20, character_coverage=1.0, split_digits=True)),
    }
    for algorithm, (flags, options) in runs.items():
        out = tmp_path / f"{algorithm}.json"
        run("train", str(corpus), "--algorithm", algorithm, *flags, "-q", "-o", str(out))
        got = toksmith.load(out)
        expected = toksmith.train(corpus, algorithm=algorithm, **options)
        text = "the lowest newest widest 2025"
        assert got.encode(text) == expected.encode(text) and got.vocab_size == expected.vocab_size, algorithm
        assert got.decode(got.encode("lower newest"), skip_special_tokens=True).strip() == "lower newest"
    for flags, message in [(["--algorithm", "unigram", "--option", "bogus=1"], "unknown option"),
                           (["--algorithm", "unigram", "--option", "min_frequency=3"], "use --min-frequency"),
                           (["--algorithm", "unigram", "--option", "num_threads=1"], "use --threads"),
                           (["--algorithm", "unigram", "--option", "split_digits=1"], "must be True or False"),
                           (["--algorithm", "wordpiece", "--option", "lowercase={[1]:2}"], "must be True or False"),
                           (["--option", "lowercase=false"], "--option passes WordPiece's"),
                           (["--transition", "280"], "options of --algorithm superbpe"),
                           (["--algorithm", "wordpiece", "--trace"], "--trace replays byte-level BPE")]:
        bad = run("train", str(corpus), "--vocab-size", "300", *flags, "-o", str(tmp_path / "bad.json"), ok=False)
        assert bad.returncode == 2 and message in bad.stderr, (flags, bad.stderr)
        assert not (tmp_path / "bad.json").exists()
