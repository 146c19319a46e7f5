"""SentencePiece-style tokenizers as Hugging Face pipelines (for ``save(format="hf")``).

Four kinds of tokenizer are converted: a Unigram or BPE tokenizer loaded from a SentencePiece
``.model`` (:class:`~toksmith.formats.sentencepiece.SentencePieceUnigram`,
:class:`~toksmith.formats.sentencepiece.SentencePieceBPE`), a Unigram tokenizer trained by
toksmith (:class:`~toksmith.train_subword.TrainedUnigram`), and SentencePiece-style BPE trained by
toksmith (``level="char", pattern="metaspace"``). The result is a pipeline made only of components
that Hugging Face has, so :func:`toksmith.formats.hf.to_hf_dict` writes it as it is. All three
keep SentencePiece's rule that ``<unk>``, control pieces (``<s>``) and byte pieces (``<0x41>``)
are never read from text: ``tokenizers`` then encodes like ``sentencepiece`` (loaded models) or
like toksmith's ``encode(text, disallowed_special=())`` (trained ones).

What has to be mapped for Unigram, and how:

- **Pieces SentencePiece never reads from text** (``<unk>``, control pieces such as ``<s>``, byte
  pieces ``<0x41>``, unused pieces). Hugging Face's Unigram matches every piece of its vocabulary,
  and a low score cannot stop it: its unknown-token score is the lowest score of the vocabulary
  minus 10, so a reserved piece spelled with unknown characters always beats them, and a low score
  would also move the penalty of every unknown character. Instead, a ``Split`` pre-tokenizer puts
  a word boundary inside every occurrence of a reserved piece, between two characters that no
  piece of the lattice holds side by side (so no segmentation SentencePiece could pick crosses it)
  and that are not both unknown (SentencePiece joins a run of unknown characters into one
  ``<unk>``; Hugging Face does so only within a word). Reserved pieces keep a score no lower than
  the lowest lattice score, so the unknown-token penalty is SentencePiece's. A tokenizer where
  some reserved piece has no such boundary (e.g. a one-character control piece) is refused.
- **Normalizer** (loaded models): the precompiled character map (``Precompiled``), then
  SentencePiece's whitespace handling as ``Replace`` steps (runs of spaces to one, leading and
  trailing space dropped), the ``▁`` dummy prefix (``Prepend``, which leaves empty text alone) and
  spaces as ``▁``. The text is not split at ``▁``: SentencePiece runs its lattice over the whole
  normalized text, and so does the exported model.
- **User-defined pieces** (loaded models) stay pieces of the lattice, with the score SentencePiece
  gives them there (``bytes * max_score - 0.1``), so that they win as in SentencePiece; the model
  is refused when the normalizer would change one of them (SentencePiece leaves them as written).
- **Decoder**: control pieces to nothing and ``<unk>`` to its surface (``" ⁇ "``), each token on its
  own (``Replace``); byte pieces to text (``ByteFallback``); then the leading ``▁`` of the text are
  dropped (``Strip``) and the others become spaces.

Trained tokenizers normalize as SentencePiece does, with the character map their .model carries:
their normalizer becomes the loaded models' one above (``Precompiled`` and whitespace steps).
They keep their Metaspace pre-tokenizer and decoder (Hugging Face components already); only the
reserved pieces are handled as above. BPE needs no
blocking: a merge list never forms a piece it has no merge for, so the reserved pieces only move
from the added tokens into the model's vocabulary. A BPE ``.model`` becomes Hugging Face's BPE
over the whole normalized text with the merges toksmith's loader derives from the scores (every
split of every piece, ranked by the piece's score) and the normalizer and decoder above; models
with unused or user-defined pieces are refused.

Where the export can differ from SentencePiece (the tests measure how often):

- SentencePiece adds path scores in single precision, Hugging Face in double: a text whose two
  best segmentations are that close can come out differently (not for trained Unigram, whose
  scores are multiples of 1/64: exact in both, see :class:`~toksmith.train_subword.TrainedUnigram`).
- Hugging Face applies the character map per grapheme cluster (shortest rule), SentencePiece
  longest rule first: a few combining sequences normalize differently (trained tokenizers too,
  whose normalizer is SentencePiece's).
- Decoding ids that encoding never gives: byte pieces that are not valid UTF-8 (SentencePiece
  keeps the valid parts, Hugging Face replaces the whole run), a ``▁`` spelled in byte pieces, and
  several leading ``▁`` pieces (SentencePiece drops the first ``▁`` of each).

Control pieces are vocabulary entries, not Hugging Face added tokens: ``tokenizers`` never matches
``<s>`` in text (like SentencePiece and ``encode(text, disallowed_special=())``), and
``decode(..., skip_special_tokens=True)`` does not treat them as special.
"""

