"""Writes tokenizers as SentencePiece ``.model`` files (Unigram and BPE).

Four kinds of tokenizer can be written, each so that ``sentencepiece`` gives toksmith's ids:

- **loaded from a .model** (BPE or Unigram): the pieces, kinds and scores, the normalizer and
  denormalizer specs and the special piece names are written back as they were read.
- **llama.cpp's SentencePiece vocabularies** (GGUF ``llama``: Llama 2, Mistral, Phi-3...): the
  GGUF's pieces, scores and kinds as a BPE model with the identity normalizer, spaces kept and
  escaped, the dummy prefix if the vocabulary adds one, byte fallback if it has the 256 byte
  pieces; sentencepiece then gives llama.cpp's ids (its test vectors; the tests also compare
  texts). A second unknown piece, which sentencepiece refuses, is written as a control piece:
  neither kind is ever produced by merging or asked for.
- **Unigram trained by toksmith** (``toksmith.train(..., algorithm="unigram")``).
- **SentencePiece-style BPE trained by toksmith** (``toksmith.train(..., level="char",
  pattern="metaspace")``). SentencePiece's BPE does not keep a merge list: it joins, again and
  again, the adjacent pair whose concatenation is the highest-scoring piece, whichever two pieces
  form it. Each merged piece gets a score that follows its merge's rank, and the file is written
  only if that rule gives the merge list's result on every text. It does when every piece, encoded
  alone with the merges ranked before it, ends as exactly its own merge pair (then no other split
  of it can ever meet, see :func:`_check_bpe`); BPE learned from a corpus always has this property.
  Pieces must not hold ``▁`` after their first character (SentencePiece does not split words), and
  every character of a piece must be a piece.

Byte-level BPE (GPT-2, tiktoken, toksmith's default) cannot be written: SentencePiece works on
characters of normalized text and has no regex pre-tokenization.

Layout of the trained ones (SentencePiece's): ``<unk>``, control symbols, user-defined symbols,
byte pieces, then the learned pieces. Their normalizer is written as the character map they
normalize with, which SentencePiece compiles from rules (:func:`toksmith_charsmap`):
SentencePiece's ``nfkc`` rules (or none) plus every whitespace character mapped to a space;
SentencePiece then removes extra spaces and adds the ``▁`` dummy prefix, as toksmith's
normalizer (SentencePiece's algorithm) does. Unigram scores are stored in single precision and
SentencePiece adds path scores in single precision, toksmith in double: trained scores are
multiples of 1/64, which both hold and add exactly, so both choose the same segmentation (see
:class:`toksmith.train_subword.TrainedUnigram` for the limits; ``benchmarks/export_parity.py``
measures it).

Needs the ``sentencepiece`` package (for its protobuf module and rule compiler).
"""

from __future__ import annotations

import io
import os
import tempfile
from functools import lru_cache

from .._io import write_atomic
from ..errors import FormatError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_UNIGRAM, _BPE = 1, 2
SPACE = "\u2581"


def _pb2():
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as e:
        raise FormatError(f"writing a SentencePiece .model needs the sentencepiece and protobuf packages "
                          f"(pip install sentencepiece protobuf): {e}") from None
    return sentencepiece_model_pb2


def _compiled_charsmap(**options) -> bytes:
    """The precompiled character map of a tiny model the ``sentencepiece`` library trains in
    memory with these normalization options."""
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["ab ab"] * 8), model_writer=out, vocab_size=6,
                                   model_type="char", minloglevel=3, hard_vocab_limit=False, **options)
    proto = _pb2().ModelProto()
    proto.ParseFromString(out.getvalue())
    return proto.normalizer_spec.precompiled_charsmap


@lru_cache(maxsize=4)
def library_charsmap(rule: str) -> bytes:
    """The precompiled character map of one of SentencePiece's built-in normalization rules
    (``nfkc``, ``nmt_nfkc``, ...)."""
    return _compiled_charsmap(normalization_rule_name=rule)


