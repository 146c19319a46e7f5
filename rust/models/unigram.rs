//! Unigram LM inference (SentencePiece): the segmentation with the highest total log
//! probability, by Viterbi over the lattice of pieces. A character no piece covers becomes the
//! unknown token (score: lowest piece score minus 10, as SentencePiece does), or its bytes
//! `<0xAB>` with byte fallback.
//!
//! Path scores are summed in f64, as Hugging Face and llama.cpp do. SentencePiece itself sums
//! and keeps them in f32 (`with_float32_scores`): the rounding decides near-ties, and even
//! exact ties, differently (kyoto's "....": "..." + "." there, "." + "..." in f64), so the
//! SentencePiece loader asks for it.

use crate::error::{Error, ErrorKind, Result};
use aho_corasick::{AhoCorasick, MatchKind};
use rustc_hash::FxHashMap;

/// Penalty of the unknown token relative to the lowest piece score (SentencePiece's kUnkPenalty).
const UNK_PENALTY: f64 = 10.0;

#[derive(Debug, Clone)]
pub struct UnigramModel {
    pieces: FxHashMap<String, (u32, f64)>,
    unk: Option<u32>,
    unk_score: f64,
    min_score: f64,
    byte_ids: Option<[u32; 256]>,
    fuse_unk: bool,
    max_piece_bytes: usize,
    float32_scores: bool,
    /// Finds every occurrence of every piece in a text in one pass: the edges of the lattice
    /// (made on first use). Looking each span up in `pieces` hashed it at every start for
    /// every length up to the longest piece: sentencepiece was 5x faster.
    edges: std::sync::OnceLock<Option<Edges>>,
}

/// The pieces that may enter the lattice (finite score), found all at once.
#[derive(Debug, Clone)]
struct Edges {
    matcher: AhoCorasick,
    /// (id, score) by the matcher's pattern index.
    pieces: Vec<(u32, f64)>,
}

impl UnigramModel {
    /// `pieces`: (piece, id, score); pieces that must never be produced by the lattice (control,
    /// unused) are left out by the caller. A piece whose score is not finite (-inf) never enters
    /// the lattice but is still there for byte fallback: SentencePiece's `<0xAB>` pieces.
    pub fn new(pieces: Vec<(String, u32, f64)>, unk: Option<u32>, byte_fallback: bool, fuse_unk: bool) -> Result<Self> {
        let min_score = pieces.iter().map(|p| p.2).filter(|s| s.is_finite()).fold(f64::INFINITY, f64::min);
        let max_piece_bytes = pieces.iter().map(|p| p.0.len()).max().unwrap_or(0);
        let map: FxHashMap<String, (u32, f64)> = pieces.into_iter().map(|(s, id, score)| (s, (id, score))).collect();
        let byte_ids = if byte_fallback {
            let mut ids = [0u32; 256];
            for b in 0..256usize {
                ids[b] = map.get(&format!("<0x{b:02X}>")).map(|p| p.0).ok_or_else(|| {
                    Error::new(ErrorKind::Format, format!("byte_fallback is on but the piece <0x{b:02X}> is missing"))
                })?;
            }
            Some(ids)
        } else {
            None
        };
        let unk_score = if min_score.is_finite() { min_score - UNK_PENALTY } else { -UNK_PENALTY };
        Ok(UnigramModel { pieces: map, unk, unk_score, min_score, byte_ids, fuse_unk, max_piece_bytes, float32_scores: false, edges: Default::default() })
    }

    /// SentencePiece's arithmetic: path scores are f32, each step an f32 addition.
    pub fn with_float32_scores(mut self, on: bool) -> Self {
        self.float32_scores = on;
        self.unk_score = match (self.min_score.is_finite(), on) {
            (false, _) => -UNK_PENALTY,
            (true, true) => (self.min_score as f32 - UNK_PENALTY as f32) as f64,
            (true, false) => self.min_score - UNK_PENALTY,
        };
        self
    }

    /// `base + score` in the model's arithmetic (an f32 addition for SentencePiece).
    fn add(&self, base: f64, score: f64) -> f64 {
        if self.float32_scores {
            (base as f32 + score as f32) as f64
        } else {
            base + score
        }
    }

    fn edges(&self) -> Option<&Edges> {
        self.edges
            .get_or_init(|| {
                let (strings, pieces): (Vec<&str>, Vec<(u32, f64)>) =
                    self.pieces.iter().filter(|(s, p)| p.1.is_finite() && !s.is_empty()).map(|(s, &p)| (s.as_str(), p)).unzip();
                // None (then the lookups below) if the automaton cannot be built.
                AhoCorasick::builder().match_kind(MatchKind::Standard).build(&strings).ok().map(|matcher| Edges { matcher, pieces })
            })
            .as_ref()
    }

