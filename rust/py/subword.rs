//! Bindings for WordPiece and Unigram training (registered from `mod.rs`), and for the
//! encode-time Unigram lattice (n-best, sampling).

use super::guard;
use crate::error::{Error, ErrorKind};
use crate::train::unigram::{Segment, Segmenter, SplitMix64, UnigramConfig, UnigramTrainer};
use crate::train::wordpiece::{train_wordpiece as learn_wordpiece, Criterion, RawWordCounter, SplitRule, WordCounts, WordPieceConfig};
use pyo3::prelude::*;
use rustc_hash::FxHashMap;

/// A rayon pool of `num_threads` threads, or None for the global pool.
fn pool(num_threads: Option<usize>) -> Result<Option<rayon::ThreadPool>, Error> {
    match num_threads {
        None | Some(0) => Ok(None),
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map(Some)
            .map_err(|e| Error::new(ErrorKind::Training, format!("cannot start {n} threads: {e}"))),
    }
}

fn run<T: Send>(pool: &Option<rayon::ThreadPool>, f: impl FnOnce() -> T + Send) -> T {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// Counts the distinct raw words of training texts.
#[pyclass(name = "RawWordCounter", module = "toksmith._core")]
struct PyRawWordCounter {
    inner: RawWordCounter,
    pool: Option<rayon::ThreadPool>,
}

#[pymethods]
impl PyRawWordCounter {
    /// `rule`: "whitespace" or "bert"; `cut`: strings that separate words and are not counted;
    /// `track_first`: count the first word of each text (and after each cut string) apart.
    #[new]
    #[pyo3(signature = (rule="whitespace", cut=Vec::new(), track_first=false, num_threads=None))]
    fn new(rule: &str, cut: Vec<String>, track_first: bool, num_threads: Option<usize>) -> PyResult<Self> {
        guard(|| {
            let rule = match rule {
                "whitespace" => SplitRule::Whitespace,
                "bert" => SplitRule::Bert,
                other => return Err(Error::new(ErrorKind::Training, format!("rule must be 'whitespace' or 'bert', not {other:?}"))),
            };
            Ok(PyRawWordCounter { inner: RawWordCounter::new(rule, &cut, track_first)?, pool: pool(num_threads)? })
        })
    }

    fn add_texts(&mut self, py: Python<'_>, texts: Vec<String>) -> PyResult<()> {
        let (inner, pool) = (&mut self.inner, &self.pool);
        py.allow_threads(|| {
            guard(|| {
                let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
                run(pool, || inner.add_texts(&refs));
                Ok(())
            })
        })
    }

    /// (all words, first words), each a list of (word, count) sorted by word; empties the counter.
    fn take(&mut self) -> (WordCounts, WordCounts) {
        self.inner.take()
    }
}

/// Trains WordPiece on (word, count) pairs; returns (tokens in id order, alphabet size,
/// number of distinct words skipped for characters outside the alphabet).
#[pyfunction]
#[pyo3(signature = (words, max_tokens, min_frequency=2, limit_alphabet=None, prefix="##".to_string(), num_threads=None,
                    criterion="ratio"))]
#[allow(clippy::too_many_arguments)]
fn train_wordpiece(
    py: Python<'_>,
    words: Vec<(String, u64)>,
    max_tokens: usize,
    min_frequency: u64,
    limit_alphabet: Option<usize>,
    prefix: String,
    num_threads: Option<usize>,
    criterion: &str,
) -> PyResult<(Vec<String>, usize, usize)> {
    let criterion = match criterion {
        "ratio" => Criterion::Ratio,
        "likelihood" => Criterion::Likelihood,
        other => {
            return Err(super::to_py(Error::new(ErrorKind::Training, format!("criterion must be 'ratio' or 'likelihood', not {other:?}"))))
        }
    };
    py.allow_threads(|| {
        guard(|| {
            let config = WordPieceConfig { max_tokens, min_frequency, limit_alphabet, prefix, criterion };
            let pool = pool(num_threads)?;
            let r = run(&pool, || learn_wordpiece(&words, &config))?;
            Ok((r.tokens, r.alphabet_size, r.skipped_words))
        })
    })
}

/// Unigram training, step by step so that Python can show progress.
#[pyclass(name = "UnigramTrainer", module = "toksmith._core")]
struct PyUnigramTrainer {
    inner: UnigramTrainer,
    pool: Option<rayon::ThreadPool>,
}

