"""Tests for toksmith.analysis.cli: the compare, cost, audit and show subcommands."""
import argparse
import csv
import json

import pytest

import toksmith
from toksmith.analysis.cli import count, main, register

LINES = {
    "eng_Latn": ["All human beings are born free.", "Everyone has the right to life."],
    "fra_Latn": ["Tous les êtres humains naissent libres.", "Tout individu a droit à la vie."],
    "zho_Hans": ["人人生而自由。", "人人有权享有生命。"],
}


def parser():
    p = argparse.ArgumentParser(prog="toksmith")
    register(p.add_subparsers(dest="command", required=True))
    return p


def run(capsys, *argv):
    args = parser().parse_args(list(argv))
    code = args.func(args)
    return code, capsys.readouterr().out


@pytest.fixture
def files(tmp_path):
    corpus = tmp_path / "flores"
    corpus.mkdir()
    for code, lines in LINES.items():
        (corpus / f"{code}.dev").write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = toksmith.train([t for lines in LINES.values() for t in lines] * 5, vocab_size=300, special_tokens=["<|end|>"])
    tok.save(tmp_path / "tok.json")
    return tmp_path, tok


@pytest.mark.parametrize("command", ["compare", "cost", "audit", "show"])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        parser().parse_args([command, "--help"])
    assert e.value.code == 0
    assert f"usage: toksmith {command}" in capsys.readouterr().out


def test_compare_writes_every_format(files, capsys):
    tmp, tok = files
    code, out = run(capsys, "compare", str(tmp / "tok.json"), "--corpus", str(tmp / "flores"),
                    "--html", str(tmp / "r.html"), "--json", str(tmp / "r.json"), "--csv", str(tmp / "r.csv"))
    assert code == 0 and "parity" in out and "zho_Hans" in out
    report = json.loads((tmp / "r.json").read_text(encoding="utf-8"))
    assert report["reference_language"] == "eng_Latn"
    assert report["tokenizers"]["tok"]["languages"]["zho_Hans"]["word_rule"] == "characters"
    rows = list(csv.DictReader((tmp / "r.csv").open(encoding="utf-8")))
    assert len(rows) == 3
    assert (tmp / "r.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_compare_language_selection(files, capsys):
    tmp, _ = files
    code, out = run(capsys, "compare", str(tmp / "tok.json"), "--corpus", str(tmp / "flores"),
                    "--languages", "zho", "--reference-language", "fra", "--json", str(tmp / "r.json"), "--quiet")
    assert code == 0 and out == ""
    report = json.loads((tmp / "r.json").read_text(encoding="utf-8"))
    assert list(report["languages"]) == ["fra_Latn", "zho_Hans"]


def test_cost_reproduces_llama3(capsys, tmp_path):
    code, out = run(capsys, "cost", "--vocab-size", "128256", "--d-model", "4096", "--params", "8.03B",
                    "--vocab-sizes", "32000", "--json", str(tmp_path / "c.json"))
    assert code == 0 and "525.3M" in out and "1.05B" in out
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    assert [r["vocab_size"] for r in rows] == [128256, 32000]
    assert rows[0]["embedding_params"] == 128256 * 4096


def test_cost_with_a_tokenizer_and_corpus(files, capsys):
    tmp, tok = files
    code, out = run(capsys, "cost", "-t", str(tmp / "tok.json"), "--d-model", "64", "--corpus", str(tmp / "flores"))
    tokens = sum(len(tok.encode_ordinary(t)) for lines in LINES.values() for t in lines)
    assert code == 0 and f"{tokens:,} tokens" in out and f"{tok.vocab_size:,}" in out


def test_audit_and_show(files, capsys):
    tmp, tok = files
    code, out = run(capsys, "audit", str(tmp / "tok.json"), "--corpus", str(tmp / "flores"), "--json", str(tmp / "a.json"))
    assert code == 0 and "never_emitted" in out
    assert json.loads((tmp / "a.json").read_text(encoding="utf-8"))["vocab_size"] == tok.vocab_size
    code, out = run(capsys, "show", "-t", str(tmp / "tok.json"), "All human beings", "--color", "never",
                    "--html", str(tmp / "s.html"))
    ids = tok.encode_ordinary("All human beings")
    assert code == 0 and [int(x) for x in out.split("\n")[1].replace("|", " ").split()] == ids
    assert (tmp / "s.html").read_text(encoding="utf-8").count("<ruby") == len(ids)


def test_errors_become_messages(files, capsys):
    tmp, _ = files
    assert main(["compare", str(tmp / "tok.json"), "--corpus", str(tmp / "flores"), "--languages", "xyz"]) == 2
    err = capsys.readouterr().err
    assert "toksmith compare: error:" in err and "'xyz'" in err
    assert main(["cost", "--d-model", "64"]) == 2
    assert "--vocab-size" in capsys.readouterr().err


def test_count_parsing():
    assert count("128256") == count("128_256") == count("128,256") == 128256
    assert count("8B") == 8_000_000_000 and count("0.6B") == 600_000_000 and count("8.03e9") == 8_030_000_000
    with pytest.raises(argparse.ArgumentTypeError):
        count("lots")
