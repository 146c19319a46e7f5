"""Pre-tokenizers of the general pipeline: split a normalized piece of text into words.

Each class is one Hugging Face pre-tokenizer, reproducing its splits exactly, including the
Unicode tables its Rust code uses. The pipeline calls ``pre_tokenize(text, is_first=...)``;
``is_first`` says whether the text starts at offset 0 of the original input (Metaspace's
``prepend_scheme="first"`` depends on it).

Internally a pre-tokenizer maps a list of ``(word, at_origin)`` pairs to a new one
(:meth:`PreTokenizer.split`); ``at_origin`` counts the characters at the start of the word that
come from the first character of the original text (True: one), so that a :class:`Sequence`
passes it on as Hugging Face does: `tokenizers` asks whether a word's first character comes
from offset 0, and a character the normalizer expanded ("¨" -> " ̈") gives several.

This module also translates Hugging Face's Oniguruma regexes for the ``regex`` module
(:func:`compile_onig`), used by the normalizers and decoders too.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence as Seq

import regex

from .byte_level import BYTE_TO_CHAR
from .errors import FormatError


def _class_body(spec: str) -> str:
    """``"41-5A 61"`` (hex code points and ranges) -> the body of a regex character class."""
    out = []
    for item in spec.split():
        lo, _, hi = item.partition("-")
        out.append(f"\\U{int(lo, 16):08x}" + (f"-\\U{int(hi, 16):08x}" if hi else ""))
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Unicode versions. The Rust std library in `tokenizers` (char::is_whitespace, is_numeric,
# is_alphanumeric, to_lowercase) follows Unicode 17.0, as does the `regex` module; Oniguruma,
# which runs the regexes of tokenizer files, follows Unicode 16.0. These code points are
# assigned in 17.0 but not in 16.0: Oniguruma sees them as unassigned (Cn).
_ONIG_UNASSIGNED_SPEC = """
558 58B-58C 5C8-5C9 88F B53-B54 C5C CDC 1ACF-1AF0 208F 209D-209F 20C1-20C4 2B96 2E60-2E63 A7CE-A7CF A7D2 A7D4
A7DD A7E2 A7F1 AB6C-AB6D FBC3-FBD2 FD90-FD91 FDC8-FDCE 107BB-107BF 10940-10959 10EC5-10EC7 10EC9-10EEE
10EF0-10EFB 11B0A 11B60-11B67 11DB0-11DDB 11DE0-11DE9 11DF0-11DF1 1246F 12475-1247F 12550-12686 16EA0-16EB8
16EBB-16ED3 16FF2-16FF6 187F8-187FF 18CD6-18CDA 18D09-18D20 18D80-18DF2 18E00-19191 191A0-191D2 1B123-1B128
1B168 1CCFA-1CCFC 1CEBA-1CED0 1CED2-1CED4 1CEDD-1CEFD 1D127-1D128 1D1EB-1D1FF 1D250-1D281 1D6A6 1DB00-1DB1C
1DF1F-1DF24 1DF2B-1DF81 1DF90-1DF96 1DFCD-1DFFF 1E6C0-1E6DE 1E6E0-1E6F5 1E6FE-1E6FF 1F1AE 1F6D8-1F6D9
1F777-1F77A 1F7DA-1F7DB 1F7F1-1F7FF 1F8D0-1F8D8 1FA54-1FA57 1FA8A-1FA8E 1FAC8 1FACC-1FACD 1FADD 1FAEA-1FAEB
1FAEF 1FAF9-1FAFA 1FBFA 2B73A-2B73F 2B81E 2CEA2-2CEAD 323B0-33479 3D000-3FC3F
"""
_ONIG_UNASSIGNED = _class_body(_ONIG_UNASSIGNED_SPEC)

# Punctuation as `tokenizers` sees it (BertPreTokenizer, Punctuation): ASCII punctuation plus
# general category P* of the Unicode 10.0 tables of its `unicode_categories` dependency.
_HF_PUNCTUATION_SPEC = """
21-2F 3A-40 5B-60 7B-7E A1 A7 AB B6-B7 BB BF 37E 387 55A-55F 589-58A 5BE 5C0 5C3 5C6 5F3-5F4 609-60A 60C-60D
61B 61E-61F 66A-66D 6D4 700-70D 7F7-7F9 830-83E 85E 964-965 970 AF0 DF4 E4F E5A-E5B F04-F12 F14 F3A-F3D F85
FD0-FD4 FD9-FDA 104A-104F 10FB 1360-1368 1400 166D-166E 169B-169C 16EB-16ED 1735-1736 17D4-17D6 17D8-17DA
1800-180A 1944-1945 1A1E-1A1F 1AA0-1AA6 1AA8-1AAD 1B5A-1B60 1BFC-1BFF 1C3B-1C3F 1C7E-1C7F 1CC0-1CC7 1CD3
2010-2027 2030-2043 2045-2051 2053-205E 207D-207E 208D-208E 2308-230B 2329-232A 2768-2775 27C5-27C6 27E6-27EF
2983-2998 29D8-29DB 29FC-29FD 2CF9-2CFC 2CFE-2CFF 2D70 2E00-2E2E 2E30-2E42 3001-3003 3008-3011 3014-301F 3030
303D 30A0 30FB A4FE-A4FF A60D-A60F A673 A67E A6F2-A6F7 A874-A877 A8CE-A8CF A8F8-A8FA A8FC A92E-A92F A95F
A9C1-A9CD A9DE-A9DF AA5C-AA5F AADE-AADF AAF0-AAF1 ABEB FD3E-FD3F FE10-FE19 FE30-FE52 FE54-FE61 FE63 FE68
FE6A-FE6B FF01-FF03 FF05-FF0A FF0C-FF0F FF1A-FF1B FF1F-FF20 FF3B-FF3D FF3F FF5B FF5D FF5F-FF65 10100-10102
1039F 103D0 1056F 10857 1091F 1093F 10A50-10A58 10A7F 10AF0-10AF6 10B39-10B3F 10B99-10B9C 11047-1104D
110BB-110BC 110BE-110C1 11140-11143 11174-11175 111C5-111C9 111CD 111DB 111DD-111DF 11238-1123D 112A9 114C6
115C1-115D7 11641-11643 1173C-1173E 12470-12474 16A6E-16A6F 16AF5 16B37-16B3B 16B44 1BC9F 1DA87-1DA8B
"""
_HF_PUNCTUATION = _class_body(_HF_PUNCTUATION_SPEC)

#: Rust's char::is_whitespace (the White_Space property).
WHITESPACE = re.compile(r"[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_LEADING_WHITESPACE = re.compile(WHITESPACE.pattern + "*")
#: WHITESPACE's code points in the form of `_class_body` (a test checks that they agree).
_WHITESPACE_SPEC = "9-D 20 85 A0 1680 2000-200A 2028-2029 202F 205F 3000"
#: Rust's char::is_numeric (general category N; its tables lack the cuneiform numbers of 17.0).
NUMERIC = regex.compile(r"[\p{N}--[\U0001246f\U00012475-\U0001247f\U00012550-\U00012686]]", regex.V1)
#: \w of Rust's `regex` crate (Unicode 16.0), which Hugging Face uses around added tokens.
RUST_REGEX_WORD = regex.compile(rf"[\w--[{_ONIG_UNASSIGNED}]]", regex.V1)
PUNCTUATION = regex.compile(f"[{_HF_PUNCTUATION}]")


# ---------------------------------------------------------------------------------------------
# Oniguruma regexes

#: Oniguruma's \w: Alphabetic, marks, decimal digits, connector punctuation (`regex` adds the
#: join controls). Outside brackets Oniguruma's \w also takes the Latin-1 digits and fractions.
_ONIG_WORD = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}"
_ONIG_WORD_OUTSIDE = _ONIG_WORD + r"\xb2\xb3\xb9\xbc-\xbe"
_ESCAPE_CLASSES = {"w": _ONIG_WORD, "d": r"\p{Nd}"}
_POSIX_CLASSES = {"alpha": r"\p{Alphabetic}", "digit": r"\p{Nd}", "alnum": r"\p{Alphabetic}\p{Nd}",
                  "punct": r"\p{P}\p{S}", "word": _ONIG_WORD, "upper": r"\p{Uppercase}", "space": r"\s",
                  "xdigit": "0-9a-fA-F", "blank": r"\p{Zs}\t", "cntrl": r"\p{Cc}"}
# Properties true of unassigned code points: they gain, rather than lose, the 17.0 additions.
_UNASSIGNED_PROPS = {"cn", "unassigned", "c", "other"}


_INTERVAL_PLUS = re.compile(r"\{\d*,?\d*\}\+")


def rewrite_interval_plus(pattern: str, rewrite: Callable[[str, str], str]) -> str:
    """Replaces every ``X{n,m}+`` of ``pattern`` by ``rewrite(X, "{n,m}")``.

    Engines disagree on ``{n,m}+``: possessive for Rust's and Python's, ``(?:X{n,m})+`` for
    Oniguruma's Ruby syntax. ``X`` is the atom before the interval (a character, an escape, a
    class or a group).
    """
    out: list[str] = []
    atom: int | None = None  # index in `out` where the last atom starts
    groups: list[int] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            m = re.match(r"\\(?:[pPx]\{[^}]*\}|x[0-9a-fA-F]{2}|.)", pattern[i:], re.S)
            piece = m.group() if m else c
            atom = len(out)
        elif c == "[":
            j, depth = i + 1, 1
            if pattern.startswith("^", j):
                j += 1
            if pattern.startswith("]", j):
                j += 1
            while j < n and depth:
                if pattern[j] == "\\":
                    j += 1
                elif pattern[j] == "[":
                    depth += 1
                elif pattern[j] == "]":
                    depth -= 1
                j += 1
            piece = pattern[i:j]
            atom = len(out)
        elif c == "(":
            groups.append(len(out))
            piece, atom = c, None
        elif c == ")":
            piece = c
            atom = groups.pop() if groups else None
        elif c == "{" and atom is not None and _INTERVAL_PLUS.match(pattern, i):
            m = _INTERVAL_PLUS.match(pattern, i)
            target = "".join(out[atom:])
            del out[atom:]
            out.append(rewrite(target, m.group()[:-1]))
            atom = None
            i = m.end()
            continue
        elif c == "|":
            piece, atom = c, None
        elif c in "*+?{":
            piece = c
        else:
            piece = c
            atom = len(out)
        out.append(piece)
        i += len(piece)
    return "".join(out)


def _translate_onig(pattern: str, unassigned: str = _ONIG_UNASSIGNED) -> str:
    """Rewrites an Oniguruma (Ruby syntax) regex for the ``regex`` module in VERSION1 mode.

    - character properties and ``\\w \\d`` follow Oniguruma's Unicode version: the code points
      in ``unassigned`` (a class body; empty for the quick version) are left out of them;
    - ``\\h``/``\\H`` (hex digit) and ``\\z``/``\\Z`` get their Python spelling;
    - inline ``m`` (Ruby: dot matches newline) becomes ``s``; ``^``/``$`` match at line
      boundaries, as in Ruby, through the MULTILINE flag set by :func:`compile_onig`.
    """

    def minus(cls: str) -> str:
        return f"[{cls}--[{unassigned}]]" if unassigned else f"[{cls}]"

    def plus(cls: str) -> str:
        return f"[{cls}{unassigned}]"

    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0  # inside how many character classes
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e in "pP" and i + 2 < n and pattern[i + 2] == "{":
                end = pattern.find("}", i + 3)
                if end < 0:
                    raise FormatError(f"unterminated \\{e}{{ in regex {pattern!r}")
                name = pattern[i + 3:end]
                negated = (e == "P") != name.startswith("^")
                name = name.lstrip("^")
                prop, neg = f"\\p{{{name}}}", f"\\P{{{name}}}"
                if name.replace("_", "").replace(" ", "").lower() in _UNASSIGNED_PROPS:
                    # true of unassigned code points: Oniguruma's set is larger
                    positive, negative = plus(prop), minus(neg)
                else:
                    positive, negative = minus(prop), plus(neg)
                out.append(negative if negated else positive)
                i = end + 1
                continue
            if e in "wWdD":
                cls = _ONIG_WORD_OUTSIDE if e in "wW" and depth == 0 else _ESCAPE_CLASSES[e.lower()]
                out.append(minus(f"{'^' if e in 'WD' else ''}[{cls}]"))
            elif e == "h":
                out.append("[0-9a-fA-F]")
            elif e == "H":
                out.append("[^0-9a-fA-F]")
            elif e == "z" and depth == 0:
                out.append(r"\Z")
            elif e == "Z" and depth == 0:
                out.append(r"(?=\n?\Z)")
            elif e == "x" and i + 2 < n and pattern[i + 2] == "{":
                end = pattern.find("}", i + 3)
                if end < 0:
                    raise FormatError(f"unterminated \\x{{ in regex {pattern!r}")
                out.append(f"\\U{int(pattern[i + 3:end], 16):08x}")
                i = end + 1
                continue
            elif e in "GKRXyY" and depth == 0:
                raise FormatError(f"the Oniguruma escape \\{e} in regex {pattern!r} is not supported by toksmith")
            else:
                out.append(c + e)
            i += 2
            continue
        if c == "[":
            if depth and pattern.startswith("[:", i):  # POSIX bracket [:alpha:]
                end = pattern.find(":]", i + 2)
                name = pattern[i + 2:end] if end > 0 else ""
                if name in _POSIX_CLASSES:
                    out.append(minus(f"[{_POSIX_CLASSES[name]}]"))
                    i = end + 2
                    continue
                if end > 0:
                    raise FormatError(f"the POSIX class [:{name}:] in regex {pattern!r} is not supported by toksmith")
            depth += 1
            out.append(c)
            # a ']' right after '[' or '[^' is a literal in Oniguruma
            j = i + 1
            if j < n and pattern[j] == "^":
                out.append("^")
                j += 1
            if j < n and pattern[j] == "]":
                out.append(r"\]")
                j += 1
            i = j
            continue
        if c == "]" and depth:
            depth -= 1
        elif depth and c == "-" and pattern.startswith("--", i):
            out.append(r"\-")  # '--' is a set operator for `regex`, not for Oniguruma
            i += 1
            continue
        elif depth and c in "|~" and i + 1 < n and pattern[i + 1] == c:
            out.append("\\" + c)
            i += 1
            continue
        elif depth == 0 and c == "(" and pattern.startswith("(?", i):
            m = re.match(r"\(\?([imx]*)(?:-([imx]*))?([:)])", pattern[i:])
            if m:
                on, off = (m.group(1) or "").replace("m", "s"), (m.group(2) or "").replace("m", "s")
                out.append(f"(?{on}{'-' + off if off else ''}{m.group(3)}")
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def rust_regex_to_onig(pattern: str) -> str:
    """A pre-tokenization regex of toksmith (Rust `regex`/fancy-regex syntax) rewritten for
    Oniguruma's Ruby syntax with the same meaning: ``^``/``$`` become ``\\A``/``\\z`` (Ruby would
    read line ends), ``X{n,m}+`` becomes the atomic ``(?>X{n,m})``, ``\\w`` keeps Rust's definition."""
    word = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}"
    # Rust's X{n,m}+ is possessive; Ruby would read (?:X{n,m})+
    pattern = rewrite_interval_plus(pattern, lambda atom, interval: f"(?>{atom}{interval})")
    out, i, depth = [], 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            if e in "wW":
                out.append(f"[{word}]" if depth == 0 and e == "w" else f"[^{word}]" if depth == 0 else
                           word if e == "w" else f"[^{word}]")
            else:
                out.append(c + e)
            i += 2
            continue
        if c == "[":
            depth += 1
        elif c == "]" and depth:
            depth -= 1
        elif depth == 0 and c == "$":
            c = r"\z"
        elif depth == 0 and c == "^":
            c = r"\A"
        out.append(c)
        i += 1
    return "".join(out)


