//! WordPiece training with the likelihood criterion, and the raw word counting that both
//! subword trainers (WordPiece and Unigram) start from.
//!
//! Training starts from words split into characters: the first character of a word as itself,
//! the others with the continuation prefix (`##`). Each step merges the adjacent pair (a, b)
//! with the highest score
//!
//! ```text
//!     count(ab) / (count(a) * count(b))
//! ```
//!
//! i.e. the merge that raises the likelihood of a unigram model of the training data the most
//! relative to how frequent its parts already are (Schuster & Nakajima, 2012). Counts are
//! occurrences in the current segmentation of the corpus, weighted by word frequency. The
//! merged token is `a` followed by `b` without its prefix; when two different pairs spell the
//! same string the token is the same.
//!
//! With `Criterion::Likelihood` the score is instead count(ab) * ln(count(ab) * N / (count(a) *
//! count(b))): the log-likelihood gain itself (to first order), which weighs the ratio by how often
//! the merge applies. The ratio alone favours rare pairs (at most 1 / max(count(a), count(b))),
//! so on large vocabularies it spends most tokens on fragments of rare words.
//!
//! Tie rule (shared with `toksmith.reference.wordpiece`): highest score (compared exactly, as
//! fractions), then the highest pair count, then the smallest (left id, right id). Ids: the
//! alphabet's characters sorted by code point, then the same characters with the prefix, then
//! new tokens in the order they are created.
//!
//! Scores change when the count of a symbol changes, and they can go up (when a symbol is
//! consumed by a merge, every pair with it becomes relatively more likely). The heap therefore
//! holds at most one live entry per pair (a version number marks older ones): entries whose
//! score went down are corrected lazily when popped, and after each merge the pairs of the two
//! merged symbols, whose scores may have gone up, are pushed again.

use crate::error::{Error, ErrorKind, Result};
use aho_corasick::{AhoCorasick, MatchKind};
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

// ------------------------------------------------------------------------------------------
// Raw word counting

/// Where raw text is cut into words before normalization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitRule {
    /// Every White_Space character (Rust's `char::is_whitespace`).
    Whitespace,
    /// White_Space except U+000B, U+000C and U+0085, which BERT's normalizer deletes rather
    /// than turns into a space (so they must stay inside the word they are in).
    Bert,
}

impl SplitRule {
    fn is_separator(self, c: char) -> bool {
        match self {
            SplitRule::Whitespace => c.is_whitespace(),
            SplitRule::Bert => c.is_whitespace() && !matches!(c, '\u{0B}' | '\u{0C}' | '\u{85}'),
        }
    }
}

/// Counts the distinct raw words of a corpus. The subword trainers normalize each distinct word
/// once (in Python, with the tokenizer's own normalizer) instead of normalizing the whole text.
/// `cut` strings (user-defined symbols) separate words and are not counted. Words that get no
/// `▁` are counted apart ("first" words): with `track_first` the first word of each text (no
/// dummy prefix), and a word that directly follows a cut string.
pub struct RawWordCounter {
    rule: SplitRule,
    cutter: Option<AhoCorasick>,
    track_first: bool,
    counts: FxHashMap<String, u64>,
    firsts: FxHashMap<String, u64>,
}

type Partial<'a> = (FxHashMap<&'a str, u64>, FxHashMap<&'a str, u64>);

/// Distinct words with their counts, sorted by word.
pub type WordCounts = Vec<(String, u64)>;

