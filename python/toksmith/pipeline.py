"""The general tokenization pipeline, for tokenizers loaded from other formats.

One string's path through :meth:`Pipeline.encode`, as in Hugging Face ``tokenizers``:

1. added tokens with ``normalized=False`` are cut out of the raw text (special ones only where
   the caller allowed them; see :class:`AddedToken` for ``lstrip``/``rstrip``/``single_word``);
2. each remaining piece is normalized (``normalizer.normalize(str) -> str``), and the added
   tokens with ``normalized=True`` are cut out of the normalized text;
3. each piece is split into words (``pre_tokenizer.pre_tokenize(str, is_first=int) -> list[str]``;
   ``is_first``: how many of the piece's first characters come from offset 0 of the original
   text, 0 for a piece that does not start it);
4. the model turns the words into ids (``model.encode_words(list[str]) -> list[int]``);
5. the post-processor adds template tokens such as ``[CLS]``/``<s>``
   (``post_processor.process(ids, pair=None) -> list[int]``), if ``add_special_tokens``.

Decoding maps ids to token strings and hands them to ``decoder.decode(list[str]) -> str``
(without a decoder the tokens are joined as they are).
Each stage is any object with that method; the stage modules (``normalizers``,
``pre_tokenizers``, ``post_processors``, ``decoders``) provide the Hugging Face components, the
SentencePiece loaders their own. A normalizer may also offer
``normalize_with_origin(str) -> (str, bool)``, the bool saying whether the first character of the
result still comes from the first character of the input (False when it was dropped); that
decides ``is_first``, or where a Metaspace asks for the first word behind a normalizer that can
expand the first character, ``normalize_aligned`` (see `Pipeline._from_first`). Byte-level BPE tokenizers trained by toksmith or read from tiktoken
do not go through here: their whole pipeline runs in Rust (``toksmith.tokenizer``).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from . import _core
from ._pickling import RustBacked
from .decoders import byte_of_token
from .errors import EncodeError
from .normalizers import NO_ORIGIN
from .pre_tokenizers import RUST_REGEX_WORD as _WORD_CHAR  # Hugging Face's single_word check
from .pre_tokenizers import WHITESPACE as _SPACE_CHAR  # lstrip and rstrip


@dataclass(frozen=True)
class AddedToken:
    """A token matched in the text before the model sees it (Hugging Face ``added_tokens``).

    ``special``: a control token (``<s>``, ``[CLS]``): toksmith matches it only where the caller
    allows it, and ``decode(skip_special_tokens=True)`` drops it. ``normalized``: matched in the
    normalized text rather than the raw text. ``single_word``: matched only when not inside a
    word. ``lstrip``/``rstrip``: the whitespace before/after it is part of the match.
    """

    content: str
    id: int
    special: bool = True
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
    normalized: bool = False


class _Matcher(RustBacked):
    """Finds added tokens in a text: leftmost, then longest, as Hugging Face's Aho-Corasick."""

    _RUST_FIELDS = ("finder",)

    def __init__(self, tokens: dict[str, AddedToken]) -> None:
        self.tokens = tokens
        self.strings = list(tokens)
        self._make_rust()
        alternatives = sorted(tokens, key=len, reverse=True)
        self.regex = re.compile("|".join(map(re.escape, alternatives))) if alternatives and self.finder is None else None

    def _make_rust(self) -> None:
        # Rust's Aho-Corasick finds the same matches as an alternation of the strings, longest
        # first, in Python's `re`, which tries every one at every position (Gemma 3 has 6,406).
        self.finder = _core.LiteralMatcher(self.strings) if self.strings and all(self.strings) else None

    def _matches(self, text: str) -> list[tuple[int, int, str]]:
        if self.finder is not None:
            return [(s, e, self.strings[i]) for s, e, i in self.finder.find(text)]
        return [(*m.span(), m.group()) for m in self.regex.finditer(text)]

    def split(self, text: str) -> list[tuple[int, int, AddedToken | None]]:
        """``text`` cut into (start, end, token or None) spans; lstrip/rstrip extend a token's span."""
        if (self.regex is None and self.finder is None) or not text:
            return [(0, len(text), None)]
        out: list[tuple[int, int, AddedToken | None]] = []
        done = 0
        for start, stop, content in self._matches(text):
            token = self.tokens[content]
            if token.single_word and (
                start > 0 and _WORD_CHAR.match(text, start - 1) or stop < len(text) and _WORD_CHAR.match(text, stop)
            ):
                continue
            if token.lstrip:
                new_start = start
                while new_start > 0 and _SPACE_CHAR.match(text, new_start - 1):
                    new_start -= 1
                start = max(new_start, done)
            if token.rstrip:
                while stop < len(text) and _SPACE_CHAR.match(text, stop):
                    stop += 1
            if done < start:
                out.append((done, start, None))
            out.append((start, stop, token))
            done = stop
        if done != len(text):
            out.append((done, len(text), None))
        return out


#: Matchers kept per pipeline, one per set of allowed special tokens met (Gemma 3's hold 6,406
#: strings each): a caller passing ever new sets must not make the pipeline grow without end.
KEPT_MATCHERS = 16


_MISSING = object()


