//! Differential tests: the scanners must give exactly fancy-regex's chunks for the same regex.

use super::classes::class_ranges;
use super::*;
use std::time::{Duration, Instant};

/// The regexes the scanners stand for, each with a scanner and a fancy-regex pretokenizer.
fn pairs() -> Vec<(&'static str, Pretokenizer, Pretokenizer)> {
    [
        ("gpt2", GPT2_PATTERN),
        ("r50k", R50K_PATTERN),
        ("cl100k", CL100K_PATTERN),
        ("o200k", O200K_PATTERN),
        ("llama3", LLAMA3_PATTERN),
        ("qwen2", QWEN2_PATTERN),
    ]
    .into_iter()
        .map(|(name, p)| (name, Pretokenizer::new(p).unwrap(), Pretokenizer::with_regex(p).unwrap()))
        .collect()
}

fn assert_same(name: &str, scanner: &Pretokenizer, regex: &Pretokenizer, text: &str) {
    let (got, want) = (scanner.split(text).unwrap(), regex.split(text).unwrap());
    if got != want {
        let short = |v: &[&str]| format!("{:?}", v.iter().take(40).collect::<Vec<_>>());
        panic!("{name}: scanner and regex differ on {text:?}\n scanner: {}\n   regex: {}", short(&got), short(&want));
    }
}

/// SplitMix64: a small deterministic generator, so that failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Pieces that exercise the patterns' special cases: contractions in every case (and with
/// U+017F, which folds to s), every kind of whitespace, `/` and newlines after punctuation.
const PIECES: &[&str] = &[
    "'", "''", "'s", "'S", "'t", "'T", "'d", "'D", "'m", "'M", "'ll", "'LL", "'lL", "'Ll", "'ve", "'VE",
    "'vE", "'re", "'RE", "'Re", "'\u{17f}", "'x", "'l", "'v", "'r", "' s", "'\u{212a}",
    " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\x0b", "\x0c", "\u{85}", "\u{a0}", "\u{1680}", "\u{2000}",
    "\u{2009}", "\u{200a}", "\u{2028}", "\u{2029}", "\u{202f}", "\u{205f}", "\u{3000}", "\u{200b}",
    "\u{feff}", "\u{180e}", "\x1c", "\x1f", "\0", "\u{200d}", "\u{fe0f}",
    "/", "//", "!", ".", ",", "-", "_", "(", ")", "\"", "#", "$", "%", "^", "@", "~", "`", "\\", "{", "<", "|",
    "+", "=", "?", ";", ":", "...", "http://x.y/z", "don't", "I'M", "we'Ve", "e\u{301}", "\u{301}",
    "\u{20dd}", "\u{488}", "ǅ", "ǈ", "ᾈ", "ʰ", "ˆ", "々", "ー", "ª", "º", "µ", "ß", "ẞ", "İ", "ﬁ",
    "²", "½", "Ⅻ", "①", "٣", "۷", "३", "๓", "１", "𝟘", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "中文", "日本語",
    "カタカナ", "한국어", "ภาษาไทย", "हिन्दी", "العربية", "Ελληνικά", "Русский", "ĲĳǄǆ",
];

/// Code point ranges to draw single chars from: ASCII, Latin-1, marks, many scripts, digits of
/// other scripts, Unicode spaces, titlecase and modifier letters, CJK, emoji, and anything.
const RANGES: &[(u32, u32)] = &[
    (0x00, 0x7f), (0x61, 0x7a), (0x41, 0x5a), (0x30, 0x39), (0x20, 0x2f), (0x80, 0xff), (0x100, 0x24f),
    (0x1c4, 0x1cc), (0x1f1, 0x1f3), (0x2b0, 0x2ff), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff),
    (0x590, 0x5ff), (0x600, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x10a0, 0x10ff), (0x1100, 0x11ff),
    (0x16ee, 0x16f0), (0x1e00, 0x1fff), (0x2000, 0x206f), (0x20d0, 0x20ff), (0x2100, 0x218f),
    (0x2460, 0x24ff), (0x3000, 0x30ff), (0x3400, 0x4dbf), (0x4e00, 0x9fff), (0xa000, 0xa4cf),
    (0xac00, 0xd7a3), (0xfb00, 0xfb4f), (0xfe00, 0xfe0f), (0xff00, 0xffef), (0x10400, 0x1044f),
    (0x1d400, 0x1d7ff), (0x1e900, 0x1e95f), (0x1f1e6, 0x1f1ff), (0x1f300, 0x1faff), (0xe0000, 0xe01ef),
    (0x0, 0x10ffff),
];

