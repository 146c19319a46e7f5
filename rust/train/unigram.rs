//! Unigram language-model training (Kudo, 2018; the algorithm of SentencePiece), and the
//! encode-time lattice operations that go with it: n-best segmentations and sampling for
//! subword regularization.
//!
//! Training works on distinct words with their counts (a word is `▁` plus the text up to the
//! next whitespace, as the Metaspace pre-tokenizer cuts it; pieces never cross words):
//!
//! 1. **Seeds.** The characters that make up `character_coverage` of the text are required
//!    pieces; the others become the unknown token. Candidate pieces are the nodes of the suffix
//!    tree of the distinct words, read off a suffix array sorted to depth `max_piece_length`:
//!    a substring that is either branching (followed by different characters) or ends a word
//!    (or reaches the depth limit), seen at least twice (counting word frequency). A candidate
//!    that is not a valid piece (see [`UnigramConfig`]) is cut to its longest valid prefix if that
//!    prefix is still longer than the parent node. The `seed_size` candidates with the highest
//!    frequency × length are kept. Memory is linear in the size of the distinct words, not of
//!    the corpus.
//! 2. **EM.** The E-step runs forward-backward over each word's lattice and adds up the
//!    expected count of every piece (weighted by the word's count); the M-step drops pieces
//!    expected fewer than 0.5 times and sets each score to digamma(count) - digamma(total), the
//!    Bayesian (Dirichlet-prior) estimate SentencePiece uses, which favours dropping rare pieces.
//! 3. **Pruning.** For each piece, the best segmentation of its own string without it is its
//!    replacement. The loss of removing the piece is the drop in corpus log-likelihood when its
//!    Viterbi count moves to the replacement, weighted by the share of words it occurs in. Pieces
//!    that are never on a Viterbi path go first, then the ones with the smallest loss, down to
//!    `shrinking_factor` of the current size. EM and pruning alternate until at most
//!    `stop_size` pieces remain; the final vocabulary is the required characters plus the
//!    highest-scoring pieces.
//!
//! Where this differs from SentencePiece (deliberately):
//! - Seeds come from the distinct words (weighted by count) rather than from whole sentences:
//!   the same candidate frequencies, for a suffix array over a much smaller text. A candidate
//!   that is invalid as a whole is cut to its longest valid prefix instead of being dropped.
//! - Required characters stay in the model through EM and pruning (SentencePiece may drop one
//!   and add it back at the end with a made-up score), so the lattice never needs `<unk>` for a
//!   covered character; a required character's expected count is floored at 0.5.
//! - The lattice of every word is built once from the suffix array (the occurrences of each seed
//!   are its suffix-array interval) and only filtered afterwards: pieces are only ever removed.
//! - Forward-backward runs in linear space (no exp/log per lattice node); a word whose total
//!   probability underflows is redone in log space.
//! - Work is split into a fixed number of groups of words, summed in a fixed order: the result
//!   does not depend on the number of threads.

use crate::error::{Error, ErrorKind, Result};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

/// The whitespace marker that starts words.
pub const WS: char = '\u{2581}';
/// Penalty of the unknown token relative to the lowest piece score (as SentencePiece).
const UNK_PENALTY: f64 = 10.0;
/// The M-step drops pieces expected fewer times than this.
const MIN_EXPECTED: f64 = 0.5;
/// Script class that joins any neighbour (combining marks, and digits without split_by_number).
pub const SCRIPT_ANY: u32 = 0;

#[derive(Debug, Clone)]
pub struct UnigramConfig {
    /// Ordinary pieces in the final vocabulary (special, user-defined and byte pieces excluded).
    pub vocab_size: usize,
    /// EM and pruning stop once at most this many pieces are left (SentencePiece: 1.1 times the
    /// total vocabulary size, so that the final choice has some slack).
    pub stop_size: usize,
    pub character_coverage: f64,
    /// In characters; `▁` counts.
    pub max_piece_length: usize,
    pub seed_size: usize,
    pub shrinking_factor: f64,
    /// Digits are pieces of their own (no piece holds a digit and anything else).
    pub split_digits: bool,
    /// ASCII digits keep their script (Common, as punctuation: `1.5` is a valid piece, `x86`
    /// is not); without it they join any script.
    pub split_by_number: bool,
    /// No piece mixes scripts (script classes come from the caller; class 0 joins anything).
    /// Without it, `split_by_number` still keeps digits apart from other characters.
    pub split_by_script: bool,
}

/// A distinct word: its characters are `text[start..start + len]`.
#[derive(Debug, Clone, Copy)]
struct WordRef {
    start: u32,
    len: u32,
    count: u64,
}

/// A piece of the model: one occurrence of it in the text (its string) and its length.
#[derive(Debug, Clone, Copy)]
struct PieceRef {
    pos: u32,
    len: u8,
    required: bool,
}

pub struct UnigramTrainer {
    config: UnigramConfig,
    /// Character id -> character. Id 0 separates words; the last id marks uncovered characters.
    chars: Vec<char>,
    unk_char: u32,
    text: Vec<u32>,
    words: Vec<WordRef>,
    total_count: f64,
    pieces: Vec<PieceRef>,
    seed_freqs: Vec<u64>,
    alive: Vec<bool>,
    scores: Vec<f64>,
    /// The lattice of the whole text: the nodes starting at position p are
    /// `node_start[p]..node_start[p + 1]`, ordered by length.
    node_start: Vec<u32>,
    node_piece: Vec<u32>,
    node_len: Vec<u8>,
    num_required: usize,
}

/// Words per group of the parallel passes; the number of groups depends only on the input.
const WORDS_PER_GROUP: usize = 4096;
const MAX_GROUPS: usize = 8;

fn training_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Training, message)
}

/// log(exp(x) + exp(y)) without overflow.
fn log_add(x: f64, y: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        return y;
    }
    if y == f64::NEG_INFINITY {
        return x;
    }
    let (hi, lo) = if x > y { (x, y) } else { (y, x) };
    hi + (lo - hi).exp().ln_1p()
}