from __future__ import annotations

from .. import decoders as dec
from .. import normalizers as norm
from .. import pre_tokenizers as pre
from ..errors import FormatError
from ..pipeline import Pipeline

SPACE = "\u2581"


def is_sentencepiece_style(tokenizer) -> bool:
    """Whether ``tokenizer`` is one of the SentencePiece-style tokenizers converted here."""
    from ..train_subword import TrainedUnigram
    from .sentencepiece import SentencePieceBPE, SentencePieceUnigram

    model = getattr(tokenizer.pipeline, "model", None)
    return isinstance(model, (SentencePieceUnigram, SentencePieceBPE, TrainedUnigram)) or \
        tokenizer.metadata.get("trainer") == "toksmith bpe (sentencepiece)"


def hf_pipeline(tokenizer) -> Pipeline:
    """The Hugging Face pipeline equivalent to ``tokenizer`` (see :func:`is_sentencepiece_style`)."""
    from ..train_subword import TrainedUnigram
    from .sentencepiece import SentencePieceBPE

    pipeline = tokenizer.pipeline
    if isinstance(pipeline.model, TrainedUnigram):
        return _trained(pipeline)
    if tokenizer.metadata.get("trainer") == "toksmith bpe (sentencepiece)":
        return _trained_bpe(pipeline)
    if isinstance(pipeline.model, SentencePieceBPE):
        return _loaded_bpe(pipeline)
    return _loaded(pipeline)


# ---------------------------------------------------------------------------------------------
# The kinds of tokenizer


def _trained_bpe(pipeline: Pipeline) -> Pipeline:
    """SentencePiece-style BPE trained by toksmith: the special tokens become plain vocabulary
    entries, which no merge forms, so Hugging Face never reads them from text."""
    from .hf import HFBPE

    m = pipeline.model
    vocab = dict(m.get_vocab(), **{t.content: t.id for t in pipeline.added_tokens})
    o = m.options
    model = HFBPE(vocab, m.merges, unk_token=o["unk_token"], byte_fallback=o["byte_fallback"], fuse_unk=o["fuse_unk"])
    return Pipeline(model, normalizer=_normalizer(pipeline.normalizer), pre_tokenizer=pipeline.pre_tokenizer,
                    post_processor=pipeline.post_processor, decoder=pipeline.decoder, added_tokens=[])


def _trained(pipeline: Pipeline) -> Pipeline:
    """A Unigram tokenizer trained by toksmith: same stages, reserved pieces blocked."""
    from .hf import HFUnigram

    m = pipeline.model
    reserved = set(m.exclude) | {m.unk_id}
    lattice = {i: s for i, s in enumerate(m.lattice_scores) if i not in reserved}
    pieces = [p for p, _ in m.pieces]
    blocker = _reserved_blocker(pieces, reserved, lattice, m.byte_fallback)
    pre_tokenizer = pipeline.pre_tokenizer if blocker is None else pre.Sequence([pipeline.pre_tokenizer, blocker])
    model = HFUnigram(_scored(pieces, lattice), unk_id=m.unk_id, byte_fallback=m.byte_fallback)
    return Pipeline(model, normalizer=_normalizer(pipeline.normalizer), pre_tokenizer=pre_tokenizer,
                    post_processor=pipeline.post_processor, decoder=pipeline.decoder, added_tokens=[])


