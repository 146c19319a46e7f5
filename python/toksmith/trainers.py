"""``toksmith.train``: learn a BPE tokenizer from a corpus.

Counting the chunks and learning the merges run in Rust (``rust/train/``); this module checks
the parameters, streams the source in batches, shows progress, and lays out the final ids.

Phases: read (the source, streamed) -> count (pre-tokenized chunks, in parallel, spilled to
disk past ``max_memory``) -> merge (most frequent pair first) -> assemble (ids, specials).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from . import _core
from ._io import atomic_output
from .errors import TrainingError
from .patterns import resolve
from .sources import iter_texts, split_plain_files
from .tokenizer import Tokenizer, check_threads as check_tokenizer_threads

BATCH_CHARS = 1 << 21  # texts are handed to Rust in batches of about this many characters (2 Mi)
FILE_BLOCK_BYTES = 1 << 23  # plain-text files are counted by Rust in blocks of about this many bytes (8 MiB)
# Merges are learned in steps, with a progress update between two. The first step learns
# MERGES_PER_STEP merges; the next ones are sized to take about STEP_SECONDS each (late merges take
# microseconds: steps of a fixed size would mostly cost calls into Rust, each waking the trainer's
# threads), up to MAX_MERGES_PER_STEP (on several threads the model is built a step behind the
# merges, see MergesModelBuilder: the last step's merges are added to it after training).
MERGES_PER_STEP = 256
STEP_SECONDS = 0.05
MAX_MERGES_PER_STEP = 2048
# Ints handed to Rust must fit its types (ids are u32, counts u64): a larger or negative one would
# escape as OverflowError.
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def check_int(name: str, value, minimum: int, maximum: int | None = U32_MAX, *, optional: bool = False) -> None:
    """TrainingError unless ``value`` is an int (not a bool) in ``minimum..maximum`` (or None when
    ``optional``)."""
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum or (maximum is not None and value > maximum):
        limits = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum:,}"
        raise TrainingError(f"{name} must be an int {limits}{' (or None)' if optional else ''}, not {value!r}")


def check_threads(num_threads) -> None:
    """``num_threads`` of training: :func:`toksmith.tokenizer.check_threads`, as a TrainingError."""
    check_tokenizer_threads(num_threads, TrainingError, "num_threads (CLI: --threads)")


def parse_memory(value: int | str | None) -> int | None:
    """``"2GB"``, ``"512MiB"``, ``"1.5G"`` or a number of bytes -> bytes.

    >>> parse_memory("2GB"), parse_memory("512MiB"), parse_memory(1000)
    (2000000000, 536870912, 1000)
    """
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    m = re.fullmatch(r"\s*([\d.]+)\s*([kKmMgGtT]?)(i?)[bB]?\s*", str(value))
    if not m:
        raise TrainingError(f"max_memory={value!r} is not a size; write e.g. 2GB, 512MiB or a number of bytes")
    number, unit, binary = float(m.group(1)), m.group(2).upper(), m.group(3)
    power = " KMGT".index(unit) if unit else 0
    return int(number * (1024 if binary else 1000) ** power)


def _memory(value: int | str | None) -> int | None:
    """:func:`parse_memory`, checked to fit the trainer's byte count (u64)."""
    memory = parse_memory(value)
    if memory is not None and not 0 <= memory <= U64_MAX:
        raise TrainingError(f"max_memory={value!r} is not a usable size; write e.g. 2GB, 512MiB or a number of bytes "
                            f"from 0 to {U64_MAX:,}")
    return memory


