"""tiktoken's API on toksmith tokenizers: each method and property gives what tiktoken.Encoding
gives for the same encoding, on real text; lookups tiktoken answers with KeyError raise
UnknownTokenError (a KeyError and a TokenizerError)."""

import hashlib
import lzma
import shutil

import pytest

import toksmith
from toksmith.errors import DecodeError, TokenizerError, UnknownTokenError

from conftest import DATA_DIR, data_path
from test_tiktoken_parity import NAMES, pair

tiktoken = pytest.importorskip("tiktoken")


def handbook_lines(n_lines=400):
    """Lines of the Debian Handbook in several scripts (multi-byte characters, split tokens)."""
    texts = []
    for lang in ["en-US", "ru-RU", "ja-JP", "ar-MA", "vi-VN"]:
        path = DATA_DIR / "corpora" / "debian-handbook" / f"{lang}.txt.xz"
        if not path.exists():
            pytest.skip(f"real data not available: {path}")
        with lzma.open(path, "rt", encoding="utf-8") as f:
            texts += [line for line in f.read(400_000).splitlines() if line.strip()][:n_lines]
    return texts


@pytest.mark.parametrize("name", NAMES)
def test_properties_match_tiktoken(name):
    ours, theirs = pair(name)
    assert ours.name == theirs.name
    assert ours.n_vocab == theirs.n_vocab
    assert ours.max_token_value == theirs.max_token_value
    assert ours.eot_token == theirs.eot_token
    assert ours.special_tokens_set == theirs.special_tokens_set
    for i in [0, 255, 1000, theirs.eot_token, theirs.max_token_value]:
        assert ours.is_special_token(i) == theirs.is_special_token(i)


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_single_tokens_and_bytes_match_tiktoken(name):
    ours, theirs = pair(name)
    ids = sorted(set(theirs.encode("\n".join(handbook_lines(50)))))
    assert ours.decode_tokens_bytes(ids) == theirs.decode_tokens_bytes(ids)
    for i in ids[::7]:
        data = theirs.decode_single_token_bytes(i)
        assert ours.decode_single_token_bytes(i) == data
        assert ours.encode_single_token(data) == theirs.encode_single_token(data) == i
    for special, i in theirs._special_tokens.items():
        assert ours.encode_single_token(special) == theirs.encode_single_token(special) == i
        assert ours.decode_single_token_bytes(i) == theirs.decode_single_token_bytes(i)
    assert ours.token_byte_values() == theirs.token_byte_values()


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_lookups_that_tiktoken_refuses_raise_key_errors(name):
    ours, theirs = pair(name)
    used = set(theirs._mergeable_ranks.values()) | set(theirs._special_tokens.values())
    unused = min(set(range(theirs.max_token_value)) - used, default=theirs.max_token_value + 1)
    for call, arg in [("encode_single_token", "hello world"), ("encode_single_token", b"\xff\xfe\xfd"),
                      ("decode_single_token_bytes", unused), ("decode_single_token_bytes", theirs.max_token_value + 5)]:
        with pytest.raises(KeyError):
            getattr(theirs, call)(arg)
        with pytest.raises(UnknownTokenError) as info:
            getattr(ours, call)(arg)
        assert isinstance(info.value, KeyError) and isinstance(info.value, TokenizerError)
        assert str(info.value) == info.value.args[0]  # said as written, not quoted like a key
    with pytest.raises(DecodeError):
        ours.decode_single_token_bytes("1")


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_decode_with_offsets_matches_tiktoken(name):
    ours, theirs = pair(name)
    checked = 0
    for line in handbook_lines():
        ids = theirs.encode(line)
        assert ours.decode_with_offsets(ids) == theirs.decode_with_offsets(ids)
        checked += any(0x80 <= theirs.decode_single_token_bytes(i)[0] < 0xC0 for i in ids)
    assert checked > 20  # tokens starting inside a character were met
    assert ours.decode_with_offsets([]) == theirs.decode_with_offsets([]) == ("", [])
    # Invalid UTF-8: tiktoken raises UnicodeDecodeError; ours a DecodeError (both ValueErrors).
    half = theirs.encode("你")[:1] if len(theirs.encode("你")) > 1 else [theirs.encode_single_token(b"\xe4")]
    with pytest.raises(ValueError):
        theirs.decode_with_offsets(half)
    with pytest.raises(DecodeError):
        ours.decode_with_offsets(half)


def test_decode_with_offsets_refuses_decoders_that_rewrite():
    path = data_path("tokenizers", "hf", "bert-base-uncased", "tokenizer.json")
    if not path.exists():
        pytest.skip(f"real data not available: {path}")
    bert = toksmith.load(path)
    with pytest.raises(DecodeError, match="joined"):
        bert.decode_with_offsets(bert.encode("hello, world"))


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_batches_match_tiktoken(name):
    ours, theirs = pair(name)
    texts = handbook_lines(40) + ["<|endoftext|> is plain text here"]
    expected = theirs.encode_ordinary_batch(texts, num_threads=2)
    assert ours.encode_ordinary_batch(texts, num_threads=2) == expected
    assert ours.decode_batch(expected) == theirs.decode_batch(expected)
    assert ours.decode_bytes_batch(expected) == theirs.decode_bytes_batch(expected)
    cut = [ids[:-1] for ids in expected if ids]  # some end inside a character
    assert ours.decode_batch(cut, errors="replace") == theirs.decode_batch(cut, errors="replace")


