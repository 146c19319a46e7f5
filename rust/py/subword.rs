//! Bindings for WordPiece and Unigram training (registered from `mod.rs`).

use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
