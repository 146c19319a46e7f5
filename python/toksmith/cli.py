"""The ``toksmith`` command line: train, encode, decode, inspect, demo.

Every subcommand has ``--help``. Errors from toksmith print one line (``error: ...``) and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import toksmith
from toksmith.errors import DecodeError, TokenizerError


def _train_source(files: list[str]):
    return [Path(f) for f in files] if len(files) > 1 else files[0]


def _cmd_train(args: argparse.Namespace) -> None:
    if args.trace and args.algorithm != "bpe":
        raise toksmith.TrainingError(f"--trace replays byte-level BPE, not --algorithm {args.algorithm}")
    if args.trace and args.level != "byte":
        raise toksmith.TrainingError("--trace replays byte-level BPE; for character level use "
                                     "toksmith.reference.train_bpe(level='char'), whose format_trace() prints the table")
    source = _train_source(args.files)
    options = _algorithm_options(args)
    tok = toksmith.train(
        source,
        algorithm=args.algorithm,
        vocab_size=args.vocab_size,
        pattern=args.pattern,
        special_tokens=args.special_token or (),
        special_tokens_position=args.special_tokens_position,
        min_frequency=args.min_frequency,
        max_token_length=args.max_token_length,
        num_threads=args.threads,
        max_memory=args.max_memory,
        max_chars_per_doc=args.max_chars_per_doc,
        text_field=args.text_field,
        from_counts=args.from_counts,
        show_progress=not args.quiet,
        level=args.level,
        end_of_word_suffix=args.end_of_word_suffix,
        limit_alphabet=args.limit_alphabet,
        byte_fallback=args.byte_fallback,
        **options,
    )
    if args.trace:
        _print_trace(tok, source, args)
    # Character-level BPE is not byte-level: it is saved as a Hugging Face tokenizer.json
    # (toksmith.load reads it back).
    tok.save(args.output, format="toksmith" if tok.pipeline is None else "hf")
    if not args.quiet:
        print(f"trained {tok!r}; saved to {args.output}", file=sys.stderr)


def _algorithm_options(args: argparse.Namespace) -> dict:
    """The options of one algorithm (SuperBPE's --transition, WordPiece's and Unigram's --option
    KEY=VALUE) as keyword arguments of toksmith.train; an option given to another is an error."""
    options: dict = {}
    if args.algorithm == "superbpe":
        options["transition"] = args.transition
        if args.max_words_per_token is not None:  # (None in train() means no limit; its default is 4)
            options["max_words_per_token"] = args.max_words_per_token
    elif args.transition is not None or args.max_words_per_token is not None:
        raise toksmith.TrainingError("--transition and --max-words-per-token are options of --algorithm superbpe")
    for item in args.option or ():
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise toksmith.TrainingError(f"--option {item!r}: write KEY=VALUE, e.g. --option character_coverage=0.9995")
        if key in _TRAIN_PARAMETERS:
            flag = _TRAIN_PARAMETERS[key]
            raise toksmith.TrainingError(f"--option {key}: use {flag}, the option of every algorithm" if flag else
                                         f"--option {key}: not an option of the command line")
        options[key] = _option_value(value)
    if args.option and args.algorithm not in ("wordpiece", "unigram"):
        raise toksmith.TrainingError("--option passes WordPiece's and Unigram's own options (see "
                                     "toksmith.train_subword); use the named flags for BPE")
    if args.algorithm in ("wordpiece", "unigram") and args.level != "byte":
        raise toksmith.TrainingError(f"--level is an option of BPE, not of --algorithm {args.algorithm}")
    return options


# toksmith.train's own parameters -> the flag that sets them (None: not on the command line).
_TRAIN_PARAMETERS = {"source": "FILES", "algorithm": "--algorithm", "vocab_size": "--vocab-size", "pattern": "--pattern",
                     "special_tokens": "--special-token", "special_tokens_position": "--special-tokens-position",
                     "min_frequency": "--min-frequency", "max_token_length": "--max-token-length",
                     "num_threads": "--threads", "max_memory": "--max-memory", "max_chars_per_doc": "--max-chars-per-doc",
                     "text_field": "--text-field", "from_counts": "--from-counts", "show_progress": "--quiet",
                     "transition": "--transition", "stage2_pattern": None, "max_words_per_token": "--max-words-per-token",
                     "forbidden_patterns": None, "level": "--level", "end_of_word_suffix": "--end-of-word-suffix",
                     "limit_alphabet": "--limit-alphabet", "byte_fallback": "--byte-fallback"}


def _option_value(text: str):
    """A number, true/false/none or a list in Python or JSON syntax as such; anything else a string."""
    import ast

    lowered = text.strip().lower()
    if lowered in ("true", "false", "none", "null"):
        return {"true": True, "false": False}.get(lowered)
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


TRACE_LIMIT = 200_000  # characters: the trace replays training in the readable reference


def _print_trace(tok, source, args) -> None:
    """Prints the merge table (step, pair, count, corpus after the merge) by replaying training
    with toksmith.reference, after checking that it learned the same merges."""
    from toksmith.reference import train_bpe
    from toksmith.sources import iter_texts

    if args.from_counts:
        raise toksmith.TrainingError("--trace needs the corpus itself, not counts")

    counts: dict[str, int] = {}
    size = 0
    for text in iter_texts(source, text_field=args.text_field):
        size += len(text)
        if size > TRACE_LIMIT:
            raise toksmith.TrainingError(f"--trace is for small corpora (up to {TRACE_LIMIT:,} characters): it replays "
                                         f"training in the pure-Python reference")
        for piece in _split_specials(text, tok.special_tokens):
            for chunk in toksmith.patterns.split(piece, tok.pattern):
                counts[chunk] = counts.get(chunk, 0) + 1
    merges = tok.merges
    ref = train_bpe(counts, num_merges=len(merges), level="byte", tie_break="lowest_id", min_frequency=args.min_frequency)
    if ref.merges != merges:
        raise toksmith.InternalError("the reference trainer learned other merges than the Rust trainer; please report this")
    print(ref.format_trace())


def _split_specials(text: str, specials: dict[str, int]) -> list[str]:
    if not specials:
        return [text]
    import re

    return re.split("|".join(map(re.escape, sorted(specials, key=len, reverse=True))), text)


def _cmd_extend(args: argparse.Namespace) -> None:
    base = toksmith.load(args.base)
    corpus = _train_source(args.corpus)
    extended = base.extend(corpus, add=args.add, min_frequency=args.min_frequency, num_threads=args.threads,
                           max_memory=args.max_memory, text_field=args.text_field, show_progress=not args.quiet)
    extended.save(args.output)
    if not args.quiet:
        from toksmith.sources import iter_texts

        before = after = 0
        for text in iter_texts(corpus, text_field=args.text_field):
            before += base.count(text, disallowed_special=())
            after += extended.count(text, disallowed_special=())
        print(f"added {extended.vocab_size - base.vocab_size} tokens (ids {base.vocab_size}..{extended.vocab_size - 1}); "
              f"the domain corpus: {before:,} -> {after:,} tokens ({100 * (1 - after / max(before, 1)):.1f}% fewer); "
              f"saved to {args.output}", file=sys.stderr)


def _cmd_check_parity(args: argparse.Namespace) -> int:
    from toksmith.parity import check_parity, corpus_texts, reference_encoder

    tok = toksmith.load(args.tokenizer)
    reference = reference_encoder(args.against, args.reference or args.tokenizer, tok,
                                  add_special_tokens=args.add_special_tokens)
    report = check_parity(tok, reference, corpus_texts(args.corpus, max_texts=args.max_texts),
                          add_special_tokens=args.add_special_tokens)
    print(f"{report.identical:,} of {report.tested:,} texts identical ({100 * report.share_identical:.3f}%)")
    for d in report.differences:
        print(d.describe(tok))
    return 0 if report.identical == report.tested else 1


def _cmd_convert(args: argparse.Namespace) -> None:
    tok = toksmith.load(args.input)
    tok.save(args.output, format=args.to)
    print(f"{args.input} -> {args.output} ({args.to})", file=sys.stderr)


def _cmd_count(args: argparse.Namespace) -> None:
    from toksmith.trainers import count

    n = count(_train_source(args.files), args.output, pattern=args.pattern or "o200k", special_tokens=args.special_token or (),
              num_threads=args.threads, max_memory=args.max_memory, max_chars_per_doc=args.max_chars_per_doc,
              text_field=args.text_field, show_progress=not args.quiet)
    if not args.quiet:
        print(f"{n:,} distinct chunks written to {args.output}", file=sys.stderr)


def _cmd_merge_counts(args: argparse.Namespace) -> None:
    from toksmith.trainers import merge_counts

    n = merge_counts(args.inputs, args.output, max_memory=args.max_memory)
    if not args.quiet:
        print(f"{n:,} distinct chunks written to {args.output}", file=sys.stderr)


def _cmd_encode(args: argparse.Namespace) -> None:
    tok = toksmith.load(args.tokenizer)
    text = args.text if args.text is not None else sys.stdin.read()
    allowed = "all" if args.allow_special else frozenset()
    ids = tok.encode(text, allowed_special=allowed, disallowed_special=() if args.ordinary else "all")
    print(" ".join(map(str, ids)))


def _cmd_decode(args: argparse.Namespace) -> None:
    tok = toksmith.load(args.tokenizer)
    ids = [_parse_id(x) for chunk in args.ids for x in chunk.replace(",", " ").split()]
    sys.stdout.write(tok.decode(ids, errors=args.errors))
    sys.stdout.write("\n")


def _parse_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise DecodeError(f"ids must be integers (space or comma separated, e.g. 15339 1917), not {text!r}") from None


def _cmd_inspect(args: argparse.Namespace) -> None:
    tok = toksmith.load(args.tokenizer)
    print(f"vocab_size: {tok.vocab_size}")
    pipeline = tok.pipeline
    if pipeline is None:
        print(f"pattern:    {tok.pattern_name or 'custom'} {tok.pattern!r}")
    else:  # a pipeline (tokenizer.json, .model, GGUF, WordPiece/Unigram/char-level training): its stages
        stage = lambda x: type(x).__name__ if x is not None else "none"  # noqa: E731
        print(f"model:      {stage(pipeline.model)}")
        print(f"stages:     normalizer {stage(pipeline.normalizer)}, pre-tokenizer {stage(pipeline.pre_tokenizer)}, "
              f"post-processor {stage(pipeline.post_processor)}, decoder {stage(pipeline.decoder)}")
    print(f"specials:   {tok.special_tokens or 'none'}")
    merges = tok.merges
    print(f"merges:     {len(merges)}")
    show = lambda m: f"{m[0]!r} + {m[1]!r}"  # noqa: E731
    for i, m in enumerate(merges[: args.n]):
        print(f"  first #{i}: {show(m)}")
    for i, m in list(enumerate(merges))[-args.n :] if merges else []:
        print(f"  last  #{i}: {show(m)}")


def show_boundaries(tok: "toksmith.Tokenizer", text: str) -> str:
    """The text with each token on an alternating background (ANSI), ids not shown."""
    colors = ["\x1b[48;5;153m", "\x1b[48;5;223m", "\x1b[48;5;194m", "\x1b[48;5;225m"]
    parts = []
    for k, i in enumerate(tok.encode_ordinary(text)):
        piece = tok.decode_bytes([i]).decode("utf-8", errors="replace").replace("\n", "\\n\n")
        parts.append(f"{colors[k % len(colors)]}\x1b[30m{piece}\x1b[0m")
    return "".join(parts)


def _cmd_demo(args: argparse.Namespace) -> None:
    from toksmith.demo import run_demo

    run_demo(vocab_size=args.vocab_size, color=not args.no_color and sys.stdout.isatty() or args.color)


def _add_counting_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pattern", default=None, help="pre-tokenization: gpt2, cl100k, o200k or a regex (default o200k; "
                   "with --from-counts, the pattern the counts were made with)")
    p.add_argument("--special-token", action="append", metavar="T", help="a special token, never learned from (repeatable)")
    p.add_argument("--threads", type=int, default=None, help="threads for counting (default: all cores)")
    p.add_argument("--max-memory", default=None, help="memory budget for the counts, e.g. 2GB; past it they are spilled to disk")
    p.add_argument("--max-chars-per-doc", type=int, default=None, help="cut longer documents to this many characters")
    p.add_argument("--text-field", default="text", help="the field of .jsonl records / column of .parquet files holding the text (default: text)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toksmith", description="Train, run and inspect subword tokenizers.")
    parser.add_argument("--version", action="version", version=f"toksmith {toksmith.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train a tokenizer (byte-level BPE by default)",
                       description="Train a tokenizer on files, directories or globs: byte-level BPE (default), "
                                   "character-level BPE (--level char), SuperBPE, WordPiece or Unigram (--algorithm).")
    p.add_argument("files", nargs="+", help="training text: files, directories or globs (.gz/.bz2/.xz/.zst read transparently; .jsonl and .parquet use --text-field); with --from-counts, counts files")
    p.add_argument("--vocab-size", type=int, required=True, help="total ids, including the 256 bytes and the special tokens")
    _add_counting_options(p)
    p.add_argument("--special-tokens-position", choices=["first", "last"], default="first")
    p.add_argument("--min-frequency", type=int, default=2, help="stop when the best pair occurs fewer times (default 2)")
    p.add_argument("--max-token-length", type=int, default=None,
                   help="no token longer than this many bytes (characters at --level char)")
    p.add_argument("--level", choices=["byte", "char"], default="byte",
                   help="byte-level BPE (default), or classic character-level BPE")
    p.add_argument("--end-of-word-suffix", default=None, metavar="S",
                   help="--level char: the suffix the last character of a chunk carries, e.g. '</w>'")
    p.add_argument("--limit-alphabet", type=int, default=None, metavar="N",
                   help="--level char: keep only the N most frequent characters (the rest: <unk> or bytes)")
    p.add_argument("--byte-fallback", action="store_true",
                   help="--level char: characters outside the alphabet become byte tokens <0x00>..<0xFF>")
    p.add_argument("--algorithm", choices=["bpe", "superbpe", "wordpiece", "unigram"], default="bpe",
                   help="bpe (default); superbpe: tokens across spaces after --transition; wordpiece (BERT); "
                        "unigram (SentencePiece-style); the last two save a tokenizer.json")
    p.add_argument("--transition", type=int, default=None, metavar="N",
                   help="--algorithm superbpe: the vocabulary size where tokens start to span words")
    p.add_argument("--max-words-per-token", type=int, default=None, metavar="W",
                   help="--algorithm superbpe: at most W words in a token (default 4)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="--algorithm wordpiece or unigram: one of its own options (repeatable), e.g. "
                        "lowercase=false, criterion=likelihood, character_coverage=0.9995, split_digits=true; "
                        "see toksmith.train_subword.train_wordpiece / train_unigram")
    p.add_argument("--from-counts", action="store_true", help="FILES are counts written by `toksmith count` (or merge-counts)")
    p.add_argument("--trace", action="store_true", help="print the merge table: step, pair, count, corpus after the merge (small corpora)")
    p.add_argument("-o", "--output", required=True, help="where to save the tokenizer (.json)")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("extend", help="add domain tokens to an existing tokenizer, keeping every id",
                       description="Learn new merges from a domain corpus on top of an existing byte-level BPE tokenizer; "
                                   "every existing id, merge and special token stays the same.")
    p.add_argument("base", help="the tokenizer to extend (a toksmith file, a tiktoken name or file)")
    p.add_argument("--corpus", nargs="+", required=True, help="domain text: files, directories or globs")
    p.add_argument("--add", type=int, required=True, help="how many merges (new tokens) to learn")
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--max-memory", default=None)
    p.add_argument("--text-field", default="text")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("-o", "--output", required=True, help="where to save the extended tokenizer")
    p.set_defaults(func=_cmd_extend)

    p = sub.add_parser("check-parity", help="compare toksmith's ids with a reference library on a corpus",
                       description="Encode a corpus with toksmith and with tiktoken, Hugging Face tokenizers or "
                                   "sentencepiece; print the share identical and the first differences. Exit status 1 "
                                   "when any text differs.")
    p.add_argument("tokenizer", help="what toksmith loads (a name, tokenizer.json, .model, .tiktoken, ...)")
    p.add_argument("--against", required=True, choices=["tiktoken", "hf", "sentencepiece"])
    p.add_argument("--reference", help="the file the reference library loads (default: TOKENIZER)")
    p.add_argument("--corpus", required=True, help="a text file (one text per line; .xz/.gz read) or UDHR-style .jsonl")
    p.add_argument("--max-texts", type=int, default=None)
    p.add_argument("--add-special-tokens", action="store_true", help="compare with template tokens (BOS, [CLS]...)")
    p.set_defaults(func=_cmd_check_parity)

    p = sub.add_parser("convert", help="convert a tokenizer to another format",
                       description="Load a tokenizer (any format toksmith reads) and save it as a Hugging Face "
                                   "tokenizer.json, a tiktoken file (+ .json sidecar), a SentencePiece .model or "
                                   "toksmith's JSON.")
    p.add_argument("input", help="a tokenizer toksmith loads (name or file)")
    p.add_argument("output", help="the file to write")
    p.add_argument("--to", required=True, choices=["hf", "tiktoken", "toksmith", "sentencepiece"])
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser("count", help="count pre-tokenized chunks into a TSV file", description="Count the pre-tokenized chunks of a corpus and write `chunk<TAB>count` lines (tab, newline, backslash escaped as \\t \\n \\\\), the input of `toksmith train --from-counts` and of SentencePiece's TSV mode; the pattern is recorded beside it in OUTPUT.meta.json.")
    p.add_argument("files", nargs="+", help="text files, directories or globs")
    _add_counting_options(p)
    p.add_argument("-o", "--output", required=True, help="the counts file to write (TSV)")
    p.set_defaults(func=_cmd_count)

    p = sub.add_parser("merge-counts", help="add up counts files", description="Add up counts files made on many machines into one.")
    p.add_argument("inputs", nargs="+", help="counts files (TSV)")
    p.add_argument("--max-memory", default=None, help="memory budget, e.g. 2GB; past it counts are spilled to disk")
    p.add_argument("-q", "--quiet", action="store_true", help="no messages")
    p.add_argument("-o", "--output", required=True, help="the merged counts file")
    p.set_defaults(func=_cmd_merge_counts)

    p = sub.add_parser("encode", help="print the ids of a text", description="Encode TEXT (or standard input) and print the ids.")
    p.add_argument("-t", "--tokenizer", required=True, help="tokenizer file")
    p.add_argument("text", nargs="?", help="text to encode (default: read standard input)")
    p.add_argument("--allow-special", action="store_true", help="map special-token strings to their ids")
    p.add_argument("--ordinary", action="store_true", help="encode special-token strings as plain text")
    p.set_defaults(func=_cmd_encode)

    p = sub.add_parser("decode", help="print the text of ids", description="Decode ids (space or comma separated) to text.")
    p.add_argument("-t", "--tokenizer", required=True, help="tokenizer file")
    p.add_argument("ids", nargs="+", help="token ids")
    p.add_argument("--errors", choices=["replace", "strict"], default="replace")
    p.set_defaults(func=_cmd_decode)

    p = sub.add_parser("inspect", help="describe a tokenizer", description="Size, pattern, special tokens, first and last merges.")
    p.add_argument("tokenizer", help="tokenizer file")
    p.add_argument("-n", type=int, default=5, help="how many first/last merges to show (default 5)")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("demo", help="train on the Python standard library and show the result", description="Train a tokenizer on the Python standard library's own source files, then show a sample with token boundaries and the compression.")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--color", action="store_true", help="force colored output")
    p.add_argument("--no-color", action="store_true", help="show boundaries with | instead of colors")
    p.set_defaults(func=_cmd_demo)

    try:  # analysis commands (compare, cost, audit, show), when that module is present
        from toksmith.analysis.cli import register
    except ImportError:
        pass
    else:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except TokenizerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # e.g. non-integer ids on the command line
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:  # Ctrl-C: outputs are written atomically, so nothing half-written remains
        print("interrupted", file=sys.stderr)
        return 130
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
