"""Rendering a :class:`~toksmith.analysis.compare.ComparisonReport`: plain-text tables and a
self-contained HTML page.

The HTML page embeds its plots as base64 PNG (``<img src="data:...">``) and its styles inline, so
the one file can be mailed or archived. Plots need matplotlib (``pip install 'toksmith[analysis]'``);
without it the page still has every table and sample, and says which plots are missing.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

from .metrics import lorenz_curve
from .show import pieces_to_html

METRIC_TITLES = {
    "parity": "parity: tokens relative to {ref} on the same segments (1.00 = as many as {ref})",
    "tokens_per_word": "tokens per word (words: whitespace-separated, or characters for scripts without spaces)",
    "bytes_per_token": "UTF-8 bytes per token (higher = more compression)",
    "characters_per_token": "characters per token",
    "tokens": "tokens",
    "parallel_tokens": "tokens on the segments shared with {ref}",
    "vocab_utilization": "share of the vocabulary used by the language",
    "renyi_efficiency": "Rényi efficiency of the language's token distribution",
    "distinct_tokens": "distinct tokens used",
    "parallel_segments": "segments shared with {ref}",
}

SUMMARY_COLUMNS = (
    ("vocab_size", "vocab"), ("tokens", "tokens"), ("bytes_per_token", "bytes/token"),
    ("vocab_utilization", "vocab used"), ("renyi_efficiency", "Rényi eff."), ("gini_parity", "Gini(parity)"),
    ("mean_parity", "mean parity"), ("max_parity_language", "worst"), ("max_parity", "worst parity"),
)


def fmt(value, metric: str = "") -> str:
    """Formats one value for a table cell.

    >>> fmt(0.123456, "vocab_utilization"), fmt(1234567, "tokens"), fmt(None)
    ('12.3%', '1,234,567', '-')
    """
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if metric == "vocab_utilization":
        return f"{100 * value:.1f}%"
    if isinstance(value, int):
        return f"{value:,}"
    if metric in ("renyi_efficiency", "gini_parity"):
        return f"{value:.3f}"
    return f"{value:.2f}"


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Aligns columns: the first ``left`` columns to the left, the others to the right."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells) -> str:
        return "  ".join(str(c).ljust(w) if i < left else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def text_tables(report, metrics: Sequence[str]) -> str:
    ref = report.reference_language
    names = report.tokenizer_names
    out = [
        f"Tokenizer comparison on {report.corpus}: {len(report.languages)} languages, reference {ref}, "
        f"{len(names)} tokenizer(s)",
        "",
    ]
    for metric in metrics:
        out.append(METRIC_TITLES.get(metric, metric).format(ref=ref))
        rows = []
        for code, info in report.languages.items():
            rows.append([code, info["script"], info["word_rule"],
                         *(fmt(report.metric(metric, n, code), metric) for n in names)])
        out.extend(_grid(["language", "script", "words", *names], rows, left=3))
        out.append("")
    out.append(f"summary (Rényi efficiency with alpha={report.alpha}; Gini over the languages' parity)")
    rows = [[n, *(fmt(report.tokenizers[n]["summary"][k], k) for k, _ in SUMMARY_COLUMNS)] for n in names]
    out.extend(_grid(["tokenizer", *(label for _, label in SUMMARY_COLUMNS)], rows))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child,td.l,th.l{text-align:left}
caption{text-align:left;font-weight:600;padding:.3em 0}
img{max-width:100%}
.note{color:#666;font-size:90%}
h3{margin-bottom:.2em}
"""


