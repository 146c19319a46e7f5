//! SentencePiece's normalizer: the precompiled character map (longest rule at each position,
//! left to right; protected strings, SentencePiece's user-defined pieces, first and never
//! rewritten), then its whitespace rules. The same steps as `python/toksmith/formats/
//! sentencepiece.py: SentencePieceNormalizer` and `charsmap.py`, whose comments explain them;
//! here one pass in Rust, where Python went through a regex search, string pieces and several
//! copies of the text per call.

use rustc_hash::{FxHashMap, FxHashSet};

/// What a piece of the mapped text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A character no rule applies to (a run of them, in Python, counts one per character).
    Kept,
    /// The replacement of one rule (possibly empty).
    Replaced,
    /// A protected string.
    Protected,
}

#[derive(Debug, Clone)]
pub struct SentencePieceNormalizer {
    /// Rule sources -> replacements.
    rules: FxHashMap<Box<str>, Box<str>>,
    protected: FxHashSet<Box<str>>,
    /// For each character that starts a rule / a protected string: their lengths in
    /// characters, longest first.
    rule_lengths: FxHashMap<char, Vec<usize>>,
    protected_lengths: FxHashMap<char, Vec<usize>>,
    /// Characters that start a rule or a protected string.
    starts: FxHashSet<char>,
    /// The first and second characters of rules whose first character has no rule alone.
    firsts: FxHashSet<char>,
    seconds: FxHashSet<char>,
    /// ASCII characters in `starts` or `seconds` (a text of other ASCII is all kept).
    ascii_special: [bool; 128],
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
}

fn lengths_by_first<'a>(keys: impl Iterator<Item = &'a str>) -> FxHashMap<char, Vec<usize>> {
    let mut out: FxHashMap<char, Vec<usize>> = FxHashMap::default();
    for k in keys {
        if let Some(c) = k.chars().next() {
            let n = k.chars().count();
            let lengths = out.entry(c).or_default();
            if !lengths.contains(&n) {
                lengths.push(n);
            }
        }
    }
    for lengths in out.values_mut() {
        lengths.sort_unstable_by(|a, b| b.cmp(a));
    }
    out
}

impl SentencePieceNormalizer {
    pub fn new(rules: Vec<(String, String)>, protected: Vec<String>, add_dummy_prefix: bool, remove_extra_whitespaces: bool, escape_whitespaces: bool) -> Self {
        let rules: FxHashMap<Box<str>, Box<str>> = rules.into_iter().filter(|(k, _)| !k.is_empty()).map(|(k, v)| (k.into(), v.into())).collect();
        let protected: FxHashSet<Box<str>> = protected.into_iter().filter(|p| !p.is_empty()).map(Into::into).collect();
        let rule_lengths = lengths_by_first(rules.keys().map(|k| &**k));
        let protected_lengths = lengths_by_first(protected.iter().map(|p| &**p));
        let starts: FxHashSet<char> = rules
            .keys()
            .filter(|k| k.chars().count() == 1)
            .chain(protected.iter())
            .filter_map(|k| k.chars().next())
            .collect();
        let (mut firsts, mut seconds) = (FxHashSet::default(), FxHashSet::default());
        for k in rules.keys() {
            let mut chars = k.chars();
            if let (Some(a), Some(b)) = (chars.next(), chars.next()) {
                if !starts.contains(&a) {
                    firsts.insert(a);
                    seconds.insert(b);
                }
            }
        }
        // (Not `firsts`: such a character matters only before one of `seconds`, found first.)
        let mut ascii_special = [false; 128];
        for c in starts.iter().chain(&seconds) {
            if c.is_ascii() {
                ascii_special[*c as usize] = true;
            }
        }
        SentencePieceNormalizer { rules, protected, rule_lengths, protected_lengths, starts, firsts, seconds, ascii_special, add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces }
    }

