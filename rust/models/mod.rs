//! Inference models: turn one pre-tokenized piece into ids.
pub mod bpe;
mod char_start;
pub mod unigram;
pub mod wordpiece;
