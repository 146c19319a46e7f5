"""llama.cpp's splitting by several regexes in Rust (``rust/pretokenize/llama.rs``) against
the Python reference (``llama_cpp_pre.split_in_python``), and GGUF vocabularies encoded
through it against the Python path, on real text."""

import random
import zlib

import pytest

from conftest import DATA_DIR, data_path
from toksmith.formats import gguf, llama_cpp_pre
from toksmith.formats.gguf import load_gguf

# Pieces of text that the regexes and matchers tell apart: ASCII classes and contractions,
# non-ASCII letters, numbers, marks, symbols, whitespace (collapsed to \v), CJK and Hangul
# (named by some regexes' ranges), unassigned and astral characters, the category codes
# themselves (U+00D0-U+00D5), characters whose case folding reaches ASCII (Kelvin sign, long s),
# and the literal strings of chameleon's regexes.
PIECES = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + list(" \t\n\r\x0b\x0c") * 4
          + list("'.,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"")
          + ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "  ", "\n\n", "\r\n", "    ", "é", "Ω", "ж",
             "Ж", "中", "文", "가", "한", "ア", "\u0301", "\u00a0", "\u3000", "\u2028", "\u0085", "\u1680", "٣", "½",
             "€", "©", "😀", "\U000E0001", "\u0378", "\U00031350", "\U00050000", "Ð", "Ñ", "Ò", "Ó", "Ô", "Õ", "\u212a", "ſ",
             "！", "，", "。", "…", "“", "µ", "ǅ", "<sentinel:12>", "IMGIMGABZ"])

MULTI_REGEX = ["deepseek-llm", "deepseek-coder", "falcon", "mpt", "starcoder", "refact", "command-r"]


def random_texts(seed, n, longest=60):
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, longest))) for _ in range(n)]


def test_every_pre_tokenizer_has_a_rust_splitter():
    # Where one is missing, that vocabulary falls back to Python, about ten times slower.
    missing = [name for name, regexes in llama_cpp_pre.REGEXES.items() if llama_cpp_pre.rust_splitter(regexes) is None]
    assert not missing


@pytest.mark.parametrize("name", sorted(llama_cpp_pre.REGEXES))
def test_rust_splits_as_python(name):
    regexes = llama_cpp_pre.REGEXES[name]
    for text in random_texts(zlib.crc32(name.encode()), 150) + ["", " ", "a", "\n", "'s", " \u3000 ", "1234567"]:
        assert llama_cpp_pre.split(text, regexes) == llama_cpp_pre.split_in_python(text, regexes), repr(text)


def test_regex_translation():
    assert llama_cpp_pre.rust_regex(r"\s+$") == "[\\t\\n\\x0B\\x0C\\r ]+(?:\\z|(?=\\n\\z))"
    # Literals in a class escaped (Rust reads "[", "--", "&&", "~~" there as set syntax).
    assert llama_cpp_pre.rust_regex("[+--&&~~[]") == "[\\+-\\-\\&\\&\\~\\~\\[]"
    assert llama_cpp_pre.rust_regex(r"[^\S\d]") == "[^[^\\t\\n\\x0B\\x0C\\r ]0-9]"
    # Not translated: case folding (Unicode in Rust, ASCII in Python's re.ASCII), word
    # boundaries, back references, named groups.
    for pattern in ("(?i:'s)", r"\bx", r"(a)\1", "(?P<x>a)"):
        assert llama_cpp_pre.rust_regex(pattern) is None
    # Python's \< and \> are the characters; fancy-regex's are word boundaries.
    assert llama_cpp_pre.split("a<b c>d", ("\\<", "\\>")) == ["a", "<", "b c", ">", "d"]


def test_regexes_matching_nothing_stay_in_python():
    # After an empty match at p, Python's finditer may still match "a" at p; Rust's moves on.
    assert llama_cpp_pre.rust_splitter(("(?=a)|a",)) is None
    assert llama_cpp_pre.split("bab", ("(?=a)|a",)) == ["b", "a", "b"]


def test_a_million_character_run_falls_back_to_python():
    # fancy-regex's backtracking stack holds about a million entries: a regex with lookaround
    # over a longer run fails in Rust, and Python's `re` splits it.
    for name, text in (("gpt4o", " " * 1_100_000 + "x"), ("deepseek3_llm", "=" * 1_100_000)):
        regexes = llama_cpp_pre.REGEXES[name]
        assert llama_cpp_pre.split(text, regexes) == llama_cpp_pre.split_in_python(text, regexes)


def _sample(name, size):
    import lzma

    path = DATA_DIR / "corpora" / name
    if not path.exists():
        pytest.skip(f"{path} absent (see ../shared/data/README.md)")
    with lzma.open(path, "rt", encoding="utf-8") as fh:
        return fh.read(size)


@pytest.mark.parametrize("name", MULTI_REGEX)
def test_rust_encoding_is_the_python_paths(name, monkeypatch):
    if not (DATA_DIR / "tokenizers" / "gguf" / f"ggml-vocab-{name}.gguf.xz").exists():
        pytest.skip("GGUF vocabularies absent (see ../shared/data/README.md)")
    tok = load_gguf(data_path("tokenizers", "gguf", f"ggml-vocab-{name}.gguf.xz"))
    texts = [_sample("en/gcide.dict.txt.xz", 20_000), _sample("debian-handbook/ru-RU.txt.xz", 20_000),
             _sample("debian-handbook/zh-CN.txt.xz", 20_000), *random_texts(7, 40, 200)]
    fast = [tok.encode(t, add_special_tokens=False, disallowed_special=()) for t in texts]
    monkeypatch.setattr(gguf.llama_cpp_pre, "rust_splitter", lambda regexes: None)
    slow = [tok.encode(t, add_special_tokens=False, disallowed_special=()) for t in texts]
    for text, a, b in zip(texts, fast, slow):
        assert a == b, repr(text[:200])


def test_lone_surrogates_take_the_python_path():
    regexes = llama_cpp_pre.REGEXES["falcon"]
    text = "ab\ud800cd 12"
    assert llama_cpp_pre.split(text, regexes) == llama_cpp_pre.split_in_python(text, regexes)
