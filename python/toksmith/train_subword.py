"""WordPiece and Unigram (SentencePiece-style) training, and Unigram subword regularization.

Both trainers stream the source into a count of distinct raw words (Rust, in parallel), apply
the tokenizer's own normalizer to each distinct word once (Python; far fewer characters than
the corpus), split the results into the words the model sees, and learn the vocabulary in Rust
(``rust/train/wordpiece.rs``, ``rust/train/unigram.rs``). The result is a
:class:`toksmith.Tokenizer` running the general pipeline, so that encoding goes through exactly
the normalizer and pre-tokenizer that training used.

- :func:`train_wordpiece`: BERT-style WordPiece, merging the pair with the highest
  count(ab) / (count(a) * count(b)) (or, with ``criterion="likelihood"``, the highest gain in
  log-likelihood).
- :func:`train_unigram`: Unigram LM as in SentencePiece (seeds from frequent substrings, EM with
  forward-backward, pruning by loss), with ``▁`` marking word starts.
- :func:`unigram_nbest`, :func:`unigram_sample`: the n best segmentations, and seeded sampling
  for subword regularization, for any tokenizer with a Unigram model.
"""

from __future__ import annotations

import os
import re
import tempfile
import weakref
from collections.abc import Iterable

from . import _core, decoders, models, normalizers, post_processors, pre_tokenizers
from .errors import EncodeError, TrainingError
from .pipeline import AddedToken, Pipeline
from .tokenizer import Tokenizer

WORDPIECE_SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")
META = "\u2581"  # ▁, SentencePiece's whitespace marker
_SEPARATOR = "\uffff"  # joins distinct words for one normalizer call; no normalizer changes it
_WS_RUN = re.compile(pre_tokenizers.WHITESPACE.pattern + "+")
_META_WORDS = re.compile(f"{META}[^{META}]*|[^{META}]+")  # Metaspace's split (merged with next)
_BERT_WORDS = re.compile(f"{pre_tokenizers.PUNCTUATION.pattern}|[^{pre_tokenizers.PUNCTUATION.pattern[1:-1]}]+")


# ---------------------------------------------------------------------------------------------
# Shared steps

from .trainers import U32_MAX, U64_MAX, _progress, check_int, check_threads, count_source  # noqa: E402  (shared)


def _count_raw_words(counter, source, *, text_field: str, max_chars_per_doc: int | None, show_progress: bool):
    """Streams ``source`` into a :class:`_core.RawWordCounter`, in batches (the BPE trainer's
    reading loop: same batching, progress bar and lone-surrogate error)."""
    count_source(counter, source, max_chars_per_doc=max_chars_per_doc, text_field=text_field,
                 show_progress=show_progress, overlap=False)


def normalize_distinct(words: list[str], normalize) -> list[str]:
    """``[normalize(w) for w in words]`` in one call: the words are joined with U+FFFF, which
    the normalizers leave alone (words that hold it are normalized one by one).

    >>> normalize_distinct(["Héllo", "WORLD"], str.lower)
    ['héllo', 'world']
    """
    if not words:
        return []
    plain = [w for w in words if _SEPARATOR not in w]
    out = normalize(_SEPARATOR.join(plain)).split(_SEPARATOR) if plain else []
    if len(out) != len(plain):  # a normalizer that does touch U+FFFF: do it word by word
        out = [normalize(w) for w in plain]
    if len(plain) == len(words):
        return out
    it = iter(out)
    return [normalize(w) if _SEPARATOR in w else next(it) for w in words]


def _check_int(name: str, value, minimum: int, maximum: int = U32_MAX) -> None:
    # The Rust trainers take these as u32/u64/usize: a larger int would escape as OverflowError.
    check_int(name, value, minimum, maximum)


def _check_strings(name: str, values) -> list[str]:
    if isinstance(values, str):
        raise TrainingError(f"{name} must be a list of strings, e.g. [{values!r}], not one string")
    values = list(values)
    if any(not isinstance(s, str) or not s for s in values) or len(set(values)) != len(values):
        raise TrainingError(f"{name} must be distinct non-empty strings, got {values!r}")
    return values


# ---------------------------------------------------------------------------------------------
# Entry point for toksmith.train


def train_subword(source, *, algorithm: str, vocab_size: int, special_tokens: Iterable[str] | None = None,
                  min_frequency: int | None = None, limit_alphabet: int | None = None, byte_fallback: bool = False,
                  max_token_length: int | None = None, num_threads: int | None = None,
                  max_chars_per_doc: int | None = None, text_field: str = "text", show_progress: bool = False,
                  **options) -> Tokenizer:
    """``toksmith.train(source, algorithm="wordpiece" | "unigram", ...)``: maps the common options of
    :func:`toksmith.train` to :func:`train_wordpiece` or :func:`train_unigram`; ``options`` are
    passed on (e.g. ``lowercase=``, ``criterion=`` for WordPiece; ``character_coverage=``,
    ``user_defined_symbols=`` for Unigram).

    - ``special_tokens``: WordPiece's reserved tokens (default ``[UNK] [CLS] [SEP] [PAD] [MASK]``);
      Unigram's control symbols (default ``<s> </s>``).
    - ``max_token_length``: Unigram's ``max_piece_length`` (characters).
    - ``min_frequency``: WordPiece only (Unigram has none: EM drops rare pieces), as are
      ``limit_alphabet``; ``byte_fallback`` is Unigram only.
    """
    common = dict(num_threads=num_threads, max_chars_per_doc=max_chars_per_doc, text_field=text_field,
                  show_progress=show_progress)
    if algorithm in ("wordpiece", "unigram"):
        _check_options(train_wordpiece if algorithm == "wordpiece" else train_unigram, options, algorithm)
    if algorithm == "wordpiece":
        if byte_fallback or max_token_length is not None:
            raise TrainingError("byte_fallback and max_token_length are not options of WordPiece training")
        if special_tokens is not None:
            options["special_tokens"] = special_tokens
        return train_wordpiece(source, vocab_size=vocab_size, min_frequency=2 if min_frequency is None else min_frequency,
                               limit_alphabet=limit_alphabet, **common, **options)
    if algorithm == "unigram":
        if min_frequency not in (None, 2) or limit_alphabet is not None:
            raise TrainingError("min_frequency and limit_alphabet are not options of Unigram training (EM drops rare "
                                "pieces; character_coverage= limits the alphabet)")
        if special_tokens is not None:
            options["control_symbols"] = special_tokens
        if max_token_length is not None:
            options["max_piece_length"] = max_token_length
        return train_unigram(source, vocab_size=vocab_size, byte_fallback=byte_fallback, **common, **options)
    raise TrainingError(f"train_subword trains 'wordpiece' and 'unigram', not {algorithm!r}")


