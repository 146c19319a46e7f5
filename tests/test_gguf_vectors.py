"""GGUF vocabularies against llama.cpp's own test vectors: for every ``ggml-vocab-*.gguf`` with
``.inp``/``.out`` files, each test string must give exactly llama.cpp's ids (no BOS)."""

import pytest

from conftest import DATA_DIR, data_path
from toksmith.errors import FormatError
from toksmith.formats.gguf import load_gguf, read_gguf_file

SEPARATOR = "\n__ggml_vocab_test__\n"
GGUF_DIR = DATA_DIR / "tokenizers" / "gguf"
VECTOR_MODELS = sorted(p.name[len("ggml-vocab-"):-len(".gguf.inp")] for p in GGUF_DIR.glob("ggml-vocab-*.gguf.inp")) or [
    "llama-spm"]
ALL_MODELS = sorted(p.name[len("ggml-vocab-"):-len(".gguf.xz")] for p in GGUF_DIR.glob("ggml-vocab-*.gguf.xz")) or [
    "llama-spm"]

_cache = {}


def tokenizer(name):
    if name not in _cache:
        _cache[name] = load_gguf(data_path("tokenizers", "gguf", f"ggml-vocab-{name}.gguf.xz"))
    return _cache[name]


def vectors(name):
    """(text, ids) pairs of llama.cpp's .inp/.out files."""
    inp = data_path("tokenizers", "gguf", f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8")
    out = data_path("tokenizers", "gguf", f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8")
    texts = inp.split(SEPARATOR)
    if inp.endswith(SEPARATOR):
        texts.pop()
    lines = out.split("\n")
    if out.endswith("\n"):
        lines.pop()
    assert len(texts) == len(lines)
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


@pytest.mark.parametrize("name", VECTOR_MODELS)
def test_llama_cpp_vectors(name):
    tok = tokenizer(name)
    cases = vectors(name)
    bad = [(text, ids, tok.encode(text, add_special_tokens=False, disallowed_special=())) for text, ids in cases]
    bad = [b for b in bad if b[1] != b[2]]
    assert not bad, f"{len(bad)}/{len(cases)} differ; first: {bad[0][0]!r}\nllama.cpp {bad[0][1]}\ntoksmith  {bad[0][2]}"


@pytest.mark.parametrize("name", ALL_MODELS)
def test_loads_and_round_trips(name):
    tok = tokenizer(name)
    text = "Hello world, this is a test.\nSecond line with numbers 12345 and ünïcödé."
    ids = tok.encode(text, add_special_tokens=False)
    assert ids and all(0 <= i < tok.vocab_size for i in ids)
    if tok.metadata["model"] != "bert":  # BERT lowercases and drops accents
        assert tok.decode(ids) == text


def test_special_tokens_and_bos():
    tok = tokenizer("llama-spm")
    assert tok.encode("Hello", add_special_tokens=True)[0] == 1  # add_bos_token
    assert tok.encode("Hello", add_special_tokens=False)[0] != 1
    assert tok.encode("<s>Hello", allowed_special={"<s>"}, add_special_tokens=False)[0] == 1
    assert tok.encode_ordinary("<s>")[0] != 1  # not read from text unless allowed
    assert tok.decode(tok.encode(" Hello  world", add_special_tokens=False)) == " Hello  world"


def test_bert_wraps_in_cls_sep():
    tok = tokenizer("bert-bge")
    ids = tok.encode("hello world", add_special_tokens=True)
    assert ids[0] == 101 and ids[-1] == 102


def test_reader_agrees_with_stock_gguf_reader():
    """The sped-up reader gives every field exactly as the gguf package's own GGUFReader does."""
    gguf = pytest.importorskip("gguf")
    import lzma
    import tempfile

    for name in ("ggml-vocab-llama-spm.gguf.xz", "ggml-vocab-bert-bge.gguf.xz"):
        path = data_path("tokenizers", "gguf", name)
        mine = read_gguf_file(path)
        with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
            f.write(lzma.decompress(path.read_bytes()))
            f.flush()
            stock = {k: v.contents() for k, v in gguf.GGUFReader(f.name).fields.items() if not k.startswith("GGUF.")}
        assert mine == stock
        assert len(mine["tokenizer.ggml.tokens"]) > 1000


def test_plain_gguf_file(tmp_path):
    import lzma

    src = data_path("tokenizers", "gguf", "ggml-vocab-gpt-2.gguf.xz")
    plain = tmp_path / "gpt-2.gguf"
    plain.write_bytes(lzma.decompress(src.read_bytes()))
    assert load_gguf(plain).encode("Hello world") == tokenizer("gpt-2").encode("Hello world")


# ---------------------------------------------------------------------------- errors


def test_errors(tmp_path):
    import lzma

    data = lzma.decompress(data_path("tokenizers", "gguf", "ggml-vocab-gpt-2.gguf.xz").read_bytes())
    cases = {
        "truncated.gguf": data[: len(data) // 3],
        "magic.gguf": b"GGUX" + data[4:],
        "empty.gguf": b"",
        "version.gguf": data[:4] + (9).to_bytes(4, "little") + data[8:],
        "bad.gguf.xz": b"\xfd7zXZ\x00 not really xz",
    }
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(FormatError) as e:
            load_gguf(tmp_path / name)
        assert name in str(e.value)
    with pytest.raises(FormatError, match="no such file"):
        load_gguf(tmp_path / "missing.gguf")


def test_a_file_cut_anywhere_is_reported_as_truncated(tmp_path):
    """Cut inside a number as well as inside a string: the message says the file is truncated
    (a cut mid-number gave numpy's "When changing to a larger dtype ..." before)."""
    import lzma

    data = lzma.decompress(data_path("tokenizers", "gguf", "ggml-vocab-gpt-2.gguf.xz").read_bytes())
    for cut in (10, 23, 100, 1001, 5003, len(data) // 2 + 1, len(data) - 3):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(FormatError, match=f"cut{cut}.gguf is truncated"):
            load_gguf(path)


def test_unsupported_pre_and_model():
    from toksmith.formats.gguf import gguf_from_metadata

    meta = dict(read_gguf_file(data_path("tokenizers", "gguf", "ggml-vocab-gpt-2.gguf.xz")))
    for pre, message in [("kimi-k2", "not supported"), ("no-such-pre", "unknown tokenizer.ggml.pre")]:
        with pytest.raises(FormatError, match=message):
            gguf_from_metadata({**meta, "tokenizer.ggml.pre": pre}, source="x.gguf")
    with pytest.raises(FormatError, match="rwkv"):
        gguf_from_metadata({**meta, "tokenizer.ggml.model": "rwkv"}, source="x.gguf")
    with pytest.raises(FormatError, match="merges"):
        gguf_from_metadata({k: v for k, v in meta.items() if k != "tokenizer.ggml.merges"}, source="x.gguf")


def test_fuzzed_files_load_or_raise_format_error(tmp_path):
    """Random byte changes to a real file: the loader loads or raises FormatError, nothing else."""
    import lzma
    import random

    from toksmith.errors import TokenizerError

    data = lzma.decompress(data_path("tokenizers", "gguf", "ggml-vocab-bert-bge.gguf.xz").read_bytes())
    rng = random.Random(11)
    for k in range(40):
        blob = bytearray(data)
        # the metadata is at the start: mutate there most of the time
        for _ in range(rng.randrange(1, 8)):
            at = rng.randrange(min(len(blob), 4096)) if rng.random() < 0.7 else rng.randrange(len(blob))
            blob[at] = rng.randrange(256)
        path = tmp_path / f"fuzz{k}.gguf"
        path.write_bytes(bytes(blob[: rng.randrange(len(blob) // 2, len(blob) + 1)] if rng.random() < 0.2 else blob))
        try:
            tok = load_gguf(path)
        except FormatError:
            continue
        try:
            tok.encode("Hello world", add_special_tokens=False)
        except TokenizerError:
            pass


# ---------------------------------------------------------------------------- t5 (no llama.cpp vectors here)


def test_t5_vocabulary_matches_sentencepiece_on_text():
    """llama.cpp's t5 (UGM) path, fed a SentencePiece Unigram model, gives SentencePiece's ids on
    ordinary text (llama.cpp's normalization and f64 scores agree with it there)."""
    spm = pytest.importorskip("sentencepiece")
    from sentencepiece import sentencepiece_model_pb2

    from toksmith.formats.gguf import gguf_from_metadata

    path = data_path("tokenizers", "sentencepiece", "botchan_en_unigram_1000.model")
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    meta = {
        "tokenizer.ggml.model": "t5", "tokenizer.ggml.tokens": [p.piece for p in proto.pieces],
        "tokenizer.ggml.scores": [p.score for p in proto.pieces], "tokenizer.ggml.token_type": [p.type for p in proto.pieces],
        "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.add_space_prefix": True,
        "tokenizer.ggml.remove_extra_whitespaces": True,
        "tokenizer.ggml.precompiled_charsmap": list(proto.normalizer_spec.precompiled_charsmap),
    }
    tok = gguf_from_metadata(meta)
    sp = spm.SentencePieceProcessor(model_file=str(path))
    lines = data_path("corpora", "en", "botchan.txt").read_text(encoding="utf-8").split("\n")[:2000]
    assert [tok.encode(line, add_special_tokens=False, disallowed_special=()) for line in lines] == sp.encode(lines)


def test_mutated_files_never_crash(tmp_path):
    """Random byte changes and cuts of a real GGUF file load or raise FormatError, nothing else."""
    import lzma
    import random

    from toksmith import TokenizerError

    data = lzma.decompress(data_path("tokenizers", "gguf", "ggml-vocab-bert-bge.gguf.xz").read_bytes())
    rng = random.Random(1234)
    outcomes = {"loaded": 0, "error": 0}
    for case in range(40):
        blob = bytearray(data)
        if case % 4 == 0:
            blob = blob[: rng.randrange(len(blob))]
        else:
            # Header and key area first (lengths, types, counts), then anywhere.
            span = 4096 if case % 2 else len(blob)
            for _ in range(rng.randint(1, 8)):
                blob[rng.randrange(min(span, len(blob)))] = rng.randrange(256)
        path = tmp_path / f"mutant{case}.gguf"
        path.write_bytes(bytes(blob))
        try:
            tok = load_gguf(path)
            tok.decode(tok.encode("Hello world, 123!"))
            outcomes["loaded"] += 1
        except TokenizerError as e:
            assert str(path) in str(e) or path.name in str(e), str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0


@pytest.mark.parametrize("name", ["gpt-2", "llama-bpe", "qwen2", "mpt"])
def test_ascii_fast_path_gives_the_general_paths_ids(name):
    """ASCII text of these vocabularies (and the ASCII lines of other text, cut where no word can
    span the cut) is split and merged by a Rust scanner instead of the Python copy of llama.cpp's
    matcher (~10x faster): the same ids on random text, with the contractions, spaces, newlines
    and non-ASCII whitespace the matchers treat specially. MPT's vocabulary has user-defined
    tokens of raw spaces (outside the byte alphabet) and no token for 13 bytes UTF-8 never uses."""
    import random
    import string

    tok = tokenizer(name)
    model = tok.pipeline.model
    fast = model._ascii_fast
    assert fast is not None
    rng = random.Random(name)
    alphabet = list(string.printable + "'''sStTlLvVrRdDmM   \n\n\r\t0123") + ["\n"] * 8 + [
        "é", "’", "中", "\u00a0", "\u3000", "\u0085", "\u2028", "\x1c", " \n", "\n\n"]  # lines with and without ASCII
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60))) for _ in range(1500)]
    texts += ["Hello world", "I'M here, we'LL see'd", "   \n\n  x", "1234567 89", "a\r\n\r\nb  ", "' s 's's",
              "x" + " " * 30 + "y", "def f():\n        return  1"]
    try:
        quick = [tok.encode(t) for t in texts]
        model._ascii_fast = None
        general = [tok.encode(t) for t in texts]
    finally:
        model._ascii_fast = fast
    assert quick == general


def test_bert_words_and_pieces_match_the_character_loop():
    """llama.cpp's BERT vocabularies: words made by one translate table and matched by the Rust
    WordPiece model give what the character-by-character loop and the Python longest match
    give, on random text of accents, marks, controls, punctuation, CJK and every kind of
    whitespace (str.split's own included)."""
    import random

    tok = tokenizer("bert-bge")
    model = tok.pipeline.model
    assert model._word_pieces is not None
    rng = random.Random(5)
    alphabet = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789 .,;:!?'\"()-$+<=>^`|~@#%&*_/\\\t\n\r") + [
        "é", "É", "Å", "\u0301", "ñ", "İ", "ß", "Σ", "ς", "中", "文", "가", "ア", "\u00a0", "\u3000", "\u2028", "\u0085",
        "\x1c", "\x1f", "\x00", "\ufffd", "\u200b", "€", "©", "½", "٣", "😀", "\u0378", "ǅ", "ﬁ", "…", "“", "—"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80))) for _ in range(2000)]
    for text in texts:
        assert text.translate(model._word_chars).split() == model._words(text), repr(text)
    quick = [tok.encode(t, add_special_tokens=False) for t in texts]
    pieces = model._word_pieces
    try:
        model._word_pieces = None
        slow = [tok.encode(t, add_special_tokens=False) for t in texts]
    finally:
        model._word_pieces = pieces
    assert quick == slow
