"""Readers (and writers) of other tokenizer formats: tiktoken so far."""
