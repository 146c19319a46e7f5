"""Training at scale: counts files, merging counts, memory budget, sources, options, determinism."""

import gzip
import hashlib
import json
import random
import subprocess
import sys

import pytest

import toksmith
from toksmith.trainers import count, merge_counts

from conftest import data_path


def corpus(seed=0, n=300):
    rng = random.Random(seed)
    words = ["low", "lower", "newest", "widest", "the", "model", "\t", "\n", "x\\y", "über", "世界", "😀", "2025", "don't"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def test_from_counts_equals_training_on_the_corpus(tmp_path):
    texts = corpus()
    direct = toksmith.train(texts, vocab_size=400)
    n = count(texts, tmp_path / "c.tsv")
    assert n > 0
    assert toksmith.train(tmp_path / "c.tsv", vocab_size=400, from_counts=True).to_dict()["model"] == direct.to_dict()["model"]


@pytest.mark.parametrize("position, specials", [("first", ["<|a|>", "<|b|>"]), ("last", ["<|endoftext|>"]), ("first", [])])
def test_model_the_trainer_builds_equals_the_model_built_from_lists(tmp_path, position, specials):
    # train() builds the byte-level model in Rust from the learned merges; the same tokenizer
    # must come out of the Python lists of tokens and merges (`_assemble` without the trainer).
    from toksmith.trainers import _assemble

    tok = toksmith.train(corpus(3), vocab_size=420, special_tokens=specials, special_tokens_position=position)
    offset = len(specials) if position == "first" else 0
    internal = [(a - offset, b - offset) for a, b in tok._merge_ids()]
    settings = {k: v for k, v in tok.metadata.items() if k not in ("trainer", "special_tokens_position")}
    from_lists = _assemble(internal, tok.pattern, tok.pattern_name, specials, position, settings)
    assert from_lists._tokens == tok._tokens and from_lists.special_tokens == tok.special_tokens
    text = " ".join(corpus(4, 20)) + "".join(specials)
    assert tok.encode(text, allowed_special="all") == from_lists.encode(text, allowed_special="all")
    tok.save(tmp_path / "a.json")
    from_lists.save(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_the_floor_of_the_pair_table_changes_no_merge():
    # Past 1,024 merges the learner drops the pairs it expects never to merge (a floor under
    # the pair table, from the merge target); the merges must be those learned without it.
    from toksmith import _core

    rng = random.Random(5)
    stems = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(4000)]
    weights = [1 / (k + 1) for k in range(len(stems))]  # Zipf-like, as in text
    texts = [" ".join(rng.choices(stems, weights, k=400)) for _ in range(300)]
    runs = []
    for target in (None, 3000):
        trainer = _core.BpeTrainer(_core.pattern_regex("o200k"), [], 1, None, "")
        trainer.add_texts(texts)
        trainer.start("byte", 2, None)
        if target:
            trainer.set_merge_target(target)
        while trainer.step(256):
            if len(trainer.merges()[0]) >= 3000:
                break
        runs.append((trainer.merges(), trainer.table_floor()))
    (plain, plain_floor), (floored, floor) = runs
    assert len(plain[0]) >= 2500
    assert plain_floor == 2 and floor > 2  # the floor did rise
    assert floored == plain


def test_byte_level_model_needs_a_byte_level_start():
    from toksmith import _core

    trainer = _core.BpeTrainer(_core.pattern_regex("o200k"), [], 1, None, "")
    trainer.add_texts(corpus(6))
    trainer.start("char", 2, None)
    with pytest.raises(toksmith.TrainingError, match="byte"):
        trainer.byte_level_model(_core.pattern_regex("o200k"), [], 0)


def test_merged_counts_equal_counts_of_the_concatenated_corpus(tmp_path):
    texts = corpus(1, 400)
    count(texts[:150], tmp_path / "a.tsv")
    count(texts[150:], tmp_path / "b.tsv")
    count(texts, tmp_path / "all.tsv")
    merge_counts([tmp_path / "a.tsv", tmp_path / "b.tsv"], tmp_path / "merged.tsv")
    assert (tmp_path / "merged.tsv").read_bytes() == (tmp_path / "all.tsv").read_bytes()
    merged = toksmith.train([tmp_path / "a.tsv", tmp_path / "b.tsv"], vocab_size=420, from_counts=True)
    assert merged.to_dict()["model"] == toksmith.train(texts, vocab_size=420).to_dict()["model"]


def test_counts_file_escapes_tabs_newlines_backslashes(tmp_path):
    count(["a\tb\n\nc\\d"], tmp_path / "c.tsv", pattern=r"[\s\S]")
    lines = (tmp_path / "c.tsv").read_text(encoding="utf-8").splitlines()
    assert all(line.count("\t") == 1 for line in lines)
    assert "\\t\t1" in lines and "\\n\t2" in lines and "\\\\\t1" in lines


def test_bad_counts_file(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("fine\t3\nno tab here\n", encoding="utf-8")
    with pytest.raises(toksmith.FormatError, match="bad.tsv:2"):
        toksmith.train(bad, vocab_size=300, from_counts=True)


def test_memory_budget_spills_and_gives_the_same_result(tmp_path):
    texts = corpus(2, 600)
    budget = toksmith.train(texts, vocab_size=450, max_memory=2000)
    assert budget.to_dict()["model"] == toksmith.train(texts, vocab_size=450).to_dict()["model"]
    from toksmith import _core

    trainer = _core.BpeTrainer(toksmith.patterns.resolve("o200k")[1], [], None, 2000, str(tmp_path / "spill"))
    for i in range(0, 600, 50):
        trainer.add_texts(texts[i:i + 50])
    unique, size, runs = trainer.memory_stats()
    assert runs > 1 and size <= 2000


def test_max_memory_parsing():
    with pytest.raises(toksmith.TrainingError, match="not a size"):
        toksmith.train(["x"], vocab_size=300, max_memory="lots")


def test_sources_jsonl_zst_parquet(tmp_path):
    texts = corpus(3, 50)
    expected = toksmith.train(texts, vocab_size=330).to_dict()["model"]
    jsonl = tmp_path / "d.jsonl.gz"
    jsonl.write_bytes(gzip.compress("".join(json.dumps({"body": t, "id": i}) + "\n" for i, t in enumerate(texts)).encode()))
    assert toksmith.train(jsonl, vocab_size=330, text_field="body").to_dict()["model"] == expected
    with pytest.raises(toksmith.TrainingError, match="text_field"):
        toksmith.train(jsonl, vocab_size=330)
    zstandard = pytest.importorskip("zstandard")
    zst = tmp_path / "d.txt.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress("".join(texts).encode()))
    assert toksmith.train(zst, vocab_size=330).to_dict()["model"] == toksmith.train(["".join(texts)], vocab_size=330).to_dict()["model"]
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts}), tmp_path / "d.parquet")
    assert toksmith.train(tmp_path / "d.parquet", vocab_size=330).to_dict()["model"] == expected


