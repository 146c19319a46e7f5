"""SentencePiece ``.model`` files (BPE and Unigram), encoded and decoded exactly as the
``sentencepiece`` library does.

The file is a ``ModelProto`` protobuf, parsed with the schema the ``sentencepiece`` package
ships (``sentencepiece_model_pb2``, which needs ``protobuf``). What SentencePiece does, and how
it maps onto toksmith's pipeline:

- normalizer (:class:`SentencePieceNormalizer`): the precompiled character map
  (:mod:`toksmith.charsmap`), then whitespace: leading, trailing and repeated spaces dropped
  (``remove_extra_whitespaces``), a space put in front (``add_dummy_prefix``), spaces written
  as ``▁`` (``escape_whitespaces``). User-defined pieces pass through unnormalized.
- model: the whole normalized text at once (SentencePiece does not split it into words).
  BPE joins, again and again, the adjacent pair whose concatenation is the piece with the
  highest score (leftmost among equals): that is toksmith's rank-based BPE with merges derived
  from the scores (:class:`SentencePieceBPE`). Unigram is Viterbi (:class:`SentencePieceUnigram`).
  User-defined pieces are never split; control, unknown and byte pieces are never produced
  from text; unused pieces are never output; characters without a piece become ``<unk>``
  (runs of them one ``<unk>``) or, with ``byte_fallback``, their UTF-8 bytes ``<0xAB>``.
- decoder (:class:`SentencePieceDecoder`): ``▁`` back to spaces, the leading one dropped,
  byte pieces joined into UTF-8, control pieces dropped, ``<unk>`` shown as `` ⁇ ``.

Control pieces (``<s>``, ``</s>``) and the unknown piece are special tokens: SentencePiece
never reads them from text, and toksmith only does when the caller allows it.
"""

from __future__ import annotations

import heapq
import math
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import _core, models
from ..charsmap import KEPT, PrecompiledCharsmap
from ..errors import FormatError
from ..models import SPACE  # ▁, SentencePiece's visible space
from ..pipeline import AddedToken, Pipeline, carry_out, utf8_origins
from ..tokenizer import Tokenizer


# ModelProto.SentencePiece.Type values
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_TYPE_NAMES = {NORMAL: "NORMAL", UNKNOWN: "UNKNOWN", CONTROL: "CONTROL", USER_DEFINED: "USER_DEFINED",
               UNUSED: "UNUSED", BYTE: "BYTE"}
# TrainerSpec.ModelType values
_UNIGRAM, _BPE, _WORD, _CHAR = 1, 2, 3, 4


def _model_pb2():
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as e:
        raise ImportError(
            f"reading SentencePiece .model files needs the 'sentencepiece' and 'protobuf' packages ({e}); "
            f"install them with: pip install sentencepiece protobuf"
        ) from None
    return sentencepiece_model_pb2


def read_model_proto(data: bytes, source: str = "<bytes>"):
    """Parses the bytes of a ``.model`` file into a ``ModelProto``; FormatError if they are not one."""
    from google.protobuf.message import DecodeError

    proto = _model_pb2().ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise FormatError(f"{source} is not a SentencePiece model: the protobuf does not parse ({e})") from None
    if not proto.pieces:
        raise FormatError(f"{source} is not a SentencePiece model: it has no pieces")
    return proto


# ---------------------------------------------------------------------------- normalizer


