"""Tests for toksmith.analysis.show: colored token boundaries for terminals and HTML."""
import re

import pytest

import toksmith
from toksmith.analysis import render_ansi, render_html, token_pieces
from toksmith.analysis.show import ANSI_BACKGROUNDS, display_width

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TEXT = "the cat sat on the mat\n人人生而自由 <b>&"


@pytest.fixture(scope="module")
def tok():
    # Few merges: Chinese characters stay split into bytes, so pieces must join partial characters.
    return toksmith.train(["the cat sat on the mat"] * 30, vocab_size=280)


def test_pieces_rebuild_the_text_even_when_tokens_split_characters(tok):
    ids = tok.encode_ordinary(TEXT)
    pieces = token_pieces(tok, ids)
    assert [i for _, i in pieces] == ids
    assert "".join(p for p, _ in pieces) == TEXT
    assert any(p == "" for p, _ in pieces)  # a token holding only part of a character


def test_ansi_rendering_colors_each_token_and_puts_its_id_under_it(tok):
    ids = tok.encode_ordinary(TEXT)
    out = render_ansi(tok, TEXT, width=200)
    colors = re.findall(r"\x1b\[30;48;5;(\d+)m", out)
    assert len(colors) == 2 * len(ids)  # the text cell and the id cell of each token
    lines = out.split("\n")
    text_rows, id_rows = lines[0::3], lines[1::3]
    row_ids = [int(x) for row in id_rows for x in ANSI.sub("", row).split()]
    assert row_ids == ids
    # Neighbouring tokens never share a background color.
    for row in text_rows:
        row_colors = re.findall(r"\x1b\[30;48;5;(\d+)m", row)
        assert all(a != b for a, b in zip(row_colors, row_colors[1:]))
        assert set(row_colors) <= {str(c) for c in ANSI_BACKGROUNDS}
    # The newline is drawn, not printed, and starts a new row of tokens.
    assert "↵" in ANSI.sub("", text_rows[0])


def test_ids_line_up_under_their_tokens(tok):
    out = render_ansi(tok, "the cat sat 人人", width=200, color=False)
    text_row, id_row = out.split("\n")[:2]
    assert [display_width(c) for c in text_row.split("|")] == [display_width(c) for c in id_row.split("|")]


def test_wrapping_and_plain_modes(tok):
    long = "the cat sat on the mat " * 20
    out = render_ansi(tok, long, width=40)
    assert all(len(ANSI.sub("", line)) <= 40 for line in out.split("\n"))
    plain = render_ansi(tok, "the cat", ids=False, color=False)
    assert "\x1b" not in plain
    assert plain.rstrip("\n").rstrip("|").split("|") == [p for p, _ in token_pieces(tok, tok.encode_ordinary("the cat"))]


def test_html_spans_escape_text_and_carry_ids(tok):
    ids = tok.encode_ordinary(TEXT)
    page = render_html(tok, TEXT)
    assert page.count("<ruby") == len(ids)
    assert [int(x) for x in re.findall(r"<rt[^>]*>(\d+)</rt>", page)] == ids
    assert "<b>" not in page and "&lt;" in page and "&amp;" in page
    assert not re.search(r"(?:src|href)=", page)
    assert render_html(tok, "the cat", ids=False).count("<ruby") == 0


def test_display_width():
    assert display_width("abc") == 3
    assert display_width("人人") == 4
    assert display_width("e\u0301") == 1
