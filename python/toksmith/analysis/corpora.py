"""Parallel corpora for comparing tokenizers across languages.

A :class:`ParallelCorpus` maps language codes to :class:`Document` objects whose ``segments``
(``{key: text}``) are aligned by key across languages: UDHR articles (``"preamble"``,
``"1"`` ... ``"30"``) or line numbers of FLORES-style files.

>>> corpus = ParallelCorpus("toy", [Document("eng", {"1": "Hello"}), Document("fra", {"1": "Bonjour"})])
>>> corpus.codes
['eng', 'fra']
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from ._common import AnalysisError
from .metrics import detect_script, word_rule_for_script

#: The languages ``load_corpus("udhr")`` takes by default: 18 languages in 15 scripts.
DEFAULT_LANGUAGES = (
    "eng", "fra", "deu_1996", "spa", "rus", "ell_monotonic", "heb", "arb", "hin", "ben", "tam",
    "amh", "kor", "cmn_hans", "jpn", "tha", "khm", "mya",
)

#: Common ISO 639-3 codes that UDHR spells with a variant suffix.
UDHR_ALIASES = {
    "deu": "deu_1996", "ell": "ell_monotonic", "por": "por_PT", "pes": "pes_1", "fas": "pes_1",
    "zho": "cmn_hans", "cmn": "cmn_hans", "ara": "arb", "msa": "mly_latn", "zlm": "mly_latn",
}

_OPENERS = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}


class Document:
    """One language's side of a parallel corpus.

    ``script`` is detected from the text when not given; ``word_rule`` follows from the script
    ("characters" for scripts written without spaces, else "whitespace").
    """

    def __init__(self, code: str, segments: dict[str, str], *, name: str | None = None, script: str | None = None,
                 word_rule: str | None = None) -> None:
        self.code = code
        self.segments = {str(k): v for k, v in segments.items() if isinstance(v, str) and v.strip()}
        self.name = name or code
        self._script = script
        self._word_rule = word_rule

    @property
    def script(self) -> str:
        """The dominant Unicode script, detected from the text on first use."""
        if self._script is None:
            self._script = detect_script(self.text)
        return self._script

    @property
    def word_rule(self) -> str:
        return self._word_rule or word_rule_for_script(self.script)

    @property
    def text(self) -> str:
        return "\n".join(self.segments.values())

    def __repr__(self) -> str:
        return f"<Document {self.code} {self.script} segments={len(self.segments)}>"


class ParallelCorpus:
    """Documents aligned by segment key, keyed by language code (in the order given)."""

    def __init__(self, name: str, documents: Iterable[Document]) -> None:
        self.name = name
        self.documents: dict[str, Document] = {}
        for doc in documents:
            if doc.code in self.documents:
                raise AnalysisError(f"corpus {name!r} has two documents for language {doc.code!r}; keep one")
            self.documents[doc.code] = doc
        if not self.documents:
            raise AnalysisError(f"corpus {name!r} has no documents")

    @property
    def codes(self) -> list[str]:
        return list(self.documents)

    def __getitem__(self, code: str) -> Document:
        return self.documents[code]

    def __len__(self) -> int:
        return len(self.documents)

    def resolve(self, code: str) -> str:
        """The corpus's code for ``code``: itself, a UDHR alias (``deu`` -> ``deu_1996``), or the one
        code that starts with ``code`` followed by ``_``, ``-`` or ``.`` (``eng`` -> ``eng_Latn``)."""
        if code in self.documents:
            return code
        alias = UDHR_ALIASES.get(code)
        if alias in self.documents:
            return alias
        prefixed = [c for c in self.documents if c.split(".")[0].split("_")[0].split("-")[0] == code]
        if len(prefixed) == 1:
            return prefixed[0]
        similar = [c for c in self.documents if c[:3] == code[:3]]
        if prefixed:
            hint = f"it matches {prefixed}; pick one"
        elif similar:
            hint = f"similar codes: {_preview(similar)}"
        else:
            hint = f"available: {_preview(self.codes)}"
        raise AnalysisError(f"language {code!r} is not in corpus {self.name!r}; {hint}")

    def select(self, codes: Sequence[str] | None) -> "ParallelCorpus":
        """A corpus with only ``codes`` (resolved as by :meth:`resolve`), in that order; ``None`` or
        ``"all"`` keep every language."""
        if codes is None or (isinstance(codes, str) and codes == "all"):
            return self
        if isinstance(codes, str):
            codes = [c for c in codes.replace(",", " ").split() if c]
        chosen = []
        for code in codes:
            resolved = self.resolve(code)
            if resolved not in chosen:
                chosen.append(resolved)
        return ParallelCorpus(self.name, [self.documents[c] for c in chosen])

    def __repr__(self) -> str:
        return f"<ParallelCorpus {self.name} languages={len(self)}>"


def data_dir() -> Path:
    """The shared data directory: ``$TOKSMITH_DATA_DIR``, else ``<repository>/../shared/data``."""
    env = os.environ.get("TOKSMITH_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "data"


def udhr_path() -> Path:
    return data_dir() / "corpora" / "udhr" / "udhr.jsonl.xz"


def load_corpus(spec, languages: Sequence[str] | None = None) -> ParallelCorpus:
    """Loads a parallel corpus.

    - ``"udhr"``: the Universal Declaration of Human Rights from the shared data directory
      (see :func:`data_dir`); ``languages`` defaults to :data:`DEFAULT_LANGUAGES`.
      ``languages="all"`` takes every declaration.
    - a ``.jsonl`` file (optionally ``.xz``/``.gz``/``.bz2``) with the UDHR schema;
    - a directory with one file per language, aligned by line (FLORES style); the language code
      is the file name up to its first dot (``eng_Latn.devtest`` -> ``eng_Latn``);
    - any other file: one language, aligned by line, its code the file name up to the first dot.

    A :class:`ParallelCorpus` is returned unchanged (narrowed to ``languages`` if given).
    """
    if isinstance(spec, ParallelCorpus):
        return spec.select(languages)
    if spec == "udhr":
        path = udhr_path()
        if not path.is_file():
            raise AnalysisError(
                f"the UDHR corpus is not at {path}. Set TOKSMITH_DATA_DIR to the shared data directory "
                f"(the one holding corpora/udhr/udhr.jsonl.xz), or pass a corpus path"
            )
        corpus = _load_udhr_jsonl(path, "udhr")
        if languages is None:
            languages = DEFAULT_LANGUAGES
    elif isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        if path.is_dir():
            corpus = _load_line_aligned_dir(path)
        elif path.is_file():
            if _strip_compression(path.name).endswith(".jsonl"):
                corpus = _load_udhr_jsonl(path, path.name.split(".")[0])
            else:
                corpus = ParallelCorpus(path.name, [_line_document(path)])
        else:
            raise AnalysisError(f"corpus {os.fspath(spec)!r} is not 'udhr', a file or a directory")
    else:
        raise AnalysisError(f"cannot use a {type(spec).__name__} as a corpus; pass 'udhr', a path or a ParallelCorpus")
    if isinstance(languages, str) and languages == "all":
        return corpus
    return corpus.select(languages)


def _preview(codes: list[str], n: int = 12) -> str:
    return ", ".join(codes[:n]) + (f", ... ({len(codes)} in all)" if len(codes) > n else "")


def _strip_compression(name: str) -> str:
    for suffix in _OPENERS:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _open_text(path: Path):
    opener = _OPENERS.get(path.suffix, open)
    try:
        return opener(path, "rt", encoding="utf-8", errors="replace", newline="")
    except OSError as e:
        raise AnalysisError(f"cannot read {path}: {e}") from None


def _load_udhr_jsonl(path: Path, name: str) -> ParallelCorpus:
    docs = []
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                code, articles = row["code"], row["articles"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise AnalysisError(
                    f"{path}:{lineno} is not a UDHR-style record (a JSON object with 'code' and 'articles')"
                ) from None
            if not isinstance(articles, dict):
                raise AnalysisError(f"{path}:{lineno}: 'articles' must be an object of article -> text")
            # The metadata's script is upper case ("MYANMAR"); detection gives the Unicode name,
            # which the word rule uses, so the text decides and the two cannot disagree.
            docs.append(Document(code, articles, name=row.get("name")))
    return ParallelCorpus(name, docs)


def _line_document(path: Path) -> Document:
    with _open_text(path) as f:
        lines = f.read().split("\n")
    code = path.name.split(".")[0]
    return Document(code, {str(i): line.rstrip("\r") for i, line in enumerate(lines, 1)})


def _load_line_aligned_dir(path: Path) -> ParallelCorpus:
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise AnalysisError(f"{path} holds no files; a FLORES-style corpus has one file per language, aligned by line")
    docs = [_line_document(p) for p in files]
    counts = {d.code: len(d.segments) for d in docs}
    # Somewhat uneven files are still usable (comparisons use the line numbers both sides have),
    # but a large difference usually means the files are not aligned at all.
    lo, hi = min(counts.values()), max(counts.values())
    if lo < 0.5 * hi:
        raise AnalysisError(
            f"the files in {path} are not aligned by line: non-empty line counts range from {lo} to {hi} "
            f"({counts}). Each file must hold the same sentences, one per line"
        )
    return ParallelCorpus(path.name, docs)
