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
        enc = tiktoken.Encoding(name, pat_str=tokenizer.pattern, mergeable_ranks=load_tiktoken_bpe(path),
                                special_tokens=dict(tokenizer.special_tokens))
        return lambda text: enc.encode(text, allowed_special="all")
    if kind == "hf":
        from tokenizers import Tokenizer as HfTokenizer

        hf = HfTokenizer.from_str(_read_text(spec))
        hf.no_padding()
        hf.no_truncation()
        return lambda text: hf.encode(text, add_special_tokens=add_special_tokens).ids
    if kind == "sentencepiece":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=spec)
        return lambda text: sp.encode(text, out_type=int, add_bos=add_special_tokens and sp.bos_id() >= 0)
    raise TokenizerError(f"unknown reference {kind!r}; use tiktoken, hf or sentencepiece")


def _read_text(path: str) -> str:
    if path.endswith(".xz"):
        import lzma

        with lzma.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


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

    from .sources import _open_text

    p = Path(path)
    if not p.exists():
        raise FormatError(f"{path}: no such file")
    n = 0
    with _open_text(p) as f:
        is_jsonl = ".jsonl" in p.name
        for line in f:
            if is_jsonl:
                import json

                record = json.loads(line)
                texts = list(record.get("articles", {}).values()) if isinstance(record.get("articles"), dict) else [record.get("text", "")]
            else:
                texts = [line]
            for text in texts:
                if text:
                    yield text
                    n += 1
                    if max_texts is not None and n >= max_texts:
                        return
