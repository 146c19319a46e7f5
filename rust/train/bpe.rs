//! Byte-level BPE training: count the chunks of a corpus, then learn merges.
//!
//! Ids during training are internal: byte `b` is id `b`, the k-th merge creates id `256 + k`.
//! The caller places special tokens and shifts ids afterwards.
//!
//! Tie rule (documented, and supported by `toksmith.reference.train_bpe(tie_break="lowest_id")`):
//! the pair with the highest count wins; among equal counts, the smallest (left id, right id),
//! i.e. the pair of the earliest-created tokens. It depends only on the counts, so the result
//! is the same whatever the order of the corpus or the number of threads.

use crate::error::{Error, ErrorKind, Result};
use crate::pretokenize::Pretokenizer;
use crate::special::{Piece, SpecialTokens};
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub type ChunkCounts = FxHashMap<Vec<u8>, u64>;

/// Counts the pre-tokenized chunks of `texts` (in parallel), skipping special-token strings
/// so that no merge ever learns from them.
///
/// Each thread counts into a table keyed by slices of the texts themselves (no allocation per
/// chunk); only distinct chunks are copied when the tables are combined.
pub fn count_chunks(texts: &[&str], pretokenizer: &Pretokenizer, specials: &SpecialTokens) -> Result<ChunkCounts> {
    let partial: Vec<FxHashMap<&str, u64>> = texts
        .par_iter()
        .try_fold(FxHashMap::default, |mut counts: FxHashMap<&str, u64>, text| {
            let mut result = Ok(());
            specials.split(text, |_| true, |piece| {
                if let (Piece::Text(t), Ok(())) = (piece, &result) {
                    result = pretokenizer.for_each_chunk(t, |c| *counts.entry(c).or_insert(0) += 1);
                }
            });
            result.map(|_| counts)
        })
        .collect::<Result<_>>()?;
    let mut total = ChunkCounts::default();
    for counts in partial {
        total.reserve(counts.len());
        for (chunk, n) in counts {
            match total.get_mut(chunk.as_bytes()) {
                Some(c) => *c += n,
                None => {
                    total.insert(chunk.as_bytes().to_vec(), n);
                }
            }
        }
    }
    Ok(total)
}

/// Adds two count tables (the smaller into the larger).
pub fn merge_counts(a: ChunkCounts, b: ChunkCounts) -> ChunkCounts {
    let (mut big, small) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    for (k, v) in small {
        match big.get_mut(&k) {
            Some(c) => *c += v,
            None => {
                big.insert(k, v);
            }
        }
    }
    big
}

pub type Pair = (u32, u32);

/// A symbol that never pairs: characters left out of a limited alphabet.
pub const BARRIER: u32 = u32::MAX;

/// Byte-level words: every chunk as its byte values (ids 0-255), sorted so runs are repeatable.
pub fn byte_words(counts: &ChunkCounts) -> Vec<(Vec<u32>, u64)> {
    let mut words: Vec<(Vec<u32>, u64)> = counts.iter().map(|(k, &v)| (k.iter().map(|&b| b as u32).collect(), v)).collect();
    words.sort_unstable();
    words
}

/// Character-level words. The alphabet is the characters of the corpus (the last character of
/// a word carries `end_of_word_suffix` and is a symbol of its own), limited to the
/// `limit_alphabet` most frequent ones (ties: smaller code point first); left-out characters
/// become barriers that no merge crosses. Returns the alphabet (ids 0..n in code point order)
/// and the words.
pub fn char_words(counts: &ChunkCounts, limit_alphabet: Option<usize>, end_of_word_suffix: &str) -> Result<(Vec<String>, Vec<(Vec<u32>, u64)>)> {
    let mut symbol_freq: FxHashMap<String, u64> = FxHashMap::default();
    let mut texts: Vec<(&str, u64)> = Vec::with_capacity(counts.len());
    for (bytes, &n) in counts {
        let text = std::str::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::Training, "a chunk is not valid UTF-8"))?;
        for sym in char_symbols(text, end_of_word_suffix) {
            *symbol_freq.entry(sym).or_insert(0) += n;
        }
        texts.push((text, n));
    }
    let mut symbols: Vec<(String, u64)> = symbol_freq.into_iter().collect();
    if let Some(limit) = limit_alphabet {
        symbols.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        symbols.truncate(limit);
    }
    let mut alphabet: Vec<String> = symbols.into_iter().map(|(s, _)| s).collect();
    alphabet.sort_unstable();
    let ids: FxHashMap<&str, u32> = alphabet.iter().enumerate().map(|(i, s)| (s.as_str(), i as u32)).collect();
    let mut words: Vec<(Vec<u32>, u64)> = texts
        .iter()
        .map(|&(text, n)| (char_symbols(text, end_of_word_suffix).map(|s| ids.get(s.as_str()).copied().unwrap_or(BARRIER)).collect(), n))
        .collect();
    words.sort_unstable();
    Ok((alphabet, words))
}

