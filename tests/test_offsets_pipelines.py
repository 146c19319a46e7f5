"""`encode_with_offsets` of pipelines that normalize the text: BERT (WordPiece) and Gemma 3 (BPE
over characters, " " replaced by "▁", byte fallback). Ids and char spans against `tokenizers`'
``Encoding.offsets`` on the shared corpora, the edge strings and random text dense in what the
normalizer changes (accents, case, CJK, control characters) and in byte-fallback characters."""

from __future__ import annotations

import random

import pytest

from test_hf_parity import both
from test_hf_support import EDGE_STRINGS, bert_from_vocab_txt, corpus_texts

from conftest import data_path

from toksmith.formats.hf import load_hf


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["Héllo", "wörld", "e\u0301", "a\u0301\u0316b", "İstanbul", "ΣΑΣ", "中文", "字", "ﬁne", "x²", "Ⅻ", "ǅ",
             "[CLS]", "[SEP]", "[MASK]", "unaffable", "isn't", "\x00", "\x07", "\u200b", "\ufeff", "\U0001f600",
             "Ñandú", "ß", "ﬀ", "\u0301", "a" * 120, "😀x", "٣", "‍", "Å", "\u212b"]
    spaces = [" ", "  ", "\n", "\t", "\u3000", "\r\n", "\u00a0", ""]
    return ["".join(rng.choice(spaces) if rng.random() < 0.4 else rng.choice(words) for _ in range(rng.randrange(0, 25)))
            for _ in range(n)]


def compare(ours, ref, texts: list[str], allowed) -> None:
    problems = []
    for text in texts:
        expected = ref.encode(text, add_special_tokens=False)
        ids, byte_spans, char_spans = ours.encode_with_offsets(text, allowed_special=allowed, disallowed_special=())
        if ids != expected.ids or char_spans != expected.offsets:
            problems.append(f"{text[:60]!r}: {list(zip(ids, char_spans))[:8]} != {list(zip(expected.ids, expected.offsets))[:8]}")
            continue
        data = text.encode("utf-8")
        assert byte_spans == [(len(text[:s].encode()), len(text[:e].encode())) for s, e in char_spans]
        assert all(0 <= s <= e <= len(data) for s, e in byte_spans)
    assert not problems, f"{len(problems)} of {len(texts)} texts differ from tokenizers, e.g.:\n" + "\n".join(problems[:5])


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return EDGE_STRINGS + [t for group in corpus_texts(4_000, udhr_every=6).values() for t in group] + random_texts(600, 1)


def test_bert_offsets_match_tokenizers(texts):
    ours, ref = both("bert-base-uncased")
    assert any(not t.isascii() for t in texts)
    # tokenizers matches its added tokens ([CLS], [MASK]...) always: allow them all.
    compare(ours, ref, texts, "all")
    assert ours.encode_with_offsets("Héllo [MASK]", allowed_special="all")[2] == [(0, 5), (6, 12)]


def test_bert_offsets_with_combining_marks_in_any_order():
    """Marks without a base, marks of several classes (NFD reorders them), spacing marks, marks
    after a dropped control character: the spans follow tokenizers' alignments."""
    ours, ref = both("bert-base-uncased")
    rng = random.Random(5)
    parts = ["\u0301", "\u0316", "\u302e", "\U0001D16D", "\u0327", "\u0300", "\u05b0", "\u0e38", "\u093c", "a", "é",
             "Å", " ", "x", "\u200d", "\x00", "中"]
    texts = ["".join(rng.choice(parts) for _ in range(rng.randrange(1, 12))) for _ in range(1500)]
    compare(ours, ref, texts, "all")


@pytest.mark.parametrize("lowercase", [True, False])
def test_cased_and_uncased_vocab_txt(lowercase, texts):
    """The vocab.txt form: cased keeps accents and case, so the spans are of the characters as they are."""
    path = data_path("tokenizers", "hf", "bert-base-uncased", "vocab.txt")
    compare(load_hf(path, lowercase=lowercase), bert_from_vocab_txt(path, lowercase), texts[:800], "all")


def test_spans_without_the_special_tokens_allowed():
    """Not allowed (and not disallowed), a special-token string is text: its pieces span it."""
    ours, _ = both("bert-base-uncased")
    ids, _, spans = ours.encode_with_offsets("a [MASK] b", disallowed_special=())
    assert ids == ours.encode("a [MASK] b", disallowed_special=(), add_special_tokens=False)
    assert spans[0] == (0, 1) and spans[-1] == (9, 10) and len(ids) > 3
    assert [("a [MASK] b")[s:e] for s, e in spans[1:-1]] == ["[", "MASK", "]"]


