"""Post-processors of the general pipeline: add template tokens (``[CLS]``, ``<s>``) around
the ids of one sequence or a pair. ``process(ids, pair=None) -> list[int]``; the pipeline calls
it only when ``add_special_tokens`` is true, as Hugging Face does.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

from .errors import FormatError


class PostProcessor:
    """Base class."""

    def process(self, ids: list[int], pair: list[int] | None = None) -> list[int]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_hf()})"


class TemplateProcessing(PostProcessor):
    """Templates for one sequence and for a pair: ``A``/``B`` stand for the sequences, the other
    items are special tokens, each a list of ids.

    ``single`` and ``pair`` are lists of ``("sequence", "A" or "B", type_id)`` and
    ``("special", name, type_id)``; ``special_tokens`` maps a name to ``(ids, tokens)``.
    """

    def __init__(self, single: Seq[tuple[str, str, int]], pair: Seq[tuple[str, str, int]],
                 special_tokens: dict[str, tuple[list[int], list[str]]]) -> None:
        self.single, self.pair, self.special_tokens = list(single), list(pair), dict(special_tokens)
        for kind, name, _ in [*self.single, *self.pair]:
            if kind == "special" and name not in self.special_tokens:
                raise FormatError(f"the template uses the special token {name!r}, which its special_tokens do not define")
            if kind == "sequence" and name not in ("A", "B"):
                raise FormatError(f"a template sequence must be 'A' or 'B', not {name!r}")

    def _fill(self, template: list[tuple[str, str, int]], a: list[int], b: list[int] | None) -> list[int]:
        out: list[int] = []
        for kind, name, _ in template:
            if kind == "special":
                out.extend(self.special_tokens[name][0])
            elif name == "A":
                out.extend(a)
            else:
                if b is None:
                    raise FormatError("the single-sequence template refers to a second sequence B")
                out.extend(b)
        return out

    def process(self, ids: list[int], pair: list[int] | None = None) -> list[int]:
        return self._fill(self.single, ids, None) if pair is None else self._fill(self.pair, ids, pair)

    def to_hf(self) -> dict:
        def items(template):
            return [{"SpecialToken" if k == "special" else "Sequence": {"id": n, "type_id": t}} for k, n, t in template]

        return {"type": "TemplateProcessing", "single": items(self.single), "pair": items(self.pair),
                "special_tokens": {n: {"id": n, "ids": list(ids), "tokens": list(toks)}
                                   for n, (ids, toks) in self.special_tokens.items()}}


class BertProcessing(PostProcessor):
    """``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``."""

    def __init__(self, sep: tuple[str, int], cls: tuple[str, int]) -> None:
        self.sep, self.cls = tuple(sep), tuple(cls)

    def process(self, ids: list[int], pair: list[int] | None = None) -> list[int]:
        out = [self.cls[1], *ids, self.sep[1]]
        return out if pair is None else [*out, *pair, self.sep[1]]

    def to_hf(self) -> dict:
        return {"type": "BertProcessing", "sep": list(self.sep), "cls": list(self.cls)}


class RobertaProcessing(PostProcessor):
    """``<s> A </s>`` and ``<s> A </s></s> B </s>`` (the offset options do not change ids)."""

    def __init__(self, sep: tuple[str, int], cls: tuple[str, int], *, trim_offsets: bool = True,
                 add_prefix_space: bool = True) -> None:
        self.sep, self.cls = tuple(sep), tuple(cls)
        self.trim_offsets, self.add_prefix_space = trim_offsets, add_prefix_space

    def process(self, ids: list[int], pair: list[int] | None = None) -> list[int]:
        out = [self.cls[1], *ids, self.sep[1]]
        return out if pair is None else [*out, self.sep[1], *pair, self.sep[1]]

    def to_hf(self) -> dict:
        return {"type": "RobertaProcessing", "sep": list(self.sep), "cls": list(self.cls),
                "trim_offsets": self.trim_offsets, "add_prefix_space": self.add_prefix_space}


class ByteLevel(PostProcessor):
    """GPT-2's post-processor: it only trims offsets, so the ids pass through unchanged."""

    def __init__(self, *, add_prefix_space: bool = True, trim_offsets: bool = True, use_regex: bool = True) -> None:
        self.add_prefix_space, self.trim_offsets, self.use_regex = add_prefix_space, trim_offsets, use_regex

    def process(self, ids: list[int], pair: list[int] | None = None) -> list[int]:
        return list(ids) if pair is None else [*ids, *pair]

    def to_hf(self) -> dict:
        return {"type": "ByteLevel", "add_prefix_space": self.add_prefix_space, "trim_offsets": self.trim_offsets,
                "use_regex": self.use_regex}


class Sequence(PostProcessor):
    """Applies post-processors one after the other."""

    def __init__(self, processors: Seq[PostProcessor]) -> None:
        self.processors = list(processors)

    def process(self, ids: list[int], pair: list[int] | None = None) -> list[int]:
        active = [p for p in self.processors if not isinstance(p, ByteLevel)]  # ByteLevel: no-op on ids
        if pair is None:
            for p in active:
                ids = p.process(ids)
            return ids
        if len(active) > 1:
            raise FormatError("a Sequence of several template post-processors is not supported for pairs")
        return active[0].process(ids, pair) if active else [*ids, *pair]

    def to_hf(self) -> dict:
        return {"type": "Sequence", "processors": [p.to_hf() for p in self.processors]}
