"""Shared helpers of the Hugging Face tests: reference tokenizers, sample texts, comparisons.

The reference is the `tokenizers` library; every expected value comes from it at test time.
"""

from __future__ import annotations

import json
import lzma
import random
from pathlib import Path

import pytest

from conftest import DATA_DIR, data_path

tokenizers = pytest.importorskip("tokenizers")

#: The tokenizers of the shared data, by directory name under tokenizers/hf.
REAL_TOKENIZERS = ["gpt2", "bert-base-uncased", "llama3", "qwen3", "gemma3"]

#: Strings that stress the edges of the pipeline.
EDGE_STRINGS = [
    "", " ", "  ", "\n", "\n\n\n", "\t \t", " \u00a0 \u3000 ", "   leading", "trailing   ", "a  b   c    d",
    "\U0001f469\u200d\U0001f4bb \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f3f3\ufe0f\u200d\U0001f308 \U0001f1eb\U0001f1f7",
    "e\u0301 a\u0308 \u0915\u094d\u0937 \u0301start", "Z\u0351\u036b\u0343\u036a\u0302\u036b",
    "\x00\x01\x1b[31m\x7f\x85\u200b\u2028\ufeff\x1c\x1f", "\ufffd", "\U0001fae8 \U00016ea0 \u0558",
    "<|endoftext|>", "<s></s><unk>", "[CLS] [SEP] [MASK] [PAD] [UNK]", "<bos><eos><start_of_turn>user\nhi<end_of_turn>",
    "<|begin_of_text|><|eot_id|>", "<|im_start|>user\nhi<|im_end|>", "<think>x</think>", "a<|endoftext|>b",
    " <|endoftext|> ", "I'm don't we'll THEY'RE it\u2019s", "1234567890 \u0661\u0662\u0663 \u00bd \u00b2",
    "\u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 \u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3",
    "\u0130stanbul \u00df \u1e9e \u0149", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u6f22\u5b57\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\ufb01 \ufb00 \u216b \u210c \u2460", "  \r\n  \r\n", "a\r\nb\rc", "x" * 300,
    "ab" * 500, "\u2581 \u2581\u2581x", "<0x41>", "\u2581\u2581", "\t\t\tdef f():\n\t\treturn 1\n",
    "https://example.com/a?b=c&d=e#f", "C'est l'\u00e9t\u00e9 ! \u00bfQu\u00e9? \u00ab\u00a0oui\u00a0\u00bb",
]


def read_text(path: Path, limit: int) -> str:
    """The first ``limit`` characters of a text file (xz-compressed or not)."""
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read(limit)


def chunks(text: str, size: int = 2000) -> list[str]:
    """``text`` cut at line ends into pieces of about ``size`` characters."""
    out, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line)
        if n >= size:
            out.append("".join(cur))
            cur, n = [], 0
    if cur:
        out.append("".join(cur))
    return out


def corpus_texts(chars_per_file: int, udhr_every: int = 1) -> dict[str, list[str]]:
    """Samples of the shared corpora: {corpus name: texts}. Skips when the data is absent."""
    out: dict[str, list[str]] = {}
    en = data_path("corpora", "en")
    for p in sorted(en.iterdir()):
        out[f"en/{p.name}"] = chunks(read_text(p, chars_per_file))
    for p in sorted(data_path("corpora", "debian-handbook").glob("*.xz")):
        out[f"debian-handbook/{p.name}"] = chunks(read_text(p, chars_per_file))
    udhr = []
    with lzma.open(data_path("corpora", "udhr", "udhr.jsonl.xz"), "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i % udhr_every == 0:
                articles = json.loads(line)["articles"]
                udhr.append("\n".join(articles.values()))
    out["udhr"] = udhr
    return out


def reference(name: str):
    """The `tokenizers` library's tokenizer for one of REAL_TOKENIZERS, padding and truncation off."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE, WordPiece

    d = data_path("tokenizers", "hf", name)
    if name == "gpt2":  # as GPT2TokenizerFast builds it from the two files
        tok = Tokenizer(BPE.from_file(str(d / "vocab.json"), str(d / "merges.txt")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel()
        tok.add_special_tokens(["<|endoftext|>"])
        return tok
    path = d / "tokenizer.json"
    if path.exists():
        tok = Tokenizer.from_file(str(path))
    else:
        with lzma.open(d / "tokenizer.json.xz", "rt", encoding="utf-8") as f:
            tok = Tokenizer.from_str(f.read())
    tok.no_padding()
    tok.no_truncation()
    return tok


def bert_from_vocab_txt(path: Path, lowercase: bool):
    """BertWordPieceTokenizer's pipeline over a vocab.txt, as the reference for the legacy form."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    tok = Tokenizer(WordPiece.from_file(str(path), unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens([s for s in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if tok.token_to_id(s) is not None])
    return tok


def first_difference(a: list, b: list) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare_encodings(ours, ref, texts: list[str], *, add_special_tokens: bool) -> list[str]:
    """Encodes ``texts`` with both; returns a description of each text that differs."""
    expected = [e.ids for e in ref.encode_batch(texts, add_special_tokens=add_special_tokens)]
    batch = ours.encode_batch(texts, allowed_special="all", add_special_tokens=add_special_tokens, num_threads=2)
    problems = []
    for text, want, got_in_batch in zip(texts, expected, batch):
        got = ours.encode(text, allowed_special="all", add_special_tokens=add_special_tokens)
        if got_in_batch != got:
            problems.append(f"{text[:60]!r}: encode_batch gives other ids than encode")
        elif got != want:
            k = first_difference(got, want)
            problems.append(f"{text[:60]!r}: first difference at token {k}: ours {got[k:k + 6]}, "
                            f"tokenizers {want[k:k + 6]} ({ref.decode(want[max(0, k - 3):k + 6])!r})")
    return problems


def compare_decodings(ours, ref, id_lists: list[list[int]]) -> list[str]:
    problems = []
    for skip in (False, True):
        expected = ref.decode_batch(id_lists, skip_special_tokens=skip)
        for ids, want in zip(id_lists, expected):
            got = ours.decode(ids, skip_special_tokens=skip)
            if got != want:
                k = first_difference(list(got), list(want))
                problems.append(f"ids {ids[:8]}... skip_special_tokens={skip}: ours {got[k - 10:k + 20]!r}, "
                                f"tokenizers {want[k - 10:k + 20]!r}")
    return problems


def random_id_lists(vocab_size: int, n: int, seed: int = 0) -> list[list[int]]:
    rnd = random.Random(seed)
    return [[rnd.randrange(vocab_size) for _ in range(rnd.randrange(1, 16))] for _ in range(n)]


def tokenizer_json(model: dict, **components) -> dict:
    """A tokenizer.json dict around ``model`` with the given components (None by default)."""
    d = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
         "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": model}
    d.update(components)
    return d