def test_encoding_for_model_matches_tiktoken():
    for model in ["gpt-4o", "gpt-4o-2024-05-13", "gpt-4", "gpt-4-0613", "gpt-3.5-turbo", "gpt-3.5-turbo-16k",
                  "text-embedding-3-small", "text-davinci-003", "davinci", "o1", "o3-mini", "gpt-4.1-nano",
                  "gpt-5", "gpt-oss-20b", "ft:gpt-4o-mini:org::id", "code-davinci-edit-001", "gpt2"]:
        assert toksmith.encoding_name_for_model(model) == tiktoken.encoding_name_for_model(model), model
    with pytest.raises(KeyError):
        tiktoken.encoding_name_for_model("llama-3")
    with pytest.raises(UnknownTokenError, match="get_encoding"):
        toksmith.encoding_name_for_model("llama-3")
    with pytest.raises(UnknownTokenError, match="o200k_base"):
        toksmith.get_encoding("o200k")
    assert set(toksmith.list_encoding_names()) >= set(NAMES)
    tok = toksmith.encoding_for_model("gpt-4o", tiktoken_dir=data_path("tokenizers", "tiktoken"))
    assert tok.name == "o200k_base" and tok.encode("hello world") == pair("o200k_base")[1].encode("hello world")


def test_named_encoding_found_in_tiktokens_download_cache(tmp_path, monkeypatch):
    """With no tiktoken_dir and no $TOKSMITH_TIKTOKEN_DIR, the copy tiktoken downloaded (named by the
    SHA-1 of its URL) is used when its SHA-256 is the published file's."""
    source = data_path("tokenizers", "tiktoken", "cl100k_base.tiktoken")
    if not source.exists():
        pytest.skip(f"real data not available: {source}")
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    cached = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    shutil.copyfile(source, cached)
    monkeypatch.delenv("TOKSMITH_TIKTOKEN_DIR", raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    tok = toksmith.get_encoding("cl100k_base")
    text = "tiktoken's cache, read offline"
    assert tok.encode(text) == pair("cl100k_base")[1].encode(text)
    assert toksmith.load("cl100k_base").name == "cl100k_base"
    # A damaged copy is not used: the error names the variable to set.
    cached.write_bytes(source.read_bytes()[:-10])
    with pytest.raises(toksmith.FormatError, match="TOKSMITH_TIKTOKEN_DIR"):
        toksmith.get_encoding("cl100k_base")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    with pytest.raises(toksmith.FormatError, match="no intact copy"):
        toksmith.load("o200k_base")


def test_loaded_pipeline_answers_tiktoken_names():
    path = data_path("tokenizers", "hf", "gpt2")
    if not path.exists():
        pytest.skip(f"real data not available: {path}")
    gpt2 = toksmith.load(path)
    theirs = pair("r50k_base")[1]
    text = "Hello, wörld! 你好"
    ids = gpt2.encode(text)
    assert ids == theirs.encode(text)
    assert gpt2.decode_with_offsets(ids) == theirs.decode_with_offsets(ids)
    assert gpt2.encode_single_token(b" world") == theirs.encode_single_token(b" world")
    assert gpt2.eot_token == theirs.eot_token and gpt2.n_vocab == theirs.n_vocab
    assert gpt2.decode_tokens_bytes(ids) == theirs.decode_tokens_bytes(ids)


def test_pipeline_single_tokens_prefer_ordinary_pieces_and_offsets_take_iterators():
    """Gemma 3's byte-fallback pieces (<0x41>) have the bytes of ordinary pieces ("A"): the
    single token of "A" is the one encode gives, as Hugging Face's token_to_id. An iterator of
    ids decodes as its list does."""
    from test_hf_parity import both

    gemma, ref = both("gemma3")
    for text in ["A", " ", "z", "\n", "é", "hello"]:
        try:
            expected = ref.token_to_id(text.replace(" ", "▁"))
        except Exception:
            expected = None
        if expected is None:
            continue
        assert gemma.encode_single_token(text) == expected
        assert gemma.encode(text, add_special_tokens=False) == [expected]
    assert gemma.name == "gemma3"
    llama3, _ = both("llama3")
    ids = llama3.encode("Hello wörld, 你好", add_special_tokens=False)
    assert llama3.decode_with_offsets(iter(ids)) == llama3.decode_with_offsets(ids)
    assert llama3.decode_with_offsets(ids)[0] == "Hello wörld, 你好"
