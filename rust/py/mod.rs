//! The PyO3 binding layer: every Python-facing type and function, nothing else.
//! Rust errors become `toksmith.errors` exceptions; a Rust panic is caught here and becomes
//! a `toksmith.errors.InternalError`, so it never reaches Python as a panic.

use crate::error::{Error, ErrorKind};
use crate::models::bpe::{BpeModel, BpeOptions, Level, MergesModelBuilder};
use crate::models::unigram::UnigramModel;
use crate::models::wordpiece::WordPieceModel;
use crate::normalize::SentencePieceNormalizer;
use crate::pretokenize::bert::BertSplitter;
use crate::pretokenize::llama::{byte_level_chars, LlamaSplitter};
use crate::pretokenize::{resolve_pattern, Pretokenizer};
use crate::special::{Cuts, LiteralMatcher, SpecialTokens};
use crate::train::bpe::{char_words, count_chunks, count_chunks_beside, ChunkCounts, Constraints, MergeLearner, Words};
use crate::train::counts::{read_tsv, write_tsv, SpillingCounts};
use crate::train::read::{read_block_into, split_safe};
use std::path::PathBuf;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyByteArray, PyBytes, PyList};
use rayon::prelude::*;
use rustc_hash::FxHashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

mod ints;
mod subword;

pyo3::import_exception!(toksmith.errors, InvalidPatternError);
pyo3::import_exception!(toksmith.errors, FormatError);
pyo3::import_exception!(toksmith.errors, TrainingError);
pyo3::import_exception!(toksmith.errors, DecodeError);
pyo3::import_exception!(toksmith.errors, EncodeError);
pyo3::import_exception!(toksmith.errors, InternalError);

pub(crate) fn to_py(e: Error) -> PyErr {
    match e.kind {
        ErrorKind::InvalidPattern => InvalidPatternError::new_err(e.message),
        ErrorKind::Format => FormatError::new_err(e.message),
        ErrorKind::Training => TrainingError::new_err(e.message),
        ErrorKind::Decode => DecodeError::new_err(e.message),
        ErrorKind::Encode => EncodeError::new_err(e.message),
        ErrorKind::Internal => internal_error(&e.message),
    }
}

/// Runs `f`, turning errors into Python exceptions and panics into `InternalError`.
pub(crate) fn guard<T>(f: impl FnOnce() -> Result<T, Error>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(to_py),
        Err(panic) => Err(internal_error(&panic_message(panic))),
    }
}

/// A token's bytes given from Python. A `bytes` object is copied in one go; PyO3's `Vec<u8>`
/// takes any sequence, one int object at a time (for `bytes` too): 32,000 tokens took some
/// 10 ms that way. Other sequences of ints still go that way.
struct TokenBytes(Vec<u8>);

impl<'py> FromPyObject<'py> for TokenBytes {
    fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
        match ob.downcast::<PyBytes>() {
            Ok(bytes) => Ok(TokenBytes(bytes.as_bytes().to_vec())),
            Err(_) => ob.extract().map(TokenBytes),
        }
    }
}

/// The `(id, bytes)` tokens given from Python, as the models take them.
fn token_list(tokens: Vec<(u32, TokenBytes)>) -> Vec<(u32, Vec<u8>)> {
    tokens.into_iter().map(|(id, bytes)| (id, bytes.0)).collect()
}

/// Bytes of a file block counted as one piece of work (see `add_file_block`).
const COUNT_PIECE_BYTES: usize = 256 << 10;

/// Bytes read of a block that was not read ahead (a file's first), when several threads count
/// it: no thread has other work while it is read (see `add_file_block`).
const FIRST_BLOCK_BYTES: usize = 1 << 20;

/// Runs `f` on a rayon pool of `num_threads` threads (the global pool when None). Pools are
/// made once per size and kept (the last few sizes, see `pool_of`): starting threads on every
/// batch call would cost more than encoding a small batch.
fn with_threads<T: Send>(num_threads: Option<usize>, kind: ErrorKind, f: impl FnOnce() -> T + Send) -> Result<T, Error> {
    Ok(match pool_of(num_threads, kind)? {
        None => f(),
        Some(pool) => pool.install(f),
    })
}

/// How many pools of different sizes are kept: a caller trying many `num_threads` values would
/// otherwise keep every pool's threads for good (thousands of threads).
const KEPT_POOLS: usize = 4;

/// The kept pool of `num_threads` threads; None for the global pool. The pools last used are
/// kept; one dropped from the list ends its threads once no call is using it. `kind`: the
/// error (encoding or training) when the threads cannot be started.
fn pool_of(num_threads: Option<usize>, kind: ErrorKind) -> Result<Option<std::sync::Arc<rayon::ThreadPool>>, Error> {
    static POOLS: std::sync::Mutex<Vec<(usize, std::sync::Arc<rayon::ThreadPool>)>> = std::sync::Mutex::new(Vec::new());
    let n = match num_threads {
        None | Some(0) => return Ok(None),
        Some(n) => n,
    };
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(at) = pools.iter().position(|(size, _)| *size == n) {
        let entry = pools.remove(at);
        let pool = entry.1.clone();
        pools.push(entry); // most recently used last
        return Ok(Some(pool));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build()
        .map_err(|e| Error::new(kind, format!("cannot start {n} threads: {e}; ask for fewer (num_threads)")))?;
    let pool = std::sync::Arc::new(pool);
    if pools.len() == KEPT_POOLS {
        pools.remove(0);
    }
    pools.push((n, pool.clone()));
    Ok(Some(pool))
}

/// `rayon::in_place_scope` on `pool` (the global pool when None).
fn in_place_scope<'scope, R>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce(&rayon::Scope<'scope>) -> R) -> R {
    match pool {
        Some(pool) => pool.in_place_scope(f),
        None => rayon::in_place_scope(f),
    }
}

fn internal_error(msg: &str) -> PyErr {
    InternalError::new_err(format!("internal error in toksmith's Rust core: {msg}. Please report it with the input that caused it."))
}

/// The message of a caught panic.
fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// A batch group's result: ids, or (where the interpreter has immortal ints) their objects.
enum Encoded {
    Ids(Vec<u32>),
    Objects(Vec<usize>),
}

#[pyclass(name = "BpeModel", module = "toksmith._core", frozen)]
struct PyBpeModel {
    inner: BpeModel,
}

impl PyBpeModel {
    fn wrap(inner: BpeModel) -> Self {
        PyBpeModel { inner }
    }

    fn to_list<'py>(&self, py: Python<'py>, ids: &[u32]) -> PyResult<Bound<'py, PyList>> {
        ints::id_list(py, ids, self.inner.vocab_len()).map(untracked)
    }
}