def test_gemma3_offsets_match_tokenizers(texts):
    """Gemma 3: added tokens (newlines, space runs, HTML tags) cut out, each byte token of a
    character outside the vocabulary spans that character."""
    ours, ref = both("gemma3")
    extra = ["Hello  world", "\U000E0100x", "a\U0001FAE8b", " x", "x\n\ny", "𝔘𝔫𝔦", "<start_of_turn>user\nhi<end_of_turn>"]
    compare(ours, ref, extra + texts, "all")
    ids, _, spans = ours.encode_with_offsets("a\U0001FAE8b")
    assert len(ids) == 6 and spans[1:5] == [(1, 2)] * 4  # four byte tokens, one character


def test_tokens_that_do_not_follow_the_text_are_refused():
    """BPE that drops a character outside its vocabulary, or gives it the unknown token: no
    span can be told for it, so EncodeError (encode() still gives the ids)."""
    import toksmith
    from toksmith import normalizers as norm
    from toksmith.formats.hf import HFBPE
    from toksmith.pipeline import Pipeline
    from toksmith.tokenizer import Tokenizer

    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "▁": 4}
    for unk in (None, "<unk>"):
        model = HFBPE(vocab, [("a", "b")], unk_token=unk)
        tok = Tokenizer.from_pipeline(Pipeline(model, normalizer=norm.Replace(" ", "▁")))
        assert tok.encode_with_offsets("ab a")[2] == [(0, 2), (2, 3), (3, 4)]
        with pytest.raises(toksmith.EncodeError, match="encode\\(\\) gives its ids"):
            tok.encode_with_offsets("ab x")
        assert tok.encode("ab x", add_special_tokens=False)[:2] == [3, 4]


# ---------------------------------------------------------------------------- SentencePiece


