"""Normalizers of the general pipeline: rewrite text before it is split into words.

Each class is one Hugging Face normalizer with ``normalize(str) -> str``, reproducing the
Rust code of `tokenizers` exactly, including the Unicode tables it was built with: its
Unicode normalization and its mark/control/punctuation tables follow Unicode 10.0, its case
mapping Unicode 17.0, while Python's ``unicodedata`` has its own version. The tables below
hold the differences.

``normalize_with_origin(text) -> (str, bool)`` also says whether the first character of the
result still comes from the first character of ``text`` (False when the normalizer dropped
it); Metaspace's ``prepend_scheme="first"`` depends on that.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence as Seq

import regex

from ._char_table import CharTable
from .errors import FormatError
from .pre_tokenizers import WHITESPACE, _class_body, compile_onig, find_spans, to_byte_level

# Characters BertNormalizer(clean_text) removes: NUL, U+FFFD and "other" characters (Cc, Cf,
# Co) of the Unicode 10.0 tables, except \t \n \r.
_BERT_REMOVED = _class_body("""
0-8 B-C E-1F 7F-9F AD 600-605 61C 6DD 70F 180E 200B-200F 202A-202E 2060-2064 2066-206F E000-F8FF FEFF
FFF9-FFFB FFFD 110BD 1BCA0-1BCA3 1D173-1D17A E0001 E0020-E007F F0000-FFFFD 100000-10FFFD
""")
# Characters BertNormalizer(clean_text) turns into a space: \t \n \r and White_Space.
_BERT_SPACE = _class_body("""
9-A D A0 1680 2000-200A 2028-2029 202F 205F 3000
""")
# Marks (general category M) of Unicode 10.0: what StripAccents removes.
_MARKS = _class_body("""
300-36F 483-489 591-5BD 5BF 5C1-5C2 5C4-5C5 5C7 610-61A 64B-65F 670 6D6-6DC 6DF-6E4 6E7-6E8 6EA-6ED 711
730-74A 7A6-7B0 7EB-7F3 816-819 81B-823 825-827 829-82D 859-85B 8D4-8E1 8E3-903 93A-93C 93E-94F 951-957
962-963 981-983 9BC 9BE-9C4 9C7-9C8 9CB-9CD 9D7 9E2-9E3 A01-A03 A3C A3E-A42 A47-A48 A4B-A4D A51 A70-A71 A75
A81-A83 ABC ABE-AC5 AC7-AC9 ACB-ACD AE2-AE3 B01-B03 B3C B3E-B44 B47-B48 B4B-B4D B56-B57 B62-B63 B82 BBE-BC2
BC6-BC8 BCA-BCD BD7 C00-C03 C3E-C44 C46-C48 C4A-C4D C55-C56 C62-C63 C81-C83 CBC CBE-CC4 CC6-CC8 CCA-CCD
CD5-CD6 CE2-CE3 D01-D03 D3E-D44 D46-D48 D4A-D4D D57 D62-D63 D82-D83 DCA DCF-DD4 DD6 DD8-DDF DF2-DF3 E31
E34-E3A E47-E4E EB1 EB4-EB9 EBB-EBC EC8-ECD F18-F19 F35 F37 F39 F3E-F3F F71-F84 F86-F87 F8D-F97 F99-FBC FC6
102B-103E 1056-1059 105E-1060 1062-1064 1067-106D 1071-1074 1082-108D 108F 109A-109D 135D-135F 1712-1714
1732-1734 1752-1753 1772-1773 17B4-17D3 17DD 180B-180D 1885-1886 18A9 1920-192B 1930-193B 1A17-1A1B 1A55-1A5E
1A60-1A7C 1A7F 1AB0-1ABE 1B00-1B04 1B34-1B44 1B6B-1B73 1B80-1B82 1BA1-1BAD 1BE6-1BF3 1C24-1C37 1CD0-1CD2
1CD4-1CE8 1CED 1CF2-1CF4 1CF8-1CF9 1DC0-1DF5 1DFB-1DFF 20D0-20F0 2CEF-2CF1 2D7F 2DE0-2DFF 302A-302F 3099-309A
A66F-A672 A674-A67D A69E-A69F A6F0-A6F1 A802 A806 A80B A823-A827 A880-A881 A8B4-A8C5 A8E0-A8F1 A926-A92D
A947-A953 A980-A983 A9B3-A9C0 A9E5 AA29-AA36 AA43 AA4C-AA4D AA7B-AA7D AAB0 AAB2-AAB4 AAB7-AAB8 AABE-AABF AAC1
AAEB-AAEF AAF5-AAF6 ABE3-ABEA ABEC-ABED FB1E FE00-FE0F FE20-FE2F 101FD 102E0 10376-1037A 10A01-10A03
10A05-10A06 10A0C-10A0F 10A38-10A3A 10A3F 10AE5-10AE6 11000-11002 11038-11046 1107F-11082 110B0-110BA
11100-11102 11127-11134 11173 11180-11182 111B3-111C0 111CA-111CC 1122C-11237 1123E 112DF-112EA 11300-11303
1133C 1133E-11344 11347-11348 1134B-1134D 11357 11362-11363 11366-1136C 11370-11374 11435-11446 114B0-114C3
115AF-115B5 115B8-115C0 115DC-115DD 11630-11640 116AB-116B7 1171D-1172B 11C2F-11C36 11C38-11C3F 11C92-11CA7
11CA9-11CB6 16AF0-16AF4 16B30-16B36 16F51-16F7E 16F8F-16F92 1BC9D-1BC9E 1D165-1D169 1D16D-1D172 1D17B-1D182
1D185-1D18B 1D1AA-1D1AD 1D242-1D244 1DA00-1DA36 1DA3B-1DA6C 1DA75 1DA84 1DA9B-1DA9F 1DAA1-1DAAF 1E000-1E006
1E008-1E018 1E01B-1E021 1E023-1E024 1E026-1E02A 1E8D0-1E8D6 1E944-1E94A E0100-E01EF
""")
# The marks of the older Unicode tables (of `unicode_categories`) that BertNormalizer strips.
_BERT_MARKS = _class_body("""
300-36F 483-487 591-5BD 5BF 5C1-5C2 5C4-5C5 5C7 610-61A 64B-65F 670 6D6-6DC 6DF-6E4 6E7-6E8 6EA-6ED 711
730-74A 7A6-7B0 7EB-7F3 816-819 81B-823 825-827 829-82D 859-85B 8E3-902 93A 93C 941-948 94D 951-957 962-963
981 9BC 9C1-9C4 9CD 9E2-9E3 A01-A02 A3C A41-A42 A47-A48 A4B-A4D A51 A70-A71 A75 A81-A82 ABC AC1-AC5 AC7-AC8
ACD AE2-AE3 B01 B3C B3F B41-B44 B4D B56 B62-B63 B82 BC0 BCD C00 C3E-C40 C46-C48 C4A-C4D C55-C56 C62-C63 C81
CBC CBF CC6 CCC-CCD CE2-CE3 D01 D41-D44 D4D D62-D63 DCA DD2-DD4 DD6 E31 E34-E3A E47-E4E EB1 EB4-EB9 EBB-EBC
EC8-ECD F18-F19 F35 F37 F39 F71-F7E F80-F84 F86-F87 F8D-F97 F99-FBC FC6 102D-1030 1032-1037 1039-103A
103D-103E 1058-1059 105E-1060 1071-1074 1082 1085-1086 108D 109D 135D-135F 1712-1714 1732-1734 1752-1753
1772-1773 17B4-17B5 17B7-17BD 17C6 17C9-17D3 17DD 180B-180D 18A9 1920-1922 1927-1928 1932 1939-193B 1A17-1A18
1A1B 1A56 1A58-1A5E 1A60 1A62 1A65-1A6C 1A73-1A7C 1A7F 1AB0-1ABD 1B00-1B03 1B34 1B36-1B3A 1B3C 1B42 1B6B-1B73
1B80-1B81 1BA2-1BA5 1BA8-1BA9 1BAB-1BAD 1BE6 1BE8-1BE9 1BED 1BEF-1BF1 1C2C-1C33 1C36-1C37 1CD0-1CD2 1CD4-1CE0
1CE2-1CE8 1CED 1CF4 1CF8-1CF9 1DC0-1DF5 1DFC-1DFF 20D0-20DC 20E1 20E5-20F0 2CEF-2CF1 2D7F 2DE0-2DFF 302A-302D
3099-309A A66F A674-A67D A69E-A69F A6F0-A6F1 A802 A806 A80B A825-A826 A8C4 A8E0-A8F1 A926-A92D A947-A951
A980-A982 A9B3 A9B6-A9B9 A9BC A9E5 AA29-AA2E AA31-AA32 AA35-AA36 AA43 AA4C AA7C AAB0 AAB2-AAB4 AAB7-AAB8 AABE-
AABF AAC1 AAEC-AAED AAF6 ABE5 ABE8 ABED FB1E FE00-FE0F FE20-FE2F 101FD 102E0 10376-1037A 10A01-10A03
10A05-10A06 10A0C-10A0F 10A38-10A3A 10A3F 10AE5-10AE6 11001 11038-11046 1107F-11081 110B3-110B6 110B9-110BA
11100-11102 11127-1112B 1112D-11134 11173 11180-11181 111B6-111BE 111CA-111CC 1122F-11231 11234 11236-11237
112DF 112E3-112EA 11300-11301 1133C 11340 11366-1136C 11370-11374 114B3-114B8 114BA 114BF-114C0 114C2-114C3
115B2-115B5 115BC-115BD 115BF-115C0 115DC-115DD 11633-1163A 1163D 1163F-11640 116AB 116AD 116B0-116B5 116B7
1171D-1171F 11722-11725 11727-1172B 16AF0-16AF4 16B30-16B36 16F8F-16F92 1BC9D-1BC9E 1D167-1D169 1D17B-1D182
1D185-1D18B 1D1AA-1D1AD 1D242-1D244 1DA00-1DA36 1DA3B-1DA6C 1DA75 1DA84 1DA9B-1DA9F 1DAA1-1DAAF 1E8D0-1E8D6
E0100-E01EF
""")
# Characters `tokenizers`' Unicode normalization (Unicode 10.0) treats as unassigned while
# Python's `unicodedata` decomposes them or gives them a combining class.
_NORMALIZATION_INERT = _class_body("""
7FD 898-89F 8CA-8D3 9FE C3C D3B-D3C EBA 1715 1ABF-1ACE 1DF6-1DFA 32FF A7F2-A7F4 A82C AB69 10781-10785
10787-107B0 107B2-107BA 10D24-10D27 10EAB-10EAC 10F46-10F50 10F82-10F85 11070 1133B 1145E 11839-1183A 11938
1193D-1193E 11943 119E0 11A34 11A47 11A99 11D42 11D44-11D45 11D97 16FF0-16FF1 1E130-1E136 1E2AE 1E2EC-1E2EF
1F16C 1FBF0-1FBF9
""")
# Code points assigned after Unicode 14.0 (Python 3.11's `unicodedata`): with a newer Python,
# those that decompose or combine are inert too (added below).
_ASSIGNED_AFTER_14 = """
558 58B-58C 5C8-5C9 88F 897 B53-B54 C5C CDC CF3 ECE 1ACF-1AF0 1B4E-1B4F 1B7F 1C89-1C8A 208F 209D-209F
20C1-20C4 2427-2429 2B96 2E60-2E63 2FFC-2FFF 31E4-31E5 31EF A7CB-A7CF A7D2 A7D4 A7DA-A7DD A7E2 A7F1 AB6C-AB6D
FBC3-FBD2 FD90-FD91 FDC8-FDCE 105C0-105F3 107BB-107BF 10940-10959 10D40-10D65 10D69-10D85 10D8E-10D8F
10EC2-10EC7 10EC9-10EEE 10EF0-10EFF 1123F-11241 11380-11389 1138B 1138E 11390-113B5 113B7-113C0 113C2 113C5
113C7-113CA 113CC-113D5 113D7-113D8 113E1-113E2 116D0-116E3 11B00-11B0A 11B60-11B67 11BC0-11BE1 11BF0-11BF9
11DB0-11DDB 11DE0-11DE9 11DF0-11DF1 11F00-11F10 11F12-11F3A 11F3E-11F5A 1246F 12475-1247F 12550-12686 1342F
13439-13455 13460-143FA 16100-16139 16D40-16D79 16EA0-16EB8 16EBB-16ED3 16FF2-16FF6 187F8-187FF 18CD6-18CDA
18CFF 18D09-18D20 18D80-18DF2 18E00-19191 191A0-191D2 1B123-1B128 1B132 1B155 1B168 1CC00-1CCFC 1CD00-1CEB3
1CEBA-1CED0 1CED2-1CED4 1CEDD-1CEFD 1D127-1D128 1D1EB-1D1FF 1D250-1D281 1D2C0-1D2D3 1D6A6 1DB00-1DB1C
1DF1F-1DF81 1DF90-1DF96 1DFCD-1DFFF 1E030-1E06D 1E08F 1E4D0-1E4F9 1E5D0-1E5FA 1E5FF 1E6C0-1E6DE 1E6E0-1E6F5
1E6FE-1E6FF 1F1AE 1F6D8-1F6D9 1F6DC 1F774-1F77F 1F7D9-1F7DB 1F7F1-1F7FF 1F8B2-1F8BB 1F8C0-1F8C1 1F8D0-1F8D8
1FA54-1FA57 1FA75-1FA77 1FA87-1FA8F 1FAAD-1FAAF 1FABB-1FABF 1FAC6 1FAC8 1FACC-1FACF 1FADA-1FADD 1FADF
1FAE8-1FAEB 1FAEF 1FAF7-1FAFA 1FBCB-1FBEF 1FBFA 2B739-2B73F 2B81E 2CEA2-2CEAD 2EBF0-2EE5D 31350-33479
3D000-3FC3F
"""
# Lowercase mappings Python's `unicodedata` lacks: (first, last, offset to the lowercase).
_EXTRA_LOWERCASE = [
    (0x1C89, 0x1C89, 0x1),
    (0xA7CB, 0xA7CB, -0xa567),
    (0xA7CC, 0xA7CC, 0x1),
    (0xA7CE, 0xA7CE, 0x1),
    (0xA7D2, 0xA7D2, 0x1),
    (0xA7D4, 0xA7D4, 0x1),
    (0xA7DA, 0xA7DA, 0x1),
    (0xA7DC, 0xA7DC, -0xa641),
    (0x10D50, 0x10D65, 0x20),
    (0x16EA0, 0x16EB8, 0x1b),
]

_BERT_REMOVED_RE = re.compile(f"[{_BERT_REMOVED}]+")
_BERT_SPACE_RE = re.compile(f"[{_BERT_SPACE}]")
_MARKS_RE = re.compile(f"[{_MARKS}]+")
_BERT_MARKS_RE = re.compile(f"[{_BERT_MARKS}]+")
# What BertNormalizer may turn into other than one character (or may move): all but printable
# ASCII, tab, newline and carriage return.
_NOT_PLAIN_ASCII = re.compile("[^\x20-\x7e\t\n\r]+")


def _newer_inert() -> str:
    """With a `unicodedata` newer than Unicode 14.0: the characters it decomposes or gives a
    combining class that `tokenizers`' tables do not know."""
    if tuple(int(x) for x in unicodedata.unidata_version.split(".")) <= (14, 0, 0):
        return ""
    out = []
    for item in _ASSIGNED_AFTER_14.split():
        lo, _, hi = item.partition("-")
        for c in map(chr, range(int(lo, 16), int(hi or lo, 16) + 1)):
            if unicodedata.decomposition(c) or unicodedata.combining(c):
                out.append(re.escape(c))
    return "".join(out)