def _check_options(trainer, options: dict, algorithm: str) -> None:
    """A TrainingError naming the options ``trainer`` does not take (a TypeError escaped before)."""
    import inspect

    params = inspect.signature(trainer).parameters
    taken = [name for name, p in params.items()
             if p.kind is p.KEYWORD_ONLY and name not in ("vocab_size", "num_threads", "max_chars_per_doc",
                                                          "text_field", "show_progress")]
    unknown = sorted(set(options) - set(taken))
    if unknown:
        raise TrainingError(f"unknown option(s) of algorithm={algorithm!r}: {', '.join(unknown)}; it takes "
                            f"{', '.join(taken)}")
    # A flag must be a bool (Rust refuses 1 with a TypeError), a number a number.
    for name, value in options.items():
        default = params[name].default
        if isinstance(default, bool) and not isinstance(value, bool):
            raise TrainingError(f"{name} must be True or False, not {value!r}")
        if isinstance(default, (int, float)) and not isinstance(default, bool) and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TrainingError(f"{name} must be a number, not {value!r}")


# ---------------------------------------------------------------------------------------------
# WordPiece


def train_wordpiece(
    source,
    *,
    vocab_size: int,
    special_tokens: Iterable[str] = WORDPIECE_SPECIALS,
    unk_token: str = "[UNK]",
    min_frequency: int = 2,
    limit_alphabet: int | None = None,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    clean_text: bool = True,
    handle_chinese_chars: bool = True,
    continuing_subword_prefix: str = "##",
    max_input_chars_per_word: int = 100,
    criterion: str = "ratio",
    text_field: str = "text",
    max_chars_per_doc: int | None = None,
    num_threads: int | None = None,
    show_progress: bool = False,
) -> Tokenizer:
    """Trains a BERT-style WordPiece tokenizer on ``source`` (as :func:`toksmith.train` reads it).

    Text goes through BERT's normalizer (``clean_text``, spaces around CJK ideographs,
    ``strip_accents`` (default: when lowercasing), ``lowercase``) and pre-tokenizer (split on
    whitespace, each punctuation character alone). Training starts from characters (the
    ``limit_alphabet`` most frequent, each alone and with ``continuing_subword_prefix``) and
    merges the pair with the highest count(ab) / (count(a) * count(b)) until ``vocab_size``
    tokens, or until no pair is seen ``min_frequency`` times. ``special_tokens`` take ids
    0..k-1 and must include ``unk_token``; with ``[CLS]`` and ``[SEP]`` among them, encoding adds
    them around the text as BERT does (``add_special_tokens=False`` to leave them out).
    Encoding is greedy longest-match-first; a word longer than ``max_input_chars_per_word``
    characters, or with no full segmentation, becomes ``unk_token``.

    ``criterion="likelihood"`` scores count(ab) * log(count(ab) * N / (count(a) * count(b)))
    instead (N: symbols in the corpus before training): the gain in log-likelihood of a unigram
    model, which weighs the ratio by how often the merge applies. The ratio alone prefers pairs of
    rare parts; with a large ``vocab_size`` and a low ``min_frequency`` it fills the vocabulary
    with pieces of rare words and common words stay split (see ``benchmarks/train_subword.py``).
    """
    if criterion not in ("ratio", "likelihood"):
        raise TrainingError(f"criterion must be 'ratio' or 'likelihood', not {criterion!r}")
    check_threads(num_threads)
    specials = _check_strings("special_tokens", special_tokens)
    if unk_token not in specials:
        raise TrainingError(f"unk_token {unk_token!r} must be one of the special_tokens {specials!r}; add it to them")
    _check_int("vocab_size", vocab_size, 1)
    _check_int("min_frequency", min_frequency, 1, U64_MAX)
    _check_int("max_input_chars_per_word", max_input_chars_per_word, 1)
    if limit_alphabet is not None:
        _check_int("limit_alphabet", limit_alphabet, 1)
    if not isinstance(continuing_subword_prefix, str) or not continuing_subword_prefix:
        raise TrainingError(f"continuing_subword_prefix must be a non-empty string, not {continuing_subword_prefix!r}")
    if vocab_size <= len(specials):
        raise TrainingError(f"vocab_size={vocab_size} leaves no room after the {len(specials)} special tokens; raise it")

    normalizer = normalizers.BertNormalizer(clean_text=clean_text, handle_chinese_chars=handle_chinese_chars,
                                            strip_accents=strip_accents, lowercase=lowercase)
    counter = _core.RawWordCounter("bert" if clean_text else "whitespace", [], False, num_threads)
    _count_raw_words(counter, source, text_field=text_field, max_chars_per_doc=max_chars_per_doc,
                     show_progress=show_progress)
    raw, _ = counter.take()
    words = bert_words(raw, normalizer)
    if not words:
        raise TrainingError("the training data has no words; check the source (and text_field for JSON Lines)")
    tokens, alphabet_size, skipped = _core.train_wordpiece(
        sorted(words.items()), vocab_size - len(specials), min_frequency, limit_alphabet, continuing_subword_prefix,
        num_threads, criterion)
    vocab: dict[str, int] = {s: i for i, s in enumerate(specials)}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    model = models.WordPiece(vocab, unk_token=unk_token, continuing_subword_prefix=continuing_subword_prefix,
                             max_input_chars_per_word=max_input_chars_per_word)
    post = None
    if "[CLS]" in vocab and "[SEP]" in vocab:
        post = post_processors.TemplateProcessing(
            [("special", "[CLS]", 0), ("sequence", "A", 0), ("special", "[SEP]", 0)],
            [("special", "[CLS]", 0), ("sequence", "A", 0), ("special", "[SEP]", 0), ("sequence", "B", 1),
             ("special", "[SEP]", 1)],
            {s: ([vocab[s]], [s]) for s in ("[CLS]", "[SEP]")})
    pipeline = Pipeline(model, normalizer=normalizer, pre_tokenizer=pre_tokenizers.BertPreTokenizer(),
                        post_processor=post, decoder=decoders.WordPiece(continuing_subword_prefix),
                        added_tokens=[AddedToken(s, vocab[s], special=True) for s in specials])
    settings = dict(vocab_size=vocab_size, criterion=criterion, min_frequency=min_frequency, limit_alphabet=limit_alphabet,
                    lowercase=lowercase, strip_accents=strip_accents, alphabet_size=alphabet_size,
                    skipped_words=skipped, special_tokens=specials)
    return Tokenizer.from_pipeline(pipeline, metadata={"trainer": "toksmith wordpiece", **settings})