class OnigRegex:
    """A regex of a Hugging Face tokenizer file (Oniguruma syntax), run by ``regex``.

    Exact on every text; texts without any of the code points Unicode 17.0 added (nearly all)
    run a quicker version of the pattern that does not exclude them.
    """

    def __init__(self, pattern: str, *, where: str = "") -> None:
        self.pattern = pattern
        # Ruby reads X{n,m}+ as (?:X{n,m})+, Python as a possessive X{n,m}
        ruby = rewrite_interval_plus(pattern, lambda atom, interval: f"(?:{atom}{interval})+")
        try:
            self.exact = regex.compile(_translate_onig(ruby), regex.V1 | regex.MULTILINE)
            self.quick = regex.compile(_translate_onig(ruby, ""), regex.V1 | regex.MULTILINE)
        except regex.error as e:
            raise FormatError(f"{where}the regex {pattern!r} cannot be compiled ({e}); toksmith supports the common "
                              f"Oniguruma syntax (properties, classes, lookaround, possessive quantifiers)") from None

    def for_text(self, text: str) -> regex.Pattern:
        # An ASCII text is told in constant time, another by a set (15x faster than a search
        # with the regex of those code points).
        return self.exact if not text.isascii() and not _new_code_points().isdisjoint(text) else self.quick


