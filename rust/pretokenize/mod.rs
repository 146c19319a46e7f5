//! Pre-tokenization: split text into chunks with a regex; BPE merges never cross a chunk.
//!
//! The named patterns (GPT-2/r50k, cl100k, o200k) are run by hand-written scanners
//! (`scan.rs`) that give exactly the regex's chunks in one pass; any other pattern runs on
//! fancy-regex.

pub mod bert;
mod classes;
mod scan;
pub mod llama;
#[cfg(test)]
mod fuzz;

use crate::error::{Error, ErrorKind, Result};
use fancy_regex::Regex;
use scan::{Kind, Scanner};

/// What takes the chunks of a text, one by one, in order. Closures `FnMut(&str)` are sinks; a
/// type of its own can mark its `chunk` `#[inline(always)]`, so that it is inlined into the
/// scanner's loop (the encoder's hot path), which a closure cannot ask for.
pub trait ChunkSink<'t> {
    fn chunk(&mut self, chunk: &'t str);
}

impl<'t, F: FnMut(&'t str)> ChunkSink<'t> for F {
    #[inline(always)]
    fn chunk(&mut self, chunk: &'t str) {
        self(chunk)
    }
}

/// A compiled pre-tokenization pattern.
///
/// fancy-regex is used for custom patterns because the standard ones need lookahead
/// (`\s+(?!\S)`). Its backtracking limit is raised so that long runs of one character
/// (1 MB of spaces) are split rather than refused; still, a regex that backtracks over such a
/// run (the o200k one, run on fancy-regex, on about 1M letters) hits its stack limit and fails.
#[derive(Debug, Clone)]
pub struct Pretokenizer {
    engine: Engine,
    pattern: String,
}

#[derive(Debug, Clone)]
enum Engine {
    /// A named pattern, recognised by its exact regex string.
    Scanner(Scanner),
    /// `SPACE_WORDS_PATTERN`, or its form that keeps a run of "▁" with the word before it after
    /// these characters (see `space_words_joined`).
    SpaceWords(Vec<char>),
    Regex(Regex),
}

/// The words of SentencePiece-style text (`python/toksmith/models.py: word_split_pattern`): a
/// run of "▁" and what follows up to the next "▁", or a run of "▁" at the end. Each chunk ends
/// right before a "▁" that follows another character, which a byte search finds faster than
/// the regex engine (its forward and backward passes took a fifth of Mistral 7B's encoding).
pub const SPACE_WORDS_PATTERN: &str = "▁*[^▁]+|▁+";

/// The characters `c` of `▁*(?:[c...]▁*|[^▁c...])+|▁+`, with each `c` written `\UXXXXXXXX`,
/// the form `word_split_pattern` gives when some token holds `c▁` (Gemma 3: `>▁</`): a run of
/// "▁" after such a character stays in the word before it. None for any other pattern.
fn space_words_joined(pattern: &str) -> Option<Vec<char>> {
    let rest = pattern.strip_prefix("▁*(?:[")?.strip_suffix("])+|▁+")?;
    let (first, second) = rest.split_once("]▁*|[^▁")?;
    if first != second || first.is_empty() || first.len() % 10 != 0 {
        return None;
    }
    (0..first.len() / 10)
        .map(|k| {
            let escape = first.get(10 * k..10 * k + 10)?;
            let hex = escape.strip_prefix("\\U")?;
            char::from_u32(u32::from_str_radix(hex, 16).ok()?).filter(|&c| c != '▁')
        })
        .collect()
}

/// `SPACE_WORDS_PATTERN`'s chunks of `text`, where a "▁" after one of `joined` does not start
/// a chunk either.
fn for_each_space_word<'t, S: ChunkSink<'t>>(text: &'t str, joined: &[char], sink: &mut S) {
    const SPACE: &[u8] = "▁".as_bytes();
    let bytes = text.as_bytes();
    let mut start = 0;
    for at in memchr::memmem::find_iter(bytes, SPACE) {
        // UTF-8 synchronises: the 3 bytes before `at` are "▁" only if the character before is.
        if at > start && (at < SPACE.len() || bytes[at - SPACE.len()..at] != *SPACE)
            && (joined.is_empty() || !text[..at].chars().next_back().is_some_and(|c| joined.contains(&c)))
        {
            sink.chunk(&text[start..at]);
            start = at;
        }
    }
    if start < text.len() {
        sink.chunk(&text[start..]);
    }
}

/// The scanner that reproduces `pattern`, if it is one of the named regexes.
fn scanner_for(pattern: &str) -> Option<Kind> {
    match pattern {
        GPT2_PATTERN | R50K_PATTERN => Some(Kind::Gpt2),
        CL100K_PATTERN => Some(Kind::Cl100k),
        O200K_PATTERN => Some(Kind::O200k),
        LLAMA3_PATTERN => Some(Kind::Llama3),
        QWEN2_PATTERN => Some(Kind::Qwen2),
        _ => None,
    }
}

