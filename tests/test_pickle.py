"""Tokenizers pickle (multiprocessing with spawn, DataLoader workers, Ray): each kind, loaded or
trained, encodes and decodes after a round trip exactly as before. The Rust models are not
pickled; they are made again from the tokens and merges the pickle carries."""

import copy
import multiprocessing
import pickle

import pytest

import toksmith

from conftest import data_path

TEXT = "Hello world! The lowest newest 你好世界 2025 ﾮﾮ I'm here.\n\n  tabs\tand <|endoftext|> <s> [CLS] émigré ①"

LOADED = [
    ("tokenizers", "tiktoken", "o200k_base"),
    ("tokenizers", "tiktoken", "r50k_base"),
    ("tokenizers", "hf", "gpt2"),
    ("tokenizers", "hf", "bert-base-uncased", "tokenizer.json"),
    ("tokenizers", "hf", "llama3", "tokenizer.json.xz"),
    ("tokenizers", "hf", "gemma3", "tokenizer.json.xz"),
    ("tokenizers", "sentencepiece", "mistral-7b-v0.1.model"),
    ("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"),
    ("tokenizers", "gguf", "ggml-vocab-llama-bpe.gguf.xz"),
    ("tokenizers", "gguf", "ggml-vocab-llama-spm.gguf.xz"),
    ("tokenizers", "gguf", "ggml-vocab-bert-bge.gguf.xz"),
]


def load(parts):
    if parts[1] == "tiktoken":
        return toksmith.load(parts[2], tiktoken_dir=data_path(*parts[:2]))
    return toksmith.load(data_path(*parts))


def same_behaviour(a, b):
    ids = a.encode(TEXT, disallowed_special=())
    assert b.encode(TEXT, disallowed_special=()) == ids
    assert b.encode(TEXT, allowed_special="all") == a.encode(TEXT, allowed_special="all")
    assert b.decode(ids) == a.decode(ids)
    assert b.encode_batch([TEXT, "x"], disallowed_special=()) == [ids, a.encode("x")]
    assert b.vocab_size == a.vocab_size and b.special_tokens == a.special_tokens


@pytest.mark.parametrize("parts", LOADED, ids=[p[-1] for p in LOADED])
def test_loaded_tokenizers_survive_pickle_and_deepcopy(parts):
    tok = load(parts)
    same_behaviour(tok, pickle.loads(pickle.dumps(tok)))
    same_behaviour(tok, copy.deepcopy(tok))


@pytest.mark.parametrize("options", [
    dict(vocab_size=300), dict(vocab_size=300, algorithm="superbpe", transition=280),
    dict(vocab_size=60, level="char", end_of_word_suffix="</w>"), dict(vocab_size=80, algorithm="wordpiece"),
    dict(vocab_size=30, algorithm="unigram"), dict(vocab_size=120, level="char", pattern="metaspace"),
], ids=["bpe", "superbpe", "char", "wordpiece", "unigram", "sentencepiece-bpe"])
def test_trained_tokenizers_survive_pickle(options):
    tok = toksmith.train(["low lower lowest newest widest the model is the lowest risk. 你好世界 2025"] * 50, **options)
    back = pickle.loads(pickle.dumps(tok))
    text = "the lowest newest 你好 risk"
    assert back.encode(text) == tok.encode(text) and back.decode(tok.encode(text)) == tok.decode(tok.encode(text))
    assert back.to_dict() == tok.to_dict() if tok.pipeline is None else back.vocab_size == tok.vocab_size


def _encode_in_child(tok, text):
    return tok.encode(text, disallowed_special=())


def test_a_spawned_process_encodes_with_a_pickled_tokenizer():
    tok = load(("tokenizers", "tiktoken", "r50k_base"))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_encode_in_child, (tok, TEXT)) == tok.encode(TEXT, disallowed_special=())