@functools.lru_cache(maxsize=1)
def _new_code_points() -> frozenset[str]:
    """The characters of `_ONIG_UNASSIGNED` (17,810; made on first use, about 1.5 MB)."""
    return frozenset(chr(c) for lo, hi in _spec_ranges(_ONIG_UNASSIGNED_SPEC) for c in range(lo, hi + 1))


def compile_onig(pattern: str, *, where: str = "") -> OnigRegex:
    """Compiles a regex of a Hugging Face tokenizer file (Oniguruma syntax)."""
    return OnigRegex(pattern, where=where)


def find_spans(rx, text: str) -> Iterator[tuple[int, int]]:
    """The matches of ``rx`` (an :class:`OnigRegex` or a compiled regex) in ``text`` as
    Oniguruma's iterator gives them: an empty match right where the previous match ended is skipped."""
    if isinstance(rx, OnigRegex):
        rx = rx.for_text(text)
    spans = []
    for m in rx.finditer(text):
        s, e = m.span()
        if s == e:  # empty matches: the engines differ, so walk as Oniguruma does
            return _find_spans_slow(rx, text)
        spans.append((s, e))
    return iter(spans)


def _find_spans_slow(rx: regex.Pattern, text: str) -> Iterator[tuple[int, int]]:
    pos, last_end, n = 0, -1, len(text)
    while pos <= n:
        m = rx.search(text, pos)
        if m is None:
            return
        s, e = m.span()
        if s == e and e == last_end:
            pos += 1
            continue
        pos = last_end = e
        yield s, e


