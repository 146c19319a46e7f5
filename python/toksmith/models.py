"""Inference models of the general pipeline: each turns pre-tokenized words into ids.

Every model here works on strings, as Hugging Face's do: a word is encoded on its own, and
the vocabulary maps token strings to ids. The loops run in Rust (``rust/models/``).

Common interface: ``encode_words(words) -> list[int]`` (ids of all words, concatenated),
``token_to_id(token)``, ``id_to_token(id)``, ``get_vocab()``, ``vocab_size``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from . import _core
from ._pickling import RustBacked
from .errors import FormatError


class _VocabModel(RustBacked):
    """Vocabulary bookkeeping shared by the models: token string <-> id."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self._vocab = dict(vocab)
        self._tokens = {i: t for t, i in self._vocab.items()}
        if len(self._tokens) != len(self._vocab):
            seen: dict[int, str] = {}
            for t, i in self._vocab.items():
                if i in seen:
                    raise FormatError(f"tokens {seen[i]!r} and {t!r} share the id {i}; every token needs its own id")
                seen[i] = t

    @property
    def vocab_size(self) -> int:
        return max(self._tokens, default=-1) + 1

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    def token_to_id(self, token: str) -> int | None:
        return self._vocab.get(token)

    def id_to_token(self, id: int) -> str | None:
        return self._tokens.get(id)


SPACE = "\u2581"  # ▁, SentencePiece's visible space


def word_split_pattern(tokens: Iterable[str]) -> str:
    """A regex that cuts SentencePiece-style text (spaces as ``▁``) into words that BPE encodes
    one by one to the same ids as the whole text.

    BPE merges only ever make tokens of the vocabulary (``tokens``: those merges can make). A
    token spanning the point before a ``▁`` that follows a character ``c`` other than ``▁``
    contains ``c▁``. So where no token has ``c▁`` inside, no merge crosses that point, and the
    text is cut there: a word is a run of ``▁`` and what follows up to the next such point.
    Words repeat, so the Rust model's cache answers most of them. SentencePiece's default
    ``split_by_whitespace`` keeps such tokens out; Gemma 3 has one, ``>▁</``, so its text is
    not cut between ``>`` and ``▁``.

    >>> word_split_pattern(["▁▁the", "a"]) == f"{SPACE}*[^{SPACE}]+|{SPACE}+"
    True
    >>> import re
    >>> re.findall(word_split_pattern(["a▁b"]), "▁x▁ya▁b▁▁z")
    ['▁x', '▁ya▁b', '▁▁z']
    """
    joined = sorted({t[k - 1] for t in tokens for k in range(1, len(t)) if t[k] == SPACE and t[k - 1] != SPACE})
    if not joined:
        # Rust runs this exact pattern by hand (rust/pretokenize: SPACE_WORDS_PATTERN).
        return f"{SPACE}*[^{SPACE}]+|{SPACE}+"
    # Hex escapes: the same in Python's re and Rust's regex, whatever the character.
    cls = "".join(f"\\U{ord(c):08X}" for c in joined)
    return f"{SPACE}*(?:[{cls}]{SPACE}*|[^{SPACE}{cls}])+|{SPACE}+"


class BPE(_VocabModel):
    """BPE over characters of the word strings (Hugging Face's ``BPE`` model).

    For byte-level tokenizers the pre-tokenizer maps bytes to printable characters (``Ġ``),
    so this is byte-level BPE too.

    >>> m = BPE({"a": 0, "b": 1, "ab": 2}, [("a", "b")])
    >>> m.encode_words(["abab", "b"])
    [2, 2, 1]
    """

    def __init__(
        self,
        vocab: dict[str, int],
        merges: Sequence[tuple[str, str]],
        *,
        unk_token: str | None = None,
        byte_fallback: bool = False,
        fuse_unk: bool = False,
        continuing_subword_prefix: str | None = None,
        end_of_word_suffix: str | None = None,
        ignore_merges: bool = False,
        split_pattern: str | None = None,
    ) -> None:
        """``split_pattern``: a regex that cuts a text into words for :meth:`encode_text` (each
        match is a word; the Rust model caches the ids of words it has seen)."""
        super().__init__(vocab)
        self.merges = [tuple(m) for m in merges]
        self.split_pattern = split_pattern
        self.options = dict(unk_token=unk_token, byte_fallback=byte_fallback, fuse_unk=fuse_unk,
                            continuing_subword_prefix=continuing_subword_prefix,
                            end_of_word_suffix=end_of_word_suffix, ignore_merges=ignore_merges)
        self._make_rust()

    _RUST_FIELDS = ("_core",)

    def _make_rust(self) -> None:
        try:
            merge_ids = [(self._vocab[a], self._vocab[b]) for a, b in self.merges]
        except KeyError as e:
            raise FormatError(f"a merge names the token {e.args[0]!r}, which is not in the vocabulary") from None
        options = dict(self.options)
        unk_token = options.pop("unk_token")
        unk = None
        if unk_token is not None:
            unk = self._vocab.get(unk_token)
            if unk is None:
                raise FormatError(f"the unknown token {unk_token!r} is not in the vocabulary")
        self._core = _core.BpeModel(
            [(i, t.encode("utf-8")) for t, i in self._vocab.items()], merge_ids, self.split_pattern, [],
            level="char", unk=unk, **options,
        )

    def encode_words(self, words: Iterable[str]) -> list[int]:
        return self._core.encode_words(list(words))

    def encode_words_batch(self, batch: list[list[str]], num_threads: int | None = None) -> list[list[int]]:
        """``encode_words`` of each list of words: with a ``split_pattern``, all on ``num_threads``
        Rust threads at once; without, one list after the other."""
        if self.split_pattern is None:
            return [self.encode_words(words) for words in batch]
        flat = [w for words in batch for w in words]
        encoded = self.encode_texts(flat, num_threads)
        out, k = [], 0
        for words in batch:
            ids: list[int] = []
            for ids_of_word in encoded[k:k + len(words)]:
                ids.extend(ids_of_word)
            out.append(ids)
            k += len(words)
        return out

    def encode_text(self, text: str) -> list[int]:
        """The ids of ``text`` cut into words by ``split_pattern`` (one word without one)."""
        return self._core.encode_ordinary(text)

    def encode_texts(self, texts: list[str], num_threads: int | None = None) -> list[list[int]]:
        """``encode_text`` of each text, on ``num_threads`` Rust threads with the GIL released."""
        return self._core.encode_batch(texts, [], num_threads)