fn char_symbols<'a>(text: &'a str, suffix: &'a str) -> impl Iterator<Item = String> + 'a {
    let last = text.char_indices().last().map_or(0, |(i, _)| i);
    text.char_indices().map(move |(i, c)| if i == last && !suffix.is_empty() { format!("{c}{suffix}") } else { c.to_string() })
}

/// Learns merges step by step, so a caller can report progress between steps.
///
/// Word symbols are ids; a merge creates the next id. Pair counts are kept up to date
/// incrementally: when a merge changes a word, that word's old pairs are subtracted and its new
/// pairs added. A max-heap holds (count, pair) entries; an entry is current exactly when its
/// count equals the table's (every change pushes a fresh entry), so stale ones are skipped.
pub struct MergeLearner {
    words: Vec<Vec<u32>>,
    freq: Vec<u64>,
    /// Signed: within one merge a pair can be decremented before it is incremented.
    pair_counts: FxHashMap<Pair, i64>,
    where_: FxHashMap<Pair, Vec<u32>>,
    heap: BinaryHeap<(u64, Reverse<Pair>)>,
    merges: Vec<Pair>,
    counts: Vec<u64>,
    /// Length of every symbol (bytes or characters), for `max_token_length`.
    length: Vec<u32>,
    next_id: u32,
    min_frequency: u64,
    max_token_length: Option<u32>,
    constraints: Option<Constraints>,
    finished: bool,
}

/// Limits on which tokens a merge may create (SuperBPE's stage 2): at most `max_words` words per
/// token, and no token matching a forbidden pattern. They need every token's bytes.
pub struct Constraints {
    /// id -> token bytes, for the ids the words start with; merges append to it.
    pub token_bytes: Vec<Vec<u8>>,
    pub max_words: Option<u32>,
    pub forbidden: Vec<fancy_regex::Regex>,
    /// Bytes of every token so far: a merge may not create a token that already exists (when
    /// continuing an existing vocabulary, its segmentation can leave such pairs unmerged).
    pub taken: FxHashSet<Vec<u8>>,
}

impl Constraints {
    fn allows(&self, pair: Pair) -> bool {
        let joined = [self.token_bytes[pair.0 as usize].as_slice(), self.token_bytes[pair.1 as usize].as_slice()].concat();
        if self.taken.contains(&joined) {
            return false;
        }
        if let Some(max) = self.max_words {
            if count_words(&joined) > max {
                return false;
            }
        }
        if !self.forbidden.is_empty() {
            let text = String::from_utf8_lossy(&joined);
            if self.forbidden.iter().any(|re| re.is_match(&text).unwrap_or(true)) {
                return false;
            }
        }
        true
    }
}

/// Words in a token: maximal runs of non-whitespace bytes.
///
/// `b" by the way"` -> 3, `b"way, "` -> 1.
pub fn count_words(bytes: &[u8]) -> u32 {
    let mut words = 0;
    let mut in_word = false;
    for &b in bytes {
        let space = b.is_ascii_whitespace();
        if !space && !in_word {
            words += 1;
        }
        in_word = !space;
    }
    words
}

impl MergeLearner {
    /// `words`: (symbols, count); `first_new_id`: the id of the first merge; `lengths`: the length
    /// of each initial symbol.
    pub fn new(words: Vec<(Vec<u32>, u64)>, first_new_id: u32, lengths: Vec<u32>, min_frequency: u64, max_token_length: Option<u32>) -> Result<Self> {
        if words.is_empty() {
            return Err(Error::new(
                ErrorKind::Training,
                "the corpus is empty: no text was found to train on. Check the paths or the iterable you passed",
            ));
        }
        let (words, freq): (Vec<Vec<u32>>, Vec<u64>) = words.into_iter().unzip();
        let mut pair_counts: FxHashMap<Pair, i64> = FxHashMap::default();
        let mut where_: FxHashMap<Pair, Vec<u32>> = FxHashMap::default();
        for (w, word) in words.iter().enumerate() {
            for p in word.windows(2) {
                if p[0] == BARRIER || p[1] == BARRIER {
                    continue;
                }
                *pair_counts.entry((p[0], p[1])).or_insert(0) += freq[w] as i64;
                where_.entry((p[0], p[1])).or_default().push(w as u32);
            }
        }
        let heap = pair_counts.iter().map(|(&p, &c)| (c as u64, Reverse(p))).collect();
        Ok(MergeLearner {
            words,
            freq,
            pair_counts,
            where_,
            heap,
            merges: Vec::new(),
            counts: Vec::new(),
            length: lengths,
            next_id: first_new_id,
            min_frequency: min_frequency.max(1),
            max_token_length,
            constraints: None,
            finished: false,
        })
    }