# ---------------------------------------------------------------------------------------------
# Patterns and split behaviours (Hugging Face's Pattern and SplitDelimiterBehavior)

Matches = list[tuple[int, int, bool]]  # (start, end, is a match) covering the text


def regex_matches(rx: regex.Pattern, text: str) -> Matches:
    """The text cut into alternating non-match/match segments (empty matches included)."""
    if not text:
        return [(0, 0, False)]
    out: Matches = []
    prev = 0
    for s, e in find_spans(rx, text):
        if prev != s:
            out.append((prev, s, False))
        out.append((s, e, True))
        prev = e
    if prev != len(text):
        out.append((prev, len(text), False))
    return out


def char_matches(delimiters, text: str) -> Matches:
    """Every character matched by ``delimiters`` (a compiled one-character class) is a match of its own."""
    if not text:
        return [(0, 0, False)]
    out: Matches = []
    last = 0
    for m in delimiters.finditer(text):
        i = m.start()
        if last < i:
            out.append((last, i, False))
        out.append((i, i + 1, True))
        last = i + 1
    if last < len(text):
        out.append((last, len(text), False))
    return out


BEHAVIORS = ("removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous")


def apply_behavior(matches: Matches, behavior: str) -> list[tuple[int, int]]:
    """The spans kept by a split, as Hugging Face's ``NormalizedString::split`` computes them."""
    if behavior == "removed":
        return [(s, e) for s, e, m in matches if not m]
    if behavior == "isolated":
        return [(s, e) for s, e, _ in matches]
    out: list[list[int]] = []
    previous = False
    if behavior == "contiguous":
        for s, e, m in matches:
            if m == previous and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            previous = m
    elif behavior == "merged_with_previous":
        for s, e, m in matches:
            if m and not previous and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            previous = m
    elif behavior == "merged_with_next":
        for s, e, m in reversed(matches):
            if m and not previous and out:
                out[-1][0] = s
            else:
                out.append([s, e])
            previous = m
        out.reverse()
    else:
        raise FormatError(f"unknown split behavior {behavior!r}; expected one of {', '.join(BEHAVIORS)}")
    return [(s, e) for s, e in out]