def train(
    source,
    *,
    algorithm: str = "bpe",
    vocab_size: int,
    pattern: str | None = None,
    special_tokens: Iterable[str] = (),
    special_tokens_position: str = "first",
    min_frequency: int = 2,
    max_token_length: int | None = None,
    num_threads: int | None = None,
    max_memory: int | str | None = None,
    max_chars_per_doc: int | None = None,
    text_field: str = "text",
    from_counts: bool = False,
    show_progress: bool = False,
    transition: int | None = None,
    stage2_pattern: str = "superbpe",
    max_words_per_token: int | None = 4,
    forbidden_patterns: Iterable[str] = (),
    level: str = "byte",
    end_of_word_suffix: str | None = None,
    limit_alphabet: int | None = None,
    byte_fallback: bool = False,
    **subword_options,
) -> Tokenizer:
    """Trains a byte-level BPE tokenizer on ``source`` and returns it.

    - ``source``: a path (file, directory or glob; .gz/.bz2/.xz/.zst are read transparently,
      .jsonl/.parquet take the ``text_field`` column), a list of ``pathlib.Path``, or any
      iterable of str (each item is one text). With ``from_counts=True``: counts files written by
      ``toksmith count`` (TSV ``chunk<TAB>count``).
    - ``algorithm``: ``"bpe"``, or ``"superbpe"`` (Liu et al., 2025): ordinary BPE up to the
      vocabulary size ``transition``, then training goes on with ``stage2_pattern``, which does
      not split at whitespace, so tokens can span words (at most ``max_words_per_token`` words,
      none matching a regex of ``forbidden_patterns``). Encoding uses ``stage2_pattern``.
    - ``vocab_size``: total ids, counting the 256 byte tokens and the special tokens.
    - ``pattern``: ``"gpt2"``, ``"cl100k"``, ``"o200k"`` or a regex string (default ``"o200k"``; from
      counts files, the pattern they were counted with, which a different one given here contradicts:
      an error).
    - ``special_tokens``: reserved at ids ``0..k-1`` (``special_tokens_position="first"``) or
      after the last merge (``"last"``); merges never learn from or produce them.
    - ``min_frequency``: stop when the most frequent pair occurs fewer times.
    - ``max_token_length``: no token longer than this many bytes (characters at
      ``level="char"``, the end-of-word suffix not counted).
    - ``num_threads``: threads for reading, counting and merging (default: all cores). The result
      does not depend on it.
    - ``max_memory``: a budget for the chunk counts (``"2GB"``); past it they are spilled to disk
      as sorted runs and merged at the end.
    - ``max_chars_per_doc``: longer texts are cut to this many characters (the texts of a
      plain-text file are then its lines; of JSONL and Parquet, their records).
    - ``level="char"``: classic character-level BPE: merges start from characters (the
      ``limit_alphabet`` most frequent ones; the last character of a chunk carries
      ``end_of_word_suffix``, e.g. ``"</w>"``). Characters outside the alphabet become ``<unk>``,
      or their bytes ``<0x00>``..``<0xFF>`` with ``byte_fallback=True``. With ``pattern="metaspace"``:
      SentencePiece-style BPE instead (SentencePiece's NFKC rules, ``▁`` words, ``<unk>`` and
      ``special_tokens`` (default ``<s>``, ``</s>``) first; options ``normalization=``, ``add_dummy_prefix=``), which
      ``save(format="sentencepiece")`` writes as a ``.model`` (see
      :func:`toksmith.train_subword.train_sentencepiece_bpe`).

    ``algorithm="wordpiece"`` and ``"unigram"`` train those models (see
    :mod:`toksmith.train_subword` for their options, e.g. ``criterion=``, ``character_coverage=``).

    Ties between pairs with the same count go to the pair of earliest-created tokens (smallest
    (left id, right id), bytes counting as ids 0-255): deterministic, whatever the thread count.
    """
    check_threads(num_threads)
    if not isinstance(forbidden_patterns, str):  # (a lone string: _check_patterns says so below)
        forbidden_patterns = list(forbidden_patterns)  # (an iterator is read once)
    # SuperBPE's own options given (not at their defaults): an error for any other algorithm.
    superbpe_options = [name for name, given in [("transition", transition is not None),
                                                 ("stage2_pattern", stage2_pattern != "superbpe"),
                                                 ("max_words_per_token", max_words_per_token != 4),
                                                 ("forbidden_patterns", bool(forbidden_patterns))] if given]
    if algorithm in ("wordpiece", "unigram"):
        from .train_subword import train_subword

        # Options of BPE's counting that these trainers do not have: an error, not silently ignored.
        unused = [name for name, given in [("pattern", pattern is not None), ("from_counts", from_counts),
                                           ("max_memory", max_memory is not None),
                                           ("special_tokens_position", special_tokens_position != "first"),
                                           ("level", level != "byte"), ("end_of_word_suffix", end_of_word_suffix)]
                  if given] + superbpe_options
        if unused:
            raise TrainingError(f"{', '.join(unused)}: not options of algorithm={algorithm!r} (they are BPE's); "
                                f"its options are in toksmith.train_subword.train_{algorithm}")

        return train_subword(source, algorithm=algorithm, vocab_size=vocab_size,
                             special_tokens=list(special_tokens) or None, min_frequency=min_frequency,
                             limit_alphabet=limit_alphabet, byte_fallback=byte_fallback,
                             max_token_length=max_token_length, num_threads=num_threads,
                             max_chars_per_doc=max_chars_per_doc, text_field=text_field,
                             show_progress=show_progress, **subword_options)
    if from_counts:
        pattern = _pattern_of_counts(source, pattern)
    elif pattern is None:
        pattern = DEFAULT_PATTERN
    if level == "char" and pattern == "metaspace":
        return _train_sentencepiece_bpe(source, algorithm=algorithm, vocab_size=vocab_size, special_tokens=special_tokens,
                                        special_tokens_position=special_tokens_position, min_frequency=min_frequency,
                                        max_token_length=max_token_length, num_threads=num_threads,
                                        max_memory=max_memory, max_chars_per_doc=max_chars_per_doc,
                                        text_field=text_field, from_counts=from_counts, show_progress=show_progress,
                                        end_of_word_suffix=end_of_word_suffix, limit_alphabet=limit_alphabet,
                                        byte_fallback=byte_fallback, **subword_options)
    if subword_options:
        raise TrainingError(f"unknown options for algorithm={algorithm!r}: {sorted(subword_options)}")
    if level not in ("byte", "char"):
        raise TrainingError(f"level must be 'byte' or 'char', not {level!r}")
    if level == "byte" and (end_of_word_suffix or limit_alphabet or byte_fallback):
        raise TrainingError("end_of_word_suffix, limit_alphabet and byte_fallback are options of level='char'")
    if level == "char" and algorithm != "bpe":
        raise TrainingError("level='char' is available for algorithm='bpe'")
    if algorithm not in ("bpe", "superbpe"):
        raise TrainingError(f"algorithm={algorithm!r} is not available; use 'bpe', 'superbpe', 'wordpiece' or "
                            f"'unigram'")
    if algorithm == "bpe" and superbpe_options:
        raise TrainingError(f"{', '.join(superbpe_options)}: options of algorithm='superbpe', not of 'bpe'")
    specials = _check_specials(special_tokens, special_tokens_position)
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise TrainingError(f"vocab_size must be an int, not {type(vocab_size).__name__}")
    minimum = 256 + len(specials)
    if vocab_size < minimum and level == "byte":
        raise TrainingError(
            f"vocab_size={vocab_size} is too small: byte-level BPE needs 256 byte tokens plus "
            f"{len(specials)} special token(s), so at least {minimum}"
        )
    check_int("vocab_size", vocab_size, 1, U32_MAX + 1)  # ids are u32
    check_int("min_frequency", min_frequency, 1, U64_MAX)
    check_int("max_token_length", max_token_length, 2, optional=True)
    check_int("limit_alphabet", limit_alphabet, 1, optional=True)
    if algorithm == "superbpe":
        if not isinstance(transition, int) or not minimum <= transition <= vocab_size:
            raise TrainingError(f"superbpe needs transition= (the vocabulary size where stage 2 starts) between "
                                f"{minimum} and vocab_size={vocab_size}, not {transition!r}")
        if from_counts:
            raise TrainingError("superbpe counts the corpus with two patterns; train it from the text, not from counts")
        check_int("max_words_per_token", max_words_per_token, 1, optional=True)
        forbidden_patterns = _check_patterns("forbidden_patterns", forbidden_patterns)
    pattern_name, regex = resolve(pattern)
    settings = {"min_frequency": min_frequency, "max_token_length": max_token_length}
    memory = _memory(max_memory)

    with tempfile.TemporaryDirectory(prefix="toksmith-spill-") as spill_dir:
        trainer = _core.BpeTrainer(regex, specials, num_threads, memory, os.path.join(spill_dir, "1"))
        trainers = [trainer]
        if algorithm == "superbpe":
            stage2_name, stage2_regex = resolve(stage2_pattern)
            trainers.append(_core.BpeTrainer(stage2_regex, specials, num_threads, memory, os.path.join(spill_dir, "2")))
        if from_counts:
            read_counts(trainer, source, show_progress)
        else:
            count_source(trainers, source, max_chars_per_doc=max_chars_per_doc, text_field=text_field,
                         show_progress=show_progress, overlap=num_threads != 1)
        if level == "char":
            alphabet = trainer.start("char", min_frequency, max_token_length, limit_alphabet, end_of_word_suffix or "")
            reserved = len(specials) + (256 if byte_fallback else 1) + len(alphabet)
            if vocab_size < reserved:
                raise TrainingError(f"vocab_size={vocab_size} is too small for the {len(alphabet)} characters of the "
                                    f"alphabet plus {reserved - len(alphabet)} reserved tokens; raise it or set limit_alphabet")
            merges = learn(trainer, vocab_size - reserved, show_progress)
            return _assemble_char(alphabet, merges, regex, pattern_name, specials, special_tokens_position,
                                  end_of_word_suffix, byte_fallback, settings)
        # SuperBPE assembles its tokenizer from the merges of both stages: no model to build.
        trainer.start("byte", min_frequency, max_token_length, build_model=algorithm == "bpe")
        if algorithm == "bpe":
            learned = run_merges(trainer, vocab_size - minimum, show_progress)
            return _assemble_trained(trainer, learned, regex, pattern_name, specials, special_tokens_position, settings)
        # SuperBPE: stage 1 up to the transition, then stage 2 continues from those merges.
        merges = learn(trainer, transition - minimum, show_progress)
        stage2 = trainers[1]
        token_bytes = _internal_token_bytes(merges)
        stage2.start_from(list(enumerate(token_bytes)), merges, len(token_bytes), min_frequency, max_token_length,
                          max_words_per_token, list(forbidden_patterns))
        merges = merges + learn(stage2, vocab_size - transition, show_progress)
    settings.update(algorithm="superbpe", transition=transition, stage1_pattern=regex,
                    max_words_per_token=max_words_per_token, forbidden_patterns=list(forbidden_patterns))
    return _assemble(merges, stage2_regex, stage2_name, specials, special_tokens_position, settings)


