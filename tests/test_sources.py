"""Training sources: files, directories, globs, lists of paths, iterables of str, compressed files."""

import gzip
import lzma
from pathlib import Path

import pytest

import toksmith
from toksmith import sources

TEXT = "The quick brown fox jumps over the lazy dog.\n\n  Indented line\nnext line 123\n" * 200


def test_all_source_kinds_give_the_same_tokenizer(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "d" / "b.txt.gz").write_bytes(gzip.compress(TEXT.encode()))
    (tmp_path / "d" / ".hidden").write_text("ignored ignored ignored", encoding="utf-8")
    expected = toksmith.train([TEXT, TEXT], vocab_size=320).to_dict()
    a, b = tmp_path / "d" / "a.txt", tmp_path / "d" / "b.txt.gz"
    for source in [tmp_path / "d", str(tmp_path / "d"), str(tmp_path / "d" / "*.*"), [a, b], (t for t in [TEXT, TEXT])]:
        assert toksmith.train(source, vocab_size=320).to_dict() == expected, source


def test_block_cuts_do_not_change_counts(tmp_path, monkeypatch):
    # Tiny blocks force many cuts; the learned merges must equal training on the whole text.
    monkeypatch.setattr(sources, "BLOCK_CHARS", 97)
    path = tmp_path / "t.txt.xz"
    path.write_bytes(lzma.compress(TEXT.encode()))
    blocks = list(sources.read_blocks(path))
    assert len(blocks) > 10 and "".join(blocks) == TEXT
    assert toksmith.train(path, vocab_size=330).to_dict() == toksmith.train([TEXT], vocab_size=330).to_dict()


def test_invalid_utf8_is_replaced(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"abc \xff\xfe abc abc")
    assert "".join(sources.read_blocks(path)) == "abc \ufffd\ufffd abc abc"


def test_wrong_source_type():
    with pytest.raises(toksmith.TrainingError, match="cannot train on"):
        toksmith.train(42, vocab_size=300)