Pieces = list[tuple[str, int]]  # (word, how many of its first characters come from offset 0 of the original text)


def _split_each(pieces: Pieces, spans_of: Callable[[str], list[tuple[int, int]]]) -> Pieces:
    out: Pieces = []
    for text, at_origin in pieces:
        for s, e in spans_of(text):
            if e > s:
                out.append((text[s:e], max(0, at_origin - s)))
    return out


# ---------------------------------------------------------------------------------------------
# The pre-tokenizers


#: Words with, for each of their characters, the index of the character of the pre-tokenized
#: text it comes from; and, as in `Pieces`, how many of its first characters come from offset 0.
AlignedPieces = list[tuple[str, list[int], int]]


def _cut_aligned(pieces: AlignedPieces, spans_of: Callable[[str], list[tuple[int, int]]]) -> AlignedPieces:
    """`_split_each` keeping each character's origin."""
    return [(text[s:e], origins[s:e], max(0, at_origin - s))
            for text, origins, at_origin in pieces for s, e in spans_of(text) if e > s]


class PreTokenizer:
    """Base class: ``pre_tokenize`` for the pipeline, ``split`` for sequences, and
    ``split_aligned`` (where a pre-tokenizer has it) for offsets."""

    def split(self, pieces: Pieces) -> Pieces:
        raise NotImplementedError

    def split_aligned(self, pieces: AlignedPieces) -> AlignedPieces:
        """``split`` that also says where each character of each word comes from."""
        raise NotImplementedError(f"{type(self).__name__} does not trace its words back to the text")

    def pre_tokenize(self, text: str, *, is_first: bool | int = True) -> list[str]:
        return [w for w, _ in self.split([(text, is_first)])]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_hf()})"