/// A short alphabet with one char of each class that matters: lower, upper, titlecase,
/// modifier and other letters, a mark, digits, the contraction letters, spaces, newlines.
const ALPHABET: &[char] = &[
    'a', 'A', 'ǅ', 'ʰ', '中', '\u{301}', '1', '٣', '\'', 's', 'S', 'ſ', 'l', 'L', 'v', 'e', 'r', 'T',
    ' ', '\t', '\n', '\r', '\u{a0}', '!', '/', '😀',
];

fn random_char(rng: &mut Rng) -> char {
    loop {
        let &(lo, hi) = rng.pick(RANGES);
        if let Some(c) = char::from_u32(lo + (rng.next() % (hi - lo + 1) as u64) as u32) {
            return c;
        }
    }
}

fn random_text(rng: &mut Rng) -> String {
    let mut s = String::new();
    for _ in 0..rng.below(24) {
        match rng.below(10) {
            0..=3 => s.push(random_char(rng)),
            4..=5 => s.push_str(rng.pick::<&str>(PIECES)),
            6 => s.push(*rng.pick(ALPHABET)),
            7 => {
                // a run: the same char or piece several times (long words, numbers, spaces)
                let piece = if rng.below(2) == 0 { rng.pick(ALPHABET).to_string() } else { rng.pick(PIECES).to_string() };
                s.push_str(&piece.repeat(2 + rng.below(12)));
            }
            8 => {
                let letters = ["abc", "Hello", "WORLD", "McDonald", "iPhone", "ǅemal", "ʰello"];
                s.push_str(rng.pick::<&str>(&letters));
            }
            _ => s.push_str(&(rng.next() % 100_000_000).to_string()),
        }
    }
    s
}

/// Number of random texts per pattern and the generator's seed; `TOKSMITH_FUZZ_CASES` and
/// `TOKSMITH_FUZZ_SEED` change them.
fn cases_and_seed() -> (usize, u64) {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    (var("TOKSMITH_FUZZ_CASES").unwrap_or(100_000) as usize, var("TOKSMITH_FUZZ_SEED").unwrap_or(0x5eed))
}

#[test]
fn scanners_are_chosen_for_the_named_patterns_only() {
    for p in [GPT2_PATTERN, R50K_PATTERN, CL100K_PATTERN, O200K_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN] {
        assert!(Pretokenizer::new(p).unwrap().uses_scanner(), "{p}");
        assert!(!Pretokenizer::with_regex(p).unwrap().uses_scanner());
    }
    for name in ["gpt2", "r50k_base", "cl100k_base", "o200k_base"] {
        assert!(Pretokenizer::new(resolve_pattern(name)).unwrap().uses_scanner(), "{name}");
    }
    // A regex with the same meaning but another spelling goes to the regex engine.
    assert!(!Pretokenizer::new(&format!("(?:{CL100K_PATTERN})")).unwrap().uses_scanner());
    assert!(!Pretokenizer::new(r"\w+").unwrap().uses_scanner());
}

#[test]
fn contraction_letters_fold_as_the_regex_engine_does() {
    // The scanners fold ASCII letters and U+017F (long s) only; check that this is exactly the
    // regex engine's case-insensitive class of each contraction letter.
    for c in "sdmtlver".chars() {
        let mut want = vec![(c.to_ascii_uppercase() as u32, c.to_ascii_uppercase() as u32), (c as u32, c as u32)];
        if c == 's' {
            want.push((0x17f, 0x17f));
        }
        assert_eq!(class_ranges(&format!("(?i:{c})")), want, "{c}");
    }
}

#[test]
fn examples() {
    let split = |p: &str, t: &str| -> Vec<String> {
        Pretokenizer::new(p).unwrap().split(t).unwrap().into_iter().map(String::from).collect()
    };
    assert_eq!(split(CL100K_PATTERN, "I'LL go  now\n\n  ok  "), ["I", "'LL", " go", " ", " now", "\n\n", " ", " ok", "  "]);
    assert_eq!(split(O200K_PATTERN, "HELLOWorld's x/\n/y"), ["HELLOWorld's", " x", "/\n/", "y"]);
    assert_eq!(split(O200K_PATTERN, "\u{301}'s"), ["\u{301}'s"]);
    assert_eq!(split(O200K_PATTERN, "  \n  "), ["  \n", "  "]);
    assert_eq!(split(CL100K_PATTERN, "  \n  "), ["  \n  "]);
    assert_eq!(split(GPT2_PATTERN, "a \t b'S"), ["a", " \t", " b", "'", "S"]);
}