/// The digamma function ψ(x) for x > 0: recurrence up to 10, then the asymptotic series
/// (error below 1e-13).
pub fn digamma(mut x: f64) -> f64 {
    let mut result = 0.0;
    while x < 10.0 {
        result -= 1.0 / x;
        x += 1.0;
    }
    let f = 1.0 / (x * x);
    let tail = f * (1.0 / 12.0 - f * (1.0 / 120.0 - f * (1.0 / 252.0 - f * (1.0 / 240.0 - f / 132.0))));
    result + x.ln() - 0.5 / x - tail
}

impl UnigramTrainer {
    /// Prepares training: required characters, seed pieces and the lattice of every word.
    /// `scripts` gives each character's script class (missing: joins anything).
    pub fn new(mut words: Vec<(String, u64)>, scripts: &FxHashMap<char, u32>, config: UnigramConfig) -> Result<Self> {
        if !(0.0..=1.0).contains(&config.character_coverage) || config.character_coverage == 0.0 {
            return Err(training_error(format!(
                "character_coverage must be in (0, 1], not {}; use 0.9995 for alphabetic languages, 1.0 for small alphabets",
                config.character_coverage
            )));
        }
        if config.max_piece_length == 0 || config.max_piece_length > 255 {
            return Err(training_error(format!("max_piece_length must be between 1 and 255, not {}", config.max_piece_length)));
        }
        if !(config.shrinking_factor > 0.0 && config.shrinking_factor < 1.0) {
            return Err(training_error(format!("shrinking_factor must be in (0, 1), not {}", config.shrinking_factor)));
        }
        words.retain(|(w, n)| !w.is_empty() && *n > 0);
        words.sort_unstable();
        if words.is_empty() {
            return Err(training_error("the training data has no words; check the source (and text_field for JSON Lines)"));
        }

        // Required characters: the most frequent, up to the coverage.
        let mut char_counts: FxHashMap<char, u64> = FxHashMap::default();
        for (w, n) in &words {
            for c in w.chars() {
                *char_counts.entry(c).or_insert(0) += n;
            }
        }
        let total_chars: u64 = char_counts.values().sum();
        let mut by_freq: Vec<(char, u64)> = char_counts.iter().map(|(&c, &n)| (c, n)).collect();
        by_freq.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut required: Vec<char> = Vec::new();
        let mut covered = 0u64;
        for &(c, n) in &by_freq {
            if config.character_coverage < 1.0 && covered as f64 / total_chars as f64 >= config.character_coverage {
                break;
            }
            covered += n;
            required.push(c);
        }
        if required.len() > config.vocab_size {
            return Err(training_error(format!(
                "vocab_size leaves {} ordinary pieces, fewer than the {} characters needed to cover {:.2}% of the \
                 text (character_coverage={}); raise vocab_size or lower character_coverage",
                config.vocab_size,
                required.len(),
                config.character_coverage * 100.0,
                config.character_coverage
            )));
        }
        required.sort_unstable();
        let num_required = required.len();
        let unk_char = num_required as u32 + 1;
        let char_id: FxHashMap<char, u32> = required.iter().enumerate().map(|(i, &c)| (c, i as u32 + 1)).collect();
        let mut chars = vec!['\0'];
        chars.extend(&required);
        chars.push('\u{FFFD}');

        // The text: every distinct word, each followed by the separator 0.
        let total_len: usize = words.iter().map(|(w, _)| w.chars().count() + 1).sum();
        if total_len >= u32::MAX as usize {
            return Err(training_error("the distinct words hold more than 4 billion characters; train on a sample"));
        }
        let mut text: Vec<u32> = Vec::with_capacity(total_len);
        let mut refs: Vec<WordRef> = Vec::with_capacity(words.len());
        for (w, n) in &words {
            let start = text.len() as u32;
            text.extend(w.chars().map(|c| char_id.get(&c).copied().unwrap_or(unk_char)));
            refs.push(WordRef { start, len: text.len() as u32 - start, count: *n });
            text.push(0);
        }
        drop(words);
        let total_count: f64 = refs.iter().map(|w| w.count as f64).sum();

        let mut trainer = UnigramTrainer {
            config,
            chars,
            unk_char,
            text,
            words: refs,
            total_count,
            pieces: Vec::new(),
            seed_freqs: Vec::new(),
            alive: Vec::new(),
            scores: Vec::new(),
            node_start: Vec::new(),
            node_piece: Vec::new(),
            node_len: Vec::new(),
            num_required,
        };
        let classes: Vec<u32> = trainer.chars.iter().map(|c| trainer.script_class(*c, scripts)).collect();
        trainer.seed(&classes)?;
        Ok(trainer)
    }

    /// The class of a character for the one-script rule: pieces never mix two classes, and
    /// class 0 mixes with anything.
    fn script_class(&self, c: char, scripts: &FxHashMap<char, u32>) -> u32 {
        let digit = c.is_ascii_digit();
        match (self.config.split_by_script, self.config.split_by_number) {
            // Digits keep their script (Common) or join anything.
            (true, by_number) if digit && !by_number => SCRIPT_ANY,
            (true, _) => scripts.get(&c).copied().unwrap_or(SCRIPT_ANY),
            // Scripts may mix, but digits and other characters may not.
            (false, true) => if digit { 1 } else { 2 },
            (false, false) => SCRIPT_ANY,
        }
    }

    /// Length of the longest prefix of `s` (character ids) that is a valid piece: no separator
    /// or uncovered character, `▁` only first, one script, digits alone with split_digits.
    fn valid_prefix(&self, s: &[u32], classes: &[u32]) -> usize {
        let mut prev = SCRIPT_ANY;
        for (i, &c) in s.iter().enumerate() {
            if c == 0 || c == self.unk_char {
                return i;
            }
            let ch = self.chars[c as usize];
            if ch == WS {
                if i > 0 {
                    return i;
                }
                continue;
            }
            if self.config.split_digits && ch.is_ascii_digit() {
                return if i == 0 { 1 } else { i };
            }
            let class = classes[c as usize];
            if class != SCRIPT_ANY && prev != SCRIPT_ANY && class != prev {
                return i;
            }
            if class != SCRIPT_ANY {
                prev = class;
            }
        }
        s.len()
    }

