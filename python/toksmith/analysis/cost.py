"""What a vocabulary size costs a model: embedding parameters, output-layer FLOPs, sequence length.

>>> c = cost(128_256, 4096)
>>> c.embedding_params
525336576
"""

from __future__ import annotations

from collections.abc import Sequence

from ._common import AnalysisError, vocab_size as _vocab_size


class VocabCost:
    """The vocabulary-dependent cost of one model shape (see :func:`cost`)."""

    def __init__(self, vocab_size: int, d_model: int, params: int | None, tied: bool) -> None:
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.params = params
        self.tied = tied
        #: Input embedding matrix, V x d.
        self.embedding_params = vocab_size * d_model
        #: Extra parameters of the output (unembedding) matrix: none when tied to the input one.
        self.output_params = 0 if tied else vocab_size * d_model
        self.vocab_params = self.embedding_params + self.output_params
        #: One multiply-add per weight of the V x d output matrix, for every token.
        self.output_flops_per_token = 2 * d_model * vocab_size
        self.vocab_share = self.vocab_params / params if params else None
        self.corpus: dict | None = None

    def to_dict(self) -> dict:
        d = {
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "tied": self.tied,
            "embedding_params": self.embedding_params,
            "output_params": self.output_params,
            "vocab_params": self.vocab_params,
            "output_flops_per_token": self.output_flops_per_token,
            "params": self.params,
            "vocab_share": self.vocab_share,
        }
        if self.corpus is not None:
            d["corpus"] = self.corpus
        return d

    def __repr__(self) -> str:
        return (f"<VocabCost V={self.vocab_size:,} d={self.d_model} embedding={self.embedding_params:,} "
                f"output_flops/token={self.output_flops_per_token:,}>")


def _positive_int(value, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise AnalysisError(f"{what} must be a positive int, got {value!r}")
    return value


def cost(vocab_size: int, d_model: int, params: int | None = None, tied: bool = False, *,
         tokenizer=None, corpus=None) -> VocabCost:
    """The parameters and per-token FLOPs that a vocabulary of ``vocab_size`` costs a model of
    width ``d_model``.

    - ``params``: the model's total parameter count; gives ``vocab_share``, the part of the model
      that is embedding (+ output) matrix.
    - ``tied``: the output layer reuses the input embedding matrix (no extra parameters; the
      FLOPs stay).
    - ``tokenizer`` and ``corpus`` (a list of texts, or anything
      :func:`~toksmith.analysis.corpora.load_corpus` reads): also count the tokens the corpus
      takes, and the output-layer FLOPs to predict them all (``result.corpus``).

    >>> c = cost(151_936, 1024)
    >>> round(c.embedding_params / 1e6), round(c.output_flops_per_token / 1e6)
    (156, 311)
    """
    vocab_size = _positive_int(vocab_size, "vocab_size")
    d_model = _positive_int(d_model, "d_model")
    if params is not None:
        params = _positive_int(params, "params")
    result = VocabCost(vocab_size, d_model, params, bool(tied))
    if (tokenizer is None) != (corpus is None):
        raise AnalysisError("pass both tokenizer= and corpus= to count a corpus's tokens, or neither")
    if tokenizer is not None:
        result.corpus = corpus_tokens(tokenizer, corpus)
        result.corpus["output_flops"] = result.corpus["tokens"] * result.output_flops_per_token
    return result


def cost_table(vocab_sizes: Sequence[int], d_model: int, params: int | None = None, tied: bool = False) -> list[VocabCost]:
    """:func:`cost` for each vocabulary size, in the order given.

    ``params`` is the model size at the first vocabulary size: the others change it by their
    difference in vocabulary parameters, so ``vocab_share`` compares like with like.
    """
    sizes = [_positive_int(v, "each vocab size") for v in vocab_sizes]
    if not sizes:
        raise AnalysisError("vocab_sizes is empty; pass at least one vocabulary size")
    rows = []
    base = cost(sizes[0], d_model, params, tied)
    for v in sizes:
        adjusted = None
        if params is not None:
            adjusted = params + (cost(v, d_model, None, tied).vocab_params - base.vocab_params)
            if adjusted <= 0:
                raise AnalysisError(f"params={params:,} is smaller than the vocabulary parameters at V={sizes[0]:,}")
        rows.append(cost(v, d_model, adjusted, tied))
    return rows


def corpus_tokens(tokenizer, corpus) -> dict:
    """Tokens, bytes and bytes per token of ``corpus``: a list of texts, or a corpus spec ("udhr",
    a path; for a multilingual corpus every language's text counts)."""
    from .corpora import load_corpus

    if isinstance(corpus, (list, tuple)) and all(isinstance(t, str) for t in corpus):
        texts, name = list(corpus), "<texts>"
    else:
        loaded = load_corpus(corpus)
        texts = [t for doc in loaded.documents.values() for t in doc.segments.values()]
        name = loaded.name
    tokens = sum(len(tokenizer.encode_ordinary(t)) for t in texts)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return {
        "corpus": name,
        "tokenizer_vocab_size": _vocab_size(tokenizer),
        "tokens": tokens,
        "bytes": n_bytes,
        "bytes_per_token": n_bytes / tokens if tokens else None,
    }


def format_cost_table(rows: Sequence[VocabCost]) -> str:
    """A plain-text table of :func:`cost_table` rows."""
    from .report import _grid

    header = ["vocab", "d_model", "tied", "embedding params", "output params", "output FLOPs/token", "vocab share"]
    body = [[f"{r.vocab_size:,}", f"{r.d_model:,}", "yes" if r.tied else "no", _human(r.embedding_params),
             _human(r.output_params), _human(r.output_flops_per_token),
             "-" if r.vocab_share is None else f"{100 * r.vocab_share:.1f}%"] for r in rows]
    return "\n".join(_grid(header, body)) + "\n"


def _human(n: int) -> str:
    """``525336576`` -> ``'525.3M'``.

    >>> _human(525_336_576), _human(0), _human(2_100_000_000)
    ('525.3M', '0', '2.10B')
    """
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    if n >= 1e3:
        return f"{n / 1e3:.1f}K"
    return str(n)