impl RawWordCounter {
    pub fn new(rule: SplitRule, cut: &[String], track_first: bool) -> Result<Self> {
        let cut: Vec<&String> = cut.iter().filter(|s| !s.is_empty()).collect();
        let cutter = if cut.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&cut)
                    .map_err(|e| Error::new(ErrorKind::Training, format!("cannot build the symbol matcher: {e}")))?,
            )
        };
        Ok(RawWordCounter { rule, cutter, track_first, counts: FxHashMap::default(), firsts: FxHashMap::default() })
    }

    /// Counts the words of the text between two cut strings. `first`: its first word is counted
    /// apart (it gets no `▁`). `lone_space`: the stretch ends in whitespace before a cut string,
    /// which leaves a lone `▁` (counted as the empty word).
    fn count_stretch<'a>(&self, stretch: &'a str, mut first: bool, lone_space: bool, partial: &mut Partial<'a>) {
        for word in stretch.split(|c| self.rule.is_separator(c)).filter(|w| !w.is_empty()) {
            let table = if first { &mut partial.1 } else { &mut partial.0 };
            *table.entry(word).or_insert(0) += 1;
            first = false;
        }
        if lone_space {
            *partial.0.entry("").or_insert(0) += 1;
        }
    }

    fn count_text<'a>(&self, text: &'a str, partial: &mut Partial<'a>) {
        let Some(ac) = &self.cutter else {
            return self.count_stretch(text, self.track_first, false, partial);
        };
        // With cut strings, words follow SentencePiece's whitespace rules on the whole text:
        // the dummy `▁` goes once at the start, a word right after a cut string has no `▁`, and
        // whitespace before a cut string leaves a `▁` of its own.
        let blank = |s: &str| s.chars().all(|c| self.rule.is_separator(c));
        let mut done = 0;
        let mut at_start = true;
        for m in ac.find_iter(text) {
            let stretch = &text[done..m.start()];
            let starts_blank = stretch.starts_with(|c| self.rule.is_separator(c));
            let ends_blank = stretch.ends_with(|c| self.rule.is_separator(c));
            let (first, lone) = if at_start {
                (self.track_first, if blank(stretch) { !self.track_first } else { ends_blank })
            } else {
                (!starts_blank, ends_blank)
            };
            self.count_stretch(stretch, first, lone, partial);
            done = m.end();
            at_start = false;
        }
        let rest = &text[done..];
        let first = if at_start { self.track_first } else { !rest.starts_with(|c| self.rule.is_separator(c)) };
        self.count_stretch(rest, first, false, partial);
    }

    /// Counts the words of a batch of texts, in parallel. Counts add up, so the result does not
    /// depend on the number of threads.
    pub fn add_texts(&mut self, texts: &[&str]) {
        let partials: Vec<Partial> = texts
            .par_iter()
            .fold(
                || (FxHashMap::default(), FxHashMap::default()),
                |mut partial, text| {
                    self.count_text(text, &mut partial);
                    partial
                },
            )
            .collect();
        for (counts, firsts) in partials {
            for (table, part) in [(&mut self.counts, counts), (&mut self.firsts, firsts)] {
                for (w, n) in part {
                    match table.get_mut(w) {
                        Some(c) => *c += n,
                        None => {
                            table.insert(w.to_string(), n);
                        }
                    }
                }
            }
        }
    }

    /// The counts so far, sorted by word (all words, then first words), and empties the counter.
    pub fn take(&mut self) -> (WordCounts, WordCounts) {
        let sorted = |t: FxHashMap<String, u64>| {
            let mut v: Vec<(String, u64)> = t.into_iter().collect();
            v.sort_unstable();
            v
        };
        (sorted(std::mem::take(&mut self.counts)), sorted(std::mem::take(&mut self.firsts)))
    }
}

// ------------------------------------------------------------------------------------------
// WordPiece training

/// How a pair is scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Criterion {
    /// count(ab) / (count(a) * count(b)), compared exactly.
    Ratio,
    /// count(ab) * ln(count(ab) * N / (count(a) * count(b))), N the number of symbols before
    /// training: the gain in log-likelihood of a unigram model of the corpus when the pair is
    /// merged, to first order (N kept fixed so that scores only change with their own counts).
    Likelihood,
}

pub struct WordPieceConfig {
    /// Tokens to produce (alphabet included, special tokens excluded).
    pub max_tokens: usize,
    /// Pairs seen fewer times are never merged.
    pub min_frequency: u64,
    /// Keep only this many characters (the most frequent); words with others are skipped.
    pub limit_alphabet: Option<usize>,
    pub prefix: String,
    pub criterion: Criterion,
}

