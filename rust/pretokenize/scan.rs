//! Hand-written scanners giving exactly the chunks of the named regexes, in one forward pass
//! without backtracking. Each `*_end` function returns where the chunk starting at byte `i`
//! ends; its comments quote the alternatives of the regex it stands for, in the regex's order
//! (the regex engine takes the first alternative that matches, as these functions do).

use super::classes::{classes, Classes, LETTER, LOWER, NEWLINE, NUMBER, OTHER, PREFIX, SPACE, UPPER};
use super::ChunkSink;

/// Which regex a scanner reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// GPT-2's pattern and tiktoken's r50k one (the same chunks).
    Gpt2,
    Cl100k,
    O200k,
    /// Llama 3 (digits in groups of up to three) and Qwen 2 (single digits).
    Llama3,
    Qwen2,
}

#[derive(Debug, Clone, Copy)]
pub struct Scanner {
    kind: Kind,
    classes: &'static Classes,
}

impl Scanner {
    pub fn new(kind: Kind) -> Self {
        Scanner { kind, classes: classes() }
    }

    /// Gives each chunk of `text` to `sink`, in order; the chunks cover all of it.
    #[inline]
    pub fn for_each_chunk<'t, S: ChunkSink<'t>>(&self, text: &'t str, sink: S) {
        let s = Text { b: text.as_bytes(), t: self.classes };
        // One loop per pattern, so that its common cases are inlined into the loop, and the
        // loop's state stays in registers (the uncommon ones are functions of their own).
        match self.kind {
            Kind::Gpt2 => chunk_loop(&s, text, sink, |s, i| s.gpt2_end(i)),
            Kind::Cl100k => chunk_loop(&s, text, sink, |s, i| s.cl100k_end(i)),
            Kind::O200k => chunk_loop(&s, text, sink, |s, i| s.o200k_end(i)),
            Kind::Llama3 => chunk_loop(&s, text, sink, |s, i| s.llama3_end(i, 3)),
            Kind::Qwen2 => chunk_loop(&s, text, sink, |s, i| s.llama3_end(i, 1)),
        }
    }
}

/// Gives each chunk of `text` to `sink`, where `end_of(s, i)` is the end of the chunk at `i`.
#[inline(always)]
fn chunk_loop<'t, S: ChunkSink<'t>>(s: &Text, text: &'t str, mut sink: S, end_of: impl Fn(&Text, usize) -> usize) {
    let mut start = 0;
    while start < text.len() {
        let end = end_of(s, start);
        // (Checked in release builds too: two compares per chunk make the slice below sound
        // whatever a scanner returns.)
        assert!(end > start && text.is_char_boundary(end), "a scanner ended a chunk badly at byte {end}");
        // SAFETY: start < end <= len and both are char boundaries of `text` (start is 0 or the
        // previous end), by the assert above.
        sink.chunk(unsafe { text.get_unchecked(start..end) });
        start = end;
    }
}

/// The end of the run of bytes from `k` that are ASCII letters (`fold` = 0x20: either case) or
/// lowercase letters (`fold` = 0). Sixteen bytes at a time where the text has them: one compare
/// and a count of trailing bits instead of a loop whose exit, at a word's random length, the
/// CPU mispredicts once a word.
#[inline(always)]
fn ascii_letters_end(b: &[u8], mut k: usize, fold: u8) -> usize {
    #[cfg(target_arch = "x86_64")]
    while k + 16 <= b.len() {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86_64; the load reads b[k..k + 16], inside `b`.
        let mask = unsafe {
            let v = _mm_or_si128(_mm_loadu_si128(b.as_ptr().add(k) as *const __m128i), _mm_set1_epi8(fold as i8));
            // Bytes of 0x80 and above are negative as i8, so never in 'a'..='z'.
            let in_range = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8(b'a' as i8 - 1)), _mm_cmplt_epi8(v, _mm_set1_epi8(b'z' as i8 + 1)));
            _mm_movemask_epi8(in_range) as u32
        };
        let run = (!mask).trailing_zeros() as usize;
        k += run;
        if run < 16 {
            return k;
        }
    }
    while k < b.len() && (b[k] | fold).is_ascii_lowercase() {
        k += 1;
    }
    k
}