/// A list of ints is in no reference cycle, so the cycle collector is told not to watch it
/// (CPython untracks tuples of atoms the same way, though never a list of its own). Otherwise
/// every collection walks every id of every list still alive: with thousands of results, as
/// from a batch, that was a fifth of the time. Freed by reference counting as usual; a cycle
/// the caller later builds through the list itself (appending an object that refers back to
/// it) would not be collected: the README says so.
fn untracked(list: Bound<'_, PyList>) -> Bound<'_, PyList> {
    // SAFETY: `list` is a live list, new and tracked; untracking it is always valid.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(list.as_ptr().cast()) };
    list
}

#[pymethods]
impl PyBpeModel {
    #[new]
    #[pyo3(signature = (tokens, merges, pattern, specials, *, level="byte", unk=None, byte_fallback=false, fuse_unk=false,
                        continuing_subword_prefix=None, end_of_word_suffix=None, ignore_merges=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        tokens: Vec<(u32, TokenBytes)>,
        merges: Vec<(u32, u32)>,
        pattern: Option<&str>,
        specials: Vec<(String, u32)>,
        level: &str,
        unk: Option<u32>,
        byte_fallback: bool,
        fuse_unk: bool,
        continuing_subword_prefix: Option<String>,
        end_of_word_suffix: Option<String>,
        ignore_merges: bool,
    ) -> PyResult<Self> {
        guard(|| {
            let level = match level {
                "byte" => Level::Byte,
                "char" => Level::Char,
                other => return Err(Error::new(ErrorKind::Format, format!("BPE level must be 'byte' or 'char', not {other:?}"))),
            };
            let options = BpeOptions { level, unk, byte_fallback, fuse_unk, continuing_subword_prefix, end_of_word_suffix, ignore_merges };
            BpeModel::new(token_list(tokens), &merges, pattern, specials, options)
        })
        .map(PyBpeModel::wrap)
    }

    /// The words `splitter` finds in `text` (see `encode_llama`), each encoded apart by this
    /// byte-level model: llama.cpp's byte-level BPE without the byte characters, for
    /// vocabularies whose every byte that UTF-8 uses has a token.
    fn encode_split<'py>(&self, py: Python<'py>, splitter: PyRef<'py, PyLlamaSplitter>, text: &str, spaced: &str, collapsed: &str) -> PyResult<Bound<'py, PyList>> {
        let splitter = &splitter.inner;
        let ids = py.allow_threads(|| {
            guard(|| {
                let words = splitter.words(text, spaced, collapsed)?;
                self.inner.encode_words(words)
            })
        })?;
        self.to_list(py, &ids)
    }

    /// llama.cpp's byte-level BPE of `text` (a model over GPT-2's byte characters): the words
    /// `splitter` finds (on `spaced` and `collapsed`, copies of `text` aligned with it character
    /// for character, see `LlamaSplitter`), each in byte characters, cut around the characters
    /// of `missing` (bytes without a token, which llama.cpp drops), encoded apart.
    fn encode_llama<'py>(&self, py: Python<'py>, splitter: PyRef<'py, PyLlamaSplitter>, text: &str, spaced: &str, collapsed: &str, missing: &str) -> PyResult<Bound<'py, PyList>> {
        let splitter = &splitter.inner;
        let ids = py.allow_threads(|| {
            guard(|| {
                let table = byte_level_chars();
                let mut dropped = [false; 256];
                for (b, c) in table.iter().enumerate() {
                    dropped[b] = missing.contains(*c);
                }
                let found = splitter.words(text, spaced, collapsed)?;
                let mut words: Vec<String> = Vec::with_capacity(found.len());
                let mut word = String::new();
                for found_word in found {
                    word.clear();
                    for &b in found_word.as_bytes() {
                        if dropped[b as usize] {
                            if !word.is_empty() {
                                words.push(std::mem::take(&mut word));
                            }
                        } else {
                            word.push(table[b as usize]);
                        }
                    }
                    if !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                }
                self.inner.encode_words(words.iter().map(|w| w.as_str()))
            })
        })?;
        self.to_list(py, &ids)
    }

    /// Encodes pieces the caller already pre-tokenized; each is one chunk (no regex, no specials).
    fn encode_words<'py>(&self, py: Python<'py>, words: Vec<String>) -> PyResult<Bound<'py, PyList>> {
        let ids = py.allow_threads(|| guard(|| self.inner.encode_words(words.iter().map(|w| w.as_str()))))?;
        self.to_list(py, &ids)
    }

    /// The id of a token given by its bytes, or None.
    fn token_id(&self, token: &[u8]) -> Option<u32> {
        self.inner.token_id(token)
    }

    /// A model from tiktoken-style ranks (id = rank; merge parts whose concatenation is a token).
    #[staticmethod]
    fn from_ranks(tokens: Vec<(u32, TokenBytes)>, pattern: Option<&str>, specials: Vec<(String, u32)>) -> PyResult<Self> {
        guard(|| BpeModel::from_ranks(token_list(tokens), pattern, specials)).map(PyBpeModel::wrap)
    }

    /// A ranks model read straight from a `.tiktoken` file.
    #[staticmethod]
    fn from_tiktoken_file(path: PathBuf, pattern: Option<&str>, specials: Vec<(String, u32)>) -> PyResult<Self> {
        guard(|| BpeModel::from_tiktoken_file(&path, pattern, specials)).map(PyBpeModel::wrap)
    }

    /// Every ordinary token as (id, bytes).
    fn tokens<'py>(&self, py: Python<'py>) -> Vec<(u32, Bound<'py, PyBytes>)> {
        self.inner.tokens().map(|(i, b)| (i, PyBytes::new(py, b))).collect()
    }

    /// One more than the largest id (ordinary or special).
    fn vocab_len(&self) -> usize {
        self.inner.vocab_len()
    }

    /// The merges of a merges model (not a ranks one), lowest rank first.
    fn merge_list(&self, py: Python<'_>) -> PyResult<Vec<(u32, u32)>> {
        py.allow_threads(|| guard(|| Ok(self.inner.merges_by_rank())))
    }

    /// The merges as (left id, right id) pairs in rank order (derived for ranks-based models).
    fn derive_merges(&self, py: Python<'_>) -> PyResult<Vec<(u32, u32)>> {
        py.allow_threads(|| guard(|| Ok(self.inner.derive_merges())))
    }

    fn encode_ordinary<'py>(&self, py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyList>> {
        let ids = py.allow_threads(|| guard(|| self.inner.encode_ordinary(text)))?;
        self.to_list(py, &ids)
    }

    /// A SentencePiece BPE model's pipeline in one call (no added token or user-defined piece
    /// to cut out: the caller's check): `text` normalized by `normalizer`, encoded as
    /// `encode_ordinary` does, and with `fuse_unk` each run of that id made one, as
    /// SentencePiece reports unknown characters.
    #[pyo3(signature = (normalizer, text, fuse_unk=None))]
    fn encode_normalized<'py>(&self, py: Python<'py>, normalizer: &PySentencePieceNormalizer, text: &str, fuse_unk: Option<u32>) -> PyResult<Bound<'py, PyList>> {
        let ids = py.allow_threads(|| guard(|| self.normalize_and_encode(&normalizer.inner, text, fuse_unk)))?;
        self.to_list(py, &ids)
    }

    /// `encode_normalized` of each text, on `num_threads` threads with the GIL released.
    #[pyo3(signature = (normalizer, texts, fuse_unk=None, num_threads=None))]
    fn encode_normalized_batch<'py>(&self, py: Python<'py>, normalizer: &PySentencePieceNormalizer, texts: Vec<PyBackedStr>, fuse_unk: Option<u32>, num_threads: Option<usize>) -> PyResult<Vec<Bound<'py, PyList>>> {
        let encoded = batch_on_threads(py, &texts, num_threads, |t| self.normalize_and_encode(&normalizer.inner, t, fuse_unk))?;
        encoded.iter().map(|ids| self.to_list(py, ids)).collect()
    }

    /// `text` cut at the strings of `cuts` (each gives its id), the pieces between them
    /// replaced as `cuts` says and encoded as `encode_ordinary` does, in one call.
    fn encode_cut<'py>(&self, py: Python<'py>, text: &str, cuts: PyRef<'py, PyCuts>) -> PyResult<Bound<'py, PyList>> {
        let cuts = &cuts.inner;
        let ids = py.allow_threads(|| {
            guard(|| {
                let mut ids = Vec::new();
                self.inner.encode_cut_into(text, cuts, &mut ids)?;
                Ok(ids)
            })
        })?;
        self.to_list(py, &ids)
    }

    fn encode<'py>(&self, py: Python<'py>, text: &str, allowed: Vec<u32>) -> PyResult<Bound<'py, PyList>> {
        let allowed: FxHashSet<u32> = allowed.into_iter().collect();
        let ids = if allowed.is_empty() {
            // Nothing to cut out: skip the special-token scan.
            py.allow_threads(|| guard(|| self.inner.encode_ordinary(text)))?
        } else {
            py.allow_threads(|| guard(|| self.inner.encode(text, |id| allowed.contains(&id))))?
        };
        self.to_list(py, &ids)
    }

    /// BPE-dropout encoding (see `BpeModel::encode_dropout`).
    /// The list holds the shared ints of `encode` (see `rust/py/ints.rs`), not new ones.
    fn encode_dropout<'py>(&self, py: Python<'py>, text: &str, allowed: Vec<u32>, p: f64, seed: u64, superword_only: bool) -> PyResult<Bound<'py, PyList>> {
        let allowed: FxHashSet<u32> = allowed.into_iter().collect();
        let ids = py.allow_threads(|| guard(|| self.inner.encode_dropout(text, |id| allowed.contains(&id), p, seed, superword_only)))?;
        self.to_list(py, &ids)
    }

    /// Number of tokens of `text`, without building a Python list.
    fn count(&self, py: Python<'_>, text: &str, allowed: Vec<u32>) -> PyResult<usize> {
        let allowed: FxHashSet<u32> = allowed.into_iter().collect();
        py.allow_threads(|| guard(|| self.inner.encode(text, |id| allowed.contains(&id)).map(|ids| ids.len())))
    }

    /// Number of tokens of `text` if it is at most `limit`; None as soon as it passes the limit.
    fn count_till_limit(&self, py: Python<'_>, text: &str, allowed: Vec<u32>, limit: usize) -> PyResult<Option<usize>> {
        let allowed: FxHashSet<u32> = allowed.into_iter().collect();
        py.allow_threads(|| {
            guard(|| {
                let mut out = Vec::new();
                let within = self.inner.encode_until(text, |id| allowed.contains(&id), limit, &mut out)?;
                Ok(within.then_some(out.len()))
            })
        })
    }

    /// Encodes `texts` on `num_threads` threads: this one and `num_threads - 1` of a pool.
    /// Only this thread may make Python lists (it needs the GIL for that), so it makes them for
    /// every text, as results arrive, between encoding texts of its own with the GIL released.
    /// List building thus overlaps the encoding, and no more threads run than asked for.
    /// With `cuts`, each text is encoded as `encode_cut` does (`allowed` is then not used).
    #[pyo3(signature = (texts, allowed, num_threads=None, cuts=None))]
    fn encode_batch<'py>(&self, py: Python<'py>, texts: Vec<PyBackedStr>, allowed: Vec<u32>, num_threads: Option<usize>, cuts: Option<PyRef<'py, PyCuts>>) -> PyResult<Vec<Bound<'py, PyList>>> {
        let allowed: FxHashSet<u32> = allowed.into_iter().collect();
        let cuts: Option<&Cuts> = cuts.as_ref().map(|c| &c.inner);
        // Texts go in groups, each group's ids in one buffer: one message and one allocation
        // per group, not per text. Result: (first text, its ids and the end of each text's).
        // The ids a helper encoded are turned into the int objects the lists hold by that
        // helper: the thread with the GIL, which makes every list, then only copies them.
        type Group = (usize, Result<(Encoded, Vec<usize>), Error>);
        let table = ints::Ints::get(py, self.inner.vocab_len());
        let group = (texts.len() / 64).clamp(1, 32);
        let n_groups = texts.len().div_ceil(group);
        // The groups no thread has taken yet: this thread takes them from the front, the
        // helpers from the back. Neighbouring texts are often alike (the documents of one file,
        // of one language), and each thread's chunk cache starts empty: taken in turns, both
        // threads would merge the same new words; from the two ends, each mostly sees its own.
        let untaken = std::sync::Mutex::new(0..n_groups);
        // Set by the first group that fails: the batch raises its error, so no thread starts
        // another group after it.
        let failed = std::sync::atomic::AtomicBool::new(false);
        // Encodes the next group not yet taken by any thread (from the back of the batch for
        // a helper); None when all are taken or one has failed.
        let take_group = |helper: bool| -> Option<Group> {
            if failed.load(std::sync::atomic::Ordering::Relaxed) {
                return None;
            }
            let g = {
                let mut untaken = untaken.lock().unwrap_or_else(|e| e.into_inner());
                if helper { untaken.next_back() } else { untaken.next() }
            }?;
            let chunk = &texts[g * group..texts.len().min((g + 1) * group)];
            let bytes: usize = chunk.iter().map(|t| t.len()).sum();
            let mut ids = Vec::with_capacity(bytes / 3);
            let mut ends = Vec::with_capacity(chunk.len());
            let result = catch_unwind(AssertUnwindSafe(|| {
                for t in chunk {
                    if let Some(cuts) = cuts {
                        self.inner.encode_cut_into(t, cuts, &mut ids)?;
                    } else if allowed.is_empty() {
                        self.inner.encode_ordinary_into(t, &mut ids)?;
                    } else {
                        self.inner.encode_until(t, |id| allowed.contains(&id), usize::MAX, &mut ids)?;
                    }
                    ends.push(ids.len());
                }
                Ok(())
            }))
            .unwrap_or_else(|panic| Err(Error::new(ErrorKind::Internal, panic_message(panic))));
            if result.is_err() {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            // A failed group's ids are dropped, not converted. This thread's own groups are not
            // converted either: it makes their lists straight from the ids, in one pass instead
            // of two (and without a buffer of addresses).
            let encoded = result.map(|()| {
                let mut objects = Vec::new();
                match table {
                    Some(table) if helper && table.objects_of(&ids, &mut objects) => (Encoded::Objects(objects), ends),
                    _ => (Encoded::Ids(ids), ends),
                }
            });
            Some((g * group, encoded))
        };
        let pool = pool_of(num_threads, ErrorKind::Encode).map_err(to_py)?;
        let helpers = match &pool {
            Some(pool) => pool.current_num_threads(),
            None => rayon::current_num_threads(),
        }
        .saturating_sub(1)
        .min(n_groups.saturating_sub(1));
        let mut lists: Vec<Option<Py<PyList>>> = (0..texts.len()).map(|_| None).collect();
        let mut failure: Option<PyErr> = None;
        py.allow_threads(|| {
            let (tx, rx) = std::sync::mpsc::channel::<Group>();
            let mut to_lists = |results: &mut Vec<Group>| {
                Python::with_gil(|py| {
                    for (start, result) in results.drain(..) {
                        let (ids, ends) = match result {
                            Ok(r) if failure.is_none() => r,
                            Ok(_) => continue, // the batch raises: no more lists to make
                            Err(e) => {
                                failure.get_or_insert(to_py(e));
                                continue;
                            }
                        };
                        let mut from = 0;
                        for (k, &end) in ends.iter().enumerate() {
                            let list = match &ids {
                                Encoded::Objects(objects) => ints::list_of(py, &objects[from..end]).map(untracked),
                                Encoded::Ids(ids) => self.to_list(py, &ids[from..end]),
                            };
                            match list {
                                Ok(list) => lists[start + k] = Some(list.unbind()),
                                Err(e) => {
                                    failure.get_or_insert(e);
                                }
                            }
                            from = end;
                        }
                    }
                })
            };
            let take_group = &take_group;
            in_place_scope(pool.as_deref(), |s| {
                for _ in 0..helpers {
                    let tx = tx.clone();
                    s.spawn(move |_| {
                        while let Some(result) = take_group(true) {
                            if tx.send(result).is_err() {
                                return;
                            }
                        }
                    });
                }
                drop(tx);
                let mut done = 0;
                let mut ready = Vec::new();
                while done < n_groups {
                    // This thread's own group, then whatever the helpers finished meanwhile,
                    // all turned into lists under one hold of the GIL.
                    match take_group(false) {
                        Some(own) => ready.push(own),
                        None => match rx.recv() {
                            Ok(result) => ready.push(result),
                            Err(_) => break,
                        },
                    }
                    ready.extend(rx.try_iter());
                    done += ready.len();
                    to_lists(&mut ready);
                }
            });
        });
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(lists.into_iter().map(|l| l.expect("every text was encoded").into_bound(py)).collect())
    }

    /// The ids of each text as a bytearray of native-endian integers of `width` bytes (2 or 4),
    /// for `numpy.frombuffer`: no Python int per token. Texts are encoded on `num_threads`
    /// threads with the GIL released.
    #[pyo3(signature = (texts, allowed, num_threads=None, width=4))]
    fn encode_arrays<'py>(&self, py: Python<'py>, texts: Vec<PyBackedStr>, allowed: Vec<u32>, num_threads: Option<usize>, width: usize) -> PyResult<Vec<Bound<'py, PyByteArray>>> {
        if width != 2 && width != 4 {
            return Err(to_py(Error::new(ErrorKind::Encode, format!("ids are 2 or 4 bytes wide, not {width}"))));
        }
        let allowed: FxHashSet<u32> = allowed.into_iter().collect();
        let encode_one = |t: &str| -> Result<Vec<u8>, Error> {
            let ids = if allowed.is_empty() { self.inner.encode_ordinary(t)? } else { self.inner.encode(t, |id| allowed.contains(&id))? };
            if width == 4 {
                return Ok(ids.iter().flat_map(|id| id.to_ne_bytes()).collect());
            }
            match ids.iter().find(|&&id| id > u16::MAX as u32) {
                Some(id) => Err(Error::new(ErrorKind::Encode, format!("id {id} does not fit in 16 bits; use dtype uint32"))),
                None => Ok(ids.iter().flat_map(|&id| (id as u16).to_ne_bytes()).collect()),
            }
        };
        let arrays = py.allow_threads(|| {
            guard(|| with_threads(num_threads, ErrorKind::Encode, || texts.par_iter().map(|t| encode_one(t)).collect::<Result<Vec<_>, Error>>())?)
        })?;
        Ok(arrays.iter().map(|a| PyByteArray::new(py, a)).collect())
    }

    fn decode_bytes<'py>(&self, py: Python<'py>, ids: Vec<u32>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = guard(|| self.inner.decode_bytes(&ids))?;
        Ok(PyBytes::new(py, &bytes))
    }

    fn token_bytes<'py>(&self, py: Python<'py>, id: u32) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = guard(|| self.inner.token_bytes(id).map(|b| b.to_vec()))?;
        Ok(PyBytes::new(py, &bytes))
    }
}

