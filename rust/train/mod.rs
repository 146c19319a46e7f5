//! Training, kept apart from inference.
pub mod bpe;
