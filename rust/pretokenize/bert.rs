//! BERT's basic pre-tokenization: whitespace ends a word and is dropped, each punctuation
//! character is a word of its own, every other character joins the word it is in.
//!
//! Which characters are whitespace and which punctuation is given by the caller as code point
//! ranges (Python's `pre_tokenizers.WHITESPACE` and `PUNCTUATION`, the reference), so that the
//! two splits cannot disagree on a character.

/// What one character does to the words around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Word,
    Space,
    Punct,
}

#[derive(Debug, Clone)]
pub struct BertSplitter {
    ascii: [Class; 128],
    /// Non-ASCII ranges (first, last, class), sorted and not overlapping.
    ranges: Vec<(u32, u32, Class)>,
}

impl BertSplitter {
    /// `whitespace` and `punctuation`: inclusive code point ranges. A character in both is
    /// punctuation, as in the regex this mirrors (`[^ws punct]+|[punct]`).
    pub fn new(whitespace: &[(u32, u32)], punctuation: &[(u32, u32)]) -> Self {
        let mut ascii = [Class::Word; 128];
        let mut ranges = Vec::new();
        for (list, class) in [(whitespace, Class::Space), (punctuation, Class::Punct)] {
            for &(lo, hi) in list {
                for c in lo..=hi.min(127) {
                    ascii[c as usize] = class;
                }
                if hi >= 128 {
                    ranges.push((lo.max(128), hi, class));
                }
            }
        }
        // Punctuation was pushed last: where ranges overlap, its part wins (split them apart).
        let mut points: Vec<u32> = ranges.iter().flat_map(|&(lo, hi, _)| [lo, hi.saturating_add(1)]).collect();
        points.sort_unstable();
        points.dedup();
        let class_at = |c: u32| ranges.iter().rev().find(|&&(lo, hi, _)| lo <= c && c <= hi).map(|r| r.2);
        let mut merged: Vec<(u32, u32, Class)> = Vec::new();
        for w in points.windows(2) {
            let (lo, hi) = (w[0], w[1] - 1);
            if let Some(class) = class_at(lo) {
                match merged.last_mut() {
                    Some(last) if last.2 == class && last.1 + 1 == lo => last.1 = hi,
                    _ => merged.push((lo, hi, class)),
                }
            }
        }
        BertSplitter { ascii, ranges: merged }
    }

    #[inline]
    fn class(&self, c: char) -> Class {
        let c = c as u32;
        if c < 128 {
            return self.ascii[c as usize];
        }
        match self.ranges.binary_search_by(|&(lo, hi, _)| if hi < c { std::cmp::Ordering::Less } else if lo > c { std::cmp::Ordering::Greater } else { std::cmp::Ordering::Equal }) {
            Ok(i) => self.ranges[i].2,
            Err(_) => Class::Word,
        }
    }

    /// Calls `word` with each word of `text`, in order.
    pub fn for_each_word<'t>(&self, text: &'t str, mut word: impl FnMut(&'t str)) {
        let mut start = None;
        for (i, c) in text.char_indices() {
            match self.class(c) {
                Class::Word => {
                    start.get_or_insert(i);
                }
                class => {
                    if let Some(s) = start.take() {
                        word(&text[s..i]);
                    }
                    if class == Class::Punct {
                        word(&text[i..i + c.len_utf8()]);
                    }
                }
            }
        }
        if let Some(s) = start {
            word(&text[s..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_punctuation_and_spaces() {
        let s = BertSplitter::new(&[(9, 13), (32, 32), (0x3000, 0x3000)], &[(33, 47), (0x3001, 0x3003)]);
        let mut words = Vec::new();
        s.for_each_word("  Hello, world!!\u{3000}x\u{3001}y\t", |w| words.push(w));
        assert_eq!(words, ["Hello", ",", "world", "!", "!", "x", "\u{3001}", "y"]);
        // U+3000, in both lists, is punctuation (and U+2FFF next to it too).
        let s = BertSplitter::new(&[(9, 13), (32, 32), (0x3000, 0x3000)], &[(33, 47), (0x2fff, 0x3000)]);
        words.clear();
        s.for_each_word("a\u{2fff}b\u{3000}c d", |w| words.push(w));
        assert_eq!(words, ["a", "\u{2fff}", "b", "\u{3000}", "c", "d"]);
    }
}