def sentencepiece_spans(sp, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """sentencepiece's ids and ``begin``/``end`` (bytes of ``text``) of each piece."""
    pieces = sp.encode(text, return_type="proto").pieces
    return [p.id for p in pieces], [(p.begin, p.end) for p in pieces]


def compare_sentencepiece(tok, sp, texts: list[str]) -> None:
    problems = []
    for text in texts:
        expected_ids, expected_spans = sentencepiece_spans(sp, text)
        ids, byte_spans, char_spans = tok.encode_with_offsets(text, disallowed_special=())
        if ids != expected_ids or byte_spans != expected_spans:
            problems.append(f"{text[:60]!r}: {list(zip(ids, byte_spans))[:8]} != {list(zip(expected_ids, expected_spans))[:8]}")
            continue
        assert char_spans == [(len(text.encode()[:s].decode()), len(text.encode()[:e].decode())) for s, e in byte_spans]
    assert not problems, f"{len(problems)} of {len(texts)} texts differ from sentencepiece, e.g.:\n" + "\n".join(problems[:5])


def sentencepiece_texts(seed: int) -> list[str]:
    from test_sentencepiece_parity import EDGE, PROBES
    from test_sentencepiece_whole import random_texts as sp_random_texts

    text = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8")
    return EDGE + PROBES + text.split("\n")[:300] + sp_random_texts(500, seed) + [
        "  Hello   world  ", "ﬁne Ⅻ", "a\u3000b", "éé x", "x日本y", "x\U0001F600y", "é\U000E0100\U000E0100x"]


@pytest.mark.parametrize("name", ["botchan_en_unigram_1000", "kyoto_ja_unigram_8000", "botchan_en_bpe_1000", "mistral-7b-v0.1"])
def test_sentencepiece_offsets_match_sentencepiece(name):
    """Spans as sentencepiece's ``begin``/``end``: a replacement (NFKC "Ⅻ" -> "XII") spans its
    source in its last token, the dummy prefix alone spans nothing, a run of spaces made one
    spans the run, unknown runs and byte tokens their characters."""
    spm = pytest.importorskip("sentencepiece")
    from test_sentencepiece_parity import model_path

    from toksmith.formats.sentencepiece import load_sentencepiece

    path = model_path(name)
    compare_sentencepiece(load_sentencepiece(path), spm.SentencePieceProcessor(model_file=str(path)), sentencepiece_texts(8))


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
@pytest.mark.parametrize("variant", ["user_and_control", "byte_fallback", "identity_no_prefix", "keep_whitespace",
                                     "nfkc_cf", "whitespace_pieces"])
def test_sentencepiece_offsets_of_trained_models(model_type, variant):
    """Every option that changes normalization or pieces (user-defined pieces, byte fallback,
    no dummy prefix, spaces kept, case folding)."""
    spm = pytest.importorskip("sentencepiece")
    from test_sentencepiece_parity import SYNTHETIC, train

    from toksmith.formats.sentencepiece import sentencepiece_from_bytes

    lines = [line for line in data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8").split("\n") if line.strip()]
    data = train(lines, model_type=model_type, **SYNTHETIC[variant])
    compare_sentencepiece(sentencepiece_from_bytes(data), spm.SentencePieceProcessor(model_proto=data), sentencepiece_texts(9)[:700])


def test_sentencepiece_special_tokens_allowed_are_their_match():
    spm = pytest.importorskip("sentencepiece")
    from test_sentencepiece_parity import model_path

    from toksmith.formats.sentencepiece import load_sentencepiece

    path = model_path("mistral-7b-v0.1")
    tok, sp = load_sentencepiece(path), spm.SentencePieceProcessor(model_file=str(path))
    text = "Hi <s>there</s>  x"
    ids, byte_spans, _ = tok.encode_with_offsets(text, allowed_special="all")
    assert ids == tok.encode(text, allowed_special="all", add_special_tokens=False)
    assert (tok.token_to_id("<s>"), (3, 6)) in list(zip(ids, byte_spans))
    # Between the special tokens, sentencepiece's ids and spans of each piece, moved to where it starts.
    expected = []
    for piece, at in (("Hi ", 0), ("<s>", None), ("there", 6), ("</s>", None), ("  x", 15)):
        if at is None:
            start = text.index(piece)
            expected.append((tok.token_to_id(piece), (start, start + len(piece))))
            continue
        piece_ids, spans = sentencepiece_spans(sp, piece)
        expected += [(i, (s + at, e + at)) for i, (s, e) in zip(piece_ids, spans)]
    assert list(zip(ids, byte_spans)) == expected


# ---------------------------------------------------------------------------- GGUF vocabularies


GGUF_BYTE_LEVEL = ["gpt-2", "llama-bpe", "qwen2", "command-r", "deepseek-llm", "starcoder", "falcon", "gemma-4"]


@pytest.mark.parametrize("name", GGUF_BYTE_LEVEL)
def test_gguf_byte_level_tokens_are_their_bytes_and_spans_of_the_text(name):
    """llama.cpp decodes bytes: a token holding part of a character gives its own bytes (it was
    U+FFFD, so no span could be told); the spans of the tokens then tile the text."""
    from test_gguf_vectors import tokenizer, vectors

    tok = tokenizer(name)
    han = data_path("corpora", "debian-handbook")
    import lzma

    # llama.cpp's own test strings hold " ?" and " 're", where its detokenizer may clean up a
    # space: the spans still hold each token's own bytes (its piece), which tile the text.
    texts = random_texts(150, 3) + [text for text, _ in vectors(name)]
    piece = tok._pipeline.decoder.piece
    for lang in ("zh-CN", "ru-RU", "ar-MA"):
        with lzma.open(han / f"{lang}.txt.xz", "rt", encoding="utf-8") as f:
            texts += [line for line in f.read(20_000).split("\n") if line.strip()][:40]
    for text in texts:
        data = text.encode("utf-8")
        ids, byte_spans, char_spans = tok.encode_with_offsets(text, disallowed_special=())
        assert ids == tok.encode(text, disallowed_special=(), add_special_tokens=False)
        assert b"".join(piece(tok.id_to_token(i)) for i in ids) == data
        assert b"".join(data[s:e] for s, e in byte_spans) == data
        assert all(data[s:e] == piece(tok.id_to_token(i)) for i, (s, e) in zip(ids, byte_spans))
        # A character split between tokens belongs to each of them.
        char_of = [k for k, c in enumerate(text) for _ in c.encode("utf-8")] + [len(text)]
        assert char_spans == [(char_of[bs], char_of[be - 1] + 1 if be > bs else char_of[bs]) for bs, be in byte_spans]


def sentencepiece_of_gguf(tok):
    """sentencepiece running the vocabulary of a llama.cpp SentencePiece GGUF (``llama``), as
    toksmith writes it (``save(format="sentencepiece")``; tests/test_sentencepiece_writer.py
    checks its ids against llama.cpp's test vectors)."""
    spm = pytest.importorskip("sentencepiece")
    from toksmith.formats.sentencepiece_writer import sentencepiece_model_bytes

    return spm.SentencePieceProcessor(model_proto=sentencepiece_model_bytes(tok))


@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "baichuan"])
def test_gguf_sentencepiece_offsets_match_sentencepiece(name):
    """llama.cpp's SentencePiece vocabularies write spaces as "▁" and add one in front: their
    spans are those sentencepiece gives for the same vocabulary (the added space spans nothing
    of its own, a byte token's character goes to its last byte's token). The reference model is
    checked first: sentencepiece's ids are llama.cpp's on its test vectors."""
    from test_gguf_vectors import tokenizer, vectors

    tok = tokenizer(name)
    sp = sentencepiece_of_gguf(tok)
    cases = vectors(name) if (data_path("tokenizers", "gguf") / f"ggml-vocab-{name}.gguf.out").exists() else []
    assert all(sp.encode(text) == ids for text, ids in cases)
    texts = [t for t, _ in cases] + sentencepiece_texts(8)[:500] + random_texts(150, 2)
    compare_sentencepiece(tok, sp, texts)


