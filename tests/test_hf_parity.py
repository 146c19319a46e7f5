"""The real Hugging Face tokenizers of the shared data, loaded by toksmith, against `tokenizers`.

Every comparison encodes with and without the template tokens (special-token strings in the
text allowed, as Hugging Face always matches them), and decodes with and without
``skip_special_tokens``. The default run samples each corpus; the slow run reads more.
"""

from __future__ import annotations

import time

import pytest

from conftest import data_path
from test_hf_support import (
    EDGE_STRINGS,
    REAL_TOKENIZERS,
    bert_from_vocab_txt,
    compare_decodings,
    compare_encodings,
    corpus_texts,
    random_id_lists,
    reference,
)

from toksmith.formats.hf import load_hf

_loaded: dict[str, tuple] = {}
_load_seconds: dict[str, float] = {}


def both(name: str):
    """(toksmith tokenizer, `tokenizers` tokenizer) for a directory of tokenizers/hf, loaded once."""
    if name not in _loaded:
        start = time.perf_counter()
        ours = load_hf(data_path("tokenizers", "hf", name))
        _load_seconds[name] = time.perf_counter() - start
        _loaded[name] = (ours, reference(name))
    return _loaded[name]


def check(ours, ref, texts: list[str]) -> None:
    problems = []
    for add in (False, True):
        problems += compare_encodings(ours, ref, texts, add_special_tokens=add)
    ids = [e.ids for e in ref.encode_batch(texts, add_special_tokens=True)]
    problems += compare_decodings(ours, ref, ids)
    assert not problems, f"{len(problems)} differences from tokenizers, e.g.:\n" + "\n".join(problems[:5])


@pytest.fixture(scope="module")
def sample_texts() -> list[str]:
    texts = [t for group in corpus_texts(8_000, udhr_every=12).values() for t in group]
    return texts


@pytest.mark.parametrize("name", REAL_TOKENIZERS)
def test_edge_strings(name):
    ours, ref = both(name)
    check(ours, ref, EDGE_STRINGS)


def test_sentencepiece_style_words_are_not_cut_inside_a_token():
    """Gemma 3 encodes word by word, but one merge makes ">▁</", across a word start: its text
    must not be cut between ">" and "▁" (models.word_split_pattern)."""
    ours, ref = both("gemma3")
    assert ours._pipeline.model.split_pattern not in (None, "▁*[^▁]+|▁+")
    check(ours, ref, ["a> </p> x", "> </", "<b> </b>", "x >  </y", "<td>1</td> </tr>"])


@pytest.mark.parametrize("name", REAL_TOKENIZERS)
def test_corpus_sample(name, sample_texts):
    ours, ref = both(name)
    check(ours, ref, sample_texts)


@pytest.mark.parametrize("name", REAL_TOKENIZERS)
def test_decode_random_ids(name):
    """Arbitrary id sequences: partial UTF-8, byte tokens, special tokens anywhere."""
    ours, ref = both(name)
    problems = compare_decodings(ours, ref, random_id_lists(ref.get_vocab_size(), 300))
    assert not problems, "\n".join(problems[:5])


@pytest.mark.parametrize("name", REAL_TOKENIZERS)
def test_vocabulary(name):
    ours, ref = both(name)
    vocab = ref.get_vocab()
    assert ours.vocab_size == max(vocab.values()) + 1
    for token, i in vocab.items():
        assert ours.token_to_id(token) == i
        assert ours.id_to_token(i) == ref.id_to_token(i)
    assert set(ours.special_tokens) == {t.content for t in ref.get_added_tokens_decoder().values() if t.special}


@pytest.mark.parametrize("lowercase", [True, False])
def test_bert_vocab_txt(lowercase):
    """The legacy vocab.txt form, cased and uncased, against BertWordPieceTokenizer's pipeline."""
    path = data_path("tokenizers", "hf", "bert-base-uncased", "vocab.txt")
    ours = load_hf(path, lowercase=lowercase)
    ref = bert_from_vocab_txt(path, lowercase)
    texts = EDGE_STRINGS + [t for group in corpus_texts(3_000, udhr_every=40).values() for t in group]
    check(ours, ref, texts)


def test_bert_vocab_txt_matches_its_tokenizer_json():
    """vocab.txt and tokenizer.json of bert-base-uncased give the same ids."""
    from_txt = load_hf(data_path("tokenizers", "hf", "bert-base-uncased", "vocab.txt"))
    _, ref = both("bert-base-uncased")
    check(from_txt, ref, EDGE_STRINGS)


def test_directory_forms_are_detected():
    assert load_hf(data_path("tokenizers", "hf", "gpt2")).metadata["form"] == "gpt2"
    assert load_hf(data_path("tokenizers", "hf", "gpt2", "merges.txt")).metadata["form"] == "gpt2"
    bert = load_hf(data_path("tokenizers", "hf", "bert-base-uncased"))
    assert bert.metadata["path"].endswith("tokenizer.json")
    assert bert.metadata["hf_padding"]["strategy"] == {"Fixed": 128}  # kept, not applied


def test_big_vocabularies_load_in_seconds():
    """llama3: 280k merges; gemma3: 515k merges and 262k tokens. A guard against a pathological
    (e.g. quadratic) loader, not a speed target: the bounds are ~20x the ~1.5 s / 3 s measured."""
    for name, limit in (("llama3", 30.0), ("gemma3", 60.0)):
        both(name)
        assert _load_seconds[name] < limit, f"{name} took {_load_seconds[name]:.1f} s to load"


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL_TOKENIZERS)
def test_corpora_in_depth(name):
    """More of every corpus, and half the UDHR translations."""
    ours, ref = both(name)
    for corpus, texts in corpus_texts(30_000, udhr_every=2).items():
        problems = compare_encodings(ours, ref, texts, add_special_tokens=True)
        assert not problems, f"{corpus}: {len(problems)} differences, e.g.:\n" + "\n".join(problems[:5])
