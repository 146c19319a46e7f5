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
pub fn count_chunks(texts: &[&str], pretokenizer: &Pretokenizer, specials: &SpecialTokens) -> Result<ChunkCounts> {
    texts
        .par_iter()
        .map(|text| {
            let mut counts = ChunkCounts::default();
            let mut result = Ok(());
            specials.split(text, |_| true, |piece| {
                if let (Piece::Text(t), Ok(())) = (piece, &result) {
                    result = pretokenizer.for_each_chunk(t, |c| *counts.entry(c.as_bytes().to_vec()).or_insert(0) += 1);
                }
            });
            result.map(|_| counts)
        })
        .try_reduce(ChunkCounts::default, |a, b| Ok(merge_counts(a, b)))
}

/// Adds two count tables (the smaller into the larger).
pub fn merge_counts(a: ChunkCounts, b: ChunkCounts) -> ChunkCounts {
    let (mut big, small) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    for (k, v) in small {
        *big.entry(k).or_insert(0) += v;
    }
    big
}

type Pair = (u32, u32);

/// Learns up to `num_merges` merges from chunk counts. Stops early when the best pair occurs
/// fewer than `min_frequency` times or no pair is left. Returns the merges in order, as pairs
/// of internal ids.
pub fn learn_merges(counts: &ChunkCounts, num_merges: usize, min_frequency: u64) -> Result<Vec<Pair>> {
    if counts.is_empty() {
        return Err(Error::new(
            ErrorKind::Training,
            "the corpus is empty: no text was found to train on. Check the paths or the iterable you passed",
        ));
    }
    // Words in a fixed order (sorted by bytes) so every run does the same work.
    let mut entries: Vec<(&Vec<u8>, u64)> = counts.iter().map(|(k, &v)| (k, v)).collect();
    entries.sort_unstable();
    let mut words: Vec<Vec<u32>> = entries.iter().map(|(w, _)| w.iter().map(|&b| b as u32).collect()).collect();
    let freq: Vec<u64> = entries.iter().map(|&(_, c)| c).collect();

    // pair -> total count, and pair -> the words it occurs in (may hold stale entries).
    let mut pair_counts: FxHashMap<Pair, u64> = FxHashMap::default();
    let mut where_: FxHashMap<Pair, Vec<u32>> = FxHashMap::default();
    for (w, word) in words.iter().enumerate() {
        for p in word.windows(2) {
            *pair_counts.entry((p[0], p[1])).or_insert(0) += freq[w];
            where_.entry((p[0], p[1])).or_default().push(w as u32);
        }
    }
    // Max-heap on (count, smallest pair first). Every change of a pair's count pushes a fresh
    // entry, so an entry is current exactly when its count equals the table's.
    let mut heap: BinaryHeap<(u64, Reverse<Pair>)> = pair_counts.iter().map(|(&p, &c)| (c, Reverse(p))).collect();

    let mut merges = Vec::with_capacity(num_merges);
    let mut changed: FxHashSet<Pair> = FxHashSet::default();
    while merges.len() < num_merges {
        let Some((count, Reverse(pair))) = heap.pop() else { break };
        if pair_counts.get(&pair).copied() != Some(count) {
            continue; // stale
        }
        if count < min_frequency.max(1) {
            break;
        }
        let new_id = 256 + merges.len() as u32;
        merges.push(pair);

        let mut affected = where_.remove(&pair).unwrap_or_default();
        affected.sort_unstable();
        affected.dedup();
        changed.clear();
        for &w in &affected {
            let word = &mut words[w as usize];
            if !word.windows(2).any(|p| (p[0], p[1]) == pair) {
                continue;
            }
            let f = freq[w as usize];
            // Remove the word's old pairs, merge, add its new pairs: exact and simple, and
            // words (chunks) are short.
            for p in word.windows(2) {
                let key = (p[0], p[1]);
                let c = pair_counts.get_mut(&key).expect("pair of a counted word");
                *c -= f;
                changed.insert(key);
            }
            let mut merged = Vec::with_capacity(word.len());
            let mut i = 0;
            while i < word.len() {
                if i + 1 < word.len() && (word[i], word[i + 1]) == pair {
                    merged.push(new_id);
                    i += 2;
                } else {
                    merged.push(word[i]);
                    i += 1;
                }
            }
            *word = merged;
            for p in word.windows(2) {
                let key = (p[0], p[1]);
                *pair_counts.entry(key).or_insert(0) += f;
                if p[0] == new_id || p[1] == new_id {
                    where_.entry(key).or_default().push(w);
                }
                changed.insert(key);
            }
        }
        let mut changed_sorted: Vec<Pair> = changed.iter().copied().collect();
        changed_sorted.sort_unstable();
        for key in changed_sorted {
            match pair_counts.get(&key).copied() {
                Some(0) | None => {
                    pair_counts.remove(&key);
                }
                Some(c) => heap.push((c, Reverse(key))),
            }
        }
    }
    Ok(merges)
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
