"""``audit``: problems in a tokenizer's vocabulary that need no model weights to find.

Checks, each with a count and examples:

- ``unreachable``: tokens that encoding their own text never produces, alone or in a few
  contexts (after a letter, a space, a newline, before a letter...). A regex pre-tokenizer can cut
  a token's text apart, and a prefix-space normalizer adds a space, so a token that fails alone
  is tried in context before it is called unreachable.
- ``invalid_utf8``: tokens whose bytes are not valid UTF-8 on their own (fragments of
  multi-byte characters; normal for byte-level BPE, but they cannot be checked by encoding).
- ``merges``: merges whose parts or result are not in the vocabulary, repeated merges, and
  multi-character tokens that no merge produces (BPE can never emit them).
- ``never_emitted``: tokens not emitted anywhere on a corpus (when one is given).
- ``special_tokens``: repeated ids, ids outside the vocabulary, and special strings that the
  ordinary vocabulary also encodes to one token (the same text then has two ids).
- ``embeddings`` (with a matrix): the rows that look most like untrained ones.

>>> import toksmith
>>> tok = toksmith.train(["the cat sat on the mat"] * 20, vocab_size=270)
>>> audit(tok).to_dict()["unreachable"]["count"]
0
"""

from __future__ import annotations

import json
import os
from collections import Counter

from .._io import write_atomic
from ._common import AnalysisError, display_name, load_tokenizer, ordinary_tokens, show_bytes, special_ids, token_example, vocab_size

#: (prefix, suffix) pairs a token's text is tried in after failing alone.
CONTEXTS = (("", ""), ("a", ""), ("a ", ""), (" ", ""), ("\n", ""), ("1", ""), ("", "a"), ("", " a"), ("", "\n"),
            ("a", "a"), (" a", " a"))


def _show_value(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else str(value)


def _show_example(example) -> str:
    if not isinstance(example, dict):
        return _show_value(example)
    return ", ".join(f"{k}={_show_value(v)}" for k, v in example.items())


class AuditReport:
    """The findings of :func:`audit`: ``to_dict()`` (JSON-able), ``to_text()``, ``save(path)``."""

    def __init__(self, name: str, findings: dict) -> None:
        self.name = name
        self.findings = findings

    def __getitem__(self, key: str) -> dict:
        return self.findings[key]

    def to_dict(self) -> dict:
        return {"tokenizer": self.name, **self.findings}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=1)

    def to_text(self, examples: int = 8) -> str:
        lines = [f"Audit of {self.name} (vocab size {self.findings['vocab_size']:,}, "
                 f"{self.findings['ordinary_tokens']:,} ordinary tokens)"]
        for key, finding in self.findings.items():
            if not isinstance(finding, dict) or "count" not in finding:
                continue
            lines.append("")
            lines.append(f"{key}: {finding['count']:,} - {finding['what']}")
            for sub, value in finding.items():
                if sub in ("count", "what", "examples") or isinstance(value, (list, dict)):
                    continue
                lines.append(f"  {sub}: {_show_value(value)}")
            lines.extend("  " + _show_example(ex) for ex in finding.get("examples", [])[:examples])
            for sub, value in finding.items():
                if isinstance(value, dict) and "count" in value:
                    lines.append(f"  {sub}: {value['count']:,} - {value['what']}")
                    lines.extend("    " + _show_example(ex) for ex in value.get("examples", [])[:examples])
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike) -> None:
        data = self.to_text() if os.fspath(path).endswith(".txt") else self.to_json()
        write_atomic(path, data.encode("utf-8"))

    def __repr__(self) -> str:
        counts = {k: v["count"] for k, v in self.findings.items() if isinstance(v, dict) and "count" in v}
        return f"<AuditReport {self.name} {counts}>"


