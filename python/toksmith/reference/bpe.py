"""Textbook byte-pair encoding (BPE): slow, plain, and easy to check by hand.

Training starts from words split into single symbols (bytes or characters)
and repeats one step: count every adjacent pair of symbols, weighted by how
often the word occurs, then merge the most frequent pair into a new symbol
everywhere. Merges never cross a word boundary. Encoding replays the learned
merges, earliest-learned first.

Internally every symbol is an integer id, so two merges that happen to spell
the same string (``a+bc`` and ``ab+c``) stay distinct tokens, as in a fast
id-based trainer. This module is teaching code and the oracle for
differential tests; it imports nothing else from toksmith.
"""
from dataclasses import dataclass, field

import regex  # third-party (PyPI "regex"): needed for \p{L}-style patterns


def split_text(text, level, pattern=None):
    """Split raw text into the words (chunks) that BPE trains on.

    With a regex ``pattern`` the chunks are ``regex.findall(pattern, text)``;
    otherwise byte level keeps the whole text as one chunk and char level
    splits on whitespace. Empty chunks are dropped.
    ``"low lower", "char"  -> ["low", "lower"]``
    ``"low lower", "byte"  -> ["low lower"]``
    """
    if pattern is not None:
        chunks = regex.findall(pattern, text)
    elif level == "byte":
        chunks = [text]
    else:
        chunks = text.split()
    return [chunk for chunk in chunks if chunk]


def count_words(words):
    """Count words, keeping the order in which each first appears.
    ``["b", "a", "b"] -> {"b": 2, "a": 1}``
    """
    counts = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    return counts


def count_pairs(words):
    """Count adjacent id pairs over ``(ids, count)`` words, weighted by count.

    Pairs appear in the result in order of first occurrence (words in order,
    positions left to right), which is what the ``"first"`` tie rule uses.
    ``[([1, 2, 3, 1, 2], 1)] -> {(1, 2): 2, (2, 3): 1, (3, 1): 1}``
    ``[([1, 2], 5), ([2, 1, 2], 2)] -> {(1, 2): 7, (2, 1): 2}``
    """
    counts = {}
    for ids, count in words:
        for pair in zip(ids, ids[1:]):
            counts[pair] = counts.get(pair, 0) + count
    return counts


def merge_pair(ids, pair, new_id):
    """Replace each occurrence of ``pair`` in ``ids`` by ``new_id``, scanning
    left to right without overlaps.
    ``[1, 2, 3, 1, 2], (1, 2), 9 -> [9, 3, 9]``
    ``[7, 7, 7], (7, 7), 9 -> [9, 7]``
    """
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def pick_pair(pair_counts, tie_break):
    """Choose the pair to merge: highest count; ties broken by ``tie_break``.

    ``"first"``: the tied pair seen first (``pair_counts`` is in first-seen
    order and ``max`` keeps the first maximum). ``"lowest_id"``: the tied
    pair with the smallest ``(left_id, right_id)``.
    ``{(5, 6): 3, (1, 2): 3}, "first" -> (5, 6)``
    ``{(5, 6): 3, (1, 2): 3}, "lowest_id" -> (1, 2)``
    """
    if tie_break == "first":
        return max(pair_counts, key=pair_counts.get)
    return min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))


def encode_ids_of_word(ids, merge_ids):
    """Encode one word: repeatedly apply the earliest-learned merge present.

    ``merge_ids`` maps a pair to the id it creates; later merges create larger
    ids, so the smallest new id is the earliest merge.
    ``[1, 2, 3], {(2, 3): 4, (1, 4): 5} -> [5]``
    """
    while len(ids) >= 2:
        present = [p for p in zip(ids, ids[1:]) if p in merge_ids]
        if not present:
            break
        best = min(present, key=merge_ids.get)
        ids = merge_pair(ids, best, merge_ids[best])
    return ids


def show_token(token):
    """Printable form of a token: bytes are UTF-8 decoded (broken sequences
    escaped) and whitespace made visible. ``b" lo" -> "␣lo"``,
    ``b"\\xe4" -> "\\\\xe4"``
    """
    if isinstance(token, bytes):
        token = token.decode("utf-8", errors="backslashreplace")
    return token.replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t")