_INERT_CLASS = _NORMALIZATION_INERT + _newer_inert()
_INERT_RE = re.compile(f"[{_INERT_CLASS}]")
_INERT_SPLIT_RE = re.compile(f"([{_INERT_CLASS}])")
_LOWER_TABLE = {c: c + off for lo, hi, off in _EXTRA_LOWERCASE for c in range(lo, hi + 1)}
_CHINESE_RE = re.compile("([\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
                         "\U0002b920-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f])")


@functools.cache
def _inert_prefilter() -> re.Pattern:
    """A class that holds every inert character and is fast to search: the inert ones of the
    Basic Multilingual Plane, which Python's `re` tests with one bitmap, and all others as one
    range (tested one range at a time, the exact class took 45 ns per character of text)."""
    bmp = [c for c in map(chr, range(0x10000)) if _INERT_RE.match(c)]
    return re.compile("[" + "".join(map(re.escape, bmp)) + "\U00010000-\U0010ffff]")


def _has_inert(text: str) -> bool:
    return _inert_prefilter().search(text) is not None and _INERT_RE.search(text) is not None


def unicode_normalize(form: str, text: str) -> str:
    """``unicodedata.normalize`` as `tokenizers` does it, with its older Unicode tables:
    characters it does not know are plain starters, so the stretches between them are
    normalized on their own, and compositions into such characters are undone."""
    if text.isascii():  # every normal form leaves ASCII as it is (and the check is cheap)
        return text
    if not _has_inert(text):
        return _normalize_stretch(form, text)
    parts = _INERT_SPLIT_RE.split(text)  # stretches at even indexes, unknown characters at odd ones
    return "".join(p if i % 2 else _normalize_stretch(form, p) for i, p in enumerate(parts))


