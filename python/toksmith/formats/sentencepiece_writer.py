"""Writes toksmith's Unigram tokenizers as SentencePiece ``.model`` files.

The file holds the pieces with their scores and kinds in toksmith's ids (SentencePiece's layout:
``<unk>``, control symbols, user-defined symbols, byte pieces, then the learned pieces), the
training options, and the normalization:

- ``normalization=None``: SentencePiece's ``identity`` normalizer;
- ``normalization="nfkc"``: SentencePiece's own ``nfkc`` rules (a precompiled character map,
  which the ``sentencepiece`` library builds for us: it applies NFKC with its Unicode tables).

Both remove extra spaces and add the ``▁`` dummy prefix as toksmith does, so the library gives
the same ids for text whose only whitespace is the space character. Where the two can differ:
toksmith turns every whitespace character (tab, newline, ...) into a space, SentencePiece only
the space (train and encode line by line, as SentencePiece does, to avoid it); a user-defined
symbol next to a space (toksmith drops that space, SentencePiece keeps a ``▁``); and the rare
characters whose NFKC differs between Python's Unicode tables and SentencePiece's.

Needs the ``sentencepiece`` package (for its protobuf module and the ``nfkc`` rules).
"""

from __future__ import annotations

import io
import os
from functools import lru_cache

from .._io import write_atomic
from ..errors import FormatError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_UNIGRAM = 1


def _pb2():
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as e:
        raise FormatError(f"writing a SentencePiece .model needs the sentencepiece and protobuf packages "
                          f"(pip install sentencepiece protobuf): {e}") from None
    return sentencepiece_model_pb2


@lru_cache(maxsize=4)
def library_charsmap(rule: str) -> bytes:
    """The precompiled character map of one of SentencePiece's built-in normalization rules
    (``nfkc``, ``nmt_nfkc``, ...), taken from a tiny model the library trains in memory."""
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["ab ab"] * 8), model_writer=out, vocab_size=6,
                                   model_type="char", normalization_rule_name=rule, minloglevel=3,
                                   hard_vocab_limit=False)
    proto = _pb2().ModelProto()
    proto.ParseFromString(out.getvalue())
    return proto.normalizer_spec.precompiled_charsmap


def sentencepiece_model_bytes(tokenizer) -> bytes:
    """The serialized ``ModelProto`` of a Unigram tokenizer trained by toksmith."""
    meta = tokenizer.metadata
    pipeline = tokenizer.pipeline
    model = getattr(pipeline, "model", None)
    if meta.get("trainer") != "toksmith unigram" or not hasattr(model, "pieces"):
        raise FormatError("only Unigram tokenizers trained by toksmith (toksmith.train(..., algorithm='unigram')) can be "
                          "written as SentencePiece .model files; a tokenizer loaded from a .model is already one")
    normalization = meta.get("normalization")
    if normalization not in ("nfkc", None):
        raise FormatError(f"normalization {normalization!r} has no SentencePiece equivalent")
    pb = _pb2()
    controls = list(meta.get("control_symbols", []))
    users = list(meta.get("user_defined_symbols", []))
    byte_fallback = bool(meta.get("byte_fallback"))
    kinds = {0: UNKNOWN}
    kinds.update({1 + i: CONTROL for i in range(len(controls))})
    kinds.update({1 + len(controls) + i: USER_DEFINED for i in range(len(users))})
    first_byte = 1 + len(controls) + len(users)
    if byte_fallback:
        kinds.update({first_byte + b: BYTE for b in range(256)})

    proto = pb.ModelProto()
    for i, (piece, score) in enumerate(model.pieces):
        p = proto.pieces.add()
        p.piece, p.type = piece, kinds.get(i, NORMAL)
        p.score = score if p.type == NORMAL else 0.0

    spec = proto.trainer_spec
    spec.model_type = _UNIGRAM
    spec.vocab_size = len(model.pieces)
    spec.byte_fallback = byte_fallback
    spec.unk_id, spec.unk_piece = 0, meta.get("unk", model.pieces[0][0])
    spec.unk_surface = spec.unk_piece  # decode the unknown token as toksmith does (its own string)
    spec.bos_id = controls.index("<s>") + 1 if "<s>" in controls else -1
    spec.eos_id = controls.index("</s>") + 1 if "</s>" in controls else -1
    spec.pad_id = -1
    spec.control_symbols.extend(s for s in controls if s not in ("<s>", "</s>"))
    spec.user_defined_symbols.extend(users)
    for key, field in (("character_coverage", "character_coverage"), ("max_piece_length", "max_sentencepiece_length"),
                       ("split_digits", "split_digits"), ("split_by_number", "split_by_number"),
                       ("split_by_unicode_script", "split_by_unicode_script"), ("shrinking_factor", "shrinking_factor"),
                       ("num_sub_iterations", "num_sub_iterations"), ("seed_size", "seed_sentencepiece_size")):
        if meta.get(key) is not None:
            setattr(spec, field, meta[key])

    norm = proto.normalizer_spec
    norm.name = "nfkc" if normalization == "nfkc" else "identity"
    if normalization == "nfkc":
        norm.precompiled_charsmap = library_charsmap("nfkc")
    norm.add_dummy_prefix = bool(meta.get("add_dummy_prefix", True))
    norm.remove_extra_whitespaces = True
    norm.escape_whitespaces = True
    return proto.SerializeToString()


def write_sentencepiece(tokenizer, path: str | os.PathLike) -> None:
    """Writes ``tokenizer`` (a Unigram tokenizer trained by toksmith) as a SentencePiece
    ``.model`` file, atomically. ``sentencepiece.SentencePieceProcessor(model_file=path)`` then
    encodes with the same ids (see the module documentation for the limits)."""
    write_atomic(path, sentencepiece_model_bytes(tokenizer))