@lru_cache(maxsize=2)
def toksmith_charsmap(normalization: str | None) -> bytes:
    """The character map of toksmith's trained SentencePiece-style tokenizers, which they
    normalize with and their .model and tokenizer.json carry: SentencePiece's ``nfkc`` rules
    (``normalization="nfkc"``) and every whitespace character toksmith splits words at mapped to
    a space. SentencePiece compiles it from a rules file (about a second), once per process and
    version of sentencepiece: the result is kept on disk (:mod:`toksmith._cache`)."""
    import sentencepiece as spm

    from .. import _cache
    from ..charsmap import PrecompiledCharsmap
    from ..pre_tokenizers import WHITESPACE

    # Named by what it is compiled from: the library's version, the rules chosen, the whitespace
    # class, and "v1", the version of the rule-building code below (change it when that does).
    name = _cache.key(spm.__version__, str(normalization), WHITESPACE.pattern, "v1")
    stored = _cache.load("charsmap", name)
    if stored is not None:
        return stored
    rules = dict(PrecompiledCharsmap(library_charsmap("nfkc")).table) if normalization == "nfkc" else {}
    for code in range(0x3001):  # the whitespace class ends at U+3000
        if WHITESPACE.fullmatch(chr(code)) and code != 0x20:
            rules[chr(code)] = " "
    with tempfile.TemporaryDirectory(prefix="toksmith-rules-") as folder:
        path = os.path.join(folder, "rules.tsv")
        with open(path, "w", encoding="utf-8") as f:
            for source, target in rules.items():  # code points in hex, as SentencePiece reads them
                f.write(" ".join(f"{ord(c):X}" for c in source) + "\t" + " ".join(f"{ord(c):X}" for c in target) + "\n")
        compiled = _compiled_charsmap(normalization_rule_tsv=path)
    _cache.store("charsmap", name, compiled)
    return compiled


# ---------------------------------------------------------------------------------------------
# Entry points


def sentencepiece_model_bytes(tokenizer) -> bytes:
    """The serialized ``ModelProto`` of ``tokenizer`` (see the module documentation)."""
    from .sentencepiece import SentencePieceBPE, SentencePieceUnigram

    from .gguf import LlamaSPM

    model = getattr(tokenizer.pipeline, "model", None)
    trainer = tokenizer.metadata.get("trainer")
    if isinstance(model, (SentencePieceBPE, SentencePieceUnigram)):
        proto = _loaded_proto(tokenizer)
    elif isinstance(model, LlamaSPM):
        proto = _gguf_proto(model)
    elif trainer == "toksmith unigram" and hasattr(model, "pieces"):
        proto = _trained_proto(tokenizer, _unigram_pieces(tokenizer), _UNIGRAM)
    elif trainer == "toksmith bpe (sentencepiece)":
        proto = _trained_proto(tokenizer, _bpe_pieces(tokenizer), _BPE)
    elif tokenizer.pipeline is None:
        raise FormatError("byte-level BPE (GPT-2 style: bytes, a regex pre-tokenizer, a merge list) has no SentencePiece "
                          "equivalent, which works on characters of normalized text; save it as 'toksmith', 'hf' or "
                          "'tiktoken', or train a SentencePiece-style BPE with toksmith.train(..., level='char', "
                          "pattern='metaspace')")
    else:
        raise FormatError("only SentencePiece models (loaded from a .model or a GGUF 'llama' vocabulary), Unigram "
                          "tokenizers trained by toksmith "
                          "(algorithm='unigram') and SentencePiece-style BPE trained by toksmith (level='char', "
                          "pattern='metaspace') can be written as SentencePiece .model files")
    return proto.SerializeToString()


def write_sentencepiece(tokenizer, path: str | os.PathLike) -> None:
    """Writes ``tokenizer`` as a SentencePiece ``.model`` file, atomically.
    ``sentencepiece.SentencePieceProcessor(model_file=path)`` then encodes with the same ids
    (see the module documentation for what can be written and for the limits)."""
    write_atomic(path, sentencepiece_model_bytes(tokenizer))


# ---------------------------------------------------------------------------------------------
# Loaded models


