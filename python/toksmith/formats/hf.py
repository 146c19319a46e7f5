"""Hugging Face tokenizers: ``tokenizer.json`` (also xz-compressed), and the legacy GPT-2
(``vocab.json`` + ``merges.txt``) and BERT (``vocab.txt``) forms.

:func:`load_hf` reads them into a :class:`toksmith.pipeline.Pipeline` that encodes and decodes
exactly as the ``tokenizers`` library does. Every component and option is checked: one that
toksmith does not implement, and any malformed field, raises :class:`FormatError` naming the
file and the JSON path (``model.merges[12]``). The ``truncation`` and ``padding`` settings are
not applied (toksmith encodes one text, in full); they are kept in ``tokenizer.metadata``.

:func:`save_hf` writes a ``tokenizer.json`` for a tokenizer loaded here, or for toksmith's own
byte-level BPE tokenizers (trained or read from tiktoken).
"""

from __future__ import annotations

import base64
import json
import lzma
import math
import os
from fractions import Fraction
from pathlib import Path

from .. import decoders as dec
from .. import normalizers as norm
from .. import post_processors as post
from .. import pre_tokenizers as pre
from .. import _core
from ..errors import EncodeError, FormatError
from ..models import SPACE, BPE, Unigram, WordLevel, WordPiece, _VocabModel, word_split_pattern
from ..pipeline import AddedToken, Pipeline
from ..tokenizer import Tokenizer
from .hf_sentencepiece import hf_pipeline, is_sentencepiece_style

_REQUIRED = object()
_MAX_ID = 2**28  # ids must stay below this (the Rust core's limit)


# ---------------------------------------------------------------------------------------------
# Models as Hugging Face runs them


class HFBPE(BPE):
    """Hugging Face's BPE: without an unknown token or byte fallback, characters outside the
    vocabulary are dropped rather than refused."""

    def encode_words(self, words):
        words = list(words)
        try:
            return self._core.encode_words(words)
        except EncodeError:
            if self.options["unk_token"] is not None or self.options["byte_fallback"]:
                raise
        if self.options["continuing_subword_prefix"] or self.options["end_of_word_suffix"]:
            raise EncodeError("the text has characters outside the vocabulary, and this BPE model (no unknown token, "
                              "with a subword prefix or suffix) drops them in a way toksmith does not reproduce")
        whole = self.options["ignore_merges"]  # such a word is emitted whole, before any check
        known = [w if whole and w in self._vocab else "".join(c for c in w if c in self._vocab) for w in words]
        return self._core.encode_words([w for w in known if w])

    def encode_words_batch(self, batch, num_threads=None):
        try:
            return super().encode_words_batch(batch, num_threads)
        except EncodeError:
            if self.options["unk_token"] is not None or self.options["byte_fallback"]:
                raise
        return [self.encode_words(words) for words in batch]  # with the characters dropped as above


class HFUnigram(Unigram):
    """Hugging Face's Unigram: every piece can be matched, the unknown token's own string included."""

    def __init__(self, pieces, *, unk_id, byte_fallback) -> None:
        _VocabModel.__init__(self, {p: i for i, (p, _) in enumerate(pieces)})
        self.pieces = [(p, float(s)) for p, s in pieces]
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self._make_rust()

    def _make_rust(self) -> None:
        self._core = _core.UnigramModel([(p, i, s) for i, (p, s) in enumerate(self.pieces)], self.unk_id,
                                        self.byte_fallback, True)


# ---------------------------------------------------------------------------------------------
# Reading JSON with paths in the errors


class _DupCheckedDict(dict):
    duplicates: list[str] = []


def _object_pairs(pairs):
    d = _DupCheckedDict(pairs)
    if len(d) != len(pairs):
        seen = set()
        d.duplicates = [k for k, _ in pairs if k in seen or seen.add(k)]
    return d