def test_plain_files_read_in_rust_count_like_the_python_reader(tmp_path):
    """Plain .txt files are read by Rust, .gz by Python: both must give the same tokenizer,
    bytes that are not UTF-8 included (U+FFFD), whatever the block size."""
    from toksmith import trainers

    lines = [t + "\n" for t in corpus(6, 400)] + ["\n \n", "x\r\n", "tab\tend\n\n\n"]
    data = "".join(lines).encode() + b"bad \x80 \xe4\xb8 \xed\xa0\x80 end\n" + "".join(lines).encode() + b"\xe4"
    (tmp_path / "a.txt").write_bytes(data)
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(data))
    via_python = toksmith.train(tmp_path / "b.txt.gz", vocab_size=500).to_dict()["model"]
    assert toksmith.train(tmp_path / "a.txt", vocab_size=500).to_dict()["model"] == via_python
    old = trainers.FILE_BLOCK_BYTES
    try:
        trainers.FILE_BLOCK_BYTES = 100  # many blocks, some cut inside a character, read into reused buffers
        for threads in (1, 2):
            assert toksmith.train(tmp_path / "a.txt", vocab_size=500, num_threads=threads).to_dict()["model"] == via_python
    finally:
        trainers.FILE_BLOCK_BYTES = old


def test_file_blocks_of_changing_sizes_count_every_byte_once(tmp_path):
    """Blocks read ahead are used only when they are the block asked for: a caller changing the
    block size at every call (so that no block read ahead fits) counts the same chunks as one
    reading the file in equal blocks, on 1 and 2 threads (2: the first block of each is read
    short, the others ahead)."""
    from toksmith import _core
    from toksmith.patterns import resolve

    data = "".join(t + "\n" for t in corpus(6, 300)).encode()
    (tmp_path / "a.txt").write_bytes(data)

    def counts(threads, sizes):
        trainer = _core.BpeTrainer(resolve("o200k")[1], [], num_threads=threads)
        offset, calls = 0, 0
        while offset < len(data):
            offset = trainer.add_file_block(str(tmp_path / "a.txt"), offset, sizes[calls % len(sizes)])
            calls += 1
        out = tmp_path / f"counts-{threads}-{len(sizes)}.tsv"
        trainer.write_counts(str(out))
        return out.read_text(encoding="utf-8"), calls

    whole, _ = counts(1, [len(data) + 1])
    assert whole.count("\n") > 20
    for threads in (1, 2):
        for sizes in ([500], [300, 900, 120]):
            got, calls = counts(threads, sizes)
            assert calls > 5 and got == whole, (threads, sizes)