def bert_words(raw: Iterable[tuple[str, int]], normalizer) -> dict[str, int]:
    """Counts of the words BERT's pre-tokenizer makes of each normalized raw word.

    >>> bert_words([("Hello,", 2), ("héllo", 1)], normalizers.BertNormalizer())
    {'hello': 3, ',': 2}
    """
    raw = list(raw)
    normalized = normalize_distinct([w for w, _ in raw], normalizer.normalize)
    counts: dict[str, int] = {}
    for text, (_, n) in zip(normalized, raw):
        for piece in _WS_RUN.split(text) if not (text.isascii() and text.isalnum()) else (text,):
            if not piece:
                continue
            # Letters and digits only: no punctuation to split off.
            for w in (piece,) if piece.isascii() and piece.isalnum() else _BERT_WORDS.findall(piece):
                counts[w] = counts.get(w, 0) + n
    return counts


# ---------------------------------------------------------------------------------------------
# Unigram


def train_unigram(
    source,
    *,
    vocab_size: int,
    character_coverage: float = 0.9995,
    byte_fallback: bool = False,
    max_piece_length: int = 16,
    split_digits: bool = False,
    split_by_number: bool = True,
    split_by_unicode_script: bool = True,
    add_dummy_prefix: bool = True,
    normalization: str | None = "nfkc",
    user_defined_symbols: Iterable[str] = (),
    control_symbols: Iterable[str] = ("<s>", "</s>"),
    unk: str = "<unk>",
    shrinking_factor: float = 0.75,
    num_sub_iterations: int = 2,
    seed_size: int = 1_000_000,
    hard_vocab_limit: bool = True,
    text_field: str = "text",
    max_chars_per_doc: int | None = None,
    num_threads: int | None = None,
    show_progress: bool = False,
) -> Tokenizer:
    """Trains a Unigram language-model tokenizer (SentencePiece's algorithm) on ``source``.

    Text is normalized (``normalization="nfkc"`` or None, see :func:`sentencepiece_normalizer`;
    runs of whitespace become one space, stripped at both ends), spaces become ``▁`` and every
    word starts with one
    (``add_dummy_prefix``: the first word too). Pieces never cross words, and never hold ``▁``
    except first.

    - ``vocab_size``: total ids: ``unk`` (id 0), ``control_symbols`` (special tokens, matched only
      where allowed), ``user_defined_symbols`` (always one token wherever they appear), the 256
      byte pieces ``<0x00>``..``<0xFF>`` with ``byte_fallback`` (characters without a piece become
      their UTF-8 bytes instead of ``unk``), then the learned pieces, highest score first. This is
      SentencePiece's id layout.
    - ``character_coverage``: the characters that make up this share of the text are kept (1.0:
      all of them); the rarest others become ``unk`` (or bytes).
    - ``max_piece_length`` (characters), ``split_digits`` (every digit its own piece),
      ``split_by_number`` (digits are of the Common script, like punctuation, so no piece
      mixes them with letters; off: digits join anything),
      ``split_by_unicode_script`` (no piece mixes scripts; Hiragana and Katakana count as Han).
    - ``seed_size``: candidate pieces to start from; ``shrinking_factor``: share kept by each
      pruning step; ``num_sub_iterations``: EM iterations between prunings.
    - ``hard_vocab_limit``: fail if the corpus cannot fill ``vocab_size`` (else return fewer).

    Differences from SentencePiece are listed in ``rust/train/unigram.rs``. Encoding is Viterbi;
    see :func:`unigram_nbest` and :func:`unigram_sample` for n-best lists and sampling. Scores
    are rounded to multiples of 1/64 so that ``save(format="sentencepiece")`` (float32 sums) and
    ``save(format="hf")`` (double sums) encode exactly as toksmith does (:class:`TrainedUnigram`).
    """
    if normalization not in ("nfkc", None):
        raise TrainingError(f"normalization must be 'nfkc' or None, not {normalization!r}")
    check_threads(num_threads)
    users = _check_strings("user_defined_symbols", user_defined_symbols)
    controls = _check_strings("control_symbols", control_symbols)
    if not isinstance(unk, str) or not unk:
        raise TrainingError(f"unk must be a non-empty string, not {unk!r}")
    meta = [unk, *controls, *users]
    if len(set(meta)) != len(meta):
        raise TrainingError(f"unk, control_symbols and user_defined_symbols must all differ, got {meta!r}")
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)] if byte_fallback else []
    if set(byte_pieces) & set(meta):
        raise TrainingError("a symbol has the name of a byte piece (<0x00>..<0xFF>); rename it")
    _check_int("vocab_size", vocab_size, 1)
    _check_int("max_piece_length", max_piece_length, 1)
    _check_int("num_sub_iterations", num_sub_iterations, 1)
    _check_int("seed_size", seed_size, 1)
    if not isinstance(character_coverage, (int, float)) or not 0 < character_coverage <= 1:
        raise TrainingError(f"character_coverage must be in (0, 1], not {character_coverage!r}")
    if not isinstance(shrinking_factor, (int, float)) or not 0 < shrinking_factor < 1:
        raise TrainingError(f"shrinking_factor must be in (0, 1), not {shrinking_factor!r}")
    reserved = len(meta) + len(byte_pieces)
    quota = vocab_size - reserved
    if quota < 1:
        raise TrainingError(f"vocab_size={vocab_size} leaves no room for pieces after {reserved} reserved ids "
                            f"(unk, control and user-defined symbols, byte pieces); raise it")

    normalize = _charsmap_normalize(normalization)
    for symbol in users:
        # SentencePiece leaves them as written; Hugging Face's normalizer (in an export) does not.
        if (normalize is not None and normalize(symbol) != symbol) or _WS_RUN.search(symbol) or META in symbol:
            raise TrainingError(f"the user-defined symbol {symbol!r} holds whitespace or ▁, or changes under "
                                f"{normalization} normalization; pick a symbol without them")
    words = _count_metaspace_words(source, users, normalize, add_dummy_prefix, text_field=text_field,
                                   max_chars_per_doc=max_chars_per_doc, num_threads=num_threads,
                                   show_progress=show_progress)
    chars = set().union(*words)
    trainer = _core.UnigramTrainer(
        sorted(words.items()), script_classes(chars) if split_by_unicode_script else [],
        vocab_size=quota, stop_size=int(vocab_size * 1.1), character_coverage=float(character_coverage),
        max_piece_length=max_piece_length, seed_size=seed_size, shrinking_factor=float(shrinking_factor),
        split_digits=split_digits, split_by_number=split_by_number, split_by_script=split_by_unicode_script,
        num_threads=num_threads)
    history = run_em(trainer, num_sub_iterations, show_progress)
    final = trainer.finalize()
    if len(final) < quota and hard_vocab_limit:
        raise TrainingError(f"the corpus supports only {len(final) + reserved} ids, fewer than vocab_size={vocab_size}; "
                            f"lower vocab_size to at most {len(final) + reserved}, or pass hard_vocab_limit=False")
    settings = dict(vocab_size=vocab_size, character_coverage=character_coverage, byte_fallback=byte_fallback,
                    max_piece_length=max_piece_length, split_digits=split_digits, split_by_number=split_by_number,
                    split_by_unicode_script=split_by_unicode_script, add_dummy_prefix=add_dummy_prefix,
                    normalization=normalization, shrinking_factor=shrinking_factor,
                    num_sub_iterations=num_sub_iterations, seed_size=seed_size, em_objective=history,
                    required_chars=len(trainer.required_chars()))
    return unigram_tokenizer(final, unk=unk, control_symbols=controls, user_defined_symbols=users,
                             byte_fallback=byte_fallback, add_dummy_prefix=add_dummy_prefix,
                             normalization=normalization, metadata={"trainer": "toksmith unigram", **settings})


