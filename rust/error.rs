//! Errors of the Rust core. Every fallible public function returns `Result<_, Error>`;
//! the binding layer maps each kind to the matching `toksmith.errors` exception.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The pre-tokenization regex does not compile or fails while matching.
    InvalidPattern,
    /// A vocabulary or merge table that is not self-consistent.
    Format,
    /// Training parameters or data that cannot give a tokenizer.
    Training,
    /// An id that is not in the vocabulary.
    Decode,
    /// Text that cannot be encoded.
    Encode,
    /// A bug: a panic caught on a worker thread (shown to Python as `InternalError`).
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
