"""Reference (textbook) implementations used for teaching and differential tests."""
from .bpe import (
    BPEResult,
    count_pairs,
    count_words,
    encode_ids_of_word,
    merge_pair,
    pick_pair,
    show_token,
    split_text,
    train_bpe,
)

__all__ = [
    "BPEResult",
    "count_pairs",
    "count_words",
    "encode_ids_of_word",
    "merge_pair",
    "pick_pair",
    "show_token",
    "split_text",
    "train_bpe",
]