    /// Builds the seed pieces and the lattice (see the module documentation).
    fn seed(&mut self, classes: &[u32]) -> Result<()> {
        let text = &self.text;
        let depth = self.config.max_piece_length;
        let n = text.len();
        // Suffix array to depth `depth` (ties broken by position: a total order).
        let mut sa: Vec<u32> = (0..n as u32).filter(|&p| text[p as usize] != 0).collect();
        let key = |p: u32| &text[p as usize..(p as usize + depth).min(n)];
        sa.par_sort_unstable_by(|&a, &b| key(a).cmp(key(b)).then(a.cmp(&b)));
        let m = sa.len();
        // Length of each suffix's key: up to the end of its word, at most `depth`.
        let key_len = |p: u32| key(p).iter().position(|&c| c == 0).unwrap_or(key(p).len());
        // lcp[i]: common prefix of suffixes i-1 and i (0 for i = 0 and i = m).
        let mut lcp: Vec<u8> = (0..=m)
            .into_par_iter()
            .map(|i| {
                if i == 0 || i == m {
                    return 0;
                }
                let (a, b) = (key(sa[i - 1]), key(sa[i]));
                a.iter().zip(b).take_while(|(x, y)| x == y && **x != 0).count() as u8
            })
            .collect();
        // Owner word of each position, then prefix sums of word counts in suffix-array order.
        let mut count_at: Vec<u64> = vec![0; n];
        for w in &self.words {
            count_at[w.start as usize..(w.start + w.len) as usize].fill(w.count);
        }
        let mut weight: Vec<u64> = Vec::with_capacity(m + 1);
        weight.push(0);
        for &p in &sa {
            weight.push(weight.last().unwrap() + count_at[p as usize]);
        }
        drop(count_at);

        // Candidates: (first suffix, end suffix, length, frequency), kept to 2 * budget.
        let budget = self.config.seed_size.saturating_sub(self.num_required);
        let mut cands: Vec<(u32, u32, u8, u64)> = Vec::new();
        let order = |a: &(u32, u32, u8, u64), b: &(u32, u32, u8, u64)| {
            // Highest frequency * length first, then in string order (suffix-array position,
            // then shorter first: a prefix sorts before its extensions).
            (b.3 * b.2 as u64).cmp(&(a.3 * a.2 as u64)).then(a.0.cmp(&b.0)).then(a.2.cmp(&b.2))
        };
        let consider = |l: usize, r: usize, len: usize, parent: usize, cands: &mut Vec<(u32, u32, u8, u64)>| {
            let start = sa[l] as usize;
            let valid = self.valid_prefix(&text[start..start + len], classes);
            let freq = weight[r] - weight[l];
            if valid > parent && valid >= 2 && freq >= 2 {
                cands.push((l as u32, r as u32, valid as u8, freq));
                if budget > 0 && cands.len() >= 2 * budget + 1024 {
                    cands.select_nth_unstable_by(budget, order);
                    cands.truncate(budget);
                }
            }
        };
        // Internal nodes: the lcp intervals, found with a stack (Abouelhoda et al., 2004).
        let mut stack: Vec<(usize, usize)> = vec![(0, 0)]; // (depth, left bound)
        for i in 1..=m {
            let cur = lcp[i] as usize;
            let mut lb = i - 1;
            while cur < stack.last().unwrap().0 {
                let (h, l) = stack.pop().unwrap();
                let parent = cur.max(stack.last().unwrap().0);
                consider(l, i, h, parent, &mut cands);
                lb = l;
            }
            if cur > stack.last().unwrap().0 {
                stack.push((cur, lb));
            }
        }
        // Leaves: a suffix whose key is longer than what it shares with its neighbours.
        for i in 0..m {
            let shared = (lcp[i] as usize).max(lcp[i + 1] as usize);
            let len = key_len(sa[i]);
            if len > shared {
                consider(i, i + 1, len, shared, &mut cands);
            }
        }
        lcp.clear();
        lcp.shrink_to_fit();
        if cands.len() > budget {
            cands.select_nth_unstable_by(budget, order);
            cands.truncate(budget);
        }
        cands.sort_unstable_by(order);

        // Pieces: required characters (their suffix-array intervals), then the candidates.
        let mut intervals: Vec<(u32, u32)> = Vec::with_capacity(self.num_required + cands.len());
        let mut i = 0;
        for c in 1..=self.num_required as u32 {
            while i < m && text[sa[i] as usize] < c {
                i += 1;
            }
            let l = i;
            while i < m && text[sa[i] as usize] == c {
                i += 1;
            }
            intervals.push((l as u32, i as u32));
            self.pieces.push(PieceRef { pos: sa.get(l).copied().unwrap_or(0), len: 1, required: true });
            self.seed_freqs.push(weight[i] - weight[l]);
        }
        for &(l, r, len, freq) in &cands {
            intervals.push((l, r));
            self.pieces.push(PieceRef { pos: sa[l as usize], len, required: false });
            self.seed_freqs.push(freq);
        }
        drop(cands);

        // The lattice: each piece occurs at the start of every suffix of its interval.
        let mut node_start: Vec<u32> = vec![0; n + 1];
        for &(l, r) in &intervals {
            for &s in &sa[l as usize..r as usize] {
                node_start[s as usize + 1] += 1;
            }
        }
        for i in 0..n {
            node_start[i + 1] += node_start[i];
        }
        let total = node_start[n] as usize;
        let mut node_piece = vec![0u32; total];
        let mut node_len = vec![0u8; total];
        let mut cursor: Vec<u32> = node_start[..n].to_vec();
        // Shorter pieces first, so each position's nodes are ordered by length.
        let mut by_len: Vec<usize> = (0..self.pieces.len()).collect();
        by_len.sort_by_key(|&id| self.pieces[id].len);
        for id in by_len {
            let (l, r) = intervals[id];
            for &s in &sa[l as usize..r as usize] {
                let k = cursor[s as usize] as usize;
                node_piece[k] = id as u32;
                node_len[k] = self.pieces[id].len;
                cursor[s as usize] += 1;
            }
        }
        self.node_start = node_start;
        self.node_piece = node_piece;
        self.node_len = node_len;
        let sum: f64 = self.seed_freqs.iter().map(|&f| f as f64).sum();
        self.scores = self.seed_freqs.iter().map(|&f| (f as f64).ln() - sum.ln()).collect();
        self.alive = vec![true; self.pieces.len()];
        Ok(())
    }

