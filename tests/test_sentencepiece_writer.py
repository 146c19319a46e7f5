"""save(format="sentencepiece"): .model files that the `sentencepiece` library encodes as toksmith
does. Loaded SentencePiece models (BPE and Unigram) must round-trip to the original's ids; BPE
trained by toksmith in SentencePiece's style must encode in `sentencepiece` as in toksmith; what
cannot be written exactly is refused. Every expected id comes from `sentencepiece` at test time.
"""

from __future__ import annotations

import pytest

from conftest import data_path
from test_hf_export_sentencepiece import ADVERSARIAL
from test_hf_support import EDGE_STRINGS
from test_sentencepiece_parity import EDGE, MODELS, corpus_samples, model_path

import toksmith
from toksmith.errors import FormatError, TrainingError
from toksmith.formats.sentencepiece import load_sentencepiece

spm = pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return EDGE + EDGE_STRINGS + ADVERSARIAL + [line for t in corpus_samples(30_000).values() for line in t.split("\n")]


@pytest.fixture(scope="module")
def botchan_lines() -> list[str]:
    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


def written(tok, tmp_path):
    path = tmp_path / "written.model"
    tok.save(path, format="sentencepiece")
    return spm.SentencePieceProcessor(model_file=str(path))


def piece_table(sp) -> list[tuple]:
    return [(sp.id_to_piece(i), sp.get_score(i), sp.is_control(i), sp.is_unknown(i), sp.is_unused(i), sp.is_byte(i))
            for i in range(sp.get_piece_size())]


@pytest.mark.parametrize("name", MODELS)
def test_loaded_models_round_trip(name, texts, tmp_path):
    original = spm.SentencePieceProcessor(model_file=str(model_path(name)))
    again = written(load_sentencepiece(model_path(name)), tmp_path)
    assert piece_table(again) == piece_table(original)
    assert [again.unk_id(), again.bos_id(), again.eos_id(), again.pad_id()] == \
        [original.unk_id(), original.bos_id(), original.eos_id(), original.pad_id()]
    want = original.encode(texts)
    assert [t for t, w, g in zip(texts, want, again.encode(texts)) if w != g] == []
    assert [t for t, w in zip(texts, want) if again.decode(w) != original.decode(w)] == []


@pytest.mark.parametrize("options", [
    {}, {"byte_fallback": True}, {"normalization": None}, {"add_dummy_prefix": False},
    {"special_tokens": ["<s>", "</s>", "<pad>", "<mask>"], "limit_alphabet": 60, "max_token_length": 6},
], ids=lambda o: ",".join(o) or "default")
def test_trained_sentencepiece_bpe_encodes_as_toksmith(options, botchan_lines, texts, tmp_path):
    tok = toksmith.train(botchan_lines, vocab_size=2000, level="char", pattern="metaspace", **options)
    sp = written(tok, tmp_path)
    assert [sp.id_to_piece(i) for i in range(sp.get_piece_size())] == [tok.id_to_token(i) for i in range(tok.vocab_size)]
    assert sp.unk_id() == 0 and sp.bos_id() == 1 and sp.eos_id() == 2
    if options.get("byte_fallback"):
        assert sp.is_byte(tok.token_to_id("<0x41>"))
    want = sp.encode(texts)
    assert sum(sp.normalize(t) == tok.pipeline.normalizer.normalize(t) for t in texts) > len(texts) * 0.99
    differ = []
    for text, w in zip(texts, want):
        if tok.encode(text, disallowed_special=()) != w:
            # Allowed only where Python's NFKC of the whole text and SentencePiece's rules differ
            # (combining marks NFKC reorders): the normalized texts must then differ too.
            assert sp.normalize(text) != tok.pipeline.normalizer.normalize(text), text
            differ.append(text)
        assert tok.decode(w) == sp.decode(w), text
    assert len(differ) <= len(texts) // 2_000, differ[:5]