def _normalize_stretch(form: str, text: str) -> str:
    out = unicodedata.normalize(form, text)
    if form in ("NFC", "NFKC") and _has_inert(out):
        out = _INERT_RE.sub(lambda m: unicodedata.normalize("NFD", m.group()), out)
    return out


def _nfd_aligned(chars: list[str], origin: list[int]) -> tuple[list[str], list[int]]:
    """NFD of ``chars`` (``unicode_normalize``'s), each output character with its origin as
    `tokenizers` aligns them: a character's decomposition is its first character, which takes
    the place of the character it comes from, and added ones; the combining characters of a run
    are put in canonical order (by class, stable), the added ones moving with their characters;
    then each character in turn takes the origin of the next input character where it takes a
    place, and an added one the origin of the character before it."""
    out: list[tuple[str, bool]] = []  # (character, added)
    for c in chars:
        decomposed = unicode_normalize("NFD", c) if not c.isascii() else c
        out.extend((d, k > 0) for k, d in enumerate(decomposed))

    def combining(c: str) -> int:  # characters tokenizers' tables do not know are starters
        return 0 if c.isascii() or _has_inert(c) else unicodedata.combining(c)

    k = 0
    while k < len(out):
        if not combining(out[k][0]):
            k += 1
            continue
        j = k + 1
        while j < len(out) and combining(out[j][0]):
            j += 1
        if j - k > 1:
            out[k:j] = sorted(out[k:j], key=lambda pair: combining(pair[0]))
        k = j
    aligned: list[int] = []
    taken = 0
    for c, added in out:
        if added:
            aligned.append(aligned[-1] if aligned else 0)
        else:
            aligned.append(origin[taken])
            taken += 1
    return [c for c, _ in out], aligned


