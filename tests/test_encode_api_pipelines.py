"""The encode/decode APIs of #4 on loaded tokenizers (tokenizer.json, SentencePiece .model, GGUF)
and tiktoken encodings: streaming decode, truncate, count with template tokens, typed errors.

Regressions of an audit that fuzzed these APIs against the reference libraries (session 25):
each test below failed before its fix.
"""

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toksmith

from conftest import data_path

STREAM_TOKENIZERS = [
    # (path parts, what is special about its decoder)
    (("tokenizers", "hf", "gemma3", "tokenizer.json.xz"), "ByteFallback: a run of byte tokens decodes all or nothing"),
    (("tokenizers", "hf", "bert-base-uncased", "tokenizer.json"), "WordPiece: ## continuations, clean-up"),
    (("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"), "SentencePiece: leading spaces, lone ▁ pieces"),
    (("tokenizers", "sentencepiece", "botchan_en_bpe_1000.model"), "SentencePiece BPE: control pieces"),
    (("tokenizers", "sentencepiece", "mistral-7b-v0.1.model"), "SentencePiece byte fallback"),
    (("tokenizers", "gguf", "ggml-vocab-bert-bge.gguf.xz"), "llama.cpp clean-up of spaces before ' and punctuation"),
    (("tokenizers", "gguf", "ggml-vocab-llama-spm.gguf.xz"), "llama.cpp SentencePiece with byte tokens"),
]

_loaded: dict = {}


def load(parts):
    path = data_path(*parts)
    if path not in _loaded:
        _loaded[path] = toksmith.load(path)
    return _loaded[path]


def tricky_ids(tok) -> list[int]:
    """Ids whose decoding depends on their neighbours: byte tokens, lone ▁, specials, quotes and
    punctuation, ## pieces."""
    pool = []
    for i in range(tok.vocab_size):
        try:
            name = tok.id_to_token(i)
        except toksmith.TokenizerError:
            continue
        if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", name) or name.strip("▁ ") in ("", "'", "s", "m", "re", "ve", ".", ",", "?", "!", "t", "##s"):
            pool.append(i)
    return pool + list(tok.special_tokens.values())


def streamed(tok, ids) -> str:
    dec = tok.stream_decoder()
    return "".join(dec.feed(i) for i in ids) + dec.flush()


@pytest.mark.parametrize("parts,why", STREAM_TOKENIZERS, ids=[p[-1] for p, _ in STREAM_TOKENIZERS])
def test_stream_decoder_equals_decode_on_loaded_tokenizers(parts, why):
    """Feeding ids one by one gives decode's text, for decoders whose output for a token depends on
    the tokens around it. Ids mostly from those tokens, the rest anywhere in the vocabulary."""
    tok = load(parts)
    pool = tricky_ids(tok)
    rng = random.Random(25)
    for _ in range(300):
        ids = [rng.choice(pool) if rng.random() < 0.8 else rng.randrange(tok.vocab_size) for _ in range(rng.randrange(1, 14))]
        assert streamed(tok, ids) == tok.decode(ids), (why, ids)


@pytest.mark.parametrize("parts,why", STREAM_TOKENIZERS, ids=[p[-1] for p, _ in STREAM_TOKENIZERS])
def test_stream_decoder_stays_linear_on_long_runs_of_one_id(parts, why):
    """A run of one id that has no anchor of its own (BERT's "##a" decodes as "##a" first, a
    control piece decodes to nothing) was decoded whole at every new id: 8,000 ids took 40 s.
    Counted in ids decoded, not timed: at most a few hundred per id fed, whatever the run."""
    tok = load(parts)
    rng = random.Random(8)
    pool = tricky_ids(tok)
    runs = rng.sample(pool, 4) + [i for i in (tok.token_to_id(t) for t in ("##a", "</s>", "<s>")) if i is not None]
    start = tok.encode("Hello world", add_special_tokens=False)
    decoded = []
    original = tok.decode

    def counting(ids, *args, **kwargs):
        decoded.append(len(ids))
        return original(ids, *args, **kwargs)

    for run in runs:
        ids = start + [run] * 1500 + start
        decoded.clear()
        tok.decode = counting
        try:
            text = streamed(tok, ids)
        finally:
            del tok.decode
        assert text == tok.decode(ids), (why, tok.id_to_token(run))
        assert sum(decoded) < 400 * len(ids), (why, tok.id_to_token(run), sum(decoded))