def test_max_chars_per_doc():
    texts = ["abc " * 100, "xyz " * 100]
    cut = toksmith.train(texts, vocab_size=300, max_chars_per_doc=8, min_frequency=1)
    assert cut.to_dict()["model"] == toksmith.train([t[:8] for t in texts], vocab_size=300, min_frequency=1).to_dict()["model"]


def test_max_token_length():
    tok = toksmith.train(corpus(4), vocab_size=600, max_token_length=3, min_frequency=1)
    assert max(len(a + b) for a, b in tok.merges) <= 3
    assert len(tok.merges) > 20
    free = toksmith.train(corpus(4), vocab_size=600, min_frequency=1)
    assert max(len(a + b) for a, b in free.merges) > 3


def test_progress_bars_go_to_stderr(capsys):
    toksmith.train(corpus(5, 50), vocab_size=300, show_progress=True)
    err = capsys.readouterr().err
    assert "reading" in err and "merging" in err


GOLDEN = "1c490fa3838d64ad6f3076a449c12fd35eb5bce118a4b56c76306c002aa621b5"


def test_golden_hash_of_a_trained_tokenizer():
    """Pins the exact output of training on a real text: the tie rule, the id layout and the
    file format. If this changes on purpose, update the hash and say why in the commit."""
    path = data_path("corpora", "en", "botchan.txt")
    tok = toksmith.train(path, vocab_size=1000, special_tokens=["<|endoftext|>"], num_threads=1)
    digest = hashlib.sha256(json.dumps(tok.to_dict(), sort_keys=True).encode()).hexdigest()
    again = toksmith.train(path, vocab_size=1000, special_tokens=["<|endoftext|>"], num_threads=2)
    assert hashlib.sha256(json.dumps(again.to_dict(), sort_keys=True).encode()).hexdigest() == digest
    assert digest == GOLDEN


