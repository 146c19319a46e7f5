//! Training, kept apart from inference.
pub mod bpe;
pub mod counts;
pub mod handoff;
pub mod read;
pub mod unigram;
pub mod wordpiece;
