//! Plain-text training files read in Rust, block by block: no Python string is made, and
//! decoding and counting run on all threads.
//!
//! The rules are those of the Python reader (`toksmith.sources.read_blocks`): bytes that are not
//! UTF-8 become U+FFFD (the maximal-subpart rule, as Python's `errors="replace"`), and a block
//! ends at a safe point (see `is_safe_cut`), which no chunk of a named pattern crosses: the
//! counts are those of the whole file, whatever the blocks and the number of threads.

use crate::error::{Error, ErrorKind, Result};
use std::borrow::Cow;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Whether a block or piece of `text` may end at byte `p`: just after a `\n` that follows a
/// non-space character and comes before a non-space character other than `/`, and inside no
/// occurrence of a string of `avoid` (the special tokens that hold a `\n`). There every named
/// pattern (GPT-2, cl100k, o200k, Llama 3, Qwen 2) has a chunk boundary that does not depend on
/// the text after it: the `\n` is a chunk of its own or ends a run of punctuation, and the next
/// chunk starts at `p`. A space before the `\n` would not do: at the end of a piece GPT-2's
/// `\s+(?!\S)` takes " \n" whole, in the file " " and "\n" apart; nor a `/` after it, which
/// o200k's punctuation chunks take (`[\r\n/]*`); nor a special token cut in two.
pub fn is_safe_cut(text: &str, p: usize, avoid: &[String]) -> bool {
    let bytes = text.as_bytes();
    if p < 2 || p > bytes.len() || bytes[p - 1] != b'\n' {
        return false;
    }
    let before = text[..p - 1].chars().next_back();
    let after = text[p..].chars().next();
    let (Some(before), Some(after)) = (before, after) else { return false };
    if before.is_whitespace() || after.is_whitespace() || after == '/' {
        return false;
    }
    avoid.iter().all(|special| {
        let (mut lo, mut hi) = (p.saturating_sub(special.len()), (p + special.len()).min(text.len()));
        while !text.is_char_boundary(lo) {
            lo -= 1;
        }
        while !text.is_char_boundary(hi) {
            hi += 1;
        }
        text[lo..hi].match_indices(special.as_str()).all(|(i, m)| lo + i >= p || lo + i + m.len() <= p)
    })
}

/// Position of the last safe point of `text` (see `is_safe_cut`), if any.
pub fn last_safe_cut(text: &str, avoid: &[String]) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut end = bytes.len();
    while let Some(nl) = bytes[..end].iter().rposition(|&b| b == b'\n') {
        if is_safe_cut(text, nl + 1, avoid) {
            return Some(nl + 1);
        }
        end = nl;
    }
    None
}

/// Splits `text` at safe points into about `n` pieces of similar size (fewer when it has
/// few safe points), for counting on `n` threads.
pub fn split_safe<'t>(text: &'t str, n: usize, avoid: &[String]) -> Vec<&'t str> {
    let mut pieces = Vec::with_capacity(n);
    let mut rest = text;
    let size = text.len().div_ceil(n.max(1));
    while rest.len() > size {
        let mut at = size;
        while !rest.is_char_boundary(at) {
            at += 1;
        }
        // The first safe point after the target size, else the rest stays whole.
        match first_safe_cut(rest, at, avoid) {
            Some(cut) if cut < rest.len() => {
                pieces.push(&rest[..cut]);
                rest = &rest[cut..];
            }
            _ => break,
        }
    }
    pieces.push(rest);
    pieces
}

/// Position of the first safe point of `text` from byte `from` on (see `is_safe_cut`).
fn first_safe_cut(text: &str, mut from: usize, avoid: &[String]) -> Option<usize> {
    let bytes = text.as_bytes();
    while let Some(nl) = bytes[from..].iter().position(|&b| b == b'\n').map(|p| from + p) {
        if is_safe_cut(text, nl + 1, avoid) {
            return Some(nl + 1);
        }
        from = nl + 1;
    }
    None
}

/// Reads the text of `path` from byte `offset`: at least `size` bytes (unless the file ends
/// first), cut at the last safe point. Returns the text and the offset where the next block
/// starts (the file's size once it is all read).
pub fn read_block(path: &Path, offset: u64, size: usize, avoid: &[String]) -> Result<(String, u64)> {
    read_block_into(path, offset, size, Vec::new(), avoid)
}