impl Pretokenizer {
    /// Compiles `pattern`; the named regexes get their scanner, others run on fancy-regex.
    pub fn new(pattern: &str) -> Result<Self> {
        match scanner_for(pattern) {
            Some(kind) => Ok(Pretokenizer { engine: Engine::Scanner(Scanner::new(kind)), pattern: pattern.to_string() }),
            None if pattern == SPACE_WORDS_PATTERN => Ok(Pretokenizer { engine: Engine::SpaceWords(Vec::new()), pattern: pattern.to_string() }),
            None => match space_words_joined(pattern) {
                // Compiled too, so that a pattern the regex engine refuses is still refused.
                Some(joined) => Self::with_regex(pattern).map(|p| Pretokenizer { engine: Engine::SpaceWords(joined), ..p }),
                None => Self::with_regex(pattern),
            },
        }
    }

    /// Always runs `pattern` on fancy-regex, even a named one: the reference for the scanners.
    pub fn with_regex(pattern: &str) -> Result<Self> {
        let regex = fancy_regex::RegexBuilder::new(pattern)
            .backtrack_limit(100_000_000)
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::InvalidPattern,
                    format!("pre-tokenization pattern {} does not compile: {e}. \
                             Use one of the named patterns (gpt2, cl100k, o200k) or fix the regex \
                             (syntax of the fancy-regex crate: Perl/Python-like, with lookaround).", shorten(pattern)),
                )
            })?;
        Ok(Pretokenizer { engine: Engine::Regex(regex), pattern: pattern.to_string() })
    }

    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// True when a hand-written scanner runs this pattern instead of the regex engine.
    pub fn uses_scanner(&self) -> bool {
        matches!(self.engine, Engine::Scanner(_))
    }

    /// Calls `f` on each chunk of `text`, in order. Text the pattern does not match is
    /// dropped, as in tiktoken; the named patterns match every character.
    pub fn for_each_chunk<'t, S: ChunkSink<'t>>(&self, text: &'t str, mut sink: S) -> Result<()> {
        let regex = match &self.engine {
            Engine::Scanner(scanner) => {
                scanner.for_each_chunk(text, sink);
                return Ok(());
            }
            Engine::SpaceWords(joined) => {
                for_each_space_word(text, joined, &mut sink);
                return Ok(());
            }
            Engine::Regex(regex) => regex,
        };
        let mut start = 0;
        while start < text.len() {
            let m = regex.find_from_pos(text, start).map_err(|e| {
                Error::new(ErrorKind::InvalidPattern, format!("pre-tokenization regex failed while matching: {e}"))
            })?;
            let Some(m) = m else { break };
            if m.end() == m.start() {
                // An empty match would loop forever: step over one character.
                start = next_char_boundary(text, m.end());
                continue;
            }
            sink.chunk(m.as_str());
            start = m.end();
        }
        Ok(())
    }

    /// All chunks of `text`.
    pub fn split<'t>(&self, text: &'t str) -> Result<Vec<&'t str>> {
        let mut out = Vec::new();
        self.for_each_chunk(text, |c| out.push(c))?;
        Ok(out)
    }
}

/// A pattern quoted for an error message, cut after 200 chars: a text passed where a pattern
/// was expected should not fill the terminal.
fn shorten(pattern: &str) -> String {
    match pattern.char_indices().nth(200) {
        Some((cut, _)) => format!("{:?}... ({} chars)", &pattern[..cut], pattern.chars().count()),
        None => format!("{pattern:?}"),
    }
}

fn next_char_boundary(text: &str, pos: usize) -> usize {
    let mut p = pos + 1;
    while p < text.len() && !text.is_char_boundary(p) {
        p += 1;
    }
    p
}

/// The named patterns (tiktoken's public constants).
pub const GPT2_PATTERN: &str =
    r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// tiktoken's current r50k/p50k pattern: GPT-2's with possessive quantifiers; the same chunks.
pub const R50K_PATTERN: &str =
    r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s";
pub const CL100K_PATTERN: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";
pub const O200K_PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"\p{N}{1,3}",
    "|",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    "|",
    r"\s*[\r\n]+",
    "|",
    r"\s+(?!\S)",
    "|",
    r"\s+",
);

