"""The on-disk cache of derived data (compiled and parsed SentencePiece character maps)."""

import pytest

from toksmith import _cache
from toksmith.charsmap import PrecompiledCharsmap, _cached_rules, _read_rules
from conftest import data_path


def test_store_and_load(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKSMITH_CACHE_DIR", str(tmp_path))
    name = _cache.key("a", b"b")
    assert name != _cache.key("ab") and _cache.load("k", name) is None
    _cache.store("k", name, b"data")
    assert _cache.load("k", name) == b"data"
    monkeypatch.setenv("TOKSMITH_CACHE_DIR", "")  # off
    assert _cache.load("k", name) is None
    _cache.store("k", name, b"other")
    monkeypatch.setenv("TOKSMITH_CACHE_DIR", str(tmp_path / "not-a-folder" / "x"))
    (tmp_path / "not-a-folder").write_text("a file where the folder would go")
    _cache.store("k", name, b"data")  # cannot be written: no error, no cache


def test_charsmap_rules_come_back_the_same_and_survive_damage(tmp_path, monkeypatch):
    pb2 = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    monkeypatch.setenv("TOKSMITH_CACHE_DIR", str(tmp_path))
    proto = pb2.ModelProto()
    proto.ParseFromString(data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model").read_bytes())
    blob = proto.normalizer_spec.precompiled_charsmap
    assert blob
    expected = _read_rules(blob)
    _cached_rules.cache_clear()
    assert dict(_cached_rules(blob)) == expected  # read, then stored
    _cached_rules.cache_clear()
    assert dict(_cached_rules(blob)) == expected  # from the disk
    for f in tmp_path.iterdir():
        f.write_bytes(b"{not json")
    _cached_rules.cache_clear()
    assert dict(PrecompiledCharsmap(blob).table) == expected  # damaged entry: read again