    /// Adds limits on the tokens merges may create (see [`Constraints`]).
    pub fn with_constraints(mut self, constraints: Constraints) -> Self {
        self.constraints = Some(constraints);
        self
    }

    pub fn merges(&self) -> &[Pair] {
        &self.merges
    }

    /// The count of each learned merge when it was chosen.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Learns up to `n` more merges; returns how many it learned (fewer once training is done).
    pub fn step(&mut self, n: usize) -> usize {
        let mut done = 0;
        while done < n && !self.finished {
            match self.best_pair() {
                Some((pair, count)) => {
                    self.apply(pair, count);
                    done += 1;
                }
                None => self.finished = true,
            }
        }
        done
    }

    /// The most frequent pair (ties: smallest ids), skipping stale entries and pairs whose token
    /// would be longer than `max_token_length`.
    fn best_pair(&mut self) -> Option<(Pair, u64)> {
        while let Some((count, Reverse(pair))) = self.heap.pop() {
            if self.pair_counts.get(&pair).copied() != Some(count as i64) {
                continue;
            }
            if count < self.min_frequency {
                return None;
            }
            if let Some(max) = self.max_token_length {
                if self.length[pair.0 as usize] + self.length[pair.1 as usize] > max {
                    continue; // re-pushed if its count changes; never merged while too long
                }
            }
            if let Some(c) = &self.constraints {
                if !c.allows(pair) {
                    continue;
                }
            }
            return Some((pair, count));
        }
        None
    }

    fn apply(&mut self, pair: Pair, count: u64) {
        let new_id = self.next_id;
        self.next_id += 1;
        self.merges.push(pair);
        self.counts.push(count);
        self.length.push(self.length[pair.0 as usize] + self.length[pair.1 as usize]);
        if let Some(c) = &mut self.constraints {
            let joined = [c.token_bytes[pair.0 as usize].as_slice(), c.token_bytes[pair.1 as usize].as_slice()].concat();
            c.taken.insert(joined.clone());
            c.token_bytes.push(joined);
        }

        let mut affected = self.where_.remove(&pair).unwrap_or_default();
        affected.sort_unstable();
        affected.dedup();
        // Only the pairs around each occurrence change: (left, a) and (b, right) become
        // (left, new) and (new, right). The left neighbour is read from the merged output, so
        // back-to-back occurrences ("a b a b") are counted right.
        let mut changed: Vec<Pair> = Vec::new();
        let (a, b) = pair;
        let mut merged: Vec<u32> = Vec::new();
        for &w in &affected {
            let mut word = std::mem::take(&mut self.words[w as usize]);
            if !word.windows(2).any(|p| (p[0], p[1]) == pair) {
                self.words[w as usize] = word;
                continue; // stale: an earlier merge already consumed the pair here
            }
            let f = self.freq[w as usize] as i64;
            merged.clear();
            let mut i = 0;
            while i < word.len() {
                if i + 1 < word.len() && word[i] == a && word[i + 1] == b {
                    if let Some(&left) = merged.last() {
                        if left != BARRIER {
                            self.add(&mut changed, (left, a), -f);
                            self.add(&mut changed, (left, new_id), f);
                            self.where_.entry((left, new_id)).or_default().push(w);
                        }
                    }
                    if let Some(&right) = word.get(i + 2) {
                        if right != BARRIER {
                            self.add(&mut changed, (b, right), -f);
                            self.add(&mut changed, (new_id, right), f);
                            self.where_.entry((new_id, right)).or_default().push(w);
                        }
                    }
                    self.add(&mut changed, pair, -f);
                    merged.push(new_id);
                    i += 2;
                } else {
                    merged.push(word[i]);
                    i += 1;
                }
            }
            word.clear();
            word.extend_from_slice(&merged);
            self.words[w as usize] = word;
        }
        changed.sort_unstable();
        changed.dedup();
        for key in changed {
            match self.pair_counts.get(&key).copied() {
                Some(c) if c > 0 => self.heap.push((c as u64, Reverse(key))),
                _ => {
                    self.pair_counts.remove(&key);
                }
            }
        }
    }

    fn add(&mut self, changed: &mut Vec<Pair>, key: Pair, delta: i64) {
        *self.pair_counts.entry(key).or_insert(0) += delta;
        changed.push(key);
    }
}

