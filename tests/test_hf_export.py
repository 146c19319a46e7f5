"""save_hf: tokenizer.json files that the `tokenizers` library loads and runs identically.

Round trips of the real Hugging Face tokenizers, and exports of toksmith's own byte-level BPE
tokenizers (trained here, or read from tiktoken files).
"""

from __future__ import annotations

import json
import lzma

import pytest

from conftest import data_path
from test_hf_support import (
    EDGE_STRINGS,
    REAL_TOKENIZERS,
    compare_decodings,
    compare_encodings,
    corpus_texts,
    random_id_lists,
    read_text,
)

import toksmith
from toksmith.errors import FormatError
from toksmith.formats.hf import load_hf, save_hf, to_hf_dict

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return EDGE_STRINGS + [t for group in corpus_texts(4_000, udhr_every=16).values() for t in group]


def exported(tok, tmp_path, name="tokenizer.json"):
    path = tmp_path / name
    save_hf(tok, path)
    ref = tokenizers.Tokenizer.from_file(str(path)) if not name.endswith(".xz") else \
        tokenizers.Tokenizer.from_str(lzma.decompress(path.read_bytes()).decode("utf-8"))
    ref.no_padding()
    ref.no_truncation()
    return ref, path


def same_behaviour(ours, ref, texts) -> None:
    problems = []
    for add in (False, True):
        problems += compare_encodings(ours, ref, texts, add_special_tokens=add)
    problems += compare_decodings(ours, ref, random_id_lists(ours.vocab_size, 100))
    assert not problems, f"{len(problems)} differences, e.g.:\n" + "\n".join(problems[:5])


BIG = {"llama3", "qwen3", "gemma3"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in BIG else n for n in REAL_TOKENIZERS])
def test_round_trip_of_loaded_tokenizers(name, texts, tmp_path):
    from test_hf_parity import both

    ours, _ = both(name)
    ref, path = exported(ours, tmp_path)
    same_behaviour(ours, ref, texts)
    again = load_hf(path)
    assert to_hf_dict(again) == to_hf_dict(ours)


@pytest.fixture(scope="module")
def training_text() -> list[str]:
    return [read_text(data_path("corpora", "en", "botchan.txt"), 100_000),
            read_text(data_path("corpora", "debian-handbook", "ru-RU.txt.xz"), 30_000),
            read_text(data_path("corpora", "debian-handbook", "zh-CN.txt.xz"), 10_000)]


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k", r"\p{L}+|\p{N}{1,2}+|[^\s\p{L}\p{N}]+|\s+$|\s+",
                                     r"\w+|\d{1,2}+"])  # the last one leaves text out
@pytest.mark.parametrize("position", ["first", "last"])
def test_trained_tokenizers(pattern, position, training_text, texts, tmp_path):
    tok = toksmith.train(training_text, vocab_size=1200, pattern=pattern, special_tokens=["<|endoftext|>", "<pad>"],
                         special_tokens_position=position)
    ref, _ = exported(tok, tmp_path)
    same_behaviour(tok, ref, texts)


@pytest.mark.parametrize("name", ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"])
def test_tiktoken_encodings(name, texts, tmp_path):
    from toksmith.formats.tiktoken import load_tiktoken

    tok = load_tiktoken(data_path("tokenizers", "tiktoken", f"{name}.tiktoken"))
    ref, _ = exported(tok, tmp_path)
    same_behaviour(tok, ref, texts)


def test_xz_output(tmp_path):
    tok = load_hf(data_path("tokenizers", "hf", "bert-base-uncased", "vocab.txt"))
    ref, path = exported(tok, tmp_path, "tokenizer.json.xz")
    same_behaviour(tok, ref, EDGE_STRINGS)
    assert to_hf_dict(load_hf(path)) == to_hf_dict(tok)


def test_foreign_component_is_refused(tmp_path):
    class Upper:
        def normalize(self, text):
            return text.upper()

    tok = load_hf(data_path("tokenizers", "hf", "bert-base-uncased", "vocab.txt"))
    tok.pipeline.normalizer = Upper()
    with pytest.raises(FormatError, match="normalizer Upper"):
        save_hf(tok, tmp_path / "tokenizer.json")
    assert not (tmp_path / "tokenizer.json").exists()


def test_export_is_compact_json(tmp_path):
    tok = toksmith.train(["low lower lowest " * 20], vocab_size=270, pattern="gpt2")
    save_hf(tok, tmp_path / "t.json")
    d = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert d["model"]["type"] == "BPE" and len(d["model"]["merges"]) == len(tok.merges)


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k", r"\w+|\d{1,2}+|[^\w\s]+$|\s+"])
def test_toksmith_patterns_in_oniguruma_syntax(pattern, texts):
    """Split(syntax="rust") runs toksmith's own patterns exactly as toksmith's Rust core splits."""
    from toksmith.patterns import resolve, split
    from toksmith.pre_tokenizers import Split

    regex_text = resolve(pattern)[1]
    ours = Split(regex_text, "removed", invert=True, is_regex=True, syntax="rust")  # the matches only
    for text in texts:
        assert ours.pre_tokenize(text) == split(text, regex_text), text[:60]


def test_transformers_fast_tokenizer_reads_exports_identically(tmp_path):
    """transformers.PreTrainedTokenizerFast(tokenizer_file=...) on toksmith's exports."""
    transformers = pytest.importorskip("transformers")
    import toksmith
    from conftest import data_path

    trained = toksmith.train(data_path("corpora", "en", "botchan.txt"), vocab_size=1500,
                             special_tokens=["<|endoftext|>"])
    loaded = toksmith.load(data_path("tokenizers", "hf", "qwen3", "tokenizer.json.xz"))
    text = "Botchan said: I'm 23 — naïve? 東京 <|endoftext|> done.\n\n  end"
    for name, tok in [("trained", trained), ("qwen3", loaded)]:
        path = tmp_path / f"{name}.json"
        tok.save(path, format="hf")
        fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))
        ids = tok.encode(text, allowed_special="all", add_special_tokens=False)
        assert fast.encode(text, add_special_tokens=False) == ids, name
        assert fast.decode(ids) == tok.decode(ids), name


@pytest.mark.parametrize("options", [{}, {"criterion": "likelihood", "lowercase": False}],
                         ids=lambda o: ",".join(o) or "default")
def test_trained_wordpiece(options, training_text, texts, tmp_path):
    """WordPiece trained by toksmith (BERT normalizer and pre-tokenizer, [CLS] ... [SEP])."""
    tok = toksmith.train(training_text, algorithm="wordpiece", vocab_size=3000, **options)
    ref, _ = exported(tok, tmp_path)
    same_behaviour(tok, ref, texts)