def test_gguf_bert_offsets_match_tokenizers(texts):
    """llama.cpp's BERT vocabularies (GGUF ``bert``): bge-small's is BERT uncased's, with "▁" in
    front of a word's first token instead of "##" on the others. Where both tokenize a text
    alike, the spans are `tokenizers`' ``Encoding.offsets`` for BERT uncased. (llama.cpp makes
    other words where it keeps only the first character of a decomposition, e.g. of Hangul
    syllables, or drops the spacing marks, Mc and Me, that BERT keeps.) On every text, each
    token's characters, made as llama.cpp makes a word's, are its string."""
    import unicodedata

    import tokenizers
    from test_gguf_vectors import tokenizer

    tok = tokenizer("bert-bge")
    model = tok._pipeline.model
    ref = tokenizers.Tokenizer.from_file(str(data_path("tokenizers", "hf", "bert-base-uncased", "tokenizer.json")))
    ref.no_padding()
    ref.no_truncation()

    def as_gguf(token: str) -> str:
        return token if token in ("[UNK]", "[CLS]", "[SEP]", "[MASK]", "[PAD]") else \
            token[2:] if token.startswith("##") else "▁" + token

    alike = problems = 0
    for text in texts:
        ids, byte_spans, char_spans = tok.encode_with_offsets(text, disallowed_special=())
        assert ids == tok.encode(text, disallowed_special=(), add_special_tokens=False)
        assert byte_spans == [(len(text[:s].encode()), len(text[:e].encode())) for s, e in char_spans]
        for i, (s, e) in zip(ids, char_spans):
            if i != model.unk_id:
                made = "".join(model._word_char(ord(c)) for c in text[s:e]).strip()
                assert made == model.vocab.tokens[i].removeprefix("▁"), (text[:40], model.vocab.tokens[i], (s, e))
        expected = ref.encode(text, add_special_tokens=False)
        if [model.vocab.ids.get(as_gguf(t)) for t in expected.tokens] != ids or any(
                unicodedata.category(c) in ("Mc", "Me") for c in text):
            continue
        alike += 1
        problems += char_spans != expected.offsets
    assert alike > len(texts) / 2 and problems == 0, (alike, problems)


@pytest.mark.parametrize("name", ["botchan_en_unigram_1000", "kyoto_ja_unigram_8000"])
@pytest.mark.parametrize("squeeze", [True, False])
def test_gguf_t5_offsets_match_sentencepiece(name, squeeze):
    """llama.cpp's t5 (UGM) vocabularies, made here from SentencePiece Unigram models: spans as
    sentencepiece's ``begin``/``end`` over llama.cpp's own normalization, on every text both
    tokenize alike. (With spaces kept, llama.cpp puts the added "▁" before the first word, after
    any leading spaces, where sentencepiece puts it first: those texts are left out.)"""
    spm = pytest.importorskip("sentencepiece")
    from sentencepiece import sentencepiece_model_pb2

    from toksmith.formats.gguf import gguf_from_metadata

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(data_path("tokenizers", "sentencepiece", f"{name}.model").read_bytes())
    proto.normalizer_spec.remove_extra_whitespaces = squeeze
    tok = gguf_from_metadata({
        "tokenizer.ggml.model": "t5", "tokenizer.ggml.tokens": [p.piece for p in proto.pieces],
        "tokenizer.ggml.scores": [p.score for p in proto.pieces], "tokenizer.ggml.token_type": [p.type for p in proto.pieces],
        "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.add_space_prefix": True,
        "tokenizer.ggml.remove_extra_whitespaces": squeeze,
        "tokenizer.ggml.precompiled_charsmap": list(proto.normalizer_spec.precompiled_charsmap),
    })
    sp = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
    charsmap = tok._pipeline.model.charsmap
    alike = problems = 0
    texts = sentencepiece_texts(8)[:700] + random_texts(150, 2)
    for text in texts:
        ids, byte_spans, char_spans = tok.encode_with_offsets(text, disallowed_special=())
        assert ids == tok.encode(text, disallowed_special=(), add_special_tokens=False)
        assert all(0 <= a <= b <= len(text) for a, b in char_spans)
        assert [a for a, _ in char_spans] == sorted(a for a, _ in char_spans)
        expected_ids, expected_spans = sentencepiece_spans(sp, text)
        if ids != expected_ids or (not squeeze and charsmap.normalize(text).startswith(" ")):
            continue
        alike += 1
        problems += byte_spans != expected_spans
    assert alike > 0.8 * len(texts) and problems == 0, (alike, problems)


