"""Tests for toksmith.analysis.compare and corpora: metrics on parallel text, report formats."""
import csv
import io
import json
import re

import pytest

import toksmith
from toksmith.analysis import AnalysisError, DEFAULT_LANGUAGES, Document, ParallelCorpus, compare, load_corpus
from toksmith.analysis.corpora import udhr_path
from toksmith.analysis.metrics import count_words, detect_script, word_rule_for_script

PARALLEL = {
    "eng": ["All human beings are born free and equal in dignity and rights.",
            "Everyone has the right to life, liberty and security of person.",
            "No one shall be held in slavery or servitude."],
    "fra": ["Tous les êtres humains naissent libres et égaux en dignité et en droits.",
            "Tout individu a droit à la vie, à la liberté et à la sûreté de sa personne.",
            "Nul ne sera tenu en esclavage ni en servitude."],
    "cmn": ["人人生而自由,在尊严和权利上一律平等。",
            "人人有权享有生命、自由和人身安全。",
            "任何人不得使为奴隶或奴役。"],
    "mya": ["လူတိုင်းသည် တူညီ လွတ်လပ်သော ဂုဏ်သိက္ခာဖြင့် လည်းကောင်း၊",
            "လူတိုင်းသည် အသက်ရှင်သန်ရေး၊ လွတ်လပ်ရေးနှင့် လုံခြုံစိတ်ချရေး အခွင့်အရေး ရှိသည်။",
            "မည်သူကိုမျှ ကျွန်အဖြစ်ဖြင့်သော်လည်းကောင်း ကျွန်ခံ၍သော်လည်းကောင်း ထားခြင်း မပြုရ။"],
}

UDHR_MISSING = not udhr_path().is_file()
needs_udhr = pytest.mark.skipif(UDHR_MISSING, reason=f"shared UDHR corpus not found at {udhr_path()} (set TOKSMITH_DATA_DIR)")


def toy_corpus(drop=None):
    docs = []
    for code, lines in PARALLEL.items():
        segments = {str(i): t for i, t in enumerate(lines, 1)}
        if drop and code == drop[0]:
            del segments[drop[1]]
        docs.append(Document(code, segments))
    return ParallelCorpus("toy", docs)


@pytest.fixture(scope="module")
def toks():
    text = [t for lines in PARALLEL.values() for t in lines]
    small = toksmith.train(text * 5, vocab_size=300, pattern="o200k")
    large = toksmith.train(text * 5, vocab_size=600, pattern="o200k")
    return {"small": small, "large": large}


def test_reference_language_has_parity_one_and_identical_tokenizers_agree(toks):
    report = compare({"a": toks["small"], "b": toks["small"], "c": toks["large"]}, toy_corpus())
    d = report.to_dict()
    for name in ("a", "b", "c"):
        assert d["tokenizers"][name]["languages"]["eng"]["parity"] == 1.0
    assert d["tokenizers"]["a"] == d["tokenizers"]["b"]


def test_metrics_match_direct_counts(toks):
    tok = toks["small"]
    report = compare({"t": tok}, toy_corpus())
    for code, lines in PARALLEL.items():
        m = report.metric
        tokens = sum(len(tok.encode_ordinary(t)) for t in lines)
        n_bytes = sum(len(t.encode("utf-8")) for t in lines)
        rule = word_rule_for_script(detect_script("\n".join(lines)))
        words = sum(count_words(t, rule) for t in lines)
        assert m("tokens", "t", code) == tokens
        assert m("bytes_per_token", "t", code) == pytest.approx(n_bytes / tokens)
        assert m("characters_per_token", "t", code) == pytest.approx(sum(map(len, lines)) / tokens)
        assert m("tokens_per_word", "t", code) == pytest.approx(tokens / words)
        eng = sum(len(tok.encode_ordinary(t)) for t in PARALLEL["eng"])
        assert m("parity", "t", code) == pytest.approx(tokens / eng)
        distinct = {i for t in lines for i in tok.encode_ordinary(t)}
        assert m("vocab_utilization", "t", code) == pytest.approx(len(distinct) / tok.vocab_size)
        assert 0 < m("renyi_efficiency", "t", code) <= 1


def test_word_rule_is_recorded_per_language(toks):
    d = compare({"t": toks["small"]}, toy_corpus()).to_dict()
    rules = {code: d["tokenizers"]["t"]["languages"][code]["word_rule"] for code in PARALLEL}
    assert rules == {"eng": "whitespace", "fra": "whitespace", "cmn": "characters", "mya": "characters"}
    assert d["languages"]["cmn"]["script"] == "Han"
    assert d["languages"]["mya"]["script"] == "Myanmar"
    assert d["languages"]["cmn"]["words"] == sum(count_words(t, "characters") for t in PARALLEL["cmn"])


