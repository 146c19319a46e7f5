"""The general tokenization pipeline, for tokenizers loaded from other formats.

One string's path through :meth:`Pipeline.encode`:

1. added tokens are cut out of the raw text (special ones only where the caller allowed them);
2. each remaining piece is normalized (``normalizer.normalize(str) -> str``);
3. split into words (``pre_tokenizer.pre_tokenize(str, is_first=bool) -> list[str]``);
4. the model turns the words into ids (``model.encode_words(list[str]) -> list[int]``);
5. the post-processor adds template tokens such as ``[CLS]``/``<s>``
   (``post_processor.process(ids, pair=None) -> list[int]``).

Decoding maps ids to token strings and hands them to ``decoder.decode(list[str]) -> str``.
Each stage is any object with that method; the stage modules provide the Hugging Face and
SentencePiece components. Byte-level BPE tokenizers trained by toksmith or read from tiktoken
do not go through here: their whole pipeline runs in Rust (``toksmith.tokenizer``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class AddedToken:
    """A token matched in the raw text before anything else (Hugging Face ``added_tokens``)."""

    content: str
    id: int
    special: bool = True
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
    normalized: bool = False


class Pipeline:
    def __init__(self, model, *, normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None,
                 added_tokens: Sequence[AddedToken] = ()) -> None:
        self.model = model
        self.normalizer = normalizer
        self.pre_tokenizer = pre_tokenizer
        self.post_processor = post_processor
        self.decoder = decoder
        self.added_tokens = list(added_tokens)
        self._added_by_id = {t.id: t for t in self.added_tokens}
        self._regex_cache: dict[frozenset[str], re.Pattern[str] | None] = {}

    @property
    def special_tokens(self) -> dict[str, int]:
        return {t.content: t.id for t in self.added_tokens if t.special}

    def encode(self, text: str, *, allowed_special: frozenset[str] = frozenset(), add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = []
        first = True
        for piece, added in self._split_added(text, allowed_special):
            if added is not None:
                ids.append(added)
            else:
                ids.extend(self._encode_piece(piece, first))
            first = False
        if add_special_tokens and self.post_processor is not None:
            ids = self.post_processor.process(ids)
        return ids

    def _encode_piece(self, piece: str, is_first: bool) -> list[int]:
        if self.normalizer is not None:
            piece = self.normalizer.normalize(piece)
        if not piece:
            return []
        words = self.pre_tokenizer.pre_tokenize(piece, is_first=is_first) if self.pre_tokenizer is not None else [piece]
        return self.model.encode_words(words)

    def _split_added(self, text: str, allowed_special: frozenset[str]) -> list[tuple[str, int | None]]:
        """Cuts the added tokens out of ``text``: non-special ones always, special ones if allowed.
        Longest match first; returns (text, None) and ("", id) pieces in order."""
        usable = frozenset(t.content for t in self.added_tokens if not t.special or t.content in allowed_special)
        if usable not in self._regex_cache:
            alternatives = sorted(usable, key=len, reverse=True)
            self._regex_cache[usable] = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None
        regex = self._regex_cache[usable]
        if regex is None:
            return [(text, None)]
        by_content = {t.content: t.id for t in self.added_tokens}
        out: list[tuple[str, int | None]] = []
        pos = 0
        for m in regex.finditer(text):
            if m.start() > pos:
                out.append((text[pos:m.start()], None))
            out.append(("", by_content[m.group()]))
            pos = m.end()
        if pos < len(text):
            out.append((text[pos:], None))
        return out

    def id_to_token(self, id: int) -> str | None:
        added = self._added_by_id.get(id)
        return added.content if added is not None else self.model.id_to_token(id)

    def token_to_id(self, token: str) -> int | None:
        for t in self.added_tokens:
            if t.content == token:
                return t.id
        return self.model.token_to_id(token)

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        from .errors import DecodeError

        tokens = []
        for i in ids:
            added = self._added_by_id.get(i)
            if added is not None and added.special and skip_special_tokens:
                continue
            token = self.id_to_token(i)
            if token is None:
                raise DecodeError(f"id {i!r} is not in the vocabulary (0 to {self.vocab_size - 1})")
            tokens.append(token)
        return self.decoder.decode(tokens) if self.decoder is not None else "".join(tokens)

    @property
    def vocab_size(self) -> int:
        return max([self.model.vocab_size - 1, *self._added_by_id]) + 1
