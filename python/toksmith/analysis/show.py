"""Show where a tokenizer cuts a text: colored token boundaries for the terminal or for HTML.

>>> import toksmith
>>> tok = toksmith.train(["the cat sat on the mat"] * 20, vocab_size=270)
>>> [piece for piece, _ in token_pieces(tok, tok.encode_ordinary("the cat"))][:2]
['the', ' cat']
"""

from __future__ import annotations

import codecs
import html
import shutil
import unicodedata

from ._common import AnalysisError

# Light 256-color backgrounds with black text: readable on dark and light terminals.
ANSI_BACKGROUNDS = (153, 223, 151, 218, 186, 189)
HTML_BACKGROUNDS = ("#cfe8ff", "#ffe1b3", "#c9f2c9", "#ffd1e8", "#eef0a8", "#ddd6ff")

# How invisible characters are drawn so that a token made of them still shows.
_VISIBLE = {"\n": "↵", "\r": "␍", "\t": "→"}


def token_pieces(tok, ids) -> list[tuple[str, int]]:
    """Pairs ``(text, id)`` for each token of ``ids``, in order.

    Bytes are decoded incrementally, so a character split across tokens is shown with the token
    that completes it (the tokens before it get ``""``); invalid bytes become U+FFFD.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces = []
    for token_id in ids:
        data = tok.decode_bytes([token_id])
        pieces.append((decoder.decode(data), token_id))
    tail = decoder.decode(b"", final=True)
    if tail and pieces:
        last_text, last_id = pieces[-1]
        pieces[-1] = (last_text + tail, last_id)
    return pieces


def _visible(piece: str) -> str:
    return "".join(_VISIBLE.get(c, c) for c in piece)


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: wide East Asian characters take 2, combining marks 0.

    >>> display_width("ab"), display_width("中文"), display_width("é")
    (2, 4, 1)
    """
    width = 0
    for c in text:
        if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1
    return width


def render_ansi(tok, text: str, *, ids: bool = True, width: int | None = None, color: bool = True,
                encode=None) -> str:
    """Renders ``text`` with alternating ANSI background colors per token and the ids under each.

    Newlines, tabs and carriage returns are drawn as ↵ → ␍. Lines wrap at ``width`` columns
    (default: the terminal width). With ``color=False`` tokens are separated by ``|`` instead
    (for pipes and logs). ``encode`` replaces ``tok.encode_ordinary`` if given.
    """
    ids_list = list((encode or tok.encode_ordinary)(text))
    pieces = token_pieces(tok, ids_list)

    def paint(k: int, cell: str) -> str:
        if not color:
            return cell
        return f"\x1b[30;48;5;{ANSI_BACKGROUNDS[k % len(ANSI_BACKGROUNDS)]}m{cell}\x1b[0m"

    gap = " " if color else "|"
    if not ids:
        out = []
        for k, (piece, _) in enumerate(pieces):
            out.append(paint(k, _visible(piece)) + ("" if color else "|"))
            if "\n" in piece:
                out.append("\n")
        return "".join(out) + ("\n" if out and not out[-1].endswith("\n") else "")
    width = width or shutil.get_terminal_size((100, 24)).columns
    lines: list[str] = []
    text_row: list[str] = []
    id_row: list[str] = []
    used = 0

    def flush() -> None:
        nonlocal text_row, id_row, used
        if text_row:
            lines.extend(["".join(text_row), "".join(id_row), ""])
        text_row, id_row, used = [], [], 0

    for k, (piece, token_id) in enumerate(pieces):
        shown = _visible(piece)
        label = str(token_id)
        cell = max(display_width(shown), len(label))
        if used and used + cell + 1 > width:
            flush()
        text_row.append(paint(k, shown + " " * (cell - display_width(shown))) + gap)
        id_row.append(paint(k, label.ljust(cell)) + gap)
        used += cell + 1
        if "\n" in piece:
            flush()
    flush()
    return "\n".join(lines).rstrip("\n") + "\n"


def render_html(tok, text: str, *, ids: bool = True, encode=None) -> str:
    """An HTML fragment: one colored ``<span>`` per token, with its id under it (``<ruby>``).

    Self-contained: styles are inline, no script, no external resource.
    """
    ids_list = list((encode or tok.encode_ordinary)(text))
    return pieces_to_html(token_pieces(tok, ids_list), ids=ids)


def pieces_to_html(pieces, *, ids: bool = True) -> str:
    """The HTML of :func:`render_html` for already computed ``(text, id)`` pairs."""
    parts = ['<div class="toksmith-tokens" style="line-height:2.4;font-family:monospace;white-space:pre-wrap">']
    for k, (piece, token_id) in enumerate(pieces):
        if not isinstance(token_id, int):
            raise AnalysisError(f"token ids must be ints, got {token_id!r}")
        color = HTML_BACKGROUNDS[k % len(HTML_BACKGROUNDS)]
        shown = html.escape(_visible(piece))
        span = f'<span style="background:{color};border-radius:2px" title="id {token_id}">{shown}</span>'
        if ids:
            span = (f'<ruby style="ruby-position:under">{span}'
                    f'<rt style="font-size:60%;color:#555">{token_id}</rt></ruby>')
        parts.append(span)
        if "\n" in piece:
            parts.append("<br>")
    parts.append("</div>")
    return "".join(parts)
