//! Special tokens: strings such as `<|endoftext|>` that map to one reserved id and are never
//! produced by merges. Finding them in text is done here, in one Aho-Corasick pass.

use crate::error::{Error, ErrorKind, Result};
use aho_corasick::{AhoCorasick, Input, MatchKind};

#[derive(Debug, Clone, Default)]
pub struct SpecialTokens {
    tokens: Vec<(String, u32)>,
    matcher: Option<AhoCorasick>,
}

/// A piece of text between special tokens, or one special token.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'t> {
    Text(&'t str),
    Special(u32),
}

impl SpecialTokens {
    /// The special-token strings that hold a line end: the ones a cut after a `\n` could split
    /// (see `train::read::is_safe_cut`).
    pub fn with_line_ends(&self) -> Vec<String> {
        self.tokens.iter().filter(|(s, _)| s.contains('\n')).map(|(s, _)| s.clone()).collect()
    }

    pub fn new(tokens: Vec<(String, u32)>) -> Result<Self> {
        if tokens.iter().any(|(s, _)| s.is_empty()) {
            return Err(Error::new(ErrorKind::Format, "a special token must be a non-empty string"));
        }
        let matcher = if tokens.is_empty() {
            None
        } else {
            // Leftmost-longest, so `<|end|>` does not shadow `<|endoftext|>`.
            let m = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(tokens.iter().map(|(s, _)| s.as_str()))
                .map_err(|e| Error::new(ErrorKind::Format, format!("special tokens: {e}")))?;
            Some(m)
        };
        Ok(SpecialTokens { tokens, matcher })
    }

    pub fn tokens(&self) -> &[(String, u32)] {
        &self.tokens
    }

    /// Splits `text` at the special tokens for which `allowed(id)` holds; every other
    /// special-token string stays inside the text pieces.
    pub fn split<'t>(&self, text: &'t str, allowed: impl Fn(u32) -> bool, mut f: impl FnMut(Piece<'t>)) {
        let Some(matcher) = &self.matcher else {
            if !text.is_empty() {
                f(Piece::Text(text));
            }
            return;
        };
        let mut piece_start = 0; // start of the text not yet emitted
        let mut search_from = 0;
        while search_from < text.len() {
            let Some(m) = matcher.find(Input::new(text).span(search_from..text.len())) else { break };
            let mut id = self.tokens[m.pattern().as_usize()].1;
            let mut end = m.end();
            if !allowed(id) {
                // The longest special here is not allowed: a shorter allowed one may start here
                // too (rare, so a plain scan is fine).
                let rest = &text[m.start()..];
                if let Some((s, i)) = self
                    .tokens
                    .iter()
                    .filter(|(s, i)| allowed(*i) && rest.starts_with(s.as_str()))
                    .max_by_key(|(s, _)| s.len())
                {
                    id = *i;
                    end = m.start() + s.len();
                }
            }
            if allowed(id) {
                if m.start() > piece_start {
                    f(Piece::Text(&text[piece_start..m.start()]));
                }
                f(Piece::Special(id));
                piece_start = end;
                search_from = end;
            } else {
                // Not allowed here: a match starting one character later may still be.
                search_from = m.start() + text[m.start()..].chars().next().map_or(1, |c| c.len_utf8());
            }
        }
        if piece_start < text.len() {
            f(Piece::Text(&text[piece_start..]));
        }
    }
}

/// Finds literal strings in text. Made to find matches (`find_chars`): leftmost and then
/// longest, without overlaps: the added tokens of a Hugging Face pipeline (thousands for Gemma
/// 3, where Python's `re` over an alternation of them took 40% of the encoding time). Made for
/// `occurring`: which strings occur anywhere, overlaps included, in one pass instead of one
/// substring search per string (llama.cpp's vocabularies cut thousands of user-defined tokens
/// out of each text, one token after the other, longest first).
#[derive(Debug, Clone)]
pub struct LiteralMatcher {
    matcher: AhoCorasick,
    len: usize,
    overlapping: bool,
}

impl LiteralMatcher {
    pub fn new(strings: &[String], overlapping: bool) -> Result<Self> {
        if strings.iter().any(|s| s.is_empty()) {
            return Err(Error::new(ErrorKind::Format, "a string to find must not be empty"));
        }
        // (Only the standard kind reports overlapping matches.)
        let kind = if overlapping { MatchKind::Standard } else { MatchKind::LeftmostLongest };
        let matcher = AhoCorasick::builder()
            .match_kind(kind)
            .build(strings)
            .map_err(|e| Error::new(ErrorKind::Format, format!("strings to find: {e}")))?;
        Ok(LiteralMatcher { matcher, len: strings.len(), overlapping })
    }

    /// The matches in `text` as (start, end, index of the string), in characters, not bytes.
    pub fn find_chars(&self, text: &str) -> Result<Vec<(usize, usize, usize)>> {
        if self.overlapping {
            return Err(Error::new(ErrorKind::Format, "this matcher was made to list the strings that occur"));
        }
        let (mut byte, mut char) = (0, 0);
        let mut to_char = |at: usize| {
            char += text[byte..at].chars().count();
            byte = at;
            char
        };
        Ok(self.matcher.find_iter(text).map(|m| (to_char(m.start()), to_char(m.end()), m.pattern().as_usize())).collect())
    }