#[pyclass(name = "WordPieceModel", module = "toksmith._core", frozen)]
struct PyWordPieceModel {
    inner: WordPieceModel,
}

#[pymethods]
impl PyWordPieceModel {
    #[new]
    #[pyo3(signature = (vocab, unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=100))]
    fn new(vocab: Vec<(String, u32)>, unk_token: &str, continuing_subword_prefix: &str, max_input_chars_per_word: usize) -> PyResult<Self> {
        guard(|| WordPieceModel::new(vocab, unk_token, continuing_subword_prefix, max_input_chars_per_word)).map(|inner| PyWordPieceModel { inner })
    }

    fn encode_words(&self, py: Python<'_>, words: Vec<String>) -> PyResult<Vec<u32>> {
        py.allow_threads(|| guard(|| Ok(self.inner.encode_words(words.iter().map(|w| w.as_str())))))
    }

    /// `encode_words` of each list of words, on `num_threads` threads with the GIL released.
    #[pyo3(signature = (batch, num_threads=None))]
    fn encode_words_batch(&self, py: Python<'_>, batch: Vec<Vec<PyBackedStr>>, num_threads: Option<usize>) -> PyResult<Vec<Vec<u32>>> {
        batch_on_threads(py, &batch, num_threads, |words| Ok(self.inner.encode_words(words.iter().map(|w| &**w))))
    }