/// From `k`: the end of the run of ASCII capitals, and the end of the run of small ASCII
/// letters after it ("McDonald" -> after "M", after "Mc"). Both from one 16-byte load where the
/// text has 16 bytes and the two runs end within them.
#[inline(always)]
fn ascii_case_runs(b: &[u8], k: usize) -> (usize, usize) {
    #[cfg(target_arch = "x86_64")]
    if k + 16 <= b.len() {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86_64; the load reads b[k..k + 16], inside `b`.
        let (upper, lower) = unsafe {
            let v = _mm_loadu_si128(b.as_ptr().add(k) as *const __m128i);
            let within = |lo: u8, hi: u8| {
                let m = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8(lo as i8 - 1)), _mm_cmplt_epi8(v, _mm_set1_epi8(hi as i8 + 1)));
                _mm_movemask_epi8(m) as u32
            };
            (within(b'A', b'Z'), within(b'a', b'z'))
        };
        let n_upper = (!upper).trailing_zeros();
        // Bits past the 16 bytes are 0 in `lower`, so this count stops at the window's end.
        let n_lower = (!(lower >> n_upper)).trailing_zeros();
        if n_upper + n_lower < 16 {
            return (k + n_upper as usize, k + (n_upper + n_lower) as usize);
        }
    }
    let mut j = k;
    while j < b.len() && b[j].is_ascii_uppercase() {
        j += 1;
    }
    (j, ascii_letters_end(b, j, 0))
}

/// A text being scanned, with the class table.
struct Text<'a> {
    b: &'a [u8],
    t: &'static Classes,
}

/// A maximal run of whitespace.
struct Spaces {
    /// where the run ends
    end: usize,
    /// where its last char starts
    last: usize,
    /// just after its last `\r` or `\n`, if it has one
    after_newline: Option<usize>,
}

