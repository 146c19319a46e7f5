//! Byte-level BPE started from whole characters instead of bytes, where that gives the same
//! result.
//!
//! A chunk of Chinese, Japanese or Russian text is mostly multi-byte characters, and merging
//! its bytes spends most of its steps putting each character back together (two merges per CJK
//! character) before any merge between characters. Starting from each character's own
//! result (its bytes merged alone) skips those steps: a chunk of 30 CJK characters starts
//! from 30 symbols instead of 90.
//!
//! When it is exact. Call a token *crossing* if, inside valid UTF-8, it starts or ends in the
//! middle of a character and reaches past that character (` \xe5`: a space and the first byte
//! of a CJK character; `о\xd0`: a Cyrillic letter and the first byte of the next). An
//! occurrence of a crossing token in a chunk *cuts* the characters it covers only in part.
//! Suppose the merges are *in order*: every merge ranks after every merge that makes one of its
//! two parts. Then merging goes in rank order (each merge only creates pairs that rank after
//! it), and a character no crossing token cuts is touched by no merge before it is whole: a
//! merge of part of it with something outside would make a crossing token that cuts it, and a
//! merge of the whole character with a neighbour ranks after the merge that made the character.
//! Until then the rest of the chunk does exactly what it would do next to the finished
//! character, which touches nothing before that rank either. So merging from a start where
//! every uncut character is already merged alone (and the cut ones, like ASCII, are bytes)
//! goes through the same states at every rank from there on, and ends in the same tokens. (A
//! character whose bytes merge alone into two tokens starts as those two: no merge joins them,
//! and one joining either with a neighbour would make a crossing token that cuts it.)
//! `BpeModel` uses this start only for models whose merges are in order (checked when the
//! model is built: tiktoken's encodings and trained merges are), without a continuing-subword
//! prefix (with one, a merged token is not the text it covers), and for chunks of valid UTF-8.
//!
//! Where a chunk may be cut in pieces merged apart. If no token of the vocabulary spans a
//! place in the chunk (has an occurrence there that covers the bytes on both sides), no merge
//! ever joins the symbols on its two sides, and the pairs on either side never depend on the
//! other: merging the two pieces apart goes through the same merges in the same order, and
//! gives the same tokens. Between two characters `a` and `b`, a token that is not crossing
//! spans the place only if it holds `ab` (it starts and ends at character bounds); a crossing
//! one only where the search for crossing tokens finds an occurrence over it. So a place no
//! crossing occurrence covers, between characters that no token holds side by side, cuts the
//! chunk. Chinese and Japanese runs have such places at most characters (about 60% of them in
//! the Debian Handbook, o200k): merging a run of 40 characters becomes merging pieces of one
//! to three, instead of a quadratic scan over 40 symbols.

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use rustc_hash::FxHashMap;

/// Marks a byte-level model whose merges are in order (see the module comment); what it needs
/// to start merging from characters is made on first use (a few milliseconds and 2-3 MB for
/// o200k), so that a model that never sees such text never pays for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct CharStart {
    /// None inside when the searcher could not be built (then merging starts from bytes).
    pub(crate) tables: std::sync::OnceLock<Option<CharTables>>,
}

#[derive(Debug, Clone)]
pub(crate) struct CharTables {
    /// Finds the crossing tokens of the vocabulary in a chunk in one pass; None when merges
    /// make none.
    crossing: Option<AhoCorasick>,
    /// The tokens of every character of 2 or 3 bytes (U+0080 to U+FFFF) merged alone, indexed
    /// by code point. See `CharTokens`.
    pub(crate) chars: Vec<CharTokens>,
    /// A Bloom filter of the pairs of characters side by side in some token (see `may_join`).
    joins: Vec<u64>,
}

/// `CharTables::joins` has 2^JOIN_WORD_BITS words of 64 bits (64 KB): o200k's tokens hold
/// about 25,000 distinct pairs of characters, which set a tenth of its bits, so about 1% of the
/// pairs in no token pass too (the chunk is then only not cut there).
const JOIN_WORD_BITS: u32 = 13;