class WordPiece(_VocabModel):
    """Greedy longest-match-first WordPiece (BERT).

    >>> m = WordPiece({"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3})
    >>> m.encode_words(["unaffable", "xyz"])
    [1, 2, 3, 0]
    """

    def __init__(self, vocab: dict[str, int], *, unk_token: str = "[UNK]", continuing_subword_prefix: str = "##",
                 max_input_chars_per_word: int = 100) -> None:
        super().__init__(vocab)
        self.unk_token = unk_token
        self.continuing_subword_prefix = continuing_subword_prefix
        self.max_input_chars_per_word = max_input_chars_per_word
        self._make_rust()

    _RUST_FIELDS = ("_core",)

    def _make_rust(self) -> None:
        self._core = _core.WordPieceModel(list(self._vocab.items()), self.unk_token, self.continuing_subword_prefix,
                                          self.max_input_chars_per_word)

    def encode_words(self, words: Iterable[str]) -> list[int]:
        return self._core.encode_words(list(words))

    def encode_words_batch(self, batch: list[list[str]], num_threads: int | None = None) -> list[list[int]]:
        """``encode_words`` of each list of words, on ``num_threads`` Rust threads at once."""
        return self._core.encode_words_batch(batch, num_threads)


class Unigram(_VocabModel):
    """Unigram LM: Viterbi over piece log probabilities (SentencePiece, Hugging Face ``Unigram``).

    ``pieces`` is the list of ``(piece, score)`` in id order. ``exclude`` lists ids the lattice must
    never use (control symbols, unused pieces).

    >>> m = Unigram([("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("ab", -1.5)], unk_id=0)
    >>> m.encode_words(["abx"])
    [3, 0]
    """

    def __init__(self, pieces: Sequence[tuple[str, float]], *, unk_id: int | None = None, byte_fallback: bool = False,
                 fuse_unk: bool = True, exclude: Iterable[int] = (), float32_scores: bool = False) -> None:
        super().__init__(_first_ids(pieces))
        self.pieces = [(p, float(s)) for p, s in pieces]
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self.exclude = frozenset(exclude)
        self.fuse_unk = fuse_unk
        self.float32_scores = float32_scores
        self._make_rust()

    _RUST_FIELDS = ("_core",)

    def _make_rust(self) -> None:
        skip = set(self.exclude) | ({self.unk_id} if self.unk_id is not None else set())
        lattice = [(p, i, s) for i, (p, s) in enumerate(self.pieces) if i not in skip]
        self._core = _core.UnigramModel(lattice, self.unk_id, self.byte_fallback, self.fuse_unk, self.float32_scores)

    def id_to_token(self, id: int) -> str | None:
        return self.pieces[id][0] if 0 <= id < len(self.pieces) else None

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def encode_words(self, words: Iterable[str]) -> list[int]:
        return self._core.encode_words(list(words))

    def encode_words_batch(self, batch: list[list[str]], num_threads: int | None = None) -> list[list[int]]:
        """``encode_words`` of each list of words, on ``num_threads`` Rust threads at once."""
        return self._core.encode_words_batch(batch, num_threads)


def _first_ids(pieces: Sequence[tuple[str, float]]) -> dict[str, int]:
    """Piece -> id for vocabularies where a piece string repeats (the first id wins)."""
    out: dict[str, int] = {}
    for i, (p, _) in enumerate(pieces):
        out.setdefault(p, i)
    return out


class WordLevel(_VocabModel):
    """One id per whole word; unknown words become ``unk_token``.

    >>> WordLevel({"hello": 0, "[UNK]": 1}, unk_token="[UNK]").encode_words(["hello", "world"])
    [0, 1]
    """

    def __init__(self, vocab: dict[str, int], *, unk_token: str | None = None) -> None:
        super().__init__(vocab)
        self.unk_token = unk_token
        if unk_token is not None and unk_token not in self._vocab:
            raise FormatError(f"the unknown token {unk_token!r} is not in the vocabulary")

    def encode_words(self, words: Iterable[str]) -> list[int]:
        out = []
        for w in words:
            i = self._vocab.get(w)
            if i is None:
                if self.unk_token is None:
                    from .errors import EncodeError

                    raise EncodeError(f"the word {w!r} is not in the vocabulary and the model has no unk_token")
                i = self._vocab[self.unk_token]
            out.append(i)
        return out