def lowercase(text: str) -> str:
    """Each character lowercased on its own (no final-sigma rule), with Unicode 17.0 mappings."""
    return text.replace("\u03a3", "\u03c3").translate(_LOWER_TABLE).lower()


class Normalizer:
    """Base class: ``normalize`` and ``normalize_with_origin``."""

    def normalize(self, text: str) -> str:
        raise NotImplementedError

    def normalize_with_origin(self, text: str) -> tuple[str, bool]:
        return self.normalize(text), True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_hf()})"


#: The origin of a character that `tokenizers` inserts before every other one: it aligns it to
#: the empty span at the start, (0, 0), not to a character.
NO_ORIGIN = -1


def transform_origins(n: int, changes: Seq[int], consumed: int = 0) -> list[int]:
    """Where each new character comes from (an index of the ``n`` old ones, or `NO_ORIGIN`), as
    `tokenizers` aligns the result of ``NormalizedString::transform``: ``changes`` has one entry
    per new character; 0 replaces the next old character, -k also removes the k after it, +1
    inserts (aligned to the old character before). ``consumed`` old characters are removed first.
    """
    origins, at = [], consumed
    for change in changes:
        if change > 0:
            origins.append(at - 1 if at >= 1 else NO_ORIGIN)
            continue
        if at >= n:
            raise ValueError("the changes consume more characters than the text has")
        origins.append(at)
        at += 1 - change
    return origins