def audit(tok, corpus=None, *, embeddings=None, embedding_tensor: str | None = None, name: str | None = None,
          max_examples: int = 20, top: int = 50) -> AuditReport:
    """Audits ``tok`` (a tokenizer, or a path for ``toksmith.load``).

    - ``corpus``: texts (list of str) or a corpus spec (``"udhr"``, a path) for ``never_emitted``.
    - ``embeddings``: a matrix (rows = ids), or a ``.npy`` / ``.safetensors`` path, to rank
      under-trained candidates; the known-unused reference rows are the unreachable tokens and
      the tokens never emitted on ``corpus``.
    """
    spec = tok
    tok = load_tokenizer(tok)
    name = name or display_name(tok, spec)
    tokens = ordinary_tokens(tok)
    size = vocab_size(tok)
    findings: dict = {"vocab_size": size, "ordinary_tokens": len(tokens)}
    findings["missing_ids"] = _missing_ids(tok, tokens, size, max_examples)
    findings["invalid_utf8"] = _invalid_utf8(tokens, max_examples)
    findings["unreachable"] = _unreachable(tok, tokens, max_examples)
    findings["merges"] = _merges(tok, tokens, max_examples)
    findings["special_tokens"] = _specials(tok, size, max_examples)
    never: list[int] = []
    if corpus is not None:
        findings["never_emitted"], never = _never_emitted(tok, tokens, corpus, max_examples)
    if embeddings is not None:
        findings["embeddings"] = _embedding_candidates(tok, tokens, embeddings, embedding_tensor, size,
                                                       findings["unreachable"]["ids"] + never, top)
    return AuditReport(name, findings)


def _finding(what: str, found: list[int], tokens: dict[int, bytes], max_examples: int, **extra) -> dict:
    return {
        "what": what,
        "count": len(found),
        **extra,
        "examples": [token_example(i, tokens[i]) for i in found[:max_examples]],
    }


def _missing_ids(tok, tokens, size, max_examples) -> dict:
    specials = set(special_ids(tok).values())
    holes = [i for i in range(size) if i not in tokens and i not in specials]
    return {"what": "ids below vocab_size that hold no token", "count": len(holes),
            "examples": [{"id": i} for i in holes[:max_examples]]}


def _invalid_utf8(tokens: dict[int, bytes], max_examples: int) -> dict:
    bad = []
    for i, data in tokens.items():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(i)
    return _finding("tokens whose bytes are not valid UTF-8 on their own", bad, tokens, max_examples)


def _unreachable(tok, tokens: dict[int, bytes], max_examples: int) -> dict:
    only_in_context: list[tuple[int, str]] = []
    unreachable: list[int] = []
    for i, data in tokens.items():
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # cannot be written as text on its own; see invalid_utf8
        if list(tok.encode_ordinary(text)) == [i]:
            continue
        for prefix, suffix in CONTEXTS:
            if i in tok.encode_ordinary(prefix + text + suffix):
                only_in_context.append((i, prefix + "{token}" + suffix))
                break
        else:
            unreachable.append(i)
    finding = _finding(
        "tokens that encoding their own text never produces, alone or in context", unreachable, tokens, max_examples,
        ids=unreachable,
    )
    finding["only_in_context"] = {
        "what": "tokens produced in context but not when their text is encoded alone",
        "count": len(only_in_context),
        "examples": [token_example(i, tokens[i], context=c) for i, c in only_in_context[:max_examples]],
    }
    return finding


def _merges(tok, tokens: dict[int, bytes], max_examples: int) -> dict:
    merges = getattr(tok, "merges", None)
    if merges is None:
        return {"what": "merge checks (the tokenizer exposes no merges)", "count": 0, "checked": False}
    vocab = set(tokens.values())
    missing_part, missing_result, repeated = [], [], []
    seen: set[tuple[bytes, bytes]] = set()
    results: set[bytes] = set()
    for rank, (left, right) in enumerate(merges):
        left, right = bytes(left), bytes(right)
        pair = (left, right)
        if pair in seen:
            repeated.append({"rank": rank, "left": show_bytes(left), "right": show_bytes(right)})
        seen.add(pair)
        if left not in vocab or right not in vocab:
            missing_part.append({"rank": rank, "left": show_bytes(left), "right": show_bytes(right)})
        if left + right not in vocab:
            missing_result.append({"rank": rank, "left": show_bytes(left), "right": show_bytes(right),
                                   "result": show_bytes(left + right)})
        results.add(left + right)
    # Base symbols: single bytes, and single characters (for character-level BPE vocabularies).
    underivable = [i for i, data in tokens.items() if len(data) > 1 and data not in results and not _one_char(data)]
    return {
        "what": "merge problems",
        "count": len(missing_part) + len(missing_result) + len(repeated) + len(underivable),
        "checked": True,
        "merges": len(merges),
        "result_not_in_vocab": {"what": "merges whose result is not a token", "count": len(missing_result),
                                "examples": missing_result[:max_examples]},
        "part_not_in_vocab": {"what": "merges with a part that is not a token", "count": len(missing_part),
                              "examples": missing_part[:max_examples]},
        "repeated": {"what": "merges listed more than once", "count": len(repeated), "examples": repeated[:max_examples]},
        "not_derived": {"what": "multi-character tokens that no merge produces", "count": len(underivable),
                        "examples": [token_example(i, tokens[i]) for i in underivable[:max_examples]]},
    }