class SentencePieceNormalizer:
    """SentencePiece's ``Normalizer``: character map, then whitespace handling.

    >>> SentencePieceNormalizer().normalize("  Hello   world ")
    '▁Hello▁world'
    >>> SentencePieceNormalizer(remove_extra_whitespaces=False).normalize(" a  b")
    '▁▁a▁▁b'
    """

    def __init__(self, precompiled_charsmap: bytes = b"", *, add_dummy_prefix: bool = True,
                 remove_extra_whitespaces: bool = True, escape_whitespaces: bool = True,
                 user_defined: Iterable[str] = ()) -> None:
        self.charsmap = PrecompiledCharsmap(precompiled_charsmap)
        self.add_dummy_prefix = add_dummy_prefix
        self.remove_extra_whitespaces = remove_extra_whitespaces
        self.escape_whitespaces = escape_whitespaces
        self.user_defined = frozenset(user_defined)
        self._rust = None

    # The Rust normalizer is made on first use (its rule table takes ~0.1 s for NFKC) and is
    # not pickled: made again after unpickling.
    def __getstate__(self) -> dict:
        return {**self.__dict__, "_rust": None}

    def normalize(self, text: str) -> str:
        """``text`` normalized (in Rust: the same steps as :meth:`normalize_in_python`)."""
        return self.rust().normalize(text)

    def rust(self):
        """The ``_core.SentencePieceNormalizer`` that normalizes (made on first use)."""
        if self._rust is None:
            self._rust = _core.SentencePieceNormalizer(
                list(self.charsmap.table.items()), list(self.user_defined), self.add_dummy_prefix,
                self.remove_extra_whitespaces, self.escape_whitespaces)
        return self._rust

    def normalize_in_python(self, text: str) -> str:
        """The normalization step by step: the reference for the Rust one (tests compare them)."""
        pieces = list(self.charsmap.pieces(text, self.user_defined))
        squeeze = self.remove_extra_whitespaces
        if squeeze:
            pieces = _drop_leading_spaces(pieces)
        if not pieces:
            return ""
        space = SPACE if self.escape_whitespaces else " "
        out = [space] if self.add_dummy_prefix else []
        # SentencePiece looks at whitespace piece by piece: a piece loses its leading spaces when
        # the previous one ended with a space. A run of KEPT characters is one piece per character.
        prev_space = squeeze
        for piece, kind in pieces:
            if squeeze:
                if prev_space:
                    piece = piece.lstrip(" ")
                if kind == KEPT:
                    piece = _squeeze_spaces(piece)
                if piece:
                    prev_space = piece.endswith(" ")
            out.append(piece.replace(" ", space) if self.escape_whitespaces else piece)
        normalized = "".join(out)
        return normalized.rstrip(space) if squeeze else normalized

    def normalize_with_offsets(self, text: str) -> tuple[str, list[int]]:
        """The normalized text, and for each of its UTF-8 bytes, then for its end, the index of
        the character of ``text`` it comes from, as SentencePiece's ``norm_to_orig`` (in
        characters rather than bytes): a rule's replacement maps to where its source starts, a
        run of spaces made one to its first space, the dummy prefix to the first character
        kept, the end to the end of the text or of its last character before trailing spaces.
        SentencePiece consumes a run of characters no rule applies to one character at a time
        (`normalize_in_python` takes such runs whole, with the same result); here such a run
        is taken whole too, its spaces squeezed with numpy."""
        import numpy as np

        squeeze = self.remove_extra_whitespaces
        space = SPACE if self.escape_whitespaces else " "
        out: list[str] = []
        origin: list = []  # per character of the normalized text: ranges, lists and arrays of indices
        started = False  # whether the dummy prefix is out (leading spaces are skipped before it)
        prev_space = squeeze
        for piece, kind, at in self.charsmap.pieces_from(text, self.user_defined):
            if kind == KEPT:
                if squeeze:
                    # Each space after a space (or after a piece that ended with one, or before
                    # the first character kept) goes: a run of spaces becomes its first.
                    codes = np.frombuffer(piece.encode("utf-32-le"), dtype=np.uint32)
                    is_space = codes == 32
                    after_space = np.empty_like(is_space)
                    after_space[0] = prev_space
                    after_space[1:] = is_space[:-1]
                    kept = np.flatnonzero(~(is_space & after_space))
                    if not len(kept):
                        continue
                    piece = codes[kept].tobytes().decode("utf-32-le")
                    prev_space = piece.endswith(" ")
                    sources = kept + at
                else:
                    sources = range(at, at + len(piece))
                if not started:
                    started = True
                    if self.add_dummy_prefix:
                        out.append(space)
                        origin.append([sources[0]])
                out.append(piece.replace(" ", space) if self.escape_whitespaces else piece)
                origin.append(sources)
                continue
            # A rule's replacement (or a protected string): every character maps to its start.
            if not started:
                if squeeze and piece == " ":
                    continue  # SentencePiece skips leading pieces that are a space
                started = True
                if self.add_dummy_prefix:
                    out.append(space)
                    origin.append([at])
            if squeeze:
                if prev_space:
                    piece = piece.lstrip(" ")
                if piece:
                    prev_space = piece.endswith(" ")
            if piece:
                out.append(piece.replace(" ", space) if self.escape_whitespaces else piece)
                origin.append([at] * len(piece))
        if not started:
            return "", [len(text)]
        normalized, end = "".join(out), len(text)
        flat = np.concatenate([np.asarray(o, dtype=np.int64) for o in origin]) if origin else np.zeros(0, np.int64)
        if squeeze:
            stripped = normalized.rstrip(space)
            if len(stripped) < len(normalized):
                end = int(flat[len(stripped)])
                normalized, flat = stripped, flat[:len(stripped)]
        return normalized, utf8_origins(normalized, flat.tolist(), end)