    /// `encode_words` of the words `splitter` finds in `text`, in one call.
    fn encode_split<'py>(&self, py: Python<'py>, splitter: &PyBertSplitter, text: &str) -> PyResult<Bound<'py, PyList>> {
        let ids = py.allow_threads(|| guard(|| Ok(self.split_and_encode(&splitter.inner, text))))?;
        ints::id_list(py, &ids, self.inner.id_bound()).map(untracked)
    }

    /// `encode_split` of each text, on `num_threads` threads with the GIL released.
    #[pyo3(signature = (splitter, texts, num_threads=None))]
    fn encode_split_batch<'py>(&self, py: Python<'py>, splitter: &PyBertSplitter, texts: Vec<PyBackedStr>, num_threads: Option<usize>) -> PyResult<Vec<Bound<'py, PyList>>> {
        let encoded = batch_on_threads(py, &texts, num_threads, |t| Ok(self.split_and_encode(&splitter.inner, t)))?;
        encoded.iter().map(|ids| ints::id_list(py, ids, self.inner.id_bound()).map(untracked)).collect()
    }
}

impl PyWordPieceModel {
    fn split_and_encode(&self, splitter: &BertSplitter, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 4);
        splitter.for_each_word(text, |word| self.inner.encode_word(word, &mut ids));
        ids
    }
}

