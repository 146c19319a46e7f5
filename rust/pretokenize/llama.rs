//! llama.cpp's pre-tokenizers of several regexes (its `unicode_regex_split`): each stage splits
//! every piece the stages before it left into its matches and the text between them.
//!
//! The Python side (`formats/llama_cpp_pre.py`, which also keeps the reference in Python) hands
//! over two copies of the text, aligned character for character: `spaced`, where non-ASCII
//! whitespace is `\v` (for regexes without categories), and `collapsed`, where every other
//! non-ASCII character is the code of its category, U+00D0-U+00D5 (for regexes with
//! categories, their `\p{..}` rewritten as classes of those codes). The hand-written matchers
//! (GPT-2's, Llama 3's, Qwen 2's) only ask whether a character is a letter, a number or
//! whitespace, and compare it with ASCII characters, which `collapsed` tells alike.
//! Positions are counted in characters, as Python slices the text.

use crate::error::{Error, ErrorKind, Result};
use fancy_regex::Regex;

/// One stage of splitting.
#[derive(Debug, Clone)]
pub enum Stage {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
    Gpt2,
    /// Llama 3's regex (numbers in runs of up to 3 digits), or Qwen 2's (1 digit).
    Llama3 { max_digits: usize },
    /// `[^\n]+|[\n]+`.
    Newlines,
    /// A regex, run on `collapsed` or on `spaced`.
    Regex { regex: Regex, collapsed: bool },
}

#[derive(Debug, Clone)]
pub struct LlamaSplitter {
    stages: Vec<Stage>,
}

/// A string with the byte offset of each character (and of its end): regexes find byte spans,
/// the pieces are counted in characters.
struct Subject<'a> {
    text: &'a str,
    byte_at: Vec<u32>,
}

impl<'a> Subject<'a> {
    fn new(text: &'a str) -> Self {
        let mut byte_at: Vec<u32> = text.char_indices().map(|(i, _)| i as u32).collect();
        byte_at.push(text.len() as u32);
        Subject { text, byte_at }
    }

    fn chars(&self) -> usize {
        self.byte_at.len() - 1
    }

    /// The character at byte `b` (a character boundary).
    fn char_at(&self, b: usize) -> usize {
        self.byte_at.partition_point(|&x| (x as usize) < b)
    }
}

/// What the hand-written matchers ask of a character.
const LETTER: u8 = 1;
const NUMBER: u8 = 2;
const SPACE: u8 = 4;

/// The class of a character of `collapsed` (ASCII, or a category code).
fn class_of(c: char) -> u8 {
    match c {
        'A'..='Z' | 'a'..='z' | '\u{D2}' => LETTER,
        '0'..='9' | '\u{D1}' => NUMBER,
        '\t'..='\r' | ' ' => SPACE,
        _ => 0,
    }
}

