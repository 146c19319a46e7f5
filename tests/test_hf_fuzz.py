"""Mutated real tokenizer.json files: the loader loads them or raises FormatError, nothing else."""

import json
import random

import pytest

import toksmith
from toksmith.formats.hf import from_hf_dict

from conftest import data_path


def mutate(value, rng):
    """One random structural change somewhere in a JSON value."""
    if isinstance(value, dict) and value:
        key = rng.choice(list(value))
        op = rng.randrange(4)
        if op == 0:
            del value[key]
        elif op == 1:
            value[key] = rng.choice([None, 0, -1, 10**9, "x", [], {}, True, 1.5])
        else:
            mutate(value[key], rng)
    elif isinstance(value, list) and value:
        i = rng.randrange(len(value))
        op = rng.randrange(4)
        if op == 0:
            del value[i]
        elif op == 1:
            value[i] = rng.choice([None, 0, -1, "x", ["a"], {"type": "?"}])
        elif op == 2:
            value.append(value[i])  # duplicates
        else:
            mutate(value[i], rng)


@pytest.mark.slow
def test_structural_mutations_of_bert_tokenizer_json():
    original = json.loads(data_path("tokenizers", "hf", "bert-base-uncased", "tokenizer.json").read_text(encoding="utf-8"))
    # Keep it small so each load is quick: the first 2,000 vocabulary entries and [UNK].
    vocab = dict(list(original["model"]["vocab"].items())[:2000])
    original["model"]["vocab"] = vocab
    original["added_tokens"] = [t for t in original["added_tokens"] if t["content"] in vocab]
    original["post_processor"] = None
    from_hf_dict(json.loads(json.dumps(original)))  # the trimmed file itself loads
    rng = random.Random(7)
    loaded = refused = 0
    for _ in range(150):
        d = json.loads(json.dumps(original))
        for _ in range(rng.randint(1, 3)):
            mutate(d, rng)
        try:
            tok = from_hf_dict(d)
            tok.encode("Hello, world! [UNK] 日本", disallowed_special=())
            loaded += 1
        except toksmith.FormatError:
            refused += 1
        except toksmith.TokenizerError:
            refused += 1  # e.g. EncodeError for a text the mutated vocabulary cannot encode
    assert loaded and refused


def test_byte_mutations_of_tokenizer_json(tmp_path):
    raw = data_path("tokenizers", "hf", "bert-base-uncased", "tokenizer.json").read_bytes()[:60_000]
    rng = random.Random(3)
    for k in range(40):
        b = bytearray(raw)
        i = rng.randrange(len(b))
        b[i:i + rng.randint(0, 20)] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 5)))
        path = tmp_path / f"m{k}.json"
        path.write_bytes(bytes(b))
        with pytest.raises(toksmith.FormatError):
            toksmith.load(path)  # cut short at 60 KB: never valid JSON