#[test]
fn all_short_strings_over_a_small_alphabet() {
    let pairs = pairs();
    let n = ALPHABET.len();
    let mut text = String::new();
    for len in 1..=3u32 {
        for mut k in 0..n.pow(len) {
            text.clear();
            for _ in 0..len {
                text.push(ALPHABET[k % n]);
                k /= n;
            }
            for (name, scanner, regex) in &pairs {
                assert_same(name, scanner, regex, &text);
            }
        }
    }
}

#[test]
fn random_texts() {
    let pairs = pairs();
    let (cases, seed) = cases_and_seed();
    let mut rng = Rng(seed);
    for _ in 0..cases {
        let text = random_text(&mut rng);
        for (name, scanner, regex) in &pairs {
            assert_same(name, scanner, regex, &text);
        }
    }
}

/// Pathological inputs for backtracking: long runs of one class.
fn worst_cases(size: usize) -> Vec<(&'static str, String)> {
    let mut rng = Rng(1);
    let latin1: Vec<char> = (0x21u32..0x7f).chain(0xa0..0x100).filter_map(char::from_u32).collect();
    let mut spaced_newlines = " \n".repeat(size / 4);
    spaced_newlines.push('x');
    vec![
        ("a", "a".repeat(size)),
        ("A", "A".repeat(size)),
        ("Aʰ", "ʰ".to_string() + &"A".repeat(size)),
        ("^", "^".repeat(size)),
        ("digits", (0..size).map(|_| char::from(b'0' + rng.below(10) as u8)).collect()),
        ("spaces", " ".repeat(size)),
        ("spaces then x", " ".repeat(size) + "x"),
        ("newlines and spaces", spaced_newlines),
        ("marks", "\u{301}".repeat(size / 2)),
        ("latin1", (0..size / 2).map(|_| *rng.pick(&latin1)).collect()),
        ("chinese", (0..size / 3).map(|_| char::from_u32(0x4e00 + rng.below(0x51a6) as u32).unwrap()).collect()),
        ("apostrophes", "'".repeat(size)),
    ]
}

#[test]
fn worst_cases_match_the_regex() {
    for (name, scanner, regex) in &pairs() {
        for (case, text) in worst_cases(20_000) {
            assert_same(&format!("{name} on {case}"), scanner, regex, &text);
        }
    }
}

#[test]
fn worst_cases_take_linear_time() {
    // 1 MB each; a linear scan takes milliseconds even unoptimised, a quadratic one hours.
    for (name, scanner, _) in &pairs() {
        for (case, text) in worst_cases(1 << 20) {
            let start = Instant::now();
            let total: usize = scanner.split(&text).unwrap().iter().map(|c| c.len()).sum();
            let took = start.elapsed();
            assert_eq!(total, text.len());
            assert!(took < Duration::from_secs(3), "{name} on 1 MB of {case}: {took:?}");
        }
    }
}

/// Throughput of scanner and regex on a text file:
/// `TOKSMITH_BENCH_TEXT=file cargo test --release -- --ignored --nocapture split_speed`
#[test]
#[ignore]
fn split_speed() {
    let path = std::env::var("TOKSMITH_BENCH_TEXT").expect("set TOKSMITH_BENCH_TEXT to a UTF-8 text file");
    let text = std::fs::read_to_string(path).unwrap();
    let mb = text.len() as f64 / (1 << 20) as f64;
    for (name, scanner, regex) in &pairs() {
        let mut times = Vec::new();
        for p in [scanner, regex] {
            let start = Instant::now();
            let mut n = 0usize;
            p.for_each_chunk(&text, |_| n += 1).unwrap();
            times.push((start.elapsed().as_secs_f64(), n));
        }
        println!(
            "{name:7} scanner {:7.1} MB/s   fancy-regex {:6.1} MB/s   ({} chunks)",
            mb / times[0].0,
            mb / times[1].0,
            times[0].1
        );
        assert_eq!(times[0].1, times[1].1);
    }
}