/// Learns up to `num_merges` byte-level merges from chunk counts in one go. Stops early when the
/// best pair occurs fewer than `min_frequency` times or no pair is left. Returns the merges in
/// order, as pairs of internal ids.
pub fn learn_merges(counts: &ChunkCounts, num_merges: usize, min_frequency: u64) -> Result<Vec<Pair>> {
    let mut learner = MergeLearner::new(byte_words(counts), 256, vec![1; 256], min_frequency, None)?;
    learner.step(num_merges);
    Ok(learner.merges().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(words: &[(&str, u64)]) -> ChunkCounts {
        words.iter().map(|(w, c)| (w.as_bytes().to_vec(), *c)).collect()
    }

    #[test]
    fn highest_count_then_lowest_ids() {
        // "ab" x3, "cd" x3: tie at 3, (a, b) has the smaller ids.
        let m = learn_merges(&counts(&[("ab", 3), ("cd", 3), ("abcd", 1)]), 3, 1).unwrap();
        assert_eq!(m[0], (b'a' as u32, b'b' as u32));
        assert_eq!(m[1], (b'c' as u32, b'd' as u32));
        assert_eq!(m[2], (256, 257));
    }

    #[test]
    fn min_frequency_stops_training() {
        let m = learn_merges(&counts(&[("ab", 3), ("cd", 1)]), 10, 2).unwrap();
        assert_eq!(m, vec![(b'a' as u32, b'b' as u32)]);
    }

    #[test]
    fn overlapping_pairs_merge_left_to_right() {
        // "aaa": (a, a) counted twice; merging gives [aa, a].
        let m = learn_merges(&counts(&[("aaa", 1)]), 2, 1).unwrap();
        assert_eq!(m, vec![(97, 97), (256, 97)]);
    }

    #[test]
    fn max_token_length_skips_long_tokens() {
        let c = counts(&[("abcd", 5)]);
        let mut l = MergeLearner::new(byte_words(&c), 256, vec![1; 256], 1, Some(2)).unwrap();
        l.step(10);
        // a+b, c+d allowed (length 2); ab+cd (length 4) is not.
        assert_eq!(l.merges(), &[(97, 98), (99, 100)]);
    }

    #[test]
    fn char_level_alphabet_suffix_and_limit() {
        let c = counts(&[("low", 5), ("lowé", 1)]);
        let (alphabet, words) = char_words(&c, None, "</w>").unwrap();
        assert!(alphabet.contains(&"w</w>".to_string()) && alphabet.contains(&"é</w>".to_string()));
        assert_eq!(words.len(), 2);
        // Limited to the 3 most frequent symbols: l, o (6 each), w</w> (5); w (1) and é</w> (1) drop out.
        let (alphabet, words) = char_words(&c, Some(3), "</w>").unwrap();
        assert_eq!(alphabet, vec!["l", "o", "w</w>"]);
        assert!(words.iter().any(|(w, _)| w.contains(&BARRIER)));
        let mut l = MergeLearner::new(words, 3, vec![1; 3], 1, None).unwrap();
        l.step(5);
        assert_eq!(l.merges(), &[(0, 1), (3, 2)]);
    }

    #[test]
    fn words_per_token_limit() {
        assert_eq!(count_words(b" by the way"), 3);
        assert_eq!(count_words(b"way, "), 1);
        let c = counts(&[("a b c", 10)]);
        let token_bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let taken = token_bytes.iter().cloned().collect();
        let constraints = Constraints { token_bytes, max_words: Some(2), forbidden: vec![], taken };
        let mut l = MergeLearner::new(byte_words(&c), 256, vec![1; 256], 1, None).unwrap().with_constraints(constraints);
        l.step(10);
        let c = l.constraints.as_ref().unwrap();
        assert!(c.token_bytes.iter().all(|t| count_words(t) <= 2));
        assert!(c.token_bytes.iter().any(|t| count_words(t) == 2));
    }

    #[test]
    fn empty_corpus_is_an_error() {
        assert_eq!(learn_merges(&ChunkCounts::default(), 1, 1).unwrap_err().kind, ErrorKind::Training);
    }

    #[test]
    fn counting_skips_special_tokens() {
        let p = Pretokenizer::new(crate::pretokenize::GPT2_PATTERN).unwrap();
        let s = SpecialTokens::new(vec![("<|x|>".into(), 0)]).unwrap();
        let c = count_chunks(&["hi<|x|>hi"], &p, &s).unwrap();
        assert_eq!(c.get(b"hi".as_slice()), Some(&2));
        assert_eq!(c.len(), 1);
    }
}
