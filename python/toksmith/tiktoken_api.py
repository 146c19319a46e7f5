"""tiktoken's names for what a :class:`~toksmith.Tokenizer` does, so that code written against
``tiktoken.Encoding`` runs on any toksmith tokenizer unchanged.

``toksmith.get_encoding("o200k_base")`` stands for ``tiktoken.get_encoding``, and
``toksmith.encoding_for_model("gpt-4o")`` for ``tiktoken.encoding_for_model``; the tokenizer they
return answers tiktoken's methods and properties (``n_vocab``, ``eot_token``,
``encode_single_token``, ``decode_with_offsets``, ``encode_ordinary_batch``...) with the same
values (tests/test_tiktoken_api.py compares each one with tiktoken on the same encodings).
Lookups that tiktoken answers with ``KeyError`` (an unknown token, model or encoding) raise
:class:`~toksmith.errors.UnknownTokenError`, which is a ``KeyError`` too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .errors import DecodeError, EncodeError, UnknownTokenError

# Which encoding each OpenAI model uses (public facts, as tiktoken's model table has them):
# exact names first, then name prefixes (dated versions and fine-tunes), longest prefix first.
_MODELS = {
    "o200k_base": ["o1", "o3", "o4-mini", "gpt-5", "gpt-4.1", "gpt-4o"],
    "cl100k_base": ["gpt-4", "gpt-3.5-turbo", "gpt-3.5", "gpt-35-turbo", "davinci-002", "babbage-002",
                    "text-embedding-ada-002", "text-embedding-3-small", "text-embedding-3-large"],
    "p50k_base": ["text-davinci-003", "text-davinci-002", "code-davinci-002", "code-davinci-001",
                  "code-cushman-002", "code-cushman-001", "davinci-codex", "cushman-codex"],
    "p50k_edit": ["text-davinci-edit-001", "code-davinci-edit-001"],
    "r50k_base": ["text-davinci-001", "text-curie-001", "text-babbage-001", "text-ada-001", "davinci", "curie",
                  "babbage", "ada", "text-similarity-davinci-001", "text-similarity-curie-001",
                  "text-similarity-babbage-001", "text-similarity-ada-001", "text-search-davinci-doc-001",
                  "text-search-curie-doc-001", "text-search-babbage-doc-001", "text-search-ada-doc-001",
                  "code-search-babbage-code-001", "code-search-ada-code-001"],
    "gpt2": ["gpt2", "gpt-2"],
}
_MODEL_PREFIXES = {
    "o200k_base": ["o1-", "o3-", "o4-mini-", "gpt-5", "gpt-4.5-", "gpt-4.1-", "chatgpt-4o-", "gpt-4o-", "ft:gpt-4o"],
    "o200k_harmony": ["gpt-oss-"],
    "cl100k_base": ["gpt-4-", "gpt-3.5-turbo-", "gpt-35-turbo-", "ft:gpt-4", "ft:gpt-3.5-turbo", "ft:davinci-002",
                    "ft:babbage-002"],
}
_MODEL_TO_ENCODING = {model: enc for enc, models in _MODELS.items() for model in models}
_PREFIX_TO_ENCODING = sorted(((p, enc) for enc, ps in _MODEL_PREFIXES.items() for p in ps),
                             key=lambda pe: -len(pe[0]))


def name_of_file(path) -> str:
    """A short name for a tokenizer file: its stem, or its folder's name for a generic file
    name (``hf/llama3/tokenizer.json`` -> ``llama3``)."""
    import os

    path = os.fspath(path).rstrip("/\\")
    base = os.path.basename(path)
    if base in ("tokenizer.json", "tokenizer.json.xz", "vocab.json", "merges.txt", "vocab.txt"):
        return os.path.basename(os.path.dirname(path)) or base
    for suffix in (".xz", ".json", ".model", ".gguf", ".tiktoken"):
        base = base.removesuffix(suffix)
    return base


def encoding_name_for_model(model_name: str) -> str:
    """The name of the encoding an OpenAI model uses (``"gpt-4o"`` -> ``"o200k_base"``)."""
    if not isinstance(model_name, str):
        raise EncodeError(f"a model name is a str, not {type(model_name).__name__}")
    if model_name in _MODEL_TO_ENCODING:
        return _MODEL_TO_ENCODING[model_name]
    for prefix, encoding in _PREFIX_TO_ENCODING:
        if model_name.startswith(prefix):
            return encoding
    raise UnknownTokenError(f"no encoding is known for the model {model_name!r}; load one by name instead, "
                            f"e.g. toksmith.get_encoding('o200k_base') (names: {', '.join(list_encoding_names())})")


def list_encoding_names() -> list[str]:
    """The tiktoken encodings toksmith knows by name."""
    from .formats.tiktoken import ENCODINGS

    return list(ENCODINGS)


def get_encoding(encoding_name: str, **options):
    """A tiktoken encoding by name, as ``tiktoken.get_encoding``; the ``.tiktoken`` file is read
    from ``tiktoken_dir=``, ``$TOKSMITH_TIKTOKEN_DIR`` or tiktoken's own download cache, never
    downloaded (see :func:`toksmith.formats.tiktoken.load_tiktoken`)."""
    from .formats.tiktoken import ENCODINGS, load_tiktoken

    if encoding_name not in ENCODINGS:
        raise UnknownTokenError(f"unknown encoding {encoding_name!r}; known: {', '.join(ENCODINGS)} "
                                f"(toksmith.load() reads .tiktoken files and other formats)")
    return load_tiktoken(encoding_name, **options)


def encoding_for_model(model_name: str, **options):
    """The encoding an OpenAI model uses, as ``tiktoken.encoding_for_model``."""
    return get_encoding(encoding_name_for_model(model_name), **options)


class TiktokenMethods:
    """tiktoken.Encoding's methods and properties, for :class:`~toksmith.Tokenizer` (a mixin)."""

    @property
    def name(self) -> str:
        """The encoding's name (tiktoken encodings), else the name the file gives (a GGUF's
        general name, a tokenizer.json's folder), else ``"toksmith"``."""
        meta = self.metadata
        for key in ("encoding", "name"):
            if isinstance(meta.get(key), str) and meta[key]:
                return meta[key]
        if isinstance(meta.get("path"), str) and meta["path"]:
            return name_of_file(meta["path"])
        return "toksmith"

    @property
    def max_token_value(self) -> int:
        """The largest id of the vocabulary (ordinary or special)."""
        return self.vocab_size - 1

    @property
    def n_vocab(self) -> int:
        """``max_token_value + 1``, as tiktoken counts (ids left unused inside count too)."""
        return self.max_token_value + 1

    @property
    def eot_token(self) -> int:
        """The id of ``<|endoftext|>``."""
        if "<|endoftext|>" not in self.special_tokens:
            raise UnknownTokenError(f"this tokenizer has no <|endoftext|> token; its special tokens: "
                                    f"{sorted(self.special_tokens)[:10]}")
        return self.special_tokens["<|endoftext|>"]

    @property
    def special_tokens_set(self) -> set[str]:
        return set(self.special_tokens)

    def is_special_token(self, token: int) -> bool:
        """Whether ``token`` is the id of a special token (False for anything else, as tiktoken)."""
        try:
            return token in self._special_ids()
        except TypeError:  # unhashable
            return False

    def _special_ids(self) -> frozenset[int]:
        specials = self.special_tokens
        cached = self.__dict__.get("_special_ids_cache")
        if cached is None or cached[0] != len(specials):
            cached = (len(specials), frozenset(specials.values()))
            self._special_ids_cache = cached
        return cached[1]

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of the token whose bytes (or special string) are exactly ``text_or_bytes``;
        :class:`UnknownTokenError` (a ``KeyError``) when there is none."""
        if isinstance(text_or_bytes, str):
            data = text_or_bytes.encode("utf-8", errors="surrogatepass")
        elif isinstance(text_or_bytes, (bytes, bytearray, memoryview)):
            data = bytes(text_or_bytes)
        else:
            raise EncodeError(f"encode_single_token takes a str or bytes, not {type(text_or_bytes).__name__}")
        found = self._model.token_id(data) if self._model is not None else self._ids_by_bytes().get(data)
        if found is not None:
            return found
        try:
            return self.special_tokens[data.decode("utf-8")]
        except (UnicodeDecodeError, KeyError):
            pass
        raise UnknownTokenError(f"{text_or_bytes!r} is not a single token of this vocabulary; "
                                f"encode() gives the tokens of any text")

    def _ordinary_token_bytes(self) -> dict[int, bytes]:
        """id -> bytes of every ordinary token, for tokenizers run by a pipeline (made on first use)."""
        table = self.__dict__.get("_ordinary_bytes_cache")
        if table is None:
            specials, table = self._special_ids(), {}
            for i in range(self.vocab_size):
                if i not in specials:
                    try:
                        table[i] = self.token_bytes(i)
                    except DecodeError:  # an unused id
                        pass
            self._ordinary_bytes_cache = table
        return table

    def _ids_by_bytes(self) -> dict[bytes, int]:
        """bytes -> id for tokenizers run by a pipeline: where several tokens have the same
        bytes (SentencePiece's byte-fallback pieces ``<0x41>`` and ``A``), the one that is not a
        byte-fallback piece, else the lowest id."""
        table = self.__dict__.get("_ids_by_bytes_cache")
        if table is None:
            table = {}
            for i, data in self._ordinary_token_bytes().items():  # in id order
                held = table.get(data)
                if held is None or (_is_byte_piece(self.id_to_token(held)) and not _is_byte_piece(self.id_to_token(i))):
                    table[data] = i
            self._ids_by_bytes_cache = table
        return table

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one token; :class:`UnknownTokenError` (a ``KeyError``) for an id that is
        not in the vocabulary."""
        try:
            return self.token_bytes(token)
        except DecodeError as e:
            if isinstance(token, int) and not isinstance(token, bool):
                raise UnknownTokenError(str(e)) from None
            raise

    def decode_tokens_bytes(self, tokens: Iterable[int]) -> list[bytes]:
        """The bytes of each token."""
        return [self.decode_single_token_bytes(t) for t in tokens]

    def decode_with_offsets(self, tokens: Sequence[int]) -> tuple[str, list[int]]:
        """The text of ``tokens`` and, for each token, the index in it of the first character
        holding one of the token's bytes (as tiktoken). Raises :class:`DecodeError` when the
        bytes are not valid UTF-8, or when the tokenizer's decoder does not simply join its
        tokens' bytes (BERT, SentencePiece: no offsets into its text then)."""
        tokens = list(tokens)
        pieces = self.decode_tokens_bytes(tokens)
        data = b"".join(pieces)
        if self._pipeline is not None and self.decode_bytes(tokens) != data:
            raise DecodeError("decode_with_offsets needs a tokenizer whose text is its tokens' bytes joined "
                              "(tiktoken, toksmith BPE, byte-level tokenizer.json); this one's decoder rewrites them")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"the tokens decode to bytes that are not valid UTF-8 ({e.reason} at byte {e.start}); "
                              f"offsets are only defined for whole characters") from None
        # Characters start at every byte that is not a continuation byte (10xxxxxx); a token that
        # starts inside a character gets the index of that character.
        offsets, chars = [], 0
        for piece in pieces:
            starts_inside = bool(piece) and 0x80 <= piece[0] < 0xC0
            offsets.append(max(0, chars - starts_inside))
            chars += sum(1 for b in piece if not 0x80 <= b < 0xC0)
        return text, offsets

    def encode_ordinary_batch(self, text: Iterable[str], *, num_threads: int | None = None) -> list[list[int]]:
        """:meth:`encode_ordinary` of each text, in parallel (special strings are plain text)."""
        return self.encode_batch(text, num_threads=num_threads, disallowed_special=(), add_special_tokens=False)

    def decode_batch(self, batch: Iterable[Sequence[int]], *, errors: str = "replace",
                     num_threads: int | None = None) -> list[str]:
        """:meth:`decode` of each list of ids (``num_threads`` is accepted for tiktoken's
        signature; decoding is fast enough on this thread)."""
        from .tokenizer import check_threads

        check_threads(num_threads, DecodeError)
        return [self.decode(ids, errors) for ids in batch]

    def decode_bytes_batch(self, batch: Iterable[Sequence[int]], *, num_threads: int | None = None) -> list[bytes]:
        """:meth:`decode_bytes` of each list of ids."""
        from .tokenizer import check_threads

        check_threads(num_threads, DecodeError)
        return [self.decode_bytes(ids) for ids in batch]

    def token_byte_values(self) -> list[bytes]:
        """The bytes of every ordinary (not special) token, sorted."""
        if self._model is not None:
            return sorted(self._tokens.values())
        return sorted(self._ordinary_token_bytes().values())


def _is_byte_piece(name: str | None) -> bool:
    """A SentencePiece byte-fallback piece name, ``<0x41>``."""
    return name is not None and len(name) == 6 and name.startswith("<0x") and name.endswith(">")