def _drop_leading_spaces(pieces: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Drops the leading pieces that are a single space (the characters of KEPT runs count one by one)."""
    for i, (piece, kind) in enumerate(pieces):
        if kind == KEPT:
            rest = piece.lstrip(" ")
            if rest:
                return [(rest, kind), *pieces[i + 1:]]
        elif piece != " ":
            return pieces[i:]
    return []


def _squeeze_spaces(text: str) -> str:
    while "  " in text:
        text = text.replace("  ", " ")
    return text


# ---------------------------------------------------------------------------- models


class _PieceVocab:
    """Id <-> piece bookkeeping of a SentencePiece vocabulary (pieces are unique)."""

    def __init__(self, pieces: Sequence[tuple[str, float, int]]) -> None:
        self.pieces = [p for p, _, _ in pieces]
        self.scores = [s for _, s, _ in pieces]
        self.types = [t for _, _, t in pieces]
        self._ids = {p: i for i, p in enumerate(self.pieces)}

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def get_vocab(self) -> dict[str, int]:
        return dict(self._ids)

    def token_to_id(self, token: str) -> int | None:
        return self._ids.get(token)

    def id_to_token(self, id: int) -> str | None:
        return self.pieces[id] if 0 <= id < len(self.pieces) else None

    def _ids_of(self, *types: int) -> list[int]:
        return [i for i, t in enumerate(self.types) if t in types]


def _split_user_defined(text: str, user_defined: frozenset[str], longest: int) -> list[tuple[str, bool]]:
    """Splits ``text`` into (segment, is_user_defined), matching user-defined pieces longest
    first at each position from the left, as SentencePiece's prefix matcher does."""
    if not user_defined:
        return [(text, False)]
    out: list[tuple[str, bool]] = []
    start = pos = 0
    while pos < len(text):
        for length in range(min(longest, len(text) - pos), 0, -1):
            if text[pos:pos + length] in user_defined:
                if pos > start:
                    out.append((text[start:pos], False))
                out.append((text[pos:pos + length], True))
                pos = start = pos + length
                break
        else:
            pos += 1
    if start < len(text):
        out.append((text[start:], False))
    return out


class SentencePieceBPE(_PieceVocab):
    """SentencePiece's BPE: repeatedly joins the adjacent pair that forms the highest-scoring
    piece (the leftmost among equal scores).

    That is rank-based BPE once every split (left, right) of every piece is a merge, ranked by
    the score of the piece it forms. Among equal scores the longer piece ranks first: in
    SentencePiece the leftmost pair wins, and the ties real models have (Llama and Mistral give
    every run of ``▁`` the same score) are runs the leftmost symbol keeps growing, which
    "longer first" reproduces.
    """

    def __init__(self, pieces: Sequence[tuple[str, float, int]], *, unk_id: int, byte_fallback: bool) -> None:
        super().__init__(pieces)
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self.user_defined = frozenset(self.pieces[i] for i in self._ids_of(USER_DEFINED))
        self._longest_user = max(map(len, self.user_defined), default=0)
        # Pairs may only form normal, user-defined and unused pieces.
        targets = self._ids_of(NORMAL, USER_DEFINED, UNUSED)
        ranked = []
        for i in targets:
            piece = self.pieces[i]
            for k in range(1, len(piece)):
                left, right = self._ids.get(piece[:k]), self._ids.get(piece[k:])
                if left is not None and right is not None:
                    ranked.append((-self.scores[i], -len(piece), i, left, right))
        ranked.sort()
        self.merges = [(self.pieces[left], self.pieces[right]) for _, _, _, left, right in ranked]
        self._unused = frozenset(self._ids_of(UNUSED))
        self._byte_ids = _byte_ids(self, unk_id) if byte_fallback else None
        if self._unused or (byte_fallback and unk_id in self._byte_ids):
            # Unused pieces can be formed and then split again, and byte fallback with missing
            # byte pieces mixes bytes and <unk>: toksmith's BPE does neither, so these rare
            # models run SentencePiece's loop itself, in Python.
            self._core = None
        else:
            # SentencePiece merges over a whole sentence at once; word by word gives the same
            # ids, cut where no piece that pairs may form crosses (see `word_split_pattern`).
            # Mistral 7B on English: 4.9 MB/s as one sequence, 12.2 word by word.
            split = models.word_split_pattern(self.pieces[i] for i in targets)
            self._core = models.BPE(self.get_vocab(), self.merges, unk_token=self.pieces[unk_id],
                                    byte_fallback=byte_fallback, fuse_unk=True, split_pattern=split)

    def encode_words(self, words: Iterable[str]) -> list[int]:
        out: list[int] = []
        for word in words:
            for segment, is_user in _split_user_defined(word, self.user_defined, self._longest_user):
                if is_user:
                    out.append(self._ids[segment])
                elif self._core is not None:
                    out.extend(self._core.encode_text(segment))
                else:
                    out.extend(self._encode_exact(segment))
        return out if self.byte_fallback else _fuse_unk(out, self.unk_id)

    def encode_words_batch(self, batch: list[list[str]], num_threads: int | None = None) -> list[list[int]]:
        """``encode_words`` of each list of words; the text between user-defined pieces is
        encoded on ``num_threads`` Rust threads at once."""
        if self._core is None:
            return [self.encode_words(words) for words in batch]
        plans: list[list[int]] = []  # per item: user-defined piece ids, and ~k for segment k
        segments: list[str] = []
        for words in batch:
            plan = []
            for word in words:
                for segment, is_user in _split_user_defined(word, self.user_defined, self._longest_user):
                    if is_user:
                        plan.append(self._ids[segment])
                    else:
                        plan.append(~len(segments))
                        segments.append(segment)
            plans.append(plan)
        encoded = self._core.encode_texts(segments, num_threads)
        out = [carry_out(plan, encoded) for plan in plans]
        return out if self.byte_fallback else [_fuse_unk(ids, self.unk_id) for ids in out]

    def _encode_exact(self, text: str) -> list[int]:
        """SentencePiece's BPE loop itself, for models with unused pieces."""
        symbols = list(text)
        nxt = list(range(1, len(symbols))) + [-1]
        prv = list(range(-1, len(symbols) - 1))
        agenda: list[tuple[float, int, int, int]] = []
        formed_from: dict[str, tuple[str, str]] = {}

        def consider(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            joined = symbols[left] + symbols[right]
            i = self._ids.get(joined)
            if i is None or self.types[i] not in (NORMAL, USER_DEFINED, UNUSED):
                return
            heapq.heappush(agenda, (-self.scores[i], left, right, len(joined)))
            if i in self._unused:
                formed_from[joined] = (symbols[left], symbols[right])

        for i in range(len(symbols) - 1):
            consider(i, i + 1)
        while agenda:
            _, left, right, size = heapq.heappop(agenda)
            if not symbols[left] or not symbols[right] or len(symbols[left]) + len(symbols[right]) != size:
                continue
            symbols[left] += symbols[right]
            symbols[right] = ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            consider(prv[left], left)
            consider(left, nxt[left])

        out: list[int] = []

        def emit(piece: str) -> None:
            i = self._ids.get(piece)
            if i is not None and i in self._unused and piece in formed_from:
                for part in formed_from[piece]:
                    emit(part)
            elif i is None or i in self._unused:  # an unused character is unknown
                out.extend(self._unknown(piece))
            else:
                out.append(i)

        pos = 0
        while pos >= 0 and pos < len(symbols):
            emit(symbols[pos])
            pos = nxt[pos]
        return out

    def _unknown(self, char: str) -> list[int]:
        if self._byte_ids is not None:
            return [self._byte_ids[b] for b in char.encode("utf-8")]
        return [self.unk_id]


def _byte_ids(vocab: _PieceVocab, unk_id: int) -> list[int]:
    """Ids of the pieces ``<0x00>`` ... ``<0xFF>`` (the unknown id where one is missing, as in SentencePiece)."""
    ids = [vocab.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    return [unk_id if i is None else i for i in ids]


def _fuse_unk(ids: list[int], unk_id: int) -> list[int]:
    """SentencePiece reports a run of unknown pieces as one."""
    if unk_id not in ids:
        return ids
    return [i for k, i in enumerate(ids) if not (i == unk_id and k > 0 and ids[k - 1] == unk_id)]


class SentencePieceUnigram(_PieceVocab):
    """SentencePiece's Unigram model: the segmentation with the highest total score (Viterbi).

    Only normal, user-defined and unused pieces are in SentencePiece's lattice, and unused ones
    are skipped; a user-defined piece scores ``bytes * max_score - 0.1`` (``max_score`` being
    the highest normal score, at least the smallest positive float) so that it is always chosen.
    SentencePiece sums path scores in f32, which decides near-ties (``float32_scores``).
    """

    def __init__(self, pieces: Sequence[tuple[str, float, int]], *, unk_id: int, byte_fallback: bool) -> None:
        super().__init__(pieces)
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        normal = [s for s, t in zip(self.scores, self.types) if t == NORMAL]
        max_score = max([_F32_MIN_POSITIVE, *normal])
        lattice: list[tuple[str, float]] = []
        exclude = []
        for i, (piece, score, kind) in enumerate(zip(self.pieces, self.scores, self.types)):
            if kind == USER_DEFINED:
                score = _f32(_f32(len(piece.encode("utf-8")) * max_score) - 0.1)
            elif kind == BYTE:
                score = float("-inf")  # kept for byte fallback, never matched in the text
            elif kind != NORMAL:
                exclude.append(i)
            lattice.append((piece, score))
        options = dict(unk_id=unk_id, byte_fallback=byte_fallback, fuse_unk=True, exclude=exclude)
        try:
            # SentencePiece keeps path scores in f32, which decides rare near-ties differently.
            self._core = models.Unigram(lattice, float32_scores=True, **options)
            self.float32_scores = True
        except TypeError:  # a toksmith whose Unigram cannot do that yet: f64, like Hugging Face
            self._core = models.Unigram(lattice, **options)
            self.float32_scores = False

    def encode_words(self, words: Iterable[str]) -> list[int]:
        return self._core.encode_words(words)

    def encode_words_batch(self, batch: list[list[str]], num_threads: int | None = None) -> list[list[int]]:
        return self._core.encode_words_batch(batch, num_threads)


_F32_MIN_POSITIVE = struct.unpack("<f", struct.pack("<I", 0x00800000))[0]  # C's FLT_MIN


def _f32(x: float) -> float:
    """``x`` rounded to single precision, as SentencePiece's float arithmetic does."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ---------------------------------------------------------------------------- decoder


class SentencePieceDecoder:
    """SentencePiece's ``Decode``: pieces back to text.

    ``kinds`` maps each piece to its type; ``strip_leading_space``: the first ``▁`` of the
    text is a dummy prefix (``add_dummy_prefix`` or ``remove_extra_whitespaces``).
    """

    def __init__(self, kinds: dict[str, int], *, unk_surface: str = " \u2047 ", add_dummy_prefix: bool = True,
                 remove_extra_whitespaces: bool = True, denormalizer: SentencePieceNormalizer | None = None) -> None:
        self.kinds = kinds
        self.unk_surface = unk_surface
        self.add_dummy_prefix = add_dummy_prefix
        self.remove_extra_whitespaces = remove_extra_whitespaces
        self.denormalizer = denormalizer

    def starts_over(self, tokens: list[str]) -> bool:
        """Whether ``tokens`` decode to nothing and leave ``decode`` where it starts (still at the
        start of the text): then what follows them decodes as if they were not there. A stream
        decoder drops such ids (leading ``▁`` pieces, control pieces) instead of decoding a run
        of them again with every new id."""
        at_start = True
        for token in tokens:
            kind = self.kinds.get(token, NORMAL)
            if kind == CONTROL:
                continue
            if kind in (BYTE, UNKNOWN):
                return False  # both give text
            if at_start and (self.add_dummy_prefix or self.remove_extra_whitespaces) and token.startswith(SPACE):
                token = token[1:]
                at_start = self.remove_extra_whitespaces
            if token:
                return False
        return at_start

    def neutral(self, previous: str, token: str) -> bool:
        """Whether ``token`` after ``previous`` changes nothing, whatever follows: a control
        piece, unless it ends a run of byte pieces (which it would decode apart from the next)."""
        return self.kinds.get(token, NORMAL) == CONTROL and self.kinds.get(previous, NORMAL) != BYTE

    def decode(self, tokens: list[str]) -> str:
        return self._decode(tokens, raw_bytes=False)

    def decode_bytes(self, tokens: list[str]) -> bytes:
        """``decode`` as bytes, a run of byte pieces that is not valid UTF-8 as its bytes (where
        ``decode`` has U+FFFD); with a denormalizer (which works on text), ``decode``'s UTF-8."""
        if self.denormalizer is not None:
            return self.decode(tokens).encode("utf-8")
        return self._decode(tokens, raw_bytes=True).encode("utf-8", "surrogateescape")

    def _decode(self, tokens: list[str], raw_bytes: bool) -> str:
        # raw_bytes: invalid byte runs as lone surrogates, which "surrogateescape" makes bytes again.
        decode_run = (lambda data: data.decode("utf-8", "surrogateescape")) if raw_bytes else _decode_bytes
        text: list[str] = []
        pending = bytearray()  # a run of byte pieces, decoded together
        at_start = True  # still where a leading ▁ is the dummy prefix
        for token in tokens:
            kind = self.kinds.get(token, NORMAL)
            if kind == BYTE:
                pending.append(int(token[3:5], 16))
                continue
            if pending:
                text.append(decode_run(pending))
                pending.clear()
            if any(text):
                at_start = False
            if kind == CONTROL:
                continue
            if kind == UNKNOWN:
                text.append(self.unk_surface)
                continue
            if at_start and (self.add_dummy_prefix or self.remove_extra_whitespaces) and token.startswith(SPACE):
                token = token[1:]
                # with remove_extra_whitespaces every leading ▁ goes, else only the first one
                at_start = self.remove_extra_whitespaces
            text.append(token.replace(SPACE, " "))
        if pending:
            text.append(decode_run(pending))
        decoded = "".join(text)
        return self.denormalizer.normalize(decoded) if self.denormalizer is not None else decoded


def _decode_bytes(data: bytes) -> str:
    """UTF-8 bytes to text, each byte of an invalid sequence becoming U+FFFD (as SentencePiece does)."""
    out, i = [], 0
    while i < len(data):
        lead = data[i]
        length = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 0
        try:
            out.append(data[i:i + length].decode("utf-8") if length and i + length <= len(data) else None)
        except UnicodeDecodeError:
            out.append(None)
        if out[-1] is None:
            out[-1] = "\ufffd"
            i += 1
        else:
            i += length
    return "".join(out)


# ---------------------------------------------------------------------------- loader


def load_sentencepiece(path: str | os.PathLike) -> Tokenizer:
    """Loads a SentencePiece ``.model`` file (BPE or Unigram).

    ``encode`` gives the ids of ``SentencePieceProcessor.encode(text)`` (no ``<s>``/``</s>``:
    SentencePiece adds them only when asked) and ``decode`` its text.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except OSError as e:
        raise FormatError(f"cannot read {path}: {e}") from None
    return sentencepiece_from_bytes(data, source=str(path))


def sentencepiece_from_bytes(data: bytes, *, source: str = "<bytes>") -> Tokenizer:
    """Like :func:`load_sentencepiece`, from the bytes of a ``.model`` file."""
    proto = read_model_proto(data, source)
    return sentencepiece_from_proto(proto, source=source)


def sentencepiece_from_proto(proto, *, source: str = "<ModelProto>") -> Tokenizer:
    """Builds the tokenizer of a parsed ``ModelProto``, refusing what it cannot reproduce."""
    trainer, norm = proto.trainer_spec, proto.normalizer_spec

    def bad(what: str) -> FormatError:
        return FormatError(f"{source}: {what}")

    model_type = trainer.model_type
    if model_type not in (_UNIGRAM, _BPE):
        name = {_WORD: "WORD", _CHAR: "CHAR"}.get(model_type, str(model_type))
        raise bad(f"model type {name} is not supported (toksmith reads BPE and Unigram SentencePiece models)")
    if trainer.treat_whitespace_as_suffix:
        raise bad("treat_whitespace_as_suffix is not supported")
    pieces: list[tuple[str, float, int]] = []
    seen: set[str] = set()
    for i, p in enumerate(proto.pieces):
        kind = p.type
        if kind not in _TYPE_NAMES:
            raise bad(f"piece {i} has an unknown type {kind}")
        if not isinstance(p.piece, str):  # protobuf hands back bytes for invalid UTF-8
            raise bad(f"piece {i} is not valid UTF-8")
        if not p.piece:
            raise bad(f"piece {i} is empty")
        if p.piece in seen:
            raise bad(f"the piece {p.piece!r} appears twice")
        seen.add(p.piece)
        if kind == BYTE:
            if not trainer.byte_fallback:
                raise bad(f"byte piece {p.piece!r} found although byte_fallback is off")
            if not _is_byte_piece(p.piece):
                raise bad(f"byte piece {p.piece!r} is not of the form <0xAB>")
        if not math.isfinite(p.score):
            raise bad(f"piece {i} ({p.piece!r}) has the score {p.score}; scores must be finite numbers")
        pieces.append((p.piece, p.score, kind))
    unknown = [i for i, (_, _, kind) in enumerate(pieces) if kind == UNKNOWN]
    if len(unknown) != 1:
        raise bad(f"a model needs exactly one UNKNOWN piece; this one has {len(unknown)}")
    unk_id = unknown[0]
    if not isinstance(trainer.unk_surface, str):
        raise bad("unk_surface is not valid UTF-8")

    user_defined = [p for p, _, kind in pieces if kind == USER_DEFINED]
    model_class = SentencePieceBPE if model_type == _BPE else SentencePieceUnigram
    # (The charsmaps and the model check themselves; their errors get the file's name here.)
    try:
        normalizer = SentencePieceNormalizer(
            norm.precompiled_charsmap, add_dummy_prefix=norm.add_dummy_prefix,
            remove_extra_whitespaces=norm.remove_extra_whitespaces, escape_whitespaces=norm.escape_whitespaces,
            user_defined=user_defined,
        )
        model = model_class(pieces, unk_id=unk_id, byte_fallback=trainer.byte_fallback)
        denormalizer = None
        if proto.HasField("denormalizer_spec") and proto.denormalizer_spec.precompiled_charsmap:
            d = proto.denormalizer_spec
            denormalizer = SentencePieceNormalizer(
                d.precompiled_charsmap, add_dummy_prefix=d.add_dummy_prefix,
                remove_extra_whitespaces=d.remove_extra_whitespaces, escape_whitespaces=d.escape_whitespaces)
    except FormatError as e:
        raise bad(str(e)) from None
    decoder = SentencePieceDecoder(
        {p: kind for p, _, kind in pieces}, unk_surface=trainer.unk_surface,
        add_dummy_prefix=norm.add_dummy_prefix, remove_extra_whitespaces=norm.remove_extra_whitespaces,
        denormalizer=denormalizer,
    )
    specials = [AddedToken(p, i, special=True) for i, (p, _, kind) in enumerate(pieces) if kind in (CONTROL, UNKNOWN)]
    pipeline = Pipeline(model, normalizer=normalizer, decoder=decoder, added_tokens=specials)
    metadata = {
        "source": "sentencepiece",
        "model_type": "bpe" if model_type == _BPE else "unigram",
        "normalizer": norm.name if isinstance(norm.name, str) else repr(norm.name),
        "byte_fallback": trainer.byte_fallback,
        # The names SentencePiece finds unk_id(), bos_id(), eos_id() and pad_id() by, kept for writing.
        "special_pieces": {k: getattr(trainer, f"{k}_piece") for k in ("unk", "bos", "eos", "pad")},
    }
    return Tokenizer.from_pipeline(pipeline, metadata=metadata)


def _is_byte_piece(piece: str) -> bool:
    return len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">") and all(
        c in "0123456789ABCDEF" for c in piece[3:5])
