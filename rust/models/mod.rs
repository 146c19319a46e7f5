//! Inference models: turn one pre-tokenized chunk into ids.
pub mod bpe;