class UnicodeForm(Normalizer):
    """One of the Unicode normalization forms NFC, NFD, NFKC, NFKD."""

    def __init__(self, form: str) -> None:
        if form not in ("NFC", "NFD", "NFKC", "NFKD"):
            raise FormatError(f"unknown Unicode normalization form {form!r}")
        self.form = form

    def normalize(self, text: str) -> str:
        return unicode_normalize(self.form, text)

    def to_hf(self) -> dict:
        return {"type": self.form}


class Lowercase(Normalizer):
    """Lowercases every character on its own, as Rust's ``char::to_lowercase``."""

    def normalize(self, text: str) -> str:
        return lowercase(text)

    def normalize_aligned(self, text: str) -> tuple[str, list[int]]:
        """A character that lowercases to several comes from the one it lowercases."""
        origins: list[int] = []
        for i, c in enumerate(text):
            origins.extend([i] * len(lowercase(c)))
        return lowercase(text), origins

    def to_hf(self) -> dict:
        return {"type": "Lowercase"}


class StripAccents(Normalizer):
    """Removes combining marks (usually after NFD, to strip accents)."""

    def normalize(self, text: str) -> str:
        return _MARKS_RE.sub("", text)

    def normalize_with_origin(self, text: str) -> tuple[str, bool]:
        return self.normalize(text), not _MARKS_RE.match(text)

    def to_hf(self) -> dict:
        return {"type": "StripAccents"}


@functools.cache
def _bert_table(clean_text: bool, handle_chinese_chars: bool) -> CharTable:
    """BertNormalizer's first two steps per character: with ``clean_text`` control characters
    dropped and whitespace made a space, with ``handle_chinese_chars`` spaces around CJK ideographs."""

    def rule(cp: int) -> str:
        c = chr(cp)
        if clean_text and _BERT_REMOVED_RE.match(c):
            return ""
        if clean_text and _BERT_SPACE_RE.match(c):
            return " "
        return f" {c} " if handle_chinese_chars and _CHINESE_RE.match(c) else c

    return CharTable(rule)


