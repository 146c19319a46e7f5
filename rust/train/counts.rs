//! Chunk counts that respect a memory budget: when the in-memory table grows past the budget,
//! it is written to disk as a sorted run and cleared; at the end the runs and the table are
//! merged in one sorted stream (a k-way merge), so only the stream's head is in memory.
//!
//! Run files are binary: for each entry, the chunk length (u32 LE), the chunk bytes, the count
//! (u64 LE), in ascending byte order of chunks.

use crate::error::{Error, ErrorKind, Result};
use crate::models::bpe::pack_short;
use crate::train::bpe::{key_halves, key_of_halves, packed_chunk, unpack_short, Chunk, ChunkCounts, ChunkTally};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

/// Bytes an entry of the table is taken to cost beyond its chunk's bytes: the key (packed, or a
/// `Chunk` with its heap block for a long chunk), the count, the hash table's slot and spare
/// room (an estimate on the safe side: a short chunk's entry is 24 bytes in a table at most
/// 7/8 full).
const ENTRY_OVERHEAD: usize = 72;

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Training, format!("{what}: {e}"))
}

/// The table is split into shards by a hash of the chunk, so that batches of counts can be
/// added on several threads at once (each shard by one thread). Which shard a chunk goes to does
/// not depend on the thread count, and every reader sorts, so nothing else depends on it either.
pub struct SpillingCounts {
    shards: Vec<Shard>,
    table_bytes: usize,
    budget: Option<usize>,
    spill_dir: PathBuf,
    runs: Vec<PathBuf>,
    /// Run files written so far (each gets a name of its own).
    files_written: usize,
}

const SHARDS: usize = 64;

/// `a + b`, the counts of `chunk`; an error rather than a sum that wraps past 2^64 - 1 (counts
/// files added up, see `read_tsv`, can hold any count).
fn add_count(a: u64, b: u64, chunk: &[u8]) -> Result<u64> {
    a.checked_add(b).ok_or_else(|| {
        Error::new(
            ErrorKind::Training,
            format!("the count of the chunk {:?} passes 2^64 - 1 ({a} + {b}): counts this large cannot be added up", String::from_utf8_lossy(chunk)),
        )
    })
}

/// One shard of the table. Chunks of up to 15 bytes (nearly all) are keyed by their bytes and
/// length packed into one integer, as in a `ChunkTally`: adding a tally's entry then hashes and
/// compares two words, not a slice (with a memcmp call); longer chunks are keyed by their bytes.
#[derive(Default)]
struct Shard {
    short: FxHashMap<(u64, u64), u64>,
    long: ChunkCounts,
}

impl Shard {
    fn len(&self) -> usize {
        self.short.len() + self.long.len()
    }

    /// Adds `n` to the chunk packed as `key`; returns the bytes a new entry costs (0 if it was there).
    fn add_short(&mut self, key: u128, n: u64) -> Result<usize> {
        match self.short.entry(key_halves(key)) {
            Entry::Occupied(mut e) => {
                let (bytes, len) = unpack_short(key);
                *e.get_mut() = add_count(*e.get(), n, &bytes[..len])?;
                Ok(0)
            }
            Entry::Vacant(e) => {
                e.insert(n);
                Ok(unpack_short(key).1 + ENTRY_OVERHEAD)
            }
        }
    }

    /// Adds `n` to a chunk of 16 bytes or more; returns the bytes a new entry costs.
    fn add_long(&mut self, chunk: &[u8], n: u64) -> Result<usize> {
        match self.long.get_mut(chunk) {
            Some(c) => {
                *c = add_count(*c, n, chunk)?;
                Ok(0)
            }
            None => {
                self.long.insert(Chunk::from_slice(chunk), n);
                Ok(chunk.len() + ENTRY_OVERHEAD)
            }
        }
    }