def _loaded_proto(tokenizer):
    """A .model read by toksmith, written back from its pipeline."""
    p, meta = tokenizer.pipeline, tokenizer.metadata
    model, norm, dec = p.model, p.normalizer, p.decoder
    proto = _pb2().ModelProto()
    for piece, score, kind in zip(model.pieces, model.scores, model.types):
        item = proto.pieces.add()
        item.piece, item.score, item.type = piece, score, kind
    spec = proto.trainer_spec
    spec.model_type = _BPE if meta.get("model_type") == "bpe" else _UNIGRAM
    spec.vocab_size = len(model.pieces)
    spec.byte_fallback = model.byte_fallback
    spec.unk_surface = dec.unk_surface
    for name, piece in meta.get("special_pieces", {}).items():
        setattr(spec, f"{name}_piece", piece)
    _normalizer_spec(proto.normalizer_spec, norm)
    proto.normalizer_spec.name = meta.get("normalizer", "")
    if dec.denormalizer is not None:
        _normalizer_spec(proto.denormalizer_spec, dec.denormalizer)
    return proto


def _gguf_proto(model):
    """A GGUF ``llama`` vocabulary (`LlamaSPM`) as a SentencePiece BPE model."""
    vocab = model.vocab
    if UNKNOWN not in vocab.types:
        raise FormatError("this GGUF vocabulary has no unknown token, which a SentencePiece model needs")
    proto = _pb2().ModelProto()
    seen_unknown = False
    for token, score, kind in zip(vocab.tokens, vocab.scores, vocab.types):
        item = proto.pieces.add()
        item.piece, item.score = token, score
        # (Kinds outside SentencePiece's, UNDEFINED, are written as normal pieces, as llama.cpp reads them.)
        item.type = CONTROL if kind == UNKNOWN and seen_unknown else kind if NORMAL <= kind <= BYTE else NORMAL
        seen_unknown |= kind == UNKNOWN
    spec = proto.trainer_spec
    spec.model_type = _BPE
    spec.vocab_size = len(vocab.tokens)
    spec.byte_fallback = model._full_bytes
    spec.unk_id = vocab.types.index(UNKNOWN)
    norm = proto.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = model.add_space_prefix
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    return proto


def _normalizer_spec(spec, normalizer) -> None:
    spec.precompiled_charsmap = normalizer.charsmap.precompiled
    spec.add_dummy_prefix = normalizer.add_dummy_prefix
    spec.remove_extra_whitespaces = normalizer.remove_extra_whitespaces
    spec.escape_whitespaces = normalizer.escape_whitespaces


# ---------------------------------------------------------------------------------------------
# Tokenizers trained by toksmith


def _kinds(meta) -> dict[int, int]:
    """Piece kinds of the reserved ids of SentencePiece's layout (the others are normal)."""
    controls, users = meta.get("control_symbols", []), meta.get("user_defined_symbols", [])
    kinds = {0: UNKNOWN}
    kinds.update({1 + i: CONTROL for i in range(len(controls))})
    kinds.update({1 + len(controls) + i: USER_DEFINED for i in range(len(users))})
    if meta.get("byte_fallback"):
        first_byte = 1 + len(controls) + len(users)
        kinds.update({first_byte + b: BYTE for b in range(256)})
    return kinds


def _unigram_pieces(tokenizer) -> list[tuple[str, float, int]]:
    kinds = _kinds(tokenizer.metadata)
    out = []
    for i, (piece, score) in enumerate(tokenizer.pipeline.model.pieces):
        kind = kinds.get(i, NORMAL)
        out.append((piece, score if kind == NORMAL else 0.0, kind))
    return out


def _bpe_pieces(tokenizer) -> list[tuple[str, float, int]]:
    """(piece, score, kind) in id order: merged pieces scored by the rank of their first merge
    (earlier: higher), characters below all of them (SentencePiece never forms them from pairs)."""
    model = tokenizer.pipeline.model
    pieces = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]
    _check_bpe(model.merges, model.get_vocab())
    rank: dict[str, int] = {}
    for k, (a, b) in enumerate(model.merges):
        rank.setdefault(a + b, k)
    kinds = _kinds(tokenizer.metadata)
    out = []
    for i, piece in enumerate(pieces):
        kind = kinds.get(i, NORMAL)
        score = 0.0 if kind != NORMAL else -float(rank[piece]) if piece in rank else -float(len(model.merges) + i)
        out.append((piece, score, kind))
    return out


