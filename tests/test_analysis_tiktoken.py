"""toksmith.analysis on real OpenAI encodings (through tiktoken) and the real UDHR text.

toksmith.load does not read .tiktoken files yet, so a small adapter gives a tiktoken.Encoding
the tokenizer interface the analysis functions use.
"""
import pytest

from toksmith.analysis import audit, compare, cost, load_corpus
from toksmith.analysis.corpora import data_dir, udhr_path
from toksmith.patterns import resolve

tiktoken = pytest.importorskip("tiktoken")
import tiktoken.load  # noqa: E402

TIKTOKEN_DIR = data_dir() / "tokenizers" / "tiktoken"
needs_data = pytest.mark.skipif(
    not (TIKTOKEN_DIR / "cl100k_base.tiktoken").is_file() or not udhr_path().is_file(),
    reason=f"shared data (tiktoken files, UDHR) not found under {data_dir()} (set TOKSMITH_DATA_DIR)",
)

# Public constants of the OpenAI encodings (tiktoken_ext/openai_public.py).
SPECIALS = {
    "r50k_base": {"<|endoftext|>": 50256},
    "cl100k_base": {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                    "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276},
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}
PATTERN = {"r50k_base": "gpt2", "cl100k_base": "cl100k", "o200k_base": "o200k"}


class TiktokenAdapter:
    """The toksmith tokenizer interface over a tiktoken.Encoding."""

    def __init__(self, name: str):
        self.name = name
        self.ranks = tiktoken.load.load_tiktoken_bpe(str(TIKTOKEN_DIR / f"{name}.tiktoken"))
        pattern = resolve(PATTERN[name])[1]
        if name == "r50k_base":
            from tiktoken_ext import openai_public

            pattern = openai_public.r50k_pat_str
        self.enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=self.ranks, special_tokens=SPECIALS[name])
        self.special_tokens = dict(SPECIALS[name])
        self.vocab_size = self.enc.n_vocab

    def encode_ordinary(self, text):
        return self.enc.encode_ordinary(text)

    def decode_bytes(self, ids):
        return self.enc.decode_bytes(list(ids))

    def token_bytes(self, token_id):
        return self.enc.decode_single_token_bytes(token_id)


@pytest.fixture(scope="module")
def encodings():
    return {name: TiktokenAdapter(name) for name in ("r50k_base", "cl100k_base", "o200k_base")}


@pytest.fixture(scope="module")
def report(encodings):
    return compare(encodings, "udhr")


@needs_data
def test_counts_agree_with_tiktoken_itself(encodings, report):
    corpus = load_corpus("udhr")
    for name, tok in encodings.items():
        for code in ("eng", "mya", "cmn_hans"):
            expected = sum(len(tok.enc.encode_ordinary(t)) for t in corpus[code].segments.values())
            assert report.metric("tokens", name, code) == expected


@needs_data
def test_newer_encodings_are_fairer_across_languages(report):
    # o200k was built for many languages: lower mean parity and lower Gini than r50k (GPT-2).
    s = {n: report.tokenizers[n]["summary"] for n in report.tokenizer_names}
    assert s["o200k_base"]["mean_parity"] < s["cl100k_base"]["mean_parity"] < s["r50k_base"]["mean_parity"]
    assert s["o200k_base"]["gini_parity"] < s["r50k_base"]["gini_parity"]
    for name in report.tokenizer_names:
        assert report.metric("parity", name, "eng") == 1.0
        # Burmese costs more tokens than English for the same articles with every one of them.
        assert report.metric("parity", name, "mya") > 1.5
        assert report.metric("bytes_per_token", name, "eng") > 4


@needs_data
def test_vocabulary_holes_and_special_tokens_of_cl100k(encodings):
    tok = encodings["cl100k_base"]
    found = audit(tok, ["All human beings are born free."]).to_dict()
    # Ids below n_vocab that are neither a mergeable rank nor a special token.
    holes = set(range(tok.vocab_size)) - set(tok.ranks.values()) - set(SPECIALS["cl100k_base"].values())
    assert found["missing_ids"]["count"] == len(holes) > 0
    assert found["special_tokens"]["repeated_ids"]["count"] == 0
    assert found["special_tokens"]["ordinary_single_token"]["count"] == 0
    assert found["merges"]["checked"] is False  # tiktoken keeps ranks, not merges
    # All 128 bytes 0x80-0xFF are tokens that are not UTF-8 on their own.
    assert found["invalid_utf8"]["count"] >= 128
    never = found["never_emitted"]
    assert never["count"] == found["ordinary_tokens"] - len(set(tok.encode_ordinary("All human beings are born free.")))


@needs_data
def test_cost_counts_the_corpus_in_the_tokenizers_tokens(encodings):
    tok = encodings["o200k_base"]
    texts = load_corpus("udhr", ["eng"])["eng"].segments.values()
    c = cost(tok.vocab_size, 4096, tokenizer=tok, corpus=list(texts))
    assert c.corpus["tokens"] == sum(len(tok.enc.encode_ordinary(t)) for t in texts)
    assert c.corpus["output_flops"] == c.corpus["tokens"] * 2 * 4096 * tok.vocab_size


def udhr_table(names=("r50k_base", "cl100k_base", "o200k_base")):
    """The comparison table for the README (run: python tests/test_analysis_tiktoken.py)."""
    toks = {n: TiktokenAdapter(n) for n in names}
    import toksmith

    # A small English-only BPE, trained on Botchan (not on the UDHR it is measured on).
    toks["toksmith-botchan-8k"] = toksmith.train(data_dir() / "corpora/en/botchan.txt", vocab_size=8000)
    return compare(toks, "udhr").to_table()


if __name__ == "__main__":
    print(udhr_table())
