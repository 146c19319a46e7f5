"""Tests for toksmith.analysis.cost: vocabulary parameters, output FLOPs, corpus tokens."""
import pytest

import toksmith
from toksmith.analysis import AnalysisError, cost, cost_table, format_cost_table


def test_llama3_8b_embedding_matrix():
    c = cost(128_256, 4096)
    assert c.embedding_params == 128_256 * 4096
    assert round(c.embedding_params / 1e6) == 525  # ~525M parameters per matrix
    assert c.output_params == c.embedding_params  # Llama 3 does not tie its output matrix
    assert c.vocab_params == 2 * c.embedding_params


def test_qwen_sized_vocabulary_on_a_small_model():
    c = cost(151_936, 1024)
    assert round(c.embedding_params / 1e6) == 156
    assert c.output_flops_per_token == 2 * 1024 * 151_936
    assert round(c.output_flops_per_token / 1e6) == 311


def test_tied_embeddings_add_no_output_parameters_but_keep_the_flops():
    untied, tied = cost(151_936, 1024), cost(151_936, 1024, tied=True)
    assert tied.output_params == 0
    assert tied.vocab_params == tied.embedding_params == untied.embedding_params
    assert tied.output_flops_per_token == untied.output_flops_per_token


def test_share_of_the_model():
    c = cost(128_256, 4096, params=8_030_000_000)
    assert c.vocab_share == pytest.approx(2 * 128_256 * 4096 / 8.03e9)
    assert 0.12 < c.vocab_share < 0.14
    assert cost(128_256, 4096).vocab_share is None
    d = c.to_dict()
    assert d["vocab_share"] == c.vocab_share and d["embedding_params"] == c.embedding_params


def test_table_over_vocab_sizes_keeps_the_rest_of_the_model_fixed():
    rows = cost_table([32_000, 128_256, 256_000], 4096, params=7_000_000_000)
    assert [r.vocab_size for r in rows] == [32_000, 128_256, 256_000]
    assert [r.embedding_params for r in rows] == [v * 4096 for v in (32_000, 128_256, 256_000)]
    # The non-vocabulary part of the model is the same in every row.
    rest = {r.params - r.vocab_params for r in rows}
    assert len(rest) == 1
    shares = [r.vocab_share for r in rows]
    assert shares == sorted(shares)
    text = format_cost_table(rows)
    assert "525.3M" in text and "128,256" in text


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(AnalysisError, match="vocab_size must be a positive int"):
        cost(0, 4096)
    with pytest.raises(AnalysisError, match="d_model"):
        cost(1000, 10.5)
    with pytest.raises(AnalysisError, match="empty"):
        cost_table([], 10)
    with pytest.raises(AnalysisError, match="both tokenizer= and corpus="):
        cost(1000, 64, tokenizer=object())


def test_corpus_tokens_with_a_tokenizer(tmp_path):
    texts = ["the cat sat on the mat", "the dog sat on the log"]
    tok = toksmith.train(texts * 10, vocab_size=280)
    c = cost(tok.vocab_size, 64, tokenizer=tok, corpus=texts)
    tokens = sum(len(tok.encode_ordinary(t)) for t in texts)
    assert c.corpus["tokens"] == tokens
    assert c.corpus["bytes_per_token"] == pytest.approx(sum(len(t.encode()) for t in texts) / tokens)
    assert c.corpus["output_flops"] == tokens * 2 * 64 * tok.vocab_size
    # A file is a one-language corpus, aligned by line.
    path = tmp_path / "eng.txt"
    path.write_text("\n".join(texts), encoding="utf-8")
    assert cost(tok.vocab_size, 64, tokenizer=tok, corpus=str(path)).corpus["tokens"] == tokens
