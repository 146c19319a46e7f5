"""The hand-written pre-tokenization scanners give exactly the regexes' chunks.

``_core.split`` runs the scanner whenever the pattern string is one of the named regexes
(GPT-2, tiktoken's r50k, cl100k, o200k). It is compared with
  - the ``regex`` module's ``findall`` on the same regex (an independent engine), on text
    without the few thousand chars whose Unicode class the two engines' tables disagree on
    (``regex`` may carry a newer Unicode version than the Rust regex crate);
  - the Rust regex engine itself, on any text: the same regex spelled ``(?:...)`` is not
    recognised as a named pattern, so it runs on fancy-regex.
"""

from __future__ import annotations

import functools
import time

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toksmith import _core
from toksmith.formats.tiktoken import R50K_PATTERN

PATTERNS = {
    "gpt2": _core.pattern_regex("gpt2"),
    "r50k": R50K_PATTERN,
    "cl100k": _core.pattern_regex("cl100k"),
    "o200k": _core.pattern_regex("o200k"),
}

# Pieces that hit the patterns' special cases (the Rust fuzz test uses the same kinds).
PIECES = [
    "'", "''", "'s", "'S", "'t", "'T", "'d", "'M", "'ll", "'LL", "'lL", "'ve", "'VE", "'re", "'Re", "'\u017f",
    "'x", " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000",
    "\u2009", "\u2028", "\u2029", "\u202f", "\u3000", "\u200b", "\x1c", "/", "//", "!", ".", "...", "-", "(",
    "don't", "I'M", "e\u0301", "\u0301", "\u20dd", "\u01c5", "\u02b0", "\u3005", "\u30fc", "\xaa", "\xb5",
    "\xb2", "\xbd", "\u216b", "\u0663", "\u06f7", "\u0969", "\u0e53", "\uff11", "\U0001d7d8", "\U0001f600",
    "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469", "中文", "日本語", "한국어", "ภาษาไทย", "हिन्दी",
    "العربية", "Ελληνικά", "Русский", "Hello", "WORLD", "McDonald", "iPhone", "12345", "a" * 20, " " * 9,
]


def all_chars() -> str:
    return "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)


@functools.lru_cache(maxsize=None)
def disagreeing_chars() -> frozenset[str]:
    """Chars that the `regex` module and the Rust regex crate put in different classes."""
    text = all_chars()
    classes = [r"\p{L}", r"\p{N}", r"\s", r"\p{Lu}", r"\p{Ll}", r"\p{Lt}", r"\p{Lm}", r"\p{Lo}", r"\p{M}",
               r"(?i:[sdmtlver])", r"[\r\n]"]
    out: set[str] = set()
    for cls in classes:
        # A custom pattern runs on fancy-regex; unmatched chars are dropped, so this lists the class.
        out |= set(_core.split(cls, text)) ^ set(regex.findall(cls, text))
    return frozenset(out)


def test_disagreeing_chars_are_few_and_rare():
    # Newer Unicode versions add chars (mostly outside the BMP) and reclassify a handful (U+0295
    # became Lo in Unicode 17); ASCII, Latin-1 and the common scripts must agree, or the
    # comparison with the `regex` module would be hollow.
    bad = disagreeing_chars()
    assert len(bad) < 30_000
    assert not any(c < "\u0250" for c in bad)
    assert sum(c < "\U00010000" for c in bad) < 200


def texts(exclude: frozenset[str] = frozenset()):
    chars = st.characters(exclude_categories=("Cs",)).filter(lambda c: c not in exclude)
    atom = st.one_of(
        chars,
        st.sampled_from(PIECES),
        st.text(alphabet=chars, min_size=1, max_size=8),
        st.tuples(st.sampled_from(PIECES), st.integers(2, 12)).map(lambda p: p[0] * p[1]),
    )
    return st.lists(atom, max_size=30).map("".join)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_examples_match_regex_module(name):
    pattern = PATTERNS[name]
    for text in ["Hello world, it's 2025!", "I'LL go  now\n\n  ok  ", "HELLOWorld's x/\n/y", "\u0301's",
                 "  \n  ", "a \t b'S", "1234567 ٣٣٣٣", "x\r\n\r\n  y", "'\u017f'S", "\u01c5emal ʰAAA!"]:
        assert _core.split(pattern, text) == regex.findall(pattern, text), (name, text)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_random_text_matches_regex_module(name):
    pattern, compiled = PATTERNS[name], regex.compile(PATTERNS[name])

    @settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
    @given(text=texts(disagreeing_chars()))
    def check(text):
        assert _core.split(pattern, text) == compiled.findall(text)

    check()


@pytest.mark.parametrize("name", list(PATTERNS))
def test_random_text_matches_rust_regex(name):
    pattern = PATTERNS[name]
    # The same regex, spelled differently so that it runs on fancy-regex.
    spelled_otherwise = f"(?:{pattern})"

    @settings(max_examples=1500, deadline=None)
    @given(text=texts())
    def check(text):
        assert _core.split(pattern, text) == _core.split(spelled_otherwise, text)

    check()


def test_named_patterns_are_tiktokens():
    """tiktoken's own pattern strings are the ones recognised, so its encodings get the scanners."""
    public = pytest.importorskip("tiktoken_ext.openai_public")
    original = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *a, **k: {}  # no download: only the patterns are wanted
    try:
        got = {n: getattr(public, n)()["pat_str"] for n in ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"]}
    finally:
        public.load_tiktoken_bpe = original
    assert got["r50k_base"] == got["p50k_base"] == PATTERNS["r50k"]
    assert got["cl100k_base"] == PATTERNS["cl100k"]
    assert got["o200k_base"] == PATTERNS["o200k"]


WORST = {
    "a": "a" * (1 << 20),
    "^": "^" * (1 << 20),
    "digits": "0123456789" * (1 << 17),
    "spaces": " " * (1 << 20),
    "latin1": "".join(chr(0xA0 + (i * 7919) % 96) for i in range(1 << 19)),
    "chinese": "".join(chr(0x4E00 + (i * 7919) % 20902) for i in range(1 << 18)),
}


@pytest.mark.parametrize("case", list(WORST))
@pytest.mark.parametrize("name", list(PATTERNS))
def test_worst_cases_split_in_linear_time(name, case):
    text = WORST[case]
    start = time.perf_counter()
    chunks = _core.split(PATTERNS[name], text)
    took = time.perf_counter() - start
    assert "".join(chunks) == text
    # A linear scan of 1 MB takes milliseconds; backtracking regexes take minutes on some of these.
    assert took < 2.0, f"{name} on 1 MB of {case}: {took:.2f} s"
    # And the chunks are the regex's (on a slice, which the `regex` module handles quickly).
    part = text[:20_000]
    assert _core.split(PATTERNS[name], part) == regex.findall(PATTERNS[name], part)