@pytest.mark.parametrize("parts,text,ids", [
    (("tokenizers", "hf", "gemma3", "tokenizer.json.xz"), "ﾮﾮ", None),
    (("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"), "a▁▁b", None),
    (("tokenizers", "sentencepiece", "botchan_en_bpe_1000.model"), None, [826, 1, 893]),
    (("tokenizers", "gguf", "ggml-vocab-bert-bge.gguf.xz"), "I'M", None),
])
def test_stream_decoder_audit_cases(parts, text, ids):
    tok = load(parts)
    ids = ids if ids is not None else tok.encode(text, disallowed_special=())
    assert streamed(tok, ids) == tok.decode(ids)


def test_stream_decoder_holds_a_byte_run_until_it_ends():
    """With ByteFallback, bytes that make a character can still be spoilt by the next byte token;
    the character is emitted once the run of byte tokens ends."""
    tok = load(("tokenizers", "hf", "gemma3", "tokenizer.json.xz"))
    byte = {int(m.group(1), 16): i for i in range(1000) if (m := re.fullmatch(r"<0x([0-9A-F]{2})>", tok.id_to_token(i)))}
    ids = [byte[0xE3], byte[0x81], byte[0x82], byte[0x80]]  # "あ", then a stray continuation byte
    assert tok.decode(ids[:3]) == "あ" and tok.decode(ids) == "\ufffd" * 4
    assert streamed(tok, ids) == tok.decode(ids)
    dec = tok.stream_decoder()
    assert [dec.feed(i) for i in ids[:3]] == ["", "", ""]
    assert dec.feed(tok.encode("x", add_special_tokens=False)[0]) == "あx"


def tiktoken_tok(name):
    key = ("tiktoken", name)
    if key not in _loaded:
        _loaded[key] = toksmith.load(name, tiktoken_dir=data_path("tokenizers", "tiktoken"))
    return _loaded[key]


def test_truncate_finds_a_prefix_that_encodes_differently_alone():
    """A prefix can fit where the text's own tokens at the cut do not: "  a" is " " + " a", but
    "  " alone is one token."""
    cl100k = tiktoken_tok("cl100k_base")
    assert cl100k.truncate("  a", 1) == "  "
    assert cl100k.truncate("bba", 1) == "bb"
    assert tiktoken_tok("r50k_base").truncate("<|endoftext|>", 3, disallowed_special=()) == "<|endo"


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab  \n.'é世")), max_size=40), max_tokens=st.integers(0, 12))
def test_truncate_is_the_longest_fitting_prefix_near_the_cut(text, max_tokens):
    tok = tiktoken_tok("cl100k_base")
    cut = tok.truncate(text, max_tokens, disallowed_special=())
    assert text.startswith(cut) and tok.count(cut, disallowed_special=()) <= max_tokens
    ids = tok.encode(text, disallowed_special=())
    window = len(tok.decode_bytes(ids[:max_tokens + 2]).decode("utf-8", errors="ignore"))
    for end in range(len(cut) + 1, min(window, len(text)) + 1):
        assert tok.count(text[:end], disallowed_special=()) > max_tokens, (text, max_tokens, cut, end)


def test_truncate_of_a_long_text_encodes_only_what_it_needs():
    tok = tiktoken_tok("cl100k_base")
    text = "the quick brown fox jumps over the lazy dog. " * 20000
    cut = tok.truncate(text, 100)
    assert tok.count(cut) <= 100 < tok.count(text[:len(cut) + 1])


TRUNCATE_TOKENIZERS = [("tokenizers", "hf", "bert-base-uncased", "tokenizer.json"),
                       ("tokenizers", "sentencepiece", "mistral-7b-v0.1.model"),
                       ("tokenizers", "hf", "llama3", "tokenizer.json.xz")]