class BertNormalizer(Normalizer):
    """BERT's normalizer: drop control characters and map whitespace to spaces, put spaces
    around CJK ideographs, strip accents (by default when lowercasing), lowercase."""

    def __init__(self, *, clean_text: bool = True, handle_chinese_chars: bool = True,
                 strip_accents: bool | None = None, lowercase: bool = True) -> None:
        self.clean_text = clean_text
        self.handle_chinese_chars = handle_chinese_chars
        self.strip_accents = strip_accents
        self.lowercase = lowercase

    def normalize_with_origin(self, text: str) -> tuple[str, bool]:
        keeps = not (self.clean_text and _BERT_REMOVED_RE.match(text))
        if self.clean_text or self.handle_chinese_chars:
            # Both steps one character at a time, so one translate (four regex passes cost half
            # of BERT's encoding time on plain text).
            text = text.translate(_bert_table(self.clean_text, self.handle_chinese_chars))
        if (self.strip_accents if self.strip_accents is not None else self.lowercase) and not text.isascii():
            text = unicode_normalize("NFD", text)
            keeps = keeps and not _BERT_MARKS_RE.match(text)
            text = _BERT_MARKS_RE.sub("", text)
        if self.lowercase:
            text = text.lower() if text.isascii() else lowercase(text)
        return text, keeps

    def normalize_aligned(self, text: str) -> tuple[str, list[int]]:
        """The normalized text, and for each of its characters the index of the character of
        ``text`` it comes from, as `tokenizers` aligns them: control characters dropped,
        whitespace made a space and spaces put around CJK ideographs character by character;
        then NFD (see `_nfd_aligned`), marks dropped, and lowercasing, where a character that
        becomes several gives each its origin. Printable ASCII (and tab, newline, carriage
        return) stays one character each: runs of it are done whole."""
        table = _bert_table(self.clean_text, self.handle_chinese_chars) if self.clean_text or self.handle_chinese_chars else None
        strip = self.strip_accents if self.strip_accents is not None else self.lowercase
        out: list[str] = []
        origin: list[int] = []
        pos = 0
        for m in _NOT_PLAIN_ASCII.finditer(text):
            if m.start() > pos:
                self._plain_aligned(text, pos, m.start(), table, out, origin)
            chars: list[str] = []
            run_origin: list[int] = []
            for i in range(m.start(), m.end()):
                piece = text[i].translate(table) if table is not None else text[i]
                chars.extend(piece)
                run_origin.extend([i] * len(piece))
            if strip:
                # NFD reorders only runs of combining characters: ASCII ends them.
                chars, run_origin = _nfd_aligned(chars, run_origin)
                kept = [k for k, c in enumerate(chars) if not _BERT_MARKS_RE.match(c)]
                chars, run_origin = [chars[k] for k in kept], [run_origin[k] for k in kept]
            if self.lowercase:
                lowered = [lowercase(c) for c in chars]
                run_origin = [o for o, low in zip(run_origin, lowered) for _ in low]
                chars = lowered
            out.extend(chars)
            origin.extend(run_origin)
            pos = m.end()
        if pos < len(text):
            self._plain_aligned(text, pos, len(text), table, out, origin)
        return "".join(out), origin

    def _plain_aligned(self, text: str, start: int, end: int, table, out: list[str], origin: list[int]) -> None:
        """`normalize_aligned` of ``text[start:end]``, all printable ASCII, tab, newline or
        carriage return: each character stays one (whitespace a space, lowercased)."""
        piece = text[start:end]
        if table is not None:
            piece = piece.translate(table)
        out.append(piece.lower() if self.lowercase else piece)
        origin.extend(range(start, end))

    def normalize(self, text: str) -> str:
        return self.normalize_with_origin(text)[0]

    def to_hf(self) -> dict:
        return {"type": "BertNormalizer", "clean_text": self.clean_text, "handle_chinese_chars": self.handle_chinese_chars,
                "strip_accents": self.strip_accents, "lowercase": self.lowercase}


class Replace(Normalizer):
    """Replaces every match of a literal string or an Oniguruma regex with ``content``."""

    def __init__(self, pattern: str, content: str, *, is_regex: bool = False) -> None:
        self.pattern, self.content, self.is_regex = pattern, content, is_regex
        self._regex = compile_onig(pattern) if is_regex else regex.compile(regex.escape(pattern)) if pattern else None

    def _spans(self, text: str) -> list[tuple[int, int]]:
        return list(find_spans(self._regex, text)) if self._regex is not None and text else []

    def normalize_with_origin(self, text: str) -> tuple[str, bool]:
        if self._regex is not None and not self.is_regex:  # a literal string: str.replace finds the same
            return text.replace(self.pattern, self.content), bool(self.content) or not text.startswith(self.pattern)
        spans = self._spans(text)
        if not spans:
            return text, True
        parts, pos = [], 0
        for s, e in spans:
            parts.append(text[pos:s])
            parts.append(self.content)
            pos = e
        parts.append(text[pos:])
        keeps = not (spans[0][0] == 0 and spans[0][1] > 0 and not self.content)
        return "".join(parts), keeps

    def normalize_aligned(self, text: str) -> tuple[str, Seq[int]]:
        """The normalized text and each of its characters' origin. As `tokenizers` aligns a
        replacement, every character of ``content`` comes from the last character of the match
        (of an empty match: the character before it)."""
        if not self.is_regex and len(self.pattern) == 1 and len(self.content) == 1:
            return text.replace(self.pattern, self.content), range(len(text))
        origins: list[int] = []
        pos = 0
        for s, e in self._spans(text):
            origins.extend(range(pos, s))
            origins.extend([e - 1 if e >= 1 else NO_ORIGIN] * len(self.content))
            pos = e
        origins.extend(range(pos, len(text)))
        return self.normalize(text), origins

    def normalize(self, text: str) -> str:
        if self._regex is not None and not self.is_regex:  # fast path for literal strings
            return text.replace(self.pattern, self.content)
        return self.normalize_with_origin(text)[0]

    def to_hf(self) -> dict:
        return {"type": "Replace", "pattern": {"Regex" if self.is_regex else "String": self.pattern}, "content": self.content}