@dataclass
class BPEResult:
    """What training learned. ``merges`` are token pairs in learned order
    (``bytes`` at byte level, ``str`` at char level); ``merge_ids`` are the
    same pairs as ids; ``counts`` the winning pair counts; ``vocab`` maps
    id -> token."""

    level: str
    pattern: object
    end_of_word: object
    vocab: dict
    merge_ids: list = field(default_factory=list)
    counts: list = field(default_factory=list)
    alphabet: dict = field(default_factory=dict)  # char level: symbol -> id
    words: list = field(default_factory=list)  # initial (ids, count) words

    @property
    def merges(self):
        return [(self.vocab[a], self.vocab[b]) for a, b in self.merge_ids]

    def _initial_ids(self, word):
        """Word -> initial symbol ids: UTF-8 bytes, or characters (+ end_of_word)."""
        if self.level == "byte":
            return list(word.encode("utf-8") if isinstance(word, str) else word)
        symbols = list(word) + ([self.end_of_word] if self.end_of_word else [])
        for symbol in symbols:
            if symbol not in self.alphabet:
                raise ValueError(f"symbol {symbol!r} is not in the training alphabet")
        return [self.alphabet[symbol] for symbol in symbols]

    def encode_ids(self, text):
        """Split ``text`` as training did and encode each word to ids."""
        first_base = len(self.vocab) - len(self.merge_ids)
        ranks = {pair: first_base + k for k, pair in enumerate(self.merge_ids)}
        ids = []
        for word in split_text(text, self.level, self.pattern):
            ids.extend(encode_ids_of_word(self._initial_ids(word), ranks))
        return ids

    def encode(self, text):
        """Like ``encode_ids`` but returns the tokens themselves."""
        return [self.vocab[i] for i in self.encode_ids(text)]

    def trace(self):
        """One row per merge: ``step`` (1-based), ``pair``, ``count`` and
        ``corpus``, the corpus rendered after that merge, e.g.
        ``"l o w _ (5) | l o w e r _ (2) | ..."``."""
        words, rows = [ids for ids, _ in self.words], []
        first_base = len(self.vocab) - len(self.merge_ids)
        for k, (pair, count) in enumerate(zip(self.merge_ids, self.counts)):
            words = [merge_pair(ids, pair, first_base + k) for ids in words]
            corpus = " | ".join(
                " ".join(show_token(self.vocab[i]) for i in ids) + f" ({n})"
                for ids, (_, n) in zip(words, self.words))
            rows.append({"step": k + 1, "pair": (self.vocab[pair[0]], self.vocab[pair[1]]),
                         "count": count, "corpus": corpus})
        return rows

    def format_trace(self):
        """The trace as a printable table."""
        lines = [("step", "pair", "count", "corpus")]
        for row in self.trace():
            pair = " ".join(show_token(t) for t in row["pair"])
            lines.append((str(row["step"]), pair, str(row["count"]), row["corpus"]))
        w0, w1, w2 = (max(len(line[i]) for line in lines) for i in range(3))
        return "\n".join(f"{a:>{w0}}  {b:<{w1}}  {c:>{w2}}  {d}" for a, b, c, d in lines)


def train_bpe(corpus, *, num_merges=None, vocab_size=None, level="byte", pattern=None,
              end_of_word=None, tie_break="first", min_frequency=1):
    """Learn BPE merges from ``corpus`` (a ``str``, or a ``dict`` word -> count).

    Give exactly one of ``num_merges`` or ``vocab_size``. Byte level: the 256
    byte tokens count towards ``vocab_size``; byte ``b`` has id ``b`` and the
    k-th merge (0-based) creates id ``256 + k``. Char level: the initial
    alphabet (characters, then ``end_of_word`` if given, in order of first
    appearance scanning words in corpus order with ``end_of_word`` appended)
    gets ids ``0..n-1``, ``vocab_size = n + merges``, and merge k creates
    ``n + k``.

    Each step merges the most frequent adjacent pair. Ties:
    ``"first"`` -- the pair whose first occurrence is earliest in the corpus;
    ``"lowest_id"`` -- the smallest ``(left_id, right_id)`` (the fast Rust
    trainer's rule). Stops early when no pair is left or the best count is
    below ``min_frequency``.
    """
    if level not in ("byte", "char"):
        raise ValueError(f"level must be 'byte' or 'char', not {level!r}")
    if tie_break not in ("first", "lowest_id"):
        raise ValueError(f"tie_break must be 'first' or 'lowest_id', not {tie_break!r}")
    if (num_merges is None) == (vocab_size is None):
        raise ValueError("give exactly one of num_merges or vocab_size")
    if end_of_word is not None and (level != "char" or not end_of_word):
        raise ValueError("end_of_word must be a non-empty str and needs level='char'")

    # 1. The corpus as word -> count, in corpus order.
    if isinstance(corpus, str):
        word_counts = count_words(split_text(corpus, level, pattern))
    elif isinstance(corpus, dict):
        word_counts = {w: c for w, c in corpus.items() if w}
        if any(not isinstance(c, int) or c < 1 for c in word_counts.values()):
            raise ValueError("word counts must be positive integers")
    else:
        raise ValueError("corpus must be a str or a dict of word -> count")

    # 2. The initial alphabet and vocabulary.
    result = BPEResult(level=level, pattern=pattern, end_of_word=end_of_word, vocab={})
    if level == "byte":
        result.vocab = {b: bytes([b]) for b in range(256)}
    else:
        for word in word_counts:
            for symbol in list(word) + ([end_of_word] if end_of_word else []):
                result.alphabet.setdefault(symbol, len(result.alphabet))
        result.vocab = {i: symbol for symbol, i in result.alphabet.items()}
    base = len(result.vocab)
    result.words = [(result._initial_ids(w), c) for w, c in word_counts.items()]

    if num_merges is None:
        num_merges = vocab_size - base
    if num_merges < 0:
        raise ValueError(f"vocab_size must be at least the initial alphabet size {base}")

    # 3. Merge the best pair, num_merges times.
    words = list(result.words)
    for k in range(num_merges):
        pair_counts = count_pairs(words)
        if not pair_counts:
            break
        pair = pick_pair(pair_counts, tie_break)
        if pair_counts[pair] < min_frequency:
            break
        new_id = base + k
        words = [(merge_pair(ids, pair, new_id), c) for ids, c in words]
        result.vocab[new_id] = result.vocab[pair[0]] + result.vocab[pair[1]]
        result.merge_ids.append(pair)
        result.counts.append(pair_counts[pair])
    return result
