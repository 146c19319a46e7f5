//! Character classes for the hand-written scanners, one byte of flags per code point.
//!
//! The tables are built (once, lazily) from regex-syntax, the crate that parses the character
//! classes of fancy-regex's patterns, so `\p{L}`, `\p{N}`, `\s`, ... mean exactly what they
//! mean to the regex engine, whatever Unicode version that crate carries.

use std::sync::OnceLock;

/// `\p{L}`
pub const LETTER: u8 = 1;
/// `\p{N}`
pub const NUMBER: u8 = 1 << 1;
/// `\s` (Unicode White_Space)
pub const SPACE: u8 = 1 << 2;
/// `[^\s\p{L}\p{N}]`: punctuation, symbols, marks, controls, ...
pub const OTHER: u8 = 1 << 3;
/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`: o200k's "upper" part of a word
pub const UPPER: u8 = 1 << 4;
/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`: o200k's "lower" part of a word
pub const LOWER: u8 = 1 << 5;
/// `[\r\n]`
pub const NEWLINE: u8 = 1 << 6;
/// `[^\r\n\p{L}\p{N}]`: the optional one-character prefix of a word in cl100k and o200k
pub const PREFIX: u8 = 1 << 7;

/// Flags of every code point: a two-level table (blocks of 256 code points, identical blocks
/// shared), plus a direct table for ASCII, the fast path.
pub struct Classes {
    ascii: [u8; 128],
    /// Flags of U+0080..U+07FF (the two-byte chars: Latin, Greek, Cyrillic, Hebrew, Arabic...),
    /// direct: one load instead of the two of the block table.
    two_byte: [u8; 0x800],
    /// `code point >> 8` -> index of its block in `blocks`
    index: Vec<u16>,
    /// the distinct blocks, 256 flag bytes each, one after the other
    blocks: Vec<u8>,
}

impl std::fmt::Debug for Classes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Classes({} distinct blocks)", self.blocks.len() / 256)
    }
}

/// The shared table, built on first use (a few milliseconds).
pub fn classes() -> &'static Classes {
    static TABLE: OnceLock<Classes> = OnceLock::new();
    TABLE.get_or_init(Classes::build)
}

/// The code point ranges of a character class, as the regex engine's parser sees it.
pub(crate) fn class_ranges(class: &str) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{Class, HirKind};
    let hir = regex_syntax::Parser::new().parse(class).expect("the scanner's classes are valid regexes");
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => c.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect(),
        HirKind::Literal(lit) => {
            let c = std::str::from_utf8(&lit.0).expect("a literal char").chars().next().expect("one char") as u32;
            vec![(c, c)]
        }
        other => panic!("{class:?} is not a character class: {other:?}"),
    }
}

impl Classes {
    fn build() -> Classes {
        const MAX: usize = 0x110000;
        let mut flat = vec![0u8; MAX];
        let sets = [
            (LETTER, r"\p{L}"),
            (NUMBER, r"\p{N}"),
            (SPACE, r"\s"),
            (OTHER, r"[^\s\p{L}\p{N}]"),
            (UPPER, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"),
            (LOWER, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"),
            (NEWLINE, r"[\r\n]"),
            (PREFIX, r"[^\r\n\p{L}\p{N}]"),
        ];
        for (flag, class) in sets {
            for (start, end) in class_ranges(class) {
                for f in &mut flat[start as usize..=end as usize] {
                    *f |= flag;
                }
            }
        }
        let mut index = Vec::with_capacity(MAX >> 8);
        let mut blocks: Vec<u8> = Vec::new();
        let mut seen: std::collections::HashMap<&[u8], u16> = std::collections::HashMap::new();
        for block in flat.chunks(256) {
            let id = *seen.entry(block).or_insert_with(|| {
                blocks.extend_from_slice(block);
                (blocks.len() / 256 - 1) as u16
            });
            index.push(id);
        }
        let mut ascii = [0u8; 128];
        ascii.copy_from_slice(&flat[..128]);
        let mut two_byte = [0u8; 0x800];
        two_byte.copy_from_slice(&flat[..0x800]);
        Classes { ascii, two_byte, index, blocks }
    }

    /// Flags of a code point.
    #[inline]
    pub fn of(&self, cp: u32) -> u8 {
        let block = self.index[(cp >> 8) as usize] as usize;
        self.blocks[(block << 8) | (cp & 0xff) as usize]
    }

    /// Flags and UTF-8 length of the char starting at byte `i` of `b` (a valid UTF-8 text, `i`
    /// a char boundary); `(0, 0)` at the end, so that every class test fails there.
    #[inline(always)]
    pub fn at(&self, b: &[u8], i: usize) -> (u8, usize) {
        match b.get(i) {
            None => (0, 0),
            Some(&c) if c < 0x80 => (self.ascii[c as usize], 1),
            Some(&c) if c < 0xe0 => {
                let cp = ((c as usize & 0x1f) << 6) | (b[i + 1] as usize & 0x3f);
                (self.two_byte[cp], 2)
            }
            Some(_) => {
                let (cp, len) = decode(b, i);
                (self.of(cp), len)
            }
        }
    }
}

/// Decodes the non-ASCII char starting at `b[i]`; `b` is valid UTF-8.
#[inline(always)]
fn decode(b: &[u8], i: usize) -> (u32, usize) {
    let b0 = b[i] as u32;
    let cont = |k: usize| (b[i + k] & 0x3f) as u32;
    if b0 < 0xe0 {
        (((b0 & 0x1f) << 6) | cont(1), 2)
    } else if b0 < 0xf0 {
        (((b0 & 0x0f) << 12) | (cont(1) << 6) | cont(2), 3)
    } else {
        (((b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3), 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_of_some_chars() {
        let t = classes();
        let f = |c: char| {
            let mut buf = [0u8; 4];
            t.at(c.encode_utf8(&mut buf).as_bytes(), 0).0
        };
        assert_eq!(f('a'), LETTER | LOWER);
        assert_eq!(f('A'), LETTER | UPPER);
        assert_eq!(f('7'), NUMBER);
        assert_eq!(f(' '), SPACE | PREFIX);
        assert_eq!(f('\n'), SPACE | NEWLINE);
        assert_eq!(f('!'), OTHER | PREFIX);
        assert_eq!(f('\u{0301}'), OTHER | PREFIX | UPPER | LOWER); // a combining mark
        assert_eq!(f('中'), LETTER | UPPER | LOWER); // Lo
        assert_eq!(f('\u{01C5}'), LETTER | UPPER); // Lt
        assert_eq!(f('\u{00A0}'), SPACE | PREFIX);
        assert_eq!(f('\u{0663}'), NUMBER); // Arabic-Indic three
        assert_eq!(f('😀'), OTHER | PREFIX);
        assert_eq!(t.at(b"x", 1), (0, 0));
    }

    #[test]
    fn every_char_decodes_to_its_flags() {
        let t = classes();
        let mut buf = [0u8; 4];
        for c in (0..0x110000u32).filter_map(char::from_u32) {
            let s = c.encode_utf8(&mut buf);
            assert_eq!(t.at(s.as_bytes(), 0), (t.of(c as u32), s.len()), "{c:?}");
        }
    }
}
