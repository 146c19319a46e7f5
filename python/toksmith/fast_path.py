"""A Rust fast path for loaded byte-level BPE tokenizers (GPT-2, Llama 3, Qwen 2/3 ...).

The general pipeline pre-tokenizes in Python and hands words to the model. When a loaded
tokenizer is byte-level BPE behind a regex whose exact chunks toksmith's Rust scanners produce,
both steps run in one Rust call instead: the same chunks, the same merges, the same ids, many
times faster. Anything else keeps the general path, so exactness never depends on this module.
"""

from __future__ import annotations

from . import _core
from .byte_level import token_to_bytes
from .models import BPE
from .pre_tokenizers import GPT2_REGEX, ByteLevel, Sequence, Split

# Regexes (as written in tokenizer.json files) -> the equivalent pattern the Rust scanners know.
_KNOWN_REGEXES = {
    GPT2_REGEX: "gpt2",
    _core.pattern_regex("llama3"): "llama3",
    _core.pattern_regex("qwen2"): "qwen2",
}


def pattern_name(pre_tokenizer) -> str | None:
    """The scanner pattern name when ``pre_tokenizer`` is regex splitting plus the byte mapping."""
    if isinstance(pre_tokenizer, ByteLevel) and pre_tokenizer.use_regex and not pre_tokenizer.add_prefix_space:
        return "gpt2"
    if isinstance(pre_tokenizer, Sequence) and len(pre_tokenizer.pre_tokenizers) == 2:
        split, byte_level = pre_tokenizer.pre_tokenizers
        if (isinstance(split, Split) and isinstance(byte_level, ByteLevel) and split.is_regex
                and split.behavior == "isolated" and not split.invert
                and not byte_level.use_regex and not byte_level.add_prefix_space):
            return _KNOWN_REGEXES.get(split.pattern)
    return None


def byte_level_fast_path(pre_tokenizer, model):
    """A Rust model that pre-tokenizes and encodes a (normalized) piece in one call, or None when
    this pipeline is not one it reproduces exactly."""
    name = pattern_name(pre_tokenizer)
    if name is None or not isinstance(model, BPE):
        return None
    options = model.options
    if (options["unk_token"] is not None or options["byte_fallback"] or options["continuing_subword_prefix"]
            or options["end_of_word_suffix"]):
        return None
    return byte_level_model(model.get_vocab(), model.merges, name, ignore_merges=options["ignore_merges"])


def byte_level_model(vocab: dict[str, int], merges, name: str, *, ignore_merges: bool):
    """A byte-level Rust model of a vocabulary written in GPT-2's byte characters (``Ġ``) and its
    merges (pairs of such strings), behind the scanner pattern ``name``; None when the vocabulary
    is not plain byte-level BPE (a token outside the byte alphabet, two tokens of the same bytes,
    a byte without a token)."""
    try:
        tokens = [(i, token_to_bytes(t)) for t, i in vocab.items()]
        merge_ids = [(vocab[a], vocab[b]) for a, b in merges]
    except KeyError:  # a token outside the byte alphabet: not a byte-level vocabulary
        return None
    if len({b for _, b in tokens}) != len(tokens):
        return None
    try:
        return _core.BpeModel(tokens, merge_ids, _core.pattern_regex(name), [], level="byte",
                              ignore_merges=ignore_merges)
    except ValueError:  # e.g. not all 256 bytes are tokens
        return None