def _train_sentencepiece_bpe(source, *, algorithm, vocab_size, special_tokens, special_tokens_position, min_frequency,
                             max_token_length, num_threads, max_memory, max_chars_per_doc, text_field, from_counts,
                             show_progress, end_of_word_suffix, limit_alphabet, byte_fallback, **options) -> Tokenizer:
    """``level="char", pattern="metaspace"``: SentencePiece-style BPE (see
    :func:`toksmith.train_subword.train_sentencepiece_bpe`), with the options that apply to it."""
    from .train_subword import train_sentencepiece_bpe

    unknown = set(options) - {"normalization", "add_dummy_prefix", "unk"}
    if unknown:
        raise TrainingError(f"unknown options for SentencePiece-style BPE: {sorted(unknown)} (it takes normalization=, "
                            f"add_dummy_prefix= and unk=)")
    if algorithm != "bpe" or end_of_word_suffix or from_counts or max_memory is not None or special_tokens_position != "first":
        raise TrainingError("pattern='metaspace' (SentencePiece-style BPE) works with algorithm='bpe' and without "
                            "end_of_word_suffix, from_counts, max_memory and special_tokens_position='last': words "
                            "start with ▁, and the unknown token and special tokens take the first ids")
    controls = list(special_tokens)
    return train_sentencepiece_bpe(source, vocab_size=vocab_size, byte_fallback=byte_fallback,
                                   control_symbols=controls or ("<s>", "</s>"), min_frequency=min_frequency,
                                   max_piece_length=max_token_length, limit_alphabet=limit_alphabet,
                                   text_field=text_field, max_chars_per_doc=max_chars_per_doc,
                                   num_threads=num_threads, show_progress=show_progress, **options)