    /// The indexes of the strings that occur in `text`, in increasing order.
    pub fn occurring(&self, text: &str) -> Result<Vec<usize>> {
        if !self.overlapping {
            return Err(Error::new(ErrorKind::Format, "this matcher was made to find leftmost-longest matches"));
        }
        let mut seen = vec![false; self.len];
        for m in self.matcher.find_overlapping_iter(text) {
            seen[m.pattern().as_usize()] = true;
        }
        Ok((0..self.len).filter(|&i| seen[i]).collect())
    }
}

/// A text cut at literal strings that each stand for an id of their own (a Hugging Face
/// pipeline's added tokens: Gemma 3 has 6,406, among them `\n` and runs of spaces), found
/// leftmost and then longest as `LiteralMatcher` finds them, with one literal replacement made in
/// the pieces between them (the pipeline's normalizer, e.g. " " -> "▁"). With it a model encodes
/// such a text in one call, where the pipeline went through Python once per piece.
#[derive(Debug, Clone)]
pub struct Cuts {
    /// The strings and their ids, all of them cut out (special tokens that are all allowed).
    strings: SpecialTokens,
    replace: Option<(String, String)>,
}

impl Cuts {
    /// `strings`: each string to cut out and its id; `replace`: (from, to), from not empty.
    pub fn new(strings: Vec<(String, u32)>, replace: Option<(String, String)>) -> Result<Self> {
        if replace.as_ref().is_some_and(|(from, _)| from.is_empty()) {
            return Err(Error::new(ErrorKind::Format, "the string to replace must not be empty"));
        }
        Ok(Cuts { strings: SpecialTokens::new(strings)?, replace })
    }

    /// Calls `f` with each piece of `text` in order: the text between two matches (replaced;
    /// never empty) or a match's id. Stops at the first error of `f`.
    pub fn for_each_piece(&self, text: &str, mut f: impl FnMut(Piece<'_>) -> Result<()>) -> Result<()> {
        let mut result = Ok(());
        self.strings.split(text, |_| true, |piece| {
            if result.is_ok() {
                result = match (piece, &self.replace) {
                    (Piece::Text(t), Some((from, to))) if t.contains(from.as_str()) => f(Piece::Text(&t.replace(from.as_str(), to))),
                    (piece, _) => f(piece),
                };
            }
        });
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces<'t>(s: &SpecialTokens, text: &'t str, allowed: &[u32]) -> Vec<Piece<'t>> {
        let mut out = Vec::new();
        s.split(text, |id| allowed.contains(&id), |p| out.push(p));
        out
    }

    #[test]
    fn cuts_find_leftmost_longest_and_replace_between() {
        let cuts = Cuts::new(vec![("\n".into(), 7), ("  ".into(), 8), ("   ".into(), 9), ("<b>".into(), 10)], Some((" ".into(), "▁".into()))).unwrap();
        let mut got = Vec::new();
        cuts.for_each_piece("a b\n\n   c  <b>d e ", |p| {
            got.push(match p {
                Piece::Text(t) => format!("[{t}]"),
                Piece::Special(id) => id.to_string(),
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(got, ["[a▁b]", "7", "7", "9", "[c]", "8", "10", "[d▁e▁]"]);
        assert!(Cuts::new(vec![(String::new(), 1)], None).is_err());
        assert!(Cuts::new(vec![], Some((String::new(), "x".into()))).is_err());
        let none = Cuts::new(vec![], None).unwrap();
        let mut n = 0;
        none.for_each_piece("", |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn splits_only_at_allowed_specials() {
        let s = SpecialTokens::new(vec![("<|a|>".into(), 7), ("<|b|>".into(), 8)]).unwrap();
        assert_eq!(
            pieces(&s, "x<|a|>y<|b|>z", &[7]),
            vec![Piece::Text("x"), Piece::Special(7), Piece::Text("y<|b|>z")]
        );
        assert_eq!(pieces(&s, "x<|a|>y", &[]), vec![Piece::Text("x<|a|>y")]);
    }

    #[test]
    fn longest_special_wins() {
        let s = SpecialTokens::new(vec![("<|end|>".into(), 1), ("<|end|>x".into(), 2)]).unwrap();
        assert_eq!(pieces(&s, "<|end|>x", &[1, 2]), vec![Piece::Special(2)]);
        // When the longer one is not allowed, the shorter one still applies.
        assert_eq!(pieces(&s, "<|end|>x", &[1]), vec![Piece::Special(1), Piece::Text("x")]);
    }
    #[test]
    fn literal_matcher_is_leftmost_longest_in_characters() {
        let m = LiteralMatcher::new(&["ab".to_string(), "abc".to_string(), "é".to_string(), "c".to_string()], false).unwrap();
        assert_eq!(m.find_chars("éabcabé c").unwrap(), [(0, 1, 2), (1, 4, 1), (4, 6, 0), (6, 7, 2), (8, 9, 3)]);
        assert!(m.find_chars("xyz").unwrap().is_empty());
        assert!(m.occurring("abc").is_err());
        assert!(LiteralMatcher::new(&[String::new()], false).is_err());
    }

    #[test]
    fn literal_set_sees_overlapping_occurrences() {
        let s = LiteralMatcher::new(&["abcd".to_string(), "xab".to_string(), "zz".to_string(), "é".to_string()], true).unwrap();
        assert_eq!(s.occurring("xabcd é").unwrap(), [0, 1, 3]); // "xab" overlaps "abcd": both occur
        assert!(s.occurring("").unwrap().is_empty());
        assert!(s.find_chars("xab").is_err());
    }
}