def run_em(trainer, num_sub_iterations: int, show_progress: bool = False) -> list[float]:
    """EM iterations and pruning steps until the trainer has few enough pieces; returns the
    objective (average negative log-likelihood per word) of each EM iteration."""
    history = []
    bar = _progress(show_progress, desc="EM", unit="round")
    try:
        while True:
            for _ in range(num_sub_iterations):
                history.append(trainer.em_iteration())
            bar.set_postfix_str(f"{trainer.num_pieces():,} pieces, objective {history[-1]:.4f}")
            bar.update(1)
            if trainer.done() or trainer.prune() == 0:
                break
    finally:
        bar.close()
    return history


def _count_metaspace_words(source, cut: list[str], normalize, add_dummy_prefix: bool, **reading) -> dict[str, int]:
    """Counts of the Metaspace words of ``source`` (each raw word put through ``normalize`` if
    given), the ``cut`` strings taken out of the text; TrainingError when there are none."""
    counter = _core.RawWordCounter("whitespace", cut, not add_dummy_prefix, reading.pop("num_threads"))
    _count_raw_words(counter, source, **reading)
    raw, firsts = counter.take()
    words = metaspace_words(raw, firsts, normalize)
    if not words:
        raise TrainingError("the training data has no words; check the source (and text_field for JSON Lines)")
    return words