    /// The character map's pieces of `text`, in order (kept runs as one piece). As Python's
    /// `PrecompiledCharsmap.pieces`: the next character that starts a rule or is the second
    /// character of a composition is found; a composition is tried from the character before it.
    fn pieces<'t>(&self, text: &'t str) -> Vec<(std::borrow::Cow<'t, str>, Kind)> {
        let mut out = Vec::new();
        let bytes = text.as_bytes();
        // `pos`: where Python's scan stands (past a character no rule matched at); `kept_from`:
        // the start of the kept characters not yet given out; `at`: where the search goes on.
        let (mut pos, mut kept_from, mut at) = (0, 0, 0);
        while at < text.len() {
            let b = bytes[at];
            if b < 0x80 && !self.ascii_special[b as usize] {
                at += 1;
                continue;
            }
            let c = text[at..].chars().next().expect("at a character boundary");
            let j = at;
            let start = match text[..j].chars().next_back() {
                Some(prev) if j > pos && self.firsts.contains(&prev) && self.seconds.contains(&c) => j - prev.len_utf8(),
                _ if self.starts.contains(&c) => j,
                _ => {
                    at += c.len_utf8();
                    continue;
                }
            };
            // The longest protected string, else the longest rule, starting here.
            let found = self
                .longest(text, start, &self.protected_lengths, |s| self.protected.contains(s).then_some(None))
                .map(|(end, _)| (end, std::borrow::Cow::Borrowed(&text[start..end]), Kind::Protected))
                .or_else(|| {
                    self.longest(text, start, &self.rule_lengths, |s| self.rules.get(s).map(|r| Some(&**r)))
                        .map(|(end, r)| (end, std::borrow::Cow::Owned(r.unwrap_or_default().to_string()), Kind::Replaced))
                });
            match found {
                Some((end, piece, kind)) => {
                    if kept_from < start {
                        out.push((text[kept_from..start].into(), Kind::Kept));
                    }
                    out.push((piece, kind));
                    (pos, kept_from, at) = (end, end, end);
                }
                None => {
                    // Only longer rules start here, and none matches: the character is kept.
                    pos = start + text[start..].chars().next().map_or(1, char::len_utf8);
                    at = pos;
                }
            }
        }
        if kept_from < text.len() {
            out.push((text[kept_from..].into(), Kind::Kept));
        }
        out
    }

    /// The longest key of `lengths` (in characters) starting at byte `at` that `get` knows
    /// (Some): its end and what `get` gives for it.
    fn longest<'s>(&'s self, text: &str, at: usize, lengths: &FxHashMap<char, Vec<usize>>, get: impl Fn(&str) -> Option<Option<&'s str>>) -> Option<(usize, Option<&'s str>)> {
        let c = text[at..].chars().next()?;
        for &n in lengths.get(&c)? {
            let Some(len) = text[at..].char_indices().map(|(i, ch)| i + ch.len_utf8()).nth(n - 1) else { continue };
            if let Some(found) = get(&text[at..at + len]) {
                return Some((at + len, found));
            }
        }
        None
    }

    /// `text` normalized: mapped, then SentencePiece's whitespace rules.
    pub fn normalize(&self, text: &str) -> String {
        let mut pieces = self.pieces(text);
        let squeeze = self.remove_extra_whitespaces;
        if squeeze {
            // Leading pieces that are spaces go (kept runs lose their leading spaces).
            let mut first = pieces.len();
            for (i, (piece, kind)) in pieces.iter_mut().enumerate() {
                if *kind == Kind::Kept {
                    let rest = piece.trim_start_matches(' ');
                    if !rest.is_empty() {
                        *piece = rest.to_string().into();
                        first = i;
                        break;
                    }
                } else if piece != " " {
                    first = i;
                    break;
                }
            }
            pieces.drain(..first);
        }
        if pieces.is_empty() {
            return String::new();
        }
        let space = if self.escape_whitespaces { "\u{2581}" } else { " " };
        let mut out = String::with_capacity(text.len() + 16);
        if self.add_dummy_prefix {
            out.push_str(space);
        }
        // A piece loses its leading spaces when the one before ended with a space; a kept run
        // has its runs of spaces made one.
        let mut prev_space = squeeze;
        for (piece, kind) in &pieces {
            let mut piece: &str = piece;
            let squeezed;
            if squeeze {
                if prev_space {
                    piece = piece.trim_start_matches(' ');
                }
                if *kind == Kind::Kept && piece.contains("  ") {
                    squeezed = squeeze_spaces(piece);
                    piece = &squeezed;
                }
                if !piece.is_empty() {
                    prev_space = piece.ends_with(' ');
                }
            }
            if self.escape_whitespaces {
                push_replacing_spaces(&mut out, piece, space);
            } else {
                out.push_str(piece);
            }
        }
        if squeeze {
            let kept = out.trim_end_matches(space).len();
            out.truncate(kept);
        }
        out
    }
}

/// Runs of spaces made one space.
fn squeeze_spaces(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_space = false;
    for c in s.chars() {
        if c != ' ' || !prev_space {
            out.push(c);
        }
        prev_space = c == ' ';
    }
    out
}

fn push_replacing_spaces(out: &mut String, piece: &str, space: &str) {
    let mut from = 0;
    for at in memchr::memchr_iter(b' ', piece.as_bytes()) {
        out.push_str(&piece[from..at]);
        out.push_str(space);
        from = at + 1;
    }
    out.push_str(&piece[from..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_longest_rules_and_squeezes_spaces() {
        let rules = vec![("A\u{300}".to_string(), "À".to_string()), ("ｶ".into(), "カ".into()), ("\u{3000}".into(), " ".into()), ("ﬁ".into(), "fi".into())];
        let n = SentencePieceNormalizer::new(rules.clone(), vec!["<u>".into()], true, true, true);
        assert_eq!(n.normalize("  A\u{300}b  ｶ\u{3000} x ﬁ<u>  "), "▁Àb▁カ▁x▁fi<u>");
        assert_eq!(n.normalize("   "), "");
        assert_eq!(n.normalize("A"), "▁A");
        let plain = SentencePieceNormalizer::new(rules, vec![], false, false, false);
        assert_eq!(plain.normalize(" a  b\u{3000}"), " a  b ");
    }
}
