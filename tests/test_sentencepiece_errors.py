"""Malformed or unsupported SentencePiece models raise FormatError naming the file and the
problem; randomly corrupted real models either load or raise FormatError, nothing else."""

import random

import pytest

from conftest import data_path
from toksmith.errors import FormatError, TokenizerError

pytest.importorskip("sentencepiece")
pytest.importorskip("google.protobuf")

from sentencepiece import sentencepiece_model_pb2  # noqa: E402

from toksmith.formats.sentencepiece import load_sentencepiece, sentencepiece_from_bytes  # noqa: E402


def proto_of(name):
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(data_path("tokenizers", "sentencepiece", f"{name}.model").read_bytes())
    return proto


def test_not_a_model(tmp_path):
    for name, blob in {"empty.model": b"", "text.model": b"hello, I am not a protobuf\n" * 10,
                       "json.model": b'{"model": {}}'}.items():
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(FormatError) as e:
            load_sentencepiece(tmp_path / name)
        assert name in str(e.value)
    with pytest.raises(FormatError, match="no such file"):
        load_sentencepiece(tmp_path / "missing.model")


def test_truncated(tmp_path):
    data = data_path("tokenizers", "sentencepiece", "botchan_en_bpe_1000.model").read_bytes()
    for cut in (len(data) // 2, len(data) - 3, 17):
        (tmp_path / "t.model").write_bytes(data[:cut])
        with pytest.raises(FormatError, match="t.model"):
            load_sentencepiece(tmp_path / "t.model")


@pytest.mark.parametrize("change, message", [
    (lambda p: setattr(p.trainer_spec, "model_type", p.trainer_spec.WORD), "model type WORD"),
    (lambda p: setattr(p.trainer_spec, "treat_whitespace_as_suffix", True), "treat_whitespace_as_suffix"),
    (lambda p: setattr(p.pieces[5], "piece", p.pieces[6].piece), "appears twice"),
    (lambda p: setattr(p.pieces[0], "type", p.pieces[0].NORMAL), "UNKNOWN piece"),
    (lambda p: setattr(p.pieces[5], "type", p.pieces[5].BYTE), "byte_fallback"),
    (lambda p: p.normalizer_spec.__setattr__("precompiled_charsmap", b"\xff\xff\x00\x00abc"), "charsmap"),
    (lambda p: setattr(p.pieces[7], "score", float("nan")), "scores must be finite"),
    (lambda p: setattr(p.pieces[7], "score", float("inf")), "scores must be finite"),
])
def test_unsupported_or_inconsistent(change, message):
    proto = proto_of("botchan_en_bpe_1000")
    change(proto)
    with pytest.raises(FormatError, match=message) as e:
        sentencepiece_from_bytes(proto.SerializeToString(), source="x.model")
    assert "x.model" in str(e.value)


def test_fuzzed_models_load_or_raise_format_error():
    """Seeded random byte changes to real models: load, or FormatError; a loaded model encodes
    or raises a toksmith error."""
    rng = random.Random(2024)
    for name in ("botchan_en_bpe_1000", "botchan_en_unigram_1000"):
        data = data_path("tokenizers", "sentencepiece", f"{name}.model").read_bytes()
        for _ in range(60):
            blob = bytearray(data)
            for _ in range(rng.randrange(1, 20)):
                blob[rng.randrange(len(blob))] = rng.randrange(256)
            if rng.random() < 0.2:
                del blob[rng.randrange(len(blob)):]
            try:
                tok = sentencepiece_from_bytes(bytes(blob), source="fuzz.model")
            except FormatError:
                continue
            try:
                tok.decode(tok.encode("Hello, wörld ① 😀", disallowed_special=()))
            except TokenizerError:
                pass