def metaspace_words(raw: Iterable[tuple[str, int]], firsts: Iterable[tuple[str, int]] = (), normalize=None) -> dict[str, int]:
    """Counts of the words the Unigram pipeline makes of each (normalized) raw word: whitespace
    runs split, ``▁`` in front of each word (not of the first word of a text: ``firsts``), and
    a split before every ``▁``, as the Metaspace pre-tokenizer does.

    >>> metaspace_words([("Hi", 2), ("a\u2581b", 1)], [("Hi", 1)])
    {'▁Hi': 2, '▁a': 1, '▁b': 1, 'Hi': 1}
    """
    counts: dict[str, int] = {}
    for table, first in ((list(raw), False), (list(firsts), True)):
        texts = [w for w, _ in table]
        if normalize is not None:
            texts = normalize_distinct(texts, normalize)
        for text, (raw_word, n) in zip(texts, table):
            if not raw_word:  # a lone ▁ (whitespace before a user-defined symbol)
                counts[META] = counts.get(META, 0) + n
                continue
            parts = _WS_RUN.split(text) if not text.isalnum() else (text,)
            for i, part in enumerate(p for p in parts if p):
                if not (first and i == 0):
                    part = META + part
                for w in (part,) if META not in part[1:] else _META_WORDS.findall(part):
                    counts[w] = counts.get(w, 0) + n
    return counts


def _script_table():
    """A regex with one group per Unicode script (the ``regex`` module's script names)."""
    try:
        from regex import _regex_core

        by_id: dict[int, str] = {}
        for name, value in _regex_core.PROPERTIES["SCRIPT"][1].items():
            by_id.setdefault(value, name)  # the long name comes first, then its aliases
        names = [by_id[k] for k in sorted(by_id)]
    except Exception:  # the private table moved: a shorter public list still separates the big scripts
        names = ["COMMON", "LATIN", "GREEK", "CYRILLIC", "ARMENIAN", "HEBREW", "ARABIC", "DEVANAGARI", "BENGALI",
                 "TAMIL", "TELUGU", "THAI", "GEORGIAN", "HANGUL", "ETHIOPIC", "HAN", "HIRAGANA", "KATAKANA",
                 "INHERITED"]
    import regex

    return regex.compile("|".join(f"(\\p{{Script={n}}})" for n in names)), names


def script_classes(chars: Iterable[str]) -> list[tuple[str, int]]:
    """(character, script class) for the Unigram trainer: class 0 joins any script (combining
    marks); Hiragana, Katakana and ``ー`` count as Han, as in SentencePiece.

    >>> classes = dict(script_classes("abéд\u0301,"))
    >>> classes["a"] == classes["é"] != classes["д"], classes["\u0301"], classes[","] != classes["a"]
    (True, 0, True)
    """
    rx, names = _script_table()
    han = names.index("HAN") + 1 if "HAN" in names else -1
    out = []
    for c in chars:
        m = rx.match(c)
        name = names[m.lastindex - 1] if m else "UNKNOWN"
        if name == "INHERITED":
            cls = 0
        elif name in ("HIRAGANA", "KATAKANA", "KATAKANAORHIRAGANA") or c == "\u30fc":
            cls = han
        else:
            cls = names.index(name) + 1 if name in names else len(names) + 1
        out.append((c, cls))
    return out


class TrainedUnigram(models.Unigram):
    """A :class:`toksmith.models.Unigram` with SentencePiece's piece kinds: ``exclude`` (control
    symbols) and ``byte_ids`` never match text (byte pieces only stand in for the bytes of
    uncovered characters); ``user_defined`` pieces are matched with a score that beats any other
    spelling of them, as in SentencePiece. ``pieces`` keeps the scores (0.0 for reserved pieces,
    as SentencePiece files store them); ``lattice_scores`` are the ones used.

    Scores are rounded to multiples of ``1 / SCORE_GRID`` (1/64). Then every path score is a
    multiple of 1/64 too, which single precision (24 bits) holds exactly up to 2**18 = 262,144:
    SentencePiece's float32 sums (the .model), Hugging Face's double ones (tokenizer.json) and
    toksmith's (double, like Hugging Face's) are then the same numbers, and all three break exact
    ties alike (the segmentation whose last piece starts first), so all three choose the same
    segmentation. SentencePiece 0.2.3 brings its running sum back to 0 whenever it passes
    100,000, so there this holds for texts of any length; without that (versions before 0.2.3
    were not checked), for texts whose best path scores above -262,144 (some 25,000 pieces).
    Not covered: text holding user-defined symbols, which SentencePiece scores at
    float32(-0.1), off the grid. The rounding moves a piece's log probability by at most 1/128
    (``benchmarks/export_parity.py`` measures bytes per token and log-likelihood with and
    without it: no measurable change).
    """

    USER_DEFINED_SCORE = -0.1  # SentencePiece: bytes * max(normal score, FLT_MIN) - 0.1, i.e. about -0.1
    SCORE_GRID: int | None = 64  # scores are multiples of 1/64 (None: as given, to measure the rounding)

    def __init__(self, pieces, *, unk_id: int, byte_fallback: bool, exclude=(), byte_ids=(), user_defined=()) -> None:
        import math

        grid = self.SCORE_GRID
        pieces = [(p, float(s) if grid is None else round(float(s) * grid) / grid) for p, s in pieces]
        byte_ids, user_defined = frozenset(byte_ids), frozenset(user_defined)
        # The inference model finds byte pieces in its table: a score of -inf keeps them out of
        # every path while byte fallback can still use them.
        self.lattice_scores = [-math.inf if i in byte_ids else self.USER_DEFINED_SCORE if i in user_defined else s
                               for i, (_, s) in enumerate(pieces)]
        lattice = [(p, s) for (p, _), s in zip(pieces, self.lattice_scores)]
        super().__init__(lattice, unk_id=unk_id, byte_fallback=byte_fallback, fuse_unk=True, exclude=exclude)
        self.pieces = pieces
        self.exclude = frozenset(exclude) | byte_ids
        self.byte_ids = byte_ids
        self.user_defined = user_defined