#[pymethods]
impl PyUnigramTrainer {
    /// `words`: (word, count), words already normalized and starting with ▁ where a space was;
    /// `scripts`: (character, script class) with class 0 for characters that join any script.
    #[new]
    #[pyo3(signature = (words, scripts, *, vocab_size, stop_size, character_coverage=0.9995, max_piece_length=16,
                        seed_size=1_000_000, shrinking_factor=0.75, split_digits=false, split_by_number=true,
                        split_by_script=true, num_threads=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        words: Vec<(String, u64)>,
        scripts: Vec<(char, u32)>,
        vocab_size: usize,
        stop_size: usize,
        character_coverage: f64,
        max_piece_length: usize,
        seed_size: usize,
        shrinking_factor: f64,
        split_digits: bool,
        split_by_number: bool,
        split_by_script: bool,
        num_threads: Option<usize>,
    ) -> PyResult<Self> {
        py.allow_threads(|| {
            guard(|| {
                let config = UnigramConfig {
                    vocab_size,
                    stop_size,
                    character_coverage,
                    max_piece_length,
                    seed_size,
                    shrinking_factor,
                    split_digits,
                    split_by_number,
                    split_by_script,
                };
                let scripts: FxHashMap<char, u32> = scripts.into_iter().collect();
                let pool = pool(num_threads)?;
                let inner = run(&pool, || UnigramTrainer::new(words, &scripts, config))?;
                Ok(PyUnigramTrainer { inner, pool })
            })
        })
    }

    /// The seed pieces (piece, frequency) in id order.
    fn seeds(&self) -> Vec<(String, u64)> {
        self.inner.seeds()
    }

    /// The live pieces (piece, score) in id order.
    fn pieces(&self) -> Vec<(String, f64)> {
        self.inner.current_pieces()
    }

    fn num_pieces(&self) -> usize {
        self.inner.num_pieces()
    }

    fn num_lattice_nodes(&self) -> usize {
        self.inner.num_lattice_nodes()
    }

    fn required_chars(&self) -> Vec<char> {
        self.inner.required_chars()
    }

    /// The E-step alone: (expected count of every seed piece by id, corpus log-likelihood).
    fn expected_counts(&self, py: Python<'_>) -> PyResult<(Vec<f64>, f64)> {
        let (inner, pool) = (&self.inner, &self.pool);
        py.allow_threads(|| guard(|| Ok(run(pool, || inner.expected_counts()))))
    }

    /// Viterbi counts of every seed piece by id.
    fn viterbi_counts(&self, py: Python<'_>) -> PyResult<Vec<f64>> {
        let (inner, pool) = (&self.inner, &self.pool);
        py.allow_threads(|| guard(|| Ok(run(pool, || inner.viterbi_counts()))))
    }

    /// One EM iteration; returns the average negative log-likelihood per word.
    fn em_iteration(&mut self, py: Python<'_>) -> PyResult<f64> {
        let (inner, pool) = (&mut self.inner, &self.pool);
        py.allow_threads(|| guard(|| Ok(run(pool, || inner.em_iteration()))))
    }

    /// One pruning step; returns the number of pieces removed.
    fn prune(&mut self, py: Python<'_>) -> PyResult<usize> {
        let (inner, pool) = (&mut self.inner, &self.pool);
        py.allow_threads(|| guard(|| Ok(run(pool, || inner.prune()))))
    }

    fn done(&self) -> bool {
        self.inner.done()
    }

    /// The final (piece, score) list, highest score first.
    fn finalize(&self) -> Vec<(String, f64)> {
        self.inner.finalize()
    }
}

/// The lattice of a Unigram model for n-best lists and sampling.
#[pyclass(name = "UnigramLattice", module = "toksmith._core", frozen)]
struct PyUnigramLattice {
    inner: Segmenter,
}

/// Segments from Python: (word, None) for a word, ("", id) for a fixed token.
fn segments(items: &[(String, Option<u32>)]) -> Vec<Segment<'_>> {
    items.iter().map(|(w, id)| match id {
        Some(id) => Segment::Fixed(*id),
        None => Segment::Word(w.as_str()),
    }).collect()
}

#[pymethods]
impl PyUnigramLattice {
    /// `pieces`: (piece, id, score) for every piece the lattice may use; `byte_ids`: the 256 ids
    /// of <0x00>..<0xFF> for byte fallback.
    #[new]
    #[pyo3(signature = (pieces, unk_id=None, byte_ids=None, fuse_unk=true))]
    fn new(pieces: Vec<(String, u32, f64)>, unk_id: Option<u32>, byte_ids: Option<Vec<u32>>, fuse_unk: bool) -> PyResult<Self> {
        guard(|| Segmenter::new(pieces, unk_id, byte_ids, fuse_unk)).map(|inner| PyUnigramLattice { inner })
    }

    fn viterbi(&self, py: Python<'_>, items: Vec<(String, Option<u32>)>) -> PyResult<(Vec<u32>, f64)> {
        py.allow_threads(|| guard(|| self.inner.viterbi(&segments(&items))))
    }

    fn nbest(&self, py: Python<'_>, items: Vec<(String, Option<u32>)>, n: usize) -> PyResult<Vec<(Vec<u32>, f64)>> {
        py.allow_threads(|| guard(|| self.inner.nbest(&segments(&items), n)))
    }

    /// nbest_size < 0: over all segmentations; 0 or 1: the best one; n > 1: among the n best.
    fn sample(&self, py: Python<'_>, items: Vec<(String, Option<u32>)>, alpha: f64, nbest_size: i64, seed: u64) -> PyResult<Vec<u32>> {
        py.allow_threads(|| {
            guard(|| {
                let segs = segments(&items);
                let mut rng = SplitMix64(seed);
                match nbest_size {
                    n if n < 0 => self.inner.sample(&segs, alpha, &mut rng),
                    0 | 1 => self.inner.viterbi(&segs).map(|r| r.0),
                    n => self.inner.sample_nbest(&segs, alpha, n as usize, &mut rng),
                }
            })
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRawWordCounter>()?;
    m.add_class::<PyUnigramTrainer>()?;
    m.add_class::<PyUnigramLattice>()?;
    m.add_function(wrap_pyfunction!(train_wordpiece, m)?)?;
    Ok(())
}
