"""save(format="sentencepiece"): .model files that the `sentencepiece` library encodes as toksmith
does. Loaded SentencePiece models (BPE and Unigram) must round-trip to the original's ids; BPE
trained by toksmith in SentencePiece's style must encode in `sentencepiece` as in toksmith; what
cannot be written exactly is refused. Every expected id comes from `sentencepiece` at test time.
"""

from __future__ import annotations

import pytest

from conftest import data_path
from test_hf_export_sentencepiece import ADVERSARIAL, BPE, UNIGRAM, combining_texts, near_tie_texts, nfkc_differs
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


@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "baichuan"])
def test_gguf_sentencepiece_vocabularies_written_as_model_files(name, texts, tmp_path):
    """A llama.cpp SentencePiece vocabulary (GGUF ``llama``) written as a .model: sentencepiece
    gives llama.cpp's ids on its test vectors, and toksmith's on the other texts; toksmith loads
    the file back with the same ids."""
    from test_gguf_vectors import tokenizer, vectors

    tok = tokenizer(name)
    sp = written(tok, tmp_path)
    if (data_path("tokenizers", "gguf") / f"ggml-vocab-{name}.gguf.out").exists():
        cases = vectors(name)
        assert [text for text, ids in cases if sp.encode(text) != ids] == []
    sample = texts[:3000]
    ours = [tok.encode(t, add_special_tokens=False, disallowed_special=()) for t in sample]
    assert [t for t, w, g in zip(sample, ours, sp.encode(sample)) if w != g] == []
    back = toksmith.load(tmp_path / "written.model")
    assert [t for t, w in zip(sample[:500], ours) if back.encode(t, add_special_tokens=False, disallowed_special=()) != w] == []


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
    assert [t for t in texts if sp.normalize(t) != tok.pipeline.normalizer.normalize(t)] == []
    assert [t for t, w in zip(texts, want) if tok.encode(t, disallowed_special=()) != w] == []
    assert [t for t, w in zip(texts, want) if tok.decode(w) != sp.decode(w)] == []


@pytest.mark.parametrize("options", [UNIGRAM, {**BPE, "byte_fallback": True}], ids=["unigram", "bpe"])
def test_trained_tokenizers_normalize_as_their_model_file(options, botchan_lines, tmp_path):
    """Arabic with shadda and vowel signs, Vietnamese, Burmese: where Python's NFKC and
    SentencePiece's rules differ, trained tokenizers follow the rules their .model carries, and
    the .model reloads (in toksmith too) with the same normalizer."""
    from toksmith.formats.sentencepiece import read_model_proto

    train, texts = combining_texts()
    assert len(nfkc_differs(texts)) >= 20  # the texts do hold what used to differ
    tok = toksmith.train(botchan_lines + train, vocab_size=3000, **options)
    sp = written(tok, tmp_path)
    proto = read_model_proto((tmp_path / "written.model").read_bytes())
    assert proto.normalizer_spec.precompiled_charsmap == tok.pipeline.normalizer.charsmap.precompiled
    assert [t for t in texts if sp.normalize(t) != tok.pipeline.normalizer.normalize(t)] == []
    want = sp.encode(texts)
    assert [t for t, w in zip(texts, want) if tok.encode(t, disallowed_special=()) != w] == []
    assert [t for t, w in zip(texts, want) if tok.decode(w) != sp.decode(w)] == []
    again = toksmith.load(tmp_path / "written.model")
    assert [again.encode(t) for t in texts] == want
    # toksmith's JSON format holds byte-level BPE only, and says which formats hold this one.
    with pytest.raises(FormatError, match="format='sentencepiece'"):
        tok.save(tmp_path / "t.json")


@pytest.fixture(scope="module")
def near_tie_unigram(botchan_lines):
    train, texts, documents = near_tie_texts()
    return toksmith.train(botchan_lines + train, vocab_size=3000, algorithm="unigram")


def test_trained_unigram_near_ties_encode_as_toksmith(near_tie_unigram, botchan_lines, tmp_path, monkeypatch):
    """Runs of . and -, Linux documentation and 25,000-character documents: sentencepiece adds
    the .model's float32 scores in float32, toksmith in double; the scores being multiples of
    1/64, both sums are exact and the ids identical. With the scores as learned they are not."""
    from toksmith.train_subword import TrainedUnigram

    train, texts, documents = near_tie_texts()
    tok = near_tie_unigram
    assert all(s * 64 == int(s * 64) for _, s in tok.pipeline.model.pieces)
    sp = written(tok, tmp_path)
    for batch in (texts, documents):
        assert [t[:80] for t, w in zip(batch, sp.encode(batch)) if tok.encode(t, disallowed_special=()) != w] == []
    monkeypatch.setattr(TrainedUnigram, "SCORE_GRID", None)
    exact = toksmith.train(botchan_lines + train, vocab_size=3000, algorithm="unigram")
    assert any(s * 64 != int(s * 64) for _, s in exact.pipeline.model.pieces)
    sp = written(exact, tmp_path)
    assert sum(exact.encode(t, disallowed_special=()) != w for t, w in zip(texts, sp.encode(texts))) >= 10


def test_trained_unigram_long_text_encodes_as_toksmith(near_tie_unigram, tmp_path):
    """One text of 200,000 characters, whose path scores go far past 2**18, where float32 stops
    holding multiples of 1/64 exactly: sentencepiece (0.2.3) brings its running score back to 0
    past 100,000, so its sums stay exact."""
    version = tuple(int(x) for x in spm.__version__.split(".")[:3] if x.isdigit())
    if version < (0, 2, 3):
        pytest.skip(f"sentencepiece {spm.__version__}: only 0.2.3 and later were checked to bring their running "
                    f"float32 path score back to 0, which keeps the sums of long texts exact")
    _, texts, _ = near_tie_texts()
    text = "\n".join(texts)
    tok = near_tie_unigram
    ours = tok.encode(text, disallowed_special=())
    assert sum(tok.pipeline.model.lattice_scores[i] for i in ours) < -2**18
    assert written(tok, tmp_path).encode(text) == ours


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