@pytest.mark.parametrize("parts", TRUNCATE_TOKENIZERS, ids=[p[-2] for p in TRUNCATE_TOKENIZERS])
def test_truncate_on_pipelines_is_the_longest_fitting_prefix(parts):
    """Against every cut, on short texts: the result fits with the template's tokens counted,
    and no longer prefix fits (where counts grow with the prefix, as on these texts)."""
    tok = load(parts)
    rng = random.Random(5)
    for _ in range(60):
        text = "".join(rng.choice(["a", "-", " ", "Hello", "wörld", "世", "'s", "\n", "x" * 7]) for _ in range(rng.randint(0, 14)))
        for max_tokens in (0, 1, 2, 3, 5, 8):
            cut = tok.truncate(text, max_tokens)
            assert text.startswith(cut)
            assert cut == "" or tok.count(cut) <= max_tokens, (text, max_tokens, cut)
            longest = max([end for end in range(len(text) + 1) if tok.count(text[:end]) <= max_tokens], default=0)
            assert len(cut) == longest, (text, max_tokens, cut, text[:longest])


def test_truncate_where_tokens_are_not_spans_takes_few_encodings():
    """BERT decodes "a-a" as "a - a": the cut was estimated from the decoded length and then
    stepped back one character at a time, each step encoding the whole prefix (100 KB: 114 s)."""
    bert = load(("tokenizers", "hf", "bert-base-uncased", "tokenizer.json"))
    text = "a-" * 10_000
    calls = []
    original = bert.count_till_limit

    def counting(t, limit, **kw):
        calls.append(len(t))
        return original(t, limit, **kw)

    bert.count_till_limit = counting
    try:
        cut = bert.truncate(text, 2_000)
    finally:
        del bert.count_till_limit
    assert bert.count(cut) <= 2_000 < bert.count(text[:len(cut) + 1])
    assert len(calls) < 60, len(calls)


def test_count_includes_template_tokens_as_encode_does():
    bert = load(("tokenizers", "hf", "bert-base-uncased", "tokenizer.json"))
    text = "hello world"
    assert bert.count(text) == len(bert.encode(text)) == 4
    assert bert.count(text, add_special_tokens=False) == len(bert.encode(text, add_special_tokens=False)) == 2
    assert bert.count_till_limit(text, 3) is None
    assert bert.count_till_limit(text, 3, add_special_tokens=False) == 2
    cut = bert.truncate("hello world again and again", 4)
    assert len(bert.encode(cut)) <= 4 and cut == "hello world "  # the space takes no token


LONE_SURROGATE = "a\ud800b"


@pytest.mark.parametrize("parts", [("tokenizers", "hf", "gpt2"), ("tokenizers", "sentencepiece", "mistral-7b-v0.1.model"),
                                   ("tokenizers", "hf", "bert-base-uncased", "tokenizer.json")])
def test_lone_surrogates_are_an_encode_error_on_loaded_tokenizers(parts):
    tok = load(parts)
    calls = [lambda: tok.encode(LONE_SURROGATE), lambda: tok.encode_ordinary(LONE_SURROGATE),
             lambda: tok.count(LONE_SURROGATE), lambda: tok.count_till_limit(LONE_SURROGATE, 5),
             lambda: tok.truncate(LONE_SURROGATE, 1), lambda: tok.encode_batch(["ok", LONE_SURROGATE])]
    for call in calls:
        with pytest.raises(toksmith.EncodeError, match="lone surrogate"):
            call()


def test_decode_takes_any_integers_and_refuses_the_rest():
    np = pytest.importorskip("numpy")
    unigram = load(("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"))
    cl100k = tiktoken_tok("cl100k_base")
    for tok in (unigram, cl100k):
        ids = tok.encode("hello world")
        assert tok.decode(np.array(ids)) == tok.decode(ids) == "hello world"
        with pytest.raises(toksmith.DecodeError, match="list"):
            tok.decode(5)
        with pytest.raises(toksmith.DecodeError, match="ints"):
            tok.decode([1.5])
        with pytest.raises(toksmith.DecodeError):
            tok.id_to_token(1.5)
        with pytest.raises(toksmith.DecodeError):
            tok.id_to_token("x")
        with pytest.raises(toksmith.EncodeError, match="str"):
            tok.token_to_id(5)
    with pytest.raises(toksmith.EncodeError, match="str"):
        cl100k.encode_ordinary(b"bytes")