/// A character's tokens when its bytes are merged alone: one or two ids, or `AS_BYTES` when
/// none of its bytes merge (it then starts as bytes, like a cut character).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CharTokens(pub(crate) [u32; 2]);

/// In `CharTokens.0[1]`: the character is a single token (ids are below 2^28).
pub(crate) const ONE_TOKEN: u32 = u32::MAX;
/// In `CharTokens.0[0]`: merging leaves the character's bytes as they are.
pub(crate) const AS_BYTES: u32 = u32::MAX;

/// The code points `CharStart::chars` covers: those of 2 and 3 bytes in UTF-8.
pub(crate) const TABLE_CHARS: u32 = 0x1_0000;

impl CharStart {
    /// The start for a model with these merges ((left, right) -> (rank, new id)), or None when
    /// they are not in order (some merge ranks at or before a merge that makes one of its
    /// parts), where starting from characters could change results.
    pub(crate) fn new(n_tokens: usize, merges: &FxHashMap<(u32, u32), (u32, u32)>) -> Option<Self> {
        // made_at[id]: the highest rank of a merge that makes id (bytes: none).
        let mut made_at: Vec<Option<u32>> = vec![None; n_tokens];
        for &(rank, id) in merges.values() {
            let m = made_at.get_mut(id as usize)?;
            *m = Some(m.map_or(rank, |r| r.max(rank)));
        }
        let made = |id: u32| made_at.get(id as usize).copied().flatten();
        let in_order = merges.iter().all(|(&(l, r), &(rank, _))| made(l).is_none_or(|m| m < rank) && made(r).is_none_or(|m| m < rank));
        in_order.then(CharStart::default)
    }
}

impl CharTables {
    /// The tables for a vocabulary, given each character's tokens merged alone; None if the
    /// searcher cannot be built (a vocabulary of millions of crossing tokens).
    pub(crate) fn new(vocab: &[Option<Vec<u8>>], chars: Vec<CharTokens>) -> Option<Self> {
        // One pass over the tokens for both tables: each token is an allocation of its own, and
        // a second pass waited for all of them again (o200k: 8 ms more on first use).
        let mut crossing: Vec<&[u8]> = Vec::new();
        let mut joins = vec![0u64; 1 << JOIN_WORD_BITS];
        let mut join = |a: u32, b: u32| {
            let (word, bits) = join_bits(a, b);
            joins[word] |= bits;
        };
        // Most tokens are ASCII and share their pairs: those are gathered, then hashed once each.
        let mut ascii_pairs = vec![false; 128 * 128];
        for token in vocab.iter().flatten() {
            if token.is_ascii() {
                for pair in token.windows(2) {
                    ascii_pairs[(pair[0] as usize) << 7 | pair[1] as usize] = true;
                }
                continue;
            }
            if is_crossing(token) {
                crossing.push(token.as_slice());
            }
            // A token that is not UTF-8 holds part of a character: inside valid text it spans
            // a place between characters only if it is crossing (the search finds those).
            let Ok(text) = std::str::from_utf8(token) else { continue };
            let mut chars = text.chars().map(|c| c as u32);
            let Some(mut a) = chars.next() else { continue };
            for b in chars {
                join(a, b);
                a = b;
            }
        }
        for (k, _) in ascii_pairs.iter().enumerate().filter(|&(_, &seen)| seen) {
            join((k >> 7) as u32, (k & 127) as u32);
        }
        let crossing = if crossing.is_empty() {
            None
        } else {
            // All overlapping occurrences are needed (MatchKind::Standard); a DFA is the
            // fastest searcher for a few hundred short patterns (o200k: 794).
            Some(AhoCorasick::builder().match_kind(MatchKind::Standard).kind(Some(AhoCorasickKind::DFA)).build(&crossing).ok()?)
        };
        Some(CharTables { crossing, chars, joins })
    }

