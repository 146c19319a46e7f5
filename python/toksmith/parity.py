"""``toksmith check-parity``: is toksmith's encoding identical to the reference library's?

Encodes every text of a corpus with toksmith and with the reference implementation (tiktoken,
Hugging Face ``tokenizers``, or ``sentencepiece``), and reports the share of texts whose ids are
identical, plus the first differences with their context.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .errors import FormatError, TokenizerError


@dataclass
class Difference:
    index: int
    text: str
    ours: list[int]
    theirs: list[int]

    def describe(self, tokenizer, width: int = 60) -> str:
        """Where the two encodings part, with the text around it."""
        k = next((i for i, (a, b) in enumerate(zip(self.ours, self.theirs)) if a != b), min(len(self.ours), len(self.theirs)))
        prefix = tokenizer.decode(self.ours[:k]) if k else ""
        at = len(prefix)
        context = self.text[max(0, at - width // 2): at + width // 2]
        return (f"text #{self.index}: first difference at token {k} (character ~{at}): "
                f"ours {self.ours[k:k + 5]} vs theirs {self.theirs[k:k + 5]}\n    context: {context!r}")


@dataclass
class ParityReport:
    tested: int = 0
    identical: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def share_identical(self) -> float:
        return self.identical / self.tested if self.tested else 1.0


def reference_encoder(kind: str, spec: str, tokenizer, *, add_special_tokens: bool = False) -> Callable[[str], list[int]]:
    """The reference library's encode function for ``spec`` (a name or a file)."""
    if kind == "tiktoken":
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        from .formats.tiktoken import ENCODINGS

        name = os.path.basename(spec).removesuffix(".tiktoken")
        path = spec
        if spec in ENCODINGS:
            directory = os.environ.get("TOKSMITH_TIKTOKEN_DIR", "")
            path = os.path.join(directory, ENCODINGS[spec][0] + ".tiktoken")
        try:
            ranks = load_tiktoken_bpe(path)
        except Exception as e:  # the reference library's own errors (missing file, bad base64 ...)
            raise _unreadable(path, "tiktoken", "a .tiktoken file", e) from None
        enc = tiktoken.Encoding(name, pat_str=tokenizer.pattern, mergeable_ranks=ranks,
                                special_tokens=dict(tokenizer.special_tokens))
        return lambda text: enc.encode(text, allowed_special="all")
    if kind == "hf":
        from tokenizers import Tokenizer as HfTokenizer

        text = _read_text(spec)
        try:
            hf = HfTokenizer.from_str(text)
        except Exception as e:  # tokenizers raises a bare Exception for JSON it does not accept
            raise _unreadable(spec, "Hugging Face tokenizers", "a tokenizer.json", e) from None
        hf.no_padding()
        hf.no_truncation()
        return lambda text: hf.encode(text, add_special_tokens=add_special_tokens).ids
    if kind == "sentencepiece":
        import sentencepiece as spm

        if not os.path.isfile(spec):
            raise FormatError(f"{spec}: no such file; --reference names the .model sentencepiece loads")
        try:
            sp = spm.SentencePieceProcessor(model_file=spec)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError for what it cannot parse
            raise _unreadable(spec, "sentencepiece", "a SentencePiece .model", e) from None
        return lambda text: sp.encode(text, out_type=int, add_bos=add_special_tokens and sp.bos_id() >= 0)
    raise TokenizerError(f"unknown reference {kind!r}; use tiktoken, hf or sentencepiece")


def _unreadable(path: str, library: str, expected: str, e: Exception) -> FormatError:
    return FormatError(f"{path}: {library} cannot load it ({type(e).__name__}: {e}); the reference needs {expected} "
                       f"(pass the file it reads with --reference)")


def _read_text(path: str) -> str:
    from pathlib import Path

    from .sources import read_lines

    if not os.path.isfile(path):
        raise FormatError(f"{path}: no such file")
    return "".join(read_lines(Path(path), FormatError))


def check_parity(tokenizer, reference: Callable[[str], list[int]], texts: Iterable[str], *,
                 add_special_tokens: bool = False, keep: int = 5) -> ParityReport:
    """Compares toksmith's ids with ``reference(text)`` for every text."""
    report = ParityReport()
    for i, text in enumerate(texts):
        ours = tokenizer.encode(text, allowed_special="all", add_special_tokens=add_special_tokens)
        theirs = list(reference(text))
        report.tested += 1
        if ours == theirs:
            report.identical += 1
        elif len(report.differences) < keep:
            report.differences.append(Difference(i, text, ours, theirs))
    return report


def corpus_texts(path: str, *, max_texts: int | None = None) -> Iterable[str]:
    """The texts of a corpus for parity checks: one per line (``.txt``, compressed or not), or the
    articles of a UDHR-style ``.jsonl``."""
    from pathlib import Path

    from .sources import read_lines

    p = Path(path)
    if not p.exists():
        raise FormatError(f"{path}: no such file")
    n = 0
    is_jsonl = ".jsonl" in p.name
    for lineno, line in enumerate(read_lines(p, FormatError), 1):
        if is_jsonl:
            texts = _jsonl_texts(p, lineno, line)
        else:
            texts = [line]
        for text in texts:
            if text:
                yield text
                n += 1
                if max_texts is not None and n >= max_texts:
                    return


def _jsonl_texts(path, lineno: int, line: str) -> list[str]:
    """The texts of one record: its ``articles`` (UDHR-style) or its ``text``."""
    import json

    if not line.strip():
        return []
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise FormatError(f"{path}:{lineno}: not a JSON object ({e}); the corpus must be one JSON object per line") from None
    if not isinstance(record, dict):
        raise FormatError(f"{path}:{lineno}: a JSON {type(record).__name__}, not an object with 'text' or 'articles'")
    texts = list(record["articles"].values()) if isinstance(record.get("articles"), dict) else [record.get("text", "")]
    if not all(isinstance(t, str) for t in texts):
        raise FormatError(f"{path}:{lineno}: the 'text' or 'articles' values must be strings")
    return texts