@pytest.mark.parametrize("bad", [-1, 2**40, True, "3"])
def test_saved_file_with_a_bad_special_id_is_a_format_error(bad):
    tok = toksmith.train(["low lower lowest"] * 10, vocab_size=260, special_tokens=["<s>"])
    d = tok.to_dict()
    d["special_tokens"] = {"<s>": bad}
    with pytest.raises(toksmith.FormatError, match="special_tokens"):
        toksmith.Tokenizer.from_dict(d)


def test_wrong_argument_types_are_typed_errors():
    tok = tiktoken_tok("cl100k_base")
    with pytest.raises(toksmith.SpecialTokenError, match="allowed_special"):
        tok.encode("a", allowed_special=5)
    with pytest.raises(toksmith.SpecialTokenError, match="disallowed_special"):
        tok.count("a", disallowed_special=5)
    with pytest.raises(toksmith.EncodeError, match="encode_batch takes a list"):
        tok.encode_batch("abc")  # a str would be encoded character by character
    with pytest.raises(toksmith.EncodeError, match="encode_batch takes a list"):
        tok.encode_batch(None)
    assert tok.encode_batch(("a", "b")) == [tok.encode("a"), tok.encode("b")]
    with pytest.raises(toksmith.DecodeError, match="errors="):
        tok.decode(tok.encode("fine"), errors="bogus")  # refused even when no byte is invalid
    with pytest.raises(toksmith.EncodeError, match="dropout"):
        tok.encode("a", dropout="x")
    with pytest.raises(toksmith.EncodeError, match="seed"):
        tok.encode("a", dropout=0.1, seed="x")


@pytest.mark.parametrize("specials", [{"<s>": -1}, {"<s>": 2**40}, {"<s>": "x"}, ["<s>"]])
def test_tiktoken_special_tokens_are_checked(specials):
    with pytest.raises(toksmith.FormatError, match="special tokens must map"):
        toksmith.load("cl100k_base", tiktoken_dir=data_path("tokenizers", "tiktoken"), special_tokens=specials)


@pytest.mark.parametrize("bad", [-1, 0, 10**4, "2", True])
def test_batch_thread_counts_are_checked(bad):
    tok = tiktoken_tok("cl100k_base")
    with pytest.raises(toksmith.EncodeError, match="num_threads"):
        tok.encode_batch(["a", "b"], num_threads=bad)
    with pytest.raises(toksmith.EncodeError, match="num_threads"):
        tok.encode_to_numpy(["a", "b"], num_threads=bad)
    unigram = load(("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"))
    with pytest.raises(toksmith.EncodeError, match="num_threads"):
        unigram.encode_batch(["a", "b"], num_threads=bad)


def test_stream_decoder_of_a_character_split_over_byte_tokens_after_a_space():
    """llama.cpp's decoder: the anchor must not start inside the 4 bytes of an emoji (a lone
    continuation byte decodes to U+FFFD too, as the incomplete character does)."""
    tok = load(("tokenizers", "gguf", "ggml-vocab-llama-spm.gguf.xz"))
    ids = [29871, 243, 162, 155, 131, 37, 29871, 30641]  # "▁", the bytes of 😀, '"', "▁", "あ"
    assert tok.decode(ids) == '😀" あ'
    assert streamed(tok, ids) == tok.decode(ids)


@pytest.mark.parametrize("parts,piece", [
    (("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model"), "▁"),  # decodes to nothing at the start
    (("tokenizers", "sentencepiece", "mistral-7b-v0.1.model"), "<0x80>"),  # a stray byte: U+FFFD each
    (("tokenizers", "hf", "gemma3", "tokenizer.json.xz"), "<0x80>"),  # one ByteFallback run
])
def test_stream_decoder_stays_linear_on_long_runs(parts, piece):
    """Runs of ids that give no text, or only U+FFFD, must not make each new id decode the whole
    run again (20,000 of them took minutes that way). A generous bound: ~0.1 s is typical."""
    import time

    tok = load(parts)
    ids = [tok.token_to_id(piece)] * 20000 + tok.encode(" end", add_special_tokens=False)
    started = time.perf_counter()
    assert streamed(tok, ids) == tok.decode(ids)
    assert time.perf_counter() - started < 10