def test_written_bpe_splits_no_differently_from_its_merges(botchan_lines, tmp_path):
    """A larger vocabulary on more text: the spelling of every learned piece, as a text, comes
    out of SentencePiece's BPE as toksmith's merges make it."""
    tok = toksmith.train(botchan_lines + list(corpus_samples(200_000).values()), vocab_size=8000, level="char",
                         pattern="metaspace", byte_fallback=True)
    sp = written(tok, tmp_path)
    pieces = [tok.id_to_token(i) for i in range(3 + 256, tok.vocab_size)]  # after <unk>, <s>, </s> and the bytes
    assert [sp.encode(p.replace("\u2581", " ")) for p in pieces] == \
        [tok.encode(p.replace("\u2581", " "), disallowed_special=()) for p in pieces]


def test_merge_lists_sentencepiece_would_run_differently_are_refused(tmp_path, monkeypatch):
    """The merges b+c, then a+b, then ab+c: "abc" ends as a, bc, but SentencePiece would join a
    and bc into the piece abc. Written anyway, the file indeed encodes differently."""
    from toksmith import models
    from toksmith.formats import sentencepiece_writer
    from toksmith.train_subword import _sentencepiece_style

    vocab = {"<unk>": 0, "\u2581": 3, "a": 4, "b": 5, "c": 6, "bc": 7, "ab": 8, "abc": 9}
    model = models.BPE(vocab, [("b", "c"), ("a", "b"), ("ab", "c")], unk_token="<unk>", fuse_unk=True)
    tok = _sentencepiece_style(model, unk="<unk>", control_symbols=["<s>", "</s>"], byte_fallback=False,
                               add_dummy_prefix=True, normalization=None,
                               metadata={"trainer": "toksmith bpe (sentencepiece)"})
    with pytest.raises(FormatError, match="'abc'.*encodes with the merges before it as \\['a', 'bc'\\]"):
        tok.save(tmp_path / "m.model", format="sentencepiece")
    assert not (tmp_path / "m.model").exists()
    monkeypatch.setattr(sentencepiece_writer, "_check_bpe", lambda merges, vocab: None)
    sp = written(tok, tmp_path)
    assert tok.encode("abc") == [3, 4, 7] and sp.encode("abc") != tok.encode("abc")


def test_tokenizers_without_a_sentencepiece_form_are_refused(botchan_lines, tmp_path):
    byte_level = toksmith.train(botchan_lines, vocab_size=300)
    with pytest.raises(FormatError, match="byte-level BPE .* no SentencePiece equivalent"):
        byte_level.save(tmp_path / "b.model", format="sentencepiece")
    char_level = toksmith.train(botchan_lines, vocab_size=300, level="char")
    wordpiece = toksmith.train(botchan_lines, algorithm="wordpiece", vocab_size=300)
    for tok in (char_level, wordpiece):
        with pytest.raises(FormatError, match="can be written as SentencePiece"):
            tok.save(tmp_path / "t.model", format="sentencepiece")
    assert list(tmp_path.iterdir()) == []


def test_sentencepiece_bpe_training_options_are_checked(botchan_lines):
    with pytest.raises(TrainingError, match="end_of_word_suffix"):
        toksmith.train(botchan_lines, vocab_size=500, level="char", pattern="metaspace", end_of_word_suffix="</w>")
    with pytest.raises(TrainingError, match="unknown options .*criterion"):
        toksmith.train(botchan_lines, vocab_size=500, level="char", pattern="metaspace", criterion="ratio")
    with pytest.raises(TrainingError, match="too small"):
        toksmith.train(botchan_lines, vocab_size=20, level="char", pattern="metaspace")
    tok = toksmith.train(botchan_lines, vocab_size=500, level="char", pattern="metaspace", special_tokens=["<s>"])
    assert tok.id_to_token(0) == "<unk>" and tok.id_to_token(1) == "<s>" and tok.vocab_size == 500