def count_words_in_token(token: bytes) -> int:
    """Words in a token: runs of non-whitespace bytes (the rule of ``max_words_per_token``).

    >>> count_words_in_token(b" by the way"), count_words_in_token(b", and")
    (3, 2)
    """
    return len(token.split())


def _internal_token_bytes(merges) -> list[bytes]:
    """Token bytes for training's internal ids: bytes 0-255, then merge k as id 256 + k."""
    token_bytes = [bytes([b]) for b in range(256)]
    for left, right in merges:
        token_bytes.append(token_bytes[left] + token_bytes[right])
    return token_bytes


def _check_patterns(name: str, patterns) -> list[str]:
    """A list of regex strings (a lone string would be read as one pattern per character)."""
    if isinstance(patterns, str):
        raise TrainingError(f"{name} must be a list of regex strings, e.g. [{patterns!r}], not one string")
    patterns = list(patterns)
    for p in patterns:
        if not isinstance(p, str):
            raise TrainingError(f"{name} must be regex strings, not {type(p).__name__} ({p!r})")
    return patterns


def _check_specials(special_tokens: Iterable[str], position: str) -> list[str]:
    if isinstance(special_tokens, str):
        raise TrainingError("special_tokens must be a list of strings, e.g. ['<|endoftext|>'], not one string")
    specials = list(special_tokens)
    if any(not isinstance(s, str) or not s for s in specials) or len(set(specials)) != len(specials):
        raise TrainingError(f"special_tokens must be distinct non-empty strings, got {specials!r}")
    if position not in ("first", "last"):
        raise TrainingError(f"special_tokens_position must be 'first' or 'last', not {position!r}")
    return specials


def _progress(show: bool, **kwargs):
    """A tqdm bar, or a do-nothing stand-in when progress is off."""
    if show:
        from tqdm import tqdm

        return tqdm(**kwargs)
    return _NoBar()


class _NoBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass


def count_source(trainers, source, *, max_chars_per_doc=None, text_field="text", show_progress=False,
                 overlap: bool = True) -> None:
    """Streams ``source`` into the chunk counts of one trainer, or of several (one pass over the
    source for all of them), in batches.

    With ``overlap``, the next batch is read (and decoded) while Rust counts the previous one
    with the GIL released: reading stops being a serial phase when more than one core is used.
    """
    check_int("max_chars_per_doc", max_chars_per_doc, 1, None, optional=True)
    bar = _progress(show_progress, desc="reading", unit="B", unit_scale=True, smoothing=0.1)
    if not isinstance(trainers, (list, tuple)):
        trainers = [trainers]
    pending = None  # the batch being counted in the background

    def add_all(batch):
        for trainer in trainers:
            _add(trainer, batch)

    def finish_pending():
        if pending is not None:
            pending.result()
        if hasattr(trainers[0], "memory_stats"):  # the BPE trainer reports its count table
            unique, _, runs = trainers[0].memory_stats()
            bar.set_postfix_str(f"{unique:,} unique chunks in memory" + (f", {runs} runs on disk" if runs else ""))

    # Plain-text files are read, decoded and counted by Rust, a block per call (no Python
    # strings; all of it on the trainer's threads). The rest goes through Python.
    if len(trainers) == 1 and hasattr(trainers[0], "add_file_block") and max_chars_per_doc is None:
        plain, source = split_plain_files(source)
        try:
            for path in plain:
                offset, end = 0, os.path.getsize(path)
                while offset < end:
                    start, offset = offset, trainers[0].add_file_block(str(path), offset, FILE_BLOCK_BYTES)
                    bar.update(offset - start)
                finish_pending()
        except BaseException:
            bar.close()
            raise

    batch: list[str] = []
    size = 0
    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            for text in iter_texts(source, text_field=text_field, lines=max_chars_per_doc is not None):
                if max_chars_per_doc is not None:
                    text = text[:max_chars_per_doc]
                batch.append(text)
                size += len(text)
                if show_progress:
                    bar.update(len(text.encode("utf-8", "surrogatepass")))
                if size >= BATCH_CHARS:
                    finish_pending()
                    if overlap:
                        pending = pool.submit(add_all, batch)
                    else:
                        add_all(batch)
                    batch, size = [], 0
            finish_pending()
            pending = None
            if batch:
                add_all(batch)
        finally:
            bar.close()