def _loaded(pipeline: Pipeline) -> Pipeline:
    """A Unigram tokenizer loaded from a SentencePiece ``.model``."""
    from .hf import HFUnigram
    from .sentencepiece import NORMAL, USER_DEFINED, _f32

    m, n, d = pipeline.model, pipeline.normalizer, pipeline.decoder
    if d.denormalizer is not None:
        raise FormatError("this SentencePiece model has a denormalizer (a character map applied after decoding), "
                          "which Hugging Face decoders cannot express; keep it as a .model file")
    normal = [s for s, t in zip(m.scores, m.types) if t == NORMAL]
    max_score = max([_f32_min_positive(), *normal])
    lattice = {}
    for i, (piece, score, kind) in enumerate(zip(m.pieces, m.scores, m.types)):
        if kind == NORMAL:
            lattice[i] = score
        elif kind == USER_DEFINED:  # SentencePiece's score for them: always the best path
            lattice[i] = _f32(_f32(len(piece.encode("utf-8")) * max_score) - 0.1)
    if m.byte_fallback and any(f"<0x{b:02X}>" not in m._ids for b in range(256)):
        raise FormatError("this model has byte_fallback but lacks some of the byte pieces <0x00>..<0xFF>; Hugging Face "
                          "would turn such characters into <unk>, SentencePiece into the bytes it has")
    reserved = [i for i in range(len(m.pieces)) if i not in lattice]
    normalizer = _normalizer(n)
    for i, kind in enumerate(m.types):
        if kind == USER_DEFINED:
            piece = m.pieces[i]
            if " " in piece or normalizer.normalize("x" + piece) != normalizer.normalize("x") + piece:
                raise FormatError(f"the user-defined piece {piece!r} would be changed by the normalizer in Hugging Face "
                                  f"(SentencePiece leaves user-defined pieces as written); keep it as a .model file")
    blocker = _reserved_blocker(m.pieces, reserved, lattice, m.byte_fallback)
    model = HFUnigram(_scored(m.pieces, lattice), unk_id=m.unk_id, byte_fallback=m.byte_fallback)
    return Pipeline(model, normalizer=normalizer, pre_tokenizer=blocker, decoder=_decoder(m, d, lattice),
                    added_tokens=[])


def _loaded_bpe(pipeline: Pipeline) -> Pipeline:
    """A BPE tokenizer loaded from a SentencePiece ``.model``: Hugging Face's BPE over the whole
    normalized text with the merges the loader derived from the scores (every split of every
    piece, ranked by its score), which toksmith runs too. A merge list never forms the reserved
    pieces, so nothing needs blocking."""
    from .hf import HFBPE
    from .sentencepiece import NORMAL, USER_DEFINED

    m, d = pipeline.model, pipeline.decoder
    if m._core is None or m.user_defined:
        raise FormatError("this SentencePiece BPE model has unused or user-defined pieces, or byte fallback with missing "
                          "byte pieces, which Hugging Face's BPE does not reproduce; keep it as a .model file")
    if d.denormalizer is not None:
        raise FormatError("this SentencePiece model has a denormalizer (a character map applied after decoding), "
                          "which Hugging Face decoders cannot express; keep it as a .model file")
    lattice = {i: s for i, (s, t) in enumerate(zip(m.scores, m.types)) if t in (NORMAL, USER_DEFINED)}
    model = HFBPE(m.get_vocab(), m.merges, unk_token=m.pieces[m.unk_id], byte_fallback=m.byte_fallback, fuse_unk=True)
    return Pipeline(model, normalizer=_normalizer(pipeline.normalizer), decoder=_decoder(m, d, lattice),
                    added_tokens=[])


def _decoder(m, d, lattice: dict[int, float]):
    """SentencePiece's decoding of a loaded model (``m``, its decoder ``d``) as Hugging Face decoders."""
    from .sentencepiece import BYTE, CONTROL

    steps = []
    controls = [p for p, t in zip(m.pieces, m.types) if t == CONTROL]
    if controls:  # SentencePiece decodes control pieces to nothing
        steps.append(dec.Replace(_whole_token(controls), "", is_regex=True))
    unk = m.pieces[m.unk_id]
    if d.unk_surface != unk:
        steps.append(dec.Replace(_whole_token([unk]), d.unk_surface, is_regex=True))
    if any(t == BYTE for t in m.types):
        steps.append(dec.ByteFallback())
    steps.append(dec.Fuse())
    if d.add_dummy_prefix or d.remove_extra_whitespaces:
        # SentencePiece drops the first ▁ of each token until some text is out: with
        # remove_extra_whitespaces the tokens before the first text are lone ▁ (a ▁ written at
        # the start of the text), so all leading ▁ go, unless some piece starts with two of them.
        runs = d.remove_extra_whitespaces and not any(m.pieces[i].startswith(SPACE * 2) for i in lattice)
        steps.append(dec.Strip(SPACE, dec.Strip.ALL if runs else 1, 0))
    steps.append(dec.Replace(SPACE, " "))
    return dec.Sequence(steps)