def test_gguf_sentencepiece_offsets_around_special_tokens():
    """Allowed special tokens span their match; the text after one starts again with the added
    space (as llama.cpp encodes it), which spans nothing of its own."""
    from test_gguf_vectors import tokenizer

    tok = tokenizer("llama-spm")
    text = "<s> a</s>b"
    ids, byte_spans, char_spans = tok.encode_with_offsets(text, allowed_special="all")
    assert ids == tok.encode(text, allowed_special="all", add_special_tokens=False)
    tokens = [tok.id_to_token(i) for i in ids]
    assert list(zip(tokens, char_spans)) == [("<s>", (0, 3)), ("▁", (3, 3)), ("▁a", (3, 5)), ("</s>", (5, 9)),
                                             ("▁b", (9, 10))]
    assert byte_spans == char_spans


# ---------------------------------------------------------------------------- token bytes


def test_byte_tokens_give_their_bytes():
    """A byte token (ByteFallback, SentencePiece byte pieces) holds part of a character: its
    bytes are that part (it was U+FFFD); decode_bytes of the whole is the text's bytes, and
    decode is unchanged (U+FFFD for a lone byte token, as tokenizers and sentencepiece)."""
    from test_sentencepiece_parity import model_path

    import toksmith
    from toksmith.formats.sentencepiece import load_sentencepiece

    text = "a\U0001FAE8b \U00031350 x"
    for tok in (both("gemma3")[0], load_sentencepiece(model_path("mistral-7b-v0.1"))):
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.token_bytes(ids[1]) == b"\xf0" and tok.decode([ids[1]]) == "\ufffd"
        assert tok.decode_bytes(ids) == text.encode() and tok.decode(ids) == text
        assert b"".join(tok.token_bytes(i) for i in ids[1:5]) == "\U0001FAE8".encode()
    with pytest.raises(toksmith.DecodeError):
        both("gemma3")[0].decode_bytes([10**9])


def test_pickles_of_pipelines_keep_no_matchers():
    """A pipeline's kept matchers and paths are made again after unpickling; a pickle whose
    pipeline held them in a plain dict (as before) loads and encodes."""
    import pickle

    ours, _ = both("bert-base-uncased")
    text = "Héllo [MASK] wörld"
    expected = ours.encode_with_offsets(text, allowed_special="all")
    pipeline = pickle.loads(pickle.dumps(ours))._pipeline
    pipeline.__dict__["_matchers"] = {}  # the state an earlier version pickled
    state = pipeline.__getstate__()
    assert "_matchers" not in state
    again = pickle.loads(pickle.dumps(ours))
    again._pipeline.__setstate__({**state, "_matchers": {}})
    assert again.encode_with_offsets(text, allowed_special="all") == expected


def test_llama2_style_tokenizer_json_offsets_match_tokenizers(tmp_path):
    """A Llama 2 / Mistral tokenizer.json (" " prepended, then " " by "▁", BPE with byte
    fallback; here Mistral 7B's .model written as one): the prepended "▁" spans nothing but the
    first character, as in tokenizers."""
    from test_sentencepiece_parity import model_path
    from tokenizers import Tokenizer as HF

    import toksmith

    path = tmp_path / "tokenizer.json"
    toksmith.load(model_path("mistral-7b-v0.1")).save(path, format="hf")
    ours, ref = toksmith.load(path), HF.from_file(str(path))
    ref.no_padding()
    ref.no_truncation()
    assert ours._pipeline.offsets_supported()
    texts = EDGE_STRINGS + [t for group in corpus_texts(1_500, udhr_every=20).values() for t in group] + random_texts(300, 4)
    compare(ours, ref, texts, "all")
    assert ours.encode_with_offsets("Hi there")[2][0] == (0, 2)  # "▁Hi"