class _Kept:
    """What a pipeline makes per set of allowed special tokens (matchers, Rust fast paths): at
    most ``KEPT_MATCHERS`` values, the oldest dropped first.

    Safe from many threads at once: a lookup is one dict read, and only one thread at a time adds
    and drops entries. (A plain dict with a check, then a read, raised ``KeyError`` when another
    thread dropped the entry in between, or when two threads dropped the same oldest entry.)
    Racing threads may each make a value; the values are alike and one is kept. Not pickled
    (a pipeline makes its own again: `Pipeline._RUST_FIELDS`).
    """

    def __init__(self) -> None:
        self._values: dict = {}
        self._lock = threading.Lock()

    def get(self, key, make: Callable[[], object]):
        value = self._values.get(key, _MISSING)
        if value is _MISSING:
            value = make()
            with self._lock:
                if key not in self._values:
                    if len(self._values) >= KEPT_MATCHERS:
                        del self._values[next(iter(self._values))]
                    self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()



def _between_added_tokens(raw: _Matcher, encode: Callable[[str], list[int]],
                          encode_batch: Callable[[list[str], int | None], list[list[int]]]):
    """``encode`` and ``encode_batch`` (of whole texts) turned into encodings of texts that may
    hold the added tokens ``raw`` finds: each token is its id, the pieces between are encoded (a
    batch's pieces in one call). The general path cuts the raw text the same way."""

    def plan(text: str, pieces: list[str]) -> list[int]:
        """The text's added-token ids, and ~k for the k-th piece between them (put in ``pieces``)."""
        out = []
        for start, end, token in raw.split(text):
            if token is not None:
                out.append(token.id)
            elif end > start:
                out.append(~len(pieces))
                pieces.append(text[start:end])
        return out

    def encode_with_tokens(text: str) -> list[int]:
        pieces: list[str] = []
        steps = plan(text, pieces)
        return carry_out(steps, [encode(piece) for piece in pieces])

    def encode_batch_with_tokens(texts: list[str], num_threads: int | None) -> list[list[int]]:
        pieces: list[str] = []
        plans = [plan(text, pieces) for text in texts]
        encoded = encode_batch(pieces, num_threads)
        return [carry_out(steps, encoded) for steps in plans]

    return encode_with_tokens, encode_batch_with_tokens


def carry_out(plan: list[int], encoded: list[list[int]]) -> list[int]:
    """The ids of one text of a batch from its plan: ids as they are, and ``~k`` for the ids of
    the k-th piece encoded in one call for the whole batch."""
    if len(plan) == 1 and plan[0] < 0:
        return encoded[~plan[0]]
    ids: list[int] = []
    for x in plan:
        if x < 0:
            ids.extend(encoded[~x])
        else:
            ids.append(x)
    return ids


