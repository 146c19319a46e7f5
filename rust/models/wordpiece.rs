//! WordPiece inference (BERT): greedy longest-match-first within each word, with the `##`
//! continuation prefix; a word with no full segmentation, or longer than
//! `max_input_chars_per_word`, becomes the unknown token.

use crate::error::{Error, ErrorKind, Result};
use rustc_hash::FxHashMap;

#[derive(Debug, Clone)]
pub struct WordPieceModel {
    vocab: FxHashMap<String, u32>,
    unk: u32,
    prefix: String,
    max_input_chars_per_word: usize,
    /// Longest token in bytes (prefix included): bounds the search at each position.
    max_token_bytes: usize,
    /// One more than the largest id.
    id_bound: usize,
}

impl WordPieceModel {
    pub fn new(vocab: Vec<(String, u32)>, unk_token: &str, prefix: &str, max_input_chars_per_word: usize) -> Result<Self> {
        let max_token_bytes = vocab.iter().map(|(t, _)| t.len()).max().unwrap_or(0);
        let id_bound = vocab.iter().map(|&(_, id)| id as usize + 1).max().unwrap_or(0);
        let vocab: FxHashMap<String, u32> = vocab.into_iter().collect();
        let unk = *vocab.get(unk_token).ok_or_else(|| {
            Error::new(ErrorKind::Format, format!("the WordPiece unknown token {unk_token:?} is not in the vocabulary"))
        })?;
        Ok(WordPieceModel { vocab, unk, prefix: prefix.to_string(), max_input_chars_per_word, max_token_bytes, id_bound })
    }

    /// One more than the largest id of the vocabulary.
    pub fn id_bound(&self) -> usize {
        self.id_bound
    }

    /// Appends the ids of one word.
    pub fn encode_word(&self, word: &str, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if word.chars().count() > self.max_input_chars_per_word {
            out.push(self.unk);
            return;
        }
        // A whole word that is a token (most words): no copy with a prefix to make.
        if word.len() <= self.max_token_bytes {
            if let Some(&id) = self.vocab.get(word) {
                out.push(id);
                return;
            }
        }
        let first = out.len();
        let mut start = 0;
        let mut candidate = String::with_capacity(word.len() + self.prefix.len());
        while start < word.len() {
            // Longest piece word[start..end] (with the prefix after the first) in the vocabulary.
            let mut end = word.len().min(start + self.max_token_bytes);
            let mut found = None;
            while end > start {
                if word.is_char_boundary(end) {
                    candidate.clear();
                    if start > 0 {
                        candidate.push_str(&self.prefix);
                    }
                    candidate.push_str(&word[start..end]);
                    if let Some(&id) = self.vocab.get(&candidate) {
                        found = Some(id);
                        break;
                    }
                }
                end -= 1;
            }
            match found {
                Some(id) => {
                    out.push(id);
                    start = end;
                }
                None => {
                    out.truncate(first);
                    out.push(self.unk);
                    return;
                }
            }
        }
    }

    pub fn encode_words<'a>(&self, words: impl IntoIterator<Item = &'a str>) -> Vec<u32> {
        let mut out = Vec::new();
        for w in words {
            self.encode_word(w, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> WordPieceModel {
        let vocab = ["[UNK]", "un", "##aff", "##able", "aff", "##a", "é", "##é"];
        WordPieceModel::new(vocab.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect(), "[UNK]", "##", 10).unwrap()
    }

    #[test]
    fn longest_match_first() {
        assert_eq!(model().encode_words(["unaffable"]), vec![1, 2, 3]);
        assert_eq!(model().encode_words(["éé"]), vec![6, 7]);
    }

    #[test]
    fn unknown_word_and_too_long_word() {
        assert_eq!(model().encode_words(["unx", "aff"]), vec![0, 4]);
        assert_eq!(model().encode_words(["unaffableaff"]), vec![0]);
    }
}