type Pair = (u32, u32);

/// A heap entry: the pair with the counts its score was computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Entry {
    /// The likelihood gain (Criterion::Likelihood); 0 with Criterion::Ratio.
    gain: f64,
    count: u64,
    left_count: u64,
    right_count: u64,
    pair: Pair,
    version: u32,
}

impl Entry {
    /// Exact comparison of count / (left * right) between two entries (u128: no overflow for
    /// counts below 2^42, i.e. any corpus that fits in memory).
    fn cmp_score(&self, other: &Entry) -> Ordering {
        let lhs = self.count as u128 * (other.left_count as u128 * other.right_count as u128);
        let rhs = other.count as u128 * (self.left_count as u128 * self.right_count as u128);
        lhs.cmp(&rhs)
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Max-heap: the best pair is the greatest. Smaller ids win ties, hence the reversal.
        self.gain
            .total_cmp(&other.gain)
            .then(self.cmp_score(other))
            .then(self.count.cmp(&other.count))
            .then(other.pair.cmp(&self.pair))
            .then(self.version.cmp(&other.version))
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

pub struct WordPieceResult {
    /// Token strings in id order (without special tokens).
    pub tokens: Vec<String>,
    /// Size of the alphabet (characters; each appears alone and with the prefix).
    pub alphabet_size: usize,
    /// Words (distinct) left out because they hold a character outside the alphabet.
    pub skipped_words: usize,
}

/// Trains WordPiece on distinct words with their counts (already normalized and pre-tokenized).
pub fn train_wordpiece(words: &[(String, u64)], config: &WordPieceConfig) -> Result<WordPieceResult> {
    if config.min_frequency == 0 {
        return Err(Error::new(ErrorKind::Training, "min_frequency must be at least 1"));
    }
    // The alphabet: every character, or the most frequent ones.
    let mut char_counts: FxHashMap<char, u64> = FxHashMap::default();
    for (w, n) in words {
        for c in w.chars() {
            *char_counts.entry(c).or_insert(0) += n;
        }
    }
    let mut by_freq: Vec<(char, u64)> = char_counts.into_iter().collect();
    by_freq.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    if let Some(limit) = config.limit_alphabet {
        by_freq.truncate(limit);
    }
    let mut alphabet: Vec<char> = by_freq.into_iter().map(|(c, _)| c).collect();
    alphabet.sort_unstable();
    let a = alphabet.len();
    if 2 * a > config.max_tokens {
        return Err(Error::new(
            ErrorKind::Training,
            format!(
                "the vocabulary is too small for the alphabet: {a} characters need {} tokens (each alone and with the \
                 prefix {:?}) but only {} are left after the special tokens; raise vocab_size or set limit_alphabet",
                2 * a,
                config.prefix,
                config.max_tokens
            ),
        ));
    }
    let char_id: FxHashMap<char, u32> = alphabet.iter().enumerate().map(|(i, &c)| (c, i as u32)).collect();
    let mut tokens: Vec<String> = alphabet.iter().map(|c| c.to_string()).collect();
    tokens.extend(alphabet.iter().map(|c| format!("{}{c}", config.prefix)));

    // Words as symbol ids: first character plain, the rest continuing.
    let mut symbols: Vec<Vec<u32>> = Vec::with_capacity(words.len());
    let mut counts: Vec<u64> = Vec::with_capacity(words.len());
    let mut skipped = 0;
    for (w, n) in words {
        let ids: Option<Vec<u32>> = w
            .chars()
            .enumerate()
            .map(|(i, c)| char_id.get(&c).map(|&id| if i == 0 { id } else { id + a as u32 }))
            .collect();
        match ids {
            Some(ids) if !ids.is_empty() => {
                symbols.push(ids);
                counts.push(*n);
            }
            Some(_) => {}
            None => skipped += 1,
        }
    }
    let mut learner = Learner::new(symbols, counts, tokens, &config.prefix, config.min_frequency, config.criterion);
    while learner.tokens.len() < config.max_tokens {
        if !learner.step() {
            break;
        }
    }
    Ok(WordPieceResult { tokens: learner.tokens, alphabet_size: a, skipped_words: skipped })
}

struct Learner {
    words: Vec<Vec<u32>>,
    counts: Vec<u64>,
    tokens: Vec<String>,
    /// Symbol id -> token id (a merge that spells an existing token reuses its id).
    token_of_string: FxHashMap<String, u32>,
    prefix: String,
    min_frequency: u64,
    criterion: Criterion,
    /// ln of the number of symbols before training (for Criterion::Likelihood).
    log_total: f64,
    /// Occurrences of each symbol in the current segmentation, weighted by word counts.
    unit: Vec<u64>,
    pair_count: FxHashMap<Pair, u64>,
    /// Words that held the pair at some point (may be stale; checked when used).
    pair_words: FxHashMap<Pair, Vec<u32>>,
    /// The pairs each symbol is part of (with a non-zero count).
    pairs_of: Vec<FxHashSet<Pair>>,
    version: FxHashMap<Pair, u32>,
    heap: BinaryHeap<Entry>,
    /// Per word: the last step that touched it (to visit each word once per merge).
    seen: Vec<u32>,
    step_no: u32,
}

impl Learner {
    fn new(words: Vec<Vec<u32>>, counts: Vec<u64>, tokens: Vec<String>, prefix: &str, min_frequency: u64, criterion: Criterion) -> Self {
        let n_sym = tokens.len();
        let token_of_string = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let mut l = Learner {
            seen: vec![0; words.len()],
            words,
            counts,
            tokens,
            token_of_string,
            prefix: prefix.to_string(),
            min_frequency,
            criterion,
            log_total: 0.0,
            unit: vec![0; n_sym],
            pair_count: FxHashMap::default(),
            pair_words: FxHashMap::default(),
            pairs_of: vec![FxHashSet::default(); n_sym],
            version: FxHashMap::default(),
            heap: BinaryHeap::new(),
            step_no: 0,
        };
        for (w, (ids, &n)) in l.words.iter().zip(&l.counts).enumerate() {
            for &s in ids {
                l.unit[s as usize] += n;
            }
            for p in ids.windows(2) {
                let pair = (p[0], p[1]);
                *l.pair_count.entry(pair).or_insert(0) += n;
                l.pair_words.entry(pair).or_default().push(w as u32);
            }
        }
        let total: u64 = l.unit.iter().sum();
        l.log_total = (total.max(1) as f64).ln();
        let pairs: Vec<Pair> = l.pair_count.keys().copied().collect();
        for pair in pairs {
            l.pairs_of[pair.0 as usize].insert(pair);
            l.pairs_of[pair.1 as usize].insert(pair);
            l.push(pair);
        }
        l
    }

    /// Pushes the pair's current entry (replacing any older one) if it is frequent enough.
    fn push(&mut self, pair: Pair) {
        let count = self.pair_count.get(&pair).copied().unwrap_or(0);
        let v = self.version.entry(pair).or_insert(0);
        *v += 1;
        if count >= self.min_frequency {
            let (left_count, right_count) = (self.unit[pair.0 as usize], self.unit[pair.1 as usize]);
            let gain = match self.criterion {
                Criterion::Ratio => 0.0,
                Criterion::Likelihood => {
                    let c = count as f64;
                    c * (c.ln() + self.log_total - (left_count as f64).ln() - (right_count as f64).ln())
                }
            };
            self.heap.push(Entry { gain, count, left_count, right_count, pair, version: *v });
        }
    }

    /// The best pair, or None when no pair is frequent enough.
    fn pop_best(&mut self) -> Option<Pair> {
        while let Some(e) = self.heap.pop() {
            if self.version.get(&e.pair) != Some(&e.version) {
                continue; // an older entry
            }
            let count = self.pair_count.get(&e.pair).copied().unwrap_or(0);
            let current = (count, self.unit[e.pair.0 as usize], self.unit[e.pair.1 as usize]);
            if current == (e.count, e.left_count, e.right_count) {
                return Some(e.pair);
            }
            // The score went down since the entry was pushed: push it again as it is now.
            self.push(e.pair);
        }
        None
    }

    /// The id of the token `left + right` (without right's prefix), created if new.
    fn merged_id(&mut self, pair: Pair) -> u32 {
        let right = &self.tokens[pair.1 as usize];
        let right = right.strip_prefix(self.prefix.as_str()).unwrap_or(right);
        let s = format!("{}{}", self.tokens[pair.0 as usize], right);
        if let Some(&id) = self.token_of_string.get(&s) {
            return id;
        }
        let id = self.tokens.len() as u32;
        self.tokens.push(s.clone());
        self.token_of_string.insert(s, id);
        self.unit.push(0);
        self.pairs_of.push(FxHashSet::default());
        id
    }

    fn add_pair(&mut self, pair: Pair, n: u64) {
        let c = self.pair_count.entry(pair).or_insert(0);
        if *c == 0 {
            self.pairs_of[pair.0 as usize].insert(pair);
            self.pairs_of[pair.1 as usize].insert(pair);
        }
        *c += n;
    }

    fn remove_pair(&mut self, pair: Pair, n: u64) {
        if let Some(c) = self.pair_count.get_mut(&pair) {
            *c -= n;
            if *c == 0 {
                self.pair_count.remove(&pair);
                self.pairs_of[pair.0 as usize].remove(&pair);
                self.pairs_of[pair.1 as usize].remove(&pair);
            }
        }
    }

    /// One merge; false when no pair can be merged.
    fn step(&mut self) -> bool {
        let Some(pair) = self.pop_best() else { return false };
        let new = self.merged_id(pair);
        self.step_no += 1;
        let word_ids = self.pair_words.remove(&pair).unwrap_or_default();
        // Net change of each pair's count over all the words the merge touches.
        let mut delta: FxHashMap<Pair, i64> = FxHashMap::default();
        for w in word_ids {
            if self.seen[w as usize] == self.step_no {
                continue;
            }
            self.seen[w as usize] = self.step_no;
            let n = self.counts[w as usize];
            let old = &self.words[w as usize];
            if !old.windows(2).any(|p| (p[0], p[1]) == pair) {
                continue; // a stale entry: the word no longer holds the pair
            }
            // Merge left to right, without overlaps.
            let mut merged = Vec::with_capacity(old.len());
            let mut i = 0;
            while i < old.len() {
                if i + 1 < old.len() && (old[i], old[i + 1]) == pair {
                    merged.push(new);
                    i += 2;
                } else {
                    merged.push(old[i]);
                    i += 1;
                }
            }
            for &s in old {
                self.unit[s as usize] -= n;
            }
            for &s in &merged {
                self.unit[s as usize] += n;
            }
            for p in old.windows(2) {
                *delta.entry((p[0], p[1])).or_insert(0) -= n as i64;
            }
            for p in merged.windows(2) {
                let q = (p[0], p[1]);
                *delta.entry(q).or_insert(0) += n as i64;
                if q.0 == new || q.1 == new {
                    self.pair_words.entry(q).or_default().push(w);
                }
            }
            self.words[w as usize] = merged;
        }
        let mut increased: Vec<Pair> = Vec::new();
        let mut changes: Vec<(Pair, i64)> = delta.into_iter().filter(|&(_, d)| d != 0).collect();
        changes.sort_unstable();
        for (q, d) in changes {
            if d > 0 {
                self.add_pair(q, d as u64);
                increased.push(q);
            } else {
                self.remove_pair(q, (-d) as u64);
                // A likelihood gain can go up when the pair's count goes down.
                if self.criterion == Criterion::Likelihood {
                    increased.push(q);
                }
            }
        }
        // Scores that may have gone up: pairs whose count grew (or changed at all, for the
        // likelihood gain) and every pair of the two consumed symbols.
        let mut to_push: Vec<Pair> = increased;
        to_push.extend(self.pairs_of[pair.0 as usize].iter().copied());
        to_push.extend(self.pairs_of[pair.1 as usize].iter().copied());
        to_push.sort_unstable();
        to_push.dedup();
        for q in to_push {
            self.push(q);
        }
        // Keep the heap from filling with dead entries.
        if self.heap.len() > 4 * self.pair_count.len() + 1024 {
            let live: Vec<Pair> = self.pair_count.keys().copied().collect();
            self.heap.clear();
            for q in live {
                self.push(q);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn train(words: &[(&str, u64)], max_tokens: usize) -> Vec<String> {
        let words: Vec<(String, u64)> = words.iter().map(|(w, n)| (w.to_string(), *n)).collect();
        let config = WordPieceConfig { max_tokens, min_frequency: 1, limit_alphabet: None, prefix: "##".into(), criterion: Criterion::Ratio };
        train_wordpiece(&words, &config).unwrap().tokens
    }

    #[test]
    fn picks_the_pair_with_the_best_likelihood_ratio() {
        // "ab" occurs 10 times, a and b nowhere else: score 10/(10*10) = 0.1.
        // "cd" occurs 50 times, but c and d are also frequent elsewhere: 50/(100*100) = 0.005.
        let tokens = train(&[("ab", 10), ("cd", 50), ("c", 50), ("xd", 50)], 11);
        assert_eq!(&tokens[10..], &["ab".to_string()]);
    }

    #[test]
    fn merged_strings_are_reused() {
        // a+##b then ab+##c, and later a+##bc would spell "abc" again: no duplicate token.
        let tokens = train(&[("abc", 5), ("bc", 3)], 100);
        let mut sorted = tokens.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), tokens.len());
        assert!(tokens.contains(&"abc".to_string()));
    }

    #[test]
    fn too_small_vocabulary_is_an_error() {
        let words = vec![("abc".to_string(), 1)];
        let config = WordPieceConfig { max_tokens: 4, min_frequency: 1, limit_alphabet: None, prefix: "##".into(), criterion: Criterion::Ratio };
        assert!(train_wordpiece(&words, &config).is_err());
    }

    #[test]
    fn counter_splits_on_whitespace_and_cut_strings() {
        let count = |track_first: bool, texts: &[&str]| {
            let mut c = RawWordCounter::new(SplitRule::Whitespace, &["<x>".to_string()], track_first).unwrap();
            c.add_texts(texts);
            c.take()
        };
        let s = |v: &[(&str, u64)]| v.iter().map(|(w, n)| (w.to_string(), *n)).collect::<Vec<_>>();
        // "a b<x>b  c": a and b get ▁; b after <x> does not; c does.
        assert_eq!(count(false, &["a b<x>b  c", "a"]), (s(&[("a", 2), ("b", 1), ("c", 1)]), s(&[("b", 1)])));
        // Whitespace before <x> leaves a lone ▁ (the empty word); at the start, the dummy prefix.
        assert_eq!(count(false, &["a <x> b", "<x>b"]), (s(&[("", 2), ("a", 1), ("b", 1)]), s(&[("b", 1)])));
        // Without the dummy prefix, the first word of a text gets no ▁ either.
        assert_eq!(count(true, &["a b", "<x>b"]), (s(&[("b", 1)]), s(&[("a", 1), ("b", 1)])));
        let mut c = RawWordCounter::new(SplitRule::Bert, &[], false).unwrap();
        c.add_texts(&["a\u{0B}b c"]);
        assert_eq!(c.take().0, s(&[("a\u{0B}b", 1), ("c", 1)]));
    }
}