_BYTE_LEVEL_TABLE = {i: BYTE_TO_CHAR[i] for i in range(256)}


def to_byte_level(text: str) -> str:
    """Each UTF-8 byte of ``text`` as its printable byte-level character (``" "`` -> ``"Ġ"``)."""
    return text.encode("utf-8", "surrogatepass").decode("latin-1").translate(_BYTE_LEVEL_TABLE)


#: The GPT-2 pre-tokenization regex, as Hugging Face's ByteLevel writes it.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


class ByteLevel(PreTokenizer):
    """GPT-2's pre-tokenizer: optionally a space in front, the GPT-2 regex, then every byte
    mapped to a printable character."""

    _regex = None

    def __init__(self, *, add_prefix_space: bool = True, use_regex: bool = True, trim_offsets: bool = True) -> None:
        self.add_prefix_space = add_prefix_space
        self.use_regex = use_regex
        self.trim_offsets = trim_offsets  # offsets only; kept for export
        if use_regex and ByteLevel._regex is None:
            ByteLevel._regex = compile_onig(GPT2_REGEX)

    def split(self, pieces: Pieces) -> Pieces:
        if self.add_prefix_space:
            pieces = [(t if t.startswith(" ") else " " + t, o) for t, o in pieces]
        if self.use_regex:
            pieces = _split_each(pieces, lambda t: [(s, e) for s, e, _ in regex_matches(self._regex, t)])
        return [(to_byte_level(t), o) for t, o in pieces]

    def to_hf(self) -> dict:
        return {"type": "ByteLevel", "add_prefix_space": self.add_prefix_space, "trim_offsets": self.trim_offsets,
                "use_regex": self.use_regex}


class Split(PreTokenizer):
    """Splits on a literal string or a regex, with a split behavior and ``invert``.

    A regex is in Oniguruma syntax, as in Hugging Face files; ``syntax="rust"`` takes toksmith's
    own patterns (Rust `regex` syntax: ``$`` ends the text, ``X{1,3}+`` is possessive), which are
    converted to Oniguruma syntax.
    """

    def __init__(self, pattern: str, behavior: str, *, invert: bool = False, is_regex: bool = False,
                 syntax: str = "oniguruma") -> None:
        if behavior not in BEHAVIORS:
            raise FormatError(f"unknown split behavior {behavior!r}; expected one of {', '.join(BEHAVIORS)}")
        if syntax not in ("oniguruma", "rust"):
            raise FormatError(f"unknown regex syntax {syntax!r}; expected 'oniguruma' or 'rust'")
        if is_regex and syntax == "rust":
            pattern = rust_regex_to_onig(pattern)
        self.pattern, self.behavior, self.invert, self.is_regex = pattern, behavior, invert, is_regex
        self._regex = compile_onig(pattern) if is_regex else regex.compile(regex.escape(pattern)) if pattern else None

    def matches(self, text: str) -> Matches:
        if self._regex is None:  # an empty string pattern matches nothing
            return [(0, len(text), False)]
        found = regex_matches(self._regex, text)
        return [(s, e, not m) for s, e, m in found] if self.invert else found

    def split(self, pieces: Pieces) -> Pieces:
        if self._regex is not None and not self.is_regex and not self.invert and \
                not any(self.pattern in text for text, _ in pieces):
            # No match (often: Gemma 3 splits on " " after " " became "▁"): every behavior
            # keeps each piece whole, as the general path does.
            return [(text, at_origin) for text, at_origin in pieces if text]
        return _split_each(pieces, lambda t: apply_behavior(self.matches(t), self.behavior))

    def split_aligned(self, pieces: AlignedPieces) -> AlignedPieces:
        return _cut_aligned(pieces, lambda t: apply_behavior(self.matches(t), self.behavior))

    def to_hf(self) -> dict:
        return {"type": "Split", "pattern": {"Regex" if self.is_regex else "String": self.pattern},
                "behavior": _behavior_name(self.behavior), "invert": self.invert}


def _behavior_name(behavior: str) -> str:
    return "".join(w.capitalize() for w in behavior.split("_"))