    // --------------------------------------------------------------------------------------
    // Inspection

    pub fn piece_string(&self, id: usize) -> String {
        let p = self.pieces[id];
        self.text[p.pos as usize..p.pos as usize + p.len as usize].iter().map(|&c| self.chars[c as usize]).collect()
    }

    /// The seed pieces with their frequencies, in id order.
    pub fn seeds(&self) -> Vec<(String, u64)> {
        (0..self.pieces.len()).map(|id| (self.piece_string(id), self.seed_freqs[id])).collect()
    }

    /// The live pieces with their current scores, in id order.
    pub fn current_pieces(&self) -> Vec<(String, f64)> {
        (0..self.pieces.len()).filter(|&id| self.alive[id]).map(|id| (self.piece_string(id), self.scores[id])).collect()
    }

    pub fn num_pieces(&self) -> usize {
        self.alive.iter().filter(|&&a| a).count()
    }

    pub fn num_required(&self) -> usize {
        self.num_required
    }

    pub fn num_lattice_nodes(&self) -> usize {
        self.node_piece.len()
    }

    /// Required characters (code point order).
    pub fn required_chars(&self) -> Vec<char> {
        self.chars[1..=self.num_required].to_vec()
    }

    // --------------------------------------------------------------------------------------
    // EM

    fn unk_score(&self) -> f64 {
        let min = (0..self.pieces.len()).filter(|&i| self.alive[i]).map(|i| self.scores[i]).fold(f64::INFINITY, f64::min);
        if min.is_finite() { min - UNK_PENALTY } else { -UNK_PENALTY }
    }

    /// Runs `f` over every word in a fixed number of groups (in parallel) and returns each
    /// group's state, in group order.
    fn over_words<T: Send>(&self, init: impl Fn() -> T + Sync, f: impl Fn(&mut T, &WordRef) + Sync) -> Vec<T> {
        let n = self.words.len();
        let groups = (n / WORDS_PER_GROUP).clamp(1, MAX_GROUPS);
        (0..groups)
            .into_par_iter()
            .map(|g| {
                let mut state = init();
                for w in &self.words[g * n / groups..(g + 1) * n / groups] {
                    f(&mut state, w);
                }
                state
            })
            .collect()
    }

    fn nodes_at(&self, pos: usize) -> std::ops::Range<usize> {
        self.node_start[pos] as usize..self.node_start[pos + 1] as usize
    }

    /// The E-step: expected count of every piece (by id) and the corpus log-likelihood.
    pub fn expected_counts(&self) -> (Vec<f64>, f64) {
        let probs: Vec<f64> = self.scores.iter().zip(&self.alive).map(|(s, &a)| if a { s.exp() } else { 0.0 }).collect();
        let unk_score = self.unk_score();
        let parts = self.over_words(
            || (vec![0.0f64; self.pieces.len()], 0.0f64, Vec::new(), Vec::new()),
            |(expected, loglik, alpha, beta), w| {
                *loglik += w.count as f64 * self.forward_backward(w, &probs, unk_score, expected, alpha, beta);
            },
        );
        let mut expected = vec![0.0; self.pieces.len()];
        let mut loglik = 0.0;
        for (e, l, _, _) in parts {
            for (t, x) in expected.iter_mut().zip(e) {
                *t += x;
            }
            loglik += l;
        }
        (expected, loglik)
    }

    /// Adds the expected counts of one word to `expected`; returns log P(word).
    fn forward_backward(&self, w: &WordRef, probs: &[f64], unk_score: f64, expected: &mut [f64], alpha: &mut Vec<f64>, beta: &mut Vec<f64>) -> f64 {
        let (s, n) = (w.start as usize, w.len as usize);
        let unk_p = unk_score.exp();
        alpha.clear();
        alpha.resize(n + 1, 0.0);
        alpha[0] = 1.0;
        for i in 0..n {
            let a = alpha[i];
            if a == 0.0 {
                continue;
            }
            if self.text[s + i] == self.unk_char {
                alpha[i + 1] += a * unk_p;
                continue;
            }
            for k in self.nodes_at(s + i) {
                let p = probs[self.node_piece[k] as usize];
                if p > 0.0 {
                    alpha[i + self.node_len[k] as usize] += a * p;
                }
            }
        }
        let z = alpha[n];
        if !(z > 1e-280 && z.is_finite()) {
            return self.forward_backward_log(w, probs, unk_score, expected, alpha, beta);
        }
        beta.clear();
        beta.resize(n + 1, 0.0);
        beta[n] = 1.0;
        let weight = w.count as f64 / z;
        for i in (0..n).rev() {
            if self.text[s + i] == self.unk_char {
                beta[i] = unk_p * beta[i + 1];
                continue;
            }
            let a = alpha[i] * weight;
            let mut b = 0.0;
            for k in self.nodes_at(s + i) {
                let id = self.node_piece[k] as usize;
                let p = probs[id];
                if p > 0.0 {
                    let t = p * beta[i + self.node_len[k] as usize];
                    b += t;
                    expected[id] += a * t;
                }
            }
            beta[i] = b;
        }
        z.ln()
    }