class Prepend(Normalizer):
    """Puts ``prepend`` in front of non-empty text."""

    def __init__(self, prepend: str) -> None:
        self.prepend = prepend

    def normalize(self, text: str) -> str:
        return self.prepend + text if text else text

    def normalize_aligned(self, text: str) -> tuple[str, list[int]]:
        """The prepended characters come from the text's first character, as `tokenizers`
        aligns them."""
        if not text:
            return text, []
        return self.prepend + text, [0] * len(self.prepend) + list(range(len(text)))

    def to_hf(self) -> dict:
        return {"type": "Prepend", "prepend": self.prepend}


class Strip(Normalizer):
    """Removes whitespace at the start (``left``) and/or the end (``right``)."""

    def __init__(self, *, left: bool = True, right: bool = True) -> None:
        self.left, self.right = left, right

    def normalize(self, text: str) -> str:
        if self.left:
            text = _LEADING_SPACE.sub("", text)
        if self.right:
            text = _TRAILING_SPACE.sub("", text)
        return text

    def normalize_with_origin(self, text: str) -> tuple[str, bool]:
        return self.normalize(text), not (self.left and WHITESPACE.match(text))

    def normalize_aligned(self, text: str) -> tuple[str, range]:
        """The characters kept come from themselves."""
        stripped = self.normalize(text)
        lead = len(text) - len(_LEADING_SPACE.sub("", text)) if self.left else 0
        return stripped, range(lead, lead + len(stripped))

    def to_hf(self) -> dict:
        return {"type": "Strip", "strip_left": self.left, "strip_right": self.right}


_LEADING_SPACE = re.compile(f"^{WHITESPACE.pattern}+")
_TRAILING_SPACE = re.compile(f"{WHITESPACE.pattern}+$")


class ByteLevel(Normalizer):
    """Maps every UTF-8 byte to its printable byte-level character (GPT-2's alphabet)."""

    def normalize(self, text: str) -> str:
        return to_byte_level(text)

    def to_hf(self) -> dict:
        return {"type": "ByteLevel"}