def sentencepiece_normalizer(normalization: str | None = "nfkc", add_dummy_prefix: bool = True,
                             user_defined: Iterable[str] = ()):
    """The normalizer of toksmith's SentencePiece-style tokenizers: SentencePiece's own
    (:class:`~toksmith.formats.sentencepiece.SentencePieceNormalizer`) with the character map
    that ``save(format="sentencepiece")`` writes into the .model
    (:func:`~toksmith.formats.sentencepiece_writer.toksmith_charsmap`: SentencePiece's ``nfkc``
    rules, or none, plus every whitespace character to a space); then runs of spaces to one,
    stripped, the ``▁`` dummy prefix on non-empty text, spaces as ``▁``, trailing ``▁`` dropped
    (a ``▁`` written at the end of the text too). ``user_defined`` strings pass unnormalized.

    The rules, not Python's NFKC of the whole text, so that toksmith, the written .model and the
    tokenizer.json (a ``Precompiled`` normalizer) normalize alike: NFKC also reorders combining
    marks (Arabic shadda and a vowel sign), which SentencePiece's rules do not.

    >>> sentencepiece_normalizer().normalize("  ﬁne\tday ▁")
    '▁fine▁day'
    """
    from .formats.sentencepiece import SentencePieceNormalizer
    from .formats.sentencepiece_writer import toksmith_charsmap

    return SentencePieceNormalizer(toksmith_charsmap(normalization), add_dummy_prefix=add_dummy_prefix,
                                   user_defined=user_defined)


def _charsmap_normalize(normalization: str | None):
    """What the normalizer does to one raw word (no whitespace in it) before it is split and
    prefixed: the character map; None when there is nothing but whitespace rules to apply."""
    if normalization is None:
        return None  # the map then only turns whitespace, which splits raw words, into spaces
    from .charsmap import PrecompiledCharsmap
    from .formats.sentencepiece_writer import toksmith_charsmap

    return PrecompiledCharsmap(toksmith_charsmap(normalization)).normalize


def unigram_tokenizer(pieces, *, unk: str = "<unk>", control_symbols=(), user_defined_symbols=(), byte_fallback=False,
                      add_dummy_prefix=True, normalization="nfkc", metadata=None) -> Tokenizer:
    """A Unigram tokenizer with SentencePiece's id layout from learned ``(piece, score)`` pairs:
    unk, control symbols, user-defined symbols, byte pieces, then ``pieces``."""
    controls, users = list(control_symbols), list(user_defined_symbols)
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)] if byte_fallback else []
    reserved = [unk, *controls, *users, *byte_pieces]
    table = [(p, 0.0) for p in reserved] + [(p, float(s)) for p, s in pieces]
    first_byte = 1 + len(controls) + len(users)
    model = TrainedUnigram(table, unk_id=0, byte_fallback=byte_fallback, exclude=range(1, 1 + len(controls)),
                           byte_ids=range(first_byte, first_byte + len(byte_pieces)),
                           user_defined=range(1 + len(controls), first_byte))
    # User-defined symbols are pieces of the lattice that always win (not cut out of the text
    # first), so that the spaces around them are handled as SentencePiece does; the normalizer
    # leaves them as written, as SentencePiece's does.
    meta = dict(metadata or {}, user_defined_symbols=users)
    return _sentencepiece_style(model, unk=unk, control_symbols=controls, byte_fallback=byte_fallback,
                                add_dummy_prefix=add_dummy_prefix, normalization=normalization, metadata=meta)


def _sentencepiece_style(model, *, unk, control_symbols, byte_fallback, add_dummy_prefix, normalization,
                         metadata) -> Tokenizer:
    """The pipeline of toksmith's SentencePiece-style tokenizers around ``model`` (ids: unk 0,
    then the control symbols): normalizer, Metaspace words, decoder; unk and controls special."""
    controls = list(control_symbols)
    added = [AddedToken(unk, 0, special=True)]
    added += [AddedToken(s, 1 + i, special=True) for i, s in enumerate(controls)]
    # SentencePiece's decoding: the leading ▁ go (dummy prefix, or a ▁ written at the start of
    # the text), the others become spaces.
    steps = [decoders.ByteFallback()] if byte_fallback else []
    steps += [decoders.Fuse(), decoders.Strip(META, decoders.Strip.ALL, 0), decoders.Replace(META, " ")]
    # The normalizer adds the dummy prefix (Metaspace would not before a ▁ written in the text);
    # Metaspace splits the words.
    normalizer = sentencepiece_normalizer(normalization, add_dummy_prefix, metadata.get("user_defined_symbols", ()))
    pipeline = Pipeline(model, normalizer=normalizer,
                        pre_tokenizer=pre_tokenizers.Metaspace(META, "never"), decoder=decoders.Sequence(steps),
                        added_tokens=added)
    meta = dict(metadata)
    meta.update(unk=unk, control_symbols=controls, byte_fallback=byte_fallback, add_dummy_prefix=add_dummy_prefix,
                normalization=normalization)
    return Tokenizer.from_pipeline(pipeline, metadata=meta)