    /// The same in log space, for words whose probability underflows.
    fn forward_backward_log(&self, w: &WordRef, probs: &[f64], unk_score: f64, expected: &mut [f64], alpha: &mut Vec<f64>, beta: &mut Vec<f64>) -> f64 {
        let (s, n) = (w.start as usize, w.len as usize);
        let lp = |id: usize| probs[id].ln(); // probs are exp(score) of live pieces
        alpha.clear();
        alpha.resize(n + 1, f64::NEG_INFINITY);
        alpha[0] = 0.0;
        for i in 0..n {
            let a = alpha[i];
            if a == f64::NEG_INFINITY {
                continue;
            }
            if self.text[s + i] == self.unk_char {
                alpha[i + 1] = log_add(alpha[i + 1], a + unk_score);
                continue;
            }
            for k in self.nodes_at(s + i) {
                let id = self.node_piece[k] as usize;
                if probs[id] > 0.0 {
                    let e = i + self.node_len[k] as usize;
                    alpha[e] = log_add(alpha[e], a + lp(id));
                }
            }
        }
        let z = alpha[n];
        beta.clear();
        beta.resize(n + 1, f64::NEG_INFINITY);
        beta[n] = 0.0;
        for i in (0..n).rev() {
            if self.text[s + i] == self.unk_char {
                beta[i] = unk_score + beta[i + 1];
                continue;
            }
            let mut b = f64::NEG_INFINITY;
            for k in self.nodes_at(s + i) {
                let id = self.node_piece[k] as usize;
                if probs[id] > 0.0 {
                    let t = lp(id) + beta[i + self.node_len[k] as usize];
                    b = log_add(b, t);
                    expected[id] += w.count as f64 * (alpha[i] + t - z).exp();
                }
            }
            beta[i] = b;
        }
        z
    }

    /// The M-step: drops rarely expected pieces and sets the scores of the others.
    pub fn m_step(&mut self, expected: &[f64]) {
        let mut counts = vec![0.0; self.pieces.len()];
        let mut sum = 0.0;
        for id in 0..self.pieces.len() {
            if !self.alive[id] {
                continue;
            }
            let e = expected[id];
            if self.pieces[id].required {
                counts[id] = e.max(MIN_EXPECTED);
            } else if e < MIN_EXPECTED {
                self.alive[id] = false;
                continue;
            } else {
                counts[id] = e;
            }
            sum += counts[id];
        }
        let log_sum = digamma(sum);
        for id in 0..self.pieces.len() {
            if self.alive[id] {
                self.scores[id] = digamma(counts[id]) - log_sum;
            }
        }
        self.compact();
    }

    /// One EM iteration; returns the average negative log-likelihood per word (before it).
    pub fn em_iteration(&mut self) -> f64 {
        let (expected, loglik) = self.expected_counts();
        self.m_step(&expected);
        -loglik / self.total_count
    }

    /// Drops the nodes of dead pieces from the lattice.
    fn compact(&mut self) {
        let n = self.text.len();
        let mut k_out = 0usize;
        let mut start = 0usize;
        for p in 0..n {
            let end = self.node_start[p + 1] as usize;
            for k in start..end {
                if self.alive[self.node_piece[k] as usize] {
                    self.node_piece[k_out] = self.node_piece[k];
                    self.node_len[k_out] = self.node_len[k];
                    k_out += 1;
                }
            }
            start = end;
            self.node_start[p + 1] = k_out as u32;
        }
        self.node_piece.truncate(k_out);
        self.node_len.truncate(k_out);
        self.node_piece.shrink_to_fit();
        self.node_len.shrink_to_fit();
    }

    // --------------------------------------------------------------------------------------
    // Pruning

    /// Best segmentation of text[start..start + len] with the current scores, leaving out the
    /// node that spans all of it when `exclude_whole`. Ties keep the earlier-found path.
    fn viterbi_span(&self, start: usize, len: usize, exclude_whole: bool, unk_score: f64, path: &mut Vec<u32>) -> f64 {
        let mut best: Vec<(f64, u32, u8)> = vec![(f64::NEG_INFINITY, u32::MAX, 0); len + 1];
        best[0].0 = 0.0;
        for i in 0..len {
            let base = best[i].0;
            if base == f64::NEG_INFINITY {
                continue;
            }
            if self.text[start + i] == self.unk_char {
                if base + unk_score > best[i + 1].0 {
                    best[i + 1] = (base + unk_score, u32::MAX, 1);
                }
                continue;
            }
            for k in self.nodes_at(start + i) {
                let l = self.node_len[k] as usize;
                let id = self.node_piece[k];
                if i + l > len || !self.alive[id as usize] || (exclude_whole && i == 0 && l == len) {
                    continue;
                }
                let s = base + self.scores[id as usize];
                if s > best[i + l].0 {
                    best[i + l] = (s, id, l as u8);
                }
            }
        }
        path.clear();
        let mut i = len;
        while i > 0 && best[i].0 > f64::NEG_INFINITY {
            let (_, id, l) = best[i];
            path.push(id); // u32::MAX: the unknown token
            i -= l as usize;
        }
        path.reverse();
        best[len].0
    }

    /// Viterbi count of every piece over the corpus (weighted by word counts).
    pub fn viterbi_counts(&self) -> Vec<f64> {
        let unk_score = self.unk_score();
        let parts = self.over_words(
            || (vec![0.0f64; self.pieces.len()], Vec::new()),
            |(freq, path), w| {
                self.viterbi_span(w.start as usize, w.len as usize, false, unk_score, path);
                for &id in path.iter() {
                    if id != u32::MAX {
                        freq[id as usize] += w.count as f64;
                    }
                }
            },
        );
        let mut freq = vec![0.0; self.pieces.len()];
        for (f, _) in parts {
            for (t, x) in freq.iter_mut().zip(f) {
                *t += x;
            }
        }
        freq
    }