    /// Appends the best segmentation of `text`.
    pub fn encode_word(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let Some(edges) = self.edges() else { return self.encode_word_by_lookup(text, out) };
        let n = text.len();
        // best[i]: (score, start of the last piece, its id or None for unknown) of text[..i].
        let mut best: Vec<(f64, usize, Option<u32>)> = vec![(f64::NEG_INFINITY, 0, None); n + 1];
        best[0].0 = 0.0;
        // Edges into a position may arrive in any order: the higher score wins, and of two
        // equal ones the earlier start, which is what trying starts in order and keeping the
        // first of equal scores gives (SentencePiece's lattice).
        let relax = |best: &mut Vec<(f64, usize, Option<u32>)>, start: usize, end: usize, score: f64, id: Option<u32>| {
            let s = self.add(best[start].0, score);
            let (current, current_start, _) = best[end];
            if s > current || (s == current && start < current_start) {
                best[end] = (s, start, id);
            }
        };
        // The matches come in order of their end (the automaton reports each as it passes its
        // end); each is a span between character boundaries, as pieces are whole characters.
        let mut matches = edges.matcher.find_overlapping_iter(text).peekable();
        for (start, c) in text.char_indices() {
            let end = start + c.len_utf8();
            let mut matched_single = false;
            while let Some(m) = matches.next_if(|m| m.end() <= end) {
                debug_assert_eq!(m.end(), end, "matches must come in order of their end");
                let (id, score) = edges.pieces[m.pattern().as_usize()];
                relax(&mut best, m.start(), end, score, Some(id));
                matched_single |= m.start() == start;
            }
            if !matched_single {
                // No piece for this character: the unknown token covers it.
                relax(&mut best, start, end, self.unk_score, None);
            }
        }
        self.emit(text, &best, out)
    }

    /// `encode_word` by looking up every span up to the longest piece (where the automaton
    /// could not be built; and the tests' reference).
    fn encode_word_by_lookup(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let n = text.len();
        // best[i]: (score, start of the last piece, its id or None for unknown) of text[..i].
        let mut best: Vec<(f64, usize, Option<u32>)> = vec![(f64::NEG_INFINITY, 0, None); n + 1];
        best[0].0 = 0.0;
        for start in text.char_indices().map(|(i, _)| i) {
            let base = best[start].0;
            if base == f64::NEG_INFINITY {
                continue;
            }
            let mut matched_single = false;
            let char_len = text[start..].chars().next().map_or(1, |c| c.len_utf8());
            let limit = n.min(start + self.max_piece_bytes);
            let mut end = start + char_len;
            while end <= limit {
                if text.is_char_boundary(end) {
                    if let Some(&(id, score)) = self.pieces.get(&text[start..end]).filter(|p| p.1.is_finite()) {
                        if end == start + char_len {
                            matched_single = true;
                        }
                        let s = self.add(base, score);
                        // Ties keep the earlier-found path, as SentencePiece's lattice does.
                        if s > best[end].0 {
                            best[end] = (s, start, Some(id));
                        }
                    }
                }
                end += 1;
            }
            if !matched_single {
                // No piece for this character: the unknown token covers it.
                let end = start + char_len;
                let s = self.add(base, self.unk_score);
                if s > best[end].0 {
                    best[end] = (s, start, None);
                }
            }
        }
        self.emit(text, &best, out)
    }