def _normalizer(n) -> norm.Normalizer:
    """SentencePiece's normalizer (character map, whitespace) as Hugging Face normalizers."""
    steps = []
    if n.charsmap.precompiled:
        steps.append(norm.Precompiled(n.charsmap.precompiled))
    space = SPACE if n.escape_whitespaces else " "
    if n.remove_extra_whitespaces:
        steps += [norm.Replace(" {2,}", " ", is_regex=True), norm.Replace("\\A ", "", is_regex=True)]
    if n.add_dummy_prefix:
        steps.append(norm.Prepend(" "))  # only to non-empty text, as SentencePiece
    if n.escape_whitespaces:
        steps.append(norm.Replace(" ", SPACE))
    if n.remove_extra_whitespaces:
        # SentencePiece drops the trailing spaces once they are ▁, so a ▁ written in the text goes too.
        steps.append(norm.Replace(f"{space}+\\z", "", is_regex=True))
    return norm.Sequence(steps)


# ---------------------------------------------------------------------------------------------
# Reserved pieces


def _scored(pieces: list[str], lattice: dict[int, float]) -> list[tuple[str, float]]:
    """(piece, score) for Hugging Face: lattice pieces with their scores, the others with a score
    that does not lower the minimum (Hugging Face's unknown penalty is counted from it)."""
    floor = max(0.0, min(lattice.values(), default=0.0))
    return [(p, lattice.get(i, floor)) for i, p in enumerate(pieces)]


def _reserved_blocker(pieces: list[str], reserved, lattice: dict[int, float], byte_fallback: bool):
    """A Split pre-tokenizer with a word boundary inside every occurrence of each reserved piece
    (None when there is none to block); FormatError when some piece has no safe boundary."""
    usable = [pieces[i] for i in lattice]
    pairs = {p[k:k + 2] for p in usable for k in range(len(p) - 1)}
    known = {p for p in usable if len(p) == 1}
    groups: dict[tuple[str, str], list[str]] = {}  # (text before, character) -> texts after
    for i in sorted(reserved):
        piece = pieces[i]
        for k in range(len(piece) - 1):
            a, b = piece[k], piece[k + 1]
            # No lattice piece crosses this boundary, and it does not cut a run of unknown
            # characters (SentencePiece fuses those into one <unk>; with byte fallback it does not matter).
            if a + b not in pairs and (byte_fallback or a in known or b in known):
                groups.setdefault((piece[:k], a), []).append(piece[k + 1:])
                break
        else:
            raise FormatError(f"the piece {piece!r} (id {i}), which SentencePiece never reads from text, cannot be kept "
                              f"from matching in Hugging Face's Unigram: it is one character, or each pair of its adjacent "
                              f"characters occurs in other pieces or is two unknown characters; keep this tokenizer as a "
                              f".model file")
    if not groups:
        return None
    alternatives = []
    for (before, char), afters in sorted(groups.items()):
        behind = f"(?<={_onig_literal(before)})" if before else ""
        alternatives.append(f"{behind}{_onig_literal(char)}(?={'|'.join(_onig_literal(a) for a in sorted(afters))})")
    # MergedWithPrevious: the matched character ends a word, the rest of the piece starts the next.
    return pre.Split("|".join(alternatives), "merged_with_previous", is_regex=True)


def _whole_token(tokens: list[str]) -> str:
    """An Oniguruma regex matching a token that is exactly one of ``tokens``."""
    return "\\A(?:" + "|".join(_onig_literal(t) for t in tokens) + ")\\z"


def _onig_literal(text: str) -> str:
    """``text`` as an Oniguruma literal: ASCII punctuation escaped, control characters as \\x{..}."""
    out = []
    for c in text:
        if c.isalnum() or ord(c) > 0x7F and c.isprintable():
            out.append(c)
        elif c.isprintable() and c != " ":
            out.append("\\" + c)
        else:
            out.append(f"\\x{{{ord(c):X}}}")
    return "".join(out)


def _f32_min_positive() -> float:
    from .sentencepiece import _F32_MIN_POSITIVE

    return _F32_MIN_POSITIVE