/// BERT's basic pre-tokenization (see `crate::pretokenize::bert`), for `WordPieceModel.encode_split`.
#[pyclass(name = "BertSplitter", module = "toksmith._core", frozen)]
struct PyBertSplitter {
    inner: BertSplitter,
}

#[pymethods]
impl PyBertSplitter {
    /// `whitespace`, `punctuation`: inclusive ranges of code points.
    #[new]
    fn new(whitespace: Vec<(u32, u32)>, punctuation: Vec<(u32, u32)>) -> Self {
        PyBertSplitter { inner: BertSplitter::new(&whitespace, &punctuation) }
    }

    /// The words of `text` (the tests' check against the Python split).
    fn split(&self, text: &str) -> Vec<String> {
        let mut words = Vec::new();
        self.inner.for_each_word(text, |w| words.push(w.to_string()));
        words
    }
}

/// `encode` of each item of `batch` (a text, or a list of words), on `num_threads` threads with
/// the GIL released (the batches of WordPiece and Unigram models and of SentencePiece pipelines).
fn batch_on_threads<T: Sync>(
    py: Python<'_>,
    batch: &[T],
    num_threads: Option<usize>,
    encode: impl Fn(&T) -> Result<Vec<u32>, Error> + Sync,
) -> PyResult<Vec<Vec<u32>>> {
    py.allow_threads(|| guard(|| with_threads(num_threads, ErrorKind::Encode, || batch.par_iter().map(&encode).collect())?))
}

#[pyclass(name = "UnigramModel", module = "toksmith._core", frozen)]
struct PyUnigramModel {
    inner: UnigramModel,
}

#[pymethods]
impl PyUnigramModel {
    /// `pieces`: (piece, id, score) for every piece the lattice may use.
    #[new]
    /// `float32_scores`: add path scores in 32-bit floats, as SentencePiece does (its near-ties
    /// resolve differently from 64-bit sums).
    #[pyo3(signature = (pieces, unk_id=None, byte_fallback=false, fuse_unk=true, float32_scores=false))]
    fn new(pieces: Vec<(String, u32, f64)>, unk_id: Option<u32>, byte_fallback: bool, fuse_unk: bool, float32_scores: bool) -> PyResult<Self> {
        guard(|| UnigramModel::new(pieces, unk_id, byte_fallback, fuse_unk).map(|m| m.with_float32_scores(float32_scores)))
            .map(|inner| PyUnigramModel { inner })
    }

    fn encode_words(&self, py: Python<'_>, words: Vec<String>) -> PyResult<Vec<u32>> {
        py.allow_threads(|| guard(|| self.inner.encode_words(words.iter().map(|w| w.as_str()))))
    }

    /// `encode_words` of each list of words, on `num_threads` threads with the GIL released.
    #[pyo3(signature = (batch, num_threads=None))]
    fn encode_words_batch(&self, py: Python<'_>, batch: Vec<Vec<PyBackedStr>>, num_threads: Option<usize>) -> PyResult<Vec<Vec<u32>>> {
        batch_on_threads(py, &batch, num_threads, |words| self.inner.encode_words(words.iter().map(|w| &**w)))
    }

    /// `text` normalized by `normalizer` and encoded as one word: a SentencePiece pipeline
    /// without added tokens to cut (the caller's check) in one call, the normalized text never
    /// made a Python str, the list made of the shared int objects (see `ints`).
    fn encode_normalized<'py>(&self, py: Python<'py>, normalizer: &PySentencePieceNormalizer, text: &str) -> PyResult<Bound<'py, PyList>> {
        let ids = py.allow_threads(|| guard(|| self.normalize_and_encode(&normalizer.inner, text)))?;
        ints::id_list(py, &ids, self.inner.id_bound()).map(untracked)
    }

    /// `encode_normalized` of each text, on `num_threads` threads with the GIL released.
    #[pyo3(signature = (normalizer, texts, num_threads=None))]
    fn encode_normalized_batch<'py>(&self, py: Python<'py>, normalizer: &PySentencePieceNormalizer, texts: Vec<PyBackedStr>, num_threads: Option<usize>) -> PyResult<Vec<Bound<'py, PyList>>> {
        let encoded = batch_on_threads(py, &texts, num_threads, |t| self.normalize_and_encode(&normalizer.inner, t))?;
        encoded.iter().map(|ids| ints::id_list(py, ids, self.inner.id_bound()).map(untracked)).collect()
    }
}

impl PyBpeModel {
    fn normalize_and_encode(&self, normalizer: &SentencePieceNormalizer, text: &str, fuse_unk: Option<u32>) -> Result<Vec<u32>, Error> {
        let mut ids = Vec::new();
        self.inner.encode_ordinary_into(&normalizer.normalize(text), &mut ids)?;
        if let Some(unk) = fuse_unk {
            ids.dedup_by(|next, prev| *next == unk && *prev == unk);
        }
        Ok(ids)
    }
}

impl PyUnigramModel {
    fn normalize_and_encode(&self, normalizer: &SentencePieceNormalizer, text: &str) -> Result<Vec<u32>, Error> {
        let normalized = normalizer.normalize(text);
        let mut ids = Vec::with_capacity(normalized.len() / 2);
        self.inner.encode_word(&normalized, &mut ids)?;
        Ok(ids)
    }
}

/// Accumulates chunk counts over batches of texts (within a memory budget), then learns merges
/// step by step so that Python can show progress.
#[pyclass(name = "BpeTrainer", module = "toksmith._core")]
struct PyBpeTrainer {
    pretokenizer: Pretokenizer,
    specials: SpecialTokens,
    counts: SpillingCounts,
    num_threads: Option<usize>,
    learner: Option<MergeLearner>,
    /// Whether the learner started from bytes (`start("byte")`): ids 0-255 are the bytes.
    from_bytes: bool,
    /// The next block of the file being counted, read by one of the trainer's threads while
    /// the others counted the block before (its 8 MiB are outside `max_memory`, which bounds
    /// the counts).
    read_ahead: Option<ReadAhead>,
    /// The buffer of the last block counted, for the next block to be read into.
    spare_block: Vec<u8>,
}

/// A block read ahead (or the error reading it gave): which one, and its text and end.
struct ReadAhead {
    path: PathBuf,
    offset: u64,
    size: usize,
    block: Result<(String, u64), Error>,
}

