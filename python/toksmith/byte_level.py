"""Printable names for byte-level tokens.

Byte-level BPE tokens are byte strings, often not valid UTF-8 on their own. To show them and to
store them in JSON, each byte is mapped to one printable character, as GPT-2 and Hugging Face do:
printable Latin-1 bytes stand for themselves, the others (space, control bytes, ...) are shifted
to code points from U+0100 on. So ``b" low"`` is written ``"Ġlow"``.
"""

from __future__ import annotations


def _byte_to_char() -> list[str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return [table[b] for b in range(256)]


BYTE_TO_CHAR: list[str] = _byte_to_char()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}


def bytes_to_token(data: bytes) -> str:
    """``b" low"`` -> ``"Ġlow"``."""
    return "".join(BYTE_TO_CHAR[b] for b in data)


def token_to_bytes(token: str) -> bytes:
    """``"Ġlow"`` -> ``b" low"``; raises KeyError for a character outside the mapping."""
    return bytes(CHAR_TO_BYTE[c] for c in token)