def test_parity_uses_only_segments_both_languages_have(toks):
    tok = toks["small"]
    report = compare({"t": tok}, toy_corpus(drop=("fra", "2")))
    fra = [PARALLEL["fra"][0], PARALLEL["fra"][2]]
    eng = [PARALLEL["eng"][0], PARALLEL["eng"][2]]
    expected = sum(len(tok.encode_ordinary(t)) for t in fra) / sum(len(tok.encode_ordinary(t)) for t in eng)
    assert report.metric("parity", "t", "fra") == pytest.approx(expected)
    assert report.metric("parallel_segments", "t", "fra") == 2
    assert report.metric("parallel_segments", "t", "cmn") == 3
    # The reference missing a segment narrows every other language's comparison too.
    report = compare({"t": tok}, toy_corpus(drop=("eng", "3")))
    assert report.metric("parallel_segments", "t", "mya") == 2


def test_gini_is_zero_when_every_language_costs_the_same(toks):
    same = ParallelCorpus("copies", [Document(c, {"1": PARALLEL["eng"][0], "2": PARALLEL["eng"][1]}) for c in ("eng", "xx", "yy")])
    summary = compare({"t": toks["small"]}, same).to_dict()["tokenizers"]["t"]["summary"]
    assert summary["gini_parity"] == 0.0
    assert summary["mean_parity"] == 1.0


def test_gini_and_summary_over_languages(toks):
    report = compare({"t": toks["small"]}, toy_corpus())
    s = report.to_dict()["tokenizers"]["t"]["summary"]
    parities = [report.metric("parity", "t", c) for c in PARALLEL]
    from toksmith.analysis import gini

    assert s["gini_parity"] == pytest.approx(gini(parities)) and s["gini_parity"] > 0
    assert s["max_parity"] == max(parities)
    assert s["max_parity_language"] == max(PARALLEL, key=lambda c: report.metric("parity", "t", c))
    assert s["tokens"] == sum(report.metric("tokens", "t", c) for c in PARALLEL)
    assert 0 < s["vocab_utilization"] <= 1


def test_per_script_aggregates(toks):
    d = compare({"t": toks["small"]}, toy_corpus()).to_dict()["tokenizers"]["t"]["scripts"]
    assert sorted(d["Latin"]["languages"]) == ["eng", "fra"]
    assert d["Han"]["word_rule"] == "characters"
    assert d["Latin"]["tokens"] == sum(len(toks["small"].encode_ordinary(t)) for c in ("eng", "fra") for t in PARALLEL[c])


def test_larger_vocabulary_compresses_its_training_text_better(toks):
    report = compare(toks, toy_corpus())
    for code in PARALLEL:
        assert report.metric("bytes_per_token", "large", code) >= report.metric("bytes_per_token", "small", code)


def test_report_formats(toks, tmp_path):
    report = compare(toks, toy_corpus())
    d = json.loads(json.dumps(report.to_dict()))
    assert d == report.to_dict()
    assert set(d["tokenizers"]) == {"small", "large"}
    assert set(d["tokenizers"]["small"]["languages"]) == set(PARALLEL)

    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert len(rows) == 2 * len(PARALLEL)
    row = next(r for r in rows if r["tokenizer"] == "small" and r["language"] == "mya")
    assert int(row["tokens"]) == report.metric("tokens", "small", "mya")
    assert row["word_rule"] == "characters"

    table = report.to_table()
    assert "parity" in table and "small" in table and "mya" in table
    assert re.search(r"^mya\s+Myanmar\s+characters", table, re.M)

    for suffix in ("json", "csv", "html", "txt"):
        report.save(tmp_path / f"r.{suffix}")
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8")) == report.to_dict()
    assert (tmp_path / "r.csv").read_text(encoding="utf-8") == report.to_csv()
    with pytest.raises(AnalysisError, match="report format"):
        report.save(tmp_path / "r.xlsx")


