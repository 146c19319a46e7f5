"""Tokenizer analysis: compare tokenizers across languages, price a vocabulary, audit a vocabulary.

- :func:`compare` -- compression, tokens per word, parity, vocabulary use, Rényi efficiency and
  a Gini coefficient over languages, on a parallel corpus (UDHR by default). Reports render as
  text tables, JSON, CSV and a self-contained HTML page.
- :func:`cost` / :func:`cost_table` -- embedding parameters and output-layer FLOPs of a vocabulary.
- :func:`audit` -- unreachable tokens, invalid UTF-8, broken merges, unused and special tokens;
  with an embedding matrix, under-trained token candidates (:func:`rank_undertrained`).
- :func:`render_ansi` / :func:`render_html` -- a text with its token boundaries colored.

Every function takes a ``toksmith.Tokenizer`` or any object with the same interface
(``encode_ordinary``, ``decode_bytes``, ``token_bytes``, ``vocab_size``, ``special_tokens``).

>>> from toksmith.analysis import cost
>>> cost(128_256, 4096).embedding_params
525336576
"""

from __future__ import annotations

from ._common import AnalysisError
from .audit import AuditReport, audit
from .compare import ComparisonReport, compare
from .corpora import DEFAULT_LANGUAGES, Document, ParallelCorpus, data_dir, load_corpus
from .cost import VocabCost, cost, cost_table, format_cost_table
from .embeddings import load_embeddings, rank_undertrained
from .metrics import count_words, detect_script, gini, lorenz_curve, renyi_efficiency, renyi_entropy, word_rule_for_script
from .show import render_ansi, render_html, token_pieces

__all__ = [
    "AnalysisError",
    "audit",
    "AuditReport",
    "compare",
    "ComparisonReport",
    "DEFAULT_LANGUAGES",
    "Document",
    "ParallelCorpus",
    "data_dir",
    "load_corpus",
    "cost",
    "cost_table",
    "format_cost_table",
    "VocabCost",
    "load_embeddings",
    "rank_undertrained",
    "count_words",
    "detect_script",
    "gini",
    "lorenz_curve",
    "renyi_efficiency",
    "renyi_entropy",
    "word_rule_for_script",
    "render_ansi",
    "render_html",
    "token_pieces",
]
