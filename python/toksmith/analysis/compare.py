"""``compare``: how several tokenizers fare on the languages of a parallel corpus.

>>> import toksmith
>>> from toksmith.analysis.corpora import Document, ParallelCorpus
>>> corpus = ParallelCorpus("toy", [Document("eng", {"1": "the cat sat"}), Document("fra", {"1": "le chat"})])
>>> tok = toksmith.train(["the cat sat le chat"] * 20, vocab_size=280)
>>> report = compare({"toy": tok}, corpus)
>>> report.to_dict()["tokenizers"]["toy"]["languages"]["eng"]["parity"]
1.0
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from collections.abc import Sequence

from .._io import write_atomic
from ._common import AnalysisError, named_tokenizers, vocab_size
from .corpora import ParallelCorpus, load_corpus
from .metrics import count_words, gini, renyi_efficiency
from .show import token_pieces

DEFAULT_ALPHA = 2.5

#: Per-language metrics, in the order of the CSV columns and the terminal tables.
LANGUAGE_METRICS = (
    "tokens", "bytes_per_token", "characters_per_token", "tokens_per_word", "parity", "parallel_tokens",
    "parallel_segments", "distinct_tokens", "vocab_utilization", "renyi_efficiency",
)


def compare(
    tokenizers,
    corpus="udhr",
    *,
    reference_language: str | None = "eng",
    languages: Sequence[str] | None = None,
    alpha: float = DEFAULT_ALPHA,
    sample_languages: Sequence[str] | None = None,
) -> "ComparisonReport":
    """Encodes every language of ``corpus`` with every tokenizer and measures the results.

    - ``tokenizers``: ``{name: tokenizer}``, a list of tokenizers / paths / ``(name, tokenizer)``.
    - ``corpus``: ``"udhr"``, a path (see :func:`~toksmith.analysis.corpora.load_corpus`) or a
      :class:`~toksmith.analysis.corpora.ParallelCorpus`.
    - ``reference_language``: parity is each language's token count over this one's, on the
      segments both have. If it is the default ``"eng"`` and the corpus has no English, the first
      language is the reference. It is added to ``languages`` when missing there.
    - ``alpha``: order of the Rényi efficiency.
    - ``sample_languages``: languages whose first segment the HTML report shows tokenized
      (default: the reference, the costliest language written without spaces, and the costliest
      language of another script).
    """
    named = named_tokenizers(tokenizers)
    if languages is None:
        chosen = load_corpus(corpus)
    else:
        full = load_corpus(corpus, "all")
        wanted = list(languages)
        if _resolves(full, reference_language):
            ref_code = full.resolve(reference_language)
            if ref_code not in [full.resolve(c) for c in wanted]:
                wanted.insert(0, ref_code)
        chosen = full.select(wanted)
    ref = _reference(chosen, reference_language)

    language_info = {}
    for code, doc in chosen.documents.items():
        segments = doc.segments
        language_info[code] = {
            "name": doc.name,
            "script": doc.script,
            "word_rule": doc.word_rule,
            "segments": len(segments),
            "bytes": sum(len(t.encode("utf-8")) for t in segments.values()),
            "characters": sum(len(t) for t in segments.values()),
            "words": sum(count_words(t, doc.word_rule) for t in segments.values()),
        }

    results = {name: _measure(tok, chosen, language_info, ref, alpha) for name, tok in named}
    samples = _sample_codes(chosen, ref, sample_languages, results)
    sample_rows = [{"language": code, "segment": _first_key(chosen[code].segments),
                    "text": chosen[code].segments[_first_key(chosen[code].segments)], "tokens": {}} for code in samples]
    for name, tok in named:
        for row in sample_rows:
            ids = list(tok.encode_ordinary(row["text"]))
            row["tokens"][name] = [[piece, i] for piece, i in token_pieces(tok, ids)]
    return ComparisonReport(
        corpus=chosen.name, reference_language=ref, alpha=alpha, languages=language_info,
        tokenizers=results, samples=sample_rows,
    )


def _resolves(corpus: ParallelCorpus, code: str | None) -> bool:
    if code is None:
        return False
    try:
        corpus.resolve(code)
    except AnalysisError:
        return False
    return True


def _reference(corpus: ParallelCorpus, requested: str | None) -> str:
    if requested is None:
        return corpus.codes[0]
    if requested == "eng" and not _resolves(corpus, "eng"):
        return corpus.codes[0]
    try:
        return corpus.resolve(requested)
    except AnalysisError as e:
        raise AnalysisError(f"reference language: {e}") from None


def _first_key(segments: dict[str, str]) -> str:
    return "1" if "1" in segments else next(iter(segments))


def _sample_codes(corpus: ParallelCorpus, ref: str, requested, results: dict) -> list[str]:
    """The requested sample languages, or: the reference, the language written without spaces
    and the language of another script that cost the most tokens (mean parity over tokenizers)."""
    if requested is not None:
        return [corpus.resolve(c) for c in requested]

    def mean_parity(code: str) -> float:
        values = [r["languages"][code]["parity"] for r in results.values()]
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else 0.0

    codes = [ref]
    by_cost = sorted(corpus.codes, key=mean_parity, reverse=True)
    for wanted in ("characters", None):
        for code in by_cost:
            if code not in codes and corpus[code].script not in {corpus[c].script for c in codes} \
                    and (wanted is None or corpus[code].word_rule == wanted):
                codes.append(code)
                break
    return codes


def _measure(tok, corpus: ParallelCorpus, info: dict, ref: str, alpha: float) -> dict:
    size = vocab_size(tok)
    per_segment: dict[str, dict[str, int]] = {}
    per_language_counts: dict[str, Counter] = {}
    all_counts: Counter = Counter()
    for code, doc in corpus.documents.items():
        counts: Counter = Counter()
        lengths = {}
        for key, text in doc.segments.items():
            ids = tok.encode_ordinary(text)
            counts.update(ids)
            lengths[key] = len(ids)
        per_segment[code] = lengths
        per_language_counts[code] = counts
        all_counts.update(counts)

    ref_lengths = per_segment[ref]
    languages = {}
    for code, lengths in per_segment.items():
        li = info[code]
        tokens = sum(lengths.values())
        common = [k for k in lengths if k in ref_lengths]
        parallel = sum(lengths[k] for k in common)
        ref_parallel = sum(ref_lengths[k] for k in common)
        counts = per_language_counts[code]
        languages[code] = {
            "script": li["script"],
            "word_rule": li["word_rule"],
            "tokens": tokens,
            "bytes_per_token": _div(li["bytes"], tokens),
            "characters_per_token": _div(li["characters"], tokens),
            "tokens_per_word": _div(tokens, li["words"]),
            "parity": _div(parallel, ref_parallel),
            "parallel_tokens": parallel,
            "parallel_segments": len(common),
            "distinct_tokens": len(counts),
            "vocab_utilization": len(counts) / size,
            "renyi_efficiency": renyi_efficiency(counts.values(), size, alpha) if counts else None,
        }

    scripts: dict[str, dict] = {}
    for code, m in languages.items():
        s = scripts.setdefault(info[code]["script"], {"languages": [], "tokens": 0, "bytes": 0, "characters": 0, "words": 0,
                                                      "word_rule": info[code]["word_rule"]})
        s["languages"].append(code)
        s["tokens"] += m["tokens"]
        for key in ("bytes", "characters", "words"):
            s[key] += info[code][key]
    for s in scripts.values():
        s["bytes_per_token"] = _div(s["bytes"], s["tokens"])
        s["characters_per_token"] = _div(s["characters"], s["tokens"])
        s["tokens_per_word"] = _div(s["tokens"], s["words"])
        parities = [languages[c]["parity"] for c in s["languages"] if languages[c]["parity"] is not None]
        s["mean_parity"] = sum(parities) / len(parities) if parities else None

    parities = {c: m["parity"] for c, m in languages.items() if m["parity"] is not None}
    total_tokens = sum(m["tokens"] for m in languages.values())
    total_bytes = sum(info[c]["bytes"] for c in languages)
    worst = max(parities, key=parities.get) if parities else None
    lengths = Counter()
    byte_cache: dict[int, int] = {}
    for token_id, n in all_counts.items():
        if token_id not in byte_cache:
            byte_cache[token_id] = len(tok.decode_bytes([token_id]))
        lengths[byte_cache[token_id]] += n
    summary = {
        "vocab_size": size,
        "tokens": total_tokens,
        "bytes_per_token": _div(total_bytes, total_tokens),
        "distinct_tokens": len(all_counts),
        "vocab_utilization": len(all_counts) / size,
        "renyi_efficiency": renyi_efficiency(all_counts.values(), size, alpha) if all_counts else None,
        "gini_parity": gini(list(parities.values())) if parities else None,
        "mean_parity": sum(parities.values()) / len(parities) if parities else None,
        "max_parity": parities[worst] if worst else None,
        "max_parity_language": worst,
    }
    return {
        "vocab_size": size,
        "summary": summary,
        "languages": languages,
        "scripts": scripts,
        "token_length_histogram": {str(k): lengths[k] for k in sorted(lengths)},
    }


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


class ComparisonReport:
    """The result of :func:`compare`: ``to_dict`` / ``to_json`` / ``to_csv`` / ``to_table`` /
    ``to_html``, and ``save(path)`` choosing the format from the suffix."""

    def __init__(self, *, corpus: str, reference_language: str, alpha: float, languages: dict,
                 tokenizers: dict, samples: list) -> None:
        self.corpus = corpus
        self.reference_language = reference_language
        self.alpha = alpha
        self.languages = languages
        self.tokenizers = tokenizers
        self.samples = samples

    @property
    def tokenizer_names(self) -> list[str]:
        return list(self.tokenizers)

    def metric(self, name: str, tokenizer: str, language: str):
        """One per-language value, e.g. ``report.metric("parity", "cl100k_base", "mya")``."""
        return self.tokenizers[tokenizer]["languages"][language][name]

    def to_dict(self) -> dict:
        """A JSON-able dict: corpus facts, then per tokenizer its summary and per-language metrics."""
        return {
            "corpus": self.corpus,
            "reference_language": self.reference_language,
            "alpha": self.alpha,
            "languages": self.languages,
            "tokenizers": self.tokenizers,
            "samples": self.samples,
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent)

    def to_csv(self) -> str:
        """One row per (tokenizer, language)."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["tokenizer", "vocab_size", "language", "name", "script", "word_rule", *LANGUAGE_METRICS])
        for tname, t in self.tokenizers.items():
            for code, m in t["languages"].items():
                writer.writerow([tname, t["vocab_size"], code, self.languages[code]["name"], m["script"], m["word_rule"],
                                 *(_csv_value(m[k]) for k in LANGUAGE_METRICS)])
        return buf.getvalue()

    def to_table(self, metrics: Sequence[str] = ("parity", "tokens_per_word", "bytes_per_token")) -> str:
        """Plain-text tables: one per metric (languages x tokenizers), then a summary per tokenizer."""
        from .report import text_tables

        return text_tables(self, metrics)

    def to_html(self, title: str | None = None) -> str:
        """A self-contained HTML report (tables, plots as inline images, tokenized samples)."""
        from .report import html_report

        return html_report(self, title=title)

    def save(self, path: str | os.PathLike, format: str | None = None) -> None:
        """Writes the report atomically as JSON, CSV, HTML or text, by ``format`` or the suffix."""
        fmt = (format or os.path.splitext(os.fspath(path))[1].lstrip(".")).lower()
        render = {"json": self.to_json, "csv": self.to_csv, "html": self.to_html, "htm": self.to_html,
                  "txt": self.to_table}.get(fmt)
        if render is None:
            raise AnalysisError(f"cannot tell the report format of {os.fspath(path)!r}; use a .json, .csv, .html or .txt path")
        write_atomic(path, render().encode("utf-8"))

    def __repr__(self) -> str:
        return f"<ComparisonReport {self.corpus} tokenizers={self.tokenizer_names} languages={len(self.languages)}>"


def _csv_value(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else v
