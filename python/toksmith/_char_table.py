"""A ``str.translate`` table that works out each character's replacement when first met."""

from __future__ import annotations

from collections.abc import Callable

#: Entries a table keeps; characters past it are worked out each time they are met (a text of
#: every code point would otherwise keep hundreds of MB).
TABLE_LIMIT = 1 << 16


class CharTable(dict):
    """A str.translate table filled as characters are met, by ``rule(code point) -> str``
    ("" drops the character), up to ``TABLE_LIMIT`` entries."""

    def __init__(self, rule: Callable[[int], str]) -> None:
        super().__init__()
        self.rule = rule

    def __missing__(self, cp: int) -> str:
        value = self.rule(cp)
        if len(self) < TABLE_LIMIT:
            self[cp] = value
        return value
