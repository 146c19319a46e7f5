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
from . import unigram, wordpiece
from .unigram import train_unigram, viterbi as unigram_viterbi
from .wordpiece import encode_word as wordpiece_encode_word, train_wordpiece

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
    "train_unigram",
    "train_wordpiece",
    "unigram",
    "unigram_viterbi",
    "wordpiece",
    "wordpiece_encode_word",
]