class Pipeline(RustBacked):
    # The kept matchers and paths are made again after unpickling (a pickle of an earlier version
    # held the matchers in a plain dict).
    _RUST_FIELDS = ("fast", "_cuts", "_whole", "words_fast", "_matchers")

    def __init__(self, model, *, normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None,
                 added_tokens: Sequence[AddedToken] = ()) -> None:
        self.model = model
        self.normalizer = normalizer
        self.pre_tokenizer = pre_tokenizer
        self.post_processor = post_processor
        self.decoder = decoder
        self.added_tokens = list(added_tokens)
        self._added_by_id = {t.id: t for t in self.added_tokens}
        self._added_by_content: dict[str, AddedToken] = {}
        for t in self.added_tokens:  # a repeated string keeps its first token, as in Hugging Face
            self._added_by_content.setdefault(t.content, t)
        # What the normalized added tokens look like after normalization (they are matched there).
        # Hugging Face also names them so: id_to_token and decode give the normalized string.
        self._normalized_content: dict[str, AddedToken] = {}
        self._added_names: dict[int, str] = {}
        for t in self.added_tokens:
            content = t.content
            if t.normalized and self.normalizer is not None:
                content = self.normalizer.normalize(t.content)
            if t.normalized and content:
                self._normalized_content.setdefault(content, t)
            self._added_names[t.id] = content
        self._special_contents = {t.content for t in self.added_tokens if t.special}
        self._make_rust()

    def _make_rust(self) -> None:
        self._matchers = _Kept()  # per (normalized, allowed special tokens)
        # Byte-level BPE behind a regex the Rust scanners know: pre-tokenize and merge in one
        # Rust call (see fast_path.py); None keeps the general path.
        from .fast_path import byte_level_fast_path

        self.fast = byte_level_fast_path(self.pre_tokenizer, self.model)
        # BERT's pre-tokenizer and WordPiece: the words of a normalized piece split and encoded
        # in one Rust call, (Rust model, Rust splitter); None keeps the general path.
        from .models import WordPiece
        from .pre_tokenizers import BertPreTokenizer

        self.words_fast = None
        if type(self.pre_tokenizer) is BertPreTokenizer and type(self.model) is WordPiece:
            self.words_fast = (self.model._core, BertPreTokenizer.rust())
        # Per set of allowed special tokens: the Rust cutter of `_cuts_for`, or None.
        self._cuts = _Kept()
        # Per set of allowed special tokens: `_whole_for`'s Rust model and normalizer, or None.
        self._whole = _Kept()

    def _whole_for(self, allowed_special: frozenset[str]):
        """(encode one text, encode a batch on n threads) in one Rust call each, normalizer and
        model, for a SentencePiece model (its normalizer, no pre-tokenizer) when the model's Rust
        encoding of the normalized text is its whole encoding (Unigram; BPE without user-defined
        pieces, unused pieces or missing byte pieces) and no added token is matched in the
        normalized text for this set of allowed special tokens; None otherwise. Added tokens
        matched in the raw text (SentencePiece's control symbols, once allowed) are cut out in
        Python first, as on the general path, and the pieces between them go to Rust."""
        return self._whole.get(allowed_special, lambda: self._make_whole(allowed_special))

    def _make_whole(self, allowed_special: frozenset[str]):
        from .formats.sentencepiece import SentencePieceBPE, SentencePieceNormalizer, SentencePieceUnigram

        whole = None
        model = self.model
        if (type(self.normalizer) is SentencePieceNormalizer and type(model) in (SentencePieceUnigram, SentencePieceBPE)
                and self.pre_tokenizer is None and not self._matcher(True, allowed_special).tokens):
            normalizer = self.normalizer.rust()
            if type(model) is SentencePieceUnigram:
                rust = model._core._core
                whole = (lambda text: rust.encode_normalized(normalizer, text),
                         lambda texts, n: rust.encode_normalized_batch(normalizer, texts, n))
            elif type(model) is SentencePieceBPE and model._core is not None and not model.user_defined:
                rust, fuse = model._core._core, None if model.byte_fallback else model.unk_id
                whole = (lambda text: rust.encode_normalized(normalizer, text, fuse),
                         lambda texts, n: rust.encode_normalized_batch(normalizer, texts, fuse, n))
        raw = self._matcher(False, allowed_special)
        if whole is not None and raw.tokens:
            whole = _between_added_tokens(raw, *whole)
        return whole

    def _cuts_for(self, allowed_special: frozenset[str]):
        """A `_core.Cuts` that lets the Rust BPE model run this whole pipeline but the template
        in one call (added tokens cut out, the normalizer's replacement, the model), where the
        stages between the added tokens are simple enough; None otherwise. Gemma 3's text goes
        through Python once per piece otherwise: its added tokens include `\n` and space runs."""
        return self._cuts.get(allowed_special, lambda: self._make_cuts(allowed_special))

    def _make_cuts(self, allowed_special: frozenset[str]):
        from . import normalizers as norm
        from . import pre_tokenizers as pre
        from .formats.hf import HFBPE
        from .models import BPE

        model, n, p = self.model, self.normalizer, self.pre_tokenizer
        # The model: BPE whose Rust encoding of a piece is what encode_words gives (HFBPE drops
        # characters outside the vocabulary in Python when it has neither <unk> nor byte fallback).
        if self.fast is not None or type(model) not in (BPE, HFBPE) or (
                type(model) is HFBPE and model.options["unk_token"] is None and not model.options["byte_fallback"]):
            return None
        raw = self._matcher(False, allowed_special).tokens
        if self._matcher(True, allowed_special).tokens or not all(raw) or any(
                t.lstrip or t.rstrip or t.single_word for t in raw.values()):
            return None
        # The normalizer: none, or one literal replacement (done in Rust, as str.replace does).
        replace = None
        if n is not None:
            if type(n) is not norm.Replace or n.is_regex or not n.pattern:
                return None
            replace = (n.pattern, n.content)
        # The pre-tokenizer: none, or a split on one character that the replacement removed
        # (Gemma 3: " " became "▁"), which then keeps every piece whole.
        if p is not None and not (type(p) is pre.Split and not p.is_regex and not p.invert and replace is not None
                                  and len(p.pattern) == 1 and p.pattern == replace[0] and p.pattern not in replace[1]):
            return None
        return _core.Cuts([(c, t.id) for c, t in raw.items()], replace)

    def offsets_supported(self) -> bool:
        """Whether `encode_with_offsets` can say where each token comes from: SentencePiece models
        and llama.cpp's SentencePiece vocabularies (GGUF ``llama``),
        BERT's pipeline (its normalizer or none, its pre-tokenizer, WordPiece), and BPE over
        characters (no subword prefix or suffix) behind no normalizer, or replacements of one
        character by one and prepends (Gemma 3's " " by "▁"; Llama 2's and Mistral's prepended
        " " then " " by "▁"), and no pre-tokenizer or a split on a literal that keeps every
        character; and Unigram behind the normalizers and pre-tokenizers of Hugging Face's
        Unigram files (T5, XLM-R: Precompiled, replacements, strips, lowercasing; splits,
        whitespace splits, Metaspace)."""
        from . import normalizers as norm
        from . import pre_tokenizers as pre
        from .formats.hf import HFUnigram
        from .formats.sentencepiece import SentencePieceBPE, SentencePieceNormalizer, SentencePieceUnigram
        from .models import BPE, Unigram, WordPiece

        n, p, model = self.normalizer, self.pre_tokenizer, self.model
        if getattr(model, "offsets_supported", False) is True:  # llama.cpp's vocabularies that say so
            return n is None and p is None
        if type(model) in (SentencePieceUnigram, SentencePieceBPE):
            return type(n) is SentencePieceNormalizer and p is None
        if type(model) is WordPiece:
            return type(p) is pre.BertPreTokenizer and (n is None or type(n) is norm.BertNormalizer)

        def aligned(n) -> bool:  # one-for-one replacements and prepends (BPE over characters)
            if type(n) is norm.Sequence:
                return all(map(aligned, n.normalizers))
            return type(n) is norm.Prepend or (type(n) is norm.Replace and not n.is_regex and len(n.pattern) == len(n.content) == 1)

        def splits_aligned(p) -> bool:  # a pre-tokenizer with `split_aligned`
            if type(p) is pre.Sequence:
                return all(map(splits_aligned, p.pre_tokenizers))
            return isinstance(p, (pre.Split, pre.Metaspace, pre.CharClassSplit))

        if type(model) in (Unigram, HFUnigram):
            # Hugging Face's Unigram pipelines (T5, XLM-R, ALBERT): SentencePiece's rules as a
            # Precompiled normalizer, replacements, Metaspace.
            return (n is None or _aligns(n)) and (p is None or splits_aligned(p))
        return (isinstance(model, BPE) and self.fast is None and not model.options["continuing_subword_prefix"]
                and not model.options["end_of_word_suffix"] and (n is None or aligned(n))
                and (p is None or type(p) is pre.Split and not p.is_regex and not p.invert and p.behavior != "removed"))

    def encode_with_offsets(self, text: str, allowed_special: frozenset[str]) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids without the template's tokens, and for each the span of characters of ``text`` it
        comes from, as `tokenizers` gives them (``Encoding.offsets``): a token spans the
        characters its normalized characters come from (a lowercased or accent-stripped
        character is its original), an added token its match, an unknown word the whole word, a
        byte token (byte fallback) the character it is a byte of. Only where `offsets_supported`."""
        from .formats.sentencepiece import SentencePieceNormalizer
        from .models import WordPiece

        if not self.offsets_supported():
            raise EncodeError("encode_with_offsets: this pipeline's tokens cannot be traced back to the text "
                              "(see Pipeline.offsets_supported)")
        allowed_special = frozenset(allowed_special)
        from .models import Unigram

        raw, normalized = self._matcher(False, allowed_special), self._matcher(True, allowed_special)
        pieces = self._word_pieces if type(self.model) is WordPiece else self._unigram_pieces if isinstance(
            self.model, Unigram) else self._bpe_pieces
        ids: list[int] = []
        spans: list[tuple[int, int]] = []
        for start, end, token in raw.split(text):
            if token is not None:
                ids.append(token.id)
                spans.append((start, end))
                continue
            if start == end:
                continue
            piece = text[start:end]
            if getattr(self.model, "offsets_supported", False) is True:  # llama.cpp's (see above)
                _extend_shifted(ids, spans, self.model.spans(piece), start)
                continue
            if type(self.normalizer) is SentencePieceNormalizer:
                if normalized.tokens:
                    raise EncodeError("encode_with_offsets: this SentencePiece tokenizer matches added tokens in the "
                                      "normalized text; their spans are not known. encode() gives the ids")
                _extend_shifted(ids, spans, self._sentencepiece_pieces(piece), start)
                continue
            if self.normalizer is None:
                norm, origin = piece, range(len(piece))
            else:
                try:
                    norm, origin = self.normalizer.normalize_aligned(piece)
                except ValueError:
                    norm, origin = None, ()
                if norm != self.normalizer.normalize(piece):
                    raise EncodeError("encode_with_offsets cannot align this text with its normalized form; "
                                      "encode() gives its ids")
            # A character that `tokenizers` inserts before all others (NO_ORIGIN) spans (0, 0).
            begin = [start + (o if o != NO_ORIGIN else 0) for o in origin]
            end = [start + (o + 1 if o != NO_ORIGIN else 0) for o in origin]
            # How many of the piece's first characters come from the text's first, for a
            # pre-tokenizer that asks (Metaspace's prepend_scheme "first"), as `tokenizers`
            # tells (none after a strip).
            from_first = 0
            while from_first < len(begin) and begin[from_first] == 0:
                from_first += 1
            for s, e, ntoken in normalized.split(norm):
                if ntoken is not None:
                    ids.append(ntoken.id)
                    spans.append((begin[s], end[e - 1]) if e > s else (begin[s],) * 2)
                    continue
                if e == s:
                    continue
                for i, a, b in pieces(norm, s, e, max(0, from_first - s)):
                    ids.append(i)
                    # From where its first character comes from to where its last does (as
                    # `tokenizers` expands alignments).
                    spans.append((begin[a], end[b - 1]))
        return ids, spans

    def _sentencepiece_pieces(self, text: str) -> list[tuple[int, int, int]]:
        """(id, start, end) in ``text`` of the tokens of a SentencePiece model (see
        `sentencepiece_spans`)."""
        model = self.model
        return sentencepiece_spans(text, self.normalizer, lambda norm: model.encode_words([norm]), model.pieces, model.types)

    def _word_pieces(self, norm: str, s: int, e: int, first: int) -> Iterator[tuple[int, int, int]]:
        """(id, start, end) in ``norm`` of the WordPiece tokens of ``norm[s:e]``, word by word."""
        model = self.model
        unk = model._vocab.get(model.unk_token)
        prefix = len(model.continuing_subword_prefix)
        words = list(self.pre_tokenizer._words.finditer(norm, s, e))
        word_ids = iter(model.encode_words([m.group() for m in words]))
        for m in words:
            # The word's pieces follow each other; an unknown word is one piece.
            at = m.start()
            while at < m.end():
                i = next(word_ids, None)  # (a StopIteration here would leave the generator as RuntimeError)
                n = 0 if i is None else m.end() - at if i == unk else len(model._tokens[i]) - (prefix if at > m.start() else 0)
                if n <= 0:
                    raise EncodeError(f"encode_with_offsets: the pieces of {m.group()!r} do not cover it; please report this input")
                yield i, at, at + n
                at += n

    def _unigram_pieces(self, norm: str, s: int, e: int, first: int) -> Iterator[tuple[int, int, int]]:
        """(id, start, end) in ``norm`` of the Unigram tokens of ``norm[s:e]``, word by word: the
        first and last characters of ``norm`` that a token's first and last come from (see
        `unigram_token_spans`)."""
        model = self.model
        words = [(norm[s:e], list(range(s, e)), first)]
        if self.pre_tokenizer is not None:
            words = self.pre_tokenizer.split_aligned(words)
        for (word, origins, _), ids in zip(words, model.encode_words_batch([[w] for w, _, _ in words], 1)):
            tokens = [model.pieces[i][0] for i in ids]
            spans = unigram_token_spans(word, tokens, [i == model.unk_id for i in ids], model.byte_fallback,
                                        self._unigram_chars, model.id_to_token(model.unk_id) if model.unk_id is not None else None)
            if spans is None:
                raise EncodeError(f"encode_with_offsets: the tokens of {word!r} do not cover it; encode() gives its ids")
            for i, (a, b) in zip(ids, spans):
                yield i, origins[a], origins[b - 1] + 1

    @functools.cached_property
    def _unigram_chars(self) -> frozenset[str]:
        """The characters that are pieces of the Unigram model on their own (the others are
        unknown to it)."""
        return frozenset(p for p, score in self.model.pieces if len(p) == 1 and math.isfinite(score))

    def _bpe_pieces(self, norm: str, s: int, e: int, first: int) -> Iterator[tuple[int, int, int]]:
        """(id, start, end) in ``norm`` of the BPE tokens of ``norm[s:e]``: each token's string
        follows the one before; a byte token (``<0xNN>``) spans the character it is a byte of."""
        piece = norm[s:e]
        words = self.pre_tokenizer.pre_tokenize(piece, is_first=first) if self.pre_tokenizer is not None else [piece]
        ids = self.model.encode_words(words)
        tokens = [self.model._tokens[i] for i in ids]
        if "".join(tokens) == piece:  # most pieces: the tokens are its text (no byte token)
            ends = list(itertools.accumulate(map(len, tokens), initial=s))
            yield from zip(ids, ends, ends[1:])
            return
        at, byte = s, 0  # the next character, and how many of its bytes the byte tokens before took
        unk = self.model.options["unk_token"]
        for i in ids:
            token = self.model._tokens[i]
            if self.model.options["byte_fallback"] and byte_of_token(token) is not None:
                size = len(norm[at].encode("utf-8")) if at < e else 0
                if byte >= size:
                    raise EncodeError(f"encode_with_offsets: the tokens of {piece!r} do not follow it; please report this input")
                yield i, at, at + 1
                byte += 1
                if byte == size:
                    at, byte = at + 1, 0
            elif byte == 0 and token != unk and norm.startswith(token, at) and at + len(token) <= e:
                yield i, at, at + len(token)
                at += len(token)
            else:
                raise EncodeError(f"encode_with_offsets: the tokens of {piece!r} do not follow its text (an unknown "
                                  "or dropped character); encode() gives its ids")
        if at != e:
            raise EncodeError(f"encode_with_offsets: the tokens of {piece!r} do not cover it (a dropped character); "
                              "encode() gives its ids")

    @property
    def special_tokens(self) -> dict[str, int]:
        return {t.content: t.id for t in self.added_tokens if t.special}

    # ------------------------------------------------------------------ encoding

    def encode(self, text: str, *, allowed_special: frozenset[str] = frozenset(), add_special_tokens: bool = True) -> list[int]:
        allowed_special = frozenset(allowed_special)
        cuts = self._cuts_for(allowed_special)
        if cuts is not None:
            ids = self.model._core.encode_cut(text, cuts)
            if add_special_tokens and self.post_processor is not None:
                ids = self.post_processor.process(ids)
            return ids
        whole = self._whole_for(allowed_special)
        if whole is not None:
            ids = whole[0](text)
            if add_special_tokens and self.post_processor is not None:
                ids = self.post_processor.process(ids)
            return ids
        ids = []
        for piece, is_first, token in self._pieces(text, allowed_special):
            if token is not None:
                ids.append(token.id)
            else:
                if self.fast is not None:
                    ids.extend(self.fast.encode_ordinary(piece))
                    continue
                if self.words_fast is not None:
                    model, splitter = self.words_fast
                    ids.extend(model.encode_split(splitter, piece))
                    continue
                words = self.pre_tokenizer.pre_tokenize(piece, is_first=is_first) if self.pre_tokenizer is not None else [piece]
                if words:
                    ids.extend(self.model.encode_words(words))
        if add_special_tokens and self.post_processor is not None:
            ids = self.post_processor.process(ids)
        return ids

    def encode_batch(self, texts: list[str], *, allowed_special: frozenset[str] = frozenset(),
                     add_special_tokens: bool = True, num_threads: int | None = None) -> list[list[int]]:
        """``encode`` of each text. A SentencePiece model without added tokens to cut out encodes
        the texts in one parallel Rust call (see `_whole_for`). With a Rust fast path (byte-level
        BPE, or BERT's words), the pieces between added tokens of all texts are split and encoded
        in one parallel Rust call; the rest (added tokens, templates) is cheap.
        Likewise, after the Python normalizer and pre-tokenizer, the words of all texts for a model
        that encodes batches (BPE cut into words); other models encode one text at a time."""
        cuts = self._cuts_for(frozenset(allowed_special))
        if cuts is not None:
            encoded = self.model._core.encode_batch(texts, [], num_threads, cuts)
            if add_special_tokens and self.post_processor is not None:
                encoded = [self.post_processor.process(ids) for ids in encoded]
            return encoded
        whole = self._whole_for(frozenset(allowed_special))
        if whole is not None:
            encoded = whole[1](texts, num_threads)
            if add_special_tokens and self.post_processor is not None:
                encoded = [self.post_processor.process(ids) for ids in encoded]
            return encoded
        model_batch = getattr(self.model, "encode_words_batch", None)
        if self.fast is None and model_batch is None:
            return [self.encode(t, allowed_special=allowed_special, add_special_tokens=add_special_tokens) for t in texts]
        allowed = frozenset(allowed_special)
        plans: list[list[int]] = []  # per text: added-token ids, and ~k for the k-th piece
        pieces: list = []  # the pieces (fast path), or each piece's words
        for text in texts:
            plan = []
            for piece, is_first, token in self._pieces(text, allowed):
                if token is not None:
                    plan.append(token.id)
                    continue
                if self.fast is None and self.words_fast is None:
                    piece = self.pre_tokenizer.pre_tokenize(piece, is_first=is_first) if self.pre_tokenizer is not None else [piece]
                    if not piece:
                        continue
                plan.append(~len(pieces))
                pieces.append(piece)
            plans.append(plan)
        if self.fast is not None:
            encoded = self.fast.encode_batch(pieces, [], num_threads)
        elif self.words_fast is not None:
            model, splitter = self.words_fast
            encoded = model.encode_split_batch(splitter, pieces, num_threads)
        else:
            encoded = model_batch(pieces, num_threads)
        out = []
        for plan in plans:
            ids = carry_out(plan, encoded)
            if add_special_tokens and self.post_processor is not None:
                ids = self.post_processor.process(ids)
            out.append(ids)
        return out

    def _matcher(self, normalized: bool, allowed_special: frozenset[str]) -> _Matcher:
        return self._matchers.get((normalized, allowed_special), lambda: self._make_matcher(normalized, allowed_special))

    def _make_matcher(self, normalized: bool, allowed_special: frozenset[str]) -> _Matcher:
        if normalized:
            tokens = {c: t for c, t in self._normalized_content.items() if not t.special or t.content in allowed_special}
        else:
            tokens = {c: t for c, t in self._added_by_content.items()
                      if not t.normalized and (not t.special or t.content in allowed_special)}
        return _Matcher(tokens)

    def _normalize(self, piece: str) -> tuple[str, bool]:
        n = self.normalizer
        if n is None:
            return piece, True
        if hasattr(n, "normalize_with_origin"):
            return n.normalize_with_origin(piece)
        return n.normalize(piece), True

    def _pieces(self, text: str, allowed_special: frozenset[str]) -> Iterator[tuple[str, bool, AddedToken | None]]:
        """The text as (piece, starts at offset 0, None) and ("", False, added token), in order."""
        raw, normalized = self._matcher(False, allowed_special), self._matcher(True, allowed_special)
        for start, end, token in raw.split(text):
            if token is not None:
                yield "", False, token
                continue
            if start == end:
                continue
            piece, keeps_origin = self._normalize(text[start:end])
            # How many characters at the start of the piece come from the text's first one.
            from_first = 0 if start != 0 else self._from_first(text[start:end], piece) if self._first_by_origin else int(keeps_origin)
            for s, e, ntoken in normalized.split(piece):
                if ntoken is not None:
                    yield "", False, ntoken
                elif e > s:
                    yield piece[s:e], max(0, from_first - s), None

    @functools.cached_property
    def _first_by_origin(self) -> bool:
        """Whether the words that start the text must be told by where their characters come from,
        as `tokenizers` does: a Metaspace with ``prepend_scheme="first"`` behind a normalizer
        that can expand or drop the first character (T5's Precompiled: "¨" -> " ̈", whose second
        word then still starts the text) and that says where each character comes from."""
        from . import pre_tokenizers as pre

        def first_metaspace(p) -> bool:
            if type(p) is pre.Sequence:
                return any(map(first_metaspace, p.pre_tokenizers))
            return type(p) is pre.Metaspace and p.prepend_scheme == "first"

        return self.normalizer is not None and _aligns(self.normalizer) and first_metaspace(self.pre_tokenizer)

    def _from_first(self, raw: str, norm: str) -> int:
        """How many characters at the start of ``norm`` (the normalized ``raw``, which starts the
        text) come from the text's first character. Where every step of the normalizer works on
        each place from what is near it (no regex replacement: a regex's match at the start can
        depend on text far beyond it), told from a prefix of ``raw`` whose normalization agrees
        with the whole's well past them; else from the whole."""
        for part in ((raw[:64], raw) if _aligns(self.normalizer, local=True) else (raw,)):
            try:
                part_norm, origins = self.normalizer.normalize_aligned(part)
            except (NotImplementedError, ValueError, AttributeError):
                return int(self._normalize(raw)[1])
            count = 0
            while count < len(origins) and origins[count] in (0, NO_ORIGIN):
                count += 1
            if len(part) == len(raw) or (count + 8 < len(part_norm) and norm.startswith(part_norm[:-8])):
                return count
        return count

    # ------------------------------------------------------------------ vocabulary and decoding

    def id_to_token(self, id: int) -> str | None:
        name = self._added_names.get(id)
        return name if name is not None else self.model.id_to_token(id)

    def token_to_id(self, token: str) -> int | None:
        added = self._added_by_content.get(token)
        return added.id if added is not None else self.model.token_to_id(token)

    def _tokens_to_decode(self, ids: Iterable[int], skip_special_tokens: bool) -> list[str]:
        from .errors import DecodeError

        tokens = []
        for i in ids:
            token = self.id_to_token(i) if isinstance(i, int) and i >= 0 else None
            if token is None:
                raise DecodeError(f"id {i!r} is not in the vocabulary (0 to {self.vocab_size - 1})")
            # As in Hugging Face, a token is special by its string (a normalized special token whose
            # string changed is kept; an ordinary token spelled like a special one is dropped).
            if skip_special_tokens and token in self._special_contents:
                continue
            tokens.append(token)
        return tokens

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        tokens = self._tokens_to_decode(ids, skip_special_tokens)
        return self.decoder.decode(tokens) if self.decoder is not None else "".join(tokens)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of ``ids``: ``decode``'s, but a token holding part of a character (a byte
        token, a byte-level token) gives its own bytes where ``decode`` has U+FFFD. What the
        decoder does to the text is done to these bytes too (a ``Strip`` drops a leading space
        byte as it drops a leading space)."""
        tokens = self._tokens_to_decode(ids, False)
        if self.decoder is None:
            return "".join(tokens).encode("utf-8")
        if hasattr(self.decoder, "decode_bytes"):
            return self.decoder.decode_bytes(tokens)
        return self.decoder.decode(tokens).encode("utf-8")

    @property
    def vocab_size(self) -> int:
        return max([self.model.vocab_size - 1, *self._added_by_id]) + 1


def _extend_shifted(ids: list[int], spans: list[tuple[int, int]], pieces: list[tuple[int, int, int]], shift: int) -> None:
    """Appends the ids of ``pieces`` (id, start, end) to ``ids`` and their spans, moved by
    ``shift``, to ``spans`` (whole lists at a time: documents have thousands of tokens)."""
    if not pieces:
        return
    got_ids, starts, ends = zip(*pieces)
    ids.extend(got_ids)
    if shift:
        starts, ends = map(shift.__add__, starts), map(shift.__add__, ends)
    spans.extend(zip(starts, ends))


def utf8_origins(normalized: str, origin: Sequence[int], end: int) -> list[int]:
    """For each UTF-8 byte of ``normalized``, the origin of its character (``origin`` holds one
    per character), then ``end``: the form `sentencepiece_spans` maps tokens back with."""
    import numpy as np

    data = normalized.encode("utf-8")
    if len(data) == len(normalized):
        return [*origin, end]
    starts = (np.frombuffer(data, dtype=np.uint8) & 0xC0) != 0x80
    return [*np.asarray(origin, dtype=np.int64)[np.cumsum(starts) - 1].tolist(), end]


def _aligns(n, local: bool = False) -> bool:
    """Whether toksmith tracks where each character of normalizer ``n`` comes from as
    `tokenizers` aligns it (``normalize_aligned``): Precompiled, replacements, strips,
    lowercasing, prepends, and sequences of them. ``local``: and none is a regex replacement."""
    from . import normalizers as norm

    if type(n) is norm.Sequence:
        return all(_aligns(m, local) for m in n.normalizers)
    if type(n) is norm.Replace:
        return not (local and n.is_regex)
    return type(n) in (norm.Precompiled, norm.Strip, norm.Lowercase, norm.Prepend)


def unigram_token_spans(word: str, tokens: list[str], unknown: list[bool], byte_fallback: bool,
                        pieces: frozenset[str] = frozenset(), unk_piece: str | None = None) -> list[tuple[int, int]] | None:
    """The span in ``word`` of each of its Unigram tokens (their strings; ``unknown`` marks the
    unknown id), as `tokenizers` gives them, or None if they cannot cover it. A token spans its
    string; an unknown token the run of unknown characters fused into it (the unknown token's
    own string included); a run of byte tokens (byte fallback) the characters of their bytes,
    each token all of them. Where the text allows several readings (an unknown run followed by
    a token whose string also occurs inside it, a string like "<0x41>" in the text), the one
    that covers the whole word is found by a search that tries its own string first, then the
    shortest unknown run, and remembers the places that failed. An unknown run is made of
    characters that are not ``pieces`` (single-character pieces) and copies of ``unk_piece``
    (the unknown token's own string, which `tokenizers` fuses with them)."""
    n, size = len(tokens), len(word)

    def unknown_ends(at: int) -> list[int]:
        """Where an unknown run from ``at`` may end, shortest first."""
        reached, todo = set(), [at]
        while todo:
            p = todo.pop()
            steps = ([p + 1] if p < size and word[p] not in pieces else []) + (
                [p + len(unk_piece)] if unk_piece and word.startswith(unk_piece, p) else [])
            for q in steps:
                if q not in reached:
                    reached.add(q)
                    todo.append(q)
        return sorted(reached)
    is_byte = [byte_fallback and byte_of_token(t) is not None for t in tokens]

    def advance(k: int, at: int, spans: list[tuple[int, int]]) -> tuple[int, int] | None:
        """Past the tokens from ``k`` on that can only be their own string (most of them)."""
        while k < n and not unknown[k] and not is_byte[k]:
            token = tokens[k]
            if not token or not word.startswith(token, at):
                return None
            spans.append((at, at + len(token)))
            at += len(token)
            k += 1
        return k, at

    def options(k: int, at: int) -> Iterator[tuple[int, int, list[tuple[int, int]]]]:
        """The readings of the token at ``k`` (an unknown or a byte token) from ``at``, each with
        the tokens after it that can only be their own string."""
        token = tokens[k]
        if token and word.startswith(token, at):
            yield k + 1, at + len(token), [(at, at + len(token))]
        if is_byte[k]:
            run = k + 1
            while run < n and is_byte[run]:
                run += 1
            ends = {len(word[at:end].encode("utf-8")): end for end in unknown_ends(at)}  # bytes -> end
            for last in range(run, k, -1):  # the longest run first: a byte token's string in the text is rare
                end = ends.get(last - k)
                if end is not None:
                    yield last, end, [(at, end)] * (last - k)
        if unknown[k]:
            for end in unknown_ends(at):
                yield k + 1, end, [(at, end)]

    first: list[tuple[int, int]] = []
    state = advance(0, 0, first)
    if state is None:
        return None
    if state == (n, size):
        return first
    failed: set[tuple[int, int]] = set()
    chosen = [first]
    stack = [(state[0], state[1], options(*state))] if state[0] < n else []
    while stack:
        k, at, choices = stack[-1]
        step = next(choices, None)
        if step is None:
            failed.add((k, at))
            stack.pop()
            chosen.pop()
            continue
        nk, nat, spans = step
        spans = list(spans)
        reached = advance(nk, nat, spans)
        if reached is None or reached in failed:
            continue
        if reached[0] == n:
            if reached[1] == size:
                return [span for part in chosen for span in part] + spans
            continue
        chosen.append(spans)
        stack.append((reached[0], reached[1], options(*reached)))
    return None


def sentencepiece_spans(text: str, normalizer, encode: Callable[[str], list[int]],
                        pieces: Sequence[str], kinds: Sequence[int]) -> list[tuple[int, int, int]]:
    """(id, start, end) in ``text`` of the tokens of a SentencePiece-style model, as SentencePiece
    gives them (``begin``, ``end``, in characters): each token's bytes in the normalized text,
    mapped back by the normalizer's ``normalize_with_offsets``. ``encode`` gives the ids of the
    normalized text; ``pieces`` and ``kinds`` (SentencePiece's numbering, which GGUF shares) say
    each token's bytes there. A byte token is one byte; an unknown token (a run of unknown
    characters) spans what the tokens around it leave: the fewest characters after which the
    known tokens up to the next unknown one follow."""
    from .formats.sentencepiece import BYTE, UNKNOWN

    def surface(i: int) -> bytes | None:
        kind = kinds[i]
        return bytes([byte_of_token(pieces[i])]) if kind == BYTE else None if kind == UNKNOWN else pieces[i].encode("utf-8")

    norm, origin = normalizer.normalize_with_offsets(text)
    if norm != normalizer.normalize(text):
        raise EncodeError("encode_with_offsets cannot align this text with its normalized form; encode() gives its ids")
    data = norm.encode("utf-8")
    ids = encode(norm) if norm else []
    # Each token's bytes; None for an unknown token, whose length is solved below.
    table = {i: surface(i) for i in set(ids)}
    surfaces = list(map(table.__getitem__, ids))
    if None not in table.values() and b"".join(surfaces) == data:  # most texts: no unknown token
        ends = itertools.accumulate(map(len, surfaces), initial=0)
        at = list(map(origin.__getitem__, ends))
        return list(zip(ids, at, at[1:]))
    # Runs of known tokens, each checked and mapped back whole; each unknown token between two
    # runs gets the fewest characters after which the next run follows.
    bounds = [k for k, piece in enumerate(surfaces) if piece is None] + [len(ids)]
    out: list[tuple[int, int, int]] = []
    at = k = 0
    for j, u in enumerate(bounds):
        run = b"".join(surfaces[k:u])
        if not data.startswith(run, at):
            raise EncodeError(f"encode_with_offsets: the tokens of {text[:40]!r} do not follow its normalized "
                              "text; please report this input")
        starts = list(map(origin.__getitem__, itertools.accumulate(map(len, surfaces[k:u]), initial=at)))
        out.extend(zip(ids[k:u], starts, starts[1:]))
        at += len(run)
        if u == len(ids):
            break
        following = bounds[j + 1]  # the next unknown token, or the end
        after = b"".join(surfaces[u + 1:following])
        last = following == len(ids)
        n = next((n for n in range(1, len(data) - at + 1)
                  if (at + n == len(data) or data[at + n] & 0xC0 != 0x80) and data.startswith(after, at + n)
                  and (not last or at + n + len(after) == len(data))), None)
        if n is None:
            raise EncodeError(f"encode_with_offsets: the tokens of {text[:40]!r} do not follow its normalized "
                              "text; please report this input")
        out.append((ids[u], origin[at], origin[at + n]))
        at += n
        k = u + 1
    if at != len(data):
        raise EncodeError(f"encode_with_offsets: the tokens of {text[:40]!r} do not cover its normalized text; "
                          "please report this input")
    return out