    /// False when no token holds the characters `a` and `b` side by side; true when some may.
    #[inline(always)]
    pub(crate) fn may_join(&self, a: u32, b: u32) -> bool {
        let (word, bits) = join_bits(a, b);
        self.joins[word] & bits == bits
    }

    /// Sets bit p of `cut` (one bit per byte of `chunk`, cleared and sized here) for the first
    /// byte p of every character of `chunk` that an occurrence of a crossing token cuts, and
    /// bit p of `spanned` for every byte p that such an occurrence covers together with the
    /// byte before it. `chunk` must be valid UTF-8 (every continuation byte belongs to the
    /// character before).
    pub(crate) fn mark_cut(&self, chunk: &[u8], cut: &mut Vec<u64>, spanned: &mut Vec<u64>) {
        cut.clear();
        cut.resize(chunk.len().div_ceil(64), 0);
        spanned.clear();
        spanned.resize(chunk.len().div_ceil(64), 0);
        let Some(ac) = &self.crossing else { return };
        let mut mark = |at: usize| {
            // The first byte of the character that byte `at` belongs to.
            let mut p = at;
            while p > 0 && is_continuation(chunk[p]) {
                p -= 1;
            }
            cut[p / 64] |= 1 << (p % 64);
        };
        for m in ac.find_overlapping_iter(chunk) {
            for p in m.start() + 1..m.end() {
                spanned[p / 64] |= 1 << (p % 64);
            }
            if is_continuation(chunk[m.start()]) {
                mark(m.start());
            }
            if chunk.get(m.end()).is_some_and(|&b| is_continuation(b)) {
                mark(m.end() - 1);
            }
        }
    }
}

/// The word of `CharTables::joins` for a pair of characters and the two bits it sets there.
#[inline(always)]
fn join_bits(a: u32, b: u32) -> (usize, u64) {
    let h = ((a as u64) << 32 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> (64 - JOIN_WORD_BITS)) as usize, 1u64 << (h & 63) | 1u64 << ((h >> 6) & 63))
}