impl Text<'_> {
    #[inline(always)]
    fn at(&self, i: usize) -> (u8, usize) {
        self.t.at(self.b, i)
    }

    /// The end of the run of chars from `i` that have a flag in `class` (possessive and greedy
    /// alike: nothing after a run in these patterns can make the engine give chars back).
    #[inline(always)]
    fn run(&self, mut i: usize, class: u8) -> usize {
        loop {
            let (f, len) = self.at(i);
            if f & class == 0 {
                return i;
            }
            i += len;
        }
    }

    /// Like `run`, but at most `max` chars (`\p{N}{1,3}`).
    #[inline(always)]
    fn run_max(&self, mut i: usize, class: u8, max: usize) -> usize {
        for _ in 0..max {
            let (f, len) = self.at(i);
            if f & class == 0 {
                break;
            }
            i += len;
        }
        i
    }

    /// ` ?X`: just after the space at `i` if a char of `class` follows it, else `i`.
    #[inline(always)]
    fn skip_space(&self, i: usize, class: u8) -> usize {
        if self.b[i] == b' ' && self.at(i + 1).0 & class != 0 {
            i + 1
        } else {
            i
        }
    }

    fn spaces(&self, i: usize) -> Spaces {
        let (mut end, mut last, mut after_newline) = (i, i, None);
        loop {
            let (f, len) = self.at(end);
            if f & SPACE == 0 {
                return Spaces { end, last, after_newline };
            }
            if f & NEWLINE != 0 {
                after_newline = Some(end + len);
            }
            last = end;
            end += len;
        }
    }

    /// An ASCII letter at `i`; lowercased when ignoring case, where U+017F (long s) counts as
    /// an s, because the regex engine's case folding maps it to s.
    #[inline]
    fn letter(&self, i: usize, ignore_case: bool) -> Option<(u8, usize)> {
        let c = *self.b.get(i)?;
        if c.is_ascii_alphabetic() {
            Some((if ignore_case { c.to_ascii_lowercase() } else { c }, 1))
        } else if ignore_case && self.b[i..].starts_with("\u{17f}".as_bytes()) {
            Some((b's', 2))
        } else {
            None
        }
    }

    /// `'(?:[sdmt]|ll|ve|re)` at `i` (case-insensitive or not): the end of the contraction.
    fn contraction(&self, i: usize, ignore_case: bool) -> Option<usize> {
        if self.b.get(i) != Some(&b'\'') {
            return None;
        }
        let (c, len) = self.letter(i + 1, ignore_case)?;
        let j = i + 1 + len;
        let second = match c {
            b's' | b'd' | b'm' | b't' => return Some(j),
            b'l' => b'l',
            b'v' | b'r' => b'e',
            _ => return None,
        };
        let (c2, len2) = self.letter(j, ignore_case)?;
        (c2 == second).then_some(j + len2)
    }

    /// r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", and tiktoken's
    /// r50k form r"...| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s": the same chunks.
    fn gpt2_end(&self, i: usize) -> usize {
        if let Some(end) = self.contraction(i, false) {
            return end;
        }
        for class in [LETTER, NUMBER, OTHER] {
            let k = self.skip_space(i, class);
            if self.at(k).0 & class != 0 {
                return self.run(k, class);
            }
        }
        // Whitespace. `\s+(?!\S)`: the whole run at the end of the text, else all of it but
        // its last char (left to start the next chunk); `\s+`: a single char before a non-space.
        let s = self.spaces(i);
        if s.end == self.b.len() || s.last == i {
            s.end
        } else {
            s.last
        }
    }

    /// r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"
    /// The alternatives of cl100k (and Llama 3 / Qwen 2) before the whitespace ones:
    /// `'(?i:[sdmt]|ll|ve|re)`, `[^\r\n\p{L}\p{N}]?+\p{L}++` (letters after at most one char that
    /// is not one), `\p{N}{1,max_digits}`, ` ?[^\s\p{L}\p{N}]++[\r\n]*+`. None: a whitespace chunk.
    #[inline(always)]
    fn cl100k_non_space(&self, i: usize, max_digits: usize) -> Option<usize> {
        if let Some(end) = self.contraction(i, true) {
            return Some(end);
        }
        let (f, len) = self.at(i);
        // A run of letters: its ASCII part 16 bytes at a time, then char by char.
        if f & LETTER != 0 {
            return Some(self.run(ascii_letters_end(self.b, i, 0x20), LETTER));
        }
        if f & PREFIX != 0 && self.at(i + len).0 & LETTER != 0 {
            return Some(self.run(ascii_letters_end(self.b, i + len, 0x20), LETTER));
        }
        if f & NUMBER != 0 {
            return Some(self.run_max(i, NUMBER, max_digits));
        }
        let k = self.skip_space(i, OTHER);
        if self.at(k).0 & OTHER != 0 {
            let end = self.run(k, OTHER);
            return Some(self.run(end, NEWLINE));
        }
        None
    }

    #[inline(always)]
    fn cl100k_end(&self, i: usize) -> usize {
        if let Some(end) = self.cl100k_non_space(i, 3) {
            return end;
        }
        // Whitespace, in the regex's order: `\s++$` the whole run at the end of the text;
        // `\s*[\r\n]` up to its last newline; `\s+(?!\S)` all but its last char; `\s` one char.
        let s = self.spaces(i);
        if s.end == self.b.len() {
            s.end
        } else if let Some(end) = s.after_newline {
            end
        } else if s.last > i {
            s.last
        } else {
            s.end
        }
    }

    /// r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,n}| ?[^\s\p{L}\p{N}]+[\r\n]*|
    /// \s*[\r\n]+|\s+(?!\S)|\s+" (Llama 3 with n = 3, Qwen 2 with n = 1): cl100k's rules for
    /// contractions, words, numbers and symbols (possessive or not makes no difference there),
    /// o200k's for whitespace.
    fn llama3_end(&self, i: usize, max_digits: usize) -> usize {
        self.cl100k_non_space(i, max_digits).unwrap_or_else(|| self.o200k_spaces_end(i))
    }

    /// The o200k regex (see `O200K_PATTERN`): two word alternatives
    /// `P?U*W+C?` and `P?U+W*C?`, with P = [^\r\n\p{L}\p{N}], U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}],
    /// W = [\p{Ll}\p{Lm}\p{Lo}\p{M}], C = (?i:'s|'t|'re|'ve|'m|'ll|'d); then `\p{N}{1,3}`,
    /// ` ?[^\s\p{L}\p{N}]+[\r\n/]*`, `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`.
    #[inline(always)]
    fn o200k_end(&self, i: usize) -> usize {
        if let Some(end) = self.o200k_ascii_word(i) {
            return end;
        }
        if let Some(end) = self.o200k_ascii_other(i) {
            return end;
        }
        self.o200k_general(i)
    }

    /// `o200k_end` where its ASCII shortcuts do not decide: all alternatives, in order.
    #[inline(never)]
    fn o200k_general(&self, i: usize) -> usize {
        let (f, len) = self.at(i);
        // `P?` is greedy: each word form is tried with the char at i as the prefix, then (the
        // engine backtracking) without. Only a mark can be both the prefix and part of a word
        // (marks are in P, U and W); from a mark the forms reach as far as from the char after
        // it (it joins the U run, and is a W char itself), so starting at the mark gives what
        // the first try gives, or what the second gives when the first fails. Both forms start
        // with a U or W char, so when neither start has one (punctuation, symbols, digits,
        // spaces), no word is tried.
        let word_start = if f & (UPPER | LOWER) != 0 {
            Some(i)
        } else if f & PREFIX != 0 && self.at(i + len).0 & (UPPER | LOWER) != 0 {
            Some(i + len)
        } else {
            None
        };
        if let Some(end) = word_start.and_then(|k| self.word_forms(k)) {
            return self.contraction(end, true).unwrap_or(end);
        }
        if f & NUMBER != 0 {
            return self.run_max(i, NUMBER, 3);
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
        let k = self.skip_space(i, OTHER);
        if self.at(k).0 & OTHER != 0 {
            let mut end = self.run(k, OTHER);
            while matches!(self.b.get(end), Some(b'\r' | b'\n' | b'/')) {
                end += 1;
            }
            return end;
        }
        self.o200k_spaces_end(i)
    }

    /// o200k's (and Llama 3's) whitespace alternatives: `\s*[\r\n]+` up to the run's last
    /// newline; `\s+(?!\S)` the whole run at the end of the text, else all but its last char;
    /// `\s+` one char before a non-space.
    fn o200k_spaces_end(&self, i: usize) -> usize {
        let s = self.spaces(i);
        if let Some(end) = s.after_newline {
            end
        } else if s.end == self.b.len() || s.last == i {
            s.end
        } else {
            s.last
        }
    }

    /// The common case of `o200k_end`, a word starting in ASCII: an optional prefix char (ASCII,
    /// not a letter, digit, `\r` or `\n`), capitals then small letters (the small letters may go
    /// on in non-ASCII ones: "café"), an optional contraction. None when the chunk is not such a
    /// word, or when a non-ASCII char follows the capitals directly (it could be a capital, a
    /// small letter or a mark, each extending the word differently): the general path decides.
    #[inline(always)]
    fn o200k_ascii_word(&self, i: usize) -> Option<usize> {
        let b = self.b;
        let c = *b.get(i)?;
        if !c.is_ascii() || c.is_ascii_digit() || c == b'\r' || c == b'\n' {
            return None;
        }
        let start = if c.is_ascii_alphabetic() {
            i
        } else if b.get(i + 1).is_some_and(|n| n.is_ascii_alphabetic()) {
            i + 1
        } else {
            // No ASCII letter to start a word at (spaces, punctuation): none of the 16-byte
            // work below, whose answer would be the same.
            return None;
        };
        // `start` is at an ASCII letter, so the runs take at least that one.
        let (upper_end, k) = ascii_case_runs(b, start);
        debug_assert!(k > start);
        if b.get(k).is_some_and(|c| !c.is_ascii()) {
            // After small letters, `U*W+` is decided (its U* ended at the first small letter):
            // the W run goes on over the non-ASCII chars ("caf" + "é"). Else the general path.
            if k == upper_end {
                return None;
            }
            let end = self.run(k, LOWER);
            return Some(self.contraction(end, true).unwrap_or(end));
        }
        // `U*W+` when small letters follow the capitals, else `U+W*` (W* empty here).
        let end = if k > upper_end { k } else { upper_end };
        Some(self.contraction(end, true).unwrap_or(end))
    }

    /// The other common chunks of `o200k_end` (digits, punctuation, whitespace), decided
    /// without trying the word forms: an ASCII char at `i` that `o200k_ascii_word` did not take,
    /// followed by an ASCII char that is no letter (or by the end). Neither word form can match
    /// there: `P?` may take the char at `i`, but no letter or mark follows it, and the char
    /// itself is none (else `o200k_ascii_word` would have matched). None: the general path.
    #[inline(always)]
    fn o200k_ascii_other(&self, i: usize) -> Option<usize> {
        let b = self.b;
        let c = b[i];
        if !c.is_ascii() || b.get(i + 1).is_some_and(|n| !n.is_ascii() || n.is_ascii_alphabetic()) {
            return None;
        }
        if c.is_ascii_digit() {
            return Some(self.run_max(i, NUMBER, 3));
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
        let k = if c == b' ' { i + 1 } else { i };
        if self.at(k).0 & OTHER != 0 {
            let mut end = self.run(k, OTHER);
            while matches!(b.get(end), Some(b'\r' | b'\n' | b'/')) {
                end += 1;
            }
            return Some(end);
        }
        Some(self.o200k_spaces_end(i))
    }

    /// The end of the first word form that matches from `k`: `U*W+` as the backtracking engine
    /// matches it, else `U+W*`. The greedy `U*` takes the whole run of U chars; if a W char
    /// follows, `W+` takes the W run from there. Otherwise `U*` gives chars back until `W+` can
    /// start, i.e. at the run's last W char (U and W overlap), and `W+` stops right after it.
    /// When that fails too, the run has no W char and none follows it: `U+W*` is the run itself,
    /// if it is not empty. One pass over the word for both forms.
    #[inline(always)]
    fn word_forms(&self, k: usize) -> Option<usize> {
        let (mut j, mut after_last_lower) = (k, None);
        loop {
            let (f, len) = self.at(j);
            if f & UPPER == 0 {
                break;
            }
            if f & LOWER != 0 {
                after_last_lower = Some(j + len);
            }
            j += len;
        }
        if self.at(j).0 & LOWER != 0 {
            return Some(self.run(j, LOWER));
        }
        after_last_lower.or((j > k).then_some(j))
    }
}