def added_token(id: int, content: str, *, special: bool = True, **flags) -> dict:
    return {"id": id, "content": content, "single_word": flags.get("single_word", False),
            "lstrip": flags.get("lstrip", False), "rstrip": flags.get("rstrip", False),
            "normalized": flags.get("normalized", not special), "special": special}


def load_both(d: dict, tmp_path: Path):
    """Writes ``d`` as tokenizer.json and loads it with toksmith and with `tokenizers`."""
    from tokenizers import Tokenizer

    from toksmith.formats.hf import load_hf

    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(d, ensure_ascii=False), encoding="utf-8")
    return load_hf(path), Tokenizer.from_file(str(path))


def test_edge_strings_are_distinct():
    assert len(set(EDGE_STRINGS)) == len(EDGE_STRINGS)


_BYTE_TOKENS = {f"<0x{b:02X}>": b for b in range(256)}


def reference_words(components: dict, added: list[tuple[str, dict]], texts: list[str]) -> list[str]:
    """The words `tokenizers` gives to the model for ``texts`` under ``components`` (normalizer,
    pre_tokenizer) and added tokens ``(content, flags)``: found with a BPE model made only of the
    256 byte tokens, whose tokens are grouped back into words."""
    from tokenizers import Tokenizer

    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True, "ignore_merges": False,
             "vocab": dict((t, b) for t, b in _BYTE_TOKENS.items()), "merges": []}
    d = tokenizer_json(model, **components)
    d["added_tokens"] = [added_token(256 + i, c, **f) for i, (c, f) in enumerate(added)]
    tok = Tokenizer.from_str(json.dumps(d))
    words = set()
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        current, last = bytearray(), None
        for token, word in zip(enc.tokens, enc.word_ids):
            if token not in _BYTE_TOKENS:
                continue
            if word != last and current:
                words.add(current.decode("utf-8", "surrogateescape"))
                current = bytearray()
            current.append(_BYTE_TOKENS[token])
            last = word
        if current:
            words.add(current.decode("utf-8", "surrogateescape"))
    return sorted(words)


def word_level_json(components: dict, added: list[tuple[str, dict]], texts: list[str]) -> dict:
    """A WordLevel tokenizer.json whose vocabulary holds every word `tokenizers` produces for
    ``texts``: comparing ids then compares the word splits exactly."""
    words = reference_words(components, added, texts)
    vocab = {w: i for i, w in enumerate(words)}
    vocab["[UNK]"] = len(vocab)
    d = tokenizer_json({"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}, **components)
    # As Hugging Face numbers them: a string of the vocabulary keeps its id, the others follow it.
    ids, next_id = [], len(vocab)
    for content, _ in added:
        if content in vocab:
            ids.append(vocab[content])
        else:
            ids.append(next_id)
            next_id += 1
    d["added_tokens"] = [added_token(i, c, **f) for i, (c, f) in zip(ids, added)]
    return d