def test_cli_count_merge_train_and_trace(tmp_path):
    text = "low lower lowest newest widest " * 10
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")

    def run(*args):
        proc = subprocess.run([sys.executable, "-m", "toksmith.cli", *args], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc

    run("count", str(tmp_path / "a.txt"), "-o", str(tmp_path / "a.tsv"), "-q")
    run("merge-counts", str(tmp_path / "a.tsv"), str(tmp_path / "a.tsv"), "-o", str(tmp_path / "m.tsv"), "-q")
    run("train", str(tmp_path / "m.tsv"), "--from-counts", "--vocab-size", "270", "-o", str(tmp_path / "t.json"), "-q")
    out = run("train", str(tmp_path / "a.txt"), "--vocab-size", "262", "--trace", "-o", str(tmp_path / "t2.json"), "-q").stdout
    assert out.splitlines()[0].split() == ["step", "pair", "count", "corpus"]
    assert len(out.splitlines()) == 1 + 6


@pytest.mark.slow
def test_interrupted_training_leaves_no_output(tmp_path):
    import signal

    # 20 MB of random lowercase words (each byte value stands for a letter, a space or a line
    # break): 50,000 merges to learn take about 2 s after the first progress output, so the
    # signal lands mid-run even on a loaded machine (a repetitive corpus ran out of merges
    # 0.1 s after its first output).
    table = bytes((b"\n" if b < 2 else b" " if b < 32 else bytes([97 + b % 26]))[0] for b in range(256))
    corpus = tmp_path / "big.txt"
    corpus.write_bytes(random.Random(0).randbytes(20_000_000).translate(table))
    out = tmp_path / "out" / "tok.json"
    # The child gets SIGINT's default action back: a shell that starts the test suite in the
    # background (`make test &`) makes it ignored, and Python then installs no handler for it.
    proc = subprocess.Popen([sys.executable, "-m", "toksmith.cli", "train", str(corpus), "--vocab-size", "50000",
                             "-o", str(out)], stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc.stderr.read(1)  # the first progress output: training has started
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []



def test_counts_record_their_pattern_and_training_uses_or_checks_it(tmp_path):
    """Counts made with one pattern trained with another would learn chunks the tokenizer's own
    pre-tokenization never makes: the pattern is recorded beside the counts and checked."""
    texts = corpus(3, 200)
    count(texts, tmp_path / "g.tsv", pattern="gpt2")
    meta = tmp_path / "g.tsv.meta.json"
    assert json.loads(meta.read_text(encoding="utf-8"))["pattern_name"] == "gpt2"
    # Left out, the pattern is the counts' own: the same tokenizer as training on the text.
    from_counts = toksmith.train(tmp_path / "g.tsv", vocab_size=400, from_counts=True)
    assert from_counts.pattern_name == "gpt2"
    assert from_counts.to_dict() == toksmith.train(texts, vocab_size=400, pattern="gpt2").to_dict()
    assert toksmith.train(tmp_path / "g.tsv", vocab_size=400, from_counts=True, pattern="gpt2").merges == from_counts.merges
    with pytest.raises(toksmith.TrainingError, match="made with 'gpt2' but training was asked for 'o200k'"):
        toksmith.train(tmp_path / "g.tsv", vocab_size=400, from_counts=True, pattern="o200k")
    # Files counted with two patterns do not add up.
    count(texts, tmp_path / "o.tsv", pattern="o200k")
    with pytest.raises(toksmith.TrainingError, match="different patterns"):
        merge_counts([tmp_path / "g.tsv", tmp_path / "o.tsv"], tmp_path / "m.tsv")
    assert not (tmp_path / "m.tsv").exists()
    with pytest.raises(toksmith.TrainingError, match="different patterns"):
        toksmith.train([tmp_path / "g.tsv", tmp_path / "o.tsv"], vocab_size=400, from_counts=True)
    # A merge keeps the pattern; a directory of counts reads the counts, not the sidecars.
    shards = tmp_path / "shards"
    shards.mkdir()
    count(texts[:100], shards / "a.tsv", pattern="gpt2")
    count(texts[100:], shards / "b.tsv", pattern="gpt2")
    merge_counts([shards / "a.tsv", shards / "b.tsv"], tmp_path / "m.tsv")
    assert json.loads((tmp_path / "m.tsv.meta.json").read_text(encoding="utf-8"))["pattern_name"] == "gpt2"
    assert (tmp_path / "m.tsv").read_bytes() == (tmp_path / "g.tsv").read_bytes()
    assert toksmith.train(shards, vocab_size=400, from_counts=True).to_dict() == from_counts.to_dict()


def test_counts_without_a_sidecar_train_with_the_pattern_given(tmp_path):
    """A counts file from another tool (or copied without its sidecar) has no recorded pattern:
    the one given (default o200k) is used, as before; a stale sidecar is replaced on rewrite."""
    texts = corpus(4, 100)
    count(texts, tmp_path / "c.tsv", pattern=r"\S+|\s+")
    assert json.loads((tmp_path / "c.tsv.meta.json").read_text(encoding="utf-8"))["pattern_name"] is None
    assert toksmith.train(tmp_path / "c.tsv", vocab_size=300, from_counts=True).pattern == r"\S+|\s+"
    (tmp_path / "c.tsv.meta.json").unlink()
    assert toksmith.train(tmp_path / "c.tsv", vocab_size=300, from_counts=True).pattern_name == "o200k"
    assert toksmith.train(tmp_path / "c.tsv", vocab_size=300, from_counts=True, pattern="gpt2").pattern_name == "gpt2"
    # A merge with one file of unknown pattern records none, whatever the order.
    count(texts, tmp_path / "d.tsv", pattern="gpt2")
    merge_counts([tmp_path / "c.tsv", tmp_path / "d.tsv"], tmp_path / "m.tsv")
    assert not (tmp_path / "m.tsv.meta.json").exists()
    merge_counts([tmp_path / "d.tsv", tmp_path / "c.tsv"], tmp_path / "m2.tsv")
    assert not (tmp_path / "m2.tsv.meta.json").exists()
    (tmp_path / "d.tsv.meta.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(toksmith.TrainingError, match="d.tsv.meta.json: not a counts sidecar"):
        toksmith.train(tmp_path / "d.tsv", vocab_size=300, from_counts=True)