def read_counts(trainer, source, show_progress=False) -> None:
    """Adds counts files (TSV ``chunk<TAB>count``) to the trainer."""
    paths = _counts_files(source)
    bar = _progress(show_progress, desc="reading counts", unit="file", total=len(paths))
    for path in paths:
        trainer.add_counts_file(str(path))
        bar.update(1)
    bar.close()


def learn(trainer, num_merges: int, show_progress: bool) -> list[tuple[int, int]]:
    """Runs the merge phase (see :func:`run_merges`); returns the merges learned."""
    run_merges(trainer, num_merges, show_progress)
    return trainer.merges()[0]


def run_merges(trainer, num_merges: int, show_progress: bool) -> int:
    """Learns up to ``num_merges`` merges in steps, updating a progress bar between steps;
    returns how many were learned."""
    bar = _progress(show_progress, desc="merging", unit="merge", total=num_merges, smoothing=0.05)
    trainer.set_merge_target(num_merges)
    done, size = 0, MERGES_PER_STEP
    try:
        while done < num_merges:
            started = time.perf_counter()
            n = trainer.step(min(size, num_merges - done))
            bar.update(n)
            done += n
            if n == 0:
                break
            # The next step's size, from this one's speed (within 16..MAX_MERGES_PER_STEP, at
            # most 4x more): the result does not depend on where steps end.
            seconds = time.perf_counter() - started
            size = max(16, min(MAX_MERGES_PER_STEP, 4 * size, int(n * STEP_SECONDS / max(seconds, 1e-6))))
    finally:
        bar.close()
    return done


def _add(trainer, batch: list[str]) -> None:
    try:
        trainer.add_texts(batch)
    except UnicodeEncodeError as e:
        raise TrainingError(f"a training text contains a lone surrogate at index {e.start}; it is not valid Unicode") from None


def _special_ids(specials, position, num_merges) -> tuple[int, dict[str, int]]:
    """Lays out ids: specials first (0..k-1, then bytes, then merges) or last (after the
    merges). Returns the offset of the byte and merge ids, and the special tokens' ids."""
    offset = len(specials) if position == "first" else 0
    first_special = 0 if position == "first" else 256 + num_merges
    return offset, {s: first_special + k for k, s in enumerate(specials)}


def _assemble_trained(trainer, num_merges, regex, pattern_name, specials, position, settings) -> Tokenizer:
    """The tokenizer of the ``num_merges`` merges a trainer learned from bytes: its model is
    built in Rust (mostly while it learned them) and the merges stay there until asked for."""
    offset, special_ids = _special_ids(specials, position, num_merges)
    metadata = {"trainer": "toksmith bpe", **settings, "special_tokens_position": position}
    model = trainer.byte_level_model(regex, list(special_ids.items()), offset)
    return Tokenizer._from_merges_model(model, pattern=regex, pattern_name=pattern_name, special_tokens=special_ids,
                                        metadata=metadata)


def _assemble(merges, regex, pattern_name, specials, position, settings) -> Tokenizer:
    """The tokenizer of ``merges`` (internal ids: bytes 0-255, merge k is 256 + k)."""
    offset, special_ids = _special_ids(specials, position, len(merges))
    metadata = {"trainer": "toksmith bpe", **settings, "special_tokens_position": position}
    id_merges = [(a + offset, b + offset) for a, b in merges] if offset else merges
    token_bytes = _internal_token_bytes(merges)
    tokens = dict(enumerate(token_bytes, offset))
    return Tokenizer(
        tokens=tokens,
        merges=id_merges,
        pattern=regex,
        pattern_name=pattern_name,
        special_tokens=special_ids,
        metadata=metadata,
    )