/// Llama 3's pattern (its tokenizer.json, also llama.cpp's `llama-bpe`).
pub const LLAMA3_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2/3's pattern: Llama 3's with single digits.
pub const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Resolves a pattern name to its regex; any other string is taken as a regex itself.
pub fn resolve_pattern(name_or_regex: &str) -> &str {
    match name_or_regex {
        "gpt2" | "r50k" | "r50k_base" | "p50k_base" | "p50k_edit" => GPT2_PATTERN,
        "cl100k" | "cl100k_base" => CL100K_PATTERN,
        "o200k" | "o200k_base" | "o200k_harmony" => O200K_PATTERN,
        "llama3" => LLAMA3_PATTERN,
        "qwen2" => QWEN2_PATTERN,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_splits_words_with_leading_space() {
        let p = Pretokenizer::new(GPT2_PATTERN).unwrap();
        assert_eq!(p.split("Hello world, it's 2025!").unwrap(),
                   vec!["Hello", " world", ",", " it", "'s", " 2025", "!"]);
    }

    #[test]
    fn lookahead_keeps_last_space_for_next_word() {
        let p = Pretokenizer::new(GPT2_PATTERN).unwrap();
        assert_eq!(p.split("a   b").unwrap(), vec!["a", "  ", " b"]);
    }

    #[test]
    fn cl100k_groups_digits_by_three() {
        let p = Pretokenizer::new(CL100K_PATTERN).unwrap();
        assert_eq!(p.split("1234567").unwrap(), vec!["123", "456", "7"]);
    }

    #[test]
    fn o200k_splits_camel_case() {
        let p = Pretokenizer::new(O200K_PATTERN).unwrap();
        assert_eq!(p.split("HelloWorld").unwrap(), vec!["Hello", "World"]);
    }

    /// `by_hand` cuts `n` random texts (up to 13 characters of `alphabet`) as its pattern does on
    /// the regex engine.
    fn same_chunks_as_regex(by_hand: &Pretokenizer, alphabet: &[&str], seed: u64, n: u64) {
        let regex = Pretokenizer::with_regex(by_hand.pattern()).unwrap();
        let mut next = crate::lcg(seed);
        for k in 0..n {
            let text: String = (0..k % 14).map(|_| alphabet[next(alphabet.len() as u64) as usize]).collect();
            assert_eq!(by_hand.split(&text).unwrap(), regex.split(&text).unwrap(), "{text:?}");
        }
    }

    #[test]
    fn space_words_are_the_regex_chunks() {
        let by_hand = Pretokenizer::new(SPACE_WORDS_PATTERN).unwrap();
        assert!(matches!(by_hand.engine, Engine::SpaceWords(_)));
        same_chunks_as_regex(&by_hand, &["▁", "a", "é", "字", "\n", " ", "😀", "\u{2580}", "\u{2582}"], 7, 2000);
        assert_eq!(by_hand.split("▁▁a▁b▁▁").unwrap(), ["▁▁a", "▁b", "▁▁"]);
    }

    #[test]
    fn joined_space_words_are_the_regex_chunks() {
        // As models.word_split_pattern writes it for tokens holding ">▁", "字▁" and "😀▁".
        let pattern = r"▁*(?:[\U0000003E\U00005B57\U0001F600]▁*|[^▁\U0000003E\U00005B57\U0001F600])+|▁+";
        let by_hand = Pretokenizer::new(pattern).unwrap();
        assert!(matches!(&by_hand.engine, Engine::SpaceWords(joined) if joined == &['>', '字', '😀']));
        same_chunks_as_regex(&by_hand, &["▁", "a", ">", "é", "字", "\n", " ", "😀", "\u{2580}", "<"], 11, 4000);
        assert_eq!(by_hand.split("a>▁▁</b▁c▁").unwrap(), ["a>▁▁</b", "▁c", "▁"]);
        // Other patterns of the same shape are not taken for it.
        for other in [r"▁*(?:[\U0000003E]▁*|[^▁\U0000003F])+|▁+", r"▁*(?:[\U00002581]▁*|[^▁\U00002581])+|▁+", r"▁*(?:[>]▁*|[^▁>])+|▁+"] {
            assert!(matches!(Pretokenizer::new(other).unwrap().engine, Engine::Regex(_)), "{other}");
        }
    }

    #[test]
    fn invalid_pattern_is_an_error() {
        let e = Pretokenizer::new("(unclosed").unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidPattern);
        assert!(e.message.contains("\"(unclosed\""), "{}", e.message);
    }

    #[test]
    fn a_long_invalid_pattern_is_cut_in_the_message() {
        let text = "(?".to_string() + &"é".repeat(100_000);
        let e = Pretokenizer::new(&text).unwrap_err();
        assert!(e.message.len() < 1000, "{} bytes", e.message.len());
        assert!(e.message.contains("(100002 chars)"), "{}", e.message);
    }

    #[test]
    fn long_whitespace_run_does_not_fail() {
        let p = Pretokenizer::new(O200K_PATTERN).unwrap();
        let text = " ".repeat(200_000) + "x";
        let total: usize = p.split(&text).unwrap().iter().map(|c| c.len()).sum();
        assert_eq!(total, text.len());
    }
}