# ---------------------------------------------------------------------------------------------
# SentencePiece-style BPE


def train_sentencepiece_bpe(
    source,
    *,
    vocab_size: int,
    byte_fallback: bool = False,
    normalization: str | None = "nfkc",
    add_dummy_prefix: bool = True,
    control_symbols: Iterable[str] = ("<s>", "</s>"),
    unk: str = "<unk>",
    min_frequency: int = 2,
    max_piece_length: int | None = 16,
    limit_alphabet: int | None = None,
    text_field: str = "text",
    max_chars_per_doc: int | None = None,
    num_threads: int | None = None,
    show_progress: bool = False,
) -> Tokenizer:
    """Trains a BPE tokenizer the way SentencePiece's BPE works (``toksmith.train(...,
    level="char", pattern="metaspace")``): the text is normalized as for Unigram
    (:func:`sentencepiece_normalizer`: SentencePiece's NFKC rules or none, whitespace runs to one
    space, stripped), words start with ``▁``, merges join characters
    within words (most frequent pair first, toksmith's tie rule) and never cross them.

    Ids: ``unk`` (0), ``control_symbols`` (special tokens), the 256 byte pieces with
    ``byte_fallback`` (characters outside the alphabet become their UTF-8 bytes instead of
    ``unk``), the alphabet (the ``limit_alphabet`` most frequent characters, or all), then the
    merged pieces in merge order. ``max_piece_length`` counts characters. The unknown, control
    and byte piece names are never learned (they are cut out of the training text).
    ``save(path, format="sentencepiece")`` writes a ``.model`` the ``sentencepiece`` library
    encodes identically (see :mod:`toksmith.formats.sentencepiece_writer`).
    """
    from .trainers import learn

    if normalization not in ("nfkc", None):
        raise TrainingError(f"normalization must be 'nfkc' or None, not {normalization!r}")
    check_threads(num_threads)
    controls = _check_strings("control_symbols", control_symbols)
    if not isinstance(unk, str) or not unk or unk in controls:
        raise TrainingError(f"unk must be a non-empty string other than the control symbols, not {unk!r}")
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)] if byte_fallback else []
    reserved = [unk, *controls, *byte_pieces]
    if len(set(reserved)) != len(reserved):
        raise TrainingError("a control symbol has the name of a byte piece (<0x00>..<0xFF>); rename it")
    _check_int("vocab_size", vocab_size, 1)
    _check_int("min_frequency", min_frequency, 1, U64_MAX)
    if max_piece_length is not None:
        _check_int("max_piece_length", max_piece_length, 2)
    if limit_alphabet is not None:
        _check_int("limit_alphabet", limit_alphabet, 1)

    words = _count_metaspace_words(source, reserved, _charsmap_normalize(normalization), add_dummy_prefix,
                                   text_field=text_field, max_chars_per_doc=max_chars_per_doc,
                                   num_threads=num_threads, show_progress=show_progress)
    with tempfile.TemporaryDirectory(prefix="toksmith-words-") as folder:
        # The BPE trainer reads (chunk, count) tables from files: the words are the chunks.
        path = os.path.join(folder, "words.tsv")
        with open(path, "w", encoding="utf-8") as f:
            for word, n in words.items():
                f.write(word.replace("\\", "\\\\") + f"\t{n}\n")  # words hold no whitespace
        trainer = _core.BpeTrainer(".+", [], num_threads, None, os.path.join(folder, "spill"))
        trainer.add_counts_file(path)
        alphabet = trainer.start("char", min_frequency, max_piece_length, limit_alphabet, "")
    first_piece = len(reserved) + len(alphabet)
    if vocab_size < first_piece:
        raise TrainingError(f"vocab_size={vocab_size} is too small for the {len(alphabet)} characters of the alphabet "
                            f"plus {len(reserved)} reserved ids; raise it or set limit_alphabet")
    merges = learn(trainer, vocab_size - first_piece, show_progress)
    strings = list(alphabet)  # the trainer's ids -> piece strings
    for left, right in merges:
        strings.append(strings[left] + strings[right])
    vocab = {unk: 0}
    for piece in [*byte_pieces, *strings]:
        vocab.setdefault(piece, len(vocab) + len(controls))  # a merge that respells a piece reuses its id
    model = models.BPE(vocab, [(strings[a], strings[b]) for a, b in merges], unk_token=unk, byte_fallback=byte_fallback,
                       fuse_unk=True)  # SentencePiece reports a run of unknown characters as one
    settings = dict(vocab_size=vocab_size, min_frequency=min_frequency, max_piece_length=max_piece_length,
                    limit_alphabet=limit_alphabet, alphabet_size=len(alphabet))
    return _sentencepiece_style(model, unk=unk, control_symbols=controls, byte_fallback=byte_fallback,
                                add_dummy_prefix=add_dummy_prefix, normalization=normalization,
                                metadata={"trainer": "toksmith bpe (sentencepiece)", **settings})


# ---------------------------------------------------------------------------------------------
# Subword regularization