def _assemble_char(alphabet, merges, regex, pattern_name, specials, position, suffix, byte_fallback, settings):
    """A character-level BPE tokenizer: a pipeline of regex split, character BPE (with ``<unk>``
    or byte fallback) and a decoder that drops the end-of-word suffix."""
    from . import decoders, models, pre_tokenizers
    from .pipeline import AddedToken, Pipeline

    reserved = [f"<0x{b:02X}>" for b in range(256)] if byte_fallback else ["<unk>"]
    strings = list(alphabet)  # internal id -> token string
    for left, right in merges:
        strings.append(strings[left] + strings[right])
    first = len(specials) if position == "first" else 0
    vocab: dict[str, int] = {}
    for token in [*reserved, *strings]:
        vocab.setdefault(token, first + len(vocab))  # a merge that respells a token reuses its id
    special_base = first + len(vocab) if position == "last" else 0
    added = [AddedToken(s, special_base + k, special=True) for k, s in enumerate(specials)]
    model = models.BPE(vocab, [(strings[a], strings[b]) for a, b in merges], unk_token=None if byte_fallback else "<unk>",
                       byte_fallback=byte_fallback, end_of_word_suffix=suffix or None)
    steps = ([decoders.Replace(suffix, "")] if suffix else []) + ([decoders.ByteFallback()] if byte_fallback else [])
    # The regex in toksmith's (Rust) syntax, with the chunks training saw: "removed" + invert keeps
    # the matches as words.
    split = pre_tokenizers.Split(regex, "removed", invert=True, is_regex=True, syntax="rust")
    pipeline = Pipeline(model, pre_tokenizer=split,
                        decoder=decoders.Sequence([*steps, decoders.Fuse()]), added_tokens=added)
    return Tokenizer.from_pipeline(pipeline, metadata={"trainer": "toksmith bpe (char level)", **settings,
                                                       "pattern_name": pattern_name, "end_of_word_suffix": suffix,
                                                       "byte_fallback": byte_fallback})


def count(source, output: str | os.PathLike, *, pattern: str = "o200k", special_tokens: Iterable[str] = (),
          num_threads: int | None = None, max_memory: int | str | None = None, max_chars_per_doc: int | None = None,
          text_field: str = "text", show_progress: bool = False) -> int:
    """Counts the pre-tokenized chunks of ``source`` and writes them as TSV (``chunk<TAB>count``,
    tab/newline/backslash escaped as ``\\t`` ``\\n`` ``\\\\``), atomically. Returns the number of
    distinct chunks. ``toksmith.train(paths, from_counts=True)`` trains from such files."""
    from pathlib import Path

    check_threads(num_threads)
    name, regex = resolve(pattern)
    output = Path(output)
    with tempfile.TemporaryDirectory(prefix="toksmith-spill-") as spill_dir:
        trainer = _core.BpeTrainer(regex, _check_specials(special_tokens, "first"), num_threads,
                                   _memory(max_memory), spill_dir)
        count_source(trainer, source, max_chars_per_doc=max_chars_per_doc, text_field=text_field,
                     show_progress=show_progress)
        return _write_counts(trainer, output, {"pattern_name": name, "pattern": regex})


def merge_counts(inputs, output: str | os.PathLike, *, max_memory: int | str | None = None) -> int:
    """Adds up counts files (from many machines) into one; returns the number of distinct chunks."""
    from pathlib import Path

    inputs = list(inputs)
    known = _counts_patterns(inputs)
    with tempfile.TemporaryDirectory(prefix="toksmith-spill-") as spill_dir:
        trainer = _core.BpeTrainer(r"[\s\S]+", [], None, _memory(max_memory), spill_dir)
        read_counts(trainer, inputs)
        # The sum keeps the inputs' pattern only when every input names it (one counted by
        # another tool could have been counted with any).
        pattern = next(iter(known.values())) if known and None not in known.values() else None
        return _write_counts(trainer, Path(output), pattern)


# Counts files say which pattern made their chunks in a sidecar file, ``<counts file>.meta.json``
# (the TSV itself stays as SentencePiece reads it): training from them with another pattern would
# learn tokens that the tokenizer's own pre-tokenization can never produce.
COUNTS_META_SUFFIX = ".meta.json"
DEFAULT_PATTERN = "o200k"


def counts_meta_path(counts_file) -> "os.PathLike":
    from pathlib import Path

    counts_file = Path(counts_file)
    return counts_file.with_name(counts_file.name + COUNTS_META_SUFFIX)


