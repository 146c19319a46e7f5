"""The Tokenizer object: encode, decode, save and load a byte-level BPE tokenizer.

One string's path through ``encode``: special tokens the caller allowed are cut out
(``rust/special.rs``), the rest is split into chunks by the pre-tokenization regex
(``rust/pretokenize.rs``), and each chunk's bytes are merged, lowest rank first
(``rust/models/bpe.rs``).
"""

from __future__ import annotations

import codecs
import json
import operator
import os
import re
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Literal

from . import _core
from ._io import write_atomic
from .byte_level import bytes_to_token, token_to_bytes
from .decoders import byte_of_token
from .errors import DecodeError, EncodeError, FormatError, InvalidPatternError, SpecialTokenError
from .tiktoken_api import TiktokenMethods

FORMAT_NAME = "toksmith"
FORMAT_VERSION = 1

AllowedSpecial = Literal["all"] | Collection[str]


class Tokenizer(TiktokenMethods):
    """A byte-level BPE tokenizer.

    Build one with :func:`toksmith.train` or :func:`toksmith.load`.

    >>> tok = toksmith.train(["low lower lowest"] * 10, vocab_size=260, pattern="gpt2")  # doctest: +SKIP
    >>> tok.decode(tok.encode("lowest"))  # doctest: +SKIP
    'lowest'
    """

    def __init__(
        self,
        *,
        tokens: dict[int, bytes],
        merges: Sequence[tuple[int, int]] | None,
        pattern: str,
        pattern_name: str | None = None,
        special_tokens: dict[str, int] | None = None,
        metadata: dict | None = None,
    ) -> None:
        from .patterns import is_name, resolve

        if is_name(pattern):
            # A name ("gpt2", "o200k"), as train() takes it: as a regex it would match only itself.
            pattern_name, pattern = resolve(pattern)
        self.pattern = pattern
        self.pattern_name = pattern_name
        self.special_tokens: dict[str, int] = dict(special_tokens or {})
        self.metadata = dict(metadata or {})
        tokens = dict(tokens)
        # merges=None: tiktoken-style ranks, where a token's id is its merge priority.
        self.uses_ranks = merges is None
        if self.uses_ranks:
            self._model = _core.BpeModel.from_ranks(list(tokens.items()), pattern, list(self.special_tokens.items()))
            self._merges = None
        else:
            self._merges = [tuple(m) for m in merges]
            self._model = _core.BpeModel(
                list(tokens.items()), self._merges, pattern, list(self.special_tokens.items())
            )
        self._tokens_cache: dict[int, bytes] | None = tokens
        self._id_of_bytes_cache: dict[bytes, int] | None = None
        self._special_regex_cache: dict[frozenset[str], re.Pattern[str]] = {}
        self._pipeline = None

    @classmethod
    def _from_ranks_model(cls, model, *, pattern: str, pattern_name: str | None, special_tokens: dict[str, int],
                          metadata: dict) -> "Tokenizer":
        """Wraps a ranks model built in Rust (e.g. read from a .tiktoken file); the Python-side
        vocabulary tables are filled only when asked for, so loading stays fast and small."""
        self = cls.__new__(cls)
        self._model, self._merges, self.uses_ranks, self._pipeline = model, None, True, None
        self.pattern, self.pattern_name = pattern, pattern_name
        self.special_tokens, self.metadata = dict(special_tokens), dict(metadata)
        self._tokens_cache, self._id_of_bytes_cache = None, None
        self._special_regex_cache = {}
        return self

    @classmethod
    def _from_merges_model(cls, model, *, pattern: str, pattern_name: str | None,
                           special_tokens: dict[str, int], metadata: dict) -> "Tokenizer":
        """Wraps a merges model built in Rust (e.g. by the trainer); its merges (id pairs) and
        the id -> bytes table are fetched from Rust when first needed."""
        self = cls._from_ranks_model(model, pattern=pattern, pattern_name=pattern_name,
                                     special_tokens=special_tokens, metadata=metadata)
        self.uses_ranks = False
        return self

    # Pickling (see _pickling.py): a BPE tokenizer run in Rust is made again from its tokens and
    # merges (or ranks); a pipeline's parts make their own Rust models again.
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if state.pop("_model", None) is not None:
            state["_tokens_cache"] = self._tokens
            if not self.uses_ranks:
                state["_merges"] = self._merges if self._merges is not None else [tuple(m) for m in self._model.merge_list()]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._model = None
        if self._pipeline is None:
            tokens, specials = list(self._tokens_cache.items()), list(self.special_tokens.items())
            self._model = (_core.BpeModel.from_ranks(tokens, self.pattern, specials) if self.uses_ranks
                           else _core.BpeModel(tokens, self._merges, self.pattern, specials))

    @property
    def _tokens(self) -> dict[int, bytes]:
        """id -> bytes of every ordinary token (fetched from Rust on first use)."""
        if self._tokens_cache is None:
            self._tokens_cache = dict(self._model.tokens()) if self._model is not None else {}
        return self._tokens_cache

    @property
    def _id_of_bytes(self) -> dict[bytes, int]:
        if self._id_of_bytes_cache is None:
            self._id_of_bytes_cache = {b: i for i, b in self._tokens.items()}
        return self._id_of_bytes_cache

    @classmethod
    def from_pipeline(cls, pipeline, *, metadata: dict | None = None) -> "Tokenizer":
        """A tokenizer that runs a general :class:`toksmith.pipeline.Pipeline` (loaded formats)."""
        self = cls.__new__(cls)
        self._pipeline = pipeline
        self._tokens_cache, self._merges, self._model, self._id_of_bytes_cache = {}, None, None, {}
        self.pattern, self.pattern_name, self.uses_ranks = None, None, False
        self.special_tokens = pipeline.special_tokens
        self.metadata = dict(metadata or {})
        self._special_regex_cache = {}
        return self

    @property
    def pipeline(self):
        """The general pipeline, or None for byte-level BPE run entirely in Rust."""
        return self._pipeline

    # ------------------------------------------------------------------ properties

    @property
    def vocab_size(self) -> int:
        """Number of ids: ordinary tokens plus special tokens (ids run from 0 to vocab_size - 1)."""
        if self._pipeline is not None:
            return self._pipeline.vocab_size
        return self._model.vocab_len()

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The merges in rank order, as pairs of token bytes."""
        if self._pipeline is not None:
            model = self._pipeline.model
            # Byte-level vocabularies spell bytes as printable characters ("Ġ" is a space).
            to_bytes = token_to_bytes if self._pipeline.fast is not None else str.encode
            return [(to_bytes(a), to_bytes(b)) for a, b in getattr(model, "merges", [])]
        return [(self._tokens[a], self._tokens[b]) for a, b in self._merge_ids()]

    def _merge_ids(self) -> list[tuple[int, int]]:
        if self._merges is None:
            if self.uses_ranks:  # derived once from the ranks
                self._merges = [tuple(m) for m in self._model.derive_merges()]
            else:  # a merges model built in Rust (see _from_merges_model)
                self._merges = self._model.merge_list()
        return self._merges

    def __repr__(self) -> str:
        if self._pipeline is not None:
            kind = type(self._pipeline.model).__name__
            return f"<toksmith.Tokenizer {kind} vocab_size={self.vocab_size} specials={len(self.special_tokens)}>"
        name = self.pattern_name or "custom"
        return f"<toksmith.Tokenizer bpe vocab_size={self.vocab_size} pattern={name} specials={len(self.special_tokens)}>"

    # ------------------------------------------------------------------ encoding

    def encode(
        self,
        text: str,
        *,
        allowed_special: AllowedSpecial = frozenset(),
        disallowed_special: AllowedSpecial = "all",
        add_special_tokens: bool = True,
        dropout: float | None = None,
        seed: int | None = None,
        dropout_mode: str = "all",
        alpha: float | None = None,
        nbest_size: int = -1,
    ) -> list[int]:
        """Encodes ``text`` into ids.

        Special tokens are safe by default, as in tiktoken: a special-token string in ``text``
        raises :class:`SpecialTokenError` unless it is in ``allowed_special`` (then it becomes its
        id) or left out of ``disallowed_special`` (then it is encoded as plain text).
        ``add_special_tokens``: for loaded tokenizers with a post-processor (BERT's ``[CLS]``,
        Llama's ``<s>``), whether to add its template tokens.
        ``alpha`` (Unigram models): sample a segmentation for subword regularization, from the
        ``nbest_size`` best ones (``-1``: from all of them), with probabilities ~ p^alpha.
        ``dropout``: BPE-dropout, a training-time augmentation: every merge step skips each
        candidate merge with this probability (``dropout_mode="superword"``: only merges whose
        token spans whitespace, for SuperBPE). ``seed`` makes it reproducible.
        """
        if alpha is not None:
            # Subword regularization for Unigram models: a sampled segmentation.
            from .train_subword import unigram_sample

            return unigram_sample(self, text, alpha=alpha, nbest_size=nbest_size, seed=seed,
                                  allowed_special=allowed_special, disallowed_special=disallowed_special,
                                  add_special_tokens=add_special_tokens)
        allowed = self._check_specials(text, allowed_special, disallowed_special)
        if dropout is not None:
            return self._encode_dropout(text, allowed, dropout, seed, dropout_mode)
        if self._pipeline is not None:
            return self._pipeline.encode(_valid_text(text), allowed_special=allowed, add_special_tokens=add_special_tokens)
        with _text_errors():
            return self._model.encode(text, [self.special_tokens[s] for s in allowed])

    def _encode_dropout(self, text: str, allowed: frozenset[str], p: float, seed: int | None, mode: str) -> list[int]:
        if self._pipeline is not None:
            raise EncodeError("dropout is available for byte-level BPE tokenizers (trained by toksmith or tiktoken)")
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
            raise EncodeError(f"dropout must be a number between 0 and 1, not {p!r}")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise EncodeError(f"seed must be an int (or None for a random one), not {seed!r}")
        if mode not in ("all", "superword"):
            raise EncodeError(f"dropout_mode must be 'all' or 'superword', not {mode!r}")
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        with _text_errors():
            return self._model.encode_dropout(text, [self.special_tokens[s] for s in allowed], p, seed & (2**64 - 1),
                                              mode == "superword")

    def encode_nbest(self, text: str, n: int, **kwargs) -> list[tuple[list[int], float]]:
        """The ``n`` most likely segmentations of ``text`` (Unigram models), best first, as
        ``(ids, log probability)`` pairs."""
        from .train_subword import unigram_nbest

        return unigram_nbest(self, text, n, **kwargs)

    def encode_ordinary(self, text: str) -> list[int]:
        """Encodes ``text`` treating special-token strings as plain text (no template tokens)."""
        if self._pipeline is not None:
            return self._pipeline.encode(_valid_text(text), add_special_tokens=False)
        if not isinstance(text, str):
            raise EncodeError(f"encode takes a str, not {type(text).__name__}; decode bytes first (e.g. data.decode('utf-8'))")
        with _text_errors():
            return self._model.encode_ordinary(text)

    def encode_batch(
        self,
        texts: Iterable[str],
        *,
        num_threads: int | None = None,
        allowed_special: AllowedSpecial = frozenset(),
        disallowed_special: AllowedSpecial = "all",
        add_special_tokens: bool = True,
    ) -> list[list[int]]:
        """Encodes many texts in parallel (Rust threads, GIL released); same rules as :meth:`encode`.
        Loaded pipelines with Python stages (normalizers other than byte-level BPE's) run those
        stages one text at a time; SentencePiece-style BPE (cut into words, see
        ``models.word_split_pattern``) then encodes the words of all texts on Rust threads, other
        models one text at a time."""
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
            raise EncodeError(f"encode_batch takes a list (or other iterable) of str, not {type(texts).__name__}; "
                              f"for one text use encode()")
        check_threads(num_threads)
        texts = list(texts)
        allowed = self._check_batch_specials(texts, allowed_special, disallowed_special)
        if not texts:
            return []
        if self._pipeline is not None:
            texts = [_valid_text(t) for t in texts]
            with _text_errors():
                return self._pipeline.encode_batch(texts, allowed_special=allowed, add_special_tokens=add_special_tokens,
                                                   num_threads=num_threads)
        with _text_errors():
            return self._model.encode_batch(texts, [self.special_tokens[s] for s in allowed], num_threads)

    # ------------------------------------------------------------------ counting and budgets

    def count(self, text: str, *, allowed_special: AllowedSpecial = frozenset(),
              disallowed_special: AllowedSpecial = "all", add_special_tokens: bool = True) -> int:
        """The number of tokens ``encode`` would give (with the same options), without building
        the list."""
        allowed = self._check_specials(text, allowed_special, disallowed_special)
        if self._pipeline is not None:
            return len(self._pipeline.encode(_valid_text(text), allowed_special=allowed, add_special_tokens=add_special_tokens))
        with _text_errors():
            return self._model.count(text, [self.special_tokens[s] for s in allowed])

    def count_till_limit(self, text: str, limit: int, *, allowed_special: AllowedSpecial = frozenset(),
                         disallowed_special: AllowedSpecial = "all", add_special_tokens: bool = True) -> int | None:
        """The number of tokens (as :meth:`count`) if it is at most ``limit``, else None; encoding
        stops as soon as the limit is passed, so a huge text over a small limit costs little."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise EncodeError(f"limit must be a non-negative int, not {limit!r}")
        allowed = self._check_specials(text, allowed_special, disallowed_special)
        if self._pipeline is not None:
            n = len(self._pipeline.encode(_valid_text(text), allowed_special=allowed, add_special_tokens=add_special_tokens))
            return n if n <= limit else None
        with _text_errors():
            # (A limit past what any text can reach is no limit: the Rust side takes 64 bits.)
            return self._model.count_till_limit(text, [self.special_tokens[s] for s in allowed], min(limit, 2**63))

    def truncate(self, text: str, max_tokens: int, *, allowed_special: AllowedSpecial = frozenset(),
                 disallowed_special: AllowedSpecial = "all", add_special_tokens: bool = True) -> str:
        """The longest prefix of ``text``, cut at a character boundary, that encodes (re-encoded on
        its own, with the same options) to at most ``max_tokens`` tokens.

        A prefix's encoding is not always a prefix of the text's (the pre-tokenizer sees where the
        prefix ends: ``"  a"`` is ``" "`` + ``" a"``, but ``"  "`` alone is one token), and a
        longer prefix can even take fewer tokens than a shorter one. So every cut from the end
        of the text's first ``k - 1`` tokens to the end of its first ``k + 2`` is tried (``k``:
        ``max_tokens`` less the template's tokens), longest first, and the longest that fits is
        kept (a cut further on keeps at least ``k + 1`` of the text's tokens, unless one chunk of
        the pre-tokenizer spans them all and merges differently when cut short: such a cut is
        not looked for). Where tokens are not spans of the text (a normalizer, WordPiece's
        ``##``), the cut is found by bisection on the length of the prefix, then the next 16
        characters are tried: the result fits, and is the longest that fits wherever a longer
        prefix never takes fewer tokens."""
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
            raise EncodeError(f"max_tokens must be a non-negative int, not {max_tokens!r}")
        kwargs = dict(allowed_special=allowed_special, disallowed_special=disallowed_special,
                      add_special_tokens=add_special_tokens)
        if self.count_till_limit(text, max_tokens, **kwargs) is not None:
            return text
        fits = lambda end: self.count_till_limit(text[:end], max_tokens, **kwargs) is not None  # noqa: E731
        template = self.count("", add_special_tokens=add_special_tokens) if self._pipeline is not None else 0
        budget = max_tokens - template  # the text's own tokens
        if budget <= 0:  # (text that takes no token, such as spaces for BERT, may still fit)
            return text[:self._longest_fitting(fits, len(text))] if fits(0) else ""
        # Where the text's own tokens end, in characters, from a prefix long enough that its last
        # chunks, which may encode differently cut short, lie past the tokens needed: not the
        # whole of a long text for a small budget.
        needed, size = budget + 16, max(256, 8 * (budget + 16))
        while True:
            ids = self.encode(text[:size], allowed_special=allowed_special, disallowed_special=disallowed_special,
                              add_special_tokens=False)
            if len(ids) >= needed or size >= len(text):
                break
            size *= 2
        if self._pipeline is not None and self.decode_bytes(ids) != text[:size].encode("utf-8"):
            # Tokens are not spans of the text (a normalizer, WordPiece's "##", a prefix space).
            return text[:self._longest_fitting(fits, len(text))]

        def chars_of(n: int) -> int:  # where the first n tokens end (a split character: before it)
            return min(len(self.decode_bytes(ids[:max(n, 0)]).decode("utf-8", errors="ignore")), len(text))

        low, high = chars_of(budget - 1), chars_of(budget + 2)
        for end in range(high, low - 1, -1):
            if fits(end):
                return text[:end]
        # Nothing in the window fits (added tokens can shift it): the longest prefix below it.
        return text[:self._longest_fitting(fits, low)]

    @staticmethod
    def _longest_fitting(fits, limit: int) -> int:
        """The end of a fitting prefix of at most ``limit`` characters (``fits(0)`` holds), by
        bisection (``fits`` holds for short prefixes and fails past some length, nearly always
        once): O(log n) encodings, where stepping back one character at a time was quadratic.
        Then the 16 characters after the one that failed are tried, longest first."""
        low, step = 0, 64
        while low + step < limit and fits(low + step):  # grow until a prefix fails
            low, step = low + step, step * 2
        high = min(limit, low + step)
        if fits(high):
            return high
        while high - low > 1:
            mid = (low + high) // 2
            if fits(mid):
                low = mid
            else:
                high = mid
        for end in range(min(high + 16, limit), high, -1):
            if fits(end):
                return end
        return low

    def _check_specials(self, text: str, allowed_special: AllowedSpecial, disallowed_special: AllowedSpecial) -> frozenset[str]:
        """Returns the allowed special tokens; raises if ``text`` holds a disallowed one."""
        return self._check_batch_specials([text], allowed_special, disallowed_special)

    def _check_batch_specials(self, texts: list[str], allowed_special: AllowedSpecial,
                              disallowed_special: AllowedSpecial) -> frozenset[str]:
        """:meth:`_check_specials` for many texts (the rules made once)."""
        allowed, regex = self._special_rules(allowed_special, disallowed_special)
        for text in texts:
            self._refuse_disallowed(text, regex)
        return allowed

    def _special_rules(self, allowed_special: AllowedSpecial, disallowed_special: AllowedSpecial):
        """(allowed special tokens, regex finding the disallowed ones or None)."""
        known = self.special_tokens.keys()
        for name, value in (("allowed_special", allowed_special), ("disallowed_special", disallowed_special)):
            if value != "all" and (isinstance(value, (str, bytes)) or not isinstance(value, Iterable)):
                raise SpecialTokenError(f"{name} must be 'all' or a collection of special-token strings, not {value!r}")
        allowed = frozenset(known) if allowed_special == "all" else frozenset(allowed_special)
        disallowed = frozenset(known) - allowed if disallowed_special == "all" else frozenset(disallowed_special)
        unknown = (allowed | disallowed) - known
        if unknown:
            raise SpecialTokenError(
                f"{sorted(unknown)} are not special tokens of this tokenizer; its special tokens are {sorted(known)}"
            )
        if not disallowed:
            return allowed, None
        regex = self._special_regex_cache.get(disallowed)
        if regex is None:
            alternatives = sorted(disallowed, key=len, reverse=True)
            regex = self._special_regex_cache[disallowed] = re.compile("|".join(map(re.escape, alternatives)))
        return allowed, regex

    @staticmethod
    def _refuse_disallowed(text: str, regex) -> None:
        if not isinstance(text, str):
            raise EncodeError(f"encode takes a str, not {type(text).__name__}; decode bytes first (e.g. data.decode('utf-8'))")
        match = regex.search(text) if regex is not None else None
        if match:
            raise SpecialTokenError(
                f"text contains the special token {match.group()!r} at index {match.start()}, which is not "
                f"allowed. If it should become its special id, pass allowed_special={{{match.group()!r}}} "
                f"(or allowed_special='all'); if it should be encoded as plain text, pass "
                f"disallowed_special=() or use encode_ordinary()."
            )

    # ------------------------------------------------------------------ decoding

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Joins the bytes of ``ids``. Raises :class:`DecodeError` for an id not in the vocabulary."""
        # A list goes to Rust as it is (its items are checked there); anything else is made one.
        ids = ids if type(ids) is list else _id_list(ids)
        if self._pipeline is not None:
            ids = _id_list(ids)
            fast = self._pipeline.fast
            if fast is None:
                return self._pipeline.decode_bytes(ids)
            # Byte-level: each token's own bytes (an added token's are its string's).
            out = []
            for i in ids:
                added = self._pipeline.id_to_token(i) if i in self._pipeline._added_by_id else None
                out.append(added.encode("utf-8") if added is not None else self._fast_token_bytes(fast, i))
            return b"".join(out)
        try:
            return self._model.decode_bytes(ids)
        except (TypeError, OverflowError):
            ids = _id_list(ids)  # a typed error for an item that is no integer
            bad = next((i for i in ids if not 0 <= i < 2**32), None)
            raise DecodeError(f"ids must be non-negative ints below 2^32; got {bad!r}") from None

    @staticmethod
    def _fast_token_bytes(fast, i) -> bytes:
        try:
            return fast.token_bytes(i)
        except (TypeError, OverflowError):
            raise DecodeError(f"ids must be non-negative ints; got {i!r}") from None

    def decode(self, ids: Iterable[int], errors: str = "replace", *, skip_special_tokens: bool = False) -> str:
        """Decodes ``ids`` to text. Bytes that are not valid UTF-8 become U+FFFD with
        ``errors="replace"`` (the default) and raise :class:`DecodeError` with ``errors="strict"``."""
        ids = ids if type(ids) is list else _id_list(ids)
        try:
            codecs.lookup_error(errors)
        except (LookupError, TypeError):
            raise DecodeError(f"unknown errors={errors!r}; use 'replace' or 'strict' (or another codec error handler)") from None
        if self._pipeline is not None:
            return self._pipeline.decode(_id_list(ids), skip_special_tokens=skip_special_tokens)
        if skip_special_tokens:
            specials = set(self.special_tokens.values())
            ids = [i for i in ids if i not in specials]
        data = self.decode_bytes(ids)
        try:
            return data.decode("utf-8", errors=errors)
        except UnicodeDecodeError as e:
            raise DecodeError(
                f"the ids decode to bytes that are not valid UTF-8 ({e.reason} at byte {e.start}); "
                f"use errors='replace', or decode_bytes() to get the raw bytes"
            ) from None
        except LookupError:
            raise DecodeError(f"unknown errors={errors!r}; use 'replace' or 'strict' (or another codec error handler)") from None

    def stream_decoder(self) -> "StreamDecoder":
        """A decoder for ids that arrive one at a time (e.g. from a model generating text):
        ``feed(id)`` returns only complete characters, ``flush()`` the rest. The text emitted
        equals ``decode`` of the whole sequence."""
        return StreamDecoder(self)

    # ------------------------------------------------------------------ offsets and arrays

    def encode_with_offsets(self, text: str, *, allowed_special: AllowedSpecial = frozenset(),
                            disallowed_special: AllowedSpecial = "all") -> tuple[list[int], list[tuple[int, int]], list[tuple[int, int]]]:
        """Ids with the span of each token in ``text``: ``(ids, byte_spans, char_spans)``.

        Byte-level BPE: byte spans (into ``text.encode()``) tile the input and hold exactly the
        token's bytes. A character split between tokens (a byte-level token can hold part of a
        character) belongs to the char span of every token holding one of its bytes.

        Pipelines that normalize the text, BERT (WordPiece) and BPE over characters behind
        replacements of one character by one and prepends (Gemma 3, Llama 2 / Mistral
        tokenizer.json): each token's char span is the part of
        ``text`` it was made from, as `tokenizers`' ``Encoding.offsets`` give it (a lowercased
        or accent-stripped character spans its original; an unknown word the whole word; each
        byte token of a character outside the vocabulary that character; the spaces and
        control characters between BERT's words belong to no token). Byte spans are the same
        spans in bytes. SentencePiece models (``.model``): byte spans as sentencepiece's
        ``begin``/``end`` (a replacement such as NFKC's "Ⅻ" -> "XII" spans its source in its
        last token and nothing in the others; a run of spaces made one "▁" spans the run; the
        dummy prefix alone spans nothing), char spans the same in characters; llama.cpp's
        SentencePiece vocabularies (GGUF ``llama``: Llama 2, Mistral, Phi-3...) the same, as
        sentencepiece gives them for that vocabulary (a space added in front of each fragment
        spans nothing of its own), and its t5 ones (Unigram) over llama.cpp's own normalization;
        its BERT vocabularies (GGUF ``bert``) as `tokenizers` gives BERT's. Hugging Face's
        Unigram files (T5, XLM-R: SentencePiece's rules as a Precompiled normalizer, regex
        replacements, Metaspace): as `tokenizers` aligns them (a squeezed run of spaces comes from
        its last space; "ﬁ" gives "fi", both from it; an unknown token spans the run of
        unknown characters fused into it). The template's
        tokens (``[CLS]``, ``<bos>``) are not in the text and are left out.
        """
        pipeline = self._pipeline
        if pipeline is not None and pipeline.offsets_supported():
            allowed = self._check_specials(text, allowed_special, disallowed_special)
            ids, char_spans = pipeline.encode_with_offsets(_valid_text(text), allowed)
            if text.isascii():
                return ids, list(char_spans), char_spans
            import numpy as np

            # Where each character starts in the UTF-8 bytes (one to four bytes by code point).
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            byte_at = np.zeros(len(text) + 1, dtype=np.int64)
            np.cumsum(1 + (codes >= 0x80) + (codes >= 0x800) + (codes >= 0x10000), out=byte_at[1:])
            byte_spans = byte_at[np.asarray(char_spans, dtype=np.int64).reshape(-1, 2)].tolist()
            return ids, list(map(tuple, byte_spans)), char_spans
        # A normalizer that leaves this text as it is (Qwen's NFC on NFC text) changes nothing.
        # Other pipelines (GGUF byte-level vocabularies) qualify where their tokens' bytes are the
        # text's (checked below).
        if pipeline is not None and pipeline.normalizer is not None and pipeline.normalizer.normalize(text) != text:
            raise EncodeError("encode_with_offsets is available for byte-level BPE tokenizers (trained by toksmith, "
                              "tiktoken, or a byte-level tokenizer.json such as GPT-2, Llama 3 or Qwen), SentencePiece "
                              "models, every kind of GGUF vocabulary, BERT's WordPiece pipelines, "
                              "Unigram tokenizer.json files (T5, XLM-R) and Gemma 3's; this tokenizer's pipeline rewrites "
                              "the text before the model, so its tokens are not spans of it")
        # Template tokens (BOS, [CLS]...) are not in the text: offsets are for the text's own tokens.
        ids = self.encode(text, allowed_special=allowed_special, disallowed_special=disallowed_special,
                          add_special_tokens=False)
        import numpy as np

        if pipeline is None:
            lengths = self._token_lengths()
        else:
            # Each token's own bytes: llama.cpp's decoder gives them per piece (`token_bytes`,
            # decoding one token alone, drops its leading space, or cleans one before punctuation).
            piece = getattr(pipeline.decoder, "piece", None)
            surfaces = {i: piece(pipeline.id_to_token(i)) if piece is not None else self.token_bytes(i) for i in set(ids)}
            lengths = {i: len(b) for i, b in surfaces.items()}
        data = text.encode("utf-8")
        # Token ends in bytes, and for each byte offset the index of the character holding it
        # (a character starts at every byte that is not a continuation byte 10xxxxxx).
        sizes = np.fromiter(map(lengths.__getitem__, ids), dtype=np.int64, count=len(ids))
        ends = np.cumsum(sizes)
        starts = ends - sizes
        pos = int(ends[-1]) if len(ids) else 0
        if pos == len(data):
            raw = np.frombuffer(data, dtype=np.uint8)
            char_of_byte = np.append(np.cumsum((raw & 0xC0) != 0x80) - 1, len(text))
            char_starts = char_of_byte[starts]
            char_ends = np.where(ends > starts, char_of_byte[np.maximum(ends - 1, 0)] + 1, char_starts)
            byte_spans = list(zip(starts.tolist(), ends.tolist()))
            char_spans = list(zip(char_starts.tolist(), char_ends.tolist()))
        # A pipeline's tokens are spans of the text where their bytes, one after the other, are
        # the text's (then each token's bytes are the text's at its span).
        if pos != len(data) or (pipeline is not None and b"".join(map(surfaces.__getitem__, ids)) != data):
            if pipeline is not None:  # e.g. "▁" for spaces, or a ByteLevel pre-tokenizer adding a prefix space
                raise EncodeError("this tokenizer's pipeline changes the text (e.g. spaces written as '▁', "
                                  "ByteLevel add_prefix_space, or a normalizer acting on part of it), so its tokens "
                                  "are not spans of the input; encode_with_offsets cannot apply")
            raise EncodeError("internal mismatch between token bytes and text; please report this input")
        return ids, byte_spans, char_spans

    def _token_lengths(self) -> dict[int, int]:
        if not hasattr(self, "_lengths"):
            # Made whole, then published: another thread may read it as soon as it is set.
            lengths = {i: len(b) for i, b in self._tokens.items()}
            for s, i in self.special_tokens.items():
                lengths[i] = len(s.encode("utf-8"))
            self._lengths = lengths
        return self._lengths

    def encode_to_numpy(self, text_or_texts, *, dtype="uint32", num_threads: int | None = None,
                        allowed_special: AllowedSpecial = frozenset(), disallowed_special: AllowedSpecial = "all"):
        """Ids as a numpy array (``uint16`` or ``uint32``): one array for a str, a list of arrays
        for a list of str (encoded in parallel)."""
        import numpy as np

        check_threads(num_threads)
        if not isinstance(text_or_texts, str) and (isinstance(text_or_texts, bytes) or not isinstance(text_or_texts, Iterable)):
            raise EncodeError(f"encode_to_numpy takes a str or a list (or other iterable) of str, not "
                              f"{type(text_or_texts).__name__}")
        given = dtype
        try:
            dtype = np.dtype(dtype) if dtype is not None else None
        except TypeError:
            dtype = None
        if dtype not in (np.dtype("uint16"), np.dtype("uint32")):
            raise EncodeError(f"dtype must be 'uint16' or 'uint32' (or numpy.uint16 / numpy.uint32), not {given!r}")
        if self.vocab_size > np.iinfo(dtype).max + 1:
            raise EncodeError(f"{self.vocab_size} ids do not fit in {dtype}; use dtype='uint32'")
        if self._model is not None:
            # Byte-level BPE: Rust writes the ids straight into the arrays' buffers.
            texts = [text_or_texts] if isinstance(text_or_texts, str) else list(text_or_texts)
            allowed = self._check_batch_specials(texts, allowed_special, disallowed_special)
            with _text_errors():
                buffers = self._model.encode_arrays(texts, [self.special_tokens[s] for s in allowed], num_threads,
                                                    dtype.itemsize)
            arrays = [np.frombuffer(b, dtype=dtype) for b in buffers]
            return arrays[0] if isinstance(text_or_texts, str) else arrays
        kwargs = dict(allowed_special=allowed_special, disallowed_special=disallowed_special)
        if isinstance(text_or_texts, str):
            return np.asarray(self.encode(text_or_texts, **kwargs), dtype=dtype)
        return [np.asarray(ids, dtype=dtype) for ids in self.encode_batch(text_or_texts, num_threads=num_threads, **kwargs)]

    # ------------------------------------------------------------------ vocabulary

    def token_bytes(self, id: int) -> bytes:
        """The bytes of one token (a special token's UTF-8 string)."""
        return self.decode_bytes([id])

    def id_to_token(self, id: int) -> str:
        """The printable name of a token: special tokens as themselves, others in the byte-level
        alphabet (``b" low"`` -> ``"Ġlow"``)."""
        id = _id_list([id])[0]
        if self._pipeline is not None:
            token = self._pipeline.id_to_token(id)
            if token is None:
                raise DecodeError(f"id {id!r} is not in the vocabulary (0 to {self.vocab_size - 1})")
            return token
        for s, i in self.special_tokens.items():
            if i == id:
                return s
        if id not in self._tokens:
            raise DecodeError(f"id {id!r} is not in the vocabulary (0 to {self.vocab_size - 1})")
        return bytes_to_token(self._tokens[id])

    def token_to_id(self, token: str) -> int | None:
        """The id of a token name as :meth:`id_to_token` writes it; None when there is none."""
        if not isinstance(token, str):
            raise EncodeError(f"token_to_id takes a token name (a str), not {type(token).__name__}")
        if self._pipeline is not None:
            return self._pipeline.token_to_id(token)
        if token in self.special_tokens:
            return self.special_tokens[token]
        try:
            return self._id_of_bytes.get(token_to_bytes(token))
        except KeyError:
            return None

    # ------------------------------------------------------------------ adaptation

    def extend(self, source, *, add: int, **options) -> "Tokenizer":
        """A new tokenizer with ``add`` merges learned from ``source`` (as in :func:`toksmith.train`)
        on top of this one; every existing id, merge and special token stays the same.
        Options: ``min_frequency``, ``max_token_length``, ``num_threads``, ``max_memory``,
        ``text_field``, ``show_progress``."""
        from .trainers import extend

        return extend(self, source, add=add, **options)

    # ------------------------------------------------------------------ files

    def to_dict(self) -> dict:
        """The self-describing JSON form that :meth:`save` writes."""
        if self._pipeline is not None:
            # Only byte-level BPE has a toksmith JSON form; the others have a native format that
            # toksmith.load reads back with the same normalizer and model.
            raise FormatError("toksmith's own JSON format holds byte-level BPE only; save this tokenizer with "
                              "format='hf' (tokenizer.json) or, if it is SentencePiece-style (loaded from a .model, or "
                              "trained with algorithm='unigram' or pattern='metaspace'), format='sentencepiece'; "
                              "toksmith.load reads either back")
        names = {i: bytes_to_token(b) for i, b in self._tokens.items()}
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "model": {
                "type": "bpe",
                "level": "byte",
                "vocab": {names[i]: i for i in sorted(names)},
                "merges": None if self.uses_ranks else [[names[a], names[b]] for a, b in self._merge_ids()],
            },
            "pre_tokenizer": {"pattern_name": self.pattern_name, "pattern": self.pattern},
            "special_tokens": dict(sorted(self.special_tokens.items(), key=lambda kv: kv[1])),
            "metadata": self.metadata,
        }

    def save(self, path: str | os.PathLike, format: str = "toksmith") -> None:
        """Writes the tokenizer atomically.

        ``format="toksmith"``: one versioned, self-describing JSON file (:func:`toksmith.load`).
        ``format="tiktoken"``: a ``.tiktoken`` rank table plus ``<path>.json`` holding the pattern
        and special tokens, loadable by toksmith and by ``tiktoken.Encoding``.
        ``format="hf"``: a Hugging Face ``tokenizer.json``.
        ``format="sentencepiece"``: a SentencePiece ``.model`` (Unigram and BPE tokenizers).
        """
        if format == "tiktoken":
            from .formats.tiktoken import save_tiktoken

            return save_tiktoken(self, path)
        if format == "hf":
            from .formats.hf import save_hf

            return save_hf(self, path)
        if format == "sentencepiece":
            from .formats.sentencepiece_writer import write_sentencepiece

            return write_sentencepiece(self, path)
        if format != "toksmith":
            raise FormatError(f"unknown format {format!r}; use 'toksmith', 'tiktoken', 'hf' or 'sentencepiece'")
        data = json.dumps(self.to_dict(), ensure_ascii=False, indent=1).encode("utf-8")
        write_atomic(path, data)

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "<dict>") -> "Tokenizer":
        """Rebuilds a tokenizer from :meth:`to_dict` output, checking every field."""

        def bad(what: str) -> FormatError:
            return FormatError(f"{source}: {what}. The file is corrupted or was not written by toksmith; re-save it with Tokenizer.save()")

        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            raise FormatError(
                f"{source} is not a toksmith tokenizer file (no \"format\": \"toksmith\" field). "
                f"toksmith.load() reads files written by Tokenizer.save()"
            )
        version = d.get("version")
        if version != FORMAT_VERSION:
            raise FormatError(f"{source} has format version {version!r}; this toksmith reads version {FORMAT_VERSION}. Upgrade toksmith")
        model = d.get("model")
        if not isinstance(model, dict) or model.get("type") != "bpe" or model.get("level") != "byte":
            raise bad("'model' must be a byte-level BPE model")
        vocab, merges = model.get("vocab"), model.get("merges")
        if not isinstance(vocab, dict) or not all(is_id(v) for v in vocab.values()):
            raise bad(f"'model.vocab' must map token names to int ids from 0 to {MAX_ID}")
        merges_ok = merges is None or isinstance(merges, list) and all(
            isinstance(m, list) and len(m) == 2 and all(isinstance(t, str) for t in m) for m in merges
        )
        if not merges_ok:
            raise bad("'model.merges' must be a list of [left, right] token names (or null: tiktoken-style ranks)")
        try:
            tokens = {i: token_to_bytes(name) for name, i in vocab.items()}
            merge_ids = None if merges is None else [(vocab[a], vocab[b]) for a, b in merges]
        except KeyError as e:
            raise bad(f"token {e.args[0]!r} is not a byte-level token name or not in the vocabulary") from None
        pre = d.get("pre_tokenizer")
        if not isinstance(pre, dict) or not isinstance(pre.get("pattern"), str):
            raise bad("'pre_tokenizer.pattern' is missing")
        specials = d.get("special_tokens", {})
        if not isinstance(specials, dict) or not all(isinstance(k, str) and is_id(v) for k, v in specials.items()):
            raise bad(f"'special_tokens' must map strings to int ids from 0 to {MAX_ID}")
        try:
            return cls(
                tokens=tokens,
                merges=merge_ids,
                pattern=pre["pattern"],
                pattern_name=pre.get("pattern_name"),
                special_tokens=specials,
                metadata=d.get("metadata") or {},
            )
        except (FormatError, InvalidPatternError) as e:
            raise bad(str(e)) from None

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Tokenizer":
        """Reads a file written by :meth:`save`."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise FormatError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise FormatError(f"{path} is a directory; pass the tokenizer's .json file") from None
        try:
            d = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise FormatError(
                f"{path} is not valid JSON ({e}); it may be truncated or corrupted, or of another format. "
                f"toksmith.load() reads files written by Tokenizer.save()"
            ) from None
        return cls.from_dict(d, source=str(path))


class _text_errors:
    """Turns the UnicodeEncodeError a str with lone surrogates raises on its way to Rust into EncodeError."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, UnicodeEncodeError):
            raise EncodeError(
                f"text contains a lone surrogate ({exc.object[exc.start:exc.end]!r} at index {exc.start}), which is not "
                f"valid Unicode and has no UTF-8 bytes. Replace it first, e.g. "
                f"text.encode('utf-16', 'surrogatepass').decode('utf-16', 'replace')"
            ) from None
        return False