impl ReadAhead {
    /// The block at `offset`: the one read ahead if it is that one, else read now (into
    /// `buffer`), only `now_size` bytes of it.
    fn take(ahead: Option<ReadAhead>, path: &std::path::Path, offset: u64, size: usize, now_size: usize, buffer: &mut Vec<u8>, avoid: &[String]) -> Result<(String, u64), Error> {
        match ahead {
            Some(a) if a.path == path && a.offset == offset && a.size == size => a.block,
            other => {
                // Not the block asked for (the caller moved on): its buffer is read into.
                if let Some(Ok((text, _))) = other.map(|a| a.block) {
                    if buffer.capacity() < text.capacity() {
                        *buffer = text.into_bytes();
                    }
                }
                read_block_into(path, offset, now_size, std::mem::take(buffer), avoid)
            }
        }
    }
}

/// The learner holds the corpus as words and every pair's word list: freeing that takes tens of
/// milliseconds, so it is done on a thread of its own instead of at the end of `train`.
impl Drop for PyBpeTrainer {
    fn drop(&mut self) {
        if let Some(learner) = self.learner.take() {
            // If no thread can be started, the failed spawn drops the closure: freed here.
            let _ = std::thread::Builder::new().name("toksmith-free".into()).spawn(move || drop(learner));
        }
    }
}

#[pymethods]
impl PyBpeTrainer {
    #[new]
    #[pyo3(signature = (pattern, special_tokens, num_threads=None, max_memory=None, spill_dir=None))]
    fn new(pattern: &str, special_tokens: Vec<String>, num_threads: Option<usize>, max_memory: Option<usize>, spill_dir: Option<PathBuf>) -> PyResult<Self> {
        guard(|| {
            let spill_dir = spill_dir.unwrap_or_else(|| std::env::temp_dir().join(format!("toksmith-counts-{}", std::process::id())));
            Ok(PyBpeTrainer {
                pretokenizer: Pretokenizer::new(pattern)?,
                specials: SpecialTokens::new(special_tokens.into_iter().map(|s| (s, 0)).collect())?,
                counts: SpillingCounts::new(max_memory, spill_dir),
                num_threads,
                learner: None,
                from_bytes: false,
                read_ahead: None,
                spare_block: Vec::new(),
            })
        })
    }

    /// Counts the chunks of a batch of texts (the GIL is released meanwhile).
    fn add_texts(&mut self, py: Python<'_>, texts: Vec<String>) -> PyResult<()> {
        let (pre, sp, threads) = (&self.pretokenizer, &self.specials, self.num_threads);
        let counts = &mut self.counts;
        py.allow_threads(|| {
            guard(|| {
                let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
                with_threads(threads, ErrorKind::Training, || counts.add_tallies(&count_chunks(&refs, pre, sp)?))?
            })
        })
    }

    /// Counts a block of a plain-text file: about `size` bytes from byte `offset` (only
    /// `FIRST_BLOCK_BYTES` of a block not read ahead, on several threads), cut at a safe point
    /// (see `train::read`); returns where the next block starts, for the next call. Reading,
    /// decoding and counting all happen here, on the trainer's threads, with the GIL released.
    fn add_file_block(&mut self, py: Python<'_>, path: PathBuf, offset: u64, size: usize) -> PyResult<u64> {
        let (pre, sp, threads) = (&self.pretokenizer, &self.specials, self.num_threads);
        let counts = &mut self.counts;
        let (read_ahead, spare) = (&mut self.read_ahead, &mut self.spare_block);
        py.allow_threads(|| {
            guard(|| {
                // With several threads, a block not read ahead (a file's first) is read short:
                // no other thread has work while it is read.
                let pool_threads = match threads {
                    None | Some(0) => rayon::current_num_threads(), // the global pool's
                    Some(n) => n,
                };
                // Cuts are exact for the named patterns (see `is_safe_cut`); with another regex a
                // chunk may span one, so there the cuts must not depend on the number of threads
                // either (the result would): no short first block, pieces by size alone.
                let exact_cuts = pre.uses_scanner();
                let now_size = if pool_threads > 1 && exact_cuts { size.min(FIRST_BLOCK_BYTES) } else { size };
                // Special tokens that hold a line end must not be cut in two (see `is_safe_cut`).
                let avoid = &sp.with_line_ends();
                let (text, next) = ReadAhead::take(read_ahead.take(), &path, offset, size, now_size, spare, avoid)?;
                let more = std::fs::metadata(&path).is_ok_and(|m| next < m.len());
                let read_next_here = more && pool_threads > 1;
                // With several threads, one of them reads the next block while the others
                // count this one: reading is otherwise the one part of counting that no other
                // thread shares. With one, the next block is read when it is asked for.
                // Two buffers take turns: the one counted last is read into next.
                let buffer = std::sync::Mutex::new(std::mem::take(spare));
                let ahead = std::sync::Mutex::new(None);
                with_threads(threads, ErrorKind::Training, || {
                    let read_next = || {
                        if read_next_here {
                            let buffer = std::mem::take(&mut *buffer.lock().unwrap_or_else(|e| e.into_inner()));
                            // A panic while reading fails the call that needs the block, as an
                            // error would, not this one.
                            let block = catch_unwind(AssertUnwindSafe(|| read_block_into(&path, next, size, buffer, avoid)))
                                .unwrap_or_else(|panic| Err(Error::new(ErrorKind::Internal, panic_message(panic))));
                            *ahead.lock().unwrap_or_else(|e| e.into_inner()) = Some(block);
                        }
                    };
                    // Small pieces (about 256 KB), so that threads finishing early find work;
                    // their size does not change the tables (see `count_chunks`).
                        let per_size = text.len().div_ceil(COUNT_PIECE_BYTES);
                    let n_pieces = if exact_cuts { per_size.max(4 * rayon::current_num_threads()) } else { per_size };
                    let pieces = split_safe(&text, n_pieces, avoid);
                    counts.add_tallies(&count_chunks_beside(&pieces, pre, sp, &read_next)?)
                })??;
                *read_ahead = ahead.into_inner().unwrap_or_else(|e| e.into_inner()).map(|block| ReadAhead { path: path.clone(), offset: next, size, block });
                // Kept for the next block of this file only: at its end the buffer goes (it is
                // outside `max_memory`).
                *spare = if more { text.into_bytes() } else { Vec::new() };
                Ok(next)
            })
        })
    }

    /// Adds counts read from a TSV file (`chunk<TAB>count`); returns the number of lines.
    fn add_counts_file(&mut self, py: Python<'_>, path: PathBuf) -> PyResult<usize> {
        let counts = &mut self.counts;
        py.allow_threads(|| guard(|| read_tsv(counts, &path)))
    }

    /// Writes the counts as TSV in chunk order and empties them; returns the number of lines.
    fn write_counts(&mut self, py: Python<'_>, path: PathBuf) -> PyResult<usize> {
        let counts = &mut self.counts;
        py.allow_threads(|| guard(|| write_tsv(counts, &path)))
    }

    /// Distinct chunks held in memory, and how many runs were spilled to disk.
    fn memory_stats(&self) -> (usize, usize, usize) {
        (self.counts.len_in_memory(), self.counts.bytes_in_memory(), self.counts.num_runs())
    }

