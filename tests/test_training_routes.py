"""Training from a plain file gives the tokenizer training on its text gives, whatever the number
of threads and whether the file is read in Rust (plain) or in Python (compressed): the file is cut
into blocks and per-thread pieces only where no chunk of a named pattern crosses (see
rust/train/read.rs, `is_safe_cut`). Cases an audit found to differ (session 25)."""

import gzip
import json
import lzma

import pytest

import toksmith
from toksmith.trainers import count

from conftest import data_path


def model_of(tok) -> str:
    return json.dumps(tok.to_dict()["model"], sort_keys=True)


def routes_agree(tmp_path, text, **options):
    plain = tmp_path / "corpus.txt"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "corpus.txt.gz"
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    want = model_of(toksmith.train([text], num_threads=1, **options))
    for source in (plain, packed):
        for threads in (1, 2, 3):
            got = model_of(toksmith.train(source, num_threads=threads, **options))
            assert got == want, (source.name, threads)


def test_spaces_before_line_ends_gpt2(tmp_path):
    # GPT-2's \s+(?!\S): " \n" is one chunk at the end of a text, " " and "\n" inside one.
    routes_agree(tmp_path, "one \ntwo \n" * 2000, vocab_size=300, pattern="gpt2", min_frequency=5)


def test_slashes_after_line_ends_o200k(tmp_path):
    # o200k's punctuation chunks take [\r\n/]*: ";\n//" is one chunk.
    routes_agree(tmp_path, "end;\n// c\n" * 3000, vocab_size=300, pattern="o200k", min_frequency=2997)


def test_special_token_holding_a_line_end(tmp_path):
    text = "words here\n<doc>\nmore words\n<doc>\n" * 2000
    routes_agree(tmp_path, text, vocab_size=300, pattern="o200k", special_tokens=["\n<doc>"])
    plain = tmp_path / "corpus.txt"
    tok = toksmith.train(plain, num_threads=2, vocab_size=300, pattern="o200k", special_tokens=["\n<doc>"])
    assert not any(b"doc" in a + b for a, b in tok.merges), "a special token's text was learned from"


@pytest.mark.parametrize("pattern", ["gpt2", "o200k"])
def test_real_text_by_every_route(tmp_path, pattern):
    path = data_path("corpora", "en", "python-3.11-docs.rst.txt.xz")
    with lzma.open(path, "rt", encoding="utf-8") as f:
        text = f.read(1_500_000)
    routes_agree(tmp_path, text, vocab_size=1500, pattern=pattern)


def test_max_chars_per_doc_cuts_each_line_of_a_plain_file(tmp_path):
    path = tmp_path / "m3.txt"
    path.write_text("aaaa bbbb\ncccc dddd\neeee ffff\n", encoding="utf-8")
    out = tmp_path / "m3.tsv"
    count(path, out, max_chars_per_doc=4)
    assert sorted(line.split("\t")[0] for line in out.read_text(encoding="utf-8").splitlines()) == ["aaaa", "cccc", "eeee"]


def test_pair_counts_past_64_bits_are_an_error(tmp_path):
    counts = tmp_path / "big.tsv"
    counts.write_text(f"aaa\t{2**63}\nbc\t5\n", encoding="utf-8")  # (a, a) would count 2^64
    with pytest.raises(toksmith.TrainingError, match="too large"):
        toksmith.train(counts, from_counts=True, vocab_size=260)
    counts.write_text(f"aaa\t{2**62 - 1}\nbc\t5\n", encoding="utf-8")
    assert toksmith.train(counts, from_counts=True, vocab_size=258).merges[0] == (b"a", b"a")


def test_custom_pattern_gives_the_same_tokenizer_on_any_number_of_threads(tmp_path):
    """A custom regex's chunks may span a cut (here only spaces split, so a chunk runs from one
    line into the next), so the cuts of a file must not move with the number of threads: a file
    over the first block's size (1 MiB) and many pieces."""
    path = data_path("corpora", "en", "python-3.11-docs.rst.txt.xz")
    with lzma.open(path, "rt", encoding="utf-8") as f:
        text = f.read(2_500_000)
    plain = tmp_path / "corpus.txt"
    plain.write_text(text, encoding="utf-8")
    pattern = r"[^ ]+| +"
    counts = {}
    for threads in (1, 2, 3):
        out = tmp_path / f"counts{threads}.tsv"
        count(plain, out, pattern=pattern, num_threads=threads)
        counts[threads] = out.read_bytes()
    assert counts[1] == counts[2] == counts[3]
    models = {threads: model_of(toksmith.train(plain, num_threads=threads, vocab_size=800, pattern=pattern))
              for threads in (1, 2, 3)}
    assert models[1] == models[2] == models[3]