def _check_bpe(merges: list[tuple[str, str]], vocab: dict[str, int]) -> None:
    """Raises FormatError unless SentencePiece's rule (join the adjacent pair forming the best
    piece, any split of it) gives the merge list's result on every text.

    Why the check suffices: suppose the two first differ at some step, SentencePiece joining x, y
    into the piece c ranked k while the merge list has no such merge. No merge ranked before k
    applies anywhere then, so the span of c, which no symbol ever crossed, has gone through the
    merges ranked before k on its own: x, y is c encoded alone with those merges. The check asks
    that this be c's own merge pair.
    """
    rank: dict[tuple[str, str], int] = {}
    first: dict[str, int] = {}
    for k, (a, b) in enumerate(merges):
        rank.setdefault((a, b), k)
        first.setdefault(a + b, k)
    for piece, k in first.items():
        if SPACE in piece[1:]:
            raise FormatError(f"the piece {piece!r} holds ▁ after its first character; SentencePiece, which does not "
                              f"split words, could form it across words")
        missing = [c for c in piece if c not in vocab]
        if missing:
            raise FormatError(f"the piece {piece!r} holds {missing[0]!r}, which is not a piece; SentencePiece would "
                              f"treat it differently")
        got = _encode_below(piece, rank, k)
        if got != list(merges[k]):
            raise FormatError(f"the merge list cannot be written as SentencePiece scores exactly: the piece {piece!r} "
                              f"(merge {k}: {merges[k]!r}) encodes with the merges before it as {got!r}, so "
                              f"SentencePiece would join other pairs than this tokenizer; keep it in toksmith or "
                              f"tokenizer.json form")


def _encode_below(text: str, rank: dict[tuple[str, str], int], limit: int) -> list[str]:
    """Rank-based BPE of ``text`` with the merges ranked below ``limit`` (lowest rank first,
    leftmost among equals)."""
    symbols = list(text)
    while len(symbols) > 1:
        best = min(((rank.get(pair, limit), i) for i, pair in enumerate(zip(symbols, symbols[1:]))), default=(limit, 0))
        if best[0] >= limit:
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    return symbols


def _trained_proto(tokenizer, pieces: list[tuple[str, float, int]], model_type: int):
    meta = tokenizer.metadata
    normalization = meta.get("normalization")
    if normalization not in ("nfkc", None):
        raise FormatError(f"normalization {normalization!r} has no SentencePiece equivalent")
    proto = _pb2().ModelProto()
    for piece, score, kind in pieces:
        item = proto.pieces.add()
        item.piece, item.score, item.type = piece, score, kind
    controls = list(meta.get("control_symbols", []))
    spec = proto.trainer_spec
    spec.model_type = model_type
    spec.vocab_size = len(pieces)
    spec.byte_fallback = bool(meta.get("byte_fallback"))
    spec.unk_id, spec.unk_piece = 0, meta.get("unk", pieces[0][0])
    spec.unk_surface = spec.unk_piece  # decode the unknown token as toksmith does (its own string)
    spec.bos_id = controls.index("<s>") + 1 if "<s>" in controls else -1
    spec.eos_id = controls.index("</s>") + 1 if "</s>" in controls else -1
    spec.pad_id = -1
    spec.control_symbols.extend(s for s in controls if s not in ("<s>", "</s>"))
    spec.user_defined_symbols.extend(meta.get("user_defined_symbols", []))
    for key, field in (("character_coverage", "character_coverage"), ("max_piece_length", "max_sentencepiece_length"),
                       ("split_digits", "split_digits"), ("split_by_number", "split_by_number"),
                       ("split_by_unicode_script", "split_by_unicode_script"), ("shrinking_factor", "shrinking_factor"),
                       ("num_sub_iterations", "num_sub_iterations"), ("seed_size", "seed_sentencepiece_size")):
        if meta.get(key) is not None:
            setattr(spec, field, meta[key])

    norm = proto.normalizer_spec
    norm.name = f"toksmith_{normalization or 'identity'}"  # compiled from rules: see toksmith_charsmap
    # The map the tokenizer itself normalizes with (toksmith_charsmap(normalization)).
    norm.precompiled_charsmap = tokenizer.pipeline.normalizer.charsmap.precompiled
    norm.add_dummy_prefix = bool(meta.get("add_dummy_prefix", True))
    norm.remove_extra_whitespaces = True
    norm.escape_whitespaces = True
    return proto