impl LlamaSplitter {
    /// `stages`: (kind, regex, runs on collapsed) with kind "gpt2", "llama3", "qwen2",
    /// "newlines" or "regex" (the regex in the syntax of the `regex` crate, as
    /// `llama_cpp_pre.rust_regex` writes it).
    pub fn new(stages: Vec<(String, String, bool)>) -> Result<Self> {
        let stages = stages
            .into_iter()
            .map(|(kind, regex, collapsed)| {
                Ok(match kind.as_str() {
                    "gpt2" => Stage::Gpt2,
                    "llama3" => Stage::Llama3 { max_digits: 3 },
                    "qwen2" => Stage::Llama3 { max_digits: 1 },
                    "newlines" => Stage::Newlines,
                    "regex" => {
                        let regex = fancy_regex::RegexBuilder::new(&regex)
                            .backtrack_limit(10_000_000)
                            .build()
                            .map_err(|e| Error::new(ErrorKind::Format, format!("pre-tokenizer regex {regex:?} does not compile: {e}")))?;
                        Stage::Regex { regex, collapsed }
                    }
                    other => return Err(Error::new(ErrorKind::Format, format!("unknown llama.cpp splitting stage {other:?}"))),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LlamaSplitter { stages })
    }

    /// The words of the text whose two copies are `spaced` and `collapsed`, as (start, end) in
    /// characters.
    pub fn split(&self, spaced: &str, collapsed: &str) -> Result<Vec<(usize, usize)>> {
        let chars: Vec<char> = collapsed.chars().collect();
        if spaced.chars().count() != chars.len() {
            return Err(Error::new(ErrorKind::Encode, "the two copies of the text differ in length".to_string()));
        }
        if chars.is_empty() {
            return Ok(Vec::new());
        }
        let classes: Vec<u8> = chars.iter().map(|&c| class_of(c)).collect();
        let (mut on_spaced, mut on_collapsed) = (None, None);
        let mut pieces = vec![(0, chars.len())];
        let mut next = Vec::new();
        for stage in &self.stages {
            next.clear();
            match stage {
                Stage::Gpt2 => pieces.iter().for_each(|&(s, e)| gpt2(&chars, &classes, s, e, &mut next)),
                Stage::Llama3 { max_digits } => pieces.iter().for_each(|&(s, e)| llama3(&chars, &classes, s, e, *max_digits, &mut next)),
                Stage::Newlines => pieces.iter().for_each(|&(s, e)| newlines(&chars, s, e, &mut next)),
                Stage::Regex { regex, collapsed: on_codes } => {
                    let subject = if *on_codes { on_collapsed.get_or_insert_with(|| Subject::new(collapsed)) } else { on_spaced.get_or_insert_with(|| Subject::new(spaced)) };
                    debug_assert_eq!(subject.chars(), chars.len());
                    for &(s, e) in &pieces {
                        split_by_regex(regex, subject, s, e, &mut next)?;
                    }
                }
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        Ok(pieces)
    }
}

impl LlamaSplitter {
    /// The words of `text` itself, `spaced` and `collapsed` being its copies (see `split`).
    pub fn words<'t>(&self, text: &'t str, spaced: &str, collapsed: &str) -> Result<Vec<&'t str>> {
        let bounds = self.split(spaced, collapsed)?;
        let mut byte_at: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        byte_at.push(text.len());
        if byte_at.len() != spaced.chars().count() + 1 {
            return Err(Error::new(ErrorKind::Encode, "the copies of the text differ from it in length".to_string()));
        }
        Ok(bounds.into_iter().map(|(s, e)| &text[byte_at[s]..byte_at[e]]).collect())
    }
}

/// The matches of `regex` in the piece [s, e) and the text between them, in order.
fn split_by_regex(regex: &Regex, subject: &Subject, s: usize, e: usize, out: &mut Vec<(usize, usize)>) -> Result<()> {
    let from = subject.byte_at[s] as usize;
    let piece = &subject.text[from..subject.byte_at[e] as usize];
    let mut prev = s;
    for m in regex.find_iter(piece) {
        let m = m.map_err(|e| Error::new(ErrorKind::Encode, format!("pre-tokenizer regex failed: {e}")))?;
        let (ms, me) = (subject.char_at(from + m.start()), subject.char_at(from + m.end()));
        if ms > prev {
            out.push((prev, ms));
        }
        // (An empty match only cuts the text around it.)
        if me > ms {
            out.push((ms, me));
        }
        prev = me;
    }
    if prev < e {
        out.push((prev, e));
    }
    Ok(())
}

/// `[^\n]+|[\n]+` on the piece [s, e).
fn newlines(chars: &[char], s: usize, e: usize, out: &mut Vec<(usize, usize)>) {
    let mut pos = s;
    while pos < e {
        let newline = chars[pos] == '\n';
        let start = pos;
        while pos < e && (chars[pos] == '\n') == newline {
            pos += 1;
        }
        out.push((start, pos));
    }
}

/// llama.cpp's GPT-2 matcher on the piece [s, e) (characters past its ends count as nothing).
fn gpt2(chars: &[char], classes: &[u8], s: usize, e: usize, out: &mut Vec<(usize, usize)>) {
    let class = |i: usize| if i < e { classes[i] } else { 0 };
    // Whether position i holds a character at all (every character is something: a letter, a
    // number, whitespace or other).
    let is = |i: usize| i < e;
    let mut pos = s;
    while pos < e {
        let c = chars[pos];
        if c == '\'' && pos + 1 < e {
            let n = chars[pos + 1];
            if matches!(n, 's' | 't' | 'm' | 'd') {
                out.push((pos, pos + 2));
                pos += 2;
                continue;
            }
            if pos + 2 < e && matches!((n, chars[pos + 2]), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                out.push((pos, pos + 3));
                pos += 3;
                continue;
            }
        }
        let (at, f2) = if c == ' ' { (pos + 1, class(pos + 1)) } else { (pos, class(pos)) };
        if f2 & (LETTER | NUMBER) != 0 {
            let kind = f2 & (LETTER | NUMBER);
            let start = pos;
            pos = at;
            while class(pos) & kind != 0 {
                pos += 1;
            }
            out.push((start, pos));
            continue;
        }
        if is(at) && f2 & (SPACE | LETTER | NUMBER) == 0 {
            let start = pos;
            pos = at;
            while is(pos) && class(pos) & (SPACE | LETTER | NUMBER) == 0 {
                pos += 1;
            }
            out.push((start, pos));
            continue;
        }
        let mut n_ws = 0;
        while class(pos + n_ws) & SPACE != 0 {
            n_ws += 1;
        }
        pos = push_space_run(pos, n_ws, e, out);
    }
}

/// `\s+(?!\S)|\s+` at `pos`, where a run of `n_ws` whitespace characters starts (a piece of
/// the piece [.., e)): a run that a character follows leaves its last space to that
/// character's word. With `n_ws` 0, the one character at `pos`. Returns the end.
fn push_space_run(pos: usize, n_ws: usize, e: usize, out: &mut Vec<(usize, usize)>) -> usize {
    let end = if n_ws > 1 && pos + n_ws < e { pos + n_ws - 1 } else { pos + n_ws.max(1) };
    out.push((pos, end));
    end
}

/// llama.cpp's Llama 3 matcher (`max_digits` 3; Qwen 2's with 1) on the piece [s, e).
fn llama3(chars: &[char], classes: &[u8], s: usize, e: usize, max_digits: usize, out: &mut Vec<(usize, usize)>) {
    let class = |i: usize| if i < e { classes[i] } else { 0 };
    let is = |i: usize| i < e;
    let newline = |i: usize| i < e && matches!(chars[i], '\r' | '\n');
    let lower = |c: char| c.to_ascii_lowercase();
    let mut pos = s;
    while pos < e {
        let c = chars[pos];
        let fc = class(pos);
        if c == '\'' && pos + 1 < e {
            let n = lower(chars[pos + 1]);
            if matches!(n, 's' | 't' | 'm' | 'd') {
                out.push((pos, pos + 2));
                pos += 2;
                continue;
            }
            if pos + 2 < e && matches!((n, lower(chars[pos + 2])), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                out.push((pos, pos + 3));
                pos += 3;
                continue;
            }
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !(matches!(c, '\r' | '\n') || fc & NUMBER != 0) && (fc & LETTER != 0 || class(pos + 1) & LETTER != 0) {
            let start = pos;
            pos += 1;
            while class(pos) & LETTER != 0 {
                pos += 1;
            }
            out.push((start, pos));
            continue;
        }
        // \p{N}{1,k}
        if fc & NUMBER != 0 {
            let start = pos;
            while class(pos) & NUMBER != 0 && pos - start < max_digits {
                pos += 1;
            }
            out.push((start, pos));
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*` (a space at the piece's end included, as llama.cpp has it)
        let (at, f2) = if c == ' ' { (pos + 1, class(pos + 1)) } else { (pos, fc) };
        if f2 & (SPACE | LETTER | NUMBER) == 0 {
            let start = pos;
            pos = at;
            while is(pos) && class(pos) & (SPACE | LETTER | NUMBER) == 0 {
                pos += 1;
            }
            while newline(pos) {
                pos += 1;
            }
            out.push((start, pos));
            continue;
        }
        let (mut n_ws, mut last_newline) = (0, 0);
        while class(pos + n_ws) & SPACE != 0 {
            if matches!(chars[pos + n_ws], '\r' | '\n') {
                last_newline = pos + n_ws + 1;
            }
            n_ws += 1;
        }
        if last_newline > 0 {
            // \s*[\r\n]+
            out.push((pos, last_newline));
            pos = last_newline;
        } else {
            pos = push_space_run(pos, n_ws, e, out);
        }
    }
}

/// GPT-2's printable character for each byte (`Ġ` for a space): the byte-level alphabet that
/// llama.cpp's byte-level vocabularies are written in.
pub fn byte_level_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        table[b as usize] = if printable {
            char::from_u32(b).expect("a Latin-1 code point")
        } else {
            next += 1;
            char::from_u32(next - 1).expect("a code point below 0x200")
        };
    }
    table
}