class Metaspace(PreTokenizer):
    """SentencePiece-style: spaces become ``replacement`` (``▁``), one is prepended (always, to
    the first word only, or never), and the text is split before each ``replacement``."""

    def __init__(self, replacement: str = "\u2581", prepend_scheme: str = "always", split: bool = True) -> None:
        if len(replacement) != 1:
            raise FormatError(f"the Metaspace replacement must be one character, not {replacement!r}")
        if prepend_scheme not in ("always", "first", "never"):
            raise FormatError(f"unknown Metaspace prepend_scheme {prepend_scheme!r}; expected always, first or never")
        self.replacement, self.prepend_scheme, self.split_words = replacement, prepend_scheme, split
        self._delimiter = re.compile(re.escape(replacement))

    def split(self, pieces: Pieces) -> Pieces:
        out: Pieces = []
        r = self.replacement
        for text, at_origin in pieces:
            text = text.replace(" ", r)
            if not text.startswith(r) and (self.prepend_scheme == "always" or self.prepend_scheme == "first" and at_origin):
                # The prepended character comes from the word's first one.
                text, at_origin = r + text, at_origin + (at_origin > 0)
            if self.split_words:
                spans = apply_behavior(char_matches(self._delimiter, text), "merged_with_next")
                out.extend((text[s:e], max(0, at_origin - s)) for s, e in spans if e > s)
            elif text:
                out.append((text, at_origin))
        return out

    def split_aligned(self, pieces: AlignedPieces) -> AlignedPieces:
        # Spaces become the replacement one for one; a prepended one comes from the word's first
        # character (as `tokenizers` aligns a prepend).
        out: AlignedPieces = []
        r = self.replacement
        for text, origins, at_origin in pieces:
            text = text.replace(" ", r)
            if text and not text.startswith(r) and (self.prepend_scheme == "always" or self.prepend_scheme == "first" and at_origin):
                text, origins, at_origin = r + text, [origins[0], *origins], at_origin + (at_origin > 0)
            if self.split_words:
                spans = apply_behavior(char_matches(self._delimiter, text), "merged_with_next")
                out.extend((text[s:e], origins[s:e], max(0, at_origin - s)) for s, e in spans if e > s)
            elif text:
                out.append((text, origins, at_origin))
        return out

    def to_hf(self) -> dict:
        return {"type": "Metaspace", "replacement": self.replacement, "prepend_scheme": self.prepend_scheme,
                "split": self.split_words}


class CharClassSplit(PreTokenizer):
    """Shared by the pre-tokenizers that split on a class of characters."""

    behavior = "removed"
    delimiters: re.Pattern | regex.Pattern  # matches one delimiter character

    def split(self, pieces: Pieces) -> Pieces:
        return _split_each(pieces, lambda t: apply_behavior(char_matches(self.delimiters, t), self.behavior))

    def split_aligned(self, pieces: AlignedPieces) -> AlignedPieces:
        return _cut_aligned(pieces, lambda t: apply_behavior(char_matches(self.delimiters, t), self.behavior))


class WhitespaceSplit(CharClassSplit):
    """Splits on whitespace (Unicode White_Space), dropping it."""

    delimiters = WHITESPACE

    def split(self, pieces: Pieces) -> Pieces:
        out: Pieces = []
        for text, at_origin in pieces:
            pos = 0
            for m in _WHITESPACE_RUNS.finditer(text):
                if m.start() > pos:
                    out.append((text[pos:m.start()], max(0, at_origin - pos)))
                pos = m.end()
            if pos < len(text):
                out.append((text[pos:], max(0, at_origin - pos)))
        return out

    def split_aligned(self, pieces: AlignedPieces) -> AlignedPieces:
        def spans(t: str) -> list[tuple[int, int]]:
            cuts = [0, *(i for m in _WHITESPACE_RUNS.finditer(t) for i in m.span()), len(t)]
            return list(zip(cuts[::2], cuts[1::2]))

        return _cut_aligned(pieces, spans)

    def to_hf(self) -> dict:
        return {"type": "WhitespaceSplit"}


_WHITESPACE_RUNS = re.compile(WHITESPACE.pattern + "+")


class CharDelimiterSplit(CharClassSplit):
    """Splits on one delimiter character, dropping it."""

    def __init__(self, delimiter: str) -> None:
        if len(delimiter) != 1:
            raise FormatError(f"the CharDelimiterSplit delimiter must be one character, not {delimiter!r}")
        self.delimiter = delimiter
        self.delimiters = re.compile(re.escape(delimiter))

    def to_hf(self) -> dict:
        return {"type": "CharDelimiterSplit", "delimiter": self.delimiter}