    /// Turns the counts into words and prepares merge learning. Returns the character alphabet
    /// (ids 0..n) at char level, None at byte level (ids 0-255 are the bytes).
    /// `build_model` (byte level): build the model alongside the merges, for
    /// `byte_level_model` (see `MergesModelBuilder`); without it, that builds it at the end.
    #[pyo3(signature = (level="byte", min_frequency=2, max_token_length=None, limit_alphabet=None, end_of_word_suffix="", build_model=true))]
    #[allow(clippy::too_many_arguments)]
    fn start(&mut self, py: Python<'_>, level: &str, min_frequency: u64, max_token_length: Option<u32>, limit_alphabet: Option<usize>, end_of_word_suffix: &str, build_model: bool) -> PyResult<Option<Vec<String>>> {
        let (counts, threads) = (&mut self.counts, self.num_threads);
        // No more blocks to read: their 8 MiB go before the words come (a block read ahead is
        // left when the caller stopped reading a file before its end).
        self.spare_block = Vec::new();
        self.read_ahead = None;
        let (learner, alphabet) = py.allow_threads(|| {
            guard(|| {
                with_threads(threads, ErrorKind::Training, || match level {
                    "byte" => {
                        let words = Words::from_chunk_groups(counts.into_groups()?)?;
                        let learner = MergeLearner::from_words(words, 256, vec![1; 256], min_frequency, max_token_length)?;
                        Ok((if build_model { learner.with_model_builder() } else { learner }, None))
                    }
                    "char" => {
                        let mut table = ChunkCounts::default();
                        counts.drain_sorted(|k, v| {
                            table.insert(k, v);
                        })?;
                        let (alphabet, words) = char_words(&table, limit_alphabet, end_of_word_suffix)?;
                        drop(table);
                        // The end-of-word suffix does not count towards max_token_length.
                        let lengths = alphabet
                            .iter()
                            .map(|s| s.strip_suffix(end_of_word_suffix).filter(|_| !end_of_word_suffix.is_empty()).unwrap_or(s).chars().count() as u32)
                            .collect();
                        Ok((MergeLearner::new(words, alphabet.len() as u32, lengths, min_frequency, max_token_length)?, Some(alphabet)))
                    }
                    other => Err(Error::new(ErrorKind::Training, format!("level must be 'byte' or 'char', not {other:?}"))),
                })?
            })
        })?;
        self.from_bytes = alphabet.is_none();
        self.learner = Some(learner);
        Ok(alphabet)
    }

    /// Prepares to continue training an existing byte-level BPE model (SuperBPE's stage 2,
    /// extending a tokenizer): every counted chunk is first segmented with the model (`tokens`
    /// with `merges`, or tiktoken ranks when `merges` is None), then new merges get ids from
    /// `next_id` on. `max_words` and `forbidden` (regexes) limit the tokens merges may create.
    #[pyo3(signature = (tokens, merges, next_id, min_frequency=2, max_token_length=None, max_words=None, forbidden=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn start_from(
        &mut self,
        py: Python<'_>,
        tokens: Vec<(u32, TokenBytes)>,
        merges: Option<Vec<(u32, u32)>>,
        next_id: u32,
        min_frequency: u64,
        max_token_length: Option<u32>,
        max_words: Option<u32>,
        forbidden: Vec<String>,
    ) -> PyResult<()> {
        let (counts, threads) = (&mut self.counts, self.num_threads);
        self.spare_block = Vec::new();
        self.read_ahead = None;
        let tokens = token_list(tokens);
        let learner = py.allow_threads(|| {
            guard(|| {
                let mut token_bytes: Vec<Vec<u8>> = vec![Vec::new(); next_id as usize];
                for (id, b) in &tokens {
                    if *id >= next_id {
                        return Err(Error::new(ErrorKind::Training, format!("token id {id} is not below next_id {next_id}")));
                    }
                    token_bytes[*id as usize] = b.clone();
                }
                let model = match &merges {
                    Some(m) => BpeModel::new(tokens, m, None, vec![], BpeOptions::default())?,
                    None => BpeModel::from_ranks(tokens, None, vec![])?,
                };
                let forbidden = forbidden
                    .iter()
                    .map(|p| fancy_regex::Regex::new(p).map_err(|e| Error::new(ErrorKind::InvalidPattern, format!("forbidden pattern {p:?}: {e}"))))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut words = Vec::new();
                let mut scratch = Vec::new();
                let mut failed = None;
                counts.drain_sorted(|chunk, n| {
                    let mut ids = Vec::new();
                    if let Err(e) = model.encode_chunk(&chunk, &mut ids, &mut scratch) {
                        failed = Some(e);
                    }
                    words.push((ids, n));
                })?;
                if let Some(e) = failed {
                    return Err(e);
                }
                words.sort_unstable();
                let lengths = token_bytes.iter().map(|b| b.len() as u32).collect();
                let taken = token_bytes.iter().filter(|b| !b.is_empty()).cloned().collect();
                let learner = with_threads(threads, ErrorKind::Training, || MergeLearner::new(words, next_id, lengths, min_frequency, max_token_length))??;
                Ok(learner.with_constraints(Constraints { token_bytes, max_words, forbidden, taken }))
            })
        })?;
        self.from_bytes = false;
        self.learner = Some(learner);
        Ok(())
    }

    /// Tells the learner how many merges will be asked for in all (it then tracks fewer pairs
    /// late in training; the merges are the same).
    fn set_merge_target(&mut self, merges: usize) -> PyResult<()> {
        let learner = self.learner.as_mut().ok_or_else(|| TrainingError::new_err("call start() before set_merge_target()"))?;
        learner.set_target(merges);
        Ok(())
    }

    /// Learns up to `n` more merges; returns how many were learned (0 once training is done).
    /// Merges that touch many words are split over the trainer's threads.
    fn step(&mut self, py: Python<'_>, n: usize) -> PyResult<usize> {
        let threads = self.num_threads;
        let learner = self.learner.as_mut().ok_or_else(|| TrainingError::new_err("call start() before step()"))?;
        py.allow_threads(|| guard(|| with_threads(threads, ErrorKind::Training, || learner.step(n))))
    }

    /// The byte-level model of the merges learned so far, after `start("byte")`: bytes are ids
    /// 0-255 and merge k makes id 256 + k, every id shifted by `offset` (special tokens laid
    /// out first). The same model as `BpeModel(tokens, merges, ...)` from those lists, without
    /// handing 32,000 tokens to Python and back at the end of training.
    fn byte_level_model(&mut self, py: Python<'_>, pattern: &str, specials: Vec<(String, u32)>, offset: u32) -> PyResult<PyBpeModel> {
        let learner = match &mut self.learner {
            Some(learner) if self.from_bytes => learner,
            _ => return Err(TrainingError::new_err("byte_level_model() needs a trainer started with start(\"byte\")")),
        };
        py.allow_threads(|| {
            guard(|| {
                let n = 256 + learner.merges().len();
                if offset as usize + n > u32::MAX as usize {
                    return Err(Error::new(ErrorKind::Training, format!("{offset} special tokens before {n} tokens are too many ids")));
                }
                // Mostly built during training already (see `MergesModelBuilder`).
                let model = match learner.take_model() {
                    Some(model) => model,
                    None => {
                        let mut model = MergesModelBuilder::new();
                        model.extend(learner.merges())?;
                        model
                    }
                };
                model.finish(offset, Some(pattern), specials)
            })
        })
        .map(PyBpeModel::wrap)
    }

    /// The count under which pairs are left out of the pair table now (`min_frequency`, or
    /// more late in training once `set_merge_target` was given); for tests and diagnostics.
    fn table_floor(&self) -> Option<u64> {
        self.learner.as_ref().map(|l| l.table_floor())
    }

    /// The merges learned so far (pairs of ids) and the count of each when it was chosen.
    fn merges(&self) -> (Vec<(u32, u32)>, Vec<u64>) {
        match &self.learner {
            Some(l) => (l.merges().to_vec(), l.counts().to_vec()),
            None => (Vec::new(), Vec::new()),
        }
    }
}

