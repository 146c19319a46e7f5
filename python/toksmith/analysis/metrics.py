"""The numbers behind a tokenizer comparison: word counts by script, Rényi efficiency, Gini.

Everything here is plain Python on counts, so each function can be checked by hand.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import regex

from ._common import AnalysisError

#: Scripts written without spaces between words: words are counted as characters there.
NO_SPACE_SCRIPTS = frozenset(
    {"Han", "Hiragana", "Katakana", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan",
     "Javanese", "Balinese", "Tai_Tham", "New_Tai_Lue", "Tai_Le"}
)

#: Scripts that ``detect_script`` recognizes (Unicode script property names).
KNOWN_SCRIPTS = (
    "Latin", "Cyrillic", "Greek", "Armenian", "Georgian", "Hebrew", "Arabic", "Syriac", "Thaana", "Nko",
    "Adlam", "Tifinagh", "Ethiopic", "Vai", "Bamum", "Cherokee", "Canadian_Aboriginal", "Osage", "Lisu",
    "Devanagari", "Bengali", "Gurmukhi", "Gujarati", "Oriya", "Tamil", "Telugu", "Kannada", "Malayalam",
    "Sinhala", "Ol_Chiki", "Chakma", "Grantha", "Mongolian", "Yi", "Tagalog", "Sundanese", "Tai_Viet",
    "Hangul", "Bopomofo", *sorted(NO_SPACE_SCRIPTS),
)

_SCRIPT_RUNS = regex.compile("|".join(rf"(?P<{s}>\p{{Script={s}}}+)" for s in KNOWN_SCRIPTS))
_JAPANESE_KANA = ("Hiragana", "Katakana")

WORD_RULES = ("whitespace", "characters")


def script_counts(text: str) -> Counter:
    """Letters (and marks) per Unicode script in ``text``; common characters are not counted.

    >>> script_counts("abc дом")["Cyrillic"]
    3
    """
    counts: Counter = Counter()
    for m in _SCRIPT_RUNS.finditer(text):
        counts[m.lastgroup] += m.end() - m.start()
    return counts


def detect_script(text: str) -> str:
    """The dominant script of ``text`` ("Latin", "Han", "Myanmar", ...; "Common" if it has no letters).

    Japanese mixes Han with kana; a text with a notable share of kana is reported as "Japanese".

    >>> detect_script("Всеобщая декларация")
    'Cyrillic'
    >>> detect_script("すべての人間は、生まれながらにして自由であり")
    'Japanese'
    """
    counts = script_counts(text)
    if not counts:
        return "Common"
    total = sum(counts.values())
    kana = sum(counts[k] for k in _JAPANESE_KANA)
    if kana >= 0.1 * total and kana + counts["Han"] >= 0.5 * total:
        return "Japanese"
    return counts.most_common(1)[0][0]


def word_rule_for_script(script: str) -> str:
    """``"characters"`` for scripts written without spaces (Han, Thai, Myanmar, ...), else ``"whitespace"``.

    >>> word_rule_for_script("Myanmar"), word_rule_for_script("Latin")
    ('characters', 'whitespace')
    """
    if script == "Japanese" or script in NO_SPACE_SCRIPTS:
        return "characters"
    return "whitespace"


_WORD_CHAR = regex.compile(r"\X")
# Marks that separate words like a space: Ethiopic wordspace (Amharic writes "የሰው፡ልጅ"), the
# word-separator middle dot, and the Aegean, Ugaritic and Old Persian word dividers.
_WORD_BREAKS = regex.compile("[\\s\u1361\u2e31\U00010100\U0001039f\U000103d0]+")
_HAS_LETTER_OR_DIGIT = regex.compile(r"[\p{L}\p{N}]")


def count_words(text: str, rule: str) -> int:
    """Counts the "words" of ``text`` under ``rule``.

    - ``"whitespace"``: runs of characters between spaces (or word-separator marks such as the
      Ethiopic wordspace ``፡``).
    - ``"characters"``: user-perceived characters (extended grapheme clusters, so a Thai or
      Burmese consonant with its vowel signs counts once) that contain a letter or digit;
      punctuation and spaces are not words.

    >>> count_words("All human beings", "whitespace"), count_words("የሰው፡ልጅ፡ሁሉ", "whitespace")
    (3, 3)
    >>> count_words("人人生而自由，", "characters")
    6
    """
    if rule == "whitespace":
        return sum(1 for word in _WORD_BREAKS.split(text) if word)
    if rule == "characters":
        return sum(1 for m in _WORD_CHAR.finditer(text) if _HAS_LETTER_OR_DIGIT.search(m.group()))
    raise AnalysisError(f"unknown word rule {rule!r}; use one of {WORD_RULES}")


def gini(values: Sequence[float]) -> float:
    """Gini coefficient of non-negative values: 0 when all are equal, towards 1 when one holds all.

    Mean absolute difference over all pairs divided by twice the mean.

    >>> gini([2.0, 2.0, 2.0])
    0.0
    >>> gini([0, 0, 0, 1])
    0.75
    """
    xs = [float(v) for v in values]
    if not xs:
        raise AnalysisError("the Gini coefficient needs at least one value")
    if any(v < 0 or math.isnan(v) for v in xs):
        raise AnalysisError(f"the Gini coefficient needs non-negative numbers, got {xs}")
    total = sum(xs)
    if total == 0:
        return 0.0
    xs.sort()
    n = len(xs)
    # Sorted form of sum_i sum_j |x_i - x_j| / (2 n^2 mean): sum_i (2i - n - 1) x_i / (n * total)
    return sum((2 * i - n - 1) * x for i, x in enumerate(xs, 1)) / (n * total)


def lorenz_curve(values: Sequence[float]) -> list[tuple[float, float]]:
    """Points of the Lorenz curve: (share of languages, share of the total), from (0, 0) to (1, 1).

    >>> lorenz_curve([1, 1])
    [(0.0, 0.0), (0.5, 0.5), (1.0, 1.0)]
    """
    xs = sorted(float(v) for v in values)
    total = sum(xs)
    n = len(xs)
    points = [(0.0, 0.0)]
    running = 0.0
    for i, x in enumerate(xs, 1):
        running += x
        points.append((i / n, running / total if total else i / n))
    return points


def renyi_entropy(counts: Iterable[int], alpha: float = 2.5) -> float:
    """Rényi entropy (natural log) of the distribution given by ``counts``.

    H_a = log(sum p^a) / (1 - a); alpha = 1 is Shannon entropy.

    >>> round(renyi_entropy([1, 1, 1, 1]), 6) == round(math.log(4), 6)
    True
    """
    cs = [c for c in counts if c > 0]
    total = sum(cs)
    if total == 0:
        return 0.0
    ps = [c / total for c in cs]
    if alpha == 1:
        return -sum(p * math.log(p) for p in ps)
    if alpha < 0:
        raise AnalysisError(f"alpha must be >= 0 for Rényi entropy, got {alpha}")
    return math.log(sum(p**alpha for p in ps)) / (1 - alpha)


def renyi_efficiency(counts: Iterable[int], vocab_size: int, alpha: float = 2.5) -> float:
    """Rényi entropy of the unigram token distribution divided by log(vocab_size), in [0, 1].

    1 would mean every id is used equally often; small values mean a few ids dominate.

    >>> renyi_efficiency([5] * 16, 16)
    1.0
    """
    if vocab_size < 2:
        raise AnalysisError(f"vocab_size must be at least 2 for Rényi efficiency, got {vocab_size}")
    return renyi_entropy(counts, alpha) / math.log(vocab_size)


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None (JSON null) when the denominator is 0."""
    return numerator / denominator if denominator else None
