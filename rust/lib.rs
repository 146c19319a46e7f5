//! toksmith's Rust core: the hot loops only (pre-tokenization, BPE encoding and training).
//! No Python types here except in `py/`, the binding layer, built with the `python` feature.

pub mod error;
pub mod models;
pub mod pretokenize;
pub mod special;
pub mod train;

#[cfg(feature = "python")]
mod py;
