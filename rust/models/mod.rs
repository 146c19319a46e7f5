//! Inference models: turn one pre-tokenized piece into ids.
pub mod bpe;
pub mod unigram;
pub mod wordpiece;
