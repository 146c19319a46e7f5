"""The one-call Rust path of simple pipelines (Pipeline._cuts_for: added tokens cut out, one
literal replacement, BPE), against the general Python path and against `tokenizers`, on Gemma 3
(6,406 added tokens, among them "\\n", space runs and HTML tags) and on small pipelines built here."""

from __future__ import annotations

import random

import pytest

from test_hf_parity import both

from toksmith import normalizers as norm
from toksmith import pre_tokenizers as pre
from toksmith.models import BPE
from toksmith.pipeline import AddedToken, Pipeline
from toksmith.tokenizer import Tokenizer


def general_path(pipeline: Pipeline):
    """The same pipeline with the one-call path turned off."""
    pipeline._cuts.clear()
    original = pipeline._make_cuts
    pipeline._make_cuts = lambda allowed: None
    return original


def random_texts(added: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["the", "Tokenizer", "naïve", "日本語", "x", "<b>", "</p>", "a>", "</", "1234", "é", "\U0001f600", "", "▁"]
    spaces = [" ", "  ", "   ", "\n", "\n\n", "\t", " \n ", "\u3000", "\r\n"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randrange(1, 40)):
            r = rng.random()
            parts.append(rng.choice(added) if r < 0.25 else rng.choice(spaces) if r < 0.55 else rng.choice(words))
        out.append("".join(parts))
    return out


def test_gemma3_takes_the_one_call_path_and_gives_the_general_paths_ids():
    ours, ref = both("gemma3")
    pipeline = ours._pipeline
    assert pipeline._cuts_for(frozenset()) is not None
    added = [t.content for t in pipeline.added_tokens]
    rng = random.Random(1)
    texts = random_texts(rng.sample(added, 300) + ["<bos>", "<eos>", "<start_of_turn>", "<mask>"], 400, seed=2)
    settings = [(frozenset(), False), (frozenset(ours.special_tokens), True), (frozenset({"<bos>"}), True)]
    fast = {s: ([pipeline.encode(t, allowed_special=s[0], add_special_tokens=s[1]) for t in texts],
                pipeline.encode_batch(texts, allowed_special=s[0], add_special_tokens=s[1], num_threads=2))
            for s in settings}
    original = general_path(pipeline)
    try:
        for (allowed, add), (one_by_one, batch) in fast.items():
            slow = [pipeline.encode(t, allowed_special=allowed, add_special_tokens=add) for t in texts]
            assert one_by_one == slow
            assert batch == slow
    finally:
        pipeline._make_cuts = original
        pipeline._cuts.clear()
    # And `tokenizers` itself (it always matches the special tokens).
    all_specials = fast[settings[1]][0]
    assert all_specials == [e.ids for e in ref.encode_batch(texts, add_special_tokens=True)]


def toy_pipeline(**changes) -> Pipeline:
    vocab = {c: i for i, c in enumerate(["<unk>", "▁", "a", "b", " ", "▁a", "ab", "▁ab", "<s>", "\n", "<t>"])}
    model = BPE(vocab, [("▁", "a"), ("a", "b"), ("▁a", "b")], unk_token="<unk>")
    parts = dict(normalizer=norm.Replace(" ", "▁"), pre_tokenizer=pre.Split(" ", "merged_with_previous"),
                 added_tokens=[AddedToken("<s>", 8, special=True), AddedToken("\n", 9, special=False),
                               AddedToken("<t>", 10, special=False)])
    parts.update(changes)
    return Pipeline(model, **parts)


@pytest.mark.parametrize("changes, takes_it", [
    ({}, True),
    ({"normalizer": None, "pre_tokenizer": None}, True),
    ({"normalizer": norm.Replace("a", "b")}, False),  # the split on " " would cut the pieces
    ({"normalizer": norm.Replace(" ", "▁ ")}, False),  # the replacement brings " " back
    ({"normalizer": norm.Lowercase()}, False),
    ({"pre_tokenizer": pre.Split("a", "removed")}, False),
    ({"added_tokens": [AddedToken("<t>", 10, special=False, lstrip=True)]}, False),
    ({"added_tokens": [AddedToken("<t>", 10, special=False, normalized=True)]}, False),
])
def test_the_path_is_taken_only_where_it_gives_the_same_ids(changes, takes_it):
    pipeline = toy_pipeline(**changes)
    assert (pipeline._cuts_for(frozenset()) is not None) == takes_it
    texts = random_texts(["<s>", "\n", "<t>", "ab", "a b"], 200, seed=3)
    tok = Tokenizer.from_pipeline(pipeline)
    fast = [tok.encode(t, allowed_special="all") for t in texts] + tok.encode_batch(texts, allowed_special="all")
    general_path(pipeline)
    slow = [tok.encode(t, allowed_special="all") for t in texts]
    assert fast == slow + slow


def test_matchers_kept_per_allowed_set_are_bounded():
    """Each set of allowed special tokens gets its matchers; ever new sets do not pile up."""
    from toksmith.pipeline import KEPT_MATCHERS

    pipeline = toy_pipeline(added_tokens=[AddedToken(f"<s{i}>", 8, special=True) for i in range(3)] +
                            [AddedToken("\n", 9, special=False)])
    tok = Tokenizer.from_pipeline(pipeline)
    text = "ab <s0>\n<s1> a<s2>"
    for k in range(3 * KEPT_MATCHERS):
        allowed = {f"<s{i}>" for i in range(3) if k >> i & 1}
        ids = tok.encode(text, allowed_special=allowed, disallowed_special=())
        assert ids.count(8) == len(allowed)  # each allowed one is its id, the others plain text
        pipeline._cuts_for(frozenset({f"<x{k}>"}))  # a new set each time
    assert len(pipeline._cuts) <= KEPT_MATCHERS and len(pipeline._matchers) <= KEPT_MATCHERS


def test_many_threads_with_ever_new_allowed_sets():
    """Threads encoding at once, each with sets of allowed special tokens the pipeline has not
    kept (more sets than it keeps): every call gives the ids of a call made alone. The kept
    values were a dict checked, then read, and its oldest entry dropped by any thread: another
    thread dropping that entry in between raised KeyError (8 threads, 300 calls each, failed
    every run)."""
    import sys
    import threading

    from toksmith.pipeline import KEPT_MATCHERS

    specials = [f"<s{i}>" for i in range(8)]
    pipeline = toy_pipeline(added_tokens=[AddedToken(s, 8 + i, special=True) for i, s in enumerate(specials)])
    tok = Tokenizer.from_pipeline(pipeline)
    text = "ab <s0> a<s3>b <s7>"
    sets = [frozenset(s for i, s in enumerate(specials) if k >> i & 1) for k in range(4 * KEPT_MATCHERS)]
    expected = {}
    for allowed in sets:
        expected[allowed] = tok.encode(text, allowed_special=allowed, disallowed_special=())
        pipeline._matchers.clear()
        pipeline._cuts.clear()
        pipeline._whole.clear()
    failures: list[str] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(300):
                allowed = rng.choice(sets)
                if tok.encode(text, allowed_special=allowed, disallowed_special=()) != expected[allowed]:
                    failures.append(f"wrong ids for {sorted(allowed)}")
        except Exception as e:  # noqa: BLE001 - any exception is the failure reported
            failures.append(repr(e))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures, failures[:3]
    assert len(pipeline._matchers) <= KEPT_MATCHERS and len(pipeline._cuts) <= KEPT_MATCHERS