def assert_self_contained(page: str):
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?([^"' >]+)""", page, flags=re.I)
    assert all(r.startswith(("data:", "#")) for r in refs), refs
    assert not re.search(r"url\(\s*['\"]?(?!data:)", page)
    assert "<script" not in page.lower()
    assert "@import" not in page


def test_html_report_is_self_contained_with_plots_and_samples(toks):
    pytest.importorskip("matplotlib")
    report = compare(toks, toy_corpus(), sample_languages=["eng", "mya"])
    page = report.to_html()
    assert_self_contained(page)
    assert page.count('<img alt="plot" src="data:image/png;base64,') == 3
    # One colored token per token of each sample, for each tokenizer.
    expected = sum(len(toks[n].encode_ordinary(PARALLEL[c][0])) for n in toks for c in ("eng", "mya"))
    assert page.count("<ruby") == expected


def test_html_report_without_matplotlib_still_has_tables(toks, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    page = compare(toks, toy_corpus()).to_html()
    assert_self_contained(page)
    assert "matplotlib is not installed" in page and "<img" not in page
    assert "<table>" in page


def test_default_samples_include_the_reference_and_a_language_without_spaces(toks):
    report = compare(toks, toy_corpus())
    codes = [s["language"] for s in report.samples]
    assert codes[0] == "eng"
    assert any(report.languages[c]["word_rule"] == "characters" for c in codes)
    for sample in report.samples:
        for name, pieces in sample["tokens"].items():
            assert "".join(p for p, _ in pieces) == sample["text"]


def test_tokenizer_arguments(toks, tmp_path):
    path = tmp_path / "mine.json"
    toks["small"].save(path)
    report = compare([str(path), ("other", toks["large"])], toy_corpus())
    assert report.tokenizer_names == ["mine", "other"]
    assert report.to_dict()["tokenizers"]["mine"] == compare({"x": toks["small"]}, toy_corpus()).to_dict()["tokenizers"]["x"]
    with pytest.raises(AnalysisError, match="encode_ordinary"):
        compare([object()], toy_corpus())
    with pytest.raises(AnalysisError, match="no tokenizer"):
        compare([], toy_corpus())


def test_reference_language_handling(toks):
    report = compare(toks, toy_corpus(), reference_language="fra")
    assert report.reference_language == "fra"
    assert report.metric("parity", "small", "fra") == 1.0
    with pytest.raises(AnalysisError, match="reference language"):
        compare(toks, toy_corpus(), reference_language="deu")
    # Selecting languages keeps the reference even when it is not listed.
    report = compare(toks, toy_corpus(), languages=["mya", "cmn"])
    assert list(report.languages) == ["eng", "mya", "cmn"]


# ---------------------------------------------------------------------------- FLORES-style directories

def write_flores(tmp_path, drop_line=False):
    for code, name in (("eng", "eng_Latn"), ("fra", "fra_Latn"), ("cmn", "zho_Hans"), ("mya", "mya_Mymr")):
        lines = list(PARALLEL[code])
        if drop_line and code == "fra":
            lines = lines[:1]
        (tmp_path / f"{name}.devtest").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def test_flores_style_directory(toks, tmp_path):
    corpus = load_corpus(write_flores(tmp_path))
    assert corpus.codes == ["eng_Latn", "fra_Latn", "mya_Mymr", "zho_Hans"]
    assert corpus.resolve("eng") == "eng_Latn"
    assert len(corpus["zho_Hans"].segments) == 3
    report = compare(toks, str(tmp_path))
    assert report.reference_language == "eng_Latn"
    assert report.metric("parity", "small", "eng_Latn") == 1.0
    assert report.languages["zho_Hans"]["word_rule"] == "characters"
    assert report.languages["fra_Latn"]["word_rule"] == "whitespace"
    report = compare(toks, str(tmp_path), languages=["mya"])
    assert list(report.languages) == ["eng_Latn", "mya_Mymr"]


def test_unaligned_directory_is_refused(tmp_path):
    write_flores(tmp_path, drop_line=True)
    with pytest.raises(AnalysisError, match="not aligned"):
        load_corpus(tmp_path)


def test_corpus_errors(tmp_path):
    with pytest.raises(AnalysisError, match="not 'udhr', a file or a directory"):
        load_corpus(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AnalysisError, match="no files"):
        load_corpus(tmp_path / "empty")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nope": 1}\n', encoding="utf-8")
    with pytest.raises(AnalysisError, match="bad.jsonl:1"):
        load_corpus(bad)
    with pytest.raises(AnalysisError, match="is not in corpus"):
        toy_corpus().resolve("xyz")


def test_udhr_location_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TOKSMITH_DATA_DIR", str(tmp_path))
    with pytest.raises(AnalysisError, match="TOKSMITH_DATA_DIR"):
        load_corpus("udhr")


# ---------------------------------------------------------------------------- UDHR

@needs_udhr
def test_udhr_default_languages_exist_and_span_many_scripts():
    corpus = load_corpus("udhr")
    assert corpus.codes == list(DEFAULT_LANGUAGES)
    assert len(corpus) >= 12 and "eng" in corpus.codes and "mya" in corpus.codes
    scripts = {doc.script for doc in corpus.documents.values()}
    assert len(scripts) >= 8
    assert corpus["mya"].word_rule == "characters" and corpus["eng"].word_rule == "whitespace"
    for doc in corpus.documents.values():
        assert len(doc.segments) >= 30  # every default declaration is complete (articles 1-30)


@needs_udhr
def test_udhr_language_selection_and_aliases():
    corpus = load_corpus("udhr", ["deu", "ell", "tha"])
    assert corpus.codes == ["deu_1996", "ell_monotonic", "tha"]
    assert len(load_corpus("udhr", "all")) > 400
    with pytest.raises(AnalysisError, match="deu_1901"):
        load_corpus("udhr", "all").select(["deu_19"])


@needs_udhr
def test_udhr_compare_with_a_trained_tokenizer():
    corpus = load_corpus("udhr", ["eng", "fra", "cmn_hans", "mya"])
    tok = toksmith.train([corpus["eng"].text] * 3, vocab_size=400)
    report = compare({"eng-trained": tok}, corpus)
    assert report.metric("parity", "eng-trained", "eng") == 1.0
    # Trained on English only: every other language costs more tokens for the same articles.
    for code in ("fra", "cmn_hans", "mya"):
        assert report.metric("parity", "eng-trained", code) > 1.0
    assert report.languages["cmn_hans"]["word_rule"] == "characters"
    assert report.metric("parallel_segments", "eng-trained", "mya") == 31