/// `read_block` into `bytes` (emptied first), the buffer of an earlier block: reading into
/// memory already in use costs no page faults, and a fresh 8 MB buffer costs 2,048 of them.
pub fn read_block_into(path: &Path, offset: u64, size: usize, mut bytes: Vec<u8>, avoid: &[String]) -> Result<(String, u64)> {
    let fail = |e: std::io::Error| Error::new(ErrorKind::Training, format!("cannot read {}: {e}", path.display()));
    let mut file = File::open(path).map_err(fail)?;
    file.seek(SeekFrom::Start(offset)).map_err(fail)?;
    let mut want = size.max(1);
    // Room for the block up front, but never more than the file has left (`size` is the
    // caller's and could be anything).
    let left = file.metadata().map(|m| m.len().saturating_sub(offset)).unwrap_or(0);
    bytes.clear();
    bytes.reserve(want.min(usize::try_from(left).unwrap_or(usize::MAX)));
    loop {
        let got = (&mut file).take((want - bytes.len()) as u64).read_to_end(&mut bytes).map_err(fail)?;
        let at_end = got == 0 || bytes.len() < want;
        // Decoding stops before a sequence cut by the block end: it is read again next time.
        let valid = if at_end { bytes.len() } else { complete_prefix(&bytes) };
        // Valid UTF-8 (the usual case) is checked by the fast validator; only text that is not
        // goes through the slower replacing decoder.
        let text = match std::str::from_utf8(&bytes[..valid]) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(&bytes[..valid]),
        };
        let cut = if at_end { Some(text.len()) } else { last_safe_cut(&text, avoid) };
        if let Some(cut) = cut {
            if let Cow::Owned(mut text) = text {
                // Something was replaced: count the bytes up to the cut again from the source.
                let consumed = bytes_for_chars(&bytes[..valid], &text[..cut]);
                text.truncate(cut);
                return Ok((text, offset + consumed as u64));
            }
            // Nothing replaced: the bytes up to the cut are the text, taken without a copy.
            bytes.truncate(cut);
            // SAFETY: `bytes[..valid]` passed `from_utf8` above and `cut` is a character
            // boundary of that text (a safe cut point), so `bytes` is valid UTF-8; checking it a
            // second time would cost another pass over the block.
            let text = unsafe { String::from_utf8_unchecked(bytes) };
            return Ok((text, offset + cut as u64));
        }
        want *= 2; // no safe point yet: read on
    }
}

/// Length of `bytes` without a UTF-8 sequence cut off at its end.
fn complete_prefix(bytes: &[u8]) -> usize {
    let n = bytes.len();
    // A sequence is at most 4 bytes: look at the last 3 for a lead byte whose sequence is longer
    // than what follows it.
    for back in 1..=3.min(n) {
        let b = bytes[n - back];
        let len = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => continue,
        };
        return if len > back { n - back } else { n };
    }
    n
}

/// The number of bytes of `bytes` whose lossy decoding is `prefix` (a prefix of the decoding of
/// `bytes` that ends after a `\n`).
fn bytes_for_chars(bytes: &[u8], prefix: &str) -> usize {
    // Decode chunk by chunk (valid run, then one invalid sequence = one U+FFFD) until the
    // decoded length reaches the prefix.
    let mut decoded = 0;
    let mut consumed = 0;
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        if decoded + valid.len() >= prefix.len() {
            return consumed + (prefix.len() - decoded);
        }
        decoded += valid.len();
        consumed += valid.len();
        if !chunk.invalid().is_empty() {
            decoded += '\u{FFFD}'.len_utf8();
            consumed += chunk.invalid().len();
        }
    }
    consumed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_only_between_non_spaces() {
        assert_eq!(last_safe_cut("a\nb\n \nc", &[]), Some(2));
        assert_eq!(last_safe_cut("a\n \n", &[]), None);
        assert_eq!(first_safe_cut("a\n \nc\nd", 0, &[]), Some(6));
        // Not after a space, a blank line or a \r, nor before a slash (see `is_safe_cut`).
        assert_eq!(last_safe_cut("x \ny\n\nz\r\nw;\n//", &[]), None);
        assert_eq!(last_safe_cut("x;\n/y", &[]), None);
        // Nor inside a special token.
        let avoid = vec!["<doc\nend>".to_string()];
        assert_eq!(last_safe_cut("a\nb <doc\nend> c", &avoid), Some(2));
        assert_eq!(last_safe_cut("a\nb <doc\nend>\nc", &avoid), Some(14));
        let text = "one\ntwo\n\n three\nfour\nfive\n";
        let pieces = split_safe(text, 3, &[]);
        assert_eq!(pieces.concat(), text);
        assert!(pieces.len() > 1 && pieces.iter().all(|p| !p.is_empty()));
        assert!(pieces[1..].iter().all(|p| !p.starts_with(char::is_whitespace)));
    }

    #[test]
    fn blocks_cover_the_file_exactly_with_python_replacement() {
        let dir = std::env::temp_dir().join(format!("toksmith-read-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.txt");
        // Lines of mixed width, invalid bytes (a lone continuation byte, a cut 3-byte sequence,
        // an encoded surrogate) and runs of blank lines.
        let mut bytes = Vec::new();
        for i in 0..300 {
            bytes.extend_from_slice(format!("line {i} héllo wörld 世界\n").as_bytes());
            if i % 7 == 0 {
                bytes.extend_from_slice(b"bad \x80 \xe4\xb8 \xed\xa0\x80 end\n\n  \n");
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        let whole = String::from_utf8_lossy(&bytes).into_owned();
        for size in [1, 7, 64, 1000, 1 << 20] {
            let (mut text, mut offset) = (String::new(), 0);
            while offset < bytes.len() as u64 {
                let (block, next) = read_block(&path, offset, size, &[]).unwrap();
                assert!(next > offset);
                text.push_str(&block);
                offset = next;
            }
            assert_eq!(text, whole, "block size {size}");
        }
        // What Python's errors="replace" gives for the bad line.
        assert!(whole.contains("bad \u{FFFD} \u{FFFD} \u{FFFD}\u{FFFD}\u{FFFD} end"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