def _one_char(data: bytes) -> bool:
    try:
        return len(data.decode("utf-8")) == 1
    except UnicodeDecodeError:
        return False


def _specials(tok, size: int, max_examples: int) -> dict:
    specials = special_ids(tok)
    by_id = Counter(specials.values())
    repeated = [{"id": i, "tokens": sorted(s for s, j in specials.items() if j == i)} for i, n in by_id.items() if n > 1]
    out_of_range = [{"token": s, "id": i} for s, i in specials.items() if not 0 <= i < size]
    empty = [{"token": s, "id": i} for s, i in specials.items() if not s]
    single = []
    for s, i in specials.items():
        if not s:
            continue
        ids = list(tok.encode_ordinary(s))
        if len(ids) == 1:
            single.append({"token": s, "special_id": i, "ordinary_id": ids[0], "same_id": ids[0] == i})
    problems = repeated + out_of_range + empty + single
    return {
        "what": "special-token problems",
        "count": len(problems),
        "special_tokens": len(specials),
        "repeated_ids": {"what": "ids given to more than one special token", "count": len(repeated), "examples": repeated[:max_examples]},
        "out_of_range": {"what": "special ids outside 0..vocab_size-1", "count": len(out_of_range), "examples": out_of_range[:max_examples]},
        "empty": {"what": "empty special-token strings", "count": len(empty), "examples": empty[:max_examples]},
        "ordinary_single_token": {
            "what": "special strings that plain text also encodes to one ordinary token",
            "count": len(single), "examples": single[:max_examples],
        },
    }


def _corpus_texts(corpus) -> list[str]:
    if isinstance(corpus, (list, tuple)) and all(isinstance(t, str) for t in corpus):
        return list(corpus)
    from .corpora import load_corpus

    loaded = load_corpus(corpus, "all") if corpus != "udhr" else load_corpus(corpus)
    return [t for doc in loaded.documents.values() for t in doc.segments.values()]


def _never_emitted(tok, tokens: dict[int, bytes], corpus, max_examples: int) -> tuple[dict, list[int]]:
    texts = _corpus_texts(corpus)
    used: set[int] = set()
    n_tokens = 0
    for text in texts:
        ids = tok.encode_ordinary(text)
        used.update(ids)
        n_tokens += len(ids)
    never = [i for i in tokens if i not in used]
    # Examples from the highest ids down: the last merges, the likeliest glitch tokens.
    finding = _finding(
        "tokens never emitted on the corpus (examples: highest ids first)", never[::-1], tokens, max_examples,
        corpus_texts=len(texts), corpus_tokens=n_tokens, share=len(never) / len(tokens) if tokens else 0.0,
    )
    return finding, never


def _embedding_candidates(tok, tokens, embeddings, tensor, size, reference, top) -> dict:
    from .embeddings import load_embeddings, rank_undertrained

    if isinstance(embeddings, (str, os.PathLike)):
        matrix = load_embeddings(embeddings, tensor, vocab_size=size)
    else:
        matrix = embeddings
    if not hasattr(matrix, "shape") or len(matrix.shape) != 2:
        raise AnalysisError("embeddings must be a 2-D matrix (tokens x dimensions) or a .npy/.safetensors path")
    rows = matrix.shape[0]
    if rows < max(tokens, default=-1) + 1:
        raise AnalysisError(
            f"the embedding matrix has {rows} rows but the tokenizer has ids up to {max(tokens)}; "
            f"is it the matrix of another model?"
        )
    names = {i: show_bytes(b) for i, b in tokens.items()}
    specials = set(special_ids(tok).values())
    # Rows past the vocabulary (padding) are untrained by construction: not candidates.
    exclude = specials | set(range(size, rows)) | {i for i in range(min(size, rows)) if i not in tokens}
    candidates = rank_undertrained(matrix, names, [i for i in reference if i < rows], top=top, exclude=exclude)
    return {
        "what": "tokens whose embedding rows look untrained (small norm, similar to known-unused rows)",
        "count": len(candidates),
        "matrix_shape": list(matrix.shape),
        "reference_rows": len(set(reference)),
        "method": "norm+cosine" if reference else "norm only (no known-unused rows: pass a corpus)",
        "examples": candidates,
    }