_LATTICES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _lattice(tokenizer: Tokenizer):
    """The :class:`_core.UnigramLattice` of a tokenizer's Unigram model (built once per model)."""
    model = getattr(tokenizer.pipeline, "model", None)
    lattice = _LATTICES.get(model) if model is not None else None
    if lattice is None:
        pieces, unk_id, vocab = _lattice_pieces(model)
        byte_ids = None
        if getattr(model, "byte_fallback", False):
            byte_ids = [vocab.token_to_id(f"<0x{b:02X}>") for b in range(256)]
            if None in byte_ids:
                raise EncodeError("the model has byte_fallback but lacks some byte pieces <0x00>..<0xFF>")
        lattice = _LATTICES[model] = _core.UnigramLattice(pieces, unk_id, byte_ids, True)
    return lattice


def _lattice_pieces(model):
    """(piece, id, score) of every piece the model's lattice uses, its unknown id, and the
    object that maps tokens to ids."""
    import math

    from .formats.hf import HFUnigram

    if isinstance(model, models.Unigram):
        skip = set(getattr(model, "exclude", ()))
        if model.unk_id is not None and not isinstance(model, HFUnigram):
            skip.add(model.unk_id)  # Hugging Face's Unigram matches the unknown token's string too
        scores = getattr(model, "lattice_scores", [s for _, s in model.pieces])
        pieces = [(p, i, s) for i, ((p, _), s) in enumerate(zip(model.pieces, scores)) if i not in skip and s > -math.inf]
        return pieces, model.unk_id, model
    core = getattr(model, "_core", None)
    if isinstance(core, models.Unigram) and hasattr(model, "types"):
        # A SentencePiece .model: normal and user-defined pieces, with the loader's lattice scores.
        usable = (1, 4)  # NORMAL, USER_DEFINED
        pieces = [(p, i, s) for i, ((p, s), t) in enumerate(zip(core.pieces, model.types)) if t in usable]
        return pieces, model.unk_id, model
    raise EncodeError("n-best lists and sampling need a tokenizer with a Unigram model (e.g. from "
                      "toksmith.train(..., algorithm='unigram') or a SentencePiece/HF Unigram file)")


def _items(tokenizer: Tokenizer, text: str, allowed_special, disallowed_special) -> list[tuple[str, int | None]]:
    """The text as the pipeline cuts it: (word, None) for each pre-tokenized word and ("", id)
    for each added token."""
    pipeline = tokenizer.pipeline
    allowed = tokenizer._check_specials(text, allowed_special, disallowed_special)
    items: list[tuple[str, int | None]] = []
    for piece, is_first, token in pipeline._pieces(text, allowed):
        if token is not None:
            items.append(("", token.id))
        elif pipeline.pre_tokenizer is not None:
            items.extend((w, None) for w in pipeline.pre_tokenizer.pre_tokenize(piece, is_first=is_first))
        else:
            items.append((piece, None))
    return items


def _post(tokenizer: Tokenizer, ids: list[int], add_special_tokens: bool) -> list[int]:
    post = tokenizer.pipeline.post_processor
    return post.process(ids) if add_special_tokens and post is not None else ids


def unigram_nbest(tokenizer: Tokenizer, text: str, n: int, *, allowed_special=frozenset(),
                  disallowed_special="all", add_special_tokens: bool = True) -> list[tuple[list[int], float]]:
    """The ``n`` most likely segmentations of ``text`` (best first) with their log probabilities
    (sums of piece scores; the unknown token scores the lowest piece score minus 10). The first
    is what ``tokenizer.encode`` gives. Fewer than ``n`` when the text has fewer segmentations.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise EncodeError(f"n must be a non-negative int, not {n!r}")
    lattice = _lattice(tokenizer)
    items = _items(tokenizer, text, allowed_special, disallowed_special)
    return [(_post(tokenizer, ids, add_special_tokens), score) for ids, score in lattice.nbest(items, n)]


def unigram_sample(tokenizer: Tokenizer, text: str, *, alpha: float = 0.1, nbest_size: int = -1,
                   seed: int | None = None, allowed_special=frozenset(), disallowed_special="all",
                   add_special_tokens: bool = True) -> list[int]:
    """One segmentation of ``text`` drawn for subword regularization (Kudo, 2018), with
    probability proportional to P(segmentation) ** ``alpha``:

    - ``nbest_size=-1``: over all segmentations (forward filtering, backward sampling);
    - ``nbest_size > 1``: among the ``nbest_size`` best ones;
    - ``nbest_size`` 0 or 1: no sampling (the best segmentation).

    ``alpha`` near 0 is close to uniform, larger values stay near the best segmentation. The same
    ``seed`` gives the same result; without one each call draws a fresh seed.
    """
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha < 0:
        raise EncodeError(f"alpha must be a non-negative number, not {alpha!r}")
    if not isinstance(nbest_size, int) or isinstance(nbest_size, bool):
        raise EncodeError(f"nbest_size must be an int (-1: all segmentations), not {nbest_size!r}")
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "little")
    lattice = _lattice(tokenizer)
    items = _items(tokenizer, text, allowed_special, disallowed_special)
    ids = lattice.sample(items, float(alpha), nbest_size, seed & (2**64 - 1))
    return _post(tokenizer, ids, add_special_tokens)


__all__ = ["train_subword", "train_wordpiece", "train_unigram", "train_sentencepiece_bpe", "unigram_nbest",
           "unigram_sample", "unigram_tokenizer", "WORDPIECE_SPECIALS"]