def _kind(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


class _Reader:
    """Typed access to the parsed JSON of one file; errors name the file and the JSON path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, path: str, message: str) -> FormatError:
        return FormatError(f"{self.source}: {path}: {message}")

    def unsupported(self, path: str, what: str) -> FormatError:
        return FormatError(f"{self.source}: {path}: {what} is not supported by toksmith; "
                           f"use the `tokenizers` library for this tokenizer")

    def obj(self, v, path: str) -> dict:
        if not isinstance(v, dict):
            raise self.error(path, f"expected an object, found {_kind(v)}")
        if getattr(v, "duplicates", None):
            raise self.error(f"{path}.{v.duplicates[0]}" if path else v.duplicates[0],
                             f"the key {v.duplicates[0]!r} appears twice; every key (and every token) must appear once")
        return v

    def get(self, d: dict, key: str, path: str, kinds, default=_REQUIRED):
        where = f"{path}.{key}" if path else key
        if key not in d:
            if default is _REQUIRED:
                raise self.error(where, "missing")
            return default
        v = d[key]
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        ok = any(v is None if k is None else isinstance(v, k) and not (isinstance(v, bool) and k in (int, float))
                 for k in kinds)
        if not ok:
            names = " or ".join("null" if k is None else _kind(k()) for k in kinds)
            raise self.error(where, f"expected {names}, found {_kind(v)} ({str(v)[:40]})")
        return v

    def check_keys(self, d: dict, path: str, known: set[str], what: str) -> None:
        for k in d:
            if k not in known and k != "type":
                raise self.unsupported(f"{path}.{k}", f"the option {k!r} of {what}")

    def build(self, path: str, make):
        """``make()``, its FormatError located at ``path``."""
        try:
            return make()
        except FormatError as e:
            if str(e).startswith(self.source):
                raise
            raise self.error(path, str(e)) from None

    def token_id(self, v, path: str) -> int:
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.error(path, f"expected an integer id, found {_kind(v)}")
        if not 0 <= v < _MAX_ID:
            raise self.error(path, f"the id {v} is out of range (ids run from 0 to {_MAX_ID - 1})")
        return v


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except OSError as e:
        raise FormatError(f"cannot read {path}: {e}") from None
    if path.suffix == ".xz":
        try:
            raw = lzma.decompress(raw)
        except lzma.LZMAError as e:
            raise FormatError(f"{path}: the xz data is corrupted or truncated ({e})") from None
    return raw


def read_json(path: Path):
    """Parses a JSON file (xz-compressed if it ends in .xz); repeated keys are kept track of, so
    that :func:`from_hf_dict` reports them, and numbers are read as ``tokenizers`` reads them
    (:func:`serde_float`). Raises FormatError for unreadable or invalid files."""
    path = Path(path)
    raw = _read_bytes(path)
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_object_pairs, parse_float=serde_float)
    except UnicodeDecodeError as e:
        raise FormatError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); is it a tokenizer.json?") from None
    except json.JSONDecodeError as e:
        raise FormatError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); "
                          f"the file may be truncated or corrupted") from None


# ---------------------------------------------------------------------------------------------
# Numbers as tokenizers reads them

_U64_MAX = 2**64 - 1
_POW10 = [float(f"1e{k}") for k in range(309)]


def serde_float(text: str) -> float:
    """The double that serde_json, the JSON reader of ``tokenizers`` (built without its
    ``float_roundtrip`` feature), makes of a JSON number: the digits as a 64-bit integer (further
    fraction digits ignored), rounded to a double, then multiplied or divided by a power of ten,
    rounding a second time. For 16 or 17 significant digits that is sometimes one unit in the last
    place away from the correctly rounded value, which decides exact ties between Unigram paths.

    >>> serde_float("-3.3334579467773438") == -3.3334579467773438, serde_float("0.5")
    (False, 0.5)
    """
    negative = text.startswith("-")
    mantissa, _, exp_text = text.lstrip("-").lower().partition("e")
    int_digits, _, frac_digits = mantissa.partition(".")
    significand, exponent, full = 0, int(exp_text) if exp_text else 0, False
    for c in int_digits:
        full = full or significand * 10 + int(c) > _U64_MAX
        if full:  # integer digits past 64 bits only scale the number
            exponent += 1
        else:
            significand = significand * 10 + int(c)
    for c in frac_digits:
        if significand * 10 + int(c) > _U64_MAX:
            break  # fraction digits past 64 bits are dropped
        significand, exponent = significand * 10 + int(c), exponent - 1
    value = float(significand)
    while value and exponent < -308:
        value, exponent = value / 1e308, exponent + 308
    if exponent >= 0:
        value = value * _POW10[exponent] if exponent <= 308 else math.inf
    else:
        value = value / _POW10[-exponent] if -exponent <= 308 else value
    return -value if negative else value


def hf_float_text(value: float) -> str:
    """A JSON spelling of ``value`` that reads back as exactly ``value`` both in Python and in
    ``tokenizers`` (:func:`serde_float`): Python's shortest spelling when serde_json reads it right
    (most numbers), else one with more digits found near it. A few doubles cannot be spelled so
    (about one in 500 of 17-digit ones); they keep the shortest spelling and land one unit in the
    last place away in ``tokenizers``."""
    text = repr(value)
    if not math.isfinite(value) or serde_float(text) == value:
        return text
    exact = Fraction(value)
    for digits in range(15, 21):  # fraction digits
        center = round(exact * 10**digits)
        for step in range(200):
            for significand in (center + step, center - step):
                body = str(abs(significand)).rjust(digits + 1, "0")
                candidate = f"{'-' if significand < 0 else ''}{body[:-digits]}.{body[-digits:]}"
                if float(candidate) == value and serde_float(candidate) == value:
                    return candidate
    return text


def _json_text(obj) -> str:
    """Compact JSON of ``obj`` with every float spelled by :func:`hf_float_text`."""
    if isinstance(obj, float):
        return hf_float_text(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(f"{_json_text(k)}:{_json_text(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(map(_json_text, obj)) + "]"
    return json.dumps(obj, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# Components


def _pattern(r: _Reader, d: dict, path: str) -> tuple[str, bool]:
    """A ``{"String": s}`` or ``{"Regex": s}`` pattern -> (text, is_regex)."""
    p = r.obj(r.get(d, "pattern", path, dict), f"{path}.pattern")
    if len(p) != 1 or next(iter(p)) not in ("String", "Regex"):
        raise r.error(f"{path}.pattern", 'expected {"String": ...} or {"Regex": ...}')
    kind = next(iter(p))
    return r.get(p, kind, f"{path}.pattern", str), kind == "Regex"


def _behavior(r: _Reader, d: dict, path: str, default=_REQUIRED) -> str:
    name = r.get(d, "behavior", path, str, default)
    snake = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
    if snake not in pre.BEHAVIORS:
        raise r.error(f"{path}.behavior", f"unknown split behavior {name!r}; expected Removed, Isolated, "
                                          f"MergedWithPrevious, MergedWithNext or Contiguous")
    return snake


def _type(r: _Reader, d, path: str) -> str:
    d = r.obj(d, path)
    return r.get(d, "type", path, str)


def _normalizer(r: _Reader, d, path: str):
    t = _type(r, d, path)
    what = f"the {t} normalizer"
    if t in ("NFC", "NFD", "NFKC", "NFKD"):
        r.check_keys(d, path, set(), what)
        return norm.UnicodeForm(t)
    if t in ("Lowercase", "StripAccents", "ByteLevel"):
        r.check_keys(d, path, set(), what)
        return {"Lowercase": norm.Lowercase, "StripAccents": norm.StripAccents, "ByteLevel": norm.ByteLevel}[t]()
    if t == "BertNormalizer":
        r.check_keys(d, path, {"clean_text", "handle_chinese_chars", "strip_accents", "lowercase"}, what)
        return norm.BertNormalizer(
            clean_text=r.get(d, "clean_text", path, bool, True),
            handle_chinese_chars=r.get(d, "handle_chinese_chars", path, bool, True),
            strip_accents=r.get(d, "strip_accents", path, (bool, None), None),
            lowercase=r.get(d, "lowercase", path, bool, True))
    if t == "Replace":
        r.check_keys(d, path, {"pattern", "content"}, what)
        pattern, is_regex = _pattern(r, d, path)
        return r.build(f"{path}.pattern", lambda: norm.Replace(pattern, r.get(d, "content", path, str), is_regex=is_regex))
    if t == "Prepend":
        r.check_keys(d, path, {"prepend"}, what)
        return norm.Prepend(r.get(d, "prepend", path, str))
    if t == "Strip":
        r.check_keys(d, path, {"strip_left", "strip_right"}, what)
        return norm.Strip(left=r.get(d, "strip_left", path, bool, True), right=r.get(d, "strip_right", path, bool, True))
    if t == "Precompiled":
        r.check_keys(d, path, {"precompiled_charsmap"}, what)
        data = r.get(d, "precompiled_charsmap", path, str)
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError as e:
            raise r.error(f"{path}.precompiled_charsmap", f"not valid base64 ({e})") from None
        try:
            return norm.Precompiled(raw)
        except FormatError as e:
            raise r.error(f"{path}.precompiled_charsmap", str(e)) from None
    if t == "Sequence":
        r.check_keys(d, path, {"normalizers"}, what)
        items = r.get(d, "normalizers", path, list)
        return norm.Sequence([_normalizer(r, x, f"{path}.normalizers[{i}]") for i, x in enumerate(items)])
    raise r.unsupported(f"{path}.type", f"the normalizer {t!r}")


def _pre_tokenizer(r: _Reader, d, path: str):
    t = _type(r, d, path)
    what = f"the {t} pre-tokenizer"
    if t == "ByteLevel":
        r.check_keys(d, path, {"add_prefix_space", "trim_offsets", "use_regex"}, what)
        return pre.ByteLevel(add_prefix_space=r.get(d, "add_prefix_space", path, bool, True),
                             trim_offsets=r.get(d, "trim_offsets", path, bool, True),
                             use_regex=r.get(d, "use_regex", path, bool, True))
    if t == "Split":
        r.check_keys(d, path, {"pattern", "behavior", "invert"}, what)
        pattern, is_regex = _pattern(r, d, path)
        behavior, invert = _behavior(r, d, path), r.get(d, "invert", path, bool, False)
        return r.build(f"{path}.pattern", lambda: pre.Split(pattern, behavior, invert=invert, is_regex=is_regex))
    if t == "Metaspace":
        r.check_keys(d, path, {"replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"}, what)
        return pre.Metaspace(*_metaspace_options(r, d, path))
    if t in ("BertPreTokenizer", "Whitespace", "WhitespaceSplit"):
        r.check_keys(d, path, set(), what)
        return {"BertPreTokenizer": pre.BertPreTokenizer, "Whitespace": pre.Whitespace,
                "WhitespaceSplit": pre.WhitespaceSplit}[t]()
    if t == "Digits":
        r.check_keys(d, path, {"individual_digits"}, what)
        return pre.Digits(r.get(d, "individual_digits", path, bool, False))
    if t == "Punctuation":
        r.check_keys(d, path, {"behavior"}, what)
        return pre.Punctuation(_behavior(r, d, path, "Isolated"))
    if t == "CharDelimiterSplit":
        r.check_keys(d, path, {"delimiter"}, what)
        delimiter = r.get(d, "delimiter", path, str)
        if len(delimiter) != 1:
            raise r.error(f"{path}.delimiter", f"expected one character, found {delimiter!r}")
        return pre.CharDelimiterSplit(delimiter)
    if t == "Sequence":
        r.check_keys(d, path, {"pretokenizers"}, what)
        items = r.get(d, "pretokenizers", path, list)
        return pre.Sequence([_pre_tokenizer(r, x, f"{path}.pretokenizers[{i}]") for i, x in enumerate(items)])
    raise r.unsupported(f"{path}.type", f"the pre-tokenizer {t!r}")


def _metaspace_options(r: _Reader, d: dict, path: str) -> tuple[str, str, bool]:
    """(replacement, prepend_scheme, split) of a Metaspace pre-tokenizer or decoder; older files
    have the boolean ``add_prefix_space``, which must agree with ``prepend_scheme``."""
    replacement = r.get(d, "replacement", path, str, "\u2581")
    if len(replacement) != 1:
        raise r.error(f"{path}.replacement", f"expected one character, found {replacement!r}")
    scheme = r.get(d, "prepend_scheme", path, str, "always")
    if scheme not in ("always", "first", "never"):
        raise r.error(f"{path}.prepend_scheme", f"unknown prepend scheme {scheme!r}; expected always, first or never")
    legacy = r.get(d, "add_prefix_space", path, (bool, None), None)
    if legacy is not None and legacy != (scheme != "never"):
        raise r.error(f"{path}.add_prefix_space", f"add_prefix_space={str(legacy).lower()} contradicts prepend_scheme {scheme!r}")
    str_rep = r.get(d, "str_rep", path, (str, None), None)
    if str_rep is not None and str_rep != replacement:
        raise r.error(f"{path}.str_rep", f"str_rep {str_rep!r} differs from the replacement {replacement!r}")
    return replacement, scheme, r.get(d, "split", path, bool, True)


def _token_pair(r: _Reader, d: dict, key: str, path: str) -> tuple[str, int]:
    v = r.get(d, key, path, list)
    if len(v) != 2 or not isinstance(v[0], str):
        raise r.error(f"{path}.{key}", 'expected ["token", id]')
    return v[0], r.token_id(v[1], f"{path}.{key}[1]")


def _post_processor(r: _Reader, d, path: str):
    t = _type(r, d, path)
    what = f"the {t} post-processor"
    if t == "TemplateProcessing":
        r.check_keys(d, path, {"single", "pair", "special_tokens"}, what)

        def template(key):
            items = []
            for i, item in enumerate(r.get(d, key, path, list)):
                where = f"{path}.{key}[{i}]"
                item = r.obj(item, where)
                if len(item) != 1 or next(iter(item)) not in ("SpecialToken", "Sequence"):
                    raise r.error(where, 'expected {"SpecialToken": {...}} or {"Sequence": {...}}')
                kind = next(iter(item))
                body = r.obj(item[kind], f"{where}.{kind}")
                name = r.get(body, "id", f"{where}.{kind}", str)
                type_id = r.get(body, "type_id", f"{where}.{kind}", int, 0)
                if kind == "Sequence" and name not in ("A", "B"):
                    raise r.error(f"{where}.{kind}.id", f"a sequence is 'A' or 'B', not {name!r}")
                items.append(("special" if kind == "SpecialToken" else "sequence", name, type_id))
            return items

        specials = {}
        sp = r.obj(r.get(d, "special_tokens", path, dict), f"{path}.special_tokens")
        for name, body in sp.items():
            where = f"{path}.special_tokens.{name}"
            body = r.obj(body, where)
            ids = [r.token_id(x, f"{where}.ids[{i}]") for i, x in enumerate(r.get(body, "ids", where, list))]
            tokens = r.get(body, "tokens", where, list)
            if len(tokens) != len(ids) or not all(isinstance(x, str) for x in tokens):
                raise r.error(f"{where}.tokens", "expected as many token strings as ids")
            specials[name] = (ids, tokens)
        single, pair = template("single"), template("pair")
        for key, items in (("single", single), ("pair", pair)):
            for i, (kind, name, _) in enumerate(items):
                if kind == "special" and name not in specials:
                    raise r.error(f"{path}.{key}[{i}]", f"the special token {name!r} is not in {path}.special_tokens")
        return post.TemplateProcessing(single, pair, specials)
    if t in ("BertProcessing", "RobertaProcessing"):
        known = {"sep", "cls"} | ({"trim_offsets", "add_prefix_space"} if t == "RobertaProcessing" else set())
        r.check_keys(d, path, known, what)
        sep, cls = _token_pair(r, d, "sep", path), _token_pair(r, d, "cls", path)
        if t == "BertProcessing":
            return post.BertProcessing(sep, cls)
        return post.RobertaProcessing(sep, cls, trim_offsets=r.get(d, "trim_offsets", path, bool, True),
                                      add_prefix_space=r.get(d, "add_prefix_space", path, bool, True))
    if t == "ByteLevel":
        r.check_keys(d, path, {"add_prefix_space", "trim_offsets", "use_regex"}, what)
        return post.ByteLevel(add_prefix_space=r.get(d, "add_prefix_space", path, bool, True),
                              trim_offsets=r.get(d, "trim_offsets", path, bool, True),
                              use_regex=r.get(d, "use_regex", path, bool, True))
    if t == "Sequence":
        r.check_keys(d, path, {"processors"}, what)
        items = r.get(d, "processors", path, list)
        return post.Sequence([_post_processor(r, x, f"{path}.processors[{i}]") for i, x in enumerate(items)])
    raise r.unsupported(f"{path}.type", f"the post-processor {t!r}")


def _decoder(r: _Reader, d, path: str):
    t = _type(r, d, path)
    what = f"the {t} decoder"
    if t == "ByteLevel":
        r.check_keys(d, path, {"add_prefix_space", "trim_offsets", "use_regex"}, what)
        return dec.ByteLevel()
    if t == "Metaspace":
        r.check_keys(d, path, {"replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"}, what)
        return dec.Metaspace(*_metaspace_options(r, d, path))
    if t == "WordPiece":
        r.check_keys(d, path, {"prefix", "cleanup"}, what)
        return dec.WordPiece(r.get(d, "prefix", path, str, "##"), r.get(d, "cleanup", path, bool, True))
    if t in ("ByteFallback", "Fuse"):
        r.check_keys(d, path, set(), what)
        return dec.ByteFallback() if t == "ByteFallback" else dec.Fuse()
    if t == "Strip":
        r.check_keys(d, path, {"content", "start", "stop"}, what)
        content = r.get(d, "content", path, str)
        if len(content) != 1:
            raise r.error(f"{path}.content", f"expected one character, found {content!r}")
        start, stop = r.get(d, "start", path, int), r.get(d, "stop", path, int)
        if start < 0 or stop < 0:
            raise r.error(path, "start and stop must not be negative")
        return dec.Strip(content, start, stop)
    if t == "Replace":
        r.check_keys(d, path, {"pattern", "content"}, what)
        pattern, is_regex = _pattern(r, d, path)
        return r.build(f"{path}.pattern", lambda: dec.Replace(pattern, r.get(d, "content", path, str), is_regex=is_regex))
    if t == "BPEDecoder":
        r.check_keys(d, path, {"suffix"}, what)
        return dec.BPEDecoder(r.get(d, "suffix", path, str, "</w>"))
    if t == "Sequence":
        r.check_keys(d, path, {"decoders"}, what)
        items = r.get(d, "decoders", path, list)
        return dec.Sequence([_decoder(r, x, f"{path}.decoders[{i}]") for i, x in enumerate(items)])
    raise r.unsupported(f"{path}.type", f"the decoder {t!r}")


def _vocab(r: _Reader, d: dict, path: str) -> dict[str, int]:
    """``d["vocab"]``: token -> id, each id once. ``path`` "" is a vocab.json file itself."""
    prefix = f"{path}.vocab" if path else "vocab"
    vocab = r.obj(r.get(d, "vocab", path, dict), prefix)
    by_id: dict[int, str] = {}
    for token, i in vocab.items():
        where = f"{prefix}[{token!r}]"
        r.token_id(i, where)
        if not token:
            raise r.error(where, "a token is the empty string")
        if i in by_id:
            raise r.error(where, f"the id {i} is also the id of {by_id[i]!r}; every token needs its own id")
        by_id[i] = token
    return vocab


def _model(r: _Reader, d, path: str = "model"):
    d = r.obj(d, path)
    t = d.get("type")
    if t is None:  # older files leave the type out
        t = "BPE" if "merges" in d else "Unigram" if isinstance(d.get("vocab"), list) else \
            "WordPiece" if "continuing_subword_prefix" in d else "WordLevel"
    elif not isinstance(t, str):
        raise r.error(f"{path}.type", f"expected a string, found {_kind(t)}")
    what = f"the {t} model"
    if t == "BPE":
        r.check_keys(d, path, {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                               "byte_fallback", "ignore_merges", "vocab", "merges"}, what)
        dropout = r.get(d, "dropout", path, (float, int, None), None)
        if dropout not in (None, 0, 0.0):
            raise r.unsupported(f"{path}.dropout", f"BPE dropout ({dropout}, random segmentation)")
        vocab = _vocab(r, d, path)
        prefix = r.get(d, "continuing_subword_prefix", path, (str, None), None)
        suffix = r.get(d, "end_of_word_suffix", path, (str, None), None)
        unk = r.get(d, "unk_token", path, (str, None), None)
        if unk is not None and unk not in vocab:
            raise r.error(f"{path}.unk_token", f"the unknown token {unk!r} is not in the vocabulary")
        byte_fallback = r.get(d, "byte_fallback", path, bool, False)
        if byte_fallback:
            have = sum(f"<0x{b:02X}>" in vocab for b in range(256))
            if 0 < have < 256:
                raise r.unsupported(f"{path}.byte_fallback", f"byte fallback with only {have} of the 256 <0xXX> tokens")
        merges = _merges(r, d, path, vocab, prefix or "")
        ignore_merges = r.get(d, "ignore_merges", path, bool, False)
        # SentencePiece-style vocabularies (Gemma, Llama 2) encode word by word, cut where no
        # merge's token crosses (see `word_split_pattern`). A prefix or suffix marks a word's
        # ends, and ignore_merges looks up the whole word: both would differ. "▁" must be a
        # token, so that a run of unknown characters never spans two words (fuse_unk joins it).
        split = None
        if SPACE in vocab and not prefix and not suffix and not ignore_merges:
            split = word_split_pattern(a + b for a, b in merges)
        return HFBPE(vocab, merges, unk_token=unk, byte_fallback=byte_fallback,
                     fuse_unk=r.get(d, "fuse_unk", path, bool, False), continuing_subword_prefix=prefix,
                     end_of_word_suffix=suffix, ignore_merges=ignore_merges, split_pattern=split)
    if t == "WordPiece":
        r.check_keys(d, path, {"unk_token", "continuing_subword_prefix", "max_input_chars_per_word", "vocab"}, what)
        vocab = _vocab(r, d, path)
        unk = r.get(d, "unk_token", path, str, "[UNK]")
        if unk not in vocab:
            raise r.error(f"{path}.unk_token", f"the unknown token {unk!r} is not in the vocabulary")
        max_chars = r.get(d, "max_input_chars_per_word", path, int, 100)
        if max_chars < 0:
            raise r.error(f"{path}.max_input_chars_per_word", "must not be negative")
        return WordPiece(vocab, unk_token=unk, continuing_subword_prefix=r.get(d, "continuing_subword_prefix", path, str, "##"),
                         max_input_chars_per_word=max_chars)
    if t == "WordLevel":
        r.check_keys(d, path, {"vocab", "unk_token"}, what)
        vocab = _vocab(r, d, path)
        unk = r.get(d, "unk_token", path, (str, None), None)
        if unk is not None and unk not in vocab:
            raise r.error(f"{path}.unk_token", f"the unknown token {unk!r} is not in the vocabulary")
        return WordLevel(vocab, unk_token=unk)
    if t == "Unigram":
        r.check_keys(d, path, {"unk_id", "vocab", "byte_fallback"}, what)
        items = r.get(d, "vocab", path, list)
        pieces, seen = [], {}
        for i, item in enumerate(items):
            where = f"{path}.vocab[{i}]"
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], (int, float)) and not isinstance(item[1], bool)):
                raise r.error(where, 'expected ["piece", score]')
            if not math.isfinite(item[1]):
                raise r.error(where, f"the score {item[1]} is not a finite number")
            if item[0] in seen:
                raise r.error(where, f"the piece {item[0]!r} also has id {seen[item[0]]}; every piece must appear once")
            seen[item[0]] = i
            pieces.append((item[0], float(item[1])))
        if len(pieces) >= _MAX_ID:
            raise r.error(f"{path}.vocab", f"{len(pieces)} pieces are too many (at most {_MAX_ID})")
        unk_id = r.get(d, "unk_id", path, (int, None), None)
        if unk_id is not None and not 0 <= unk_id < len(pieces):
            raise r.error(f"{path}.unk_id", f"the id {unk_id} is out of range (the vocabulary has {len(pieces)} pieces)")
        byte_fallback = r.get(d, "byte_fallback", path, bool, False)
        if byte_fallback and not all(f"<0x{b:02X}>" in seen for b in range(256)):
            raise r.unsupported(f"{path}.byte_fallback", "byte fallback without all 256 <0xXX> pieces")
        return HFUnigram(pieces, unk_id=unk_id, byte_fallback=byte_fallback)
    raise r.unsupported(f"{path}.type", f"the model {t!r}")


def _merges(r: _Reader, d: dict, path: str, vocab: dict[str, int], prefix: str) -> list[tuple[str, str]]:
    items = r.get(d, "merges", path, list, [])
    cut = len(prefix)
    merges = []
    append = merges.append
    try:  # fast path for well-formed merges; any problem is located by the checks below
        for m in items:
            a, b = m.split(" ") if type(m) is str else m
            if type(a) is not str or type(b) is not str or a not in vocab or b not in vocab or a + b[cut:] not in vocab:
                raise ValueError
            append((a, b))
        return merges
    except (ValueError, TypeError):
        pass
    for i, m in enumerate(items):
        where = f"{path}.merges[{i}]"
        if isinstance(m, str):
            parts = m.split(" ")
            if len(parts) != 2:
                raise r.error(where, f"a merge string must be two tokens separated by one space, found {m!r}")
        elif isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
            parts = m
        else:
            raise r.error(where, f'expected "left right" or ["left", "right"], found {str(m)[:40]}')
        a, b = parts
        for token in (a, b):
            if token not in vocab:
                raise r.error(where, f"the merge names {token!r}, which is not in the vocabulary")
        joined = a + b[cut:]
        if joined not in vocab:
            raise r.error(where, f"the merge of {a!r} and {b!r} gives {joined!r}, which is not in the vocabulary")
    raise AssertionError("unreachable: the fast path rejected valid merges")


def _added_tokens(r: _Reader, items: list, model) -> list[AddedToken]:
    """The added tokens, checking that each has the id Hugging Face gives it: the model's id for a
    string in its vocabulary, else the next id after the vocabulary and the earlier added tokens."""
    out: list[AddedToken] = []
    contents: dict[str, int] = {}
    ids: dict[int, str] = {}
    model_size = len(model.get_vocab())
    highest = None
    for i, item in enumerate(items):
        where = f"added_tokens[{i}]"
        item = r.obj(item, where)
        r.check_keys(item, where, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}, "an added token")
        content = r.get(item, "content", where, str)
        if not content:
            raise r.error(f"{where}.content", "an added token is the empty string")
        token_id = r.token_id(r.get(item, "id", where, int), f"{where}.id")
        if content in contents:
            raise r.error(f"{where}.content", f"{content!r} is already added_tokens[{contents[content]}]")
        if token_id in ids:
            raise r.error(f"{where}.id", f"the id {token_id} is already the id of the added token {ids[token_id]!r}")
        in_model = model.token_to_id(content)
        if in_model is not None:
            expected = in_model
        elif highest is None:
            expected = model_size
        else:
            expected = highest + 1 if highest >= model_size or model_size == 0 else model_size
        if token_id != expected:
            raise r.error(f"{where}.id", f"{content!r} has id {token_id}, but Hugging Face gives it id {expected} "
                                         f"({'its id in the model vocabulary' if in_model is not None else 'the next free id'}); "
                                         f"the ids of the file are inconsistent")
        highest = token_id if highest is None else max(highest, token_id)
        contents[content], ids[token_id] = i, content
        flags = {k: r.get(item, k, where, bool) for k in ("special", "lstrip", "rstrip", "single_word", "normalized")}
        out.append(AddedToken(content, token_id, **flags))
    return out


def pipeline_from_dict(d, *, source: str = "<tokenizer.json>") -> tuple[Pipeline, dict]:
    """Builds the pipeline of a parsed ``tokenizer.json``; returns it and the ignored settings."""
    r = _Reader(source)
    d = r.obj(d, "")
    known = {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "model",
             "post_processor", "decoder"}
    for k in d:
        if k not in known:
            raise r.unsupported(k, f"the top-level key {k!r}")
    if "model" not in d:
        raise r.error("model", "missing: a tokenizer.json has a model")
    model = r.build("model", lambda: _model(r, d["model"]))
    opt = lambda key, build: None if d.get(key) is None else build(r, d[key], key)  # noqa: E731
    normalizer = opt("normalizer", _normalizer)
    pipeline = Pipeline(
        model,
        normalizer=normalizer,
        pre_tokenizer=opt("pre_tokenizer", _pre_tokenizer),
        post_processor=opt("post_processor", _post_processor),
        decoder=opt("decoder", _decoder) or dec.SpaceJoin(),
        added_tokens=_added_tokens(r, r.get(d, "added_tokens", "", list, []), model),
    )
    _check_known_ids(r, pipeline)
    return pipeline, {k: d.get(k) for k in ("truncation", "padding") if d.get(k) is not None}


def _check_known_ids(r: _Reader, pipeline: Pipeline) -> None:
    """The ids a post-processor adds must be tokens of the vocabulary."""
    p = pipeline.post_processor
    stack = [p] if p is not None else []
    while stack:
        p = stack.pop()
        if isinstance(p, post.Sequence):
            stack.extend(p.processors)
            continue
        ids = []
        if isinstance(p, post.TemplateProcessing):
            ids = [i for v, _ in p.special_tokens.values() for i in v]
        elif isinstance(p, (post.BertProcessing, post.RobertaProcessing)):
            ids = [p.cls[1], p.sep[1]]
        for i in ids:
            if pipeline.id_to_token(i) is None:
                raise r.error("post_processor", f"the template adds the id {i}, which is not a token of the vocabulary")


# ---------------------------------------------------------------------------------------------
# Legacy files


def _load_gpt2(vocab_path: Path, merges_path: Path) -> Tokenizer:
    """``vocab.json`` + ``merges.txt``: GPT-2's byte-level BPE, as ``GPT2TokenizerFast`` builds it."""
    source = f"{vocab_path} + {merges_path.name}"
    r = _Reader(str(vocab_path))
    vocab = _vocab(r, {"vocab": read_json(vocab_path)}, "")
    merges = []
    lines = _read_bytes(merges_path).decode("utf-8", "replace").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        if line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise FormatError(f"{merges_path}:{lineno}: a merge line must be two tokens separated by one space, found {line[:60]!r}")
        for token in parts:
            if token not in vocab:
                raise FormatError(f"{merges_path}:{lineno}: the merge names {token!r}, which is not in {vocab_path.name}")
        if parts[0] + parts[1] not in vocab:
            raise FormatError(f"{merges_path}:{lineno}: the merge gives {parts[0] + parts[1]!r}, which is not in {vocab_path.name}")
        merges.append((parts[0], parts[1]))
    model = HFBPE(vocab, merges)
    eos = "<|endoftext|>"
    added = [AddedToken(eos, vocab[eos], special=True)] if eos in vocab else []
    pipeline = Pipeline(model, pre_tokenizer=pre.ByteLevel(add_prefix_space=False), decoder=dec.ByteLevel(),
                        post_processor=post.ByteLevel(), added_tokens=added)
    return Tokenizer.from_pipeline(pipeline, metadata={"source": "huggingface", "path": source, "form": "gpt2"})


_BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _load_bert(path: Path, lowercase: bool) -> Tokenizer:
    """``vocab.txt``: BERT's WordPiece, as ``BertTokenizerFast`` builds it."""
    vocab: dict[str, int] = {}
    for i, line in enumerate(_read_bytes(path).decode("utf-8", "replace").split("\n")):
        token = line.rstrip()
        if not token:
            if i == len(vocab) and not line:  # the final newline
                continue
            raise FormatError(f"{path}:{i + 1}: an empty line; vocab.txt holds one token per line")
        if token in vocab:
            raise FormatError(f"{path}:{i + 1}: the token {token!r} is already on line {vocab[token] + 1}")
        vocab[token] = i
    for s in ("[UNK]", "[CLS]", "[SEP]"):
        if s not in vocab:
            raise FormatError(f"{path}: the BERT token {s} is missing; is this a BERT vocab.txt?")
    model = WordPiece(vocab, unk_token="[UNK]")
    added = [AddedToken(s, vocab[s], special=True) for s in _BERT_SPECIALS if s in vocab]
    pipeline = Pipeline(
        model, normalizer=norm.BertNormalizer(lowercase=lowercase), pre_tokenizer=pre.BertPreTokenizer(),
        post_processor=post.TemplateProcessing(
            [("special", "[CLS]", 0), ("sequence", "A", 0), ("special", "[SEP]", 0)],
            [("special", "[CLS]", 0), ("sequence", "A", 0), ("special", "[SEP]", 0), ("sequence", "B", 1), ("special", "[SEP]", 1)],
            {s: ([vocab[s]], [s]) for s in ("[CLS]", "[SEP]")}),
        decoder=dec.WordPiece(), added_tokens=added)
    return Tokenizer.from_pipeline(pipeline, metadata={"source": "huggingface", "path": str(path), "form": "bert",
                                                       "lowercase": lowercase})


# ---------------------------------------------------------------------------------------------
# Entry points


def load_hf(path: str | os.PathLike, *, lowercase: bool | None = None) -> Tokenizer:
    """Loads a Hugging Face tokenizer: a ``tokenizer.json`` (or ``.json.xz``) file, a
    ``vocab.json``/``merges.txt`` or ``vocab.txt`` file, or a directory holding one of these.

    ``lowercase``: for ``vocab.txt`` (BERT) only, whether to lowercase (default True: uncased).
    """
    p = Path(path)
    if p.is_dir():
        for name in ("tokenizer.json", "tokenizer.json.xz"):
            if (p / name).is_file():
                return load_hf(p / name, lowercase=lowercase)
        if (p / "vocab.json").is_file() and (p / "merges.txt").is_file():
            return load_hf(p / "vocab.json", lowercase=lowercase)
        if (p / "vocab.txt").is_file():
            return load_hf(p / "vocab.txt", lowercase=lowercase)
        raise FormatError(f"{p} holds no Hugging Face tokenizer: expected tokenizer.json, vocab.json + merges.txt, or vocab.txt")
    if not p.exists():
        raise FormatError(f"{p}: no such file")
    if p.name == "vocab.txt":
        return _load_bert(p, True if lowercase is None else lowercase)
    if lowercase is not None:
        raise TypeError("lowercase= applies to BERT vocab.txt files only; a tokenizer.json says itself whether it lowercases")
    if p.name in ("vocab.json", "merges.txt"):
        vocab, merges = p.with_name("vocab.json"), p.with_name("merges.txt")
        if not (vocab.is_file() and merges.is_file()):
            raise FormatError(f"{p}: the GPT-2 form needs vocab.json and merges.txt side by side in {p.parent}")
        return _load_gpt2(vocab, merges)
    return from_hf_dict(read_json(p), source=str(p))


def is_hf_dict(d) -> bool:
    """Whether parsed JSON looks like a Hugging Face ``tokenizer.json`` (a top-level ``model``,
    and not toksmith's own format)."""
    return isinstance(d, dict) and "model" in d and d.get("format") != "toksmith"


def from_hf_dict(d, *, source: str = "<tokenizer.json>") -> Tokenizer:
    """The tokenizer of a parsed ``tokenizer.json`` (``source`` names it in errors)."""
    pipeline, ignored = pipeline_from_dict(d, source=source)
    metadata = {"source": "huggingface", "path": source}
    for k, v in ignored.items():
        metadata[f"hf_{k}"] = v  # not applied by toksmith
    return Tokenizer.from_pipeline(pipeline, metadata=metadata)


# ---------------------------------------------------------------------------------------------
# Export


def _component(obj, what: str):
    if obj is None:
        return None
    to_hf = getattr(obj, "to_hf", None)
    if to_hf is None:
        raise FormatError(f"the {what} {type(obj).__name__} has no Hugging Face form; this tokenizer cannot be saved as tokenizer.json")
    return to_hf()


def _model_dict(model) -> dict:
    if isinstance(model, BPE):
        o = model.options
        return {"type": "BPE", "dropout": None, "unk_token": o["unk_token"],
                "continuing_subword_prefix": o["continuing_subword_prefix"], "end_of_word_suffix": o["end_of_word_suffix"],
                "fuse_unk": o["fuse_unk"], "byte_fallback": o["byte_fallback"], "ignore_merges": o["ignore_merges"],
                "vocab": dict(sorted(model.get_vocab().items(), key=lambda kv: kv[1])), "merges": [list(m) for m in model.merges]}
    if isinstance(model, WordPiece):
        return {"type": "WordPiece", "unk_token": model.unk_token, "continuing_subword_prefix": model.continuing_subword_prefix,
                "max_input_chars_per_word": model.max_input_chars_per_word,
                "vocab": dict(sorted(model.get_vocab().items(), key=lambda kv: kv[1]))}
    if isinstance(model, HFUnigram):
        return {"type": "Unigram", "unk_id": model.unk_id, "vocab": [[p, s] for p, s in model.pieces],
                "byte_fallback": model.byte_fallback}
    if isinstance(model, WordLevel):
        return {"type": "WordLevel", "vocab": dict(sorted(model.get_vocab().items(), key=lambda kv: kv[1])),
                "unk_token": model.unk_token}
    raise FormatError(f"the model {type(model).__name__} cannot be written as a Hugging Face model")


def _added_dict(t: AddedToken) -> dict:
    return {"id": t.id, "content": t.content, "single_word": t.single_word, "lstrip": t.lstrip, "rstrip": t.rstrip,
            "normalized": t.normalized, "special": t.special}


def _byte_level_dict(tokenizer: Tokenizer) -> dict:
    from ..byte_level import bytes_to_token

    vocab = {bytes_to_token(b): i for i, b in sorted(tokenizer._tokens.items())}
    for content, i in tokenizer.special_tokens.items():
        if vocab.get(content, i) != i:
            raise FormatError(f"the special token {content!r} is spelled like the ordinary token {vocab[content]}; "
                              f"Hugging Face could not tell them apart")
        vocab[content] = i  # so that Hugging Face keeps its id, whatever the gaps
    merges = [[bytes_to_token(a), bytes_to_token(b)] for a, b in tokenizer.merges]
    pre_tokenizer = {"type": "Sequence", "pretokenizers": [
        # Removed + invert: the matches are the chunks and text between them is dropped, as in
        # toksmith and tiktoken (the same as Isolated for the usual patterns, which match everything)
        {"type": "Split", "pattern": {"Regex": pre.rust_regex_to_onig(tokenizer.pattern)}, "behavior": "Removed", "invert": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [_added_dict(AddedToken(s, i, special=True)) for s, i in sorted(tokenizer.special_tokens.items(), key=lambda kv: kv[1])],
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def to_hf_dict(tokenizer: Tokenizer) -> dict:
    """The ``tokenizer.json`` content of ``tokenizer`` (see :func:`save_hf`)."""
    p = tokenizer.pipeline
    if p is not None and is_sentencepiece_style(tokenizer):
        p = hf_pipeline(tokenizer)  # the same tokenizer in Hugging Face's components
    if p is None:
        d = _byte_level_dict(tokenizer)
    else:
        d = {
            "version": "1.0",
            "truncation": tokenizer.metadata.get("hf_truncation"),
            "padding": tokenizer.metadata.get("hf_padding"),
            "added_tokens": [_added_dict(t) for t in p.added_tokens],
            "normalizer": _component(p.normalizer, "normalizer"),
            "pre_tokenizer": _component(p.pre_tokenizer, "pre-tokenizer"),
            "post_processor": _component(p.post_processor, "post-processor"),
            "decoder": _component(p.decoder, "decoder"),
            "model": _model_dict(p.model),
        }
        vocab = d["model"]["vocab"]
        if isinstance(vocab, dict) and vocab:
            # Added tokens with ids inside the model's range (an extended vocabulary puts new
            # tokens after them) go into the model vocabulary too, or Hugging Face renumbers them.
            top = max(vocab.values())
            for t in p.added_tokens:
                if t.id < top and t.content not in vocab:
                    vocab[t.content] = t.id
    # Hugging Face numbers the added tokens itself: check it would keep these ids.
    model = d["model"]
    _added_tokens(_Reader("the exported tokenizer"), d["added_tokens"],
                  WordLevel({t[0]: i for i, t in enumerate(model["vocab"])} if isinstance(model["vocab"], list) else model["vocab"]))
    return d


def save_hf(tokenizer: Tokenizer, path: str | os.PathLike) -> None:
    """Writes ``tokenizer`` as a Hugging Face ``tokenizer.json`` (xz-compressed if ``path`` ends
    in ``.xz``), which ``tokenizers.Tokenizer.from_file`` reads and encodes identically.

    Works for tokenizers loaded by :func:`load_hf` and for toksmith's byte-level BPE tokenizers
    (trained, or read from tiktoken). Raises :class:`FormatError` for a component Hugging Face
    does not have.
    """
    from .._io import write_atomic

    d = to_hf_dict(tokenizer)
    if d["model"]["type"] == "Unigram":  # scores spelled so that tokenizers reads them exactly
        data = _json_text(d).encode("utf-8")
    else:
        data = json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if os.fspath(path).endswith(".xz"):
        data = lzma.compress(data)
    write_atomic(path, data)