class Punctuation(CharClassSplit):
    """Splits on punctuation characters (ASCII punctuation and Unicode P*), with a behavior."""

    def __init__(self, behavior: str = "isolated") -> None:
        if behavior not in BEHAVIORS:
            raise FormatError(f"unknown split behavior {behavior!r}; expected one of {', '.join(BEHAVIORS)}")
        self.behavior = behavior

    delimiters = PUNCTUATION

    def to_hf(self) -> dict:
        return {"type": "Punctuation", "behavior": _behavior_name(self.behavior)}


class Digits(CharClassSplit):
    """Splits digits (Unicode N*) from the rest: each digit alone, or runs of digits."""

    def __init__(self, individual_digits: bool = False) -> None:
        self.individual_digits = individual_digits
        self.behavior = "isolated" if individual_digits else "contiguous"

    delimiters = NUMERIC

    def to_hf(self) -> dict:
        return {"type": "Digits", "individual_digits": self.individual_digits}


class BertPreTokenizer(PreTokenizer):
    """BERT's basic tokenizer: split on whitespace (dropped), then isolate each punctuation character."""

    # Both splits as one regex: a run of characters that are neither whitespace nor punctuation,
    # or one punctuation character (whitespace dropped). Splitting in two passes went through
    # Python once per word (four fifths of BERT's encoding time); `re` runs this class 4x faster
    # than `regex` (the same code points: no property or case rule in it).
    _words = re.compile(f"[^{WHITESPACE.pattern[1:-1]}{_HF_PUNCTUATION}]+|[{_HF_PUNCTUATION}]")

    def split(self, pieces: Pieces) -> Pieces:
        out: Pieces = []
        for text, at_origin in pieces:
            words = self._words.findall(text)
            if words:
                # Only the first word can hold characters from the text's first: as many as are
                # left after the whitespace before it.
                first = at_origin and max(0, at_origin - _LEADING_WHITESPACE.match(text).end())
                out.append((words[0], first))
                out += [(w, 0) for w in words[1:]]
        return out

    def to_hf(self) -> dict:
        return {"type": "BertPreTokenizer"}

    @staticmethod
    def rust():
        """The ``_core.BertSplitter`` that gives the same words as :meth:`pre_tokenize` (made on
        first use, from the same character classes)."""
        global _BERT_SPLITTER
        if _BERT_SPLITTER is None:
            from . import _core

            _BERT_SPLITTER = _core.BertSplitter(_spec_ranges(_WHITESPACE_SPEC), _spec_ranges(_HF_PUNCTUATION_SPEC))
        return _BERT_SPLITTER


_BERT_SPLITTER = None


def _spec_ranges(spec: str) -> list[tuple[int, int]]:
    """``"41-5A 61"`` (as `_class_body` takes) -> inclusive code point ranges [(0x41, 0x5A), (0x61, 0x61)]."""
    out = []
    for item in spec.split():
        lo, _, hi = item.partition("-")
        out.append((int(lo, 16), int(hi or lo, 16)))
    return out


class Whitespace(PreTokenizer):
    """Words of ``\\w+|[^\\w\\s]+``: runs of word characters and runs of other non-spaces.
    (This regex runs on Rust's `regex` crate, whose ``\\w`` includes the join controls.)"""

    _exact = regex.compile(rf"[\w--[{_ONIG_UNASSIGNED}]]+|[[^\w\s]{_ONIG_UNASSIGNED}]+", regex.V1)
    _quick = regex.compile(r"\w+|[^\w\s]+", regex.V1)

    def split(self, pieces: Pieces) -> Pieces:
        def spans(t: str) -> list[tuple[int, int]]:
            rx = self._exact if not t.isascii() and not _new_code_points().isdisjoint(t) else self._quick
            return [m.span() for m in rx.finditer(t)]

        return _split_each(pieces, spans)

    def to_hf(self) -> dict:
        return {"type": "Whitespace"}


class Sequence(PreTokenizer):
    """Applies pre-tokenizers one after the other, each to every word of the previous one."""

    def __init__(self, pre_tokenizers: Seq[PreTokenizer]) -> None:
        self.pre_tokenizers = list(pre_tokenizers)

    def split(self, pieces: Pieces) -> Pieces:
        for p in self.pre_tokenizers:
            pieces = p.split(pieces)
        return pieces

    def split_aligned(self, pieces: AlignedPieces) -> AlignedPieces:
        for p in self.pre_tokenizers:
            pieces = p.split_aligned(pieces)
        return pieces

    def to_hf(self) -> dict:
        return {"type": "Sequence", "pretokenizers": [p.to_hf() for p in self.pre_tokenizers]}