    /// Every (chunk, count), in ascending order of the chunks' bytes. The short chunks are
    /// sorted by their packed keys with the bytes reversed, which order as the chunks do (the
    /// bytes, zero-padded, from the top; then the length), comparing integers instead of
    /// slices; the long ones are sorted apart and the two lists merged.
    fn into_sorted(self) -> Vec<(Chunk, u64)> {
        let mut short: Vec<(u128, u64)> = self.short.into_iter().map(|(halves, n)| (key_of_halves(halves).swap_bytes(), n)).collect();
        short.sort_unstable_by_key(|&(key, _)| key);
        let mut long: Vec<(Chunk, u64)> = self.long.into_iter().collect();
        long.sort_unstable();
        let mut out = Vec::with_capacity(short.len() + long.len());
        let mut long = long.into_iter().peekable();
        for (key, n) in short {
            let chunk = packed_chunk(key.swap_bytes());
            while let Some(entry) = long.next_if(|(l, _)| *l < chunk) {
                out.push(entry);
            }
            out.push((chunk, n));
        }
        out.extend(long);
        out
    }

    /// Every (chunk, count), in no particular order.
    fn into_entries(self) -> impl Iterator<Item = (Chunk, u64)> {
        self.short.into_iter().map(|(halves, n)| (packed_chunk(key_of_halves(halves)), n)).chain(self.long)
    }
}