def _write_counts(trainer, output, pattern: dict | None) -> int:
    """Writes through a temporary file beside ``output`` and renames it: never half a file; with
    the sidecar naming the pattern (or none, when ``pattern`` is None)."""
    import json

    meta = counts_meta_path(output)
    with atomic_output(output) as tmp:
        n = trainer.write_counts(str(tmp))
        # The sidecar is replaced just before the counts are renamed into place: a failed or
        # interrupted write leaves the old counts with their own sidecar.
        if pattern is None:
            if meta.is_file():
                meta.unlink()
        else:
            with atomic_output(meta) as tmp_meta:
                tmp_meta.write_text(json.dumps({"format": "toksmith counts", "version": 1, **pattern},
                                               ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return n


def _counts_files(source) -> list:
    """The counts files of ``source`` (paths, directories, globs), without their sidecars."""
    from .sources import resolve_paths

    items = source if isinstance(source, (list, tuple)) else [source]
    paths = [p for item in items for p in resolve_paths(item)]
    listed = set(paths)
    return [p for p in paths if not (p.name.endswith(COUNTS_META_SUFFIX)
                                     and p.with_name(p.name[:-len(COUNTS_META_SUFFIX)]) in listed)]


def _counts_patterns(source) -> dict:
    """``{counts file: {"pattern_name", "pattern"} or None}`` (None: no sidecar, e.g. a file another
    tool wrote); a TrainingError when two files were counted with different patterns."""
    import json

    found: dict = {}
    first = None
    for path in _counts_files(source):
        meta = counts_meta_path(path)
        pattern = None
        if meta.is_file():
            try:
                data = json.loads(meta.read_text(encoding="utf-8"))
                pattern = {"pattern_name": data.get("pattern_name"), "pattern": data["pattern"]}
                if not isinstance(pattern["pattern"], str):
                    raise TypeError("pattern is not a string")
            except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
                raise TrainingError(f"{meta}: not a counts sidecar written by toksmith count ({e}); "
                                    f"delete it to use {path.name} without a recorded pattern") from None
            if first is not None and pattern["pattern"] != first[1]["pattern"]:
                raise TrainingError(f"{first[0]} and {path} were counted with different patterns "
                                    f"({_describe(first[1])} and {_describe(pattern)}): counts add up only "
                                    f"from the same pre-tokenization; count both with one --pattern")
            first = first or (path, pattern)
        found[path] = pattern
    return found


def _describe(pattern: dict) -> str:
    return repr(pattern["pattern_name"]) if pattern.get("pattern_name") else f"the regex {pattern['pattern']!r}"


def _pattern_of_counts(source, pattern: str | None) -> str:
    """The pattern to train with from counts files: the one they were counted with, which
    ``pattern`` (None: not given) must agree with; without a record, ``pattern`` or the default."""
    known = [p for p in _counts_patterns(source).values() if p is not None]
    if not known:
        return DEFAULT_PATTERN if pattern is None else pattern
    recorded = known[0]
    if pattern is None:
        return recorded["pattern_name"] or recorded["pattern"]
    if resolve(pattern)[1] != recorded["pattern"]:
        raise TrainingError(f"the counts were made with {_describe(recorded)} but training was asked for "
                            f"{pattern!r}: its tokenizer would split text into other chunks than those "
                            f"counted. Leave the pattern out (the counts' own is used) or count again with it")
    return pattern


def extend(tokenizer: Tokenizer, source, *, add: int, min_frequency: int = 2, max_token_length: int | None = None,
           num_threads: int | None = None, max_memory: int | str | None = None, text_field: str = "text",
           show_progress: bool = False) -> Tokenizer:
    """Learns ``add`` new merges from a domain corpus on top of a byte-level BPE tokenizer and
    returns the extended tokenizer. Every existing id, merge and special token stays as it was:
    the corpus is first segmented with the existing merges, and new tokens get ids after the
    largest existing id. A merge never recreates a token that already exists."""
    check_int("add", add, 1)
    check_int("min_frequency", min_frequency, 1, U64_MAX)
    check_int("max_token_length", max_token_length, 2, optional=True)
    check_threads(num_threads)
    if tokenizer.pipeline is not None:
        return _extend_pipeline(tokenizer, source, add=add, min_frequency=min_frequency,
                                max_token_length=max_token_length, num_threads=num_threads, max_memory=max_memory,
                                text_field=text_field, show_progress=show_progress)
    next_id = tokenizer.vocab_size
    with tempfile.TemporaryDirectory(prefix="toksmith-spill-") as spill_dir:
        trainer = _core.BpeTrainer(tokenizer.pattern, list(tokenizer.special_tokens), num_threads,
                                   _memory(max_memory), spill_dir)
        count_source(trainer, source, text_field=text_field, show_progress=show_progress, overlap=num_threads != 1)
        old_merges = None if tokenizer.uses_ranks else tokenizer._merge_ids()
        trainer.start_from(list(tokenizer._tokens.items()), old_merges, next_id, min_frequency, max_token_length)
        new_merges = learn(trainer, add, show_progress)
    tokens = dict(tokenizer._tokens)
    for k, (left, right) in enumerate(new_merges):
        tokens[next_id + k] = tokens[left] + tokens[right]
    metadata = dict(tokenizer.metadata, extended_from_vocab_size=next_id, added_merges=len(new_merges))
    return Tokenizer(tokens=tokens, merges=None if tokenizer.uses_ranks else [*old_merges, *new_merges],
                     pattern=tokenizer.pattern, pattern_name=tokenizer.pattern_name,
                     special_tokens=tokenizer.special_tokens, metadata=metadata)


def _extend_pipeline(tokenizer: Tokenizer, source, *, add, min_frequency, max_token_length, num_threads, max_memory,
                     text_field, show_progress) -> Tokenizer:
    """extend() for loaded byte-level BPE pipelines (GPT-2, Llama 3, Qwen ...): the domain text
    is normalized as the tokenizer normalizes it, counted with its pattern and segmented with its
    merges; the new tokens get ids after every existing id (added tokens included), and the
    result is the same pipeline with a larger BPE model, so it saves back to tokenizer.json."""
    from .byte_level import bytes_to_token, token_to_bytes
    from .fast_path import pattern_name
    from .models import BPE
    from .pipeline import Pipeline

    pipe = tokenizer.pipeline
    from .models import Unigram

    if isinstance(pipe.model, Unigram):
        return _extend_unigram(tokenizer, source, add=add, num_threads=num_threads, text_field=text_field,
                               show_progress=show_progress)
    name = pattern_name(pipe.pre_tokenizer)
    if pipe.fast is None or name is None or not isinstance(pipe.model, BPE):
        raise TrainingError("extend() works on byte-level BPE tokenizers (trained by toksmith, tiktoken, or loaded "
                            "GPT-2 / Llama 3 / Qwen-style tokenizer.json) and on Unigram tokenizers (trained by "
                            "toksmith or from tokenizer.json); this one has another pipeline")
    model = pipe.model
    vocab = model.get_vocab()
    tokens = [(i, token_to_bytes(t)) for t, i in vocab.items()]
    next_id = tokenizer.vocab_size
    normalize = pipe.normalizer.normalize if pipe.normalizer is not None else (lambda t: t)
    with tempfile.TemporaryDirectory(prefix="toksmith-spill-") as spill_dir:
        trainer = _core.BpeTrainer(_core.pattern_regex(name), [t.content for t in pipe.added_tokens], num_threads,
                                   _memory(max_memory), spill_dir)
        texts = (normalize(t) for t in iter_texts(source, text_field=text_field))
        count_source(trainer, texts, show_progress=show_progress, overlap=num_threads != 1)
        merges = [(vocab[a], vocab[b]) for a, b in model.merges]
        trainer.start_from(tokens, merges, next_id, min_frequency, max_token_length)
        new_merges = learn(trainer, add, show_progress)
    names = {i: t for t, i in vocab.items()}
    for k, (left, right) in enumerate(new_merges):
        names[next_id + k] = bytes_to_token(token_to_bytes(names[left]) + token_to_bytes(names[right]))
    new_model = BPE({t: i for i, t in names.items()}, [*model.merges, *((names[a], names[b]) for a, b in new_merges)],
                    **model.options)
    new_pipe = Pipeline(new_model, normalizer=pipe.normalizer, pre_tokenizer=pipe.pre_tokenizer,
                        post_processor=pipe.post_processor, decoder=pipe.decoder, added_tokens=pipe.added_tokens)
    metadata = dict(tokenizer.metadata, extended_from_vocab_size=next_id, added_merges=len(new_merges))
    return Tokenizer.from_pipeline(new_pipe, metadata=metadata)


def _extend_unigram(tokenizer: Tokenizer, source, *, add, num_threads, text_field, show_progress) -> Tokenizer:
    """extend() for Unigram tokenizers: a Unigram model trained on the domain corpus proposes
    pieces; the ``add`` most probable ones the tokenizer lacks are appended with their domain
    log probabilities. Every existing piece keeps its id and score."""
    from .models import Unigram
    from .pipeline import Pipeline
    from .train_subword import TrainedUnigram, train_unigram

    pipe = tokenizer.pipeline
    base = pipe.model
    if tokenizer.vocab_size != len(base.pieces):
        raise TrainingError("extend() needs a Unigram tokenizer whose ids are its pieces (no ids beyond them)")
    domain = train_unigram(source, vocab_size=add + 300, hard_vocab_limit=False, num_threads=num_threads,
                           text_field=text_field, show_progress=show_progress).pipeline.model
    reserved = set(domain.exclude) | set(getattr(domain, "byte_ids", ())) | set(getattr(domain, "user_defined", ()))
    reserved.add(domain.unk_id)
    have = {p for p, _ in base.pieces}
    candidates = sorted(((s, p) for i, (p, s) in enumerate(domain.pieces) if i not in reserved and p not in have),
                        key=lambda sp: (-sp[0], sp[1]))
    new = [(p, s) for s, p in candidates[:add]]
    if not new:
        raise TrainingError("the domain corpus proposes no piece the tokenizer lacks")
    if isinstance(base, TrainedUnigram):
        model = TrainedUnigram(base.pieces + new, unk_id=base.unk_id, byte_fallback=base.byte_fallback,
                               exclude=base.exclude - base.byte_ids, byte_ids=base.byte_ids,
                               user_defined=base.user_defined)
    else:
        model = Unigram(base.pieces + new, unk_id=base.unk_id, byte_fallback=base.byte_fallback,
                        exclude=base.exclude, float32_scores=base.float32_scores)
    new_pipe = Pipeline(model, normalizer=pipe.normalizer, pre_tokenizer=pipe.pre_tokenizer,
                        post_processor=pipe.post_processor, decoder=pipe.decoder, added_tokens=pipe.added_tokens)
    metadata = dict(tokenizer.metadata, extended_from_vocab_size=tokenizer.vocab_size, added_pieces=len(new))
    return Tokenizer.from_pipeline(new_pipe, metadata=metadata)