    /// Removes the pieces whose loss is smallest; returns how many were removed.
    pub fn prune(&mut self) -> usize {
        let unk_score = self.unk_score();
        let freq = self.viterbi_counts();
        // The replacement of each piece: its best segmentation without itself, if that is
        // not better than the piece (otherwise the piece is never used and just goes).
        let replacements: Vec<Option<Vec<u32>>> = (0..self.pieces.len())
            .into_par_iter()
            .map(|id| {
                let p = self.pieces[id];
                if !self.alive[id] || p.required {
                    return None;
                }
                let mut path = Vec::new();
                let alt = self.viterbi_span(p.pos as usize, p.len as usize, true, unk_score, &mut path);
                (alt <= self.scores[id] && !path.is_empty()).then_some(path)
            })
            .collect();
        let sum: f64 = (0..self.pieces.len()).filter(|&i| self.alive[i]).map(|i| freq[i]).sum();
        let log_sum = sum.ln();
        let mut candidates: Vec<(f64, usize)> = Vec::new();
        let mut keep = 0usize;
        let before = self.num_pieces();
        for id in 0..self.pieces.len() {
            if !self.alive[id] {
                continue;
            }
            if self.pieces[id].required {
                keep += 1;
                continue;
            }
            let Some(alt) = &replacements[id] else {
                self.alive[id] = false; // never the best way to spell its own string
                continue;
            };
            let f = freq[id];
            if f == 0.0 {
                self.alive[id] = false; // on no Viterbi path
                continue;
            }
            let share = f / self.total_count;
            let logprob = f.ln() - log_sum;
            // Removing the piece moves its count to each piece of the replacement.
            let log_sum_alt = (sum + f * (alt.len() as f64 - 1.0)).ln();
            let logprob_alt: f64 = alt.iter().map(|&a| (freq[a as usize] + f).ln() - log_sum_alt).sum();
            candidates.push((share * (logprob - logprob_alt), id));
        }
        let target = self.config.stop_size.max((self.config.shrinking_factor * before as f64) as usize);
        candidates.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (rank, &(_, id)) in candidates.iter().enumerate() {
            if keep + rank >= target {
                self.alive[id] = false;
            }
        }
        self.compact();
        before - self.num_pieces()
    }

    /// The final pieces: every required character and the highest-scoring others, up to
    /// `vocab_size`, ordered by score (highest first; ties by string).
    pub fn finalize(&self) -> Vec<(String, f64)> {
        let mut others: Vec<(f64, String)> = (0..self.pieces.len())
            .filter(|&i| self.alive[i] && !self.pieces[i].required)
            .map(|i| (self.scores[i], self.piece_string(i)))
            .collect();
        others.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        others.truncate(self.config.vocab_size.saturating_sub(self.num_required));
        let mut out: Vec<(f64, String)> = (0..self.pieces.len())
            .filter(|&i| self.pieces[i].required)
            .map(|i| (self.scores[i], self.piece_string(i)))
            .collect();
        out.extend(others);
        out.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        out.into_iter().map(|(s, p)| (p, s)).collect()
    }

    /// Whether EM should stop: few enough pieces left.
    pub fn done(&self) -> bool {
        self.num_pieces() <= self.config.stop_size
    }
}

// ==========================================================================================
// Encode time: n-best segmentations and sampling (subword regularization)

/// A piece table for the lattice of a text, with the unknown-token and byte-fallback rules of
/// the inference model (`crate::models::unigram`), so that the best path here is its output.
pub struct Segmenter {
    pieces: FxHashMap<String, (u32, f64)>,
    max_piece_bytes: usize,
    unk: Option<u32>,
    unk_score: f64,
    byte_ids: Option<Vec<u32>>,
    fuse_unk: bool,
}

/// One item of the text to segment: a word (pre-tokenized), or a token fixed in advance
/// (an added token the pipeline cut out).
pub enum Segment<'a> {
    Word(&'a str),
    Fixed(u32),
}

#[derive(Debug, Clone, Copy)]
struct Node {
    start: usize,
    end: usize,
    /// Piece id; None for the unknown token.
    id: Option<u32>,
    score: f64,
    /// Byte span in its word (for byte fallback) and the word's index.
    word: usize,
    span: (usize, usize),
}

struct Lattice<'a> {
    nodes: Vec<Node>,
    /// Indices of the nodes ending at each position.
    ends: Vec<Vec<usize>>,
    len: usize,
    words: Vec<&'a str>,
}

