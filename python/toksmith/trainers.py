"""``toksmith.train``: learn a byte-level BPE tokenizer from a corpus.

Counting the chunks and learning the merges run in Rust (``rust/train/bpe.rs``); this module
checks the parameters, streams the source in batches, and lays out the final ids.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import _core
from .errors import TrainingError
from .patterns import resolve
from .sources import iter_texts
from .tokenizer import Tokenizer

BATCH_CHARS = 1 << 23  # texts are handed to Rust in batches of about this many characters


def train(
    source,
    *,
    algorithm: str = "bpe",
    vocab_size: int,
    pattern: str = "o200k",
    special_tokens: Iterable[str] = (),
    special_tokens_position: str = "first",
    min_frequency: int = 2,
    num_threads: int | None = None,
) -> Tokenizer:
    """Trains a tokenizer on ``source`` and returns it.

    - ``source``: a path (file, directory or glob; .gz/.bz2/.xz are read transparently), a list of
      ``pathlib.Path``, or any iterable of str (each item is one text).
    - ``vocab_size``: total ids, counting the 256 byte tokens and the special tokens.
    - ``pattern``: ``"gpt2"``, ``"cl100k"``, ``"o200k"`` or a regex string.
    - ``special_tokens``: reserved at ids ``0..k-1`` (``special_tokens_position="first"``) or
      after the last merge (``"last"``); merges never learn from or produce them.
    - ``min_frequency``: stop when the most frequent pair occurs fewer times.

    Ties between pairs with the same count go to the pair of earliest-created tokens (smallest
    (left id, right id), bytes counting as ids 0-255): deterministic, whatever the thread count.
    """
    if algorithm != "bpe":
        raise TrainingError(f"algorithm={algorithm!r} is not available; this version trains 'bpe' (byte-level BPE)")
    specials = list(special_tokens)
    if isinstance(special_tokens, str):
        raise TrainingError("special_tokens must be a list of strings, e.g. ['<|endoftext|>'], not one string")
    if any(not isinstance(s, str) or not s for s in specials) or len(set(specials)) != len(specials):
        raise TrainingError(f"special_tokens must be distinct non-empty strings, got {specials!r}")
    if special_tokens_position not in ("first", "last"):
        raise TrainingError(f"special_tokens_position must be 'first' or 'last', not {special_tokens_position!r}")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise TrainingError(f"vocab_size must be an int, not {type(vocab_size).__name__}")
    minimum = 256 + len(specials)
    if vocab_size < minimum:
        raise TrainingError(
            f"vocab_size={vocab_size} is too small: byte-level BPE needs 256 byte tokens plus "
            f"{len(specials)} special token(s), so at least {minimum}"
        )
    if not isinstance(min_frequency, int) or min_frequency < 1:
        raise TrainingError(f"min_frequency must be an int >= 1, not {min_frequency!r}")
    pattern_name, regex = resolve(pattern)

    trainer = _core.BpeTrainer(regex, specials, num_threads)
    batch: list[str] = []
    size = 0
    for text in iter_texts(source):
        batch.append(text)
        size += len(text)
        if size >= BATCH_CHARS:
            _add(trainer, batch)
            batch, size = [], 0
    if batch:
        _add(trainer, batch)

    merges = trainer.learn_merges(vocab_size - minimum, min_frequency)
    return _assemble(merges, regex, pattern_name, specials, special_tokens_position, min_frequency)


def _add(trainer, batch: list[str]) -> None:
    try:
        trainer.add_texts(batch)
    except UnicodeEncodeError as e:
        raise TrainingError(f"a training text contains a lone surrogate at index {e.start}; it is not valid Unicode") from None


def _assemble(merges, regex, pattern_name, specials, position, min_frequency) -> Tokenizer:
    """Lays out ids: specials first (0..k-1, then bytes, then merges) or last (after the merges)."""
    token_bytes = [bytes([b]) for b in range(256)]
    for left, right in merges:
        token_bytes.append(token_bytes[left] + token_bytes[right])
    offset = len(specials) if position == "first" else 0
    tokens = {i + offset: b for i, b in enumerate(token_bytes)}
    first_special = 0 if position == "first" else len(token_bytes)
    special_ids = {s: first_special + k for k, s in enumerate(specials)}
    return Tokenizer(
        tokens=tokens,
        merges=[(a + offset, b + offset) for a, b in merges],
        pattern=regex,
        pattern_name=pattern_name,
        special_tokens=special_ids,
        metadata={"trainer": "toksmith bpe", "min_frequency": min_frequency, "special_tokens_position": position},
    )