class Precompiled(Normalizer):
    """SentencePiece's normalization rules (a precompiled character map) as Hugging Face applies
    them: each grapheme cluster of under 6 bytes that some rule's source begins is replaced
    whole by the replacement of the *shortest* such source; otherwise each character on its own.
    The rules are read by :class:`toksmith.charsmap.PrecompiledCharsmap`.

    Only the stretches of text that a rule may change are looked at grapheme by grapheme: the
    runs of characters other than ASCII ones without a rule of their own (such a character is a
    grapheme of its own, unchanged, except as the base of the marks after it or after a prepended
    character), with one character more on each side. English text is then copied as it is
    instead of going through Python once per character (20x faster)."""

    def __init__(self, precompiled: bytes) -> None:
        from .charsmap import PrecompiledCharsmap

        self.precompiled = bytes(precompiled)
        self._table = PrecompiledCharsmap(self.precompiled).table
        self._longest = max(map(len, self._table), default=0)
        # ASCII characters without a rule of their own ("\r" left out: "\r\n" is one grapheme).
        plain = "".join(chr(c) for c in range(128) if chr(c) not in self._table and chr(c) != "\r")
        self._changing = re.compile(f"[^{re.escape(plain)}]+")

    def _transform(self, chunk: str) -> str | None:
        for k in range(1, min(len(chunk), self._longest) + 1):
            replacement = self._table.get(chunk[:k])
            if replacement is not None:
                return replacement
        return None

    def _regions(self, text: str) -> list[tuple[int, int]]:
        """The stretches of ``text`` that a rule may change, each starting and ending at a
        grapheme boundary (between two plain ASCII characters, or at an end of the text)."""
        regions: list[tuple[int, int]] = []
        for m in self._changing.finditer(text):
            s, e = max(0, m.start() - 1), min(len(text), m.end() + 1)
            if regions and s <= regions[-1][1]:
                regions[-1] = (regions[-1][0], e)
            else:
                regions.append((s, e))
        return regions

    def _changes(self, text: str) -> tuple[list[str], list[int]]:
        """The characters of ``text`` normalized, and for each its change as `tokenizers` gives
        it to ``NormalizedString::transform`` (see `transform_origins`): a replacement's first
        characters replace the old ones one by one, extra new ones are inserted after them, and
        the last new one removes the old ones left over (an empty replacement: the character
        before it removes them)."""
        chars: list[str] = []
        changes: list[int] = []

        def replace(old: str, new: str) -> None:
            chars.extend(new)
            changes.extend([0] * len(new))
            diff = len(new) - len(old)
            if diff > 0:
                changes[len(changes) - diff:] = [1] * diff
            elif diff < 0 and changes:
                changes[-1] += diff

        for grapheme in _GRAPHEME.findall(text):
            if len(grapheme.encode("utf-8")) < 6:
                replacement = self._transform(grapheme)
                if replacement is not None:
                    replace(grapheme, replacement)
                    continue
            for c in grapheme:
                replacement = self._table.get(c)
                if replacement is None:
                    chars.append(c)
                    changes.append(0)
                else:
                    replace(c, replacement)
        return chars, changes

    def normalize(self, text: str) -> str:
        regions = self._regions(text)
        if not regions:
            return text
        parts, pos = [], 0
        for s, e in regions:
            parts.append(text[pos:s])
            parts.extend(self._changes(text[s:e])[0])
            pos = e
        parts.append(text[pos:])
        return "".join(parts)

    def normalize_aligned(self, text: str) -> tuple[str, Seq[int]]:
        """The normalized text and each character's origin, as `tokenizers` aligns its Precompiled
        normalizer (see `_changes`). At the start of the text, an empty replacement has no
        character before it to remove the old ones: `tokenizers` then aligns everything after
        it one character early, which the whole text's alignment follows."""
        regions = self._regions(text)
        if not regions:
            return text, range(len(text))
        parts: list[str] = []
        origins: list[int] = []
        pos = 0
        for s, e in regions:
            parts.append(text[pos:s])
            origins.extend(range(pos, s))
            chars, changes = self._changes(text[s:e])
            consumed = sum(1 - c for c in changes if c <= 0)
            if consumed != e - s:  # the shift at the start: aligned as one transform of the whole text
                chars, changes = self._changes(text)
                return "".join(chars), transform_origins(len(text), changes)
            parts.extend(chars)
            origins.extend(s + o for o in transform_origins(e - s, changes))
            pos = e
        parts.append(text[pos:])
        origins.extend(range(pos, len(text)))
        return "".join(parts), origins

    def normalize_with_origin(self, text: str) -> tuple[str, bool]:
        first = _GRAPHEME.match(text)
        return self.normalize(text), first is None or self.normalize(first.group()) != ""

    def to_hf(self) -> dict:
        import base64

        return {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(self.precompiled).decode("ascii")}


_GRAPHEME = regex.compile(r"\X")


class Sequence(Normalizer):
    """Applies normalizers one after the other."""

    def __init__(self, normalizers: Seq[Normalizer]) -> None:
        self.normalizers = list(normalizers)

    def normalize(self, text: str) -> str:
        for n in self.normalizers:
            text = n.normalize(text)
        return text

    def normalize_aligned(self, text: str) -> tuple[str, list[int]]:
        """Each step's alignment, composed (every step must have one)."""
        origin: Seq[int] = range(len(text))
        for n in self.normalizers:
            before = len(text)
            text, step = n.normalize_aligned(text)
            if isinstance(step, range) and step == range(before):
                continue  # every character comes from itself
            if isinstance(origin, range) and origin == range(before):
                origin = step  # nothing moved before this step
                continue
            origin = [NO_ORIGIN if k == NO_ORIGIN else origin[k] for k in step]
        return text, list(origin)

    def normalize_with_origin(self, text: str) -> tuple[str, bool]:
        keeps = True
        for n in self.normalizers:
            if hasattr(n, "normalize_with_origin"):
                text, k = n.normalize_with_origin(text)
            else:
                text, k = n.normalize(text), True
            keeps = keeps and k
        return text, keeps

    def to_hf(self) -> dict:
        return {"type": "Sequence", "normalizers": [n.to_hf() for n in self.normalizers]}