#[inline(always)]
pub(crate) fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// The length of the UTF-8 character that starts with byte `b` (0 for a continuation byte or
/// a byte that never starts one).
#[inline(always)]
pub(crate) fn utf8_len(b: u8) -> usize {
    match b {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

/// Whether the token, found inside valid UTF-8, would start or end inside a character and
/// reach past it: it holds the start of a character after its first byte, and it starts with
/// a continuation byte or its last character is incomplete.
pub(crate) fn is_crossing(token: &[u8]) -> bool {
    let Some(last_start) = token.iter().rposition(|&b| !is_continuation(b)) else {
        return false; // continuation bytes only: inside one character
    };
    let inner_start = token.iter().skip(1).any(|&b| !is_continuation(b));
    let starts_inside = is_continuation(token[0]);
    let ends_inside = token.len() - last_start < utf8_len(token[last_start]);
    inner_start && (starts_inside || ends_inside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossing_tokens() {
        for t in [" \u{4e2d}".as_bytes(), "\u{4e2d}".as_bytes(), "ab".as_bytes(), "\u{4e2d}\u{56fd}".as_bytes(), b"\xb8\xad", b"\xe4\xb8"] {
            assert!(!is_crossing(t), "{t:?} does not cross");
        }
        for t in [&b" \xe5"[..], b"\xd0\xbe\xd0", b"\xad\xe5\x9b\xbd", b"\xad a", b"\x88\xeb\x8b\xa4", b"\xb8\xad\xe5"] {
            assert!(is_crossing(t), "{t:?} crosses");
        }
    }

    #[test]
    fn marks_the_characters_an_occurrence_cuts() {
        // Tokens: " \xe5" (cuts the CJK character after a space), "\xad\xe5" (cuts both).
        let vocab: Vec<Option<Vec<u8>>> = vec![Some(b" \xe5".to_vec()), Some(b"\xad\xe5".to_vec()), Some(b"ab".to_vec())];
        let start = CharTables::new(&vocab, Vec::new()).unwrap();
        let chunk = "x \u{5f88}\u{4e2d}\u{5f88}ab".as_bytes(); // x, space, 很 (e5 be 88), 中 (e4 b8 ad), 很, a, b
        let (mut cut, mut spanned) = (Vec::new(), Vec::new());
        start.mark_cut(chunk, &mut cut, &mut spanned);
        let marked: Vec<usize> = (0..chunk.len()).filter(|&p| cut[p / 64] >> (p % 64) & 1 == 1).collect();
        // 很 at 2 (after the space), 中 at 5 and the second 很 at 8 (around "\xad\xe5").
        assert_eq!(marked, vec![2, 5, 8]);
        // " \xe5" at 1..3 spans byte 2; "\xad\xe5" at 7..9 spans byte 8.
        let spans: Vec<usize> = (0..chunk.len()).filter(|&p| spanned[p / 64] >> (p % 64) & 1 == 1).collect();
        assert_eq!(spans, vec![2, 8]);
    }

    #[test]
    fn characters_side_by_side_in_a_token_may_join() {
        // Every pair of characters inside a token is in the filter (no false "cannot join"),
        // and most pairs that are in no token are not.
        let words = ["中国", "国の", "ab", "aé", "жо", "の中a"];
        let vocab: Vec<Option<Vec<u8>>> = words.iter().map(|w| Some(w.as_bytes().to_vec())).chain([Some(b"\xe4\xb8".to_vec()), None]).collect();
        let tables = CharTables::new(&vocab, Vec::new()).unwrap();
        for w in words {
            let chars: Vec<u32> = w.chars().map(|c| c as u32).collect();
            for pair in chars.windows(2) {
                assert!(tables.may_join(pair[0], pair[1]), "{w}: {pair:?}");
            }
        }
        let joined = (0x4E00..0x4E00 + 1000).filter(|&c| tables.may_join(c, c + 1)).count();
        assert!(joined < 10, "{joined} of 1000 unseen pairs pass");
    }

    #[test]
    fn merges_out_of_order_give_no_start() {
        let vocab: Vec<Option<Vec<u8>>> = (0..=255u8).map(|b| Some(vec![b])).chain([Some(b"ab".to_vec()), Some(b"abc".to_vec())]).collect();
        let mut merges = FxHashMap::default();
        merges.insert((97, 98), (5, 256)); // a b -> ab at rank 5
        merges.insert((256, 99), (9, 257)); // ab c -> abc at rank 9: in order
        assert!(CharStart::new(vocab.len(), &merges).is_some());
        merges.insert((256, 99), (3, 257)); // abc before ab: out of order
        assert!(CharStart::new(vocab.len(), &merges).is_none());
    }

    #[test]
    fn a_token_made_by_several_merges_counts_from_the_last() {
        // abc made at ranks 3 ((ab, c)) and 10 ((a, bc)); (abc, d) at rank 5 comes before the
        // second way to abc: out of order.
        let mut vocab: Vec<Option<Vec<u8>>> = (0..=255u8).map(|b| Some(vec![b])).collect();
        vocab.extend(["ab", "bc", "abc", "abcd"].map(|t| Some(t.as_bytes().to_vec())));
        let (ab, bc, abc, abcd) = (256, 257, 258, 259);
        let mut merges = FxHashMap::default();
        merges.insert((97, 98), (0, ab));
        merges.insert((98, 99), (1, bc));
        merges.insert((ab, 99), (3, abc));
        merges.insert((97, bc), (10, abc));
        merges.insert((abc, 100), (11, abcd));
        assert!(CharStart::new(vocab.len(), &merges).is_some());
        merges.insert((abc, 100), (5, abcd));
        assert!(CharStart::new(vocab.len(), &merges).is_none());
    }
}