MAX_ID = 2**32 - 1


def is_id(v) -> bool:
    """Whether ``v`` can be a token id: an int (not a bool) from 0 to ``MAX_ID``."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_ID


def _id_list(ids) -> list[int]:
    """``ids`` as a list of Python ints: any iterable of integers (numpy's too); a typed error
    for anything else."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise DecodeError(f"decode takes a list (or other iterable) of int ids, not {type(ids).__name__}")
    out = []
    for i in ids:
        try:
            out.append(operator.index(i))
        except TypeError:
            raise DecodeError(f"ids must be ints, not {type(i).__name__} ({i!r})") from None
    return out


#: Threads a call may ask for at most: more is a mistake (each one is started).
MAX_THREADS = 256


def check_threads(num_threads, error: type[Exception] = EncodeError, name: str = "num_threads") -> None:
    """``num_threads``: None (all cores) or an int from 1 to ``MAX_THREADS``; else ``error``."""
    if num_threads is not None and (not isinstance(num_threads, int) or isinstance(num_threads, bool)
                                    or not 1 <= num_threads <= MAX_THREADS):
        raise error(f"{name} must be None (all cores) or an int from 1 to {MAX_THREADS}, not {num_threads!r}")


def _valid_text(text) -> str:
    """``text`` if it is a str that has UTF-8 bytes: the checks the Rust path makes on its way
    in, for the tokenizers whose pipeline starts in Python."""
    if not isinstance(text, str):
        raise EncodeError(f"encode takes a str, not {type(text).__name__}; decode bytes first (e.g. data.decode('utf-8'))")
    if not text.isascii():
        with _text_errors():
            text.encode("utf-8")
    return text


def _decodes_byte_runs(decoder) -> bool:
    """Whether ``decoder`` is or holds a Hugging Face ByteFallback (see ``StreamDecoder.feed``)."""
    from .decoders import ByteFallback, Sequence as DecoderSequence

    if isinstance(decoder, ByteFallback):
        return True
    return isinstance(decoder, DecoderSequence) and any(_decodes_byte_runs(d) for d in decoder.decoders)


class StreamDecoder:
    """Decodes ids one at a time, emitting only complete characters.

    Byte-level tokenizers: the bytes go through an incremental UTF-8 decoder with
    ``errors="replace"``, which gives exactly what ``bytes.decode(errors="replace")`` gives for
    the whole sequence.

    Pipeline tokenizers (byte fallback, Metaspace, SentencePiece, WordPiece, llama.cpp's): a
    decoder's output for a token can depend on its neighbours (a run of byte tokens decodes as
    one; the first token loses its leading space; llama.cpp's clean-up drops a space before
    punctuation). So the ids since an *anchor* are decoded together: the anchor is the shortest
    run of last ids whose decoded text is not empty and is exactly the end of the text decoded
    so far (a run starting inside a byte sequence, or with a lone ``▁`` that decodes to
    nothing, is not one), all of whose text was emitted before. New text is emitted as it
    comes, but for up to 3 U+FFFD at its end (maybe an incomplete character that later bytes
    complete) and, for a decoder whose clean-up can still change the last characters
    (``stream_holdback``), those; they follow with the next ids or ``flush``.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        import codecs

        self._tok = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._ids: list[int] = []  # pipeline mode: the ids since the anchor
        self._emitted = 0  # how many characters of decode(self._ids) were emitted
        pipeline = tokenizer.pipeline
        self._hold = getattr(pipeline.decoder, "stream_holdback", 0) if pipeline is not None else 0
        self._byte_runs = pipeline is not None and _decodes_byte_runs(pipeline.decoder)

    def feed(self, id: int) -> str:
        if self._tok.pipeline is None:
            return self._utf8.decode(self._tok.token_bytes(id))
        id = _id_list([id])[0]
        name = self._tok.pipeline.id_to_token(id) if id >= 0 else None
        if name is None:
            raise DecodeError(f"id {id!r} is not in the vocabulary (0 to {self._tok.vocab_size - 1})")
        neutral = getattr(self._tok.pipeline.decoder, "neutral", None)
        if self._ids and neutral is not None and neutral(self._tok.pipeline.id_to_token(self._ids[-1]), name):
            return ""  # (e.g. a control piece after another: decoded with or without it, the same)
        self._ids.append(id)
        if self._byte_runs and byte_of_token(name) is not None:
            # Hugging Face's ByteFallback decodes a run of byte tokens all or nothing: one more
            # byte that breaks it turns all of it into U+FFFD. Its text is final once the run ends
            # (nothing to decode until then, so a long run costs no more per id).
            return ""
        text = self._tok.decode(self._ids)
        starts_over = getattr(self._tok.pipeline.decoder, "starts_over", None)
        if not text and not self._emitted and starts_over is not None:
            if starts_over([self._tok.pipeline.id_to_token(i) for i in self._ids]):
                # Ids that decode to nothing and leave the decoder at the start (SentencePiece's
                # leading ▁ and control pieces): what follows decodes as if they were not there.
                self._ids.clear()
            return ""
        # U+FFFD at the end may stand for an incomplete character that later bytes complete: at
        # most 3 bytes, so at most 3 of them (one per byte, or one for all).
        unsure = min(3, len(text) - len(text.rstrip("\ufffd")))
        end = len(text) - max(self._hold, unsure)
        new = text[self._emitted:end] if end > self._emitted else ""
        self._emitted = max(self._emitted, end)
        self._move_anchor(text)
        return new

    def _move_anchor(self, text: str) -> None:
        """Drops the ids before the shortest anchor among the last 16 ids (see the class's note).
        Failing one, an anchor with the id before it kept as context, decoded but not emitted
        again (a WordPiece "##" piece, or any token that decodes differently first, decodes as
        it does after its neighbour): a run of such ids would otherwise be decoded whole each time."""
        for context in (0, 1):
            for k in range(len(self._ids) - 1, max(0, len(self._ids) - 17), -1):
                start = k - context
                head = self._tok.decode(self._ids[start:k]) if context else ""
                full = self._tok.decode(self._ids[start:])
                rest = full[len(head):]  # what ids[k:] add
                if ((head or not context) and rest and full.startswith(head) and text.endswith(rest)
                        and len(text) - len(rest) <= self._emitted):
                    # A tail that starts inside a character (continuation bytes) starts with
                    # U+FFFD, as the text may: an anchor there only if the two halves add up.
                    if rest[0] == "\ufffd" and self._tok.decode(self._ids[:k]) + rest != text:
                        continue
                    del self._ids[:start]
                    self._emitted -= len(text) - len(full)
                    return

    def flush(self) -> str:
        if self._tok.pipeline is None:
            return self._utf8.decode(b"", final=True)
        text = self._tok.decode(self._ids) if self._ids else ""
        rest = text[self._emitted:]
        self._ids, self._emitted = [], 0
        return rest
