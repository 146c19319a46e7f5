"""Command-line subcommands ``compare``, ``cost``, ``audit`` and ``show``.

The main ``toksmith`` CLI adds them with :func:`register`; each subcommand stores its handler as
``args.func`` (call ``args.func(args)``; it returns the exit code). Handlers raise
``toksmith.TokenizerError`` for bad input; :func:`main` turns that into a message and exit code 2.

    toksmith compare cl100k_base o200k_base --corpus udhr --html report.html
    toksmith cost --vocab-size 128256 --d-model 4096 --params 8.03B
    toksmith audit my.json --corpus texts/ --embeddings model.safetensors
    toksmith show -t my.json "Hello world"
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from ..errors import TokenizerError
from ._common import AnalysisError, display_name, load_tokenizer

_SUFFIXES = {"k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def count(text: str) -> int:
    """Parses a count: ``128256``, ``128_256``, ``128,256``, ``8B``, ``8.03e9``, ``0.6B``.

    >>> count("8.03B"), count("128_256"), count("1e3")
    (8030000000, 128256, 1000)
    """
    cleaned = text.strip().replace("_", "").replace(",", "")
    m = re.fullmatch(r"(\d+(?:\.\d*)?(?:[eE]\d+)?)([kKmMbBgGtT]?)", cleaned)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (examples: 128256, 128_256, 8B, 0.6B, 8e9)")
    value = float(m.group(1)) * _SUFFIXES.get(m.group(2).lower(), 1)
    return int(round(value))


def _languages(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    out = []
    for v in values:
        out.extend(c for c in v.replace(",", " ").split() if c)
    return out


def register(subparsers) -> None:
    """Adds ``compare``, ``cost``, ``audit`` and ``show`` to an argparse subparsers object."""
    p = subparsers.add_parser(
        "compare", help="compare tokenizers across the languages of a parallel corpus",
        description="Encode every language of a parallel corpus with each tokenizer and report bytes and "
                    "characters per token, tokens per word, parity against a reference language, vocabulary "
                    "use, Rényi efficiency and the Gini coefficient of parity over languages.",
    )
    p.add_argument("tokenizers", nargs="+", metavar="TOK", help="tokenizer files or names (anything toksmith.load accepts)")
    p.add_argument("--corpus", default="udhr",
                   help="'udhr' (the shared UDHR corpus; set TOKSMITH_DATA_DIR if it is not found), a directory "
                        "with one line-aligned file per language (FLORES style), or a UDHR-style .jsonl[.xz] (default: udhr)")
    p.add_argument("--reference-language", default="eng", metavar="CODE", help="parity is relative to this language (default: eng)")
    p.add_argument("--languages", nargs="+", metavar="CODE",
                   help="language codes to compare (space or comma separated; 'all' for every one); "
                        "default for udhr: 18 languages in 15 scripts")
    p.add_argument("--alpha", type=float, default=2.5, help="order of the Rényi efficiency (default: 2.5)")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report with plots")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--csv", metavar="FILE", help="write one row per tokenizer and language as CSV")
    p.add_argument("--quiet", action="store_true", help="do not print the tables")
    p.set_defaults(func=run_compare)

    p = subparsers.add_parser(
        "cost", help="embedding parameters and output-layer FLOPs of a vocabulary size",
        description="What a vocabulary costs a model: V x d embedding parameters, as many again for an untied "
                    "output matrix, 2 x d x V output-layer FLOPs per token, and the share of the model when its "
                    "size is given. Counts accept 128256, 128_256, 8B, 0.6B.",
    )
    p.add_argument("--vocab-size", type=count, metavar="V", help="vocabulary size (default: the tokenizer's, with -t)")
    p.add_argument("--d-model", type=count, required=True, metavar="D", help="model width (embedding dimension)")
    p.add_argument("--params", type=count, metavar="N", help="total model parameters, e.g. 8.03B")
    p.add_argument("--tied", action="store_true", help="the output layer shares the input embedding matrix")
    p.add_argument("--vocab-sizes", nargs="+", type=count, metavar="V", help="also tabulate these vocabulary sizes")
    p.add_argument("-t", "--tokenizer", metavar="TOK", help="tokenizer whose corpus token count to report")
    p.add_argument("--corpus", metavar="PATH", help="corpus to count tokens on (with -t): 'udhr' or a path")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.set_defaults(func=run_cost)

    p = subparsers.add_parser(
        "audit", help="find unreachable, unused, broken and (with embeddings) under-trained tokens",
        description="Check a tokenizer's vocabulary without model weights: tokens their own text never "
                    "encodes to, tokens that are not valid UTF-8, broken merges, special-token problems, and "
                    "tokens never emitted on a corpus. With an embedding matrix (.npy or .safetensors), rank "
                    "tokens whose rows look untrained.",
    )
    p.add_argument("tokenizer", metavar="TOK", help="tokenizer file or name")
    p.add_argument("--corpus", metavar="PATH", help="corpus for the never-emitted check: 'udhr' or a path")
    p.add_argument("--embeddings", metavar="FILE", help=".npy or .safetensors file with the token embedding matrix")
    p.add_argument("--tensor", metavar="NAME", help="name of the embedding matrix in a .safetensors file (default: guessed)")
    p.add_argument("--examples", type=int, default=10, metavar="N", help="examples to print per finding (default: 10)")
    p.add_argument("--top", type=int, default=50, metavar="N", help="under-trained candidates to list (default: 50)")
    p.add_argument("--json", metavar="FILE", help="write the findings as JSON")
    p.set_defaults(func=run_audit)

    p = subparsers.add_parser(
        "show", help="show a text's token boundaries in color, with the ids",
        description="Print TEXT with each token on an alternating background color and its id under it.",
    )
    p.add_argument("-t", "--tokenizer", required=True, metavar="TOK", help="tokenizer file or name")
    p.add_argument("text", nargs="?", metavar="TEXT", help="text to tokenize; '-' or nothing reads standard input")
    p.add_argument("--no-ids", action="store_true", help="only color the text")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="ANSI colors (auto: when printing to a terminal); without colors tokens are separated by |")
    p.add_argument("--width", type=int, metavar="COLUMNS", help="wrap at this many columns (default: terminal width)")
    p.add_argument("--html", metavar="FILE", help="also write the tokens as a self-contained HTML file")
    p.set_defaults(func=run_show)


def run_compare(args) -> int:
    from .compare import compare

    report = compare(args.tokenizers, args.corpus, reference_language=args.reference_language,
                     languages=_languages(args.languages), alpha=args.alpha)
    for path, fmt in ((args.html, "html"), (args.json, "json"), (args.csv, "csv")):
        if path:
            report.save(path, format=fmt)
    if not args.quiet:
        sys.stdout.write(report.to_table())
    return 0


def run_cost(args) -> int:
    from .._io import write_atomic
    from .cost import cost, cost_table, format_cost_table

    tok = load_tokenizer(args.tokenizer) if args.tokenizer else None
    if args.corpus and tok is None:
        raise AnalysisError("--corpus needs -t/--tokenizer: the corpus is counted in that tokenizer's tokens")
    vocab = args.vocab_size
    if vocab is None and tok is not None:
        from ._common import vocab_size

        vocab = vocab_size(tok)
    if vocab is None and not args.vocab_sizes:
        raise AnalysisError("give --vocab-size V (or --vocab-sizes V1 V2 ..., or -t TOK to use its vocabulary size)")
    sizes = ([vocab] if vocab else []) + [v for v in (args.vocab_sizes or []) if v != vocab]
    rows = cost_table(sizes, args.d_model, args.params, args.tied)
    sys.stdout.write(format_cost_table(rows))
    result = {"rows": [r.to_dict() for r in rows]}
    if tok is not None and args.corpus:
        main_row = cost(vocab, args.d_model, args.params, args.tied, tokenizer=tok, corpus=args.corpus)
        c = main_row.corpus
        result["corpus"] = c
        sys.stdout.write(
            f"\n{display_name(tok, args.tokenizer)} on {c['corpus']}: {c['tokens']:,} tokens for {c['bytes']:,} bytes "
            f"({c['bytes_per_token']:.2f} bytes/token); output layer: {c['output_flops']:.3e} FLOPs to predict them all\n"
        )
    if args.json:
        write_atomic(args.json, json.dumps(result, indent=1).encode("utf-8"))
    return 0


def run_audit(args) -> int:
    from .audit import audit

    report = audit(args.tokenizer, args.corpus, embeddings=args.embeddings, embedding_tensor=args.tensor,
                   max_examples=max(args.examples, 1), top=args.top)
    sys.stdout.write(report.to_text(examples=args.examples))
    if args.json:
        report.save(args.json)
    return 0


def run_show(args) -> int:
    from .._io import write_atomic
    from .show import render_ansi, render_html

    tok = load_tokenizer(args.tokenizer)
    text = args.text
    if text is None or text == "-":
        text = sys.stdin.read()
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    sys.stdout.write(render_ansi(tok, text, ids=not args.no_ids, width=args.width, color=color))
    if args.html:
        body = render_html(tok, text, ids=not args.no_ids)
        page = f"<!DOCTYPE html><html><head><meta charset=utf-8><title>tokens</title></head><body>{body}</body></html>"
        write_atomic(args.html, page.encode("utf-8"))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the four subcommands on their own (``python -m toksmith.analysis.cli``)."""
    parser = argparse.ArgumentParser(prog="toksmith", description="Tokenizer analysis")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TokenizerError as e:
        print(f"toksmith {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