/// The shard of a hash. The tables themselves hash with FxHash and use its low and top bits,
/// so the shard is taken from a remix of the hash, not from its bits directly: otherwise every
/// chunk of a shard would share the bits its table relies on.
fn shard_of_hash(h: u64) -> usize {
    ((h ^ (h >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize
}

/// The shard of a chunk of up to 15 bytes, packed as `key`.
fn shard_of_short(key: u128) -> usize {
    shard_of_hash(rustc_hash::FxBuildHasher.hash_one(key_halves(key)))
}

/// The shard of a chunk of 16 bytes or more.
fn shard_of_long(chunk: &[u8]) -> usize {
    shard_of_hash(rustc_hash::FxBuildHasher.hash_one(chunk))
}

fn empty_shards() -> Vec<Shard> {
    (0..SHARDS).map(|_| Shard::default()).collect()
}

impl SpillingCounts {
    /// `budget`: bytes the table may use before it is spilled to `spill_dir` (None: never).
    pub fn new(budget: Option<usize>, spill_dir: PathBuf) -> Self {
        SpillingCounts { shards: empty_shards(), table_bytes: 0, budget, spill_dir, runs: Vec::new(), files_written: 0 }
    }

    pub fn add(&mut self, chunk: &[u8], n: u64) -> Result<()> {
        self.table_bytes += match pack_short(chunk) {
            Some(key) => self.shards[shard_of_short(key)].add_short(key, n)?,
            None => self.shards[shard_of_long(chunk)].add_long(chunk, n)?,
        };
        Ok(())
    }

    /// Adds tallies of counts (one per thread and `TABLE_BYTES` of text counted, see
    /// `count_chunks`), then spills if over budget. Runs on the current rayon pool: first each
    /// tally is split by shard, then each shard takes its part of every tally.
    pub fn add_tallies(&mut self, tallies: &[ChunkTally<'_>]) -> Result<()> {
        type Parts<'a> = (Vec<Vec<(u128, u64)>>, Vec<Vec<(&'a [u8], u64)>>);
        let split: Vec<Parts> = tallies
            .par_iter()
            .map(|tally| {
                let (mut short, mut long): Parts = (vec![Vec::new(); SHARDS], vec![Vec::new(); SHARDS]);
                for (key, n) in tally.short() {
                    short[shard_of_short(key)].push((key, n));
                }
                for (chunk, n) in tally.long() {
                    long[shard_of_long(chunk.as_bytes())].push((chunk.as_bytes(), n));
                }
                (short, long)
            })
            .collect();
        let added: usize = self
            .shards
            .par_iter_mut()
            .enumerate()
            .map(|(s, shard)| {
                let mut added = 0;
                for (short, long) in &split {
                    for &(key, n) in &short[s] {
                        added += shard.add_short(key, n)?;
                    }
                    for &(chunk, n) in &long[s] {
                        added += shard.add_long(chunk, n)?;
                    }
                }
                Ok(added)
            })
            .sum::<Result<usize>>()?;
        self.table_bytes += added;
        self.spill_if_over_budget()
    }

    /// Distinct chunks in memory (not counting spilled runs).
    pub fn len_in_memory(&self) -> usize {
        self.shards.iter().map(|t| t.len()).sum()
    }

    pub fn bytes_in_memory(&self) -> usize {
        self.table_bytes
    }

    pub fn num_runs(&self) -> usize {
        self.runs.len()
    }

    pub fn spill_if_over_budget(&mut self) -> Result<()> {
        match self.budget {
            Some(b) if self.table_bytes > b => self.spill(),
            _ => Ok(()),
        }
    }

    /// Empties the table into a vector sorted by chunk (sorting on the current rayon pool).
    fn take_sorted(&mut self) -> Vec<(Chunk, u64)> {
        let mut entries: Vec<(Chunk, u64)> = Vec::with_capacity(self.len_in_memory());
        for shard in &mut self.shards {
            entries.extend(std::mem::take(shard).into_entries());
        }
        entries.par_sort_unstable();
        self.table_bytes = 0;
        entries
    }

    /// Writes the table as a sorted run and clears it.
    pub fn spill(&mut self) -> Result<()> {
        if self.len_in_memory() == 0 {
            return Ok(());
        }
        std::fs::create_dir_all(&self.spill_dir).map_err(|e| io_err("cannot create the spill folder", e))?;
        let path = self.new_run_path();
        let entries = self.take_sorted();
        let file = File::create(&path).map_err(|e| io_err(&format!("cannot write {}", path.display()), e))?;
        let mut w = BufWriter::new(file);
        for (k, v) in &entries {
            write_entry(&mut w, k, *v)?;
        }
        w.flush().map_err(|e| io_err("cannot write a spill run", e))?;
        self.runs.push(path);
        self.compact_runs()
    }

    /// All (chunk, total count), consuming the counts, in groups whose order depends on the
    /// chunks alone: shard by shard, each sorted on its own thread (a global sort splits worse
    /// over threads); or, when runs were spilled, one group in ascending order (the runs on
    /// disk merged with the table, and deleted).
    pub fn into_groups(&mut self) -> Result<Vec<Vec<(Chunk, u64)>>> {
        if self.runs.is_empty() {
            self.table_bytes = 0;
            return Ok(std::mem::replace(&mut self.shards, empty_shards())
                .into_par_iter()
                .map(Shard::into_sorted)
                .collect());
        }
        let mut all = Vec::new();
        self.drain_sorted(|k, v| all.push((k, v)))?;
        Ok(vec![all])
    }

    /// Calls `f` on every (chunk, total count) in ascending chunk order, merging the runs on
    /// disk with the table in memory. Consumes the counts; the run files are deleted.
    pub fn drain_sorted(&mut self, mut f: impl FnMut(Chunk, u64)) -> Result<()> {
        let memory = self.take_sorted();
        if self.runs.is_empty() {
            memory.into_iter().for_each(|(k, v)| f(k, v));
            return Ok(());
        }
        let mut sources: Vec<Box<dyn Iterator<Item = Result<(Chunk, u64)>>>> = Vec::new();
        sources.push(Box::new(memory.into_iter().map(Ok)));
        merge_sources(sources, &self.runs, f)?;
        for path in self.runs.drain(..) {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }

    fn new_run_path(&mut self) -> PathBuf {
        self.files_written += 1;
        self.spill_dir.join(format!("run-{:05}.bin", self.files_written))
    }

    /// Merges all runs into one when there are `MAX_RUNS`: the final merge opens every run at
    /// once, and a tiny budget would otherwise make more of them than files may be open.
    fn compact_runs(&mut self) -> Result<()> {
        if self.runs.len() < MAX_RUNS {
            return Ok(());
        }
        let path = self.new_run_path();
        let file = File::create(&path).map_err(|e| io_err(&format!("cannot write {}", path.display()), e))?;
        let mut w = BufWriter::new(file);
        let mut result = Ok(());
        merge_sources(Vec::new(), &self.runs, |k, v| {
            if result.is_ok() {
                result = write_entry(&mut w, &k, v);
            }
        })?;
        result?;
        w.flush().map_err(|e| io_err("cannot write a spill run", e))?;
        for old in self.runs.drain(..) {
            let _ = std::fs::remove_file(old);
        }
        self.runs.push(path);
        Ok(())
    }
}

/// Spilled runs at most, before they are merged into one (see `compact_runs`).
const MAX_RUNS: usize = 64;

fn write_entry(w: &mut impl Write, k: &[u8], v: u64) -> Result<()> {
    w.write_all(&(k.len() as u32).to_le_bytes())
        .and_then(|_| w.write_all(k))
        .and_then(|_| w.write_all(&v.to_le_bytes()))
        .map_err(|e| io_err("cannot write a spill run", e))
}

/// Calls `f` on every (chunk, total count) of `sources` and the runs at `runs`, each sorted, in
/// ascending chunk order (a k-way merge; equal chunks' counts added up).
fn merge_sources(mut sources: Vec<Box<dyn Iterator<Item = Result<(Chunk, u64)>>>>, runs: &[PathBuf], mut f: impl FnMut(Chunk, u64)) -> Result<()> {
    for path in runs {
        let file = File::open(path).map_err(|e| io_err(&format!("cannot read {}", path.display()), e))?;
        sources.push(Box::new(RunReader { r: BufReader::new(file) }));
    }
    // k-way merge: the heap holds the next entry of every source.
    let mut heap = BinaryHeap::new();
    for (i, s) in sources.iter_mut().enumerate() {
        if let Some(e) = s.next() {
            let (k, v) = e?;
            heap.push(Reverse((k, i, v)));
        }
    }
    let mut current: Option<(Chunk, u64)> = None;
    while let Some(Reverse((k, i, v))) = heap.pop() {
        if let Some(e) = sources[i].next() {
            let (nk, nv) = e?;
            heap.push(Reverse((nk, i, nv)));
        }
        match &mut current {
            Some((ck, cv)) if *ck == k => *cv = add_count(*cv, v, ck.as_slice())?,
            _ => {
                if let Some((ck, cv)) = current.take() {
                    f(ck, cv);
                }
                current = Some((k, v));
            }
        }
    }
    if let Some((ck, cv)) = current {
        f(ck, cv);
    }
    Ok(())
}

impl Drop for SpillingCounts {
    fn drop(&mut self) {
        for path in &self.runs {
            let _ = std::fs::remove_file(path);
        }
    }
}

struct RunReader {
    r: BufReader<File>,
}

impl Iterator for RunReader {
    type Item = Result<(Chunk, u64)>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut len = [0u8; 4];
        match self.r.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
            Err(e) => return Some(Err(io_err("cannot read a spill run", e))),
        }
        let mut key = Chunk::from_elem(0, u32::from_le_bytes(len) as usize);
        let mut count = [0u8; 8];
        if let Err(e) = self.r.read_exact(&mut key).and_then(|_| self.r.read_exact(&mut count)) {
            return Some(Err(io_err("a spill run is truncated", e)));
        }
        Some(Ok((key, u64::from_le_bytes(count))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_sorts_its_chunks_as_bytes_sort() {
        // Short chunks (packed keys) and long ones, with zero bytes and prefixes of each other,
        // so that the packed keys' order must match the bytes' order exactly.
        let mut shard = Shard::default();
        let mut expected = Vec::new();
        let mut rand = crate::lcg(3);
        for k in 0..3000u64 {
            let len = rand(20) as usize;
            let chunk: Vec<u8> = (0..len).map(|_| [0u8, 1, b'a', 0xff][rand(4) as usize]).collect();
            if expected.iter().any(|(c, _): &(Vec<u8>, u64)| *c == chunk) {
                continue;
            }
            match pack_short(&chunk) {
                Some(key) => shard.add_short(key, k),
                None => shard.add_long(&chunk, k),
            };
            expected.push((chunk, k));
        }
        expected.sort();
        assert!(expected.iter().any(|(c, _)| c.len() < 16) && expected.iter().any(|(c, _)| c.len() >= 16));
        let got: Vec<(Vec<u8>, u64)> = shard.into_sorted().into_iter().map(|(c, n)| (c.to_vec(), n)).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn spilled_and_in_memory_counts_merge_exactly() {
        let dir = std::env::temp_dir().join(format!("toksmith-spill-test-{}", std::process::id()));
        let mut s = SpillingCounts::new(Some(200), dir.clone());
        let mut expected: std::collections::BTreeMap<Vec<u8>, u64> = Default::default();
        let mut seed = 7u64;
        for _ in 0..2000 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            // Keys short enough to sit inline in the table's entries and long enough not to.
            let k = format!("w{}{}", (seed >> 40) % 97, "-".repeat((seed >> 20) as usize % 30)).into_bytes();
            *expected.entry(k.clone()).or_insert(0) += 1;
            s.add(&k, 1).unwrap();
            s.spill_if_over_budget().unwrap();
            // Never more runs open at the end than MAX_RUNS (they are merged into one).
            assert!(s.num_runs() < MAX_RUNS);
        }
        assert!(s.num_runs() > 3);
        let mut got = Vec::new();
        s.drain_sorted(|k, v| got.push((k, v))).unwrap();
        assert!(got.iter().any(|(k, _)| k.spilled()) && got.iter().any(|(k, _)| !k.spilled()));
        let got: Vec<(Vec<u8>, u64)> = got.into_iter().map(|(k, v)| (k.to_vec(), v)).collect();
        assert_eq!(got, expected.into_iter().collect::<Vec<_>>());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "runs are deleted");
        let _ = std::fs::remove_dir(&dir);
    }
}

/// Escapes a chunk for one TSV field: `\` `\t` `\n` `\r` become `\\` `\t` `\n` `\r`.
pub fn escape_tsv(chunk: &str, out: &mut String) {
    for c in chunk.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
}

/// The inverse of [`escape_tsv`]; None for a dangling or unknown escape.
pub fn unescape_tsv(field: &str) -> Option<String> {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '\\' => '\\',
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            _ => return None,
        });
    }
    Some(out)
}

