"""Pickling of objects that hold Rust models (``toksmith._core``), which cannot be pickled.

A class lists its Rust attributes in ``_RUST_FIELDS`` and makes them in ``_make_rust()`` from
its other attributes: its pickle leaves them out, and unpickling makes them again. So a
tokenizer can go to another process (multiprocessing with ``spawn``, a PyTorch DataLoader's
workers, Ray) and encodes there exactly as here.
"""

from __future__ import annotations


class RustBacked:
    _RUST_FIELDS: tuple[str, ...] = ()

    def _make_rust(self) -> None:
        raise NotImplementedError

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in self._RUST_FIELDS:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._make_rust()
