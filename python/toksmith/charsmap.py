"""SentencePiece's precompiled character map: the table behind its ``nmt_nfkc``/``nfkc``
normalizers (also Hugging Face's ``Precompiled`` normalizer and llama.cpp's T5 vocabularies).

The blob is ``uint32 little-endian size`` + a darts-clone double-array trie of that many bytes
+ the replacement strings, each ended by a NUL byte. The trie maps source byte strings to the
offset of their replacement. Normalizing scans the text left to right; at each position the
*longest* source string that starts there is replaced, otherwise the character is kept.

The trie is read once into a plain dict (source -> replacement), so normalizing is dictionary
look-ups at the few positions where some source string can start.

>>> PrecompiledCharsmap(b"").normalize("ｶﾀｶﾅ")  # an empty map is the identity
'ｶﾀｶﾅ'
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from types import MappingProxyType

from .errors import FormatError

# Kinds of the pieces `PrecompiledCharsmap.pieces` yields.
KEPT = 0       # characters no rule applies to, kept as they are
REPLACED = 1   # the replacement of one rule
PROTECTED = 2  # a protected string (a SentencePiece user-defined piece), never normalized


class PrecompiledCharsmap:
    """Normalizer of a SentencePiece ``precompiled_charsmap`` (``b""`` means no rules)."""

    def __init__(self, precompiled: bytes) -> None:
        self.precompiled = bytes(precompiled)
        self.table: Mapping[str, str] = _cached_rules(self.precompiled) if self.precompiled else {}
        self._lengths = _lengths_by_start(self.table)
        self._scanners: dict[frozenset[str], _Scanner] = {}

    def __reduce__(self):
        # Pickled as its blob: the rules are a read-only view shared by instances (not picklable).
        return (PrecompiledCharsmap, (self.precompiled,))

    def normalize(self, text: str) -> str:
        """``text`` with every rule applied (longest source first, left to right)."""
        return "".join(piece for piece, _ in self.pieces(text))

    def pieces(self, text: str, protected: Iterable[str] = ()) -> Iterator[tuple[str, int]]:
        """The normalized text as ``(piece, kind)`` in order, kind being KEPT (a run of characters
        no rule applies to), REPLACED (one rule's replacement, possibly empty) or PROTECTED.

        ``protected`` strings are matched first at each position, longest first, and pass
        unchanged: SentencePiece does that for user-defined pieces. SentencePiece's whitespace
        handling works on these pieces, which is why they are exposed.
        """
        return ((piece, kind) for piece, kind, _ in self.pieces_from(text, protected))

    def pieces_from(self, text: str, protected: Iterable[str] = ()) -> Iterator[tuple[str, int, int]]:
        """`pieces`, each with the index in ``text`` of the character it starts from (a KEPT
        piece is that part of ``text``; a rule's replacement or a protected string, what it
        matched from there up to the next piece's start)."""
        protected = frozenset(p for p in protected if p)
        scanner = self._scanner(protected)
        search = scanner.search_for(text)
        if search is None:
            if text:
                yield text, KEPT, 0
            return
        table, lengths, protected_lengths = self.table, self._lengths, scanner.protected_lengths
        starts, firsts, seconds = scanner.starts, scanner.firsts, scanner.seconds
        pos = at = 0  # text[:pos] is given out; the next match is searched from `at`
        n = len(text)
        while at < n:
            m = search(text, at)
            if m is None:
                break
            j = m.start()
            # A match starts at j, or at j - 1 when text[j] is the second character of a
            # longer rule whose first character precedes it (tried there, as the longest
            # rule starting at j - 1 comes before anything at j).
            if j > pos and text[j - 1] in firsts and text[j] in seconds:
                start = j - 1
            elif text[j] in starts:
                start = j
            else:  # a second character with no first one before it: kept
                at = j + 1
                continue
            if start > pos:
                yield text[pos:start], KEPT, pos
            first = text[start]
            # The longest protected string, else the longest rule, starting here.
            for length in protected_lengths.get(first, ()):
                if text[start:start + length] in protected:
                    yield text[start:start + length], PROTECTED, start
                    pos = start + length
                    break
            else:
                for length in lengths.get(first, ()):
                    replacement = table.get(text[start:start + length])
                    if replacement is not None:
                        yield replacement, REPLACED, start
                        pos = start + length
                        break
                else:  # only longer rules start with this character, and none matches here
                    yield first, KEPT, start
                    pos = start + 1
            at = pos
        if pos < n:
            yield text[pos:], KEPT, pos

    def _scanner(self, protected: frozenset[str]) -> "_Scanner":
        if protected not in self._scanners:
            self._scanners[protected] = _Scanner(self.table, protected)
        return self._scanners[protected]


class _Scanner:
    """Where a rule or protected string may start. A character starts one if it has a rule of
    its own or starts a protected string (`starts`); one that only begins longer rules (a letter
    of a composition such as "A" + U+0300: `firsts`) only when the next character is the second
    of such a rule (`seconds`). `search_for(text)` finds the next character of `starts` or
    `seconds`: a plain character class, which `re` runs at C speed (a lookahead after every
    letter, as before, cost 70 ns per character); plain letters then cost no Python step."""

    def __init__(self, table: Mapping[str, str], protected: frozenset[str]) -> None:
        self.starts = frozenset({k for k in table if len(k) == 1} | {p[0] for p in protected})
        longer = [k for k in table if len(k) > 1 and k[0] not in self.starts]
        self.firsts = frozenset(k[0] for k in longer)
        self.seconds = frozenset(k[1] for k in longer)
        chars = self.starts | self.seconds
        # `re` tests a class of characters below U+10000 in a bitmap, but one with astral
        # characters range by range (thousands of them for NFKC: 57 ns a character). Text
        # without astral characters (most) is searched with the first kind.
        bmp = {c for c in chars if c <= "\uffff"}
        self._search_bmp = re.compile(_char_class(bmp)).search if bmp else None
        self._search_all = re.compile(_char_class(chars)).search if len(chars) > len(bmp) else self._search_bmp
        self.protected_lengths = _lengths_by_start(protected)

    def search_for(self, text: str):
        """The search to run on `text` (None: no rule can apply to any of it)."""
        if self._search_all is not self._search_bmp and text and max(text) > "\uffff":
            return self._search_all
        return self._search_bmp


def _lengths_by_start(keys: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """For each first character, the lengths of the keys starting with it, longest first."""
    lengths: dict[str, set[int]] = {}
    for k in keys:
        lengths.setdefault(k[0], set()).add(len(k))
    return {c: tuple(sorted(ls, reverse=True)) for c, ls in lengths.items()}


def _char_class(chars: Iterable[str]) -> str:
    """A regex character class of ``chars``, written as ranges of consecutive code points."""
    points = sorted(ord(c) for c in chars)
    parts, i = [], 0
    while i < len(points):
        j = i
        while j + 1 < len(points) and points[j + 1] == points[j] + 1:
            j += 1
        lo, hi = chr(points[i]), chr(points[j])
        parts.append(re.escape(lo) if i == j else f"{re.escape(lo)}-{re.escape(hi)}")
        i = j + 1
    return "[" + "".join(parts) + "]"


@lru_cache(maxsize=8)
def _cached_rules(blob: bytes) -> Mapping[str, str]:
    """The rules of a blob, read once per process (reading the NFKC map takes about a second,
    and every tokenizer trained with it, or loaded, has one) and kept on disk between processes
    (:mod:`toksmith._cache`, named by the blob's digest); read-only, as instances share it."""
    import json

    from . import _cache

    name = _cache.key(blob)
    stored = _cache.load("charsmap-rules", name)
    if stored is not None:
        try:
            rules = json.loads(stored.decode("utf-8"))
            if isinstance(rules, dict):
                return MappingProxyType(rules)
        except ValueError:
            pass  # damaged: read the blob again (and store it anew)
    rules = _read_rules(blob)
    _cache.store("charsmap-rules", name, json.dumps(rules, ensure_ascii=False).encode("utf-8"))
    return MappingProxyType(rules)


def _read_rules(blob: bytes) -> dict[str, str]:
    """Every (source, replacement) pair of a precompiled charsmap."""
    if len(blob) < 4:
        raise FormatError(f"precompiled charsmap of {len(blob)} bytes is truncated (it starts with a 4-byte size)")
    (trie_size,) = struct.unpack_from("<I", blob, 0)
    if trie_size % 4 or trie_size == 0 or 4 + trie_size > len(blob):
        raise FormatError(f"precompiled charsmap: its trie size {trie_size} does not fit the {len(blob)}-byte blob")
    units = struct.unpack_from(f"<{trie_size // 4}I", blob, 4)
    strings = blob[4 + trie_size:]
    rules: dict[str, str] = {}
    for key, offset in _trie_items(units):
        end = strings.find(b"\0", offset)
        if offset >= len(strings) or end < 0:
            raise FormatError(f"precompiled charsmap: replacement offset {offset} is outside its string table")
        try:
            rules[key.decode("utf-8")] = strings[offset:end].decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"precompiled charsmap: the rule for {key!r} is not valid UTF-8") from None
    return rules


# darts-clone packs each unit in 32 bits: bit 31 marks a leaf (whose low 31 bits are the
# value), bit 8 says the node has a leaf child, bits 0-7 are the label of the edge into the node
# and bits 10-30 the offset to its children (shifted left by 8 more when bit 9 is set).
def _offset(unit: int) -> int:
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def _label(unit: int) -> int:
    return unit & ((1 << 31) | 0xFF)


def _has_leaf(unit: int) -> bool:
    return bool((unit >> 8) & 1)


def _trie_items(units: tuple[int, ...]) -> Iterator[tuple[bytes, int]]:
    """(key, value) of every key in a darts-clone double array.

    From a node whose children start at ``base``, the edge labelled ``c`` leads to unit
    ``base ^ c`` if that unit's label is ``c``; so a unit ``i`` labelled ``c`` can only be the
    child of the node with base ``i ^ c``. Grouping units by that base lists every node's
    children in one pass, instead of trying 256 labels per node.
    """
    children: dict[int, list[tuple[int, int]]] = {}
    for i, unit in enumerate(units):
        label = _label(unit)
        if label <= 0xFF:  # leaf units carry bit 31 and are never edges
            children.setdefault(i ^ label, []).append((label, i))
    # darts-clone shares the nodes of equal subtrees (it is built from a DAWG), so one node can
    # be reached by several keys: every path is walked. A malformed trie could loop; keys are
    # short (a few characters), so the walk stops at 256 bytes and a bounded number of steps.
    stack = [(b"", _offset(units[0]))]
    steps = 0
    while stack:
        key, base = stack.pop()
        steps += 1
        if steps > 128 * len(units) + 100_000:
            raise FormatError("precompiled charsmap: the trie does not end (it is corrupted)")
        if len(key) > 256:
            continue
        for label, i in children.get(base, ()):
            unit = units[i]
            child_base = i ^ _offset(unit)
            child_key = key + bytes([label])
            if _has_leaf(unit):
                if child_base >= len(units):
                    raise FormatError("precompiled charsmap: a trie leaf is outside the trie")
                yield child_key, units[child_base] & 0x7FFFFFFF
            if child_base < len(units):
                stack.append((child_key, child_base))