/// Writes counts as TSV lines `chunk<TAB>count`, chunks escaped, in ascending chunk order.
pub fn write_tsv(counts: &mut SpillingCounts, path: &std::path::Path) -> Result<usize> {
    let file = File::create(path).map_err(|e| io_err(&format!("cannot write {}", path.display()), e))?;
    let mut w = BufWriter::new(file);
    let mut line = String::new();
    let mut n = 0usize;
    let mut result = Ok(());
    counts.drain_sorted(|k, v| {
        if result.is_err() {
            return;
        }
        line.clear();
        escape_tsv(&String::from_utf8_lossy(&k), &mut line);
        line.push('\t');
        line.push_str(&v.to_string());
        line.push('\n');
        n += 1;
        result = w.write_all(line.as_bytes()).map_err(|e| io_err("cannot write counts", e));
    })?;
    result?;
    w.flush().map_err(|e| io_err("cannot write counts", e))?;
    Ok(n)
}

/// Reads a counts TSV file (as written by [`write_tsv`], or SentencePiece's `word<TAB>count`)
/// into `counts`. Returns the number of lines read.
pub fn read_tsv(counts: &mut SpillingCounts, path: &std::path::Path) -> Result<usize> {
    use std::io::BufRead;
    let file = File::open(path).map_err(|e| Error::new(ErrorKind::Format, format!("cannot read {}: {e}", path.display())))?;
    let mut n = 0;
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let bad = |what: &str| Error::new(ErrorKind::Format, format!("{}:{}: {what}; each line must be chunk<TAB>count", path.display(), i + 1));
        let line = line.map_err(|e| bad(&format!("not UTF-8 text ({e})")))?;
        if line.is_empty() {
            continue;
        }
        let (field, count) = line.rsplit_once('\t').ok_or_else(|| bad("no tab"))?;
        if field.contains('\t') {
            return Err(bad("more than one tab (a tab inside a chunk is written \\t)"));
        }
        let count: u64 = count.trim_end_matches('\r').parse().map_err(|_| bad(&format!("{count:?} is not a count")))?;
        let chunk = unescape_tsv(field).ok_or_else(|| bad("a bad escape (use \\\\ \\t \\n \\r)"))?;
        counts.add(chunk.as_bytes(), count).map_err(|e| Error::new(e.kind, format!("{}:{}: {}", path.display(), i + 1, e.message)))?;
        counts.spill_if_over_budget()?;
        n += 1;
    }
    Ok(n)
}