def _table_html(caption: str, header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    def cells(tag, values):
        return "".join(f'<{tag}{" class=l" if i < left else ""}>{html.escape(str(v))}</{tag}>' for i, v in enumerate(values))

    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    return f"<table><caption>{html.escape(caption)}</caption><thead><tr>{cells('th', header)}</tr></thead><tbody>{body}</tbody></table>"


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def _plots(report) -> dict[str, str]:
    """The four plots as ``<img>`` tags, or notes saying why they are missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        note = ('<p class="note">Plot not drawn: matplotlib is not installed '
                "(<code>pip install 'toksmith[analysis]'</code>).</p>")
        return {"bars": note, "lorenz": note, "lengths": note}
    names = report.tokenizer_names
    codes = list(report.languages)
    ref = report.reference_language
    plots = {}

    fig = Figure(figsize=(max(6.0, 0.55 * len(codes) * max(1, len(names)) / 2 + 2), 3.8))
    ax = fig.subplots()
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        values = [report.metric("parity", name, c) or 0 for c in codes]
        ax.bar([i + (k - (len(names) - 1) / 2) * width for i in range(len(codes))], values, width, label=name)
    ax.axhline(1.0, color="#444", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(codes)))
    ax.set_xticklabels(codes, rotation=60, ha="right")
    ax.set_ylabel(f"tokens relative to {ref}")
    ax.set_title(f"Tokens per language on the same text (parity vs {ref})")
    ax.legend(fontsize="small")
    plots["bars"] = _png(fig)

    fig = Figure(figsize=(4.8, 4.4))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], color="#888", linestyle="--", linewidth=0.8, label="equality")
    for name in names:
        parities = [report.metric("parity", name, c) for c in codes if report.metric("parity", name, c) is not None]
        xs, ys = zip(*lorenz_curve(parities))
        g = report.tokenizers[name]["summary"]["gini_parity"]
        ax.plot(xs, ys, marker=".", label=f"{name} (Gini {g:.3f})" if g is not None else name)
    ax.set_xlabel("share of languages (cheapest first)")
    ax.set_ylabel("share of tokens (parity)")
    ax.set_title("Lorenz curve of parity over languages")
    ax.legend(fontsize="small")
    plots["lorenz"] = _png(fig)

    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.subplots()
    cap = 16  # longer tokens are pooled in the last bin
    for k, name in enumerate(names):
        hist = report.tokenizers[name]["token_length_histogram"]
        total = sum(hist.values()) or 1
        shares = [0.0] * (cap + 1)
        for length, n in hist.items():
            shares[min(int(length), cap)] += n / total
        ax.bar([i + (k - (len(names) - 1) / 2) * width for i in range(1, cap + 1)], shares[1:], width, label=name)
    ax.set_xticks(range(1, cap + 1))
    ax.set_xticklabels([*map(str, range(1, cap)), f"{cap}+"])
    ax.set_xlabel("token length in bytes")
    ax.set_ylabel("share of emitted tokens")
    ax.set_title("Token lengths on the corpus")
    ax.legend(fontsize="small")
    plots["lengths"] = _png(fig)
    return plots


def html_report(report, title: str | None = None) -> str:
    ref = report.reference_language
    names = report.tokenizer_names
    title = title or f"Tokenizer comparison on {report.corpus}"
    plots = _plots(report)
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{len(report.languages)} languages, reference language <b>{html.escape(ref)}</b>, "
        f"tokenizers: {html.escape(', '.join(names))}. Parity compares the segments both languages have. "
        f"Rényi efficiency uses alpha = {report.alpha}, normalized by log(vocabulary size).</p>",
        "<h2>Summary</h2>",
        _table_html("per tokenizer", ["tokenizer", *(label for _, label in SUMMARY_COLUMNS)],
                    [[n, *(fmt(report.tokenizers[n]["summary"][k], k) for k, _ in SUMMARY_COLUMNS)] for n in names]),
        "<h2>Plots</h2>", plots["bars"], plots["lorenz"], plots["lengths"],
        "<h2>Per language</h2>",
    ]
    for metric in ("parity", "tokens_per_word", "bytes_per_token", "characters_per_token", "vocab_utilization"):
        rows = [[c, i["name"], i["script"], i["word_rule"], *(fmt(report.metric(metric, n, c), metric) for n in names)]
                for c, i in report.languages.items()]
        parts.append(_table_html(METRIC_TITLES[metric].format(ref=ref), ["code", "language", "script", "words", *names], rows, left=4))
    scripts = list(dict.fromkeys(i["script"] for i in report.languages.values()))
    rows = []
    for script in scripts:
        for n in names:
            agg = report.tokenizers[n]["scripts"][script]
            rows.append([script, agg["word_rule"], ", ".join(agg["languages"]), n,
                         fmt(agg["bytes_per_token"]), fmt(agg["tokens_per_word"]), fmt(agg["mean_parity"])])
    parts.append(_table_html("per script (languages pooled)", ["script", "words", "languages", "tokenizer",
                                                              "bytes/token", "tokens/word", "mean parity"], rows, left=4))
    if report.samples:
        parts.append("<h2>Samples</h2><p class=note>Token boundaries by color; the id is under each token. "
                     "A character split across tokens is shown with the token that completes it.</p>")
        for sample in report.samples:
            info = report.languages[sample["language"]]
            parts.append(f"<h3>{html.escape(info['name'])} ({html.escape(sample['language'])}), segment "
                         f"{html.escape(sample['segment'])}</h3>")
            for name in names:
                pieces = [(p, i) for p, i in sample["tokens"][name]]
                parts.append(f"<p><b>{html.escape(name)}</b>: {len(pieces)} tokens</p>{pieces_to_html(pieces)}")
    parts.append("</body></html>")
    return "\n".join(parts)