/// llama.cpp's splitting of text into words by several regexes (`pretokenize::llama`).
#[pyclass(name = "LlamaSplitter", module = "toksmith._core", frozen)]
struct PyLlamaSplitter {
    inner: LlamaSplitter,
}

#[pymethods]
impl PyLlamaSplitter {
    /// `stages`: (kind, regex, runs on the collapsed copy), kind one of "gpt2", "llama3",
    /// "qwen2", "newlines", "regex".
    #[new]
    fn new(stages: Vec<(String, String, bool)>) -> PyResult<Self> {
        guard(|| LlamaSplitter::new(stages)).map(|inner| PyLlamaSplitter { inner })
    }

    /// The words of the text whose copies are `spaced` and `collapsed`: (start, end) in
    /// characters, flat.
    fn split(&self, py: Python<'_>, spaced: &str, collapsed: &str) -> PyResult<Vec<usize>> {
        py.allow_threads(|| guard(|| Ok(self.inner.split(spaced, collapsed)?.into_iter().flat_map(|(s, e)| [s, e]).collect())))
    }
}

/// Splits `text` into pre-tokenization chunks with `pattern` (a name or a regex).
#[pyfunction]
fn split(py: Python<'_>, pattern: &str, text: &str) -> PyResult<Vec<String>> {
    py.allow_threads(|| {
        guard(|| {
            let p = Pretokenizer::new(resolve_pattern(pattern))?;
            Ok(p.split(text)?.into_iter().map(String::from).collect())
        })
    })
}

/// The regex behind a named pattern (`gpt2`, `cl100k`, `o200k`); other strings are returned as is.
#[pyfunction]
fn pattern_regex(name: &str) -> String {
    resolve_pattern(name).to_string()
}

/// Empties the per-thread chunk caches of every BPE model (benchmarks: each timed run starts cold).
#[pyfunction]
fn clear_chunk_caches() {
    crate::models::bpe::clear_chunk_caches();
}

/// Nanoseconds for a flag to go to another thread and back (see `train::handoff::round_trip_ns`):
/// benchmarks print it, as two threads' speed-up depends on it.
#[pyfunction]
#[pyo3(signature = (rounds=20000))]
fn thread_round_trip_ns(py: Python<'_>, rounds: u32) -> f64 {
    py.allow_threads(|| crate::train::handoff::round_trip_ns(rounds))
}

/// Finds literal strings in text: leftmost, then longest (see `special::LiteralMatcher`).
#[pyclass(name = "LiteralMatcher", module = "toksmith._core", frozen)]
struct PyLiteralMatcher {
    inner: LiteralMatcher,
}

#[pymethods]
impl PyLiteralMatcher {
    /// `overlapping`: made for `occurring` instead of `find`.
    #[new]
    #[pyo3(signature = (strings, overlapping=false))]
    fn new(strings: Vec<String>, overlapping: bool) -> PyResult<Self> {
        guard(|| LiteralMatcher::new(&strings, overlapping)).map(|inner| PyLiteralMatcher { inner })
    }

    /// The matches in `text` as (start, end, index of the string), in characters.
    fn find(&self, py: Python<'_>, text: &str) -> PyResult<Vec<(usize, usize, usize)>> {
        py.allow_threads(|| self.inner.find_chars(text)).map_err(to_py)
    }

    /// The indexes of the strings that occur in `text` (overlaps included), in increasing order.
    fn occurring(&self, py: Python<'_>, text: &str) -> PyResult<Vec<usize>> {
        py.allow_threads(|| self.inner.occurring(text)).map_err(to_py)
    }
}

/// SentencePiece's normalizer (see `crate::normalize`).
#[pyclass(name = "SentencePieceNormalizer", module = "toksmith._core", frozen)]
struct PySentencePieceNormalizer {
    inner: SentencePieceNormalizer,
}

#[pymethods]
impl PySentencePieceNormalizer {
    /// `rules`: the character map's (source, replacement) pairs; `protected`: strings never
    /// normalized (user-defined pieces).
    #[new]
    fn new(py: Python<'_>, rules: Vec<(String, String)>, protected: Vec<String>, add_dummy_prefix: bool, remove_extra_whitespaces: bool, escape_whitespaces: bool) -> PyResult<Self> {
        let inner = py.allow_threads(|| guard(|| Ok(SentencePieceNormalizer::new(rules, protected, add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces))))?;
        Ok(PySentencePieceNormalizer { inner })
    }

    fn normalize(&self, py: Python<'_>, text: &str) -> PyResult<String> {
        py.allow_threads(|| guard(|| Ok(self.inner.normalize(text))))
    }
}

/// Literal strings cut out of a text as ids of their own, and a replacement made between them
/// (see `Cuts`), for `BpeModel.encode_cut` and `encode_batch`.
#[pyclass(name = "Cuts", module = "toksmith._core", frozen)]
struct PyCuts {
    inner: Cuts,
}

#[pymethods]
impl PyCuts {
    #[new]
    #[pyo3(signature = (strings, replace=None))]
    fn new(strings: Vec<(String, u32)>, replace: Option<(String, String)>) -> PyResult<Self> {
        guard(|| Cuts::new(strings, replace)).map(|inner| PyCuts { inner })
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBpeModel>()?;
    m.add_class::<PyBpeTrainer>()?;
    m.add_class::<PyWordPieceModel>()?;
    m.add_class::<PyBertSplitter>()?;
    m.add_class::<PyUnigramModel>()?;
    m.add_class::<PyLiteralMatcher>()?;
    m.add_class::<PyCuts>()?;
    m.add_class::<PyLlamaSplitter>()?;
    m.add_class::<PySentencePieceNormalizer>()?;
    subword::register(m)?;
    m.add_function(wrap_pyfunction!(split, m)?)?;
    m.add_function(wrap_pyfunction!(pattern_regex, m)?)?;
    m.add_function(wrap_pyfunction!(clear_chunk_caches, m)?)?;
    m.add_function(wrap_pyfunction!(thread_round_trip_ns, m)?)?;
    Ok(())
}