    /// Walks the best path back from the end and appends its ids.
    fn emit(&self, text: &str, best: &[(f64, usize, Option<u32>)], out: &mut Vec<u32>) -> Result<()> {
        let n = text.len();
        let mut path = Vec::new();
        let mut i = n;
        while i > 0 {
            let (_, start, id) = best[i];
            path.push((start, i, id));
            i = start;
        }
        let mut prev_unk = false;
        for &(start, end, id) in path.iter().rev() {
            match id {
                Some(id) => {
                    out.push(id);
                    prev_unk = false;
                }
                None => {
                    if let Some(bytes) = &self.byte_ids {
                        out.extend(text[start..end].bytes().map(|b| bytes[b as usize]));
                        prev_unk = false;
                    } else if let Some(unk) = self.unk {
                        if !(self.fuse_unk && prev_unk) {
                            out.push(unk);
                        }
                        prev_unk = true;
                    } else {
                        return Err(Error::new(
                            ErrorKind::Encode,
                            format!("{:?} is not covered by any piece and the model has no unknown token", &text[start..end]),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    pub fn encode_words<'a>(&self, words: impl IntoIterator<Item = &'a str>) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for w in words {
            self.encode_word(w, &mut out)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(byte_fallback: bool) -> UnigramModel {
        let mut pieces = vec![("<unk>".to_string(), 0, 0.0), ("a".into(), 1, -1.0), ("b".into(), 2, -1.0), ("ab".into(), 3, -1.5), ("abc".into(), 4, -5.0), ("c".into(), 5, -1.0)];
        pieces.retain(|p| p.0 != "<unk>");
        if byte_fallback {
            pieces.extend((0..256u32).map(|b| (format!("<0x{b:02X}>"), 10 + b, -20.0)));
        }
        UnigramModel::new(pieces, Some(0), byte_fallback, true).unwrap()
    }

    #[test]
    fn the_automatons_lattice_is_the_lookups() {
        // Pieces over a small alphabet, with many equal scores (ties) and f32 rounding.
        let alphabet = ["a", "b", "é", "字", "▁", "x"];
        let mut next = crate::lcg(5);
        for round in 0..40 {
            let mut pieces: Vec<(String, u32, f64)> = Vec::new();
            for id in 0..60u32 {
                let len = 1 + next(4) as usize;
                let piece: String = (0..len).map(|_| alphabet[next(alphabet.len() as u64) as usize]).collect();
                if pieces.iter().all(|p| p.0 != piece) && piece != "x" {
                    pieces.push((piece, id + 1, -((next(6) + 1) as f64) * 0.7));
                }
            }
            let byte_fallback = round % 3 == 0;
            if byte_fallback {
                pieces.extend((0..256u32).map(|b| (format!("<0x{b:02X}>"), 100 + b, f64::NEG_INFINITY)));
            }
            let m = UnigramModel::new(pieces, Some(0), byte_fallback, round % 2 == 0).unwrap().with_float32_scores(round % 4 < 2);
            for k in 0..50 {
                let text: String = (0..k % 25).map(|_| alphabet[next(alphabet.len() as u64) as usize]).collect();
                let (mut fast, mut slow) = (Vec::new(), Vec::new());
                m.encode_word(&text, &mut fast).unwrap();
                m.encode_word_by_lookup(&text, &mut slow).unwrap();
                assert_eq!(fast, slow, "{text:?}");
            }
        }
    }

    #[test]
    fn viterbi_picks_the_most_likely_segmentation() {
        let m = model(false);
        // ab + c = -2.5 beats abc = -5 and a + b + c = -3.
        assert_eq!(m.encode_words(["abc"]).unwrap(), vec![3, 5]);
    }

    #[test]
    fn unknown_characters() {
        assert_eq!(model(false).encode_words(["xyab"]).unwrap(), vec![0, 3]);
        assert_eq!(model(true).encode_words(["é"]).unwrap(), vec![10 + 0xC3, 10 + 0xA9]);
    }

    #[test]
    fn float32_scores_decide_ties_as_sentencepiece() {
        // Both splits of "...." score the same; SentencePiece's f32 sums round so that
        // "..." + "." wins, f64 keeps the first found, "." + "...".
        let pieces = vec![("a".to_string(), 1, -7.3f32 as f64), (".".into(), 2, -8.356_37f32 as f64), ("...".into(), 3, -9.194_641f32 as f64)];
        let m = UnigramModel::new(pieces, Some(0), false, true).unwrap();
        assert_eq!(m.encode_words(["a...."]).unwrap(), vec![1, 2, 3]);
        let m = m.with_float32_scores(true);
        assert_eq!(m.encode_words(["a...."]).unwrap(), vec![1, 3, 2]);
    }

    #[test]
    fn pieces_without_finite_score_only_serve_byte_fallback() {
        let mut pieces = vec![("a".to_string(), 1, -1.0)];
        pieces.extend((0..256u32).map(|b| (format!("<0x{b:02X}>"), 10 + b, f64::NEG_INFINITY)));
        let m = UnigramModel::new(pieces, Some(0), true, true).unwrap();
        // The literal text of a byte piece is not that piece; its characters fall back to bytes.
        let ids = m.encode_words(["<0x61>a"]).unwrap();
        assert_eq!(ids, "<0x61>".bytes().map(|b| 10 + b as u32).chain([1]).collect::<Vec<_>>());
    }
}
