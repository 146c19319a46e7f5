"""Worst-case inputs encode in about linear time: a guard against quadratic blow-ups.

The precise figures (time per byte relative to English, target at most 3x) are printed by
benchmarks/encode.py; this test only uses a generous bound (15x), far below what a quadratic
path would cost (hundreds of times English on these sizes)."""

import base64
import random
import time

import pytest

import toksmith

from conftest import data_path

N = 300_000


def inputs():
    rng = random.Random(0)
    return {
        "one letter": "a" * N,
        "caret": "^" * N,
        "digits": "".join(rng.choice("0123456789") for _ in range(N)),
        "spaces": " " * N,
        "random latin-1": bytes(rng.randrange(256) for _ in range(N)).decode("latin-1"),
        "chinese without spaces": "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(N // 3)),
    }


def per_byte(tok, text, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        tok.encode_ordinary(text)
        best = min(best, time.perf_counter() - start)
    return best / len(text.encode("utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_worst_case_inputs_are_near_linear(name):
    tok = toksmith.load(name, tiktoken_dir=data_path("tokenizers", "tiktoken"))
    english = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")[:N]
    base = per_byte(tok, english)
    for label, text in inputs().items():
        ids = tok.encode_ordinary(text)
        assert tok.decode(ids) == text
        ratio = per_byte(tok, text) / base
        assert ratio < 15, f"{label}: {ratio:.1f}x the time per byte of English"


def test_long_chunk_is_not_refused_and_matches_tiktoken():
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    path = data_path("tokenizers", "tiktoken", "cl100k_base.tiktoken")
    ours = toksmith.load(str(path))
    theirs = tiktoken.Encoding("cl100k", pat_str=ours.pattern, mergeable_ranks=load_tiktoken_bpe(str(path)),
                               special_tokens={})
    for text in ["a" * 20_000, " " * 20_000 + "x", "^" * 10_000, "你好世界" * 3000]:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


def test_run_where_every_merge_makes_a_lower_pair_is_linear_and_exact(tmp_path):
    """A vocabulary where "aaa" ranks before "aa": in a run of a, every merge of (a, a) makes
    (aa, a), which must merge first. The queue path used to queue the rest of its sweep again
    each time: 2^16 letters took 4 s, 2^18 over a minute. Exact against tiktoken on a run
    tiktoken can do, and 2^18 letters within a generous bound (a quadratic path needs minutes)."""
    tiktoken = pytest.importorskip("tiktoken")
    tokens = [bytes([b]) for b in range(256)] + [b"aaa", b"aa", b"ba", b"aab", b"aaab"]
    ranks = {t: r for r, t in enumerate(tokens)}
    path = tmp_path / "lower.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()))
    ours = toksmith.load(str(path), pattern="gpt2")
    theirs = tiktoken.Encoding("lower", pat_str=ours.pattern, mergeable_ranks=ranks, special_tokens={})
    rng = random.Random(3)
    for n in (1025, 3000, 4096 + 7):
        text = "".join("b" if rng.random() < 0.01 else "a" for _ in range(n))
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), n
    text = "a" * (1 << 18)
    start = time.perf_counter()
    ids = ours.encode_ordinary(text)
    elapsed = time.perf_counter() - start
    assert ours.decode(ids) == text
    assert elapsed < 5, f"{elapsed:.1f} s for 2^18 letters"


def test_dropout_on_long_chunks_is_near_linear():
    """BPE-dropout on one long chunk: every step used to rescan the chunk (32 KB of `a` took
    4.7 s with o200k, 1 MB would take over an hour). Long chunks now keep their candidates in a
    heap. With dropout 0 the result is plain BPE's; with any dropout the text decodes back; and
    a long run takes well under the time a quadratic path needs (a generous bound)."""
    tok = toksmith.load("o200k_base", tiktoken_dir=data_path("tokenizers", "tiktoken"))
    rng = random.Random(5)
    chunk = "".join(rng.choice("ab") for _ in range(5000))  # one chunk: letters only
    assert tok.encode(chunk, dropout=0.0, seed=1) == tok.encode(chunk)
    every_merge_dropped = tok.encode(chunk, dropout=1.0, seed=1)
    assert [tok.token_bytes(i) for i in every_merge_dropped] == [bytes([b]) for b in chunk.encode()]
    for text in ("a" * (1 << 18), "中" * (1 << 16)):
        start = time.perf_counter()
        ids = tok.encode(text, dropout=0.1, seed=3)
        elapsed = time.perf_counter() - start
        assert tok.decode(ids) == text
        assert len(ids) < len(text.encode())  # merges happened
        assert elapsed < 5, f"{elapsed:.1f} s for {len(text)} chars"