/// SplitMix64: a small seedable generator (plenty for sampling segmentations).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Segmenter {
    /// `pieces`: (piece, id, score) for every piece the lattice may use. `byte_ids`: the ids of
    /// `<0x00>`..`<0xFF>` for byte fallback.
    pub fn new(pieces: Vec<(String, u32, f64)>, unk: Option<u32>, byte_ids: Option<Vec<u32>>, fuse_unk: bool) -> Result<Self> {
        if let Some(b) = &byte_ids {
            if b.len() != 256 {
                return Err(Error::new(ErrorKind::Format, format!("byte fallback needs 256 byte ids, got {}", b.len())));
            }
        }
        let min = pieces.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
        let max_piece_bytes = pieces.iter().map(|p| p.0.len()).max().unwrap_or(0);
        let unk_score = if min.is_finite() { min - UNK_PENALTY } else { -UNK_PENALTY };
        let mut map = FxHashMap::default();
        for (s, id, score) in pieces {
            map.entry(s).or_insert((id, score)); // a repeated piece: the first id wins
        }
        Ok(Segmenter { pieces: map, max_piece_bytes, unk, unk_score, byte_ids, fuse_unk })
    }

    fn lattice<'a>(&self, segments: &[Segment<'a>]) -> Lattice<'a> {
        let mut nodes = Vec::new();
        let mut words = Vec::new();
        let mut pos = 0;
        for seg in segments {
            match *seg {
                Segment::Fixed(id) => {
                    nodes.push(Node { start: pos, end: pos + 1, id: Some(id), score: 0.0, word: usize::MAX, span: (0, 0) });
                    pos += 1;
                }
                Segment::Word(text) => {
                    let word = words.len();
                    words.push(text);
                    for (start, c) in text.char_indices() {
                        let char_end = start + c.len_utf8();
                        let mut single = false;
                        let limit = text.len().min(start + self.max_piece_bytes);
                        for end in (char_end..=limit).filter(|&e| text.is_char_boundary(e)) {
                            if let Some(&(id, score)) = self.pieces.get(&text[start..end]) {
                                single |= end == char_end;
                                nodes.push(Node { start: pos + start, end: pos + end, id: Some(id), score, word, span: (start, end) });
                            }
                        }
                        if !single {
                            let score = self.unk_score;
                            nodes.push(Node { start: pos + start, end: pos + char_end, id: None, score, word, span: (start, char_end) });
                        }
                    }
                    pos += text.len();
                }
            }
        }
        let mut ends = vec![Vec::new(); pos + 1];
        for (i, n) in nodes.iter().enumerate() {
            ends[n.end].push(i);
        }
        Lattice { nodes, ends, len: pos, words }
    }

    /// Ids of a path (node indices in text order): unknown characters become the unknown token
    /// (consecutive ones in a word fused) or their bytes.
    fn path_ids(&self, lattice: &Lattice, path: &[usize]) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(path.len());
        let mut prev_unk_word = usize::MAX;
        for &k in path {
            let n = &lattice.nodes[k];
            match n.id {
                Some(id) => {
                    out.push(id);
                    prev_unk_word = usize::MAX;
                }
                None => {
                    let text = &lattice.words[n.word][n.span.0..n.span.1];
                    if let Some(bytes) = &self.byte_ids {
                        out.extend(text.bytes().map(|b| bytes[b as usize]));
                    } else if let Some(unk) = self.unk {
                        if !(self.fuse_unk && prev_unk_word == n.word) {
                            out.push(unk);
                        }
                        prev_unk_word = n.word;
                    } else {
                        return Err(Error::new(
                            ErrorKind::Encode,
                            format!("{text:?} is not covered by any piece and the model has no unknown token"),
                        ));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Forward Viterbi: best score from the start to each position, and the node reaching it.
    fn forward_best(&self, lattice: &Lattice) -> Vec<(f64, usize)> {
        let mut best = vec![(f64::NEG_INFINITY, usize::MAX); lattice.len + 1];
        best[0].0 = 0.0;
        for pos in 1..=lattice.len {
            for &k in &lattice.ends[pos] {
                let n = &lattice.nodes[k];
                let s = best[n.start].0 + n.score;
                if s > best[pos].0 {
                    best[pos] = (s, k);
                }
            }
        }
        best
    }

    /// The best segmentation and its score.
    pub fn viterbi(&self, segments: &[Segment]) -> Result<(Vec<u32>, f64)> {
        let lattice = self.lattice(segments);
        let best = self.forward_best(&lattice);
        let mut path = Vec::new();
        let mut pos = lattice.len;
        while pos > 0 {
            let k = best[pos].1;
            path.push(k);
            pos = lattice.nodes[k].start;
        }
        path.reverse();
        Ok((self.path_ids(&lattice, &path)?, best[lattice.len].0))
    }

    /// The `n` best segmentations, best first, with their scores: best-first search from the
    /// end, with the forward Viterbi scores as an exact estimate of the rest of each path.
    pub fn nbest(&self, segments: &[Segment], n: usize) -> Result<Vec<(Vec<u32>, f64)>> {
        use std::collections::BinaryHeap;
        #[derive(PartialEq)]
        struct Item {
            priority: f64,
            order: u64,
            /// Score of the path from here to the end, and where it starts.
            suffix: f64,
            pos: usize,
            /// Index in `trail` of the path (node, next), or usize::MAX at the end.
            trail: usize,
        }
        impl Eq for Item {}
        impl PartialOrd for Item {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for Item {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                // Highest priority first; among equals, the earliest pushed.
                self.priority.total_cmp(&other.priority).then(other.order.cmp(&self.order))
            }
        }
        let lattice = self.lattice(segments);
        let best = self.forward_best(&lattice);
        let mut out = Vec::new();
        if n == 0 {
            return Ok(out);
        }
        let mut trail: Vec<(usize, usize)> = Vec::new();
        let mut heap = BinaryHeap::new();
        let mut order = 0u64;
        heap.push(Item { priority: best[lattice.len].0, order, suffix: 0.0, pos: lattice.len, trail: usize::MAX });
        // Bound on the work: every path popped expands at most once per position.
        let max_pops = 1_000_000usize.max(n * (lattice.len + 1) * 4);
        let mut pops = 0;
        while let Some(item) = heap.pop() {
            pops += 1;
            if item.pos == 0 {
                let mut path = Vec::new();
                let mut t = item.trail;
                while t != usize::MAX {
                    path.push(trail[t].0);
                    t = trail[t].1;
                }
                out.push((self.path_ids(&lattice, &path)?, item.suffix));
                if out.len() == n {
                    break;
                }
                continue;
            }
            if pops > max_pops {
                break;
            }
            for &k in &lattice.ends[item.pos] {
                let node = &lattice.nodes[k];
                let prefix = best[node.start].0;
                if prefix == f64::NEG_INFINITY {
                    continue;
                }
                trail.push((k, item.trail));
                order += 1;
                let suffix = item.suffix + node.score;
                heap.push(Item { priority: prefix + suffix, order, suffix, pos: node.start, trail: trail.len() - 1 });
            }
        }
        Ok(out)
    }

    /// One segmentation drawn with probability proportional to P(segmentation)^alpha:
    /// forward filtering, then backward sampling over the whole lattice (nbest_size = -1).
    pub fn sample(&self, segments: &[Segment], alpha: f64, rng: &mut SplitMix64) -> Result<Vec<u32>> {
        let lattice = self.lattice(segments);
        let mut forward = vec![f64::NEG_INFINITY; lattice.len + 1];
        forward[0] = 0.0;
        for pos in 1..=lattice.len {
            let mut acc = f64::NEG_INFINITY;
            for &k in &lattice.ends[pos] {
                let n = &lattice.nodes[k];
                acc = log_add(acc, forward[n.start] + alpha * n.score);
            }
            forward[pos] = acc;
        }
        let mut path = Vec::new();
        let mut pos = lattice.len;
        let mut weights = Vec::new();
        while pos > 0 {
            // P(last node = k | prefix ends at pos) = exp(forward[start] + alpha*score - forward[pos]).
            let ends = &lattice.ends[pos];
            weights.clear();
            weights.extend(ends.iter().map(|&k| {
                let n = &lattice.nodes[k];
                (forward[n.start] + alpha * n.score - forward[pos]).exp()
            }));
            let total: f64 = weights.iter().sum();
            let mut r = rng.next_f64() * total;
            let mut chosen = ends[ends.len() - 1];
            for (&k, &wt) in ends.iter().zip(&weights) {
                if r < wt {
                    chosen = k;
                    break;
                }
                r -= wt;
            }
            path.push(chosen);
            pos = lattice.nodes[chosen].start;
        }
        path.reverse();
        self.path_ids(&lattice, &path)
    }

    /// One of the `nbest_size` best segmentations, drawn with probability proportional to
    /// exp(alpha * score).
    pub fn sample_nbest(&self, segments: &[Segment], alpha: f64, nbest_size: usize, rng: &mut SplitMix64) -> Result<Vec<u32>> {
        let mut list = self.nbest(segments, nbest_size)?;
        if list.is_empty() {
            return Ok(Vec::new());
        }
        let top = list.iter().map(|x| alpha * x.1).fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = list.iter().map(|x| (alpha * x.1 - top).exp()).collect();
        let total: f64 = weights.iter().sum();
        let mut r = rng.next_f64() * total;
        let mut chosen = list.len() - 1;
        for (i, &wt) in weights.iter().enumerate() {
            if r < wt {
                chosen = i;
                break;
            }
            r -= wt;
        }
        Ok(list.swap_remove(chosen).0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vocab: usize) -> UnigramConfig {
        UnigramConfig {
            vocab_size: vocab,
            stop_size: vocab,
            character_coverage: 1.0,
            max_piece_length: 16,
            seed_size: 1000,
            shrinking_factor: 0.75,
            split_digits: false,
            split_by_number: true,
            split_by_script: true,
        }
    }

    fn words() -> Vec<(String, u64)> {
        [("▁low", 5), ("▁lower", 2), ("▁newest", 6), ("▁widest", 3), ("▁new", 4)].iter().map(|(w, n)| (w.to_string(), *n)).collect()
    }

    #[test]
    fn digamma_matches_known_values() {
        assert!((digamma(1.0) + 0.5772156649015329).abs() < 1e-12);
        assert!((digamma(0.5) + 1.9635100260214235).abs() < 1e-12);
        assert!((digamma(10.0) - 2.251752589066721).abs() < 1e-12);
    }

    #[test]
    fn seeds_are_frequent_substrings() {
        let t = UnigramTrainer::new(words(), &FxHashMap::default(), config(20)).unwrap();
        let seeds: FxHashMap<String, u64> = t.seeds().into_iter().collect();
        // "est" ends both "newest" and "widest": a node, seen 6 + 3 times.
        assert_eq!(seeds.get("est"), Some(&9));
        assert_eq!(seeds.get("▁new"), Some(&10));
        // A character: weighted count.
        assert_eq!(seeds.get("w"), Some(&(5 + 2 + 6 + 3 + 4)));
        // "e" alone is a character; "ewes" occurs in one word only but 6 times: a leaf, kept.
        assert!(seeds.contains_key("ewest"));
    }

    #[test]
    fn expected_counts_add_up_to_the_pieces_on_paths() {
        let t = UnigramTrainer::new(words(), &FxHashMap::default(), config(20)).unwrap();
        let (expected, loglik) = t.expected_counts();
        assert!(loglik < 0.0);
        // Every character of every word is covered exactly once in expectation.
        let chars: f64 = t.seeds().iter().zip(&expected).map(|((s, _), e)| s.chars().count() as f64 * e).sum();
        let total: f64 = words().iter().map(|(w, n)| (w.chars().count() as u64 * n) as f64).sum();
        assert!((chars - total).abs() < 1e-9 * total);
    }

    #[test]
    fn training_reaches_the_vocabulary_size() {
        let mut t = UnigramTrainer::new(words(), &FxHashMap::default(), config(14)).unwrap();
        for _ in 0..20 {
            t.em_iteration();
            t.em_iteration();
            if t.done() {
                break;
            }
            t.prune();
        }
        let pieces = t.finalize();
        assert!(pieces.len() <= 14);
        assert!(pieces.iter().any(|(p, _)| p == "▁"));
    }

    fn segmenter() -> Segmenter {
        let pieces = vec![("a".to_string(), 1, -1.0), ("b".into(), 2, -1.0), ("ab".into(), 3, -1.5), ("abc".into(), 4, -5.0), ("c".into(), 5, -1.0)];
        Segmenter::new(pieces, Some(0), None, true).unwrap()
    }

    #[test]
    fn nbest_lists_segmentations_in_score_order() {
        let s = segmenter();
        let list = s.nbest(&[Segment::Word("abc")], 10).unwrap();
        let ids: Vec<Vec<u32>> = list.iter().map(|x| x.0.clone()).collect();
        assert_eq!(ids, vec![vec![3, 5], vec![1, 2, 5], vec![4]]);
        assert_eq!(list[0].1, -2.5);
        assert_eq!(s.viterbi(&[Segment::Word("xab"), Segment::Fixed(9)]).unwrap().0, vec![0, 3, 9]);
    }

    #[test]
    fn sampling_is_seeded() {
        let s = segmenter();
        let seg = [Segment::Word("abcabcab")];
        let a = s.sample(&seg, 0.5, &mut SplitMix64(7)).unwrap();
        assert_eq!(a, s.sample(&seg, 0.5, &mut SplitMix64(7)).unwrap());
        let distinct: std::collections::HashSet<Vec<u32>> = (0..50).map(|i| s.sample(&seg, 0.1, &mut SplitMix64(i)).unwrap()).collect();
        assert!(distinct.len() > 1);
    }
}
