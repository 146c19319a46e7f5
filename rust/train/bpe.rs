//! Byte-level BPE training: count the chunks of a corpus, then learn merges.
//!
//! Ids during training are internal: byte `b` is id `b`, the k-th merge creates id `256 + k`.
//! The caller places special tokens and shifts ids afterwards.
//!
//! Tie rule (documented, and supported by `toksmith.reference.train_bpe(tie_break="lowest_id")`):
//! the pair with the highest count wins; among equal counts, the smallest (left id, right id),
//! i.e. the pair of the earliest-created tokens. It depends only on the counts, so the result
//! is the same whatever the order of the corpus or the number of threads.

use crate::error::{Error, ErrorKind, Result};
use crate::models::bpe::MergesModelBuilder;
use crate::train::handoff::{run_parts, Handoff};
use crate::pretokenize::Pretokenizer;
use crate::special::{Piece, SpecialTokens};
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};
use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A counted chunk's bytes: up to 16 inline (24 bytes in all, like a `Vec<u8>`), longer ones on
/// the heap. Counting 100 MB of English adds a million distinct chunks, nearly all that short.
pub type Chunk = smallvec::SmallVec<[u8; 16]>;
const _: () = assert!(std::mem::size_of::<Chunk>() == 24);

pub type ChunkCounts = FxHashMap<Chunk, u64>;

/// Text a count table covers before its thread starts another (see [`count_chunks`]). The
/// table of 1 MB of English (some 30,000 chunks) stays in a core's L2 cache. Against the tables
/// of 4 MB that one thread used to fill (paired runs, counting 100 MB): one thread +6% and +14%,
/// two threads +7% and +13%; tables of 2 MB gave +10% and +11%, of 4 MB -7% on two threads.
pub const TABLE_BYTES: usize = 1 << 20;

/// The chunk counts of some text as one thread counts them. Chunks of up to 15 bytes (nearly
/// all) are keyed by their bytes and length packed into one integer (`pack_short`, one 16-byte
/// load from the text): hashing and comparing that key is a few instructions, where a slice key
/// cost a hash over its bytes and a memcmp call (counting 100 MB of English: the table's entry
/// lookup and memcmp were 38% of the time). Longer chunks are keyed by slices of the text.
#[derive(Default)]
pub struct ChunkTally<'t> {
    // The packed key as two halves: entries of 24 bytes, not 32 (u128 is 16-byte aligned), so
    // more of the table stays in the CPU cache (its lookups wait on cache misses).
    short: FxHashMap<(u64, u64), u64>,
    long: FxHashMap<&'t str, u64>,
}

impl<'t> ChunkTally<'t> {
    /// Counts `chunk`, a slice of `text`.
    #[inline(always)]
    fn add(&mut self, text: &'t str, chunk: &'t str) {
        let at = chunk.as_ptr() as usize - text.as_ptr() as usize;
        match crate::models::bpe::pack_short_within(text.as_bytes(), at, chunk.len()) {
            Some(key) => *self.short.entry(key_halves(key)).or_insert(0) += 1,
            None => *self.long.entry(chunk).or_insert(0) += 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.short.is_empty() && self.long.is_empty()
    }

    /// The short chunks' packed keys (see [`unpack_short`]) and counts.
    pub fn short(&self) -> impl Iterator<Item = (u128, u64)> + '_ {
        self.short.iter().map(|(&halves, &n)| (key_of_halves(halves), n))
    }

    /// The longer chunks and their counts.
    pub fn long(&self) -> impl Iterator<Item = (&'t str, u64)> + '_ {
        self.long.iter().map(|(&k, &n)| (k, n))
    }

    /// Every (chunk, count).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], u64)) {
        for (key, n) in self.short() {
            let (bytes, len) = unpack_short(key);
            f(&bytes[..len], n);
        }
        for (chunk, n) in self.long() {
            f(chunk.as_bytes(), n);
        }
    }
}

/// A packed key as two `u64` halves (table entries of 24 bytes; a `u128` key is 16-byte
/// aligned and makes them 32).
#[inline]
pub fn key_halves(key: u128) -> (u64, u64) {
    (key as u64, (key >> 64) as u64)
}

/// The packed key of its two halves (see [`key_halves`]).
#[inline]
pub fn key_of_halves((lo, hi): (u64, u64)) -> u128 {
    lo as u128 | (hi as u128) << 64
}

/// The chunk packed as `key` by `pack_short`.
pub fn packed_chunk(key: u128) -> Chunk {
    let (bytes, len) = unpack_short(key);
    Chunk::from_slice(&bytes[..len])
}

/// The bytes (the first `len` of the array) and length of a chunk packed by `pack_short`.
#[inline]
pub fn unpack_short(key: u128) -> ([u8; 16], usize) {
    let bytes = key.to_le_bytes();
    (bytes, bytes[15] as usize)
}

/// Counts the pre-tokenized chunks of `texts` in parallel (on the current rayon pool), skipping
/// special-token strings so that no merge ever learns from them.
///
/// Returns tallies keyed by packed short chunks or by slices of the texts (no allocation per
/// chunk); [`SpillingCounts::add_tallies`](crate::train::counts::SpillingCounts::add_tallies) adds them
/// up, copying only distinct chunks. Each thread takes the next text not yet taken and counts
/// it into its current table, and starts a new table once that one covers `TABLE_BYTES` of
/// text. So the tables, and the entries there are to add up (each common chunk is in every
/// table), depend on the amount of text, not on the number of threads or of texts: with a table
/// per rayon split, 2 threads made 3 times as many tables as one, with 45% more entries in all.
/// And the texts can be small, so that no thread waits long for another's last one.
pub fn count_chunks<'t>(texts: &[&'t str], pretokenizer: &Pretokenizer, specials: &SpecialTokens) -> Result<Vec<ChunkTally<'t>>> {
    count_chunks_beside(texts, pretokenizer, specials, &|| {})
}

/// `count_chunks`, with `beside` run once by the first thread to start, while the others
/// count: the threads take texts as they come free, so that thread counts less. (Reading the
/// next block of a file there, instead of on a thread of its own, keeps to the pool's threads:
/// a reader beside them took cores from the counting threads at random, and a thread held up
/// holds up the step.)
pub fn count_chunks_beside<'t>(texts: &[&'t str], pretokenizer: &Pretokenizer, specials: &SpecialTokens, beside: &(dyn Fn() + Sync)) -> Result<Vec<ChunkTally<'t>>> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let beside_taken = AtomicBool::new(false);
    let count_some = |_: rayon::BroadcastContext| -> Result<Vec<ChunkTally<'t>>> {
        if !beside_taken.swap(true, Ordering::Relaxed) {
            beside();
        }
        let mut tables = Vec::new();
        let (mut counts, mut covered): (ChunkTally<'t>, usize) = Default::default();
        while !failed.load(Ordering::Relaxed) {
            let Some(text) = texts.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
            let mut result = Ok(());
            specials.split(text, |_| true, |piece| {
                if let (Piece::Text(t), Ok(())) = (piece, &result) {
                    result = pretokenizer.for_each_chunk(t, |c| counts.add(t, c));
                }
            });
            if let Err(e) = result {
                failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
            covered += text.len();
            if covered >= TABLE_BYTES {
                tables.push(std::mem::take(&mut counts));
                covered = 0;
            }
        }
        if !counts.is_empty() {
            tables.push(counts);
        }
        Ok(tables)
    };
    let mut tables = Vec::new();
    for per_thread in rayon::broadcast(count_some) {
        tables.extend(per_thread?);
    }
    Ok(tables)
}

/// Adds two count tables (the smaller into the larger).
pub fn merge_counts(a: ChunkCounts, b: ChunkCounts) -> ChunkCounts {
    let (mut big, small) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    for (k, v) in small {
        match big.get_mut(&k) {
            Some(c) => *c += v,
            None => {
                big.insert(k, v);
            }
        }
    }
    big
}

pub type Pair = (u32, u32);

/// A symbol that never pairs: characters left out of a limited alphabet.
pub const BARRIER: u32 = u32::MAX;

/// Byte-level words: every chunk as its byte values (ids 0-255), sorted so runs are repeatable.
pub fn byte_words(counts: &ChunkCounts) -> Vec<(Vec<u32>, u64)> {
    let mut words: Vec<(Vec<u32>, u64)> = counts.iter().map(|(k, &v)| (k.iter().map(|&b| b as u32).collect(), v)).collect();
    words.sort_unstable();
    words
}

/// Character-level words. The alphabet is the characters of the corpus (the last character of
/// a word carries `end_of_word_suffix` and is a symbol of its own), limited to the
/// `limit_alphabet` most frequent ones (ties: smaller code point first); left-out characters
/// become barriers that no merge crosses. Returns the alphabet (ids 0..n in code point order)
/// and the words.
pub fn char_words(counts: &ChunkCounts, limit_alphabet: Option<usize>, end_of_word_suffix: &str) -> Result<(Vec<String>, Vec<(Vec<u32>, u64)>)> {
    let mut symbol_freq: FxHashMap<String, u64> = FxHashMap::default();
    let mut texts: Vec<(&str, u64)> = Vec::with_capacity(counts.len());
    for (bytes, &n) in counts {
        let text = std::str::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::Training, "a chunk is not valid UTF-8"))?;
        for sym in char_symbols(text, end_of_word_suffix) {
            *symbol_freq.entry(sym).or_insert(0) += n;
        }
        texts.push((text, n));
    }
    let mut symbols: Vec<(String, u64)> = symbol_freq.into_iter().collect();
    if let Some(limit) = limit_alphabet {
        symbols.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        symbols.truncate(limit);
    }
    let mut alphabet: Vec<String> = symbols.into_iter().map(|(s, _)| s).collect();
    alphabet.sort_unstable();
    let ids: FxHashMap<&str, u32> = alphabet.iter().enumerate().map(|(i, s)| (s.as_str(), i as u32)).collect();
    let mut words: Vec<(Vec<u32>, u64)> = texts
        .iter()
        .map(|&(text, n)| (char_symbols(text, end_of_word_suffix).map(|s| ids.get(s.as_str()).copied().unwrap_or(BARRIER)).collect(), n))
        .collect();
    words.sort_unstable();
    Ok((alphabet, words))
}

fn char_symbols<'a>(text: &'a str, suffix: &'a str) -> impl Iterator<Item = String> + 'a {
    let last = text.char_indices().last().map_or(0, |(i, _)| i);
    text.char_indices().map(move |(i, c)| if i == last && !suffix.is_empty() { format!("{c}{suffix}") } else { c.to_string() })
}

/// The words merges are learned from, one after the other in one buffer (no allocation per
/// word): word `w` is `symbols[start..start + len]` of `info[w]` and occurs `freq` times. Merges
/// shorten words in place, so a word's start never moves.
pub struct Words {
    symbols: Vec<u32>,
    info: Vec<WordInfo>,
}

/// Where a word's symbols start, its length and how often it occurs: one record rather than an
/// array each, so that a merge visiting a word (a random place in megabytes of them) waits for
/// one cache line before its symbols, not three. Start and length share a 64-bit word: 16 bytes
/// a record, so none straddles two cache lines (of 24-byte records a quarter did) and the
/// records take a third less cache (merges 2-4% faster on one thread).
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct WordInfo {
    /// start << LEN_BITS | len
    start_len: u64,
    freq: u64,
}

const LEN_BITS: u32 = 28;
/// The longest word (chunk) training takes, in symbols (268 million); the symbols of all words
/// together are fewer than 2^36.
pub const MAX_WORD_SYMBOLS: usize = (1 << LEN_BITS) - 1;

impl WordInfo {
    fn new(start: usize, len: usize, freq: u64) -> Result<Self> {
        if len > MAX_WORD_SYMBOLS {
            return Err(Error::new(
                ErrorKind::Training,
                format!(
                    "a pre-tokenization chunk of {len} symbols is longer than training takes ({MAX_WORD_SYMBOLS}); \
                     use a pattern that cuts such text into shorter chunks"
                ),
            ));
        }
        if (start + len) as u64 >= 1u64 << (64 - LEN_BITS) {
            return Err(Error::new(ErrorKind::Training, "the distinct chunks of the corpus hold more than 2^36 symbols"));
        }
        Ok(WordInfo { start_len: (start as u64) << LEN_BITS | len as u64, freq })
    }

    #[inline(always)]
    fn start(&self) -> usize {
        (self.start_len >> LEN_BITS) as usize
    }

    #[inline(always)]
    fn len(&self) -> u32 {
        (self.start_len & MAX_WORD_SYMBOLS as u64) as u32
    }

    #[inline(always)]
    fn set_len(&mut self, len: u32) {
        debug_assert!(len as usize <= MAX_WORD_SYMBOLS);
        self.start_len = self.start_len & !(MAX_WORD_SYMBOLS as u64) | len as u64;
    }
}

impl Words {
    /// Words given as (symbols, count).
    pub fn new(words: Vec<(Vec<u32>, u64)>) -> Result<Self> {
        Self::build(words, |w, out| out.extend_from_slice(w))
    }

    /// Byte-level words from groups of (chunk, count), in group order: byte `b` is symbol `b`.
    /// The groups are turned into words on the current rayon pool, one group per task.
    pub fn from_chunk_groups(groups: Vec<Vec<(Chunk, u64)>>) -> Result<Self> {
        // Each group fills its own slices of the final buffers, found from the sizes of the
        // groups before it: no serial copy of the whole corpus afterwards.
        // Per group: its symbols and its longest chunk.
        let (sizes, longest): (Vec<usize>, Vec<usize>) =
            groups.par_iter().map(|g| g.iter().fold((0, 0), |(sum, max), (c, _)| (sum + c.len(), max.max(c.len())))).unzip();
        let (n_words, n_symbols): (usize, usize) = (groups.iter().map(Vec::len).sum(), sizes.iter().sum());
        // The records are checked here (length and end of the last word), so that writing them
        // below cannot fail.
        let longest = longest.into_iter().max().unwrap_or(0);
        WordInfo::new(n_symbols.saturating_sub(longest), longest, 0)?;
        // A zeroed allocation comes from the OS untouched, and the records are left uninitialised
        // until their group writes them: the pages are first written in parallel below.
        let mut symbols_buffer = vec![0; n_symbols];
        let mut info_buffer: Vec<WordInfo> = Vec::with_capacity(n_words);
        let mut slices = Vec::with_capacity(groups.len());
        let (mut symbols, mut info) = (&mut symbols_buffer[..], &mut info_buffer.spare_capacity_mut()[..n_words]);
        let mut base = 0;
        for (g, &size) in groups.iter().zip(&sizes) {
            let (s, rest) = std::mem::take(&mut symbols).split_at_mut(size);
            symbols = rest;
            let (i, rest) = std::mem::take(&mut info).split_at_mut(g.len());
            info = rest;
            slices.push((s, i, base));
            base += size;
        }
        groups.into_par_iter().zip(slices).for_each(|(chunks, (symbols, info, base))| {
            let mut at = 0;
            for (k, (chunk, n)) in chunks.into_iter().enumerate() {
                let record = WordInfo::new(base + at, chunk.len(), n).expect("checked before: a chunk no longer than the longest, ending in the buffer");
                info[k].write(record);
                for (s, &b) in symbols[at..at + chunk.len()].iter_mut().zip(&chunk) {
                    *s = b as u32;
                }
                at += chunk.len();
            }
        });
        // SAFETY: the groups' slices tile the first `n_words` records, and each group wrote
        // every record of its slice (one per chunk) above.
        unsafe { info_buffer.set_len(n_words) };
        Ok(Words { symbols: symbols_buffer, info: info_buffer })
    }

    fn build<T>(items: Vec<(T, u64)>, push_symbols: impl Fn(&T, &mut Vec<u32>)) -> Result<Self> {
        let mut words = Words { symbols: Vec::new(), info: Vec::with_capacity(items.len()) };
        for (item, n) in items {
            let start = words.symbols.len();
            push_symbols(&item, &mut words.symbols);
            words.info.push(WordInfo::new(start, words.symbols.len() - start, n)?);
        }
        Ok(words)
    }

    pub fn is_empty(&self) -> bool {
        self.info.is_empty()
    }

    fn len(&self) -> usize {
        self.info.len()
    }

    fn get(&self, w: usize) -> &[u32] {
        let info = self.info[w];
        &self.symbols[info.start()..info.start() + info.len() as usize]
    }

    /// Where the symbols of word `w` start, and the end of the buffer for `w` = the number of
    /// words.
    fn start(&self, w: usize) -> usize {
        self.info.get(w).map_or(self.symbols.len(), |i| i.start())
    }
}

/// Learns merges step by step, so a caller can report progress between steps.
///
/// Word symbols are ids; a merge creates the next id. Each pair has its count and the sorted
/// list of words it may occur in. A merge rewrites only those words and changes only the pairs
/// around each occurrence, first into a small local record (a [`Delta`]), then into the table.
/// Merges that touch many words are split over the rayon threads: each part gets its own
/// `Delta`, and the parts are added in word order, so the result is the same for any number
/// of threads (counts are sums; word lists come out sorted either way).
///
/// A max-queue holds one (count, pair) entry per pair: pushed when the pair appears (and all
/// again from the table when its floor rises), with a count that can only be too high later (a
/// pair's count never grows once the merge that created it is over). A popped entry whose count
/// is stale is pushed back with the current count.
pub struct MergeLearner {
    words: Words,
    /// The index of every word of at least `long_word` symbols (see `LongWord`).
    long: FxHashMap<u32, std::sync::Mutex<LongWord>>,
    long_word: usize,
    /// The pair table, in `PAIR_SHARDS` shards.
    pairs: Vec<PairShard>,
    queue: PairQueue,
    /// One per part of a merge, kept so that merges do not allocate them again.
    scratch: Vec<Delta>,
    /// Per shard, the table changes of a merge, and the queue entries they make.
    changes: Vec<ShardChanges>,
    merges: Vec<Pair>,
    counts: Vec<u64>,
    /// Length of every symbol (bytes or characters), for `max_token_length`.
    length: Vec<u32>,
    next_id: u32,
    min_frequency: u64,
    /// Pairs counted below this are not kept in the table (see `raise_floor`); at least
    /// `min_frequency`. (Not the queue's own floor, which only orders entries.)
    table_floor: u64,
    /// The number of merges training will ask for, if known: it lets the floor rise.
    target: Option<usize>,
    /// When the floor is reconsidered: from this many merges on, every `floor_every`.
    floor_from: usize,
    floor_every: usize,
    /// The floor is the expected last count divided by this (doubled at each recount).
    floor_margin: f64,
    /// The number of merges at the last recount (see `recount`).
    recounted_at: Option<usize>,
    max_token_length: Option<u32>,
    constraints: Option<Constraints>,
    /// A merge is split over threads only from this many words per thread: below it, starting
    /// the parts costs more than they save.
    min_words_per_thread: usize,
    /// From how many table changes a merge's changes are split over threads.
    min_parallel_updates: usize,
    finished: bool,
    /// The byte-level model of the merges so far, if asked for (`with_model_builder`): on
    /// several threads, a waiting thread adds each step's merges at the start of the next.
    model: Option<MergesModelBuilder>,
}

/// The merge queue: a max-heap of (count, pair), ties to the smallest pair, that holds only the
/// entries counted at least `floor`; the others wait unsorted in buckets by the power of two
/// below their count, until the heap runs dry; then the highest waiting bucket moves in and the
/// floor drops to its power of two. Training pops a few tens of thousands of pairs out of
/// millions: keeping the rest out of the heap makes every pop and push cheaper (a shallower heap
/// that stays in cache), and an entry waiting in a bucket costs nothing until it is needed. The
/// order is exactly a single heap's: every entry in the heap is at least `floor`, every entry
/// in a bucket under it.
struct PairQueue {
    heap: BinaryHeap<(u64, Reverse<Pair>)>,
    /// `below[b]`: entries with a count in [2^b, 2^(b+1)), all under `floor`.
    below: Vec<Vec<(u64, Pair)>>,
    floor: u64,
}

impl PairQueue {
    fn new(entries: Vec<(u64, Pair)>) -> Self {
        let mut queue = PairQueue { heap: BinaryHeap::new(), below: vec![Vec::new(); 64], floor: u64::MAX };
        for (count, pair) in entries {
            queue.push(count, pair);
        }
        queue
    }

    /// A queue of every pair of the table.
    fn of_table(pairs: &[PairShard]) -> Self {
        Self::new(pairs.iter().flat_map(|shard| shard.iter()).map(|(&p, info)| (info.count, p)).collect())
    }

    fn push(&mut self, count: u64, pair: Pair) {
        if count >= self.floor {
            self.heap.push((count, Reverse(pair)));
        } else {
            self.below[count.max(1).ilog2() as usize].push((count, pair));
        }
    }

    fn pop(&mut self) -> Option<(u64, Pair)> {
        while self.heap.is_empty() {
            // The highest waiting bucket moves into the heap; the floor drops to its bound.
            let b = self.below.iter().rposition(|bucket| !bucket.is_empty())?;
            let bucket = std::mem::take(&mut self.below[b]);
            self.floor = 1 << b;
            self.heap.extend(bucket.into_iter().map(|(count, pair)| (count, Reverse(pair))));
        }
        self.heap.pop().map(|(count, Reverse(pair))| (count, pair))
    }
}

/// Threads a merge is split over at most: more would rarely find enough words to share.
pub const MAX_MERGE_THREADS: usize = 8;

/// A pair's total count and the words it may occur in (ascending, no repeats; entries can be
/// stale, i.e. an earlier merge consumed the pair there).
#[derive(Default)]
struct PairInfo {
    count: u64,
    words: Vec<u32>,
}

/// The pair table, in shards by pair. After a merge, the table changes at the neighbours of its
/// occurrences: hundreds of keys for a frequent pair, each a cache miss in a table of millions
/// of pairs. Every key lives in one shard, so the shards' changes are made on different threads
/// at once, with the same outcome as one table's.
const PAIR_SHARDS: usize = 8;

/// A merge's table changes are split over threads from this many on (below, handing them out
/// costs more than it saves: each change is about one cache miss, 0.1 µs).
const MIN_PARALLEL_UPDATES: usize = 64;

/// A shard of the pair table, on cache lines of its own: during a merge the shards are
/// changed by different threads at once, and the maps' headers (item counts) side by side made
/// each insert or remove on one thread evict a line that the other thread was changing too.
#[repr(align(128))]
#[derive(Default)]
struct PairShard(FxHashMap<Pair, PairInfo>);

impl std::ops::Deref for PairShard {
    type Target = FxHashMap<Pair, PairInfo>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for PairShard {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// A merge's changes of one shard, and the queue entries they make; kept between merges (their
/// memory) and, like the shards, on cache lines of their own.
#[repr(align(128))]
#[derive(Default, Clone)]
struct ShardChanges {
    updates: Vec<PairUpdate>,
    pushes: Vec<(u64, Pair)>,
}

/// The shard of a pair. A mix of its own rather than the maps' hash, so that the pairs of one
/// shard still spread over all of its map's buckets and control bits.
#[inline]
fn shard_of((a, b): Pair) -> usize {
    let x = ((a as u64) << 32 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> (64 - PAIR_SHARDS.trailing_zeros())) as usize
}

/// One change of the pair table after a merge.
#[derive(Clone, Copy)]
enum PairUpdate {
    /// A pair with the new symbol: its count, and where its words are (the neighbour `sym` on
    /// the left or right side of the merge's deltas).
    New { pair: Pair, count: u64, sym: u32, left: bool },
    /// An old pair that lost `by` occurrences to the merge.
    Fewer { pair: Pair, by: u64 },
}

/// What merging `(a, b)` into `new` changes in some words. Every occurrence with `x` on its left
/// moves its count from `(x, a)` to `(x, new)`, and with `y` on its right from `(b, y)` to
/// `(new, y)`: so the changes are counts per neighbour symbol (plus the words where the new
/// pairs appear), kept in arrays indexed by symbol id rather than hashed. Each on cache lines
/// of its own: the parts of a merge fill theirs on different threads at once.
#[repr(align(128))]
#[derive(Default)]
struct Delta {
    left: Side,
    right: Side,
}

/// One side of a merge's changes: per neighbour symbol, the count moved and the words.
///
/// Kept dense: the symbols a merge touches (tens, out of tens of thousands) get consecutive
/// entries, found through a per-symbol index of 4 bytes. A table of entries indexed by symbol
/// (32 bytes each, 1 MB a side for 32,000 tokens) made nearly every `add` a miss of the
/// core's L2 cache, shared with the words being merged.
#[derive(Default)]
struct Side {
    /// Per symbol: its entry's position, or `NOT_TOUCHED`.
    index: Vec<u32>,
    /// Per touched symbol, in the order of `touched`: the count moved, and the words
    /// (ascending, no repeats). Entries past `touched.len()` are spare (their lists keep their
    /// memory for the next merges).
    entries: Vec<(u64, Vec<u32>)>,
    /// The symbols with an entry, in the order first seen.
    touched: Vec<u32>,
}

const NOT_TOUCHED: u32 = u32::MAX;

impl Delta {
    fn side(&self, left: bool) -> &Side {
        if left {
            &self.left
        } else {
            &self.right
        }
    }
}

impl Side {
    /// Makes room for symbols below `n`.
    fn cover(&mut self, n: usize) {
        if self.index.len() < n {
            self.index.resize(n, NOT_TOUCHED);
        }
    }

    /// The entry of `sym`, made (empty) if it has none.
    #[inline]
    fn entry(&mut self, sym: u32) -> &mut (u64, Vec<u32>) {
        let mut k = self.index[sym as usize];
        if k == NOT_TOUCHED {
            k = self.touched.len() as u32;
            self.index[sym as usize] = k;
            self.touched.push(sym);
            if self.entries.len() == k as usize {
                self.entries.push(Default::default());
            }
        }
        &mut self.entries[k as usize]
    }

    fn add(&mut self, sym: u32, f: u64, w: u32) {
        let entry = self.entry(sym);
        entry.0 += f;
        if entry.1.last() != Some(&w) {
            entry.1.push(w);
        }
    }

    /// The count moved for `sym` (0 if none).
    fn count(&self, sym: u32) -> u64 {
        self.words_and_count(sym).0
    }

    /// The count moved for `sym` and its words (0 and none if untouched).
    fn words_and_count(&self, sym: u32) -> (u64, &[u32]) {
        match self.index.get(sym as usize) {
            Some(&k) if k != NOT_TOUCHED => (self.entries[k as usize].0, &self.entries[k as usize].1),
            _ => (0, &[]),
        }
    }

    /// The touched symbols with their counts, in the order first seen.
    fn counts(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.touched.iter().zip(&self.entries).map(|(&sym, e)| (sym, e.0))
    }

    fn clear(&mut self) {
        for (sym, entry) in self.touched.drain(..).zip(self.entries.iter_mut()) {
            self.index[sym as usize] = NOT_TOUCHED;
            entry.0 = 0;
            entry.1.clear();
        }
    }
}

/// Merges the occurrences of `pair` in `word` into `new_id`, left to right, in place (`len` is
/// the word's length, shortened), and records each occurrence's neighbours in `delta`. The left
/// neighbour is read from the merged output, so back-to-back occurrences ("a b a b") are counted
/// right. Does nothing when the pair is not in the word (a stale entry of the word list).
fn merge_word(word: &mut [u32], len: &mut u32, w: u32, f: u64, pair: Pair, new_id: u32, delta: &mut Delta) {
    let (a, b) = pair;
    let n = *len as usize;
    let Some(first) = word[..n].windows(2).position(|p| p[0] == a && p[1] == b) else {
        return;
    };
    // Output position j never passes input position i, so the rewrite can be in place.
    let (mut i, mut j) = (first, first);
    while i < n {
        if i + 1 < n && word[i] == a && word[i + 1] == b {
            if j > 0 && word[j - 1] != BARRIER {
                delta.left.add(word[j - 1], f, w);
            }
            if i + 2 < n && word[i + 2] != BARRIER {
                delta.right.add(word[i + 2], f, w);
            }
            word[j] = new_id;
            i += 2;
        } else {
            word[j] = word[i];
            i += 1;
        }
        j += 1;
    }
    *len = j as u32;
}

/// Words from this many symbols on are merged through a `LongWord` index.
const LONG_WORD: usize = 4096;

/// When the floor is first raised (in merges), and how often after that, and how far under the
/// expected count of the last merge it stays (see `raise_floor`). With a margin of 3 from
/// merge 1,024 on, no floor overshot the last merge's count in 17 trainings: English (100 MB;
/// vocabularies of 8,000, 32,000 and 64,000), Python code (19 MB; 8,000 and 32,000), four
/// Debian Handbooks (1 MB; 4,000, 8,000 and 16,000); with 2, six did (by up to 50%).
const FLOOR_FROM: usize = 1024;
const FLOOR_EVERY: usize = 1024;
const FLOOR_MARGIN: f64 = 3.0;

/// Merges between two prunings of the long words' indexes (see `prune_long_words`).
const PRUNE_LONG_WORDS: usize = 256;

/// Marks a position of a long word that an earlier merge folded into its left neighbour.
const GONE: u32 = u32::MAX - 1;

/// A long word (a run of hundreds of kilobytes with no space, such as DNA or base64, under a
/// pattern that does not cut it) as a list: its symbols stay where they are in the words'
/// buffer (a merged-away one becomes `GONE`), linked to their neighbours still there, with the
/// positions of every pair. `merge_word` rewrites a word from the pair's first occurrence to
/// its end, and a long word holds nearly every pair: a chunk of 4 MB, vocabulary 8,000, took
/// 26 s that way. Here a merge visits only the pair's positions.
struct LongWord {
    next: Vec<u32>,
    prev: Vec<u32>,
    /// Pair -> positions of its left symbol (in no order, some stale: checked when used). A pair
    /// is merged once: once merged, it never forms again (a merge makes pairs with its new
    /// symbol only).
    index: FxHashMap<Pair, Vec<u32>>,
}

/// No neighbour on that side.
const NONE: u32 = u32::MAX;

impl LongWord {
    fn new(word: &[u32]) -> Self {
        let n = word.len() as u32;
        let mut index: FxHashMap<Pair, Vec<u32>> = FxHashMap::default();
        for (i, p) in word.windows(2).enumerate() {
            if p[0] != BARRIER && p[1] != BARRIER {
                index.entry((p[0], p[1])).or_default().push(i as u32);
            }
        }
        LongWord { next: (1..=n).map(|i| if i == n { NONE } else { i }).collect(), prev: (0..n).map(|i| i.checked_sub(1).unwrap_or(NONE)).collect(), index }
    }
}

/// `merge_word` for a long word: the same merges, left to right, and the same record in `delta`.
fn merge_long_word(word: &mut [u32], lw: &mut LongWord, w: u32, f: u64, (a, b): Pair, new_id: u32, delta: &mut Delta) {
    let Some(mut positions) = lw.index.remove(&(a, b)) else { return };
    positions.sort_unstable();
    positions.dedup();
    for i in positions {
        // Still this pair? An earlier merge (of this pair too: "a a a") may have changed it.
        let j = lw.next[i as usize];
        if word[i as usize] != a || j == NONE || word[j as usize] != b {
            continue;
        }
        let (p, q) = (lw.prev[i as usize], lw.next[j as usize]);
        // The left neighbour is already merged output, the right one not yet, as in `merge_word`.
        let left = (p != NONE).then(|| word[p as usize]).filter(|&s| s != BARRIER);
        let right = (q != NONE).then(|| word[q as usize]).filter(|&s| s != BARRIER);
        word[i as usize] = new_id;
        word[j as usize] = GONE;
        lw.next[i as usize] = q;
        if q != NONE {
            lw.prev[q as usize] = i;
        }
        if let Some(x) = left {
            delta.left.add(x, f, w);
            lw.index.entry((x, new_id)).or_default().push(p);
        }
        if let Some(y) = right {
            delta.right.add(y, f, w);
            lw.index.entry((new_id, y)).or_default().push(i);
        }
    }
}

/// The pairs of all words counted at least `min_count` times, with their word lists: counted in
/// runs of consecutive words, one per thread of the current rayon pool, added in word order.
fn count_all_pairs(words: &Words, min_count: u64) -> Vec<PairShard> {
    if words.symbols.par_iter().all(|&s| s < 256) {
        return count_byte_pairs(words, min_count);
    }
    count_hashed_pairs(words, min_count)
}

/// `count_all_pairs` of any words: each thread counts a range of words into hash maps, then
/// the maps are added shard by shard.
fn count_hashed_pairs(words: &Words, min_count: u64) -> Vec<PairShard> {
    let parts: Vec<Vec<PairShard>> = runs_per_thread(words.len()).into_par_iter().map(|run| count_pairs(words, run)).collect();
    // The parts are added shard by shard, each shard on its own thread.
    let mut by_shard: Vec<Vec<PairShard>> = (0..PAIR_SHARDS).map(|_| Vec::with_capacity(parts.len())).collect();
    for part in parts {
        for (shard, map) in part.into_iter().enumerate() {
            by_shard[shard].push(map);
        }
    }
    by_shard
        .into_par_iter()
        .map(|maps| {
            let mut maps = maps.into_iter();
            let mut pairs = maps.next().unwrap_or_default();
            for part in maps {
                for (key, info) in part.0 {
                    let total = pairs.entry(key).or_default();
                    total.count += info.count;
                    total.words.extend_from_slice(&info.words);
                }
            }
            pairs.retain(|_, info| info.count >= min_count);
            pairs
        })
        .collect()
}

/// `count_all_pairs` of words that are all bytes (symbols under 256, no barrier: training
/// starting at byte level): the pairs are counted in dense arrays of the 65,536 byte pairs, with
/// no hashing or probing, then the ones kept go into the table. Each thread takes a range of
/// words, twice: first it counts each pair and the words that hold it, then, once every kept
/// pair's word list is allocated at its final size, it writes its words into its own part of
/// each list (after the parts of the ranges before it, so the lists come out in word order).
/// Lists grown word by word per range and then joined cost more: at two threads, joining them
/// took a third of this function's time (one thread: see `count_byte_pairs_at_once`).
fn count_byte_pairs(words: &Words, min_count: u64) -> Vec<PairShard> {
    const PAIRS: usize = 1 << 16;
    let runs = runs_per_thread(words.len());
    if runs.len() == 1 {
        return count_byte_pairs_at_once(words, min_count);
    }
    // Per range and pair: (count, number of words holding it).
    let tallies: Vec<Vec<(u64, u32)>> = runs
        .par_iter()
        .map(|run| {
            let (mut tally, mut last) = (vec![(0u64, 0u32); PAIRS], vec![u32::MAX; PAIRS]);
            for w in run.clone() {
                let freq = words.info[w].freq;
                for p in words.get(w).windows(2) {
                    let i = byte_pair_index(p);
                    tally[i].0 += freq;
                    if last[i] != w as u32 {
                        last[i] = w as u32;
                        tally[i].1 += 1;
                    }
                }
            }
            tally
        })
        .collect();
    // The kept pairs' totals, their lists (room only), and where each range's part starts.
    let mut totals = vec![(0u64, 0usize); PAIRS];
    let mut starts: Vec<Vec<usize>> = Vec::with_capacity(runs.len());
    for tally in &tallies {
        starts.push(totals.iter().map(|&(_, n)| n).collect());
        for (total, &(count, n)) in totals.iter_mut().zip(tally) {
            total.0 += count;
            total.1 += n as usize;
        }
    }
    let kept = |count: u64| kept_byte_pair(count, min_count);
    let mut lists: Vec<Vec<u32>> = totals.iter().map(|&(count, n)| if kept(count) { Vec::with_capacity(n) } else { Vec::new() }).collect();
    struct Lists(Vec<*mut u32>);
    // SAFETY: the pointers are only written through, each range within its own part (below).
    unsafe impl Sync for Lists {}
    let bases = Lists(lists.iter_mut().map(|list| list.as_mut_ptr()).collect());
    runs.par_iter().zip(starts).for_each(|(run, mut next)| {
        let bases = &bases;
        let mut last = vec![u32::MAX; PAIRS];
        for w in run.clone() {
            for p in words.get(w).windows(2) {
                let i = byte_pair_index(p);
                if last[i] != w as u32 && kept(totals[i].0) {
                    last[i] = w as u32;
                    // SAFETY: this range holds pair i in exactly `tallies[r][i].1` words, counted
                    // the same way in the first pass; its part of list i is that many slots from
                    // `starts[r][i]`, after the parts of the ranges before it and within the
                    // list's capacity (the sum over all ranges). No other range writes there.
                    unsafe { bases.0[i].add(next[i]).write(w as u32) };
                    next[i] += 1;
                }
            }
        }
    });
    let infos = lists.into_iter().zip(totals).map(|(mut list, (count, n))| {
        if kept(count) {
            // SAFETY: every range wrote all of its part, and the parts tile the `n` slots.
            unsafe { list.set_len(n) };
        }
        PairInfo { count, words: list }
    });
    byte_pair_table(infos, min_count)
}

/// `count_byte_pairs` on one thread, in one pass: growing the lists word by word costs less
/// here than a second pass over the words.
fn count_byte_pairs_at_once(words: &Words, min_count: u64) -> Vec<PairShard> {
    let mut dense: Vec<PairInfo> = (0..1 << 16).map(|_| PairInfo::default()).collect();
    for w in 0..words.len() {
        let freq = words.info[w].freq;
        for p in words.get(w).windows(2) {
            let info = &mut dense[byte_pair_index(p)];
            info.count += freq;
            if info.words.last() != Some(&(w as u32)) {
                info.words.push(w as u32);
            }
        }
    }
    byte_pair_table(dense.into_iter(), min_count)
}

/// The index of a pair of byte symbols in the dense arrays of `count_byte_pairs`.
#[inline]
fn byte_pair_index(p: &[u32]) -> usize {
    (p[0] << 8 | p[1]) as usize
}

/// Whether a byte pair counted `count` times goes into the table.
#[inline]
fn kept_byte_pair(count: u64, min_count: u64) -> bool {
    count >= min_count && count > 0
}

/// The pair table of the byte pairs given densely (the pair of index `i` first) that are kept.
fn byte_pair_table(infos: impl Iterator<Item = PairInfo>, min_count: u64) -> Vec<PairShard> {
    let mut pairs: Vec<PairShard> = (0..PAIR_SHARDS).map(|_| PairShard::default()).collect();
    for (i, info) in infos.enumerate() {
        if kept_byte_pair(info.count, min_count) {
            let pair = ((i >> 8) as u32, (i & 255) as u32);
            pairs[shard_of(pair)].insert(pair, info);
        }
    }
    pairs
}

/// Words `0..n` in runs of consecutive words, one per thread of the current rayon pool.
fn runs_per_thread(n: usize) -> Vec<std::ops::Range<usize>> {
    let run = n.div_ceil(rayon::current_num_threads()).max(1);
    (0..n).step_by(run).map(|start| start..(start + run).min(n)).collect()
}

/// The pairs of words `range`: counts and ascending word lists, in shards (see `shard_of`).
fn count_pairs(words: &Words, range: std::ops::Range<usize>) -> Vec<PairShard> {
    let mut pairs: Vec<PairShard> = (0..PAIR_SHARDS).map(|_| PairShard::default()).collect();
    for w in range {
        for p in words.get(w).windows(2) {
            if p[0] != BARRIER && p[1] != BARRIER {
                let pair = (p[0], p[1]);
                let info = pairs[shard_of(pair)].entry(pair).or_default();
                info.count += words.info[w].freq;
                if info.words.last() != Some(&(w as u32)) {
                    info.words.push(w as u32);
                }
            }
        }
    }
    pairs
}

/// A run of words for one thread: its ids (ascending) and the parts of the buffers that hold
/// them (symbols from `sym_offset`, word records from word `word_offset`).
struct Run<'a> {
    ids: &'a [u32],
    symbols: &'a mut [u32],
    sym_offset: usize,
    info: &'a mut [WordInfo],
    word_offset: usize,
}

/// Splits the given ascending word ids into `parts` runs of about equal numbers of ids, each
/// with the (disjoint) parts of the word buffers it may change.
fn split_words<'a>(words: &'a mut Words, ids: &'a [u32], parts: usize) -> Vec<Run<'a>> {
    if parts == 1 {
        // All of the buffers: finding the run's bounds would cost two more waits for records
        // (its first word's and the one after its last), before any of its words is read.
        return vec![Run { ids, symbols: &mut words.symbols[..], sym_offset: 0, info: &mut words.info[..], word_offset: 0 }];
    }
    // Each run's ids, its words [first, end) and their symbols, found before the buffers are split.
    let bounds: Vec<(&[u32], usize, usize, usize, usize)> = ids
        .chunks(ids.len().div_ceil(parts).max(1))
        .map(|chunk| {
            let (first, end) = (chunk[0] as usize, chunk[chunk.len() - 1] as usize + 1);
            (chunk, first, end, words.start(first), words.start(end))
        })
        .collect();
    let (mut symbols, mut info) = (&mut words.symbols[..], &mut words.info[..]);
    let (mut sym_offset, mut word_offset) = (0usize, 0usize);
    let mut runs = Vec::with_capacity(parts);
    for (chunk, first, end, sym_first, sym_end) in bounds {
        // Drop what lies before this run, keep [first, end) and go on with the rest.
        let (_, rest) = std::mem::take(&mut symbols).split_at_mut(sym_first - sym_offset);
        let (mine, rest) = rest.split_at_mut(sym_end - sym_first);
        symbols = rest;
        let (_, rest_info) = std::mem::take(&mut info).split_at_mut(first - word_offset);
        let (mine_info, rest_info) = rest_info.split_at_mut(end - first);
        info = rest_info;
        runs.push(Run { ids: chunk, symbols: mine, sym_offset: sym_first, info: mine_info, word_offset: first });
        sym_offset = sym_end;
        word_offset = end;
    }
    runs
}

/// Limits on which tokens a merge may create (SuperBPE's stage 2): at most `max_words` words per
/// token, and no token matching a forbidden pattern. They need every token's bytes.
pub struct Constraints {
    /// id -> token bytes, for the ids the words start with; merges append to it.
    pub token_bytes: Vec<Vec<u8>>,
    pub max_words: Option<u32>,
    pub forbidden: Vec<fancy_regex::Regex>,
    /// Bytes of every token so far: a merge may not create a token that already exists (when
    /// continuing an existing vocabulary, its segmentation can leave such pairs unmerged).
    pub taken: FxHashSet<Vec<u8>>,
}

impl Constraints {
    fn allows(&self, pair: Pair) -> bool {
        let joined = [self.token_bytes[pair.0 as usize].as_slice(), self.token_bytes[pair.1 as usize].as_slice()].concat();
        if self.taken.contains(&joined) {
            return false;
        }
        if let Some(max) = self.max_words {
            if count_words(&joined) > max {
                return false;
            }
        }
        if !self.forbidden.is_empty() {
            let text = String::from_utf8_lossy(&joined);
            if self.forbidden.iter().any(|re| re.is_match(&text).unwrap_or(true)) {
                return false;
            }
        }
        true
    }
}

/// Words in a token: maximal runs of non-whitespace bytes.
///
/// `b" by the way"` -> 3, `b"way, "` -> 1.
pub fn count_words(bytes: &[u8]) -> u32 {
    let mut words = 0;
    let mut in_word = false;
    for &b in bytes {
        let space = b.is_ascii_whitespace();
        if !space && !in_word {
            words += 1;
        }
        in_word = !space;
    }
    words
}

impl MergeLearner {
    /// `words`: (symbols, count); `first_new_id`: the id of the first merge; `lengths`: the length
    /// of each initial symbol.
    pub fn new(words: Vec<(Vec<u32>, u64)>, first_new_id: u32, lengths: Vec<u32>, min_frequency: u64, max_token_length: Option<u32>) -> Result<Self> {
        Self::from_words(Words::new(words)?, first_new_id, lengths, min_frequency, max_token_length)
    }

    /// As [`MergeLearner::new`], from [`Words`]. The pairs are counted on the current rayon pool.
    pub fn from_words(words: Words, first_new_id: u32, lengths: Vec<u32>, min_frequency: u64, max_token_length: Option<u32>) -> Result<Self> {
        if words.is_empty() {
            return Err(Error::new(
                ErrorKind::Training,
                "the corpus is empty: no text was found to train on. Check the paths or the iterable you passed",
            ));
        }
        // Every count of the training (a pair's, a merge's) is at most the sum over the words of
        // their count times their pairs: when that fits in 64 bits, no sum can wrap. (Counts
        // files can hold any count, see `read_tsv`.)
        let total: u128 = words.info.par_iter().map(|i| i.freq as u128 * i.len().saturating_sub(1) as u128).sum();
        if total > u64::MAX as u128 {
            return Err(Error::new(
                ErrorKind::Training,
                format!("the chunk counts are too large: their pairs add up to {total}, past 2^64 - 1; scale the counts down"),
            ));
        }
        // Rare pairs can never be merged (see `absorb`).
        let min_frequency = min_frequency.max(1);
        let pairs = count_all_pairs(&words, min_frequency);
        let queue = PairQueue::of_table(&pairs);
        let long = Self::long_words(&words, LONG_WORD);
        let mut learner = MergeLearner {
            words,
            long,
            long_word: LONG_WORD,
            pairs,
            queue,
            scratch: Vec::new(),
            changes: vec![ShardChanges::default(); PAIR_SHARDS],
            merges: Vec::new(),
            counts: Vec::new(),
            length: lengths,
            next_id: first_new_id,
            min_frequency,
            table_floor: min_frequency,
            target: None,
            floor_from: FLOOR_FROM,
            floor_every: FLOOR_EVERY,
            floor_margin: FLOOR_MARGIN,
            recounted_at: None,
            max_token_length,
            constraints: None,
            min_words_per_thread: 64,
            min_parallel_updates: MIN_PARALLEL_UPDATES,
            finished: false,
            model: None,
        };
        learner.prune_long_words();
        Ok(learner)
    }

    fn long_words(words: &Words, long_word: usize) -> FxHashMap<u32, std::sync::Mutex<LongWord>> {
        (0..words.len())
            .into_par_iter()
            .filter(|&w| words.info[w].len() as usize >= long_word)
            .map(|w| (w as u32, std::sync::Mutex::new(LongWord::new(words.get(w)))))
            .collect()
    }

    /// Sets from how many symbols a word is merged as a `LongWord` (tests use small ones).
    pub fn with_long_word(mut self, n: usize) -> Self {
        self.long_word = n.max(2);
        self.long = Self::long_words(&self.words, self.long_word);
        self.prune_long_words();
        self
    }

    /// Adds limits on the tokens merges may create (see [`Constraints`]).
    pub fn with_constraints(mut self, constraints: Constraints) -> Self {
        self.constraints = Some(constraints);
        self
    }

    /// Tells how many merges training will ask for in all, so that the floor can rise (see
    /// `raise_floor`). Without it every pair of at least `min_frequency` stays in the table.
    pub fn set_target(&mut self, merges: usize) {
        self.target = Some(merges);
    }

    /// Sets when the floor is reconsidered (tests use small numbers).
    pub fn with_floor_schedule(mut self, from: usize, every: usize) -> Self {
        (self.floor_from, self.floor_every) = (from.max(2), every.max(1));
        self
    }

    /// Sets from how many words per thread a merge is split over threads (tests use 1).
    pub fn with_min_words_per_thread(mut self, n: usize) -> Self {
        self.min_words_per_thread = n.max(1);
        self
    }

    /// Sets from how many pair-table changes a merge's changes are split over threads (tests
    /// use 1).
    pub fn with_min_parallel_updates(mut self, n: usize) -> Self {
        self.min_parallel_updates = n.max(1);
        self
    }

    /// Builds the byte-level model alongside the merges (see `take_model`); for a learner whose
    /// words start as bytes (ids 0-255, new ids from 256).
    pub fn with_model_builder(mut self) -> Self {
        if self.next_id == 256 && self.merges.is_empty() {
            self.model = Some(MergesModelBuilder::new());
        }
        self
    }

    /// The model builder with every merge learned so far, if one was asked for and nothing
    /// went wrong in it (the caller then builds the model from the merges as usual). It is
    /// given away: a second call, or one after more steps, gets None.
    pub fn take_model(&mut self) -> Option<MergesModelBuilder> {
        let mut model = self.model.take()?;
        let have = model.num_merges();
        model.extend(&self.merges[have..]).ok()?;
        Some(model)
    }

    pub fn merges(&self) -> &[Pair] {
        &self.merges
    }

    /// The count of each learned merge when it was chosen.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Pairs counted below this are not in the table (see `raise_floor`).
    pub fn table_floor(&self) -> u64 {
        self.table_floor
    }

    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Learns up to `n` more merges; returns how many it learned (fewer once training is done).
    /// Large merges are split over the current rayon pool (at most [`MAX_MERGE_THREADS`]).
    ///
    /// Meanwhile the other threads wait for parts of merges in a loop rather than asleep (waking
    /// a sleeping thread takes tens of microseconds, longer than most merges take), each on its
    /// own mailbox (see `handoff`): a part handed over that way starts sooner than a rayon job.
    pub fn step(&mut self, n: usize) -> usize {
        let threads = rayon::current_num_threads().min(MAX_MERGE_THREADS);
        if threads == 1 {
            return self.step_here(n, &[]);
        }
        let stop = AtomicBool::new(false);
        // The model catches up with the merges of the steps before, on the first waiting thread.
        let mut model = self.model.take();
        let new_merges = model.as_ref().map(|m| self.merges[m.num_merges()..].to_vec());
        let failed_model = AtomicBool::new(false);
        let mut catch_up = model.as_mut().zip(new_merges.as_deref());
        let mailboxes: Vec<Handoff> = (1..threads).map(|_| Handoff::default()).collect();
        let done = rayon::scope(|s| {
            for mailbox in &mailboxes {
                let (stop, failed_model) = (&stop, &failed_model);
                let catch_up = catch_up.take();
                s.spawn(move |_| {
                    if let Some((m, new)) = catch_up {
                        if m.extend(new).is_err() {
                            failed_model.store(true, Ordering::Relaxed);
                        }
                    }
                    mailbox.serve(stop);
                });
            }
            // Stops the waiting threads even if a merge panics (else the scope would never end).
            struct StopOnDrop<'a>(&'a AtomicBool);
            impl Drop for StopOnDrop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _stop = StopOnDrop(&stop);
            self.step_here(n, &mailboxes)
        });
        self.model = model.filter(|_| !failed_model.load(Ordering::Relaxed));
        done
    }

    /// `step` on this thread, handing parts of large merges to the helpers behind `mailboxes`.
    fn step_here(&mut self, n: usize, mailboxes: &[Handoff]) -> usize {
        let mut done = 0;
        while done < n && !self.finished {
            match self.best_pair() {
                Some((pair, count)) => {
                    self.apply(pair, count, mailboxes);
                    done += 1;
                    if self.merges.len() % PRUNE_LONG_WORDS == 0 {
                        self.prune_long_words();
                    }
                    let m = self.merges.len();
                    if m >= self.floor_from && (m - self.floor_from) % self.floor_every == 0 {
                        self.raise_floor();
                    }
                }
                None => self.finished = true,
            }
        }
        done
    }

    /// Drops from the long words' indexes the pairs that are not in the pair table: rare
    /// (below `min_frequency`) or gone, they can never be merged. Most pairs a merge makes in a
    /// long word are rare, and each holds a list.
    fn prune_long_words(&mut self) {
        if self.long.is_empty() {
            return; // most corpora: no rayon call in the merge loop
        }
        let pairs = &self.pairs;
        self.long.par_iter_mut().for_each(|(_, lw)| {
            let lw = lw.get_mut().unwrap_or_else(|e| e.into_inner());
            lw.index.retain(|pair, _| pairs[shard_of(*pair)].contains_key(pair));
        });
    }

    /// Raises the floor under which pairs leave the table to a third of the count the last
    /// merge is expected to have (a sixth after a recount, and so on), drops the pairs under
    /// it and queues the others again.
    ///
    /// Pairs only ever count less once made, and the best count never rises (a merge's new
    /// pairs count at most what it merged), so a pair under the last merge's count is never
    /// merged. Late in training most pairs in the table are such pairs: they cost a table
    /// change at each merge next to them, and the new ones an insert with their word list
    /// (100 MB of English, vocabulary 32,000: the last merge counts 71, most new pairs less).
    /// The expected count extrapolates the counts so far (a power law through the counts at
    /// m/2 and m merges); were it wrong, the queue would run dry while untracked pairs still
    /// count at least `min_frequency`, and `best_pair` would count every pair again from the
    /// words, under a lower floor (`recount`). The result is the same either way.
    fn raise_floor(&mut self) {
        let (Some(target), m) = (self.target, self.merges.len()) else { return };
        // Long words keep positions only of the pairs in the table (`prune_long_words`):
        // recounting could not give theirs back.
        if !self.long.is_empty() || m < 2 || m >= target {
            return;
        }
        let (half, now) = (self.counts[m / 2 - 1] as f64, self.counts[m - 1] as f64);
        if now <= 0.0 || half <= now {
            return;
        }
        let slope = (half / now).ln() / ((m as f64) / ((m / 2) as f64)).ln();
        let expected = now * ((m as f64) / (target as f64)).powf(slope);
        let floor = (expected / self.floor_margin) as u64;
        if floor <= self.table_floor {
            return;
        }
        self.table_floor = floor;
        self.pairs.par_iter_mut().for_each(|shard| shard.retain(|_, info| info.count >= floor));
        self.queue = PairQueue::of_table(&self.pairs);
    }

    /// Counts every pair again from the words, under a floor 4 times lower (at least
    /// `min_frequency`); later floors keep twice the margin (see `raise_floor`). When no merge
    /// was made since the last recount (training has run out of pairs, or all that are left are
    /// too long or forbidden), straight down to `min_frequency`, so that stopping costs at most
    /// two recounts.
    fn recount(&mut self) {
        let m = self.merges.len();
        self.table_floor = if self.recounted_at == Some(m) { self.min_frequency } else { (self.table_floor / 4).max(self.min_frequency) };
        self.recounted_at = Some(m);
        self.floor_margin *= 2.0;
        self.pairs = count_all_pairs(&self.words, self.table_floor);
        self.queue = PairQueue::of_table(&self.pairs);
    }

    /// The most frequent pair (ties: smallest ids), skipping pairs whose token would be longer
    /// than `max_token_length` or that the constraints forbid (both for good: the tokens only
    /// get more taken, never less; such a pair leaves the table). When the queue runs dry under
    /// a raised floor, every pair is counted again first (`recount`).
    fn best_pair(&mut self) -> Option<(Pair, u64)> {
        loop {
            let Some((count, pair)) = self.queue.pop() else {
                if self.table_floor > self.min_frequency {
                    self.recount();
                    continue;
                }
                return None;
            };
            let Some(current) = self.pairs[shard_of(pair)].get(&pair).map(|info| info.count) else {
                continue; // merged, or its count fell to zero
            };
            if current != count {
                // Stale: the count only went down since the push. Every other pair's entry is
                // at least its count, so re-queuing keeps the top exact.
                self.queue.push(current, pair);
                continue;
            }
            if count < self.min_frequency {
                return None;
            }
            let too_long = self.max_token_length.is_some_and(|max| self.length[pair.0 as usize] + self.length[pair.1 as usize] > max);
            if too_long || self.constraints.as_ref().is_some_and(|c| !c.allows(pair)) {
                self.pairs[shard_of(pair)].remove(&pair);
                continue;
            }
            return Some((pair, count));
        }
    }

    fn apply(&mut self, pair: Pair, count: u64, mailboxes: &[Handoff]) {
        let new_id = self.next_id;
        self.next_id += 1;
        self.merges.push(pair);
        self.counts.push(count);
        self.length.push(self.length[pair.0 as usize] + self.length[pair.1 as usize]);
        if let Some(c) = &mut self.constraints {
            let joined = [c.token_bytes[pair.0 as usize].as_slice(), c.token_bytes[pair.1 as usize].as_slice()].concat();
            c.taken.insert(joined.clone());
            c.token_bytes.push(joined);
        }

        // Every occurrence is merged, so the pair leaves the table.
        let affected = self.pairs[shard_of(pair)].remove(&pair).map(|info| info.words).unwrap_or_default();
        let parts = (mailboxes.len() + 1).min(affected.len() / self.min_words_per_thread).max(1);
        self.scratch.resize_with(self.scratch.len().max(parts), Delta::default);
        let (long, long_word) = (&self.long, self.long_word);
        let merge_run = |run: Run, delta: &mut Delta| {
            // Each part's delta is cleared (of the last merge it served) and sized by the
            // thread that fills it, so that its lines are in that core's cache, not the other's.
            for side in [&mut delta.left, &mut delta.right] {
                side.clear();
                side.cover(new_id as usize + 1);
            }
            let first = run.word_offset as u32;
            for (i, &w) in run.ids.iter().enumerate() {
                // The words of a pair lie all over buffers of many megabytes: each would wait
                // for its record, then its symbols. Asking for the record of the word 8 ahead,
                // and the symbols of the word 4 ahead (whose record is in by then), lets those
                // loads overlap instead.
                if let Some(&ahead) = run.ids.get(i + 8) {
                    crate::prefetch(&run.info[(ahead - first) as usize]);
                }
                if let Some(&near) = run.ids.get(i + 4) {
                    crate::prefetch(&run.symbols[run.info[(near - first) as usize].start() - run.sym_offset]);
                }
                let info = &mut run.info[(w - first) as usize];
                let s = info.start() - run.sym_offset;
                match (info.len() as usize >= long_word).then(|| long.get(&w)).flatten() {
                    // A long word keeps its length; its merged-away symbols are `GONE`.
                    Some(lw) => {
                        let mut lw = lw.lock().unwrap_or_else(|e| e.into_inner());
                        let end = s + info.len() as usize;
                        merge_long_word(&mut run.symbols[s..end], &mut lw, w, info.freq, pair, new_id, delta);
                    }
                    None => {
                        let mut len = info.len();
                        merge_word(&mut run.symbols[s..], &mut len, w, info.freq, pair, new_id, delta);
                        info.set_len(len);
                    }
                }
            }
        };
        let runs = split_words(&mut self.words, &affected, parts);
        // Fewer runs than asked for when there are few words: only their deltas were cleared.
        let parts = runs.len();
        if parts == 1 {
            runs.into_iter().for_each(|run| merge_run(run, &mut self.scratch[0]));
        } else {
            let parts: Vec<(Run, &mut Delta)> = runs.into_iter().zip(&mut self.scratch[..parts]).collect();
            run_parts(mailboxes, parts, &|(run, delta)| merge_run(run, delta));
        }
        let mut deltas = std::mem::take(&mut self.scratch);
        self.absorb(&mut deltas[..parts], pair, new_id, mailboxes);
        self.scratch = deltas;
    }

    /// Adds the changes of a merge's parts (in word order) to the table and queues the new
    /// pairs; the parts are cleared when next used (see `apply`). A pair is kept only while its
    /// count is at least the floor (`min_frequency`, or higher: see `raise_floor`): the count of
    /// a pair never grows once the merge that made it is over, so one below `min_frequency` can
    /// never be merged (and most new pairs are rare: this saves tracking them at all); one below
    /// a raised floor is counted again if it turns out to be needed (`recount`).
    fn absorb(&mut self, deltas: &mut [Delta], (a, b): Pair, new_id: u32, mailboxes: &[Handoff]) {
        // The first part's counts become the totals over all parts.
        let (first, rest) = deltas.split_first_mut().expect("a merge has at least one part");
        for d in rest.iter() {
            for (total, side) in [(&mut first.left, &d.left), (&mut first.right, &d.right)] {
                for (sym, n) in side.counts() {
                    total.entry(sym).0 += n;
                }
            }
        }
        let first = &deltas[0];
        // Occurrences right after another ("a b a b") take back from (new, a) what the one
        // before gave it: its count is R[a] - L[new]. No other pair both gains and loses.
        let back_to_back = first.left.count(new_id);
        // The changes, per shard in the order they are made: the new pairs, then the old pairs
        // that lost occurrences (no key is in both; one old key can lose on both sides).
        let mut total = 0;
        for is_left in [true, false] {
            for (sym, mut n) in first.side(is_left).counts() {
                if !is_left && sym == a {
                    n -= back_to_back;
                }
                if n < self.table_floor {
                    continue;
                }
                let pair = if is_left { (sym, new_id) } else { (new_id, sym) };
                self.changes[shard_of(pair)].updates.push(PairUpdate::New { pair, count: n, sym, left: is_left });
                total += 1;
            }
        }
        for is_left in [true, false] {
            for (sym, by) in first.side(is_left).counts() {
                // (new, a) was settled above; the merged pair has left the table already.
                if is_left && sym == new_id {
                    continue;
                }
                let pair = if is_left { (sym, a) } else { (b, sym) };
                self.changes[shard_of(pair)].updates.push(PairUpdate::Fewer { pair, by });
                total += 1;
            }
        }
        let floor = self.table_floor;
        let deltas_read: &[Delta] = deltas;
        let update_shard = |(shard, changes): (&mut PairShard, &mut ShardChanges)| {
            let ShardChanges { updates, pushes } = changes;
            for update in updates.drain(..) {
                match update {
                    PairUpdate::New { pair, count, sym, left } => {
                        // Word lists of the parts, in word order.
                        let mut words = Vec::with_capacity(deltas_read.iter().map(|d| d.side(left).words_and_count(sym).1.len()).sum());
                        for d in deltas_read {
                            words.extend_from_slice(d.side(left).words_and_count(sym).1);
                        }
                        shard.insert(pair, PairInfo { count, words });
                        pushes.push((count, pair));
                    }
                    PairUpdate::Fewer { pair, by } => {
                        if let Entry::Occupied(mut e) = shard.entry(pair) {
                            let info = e.get_mut();
                            info.count -= by;
                            if info.count < floor {
                                e.remove();
                            }
                        }
                    }
                }
            }
        };
        if !mailboxes.is_empty() && total >= self.min_parallel_updates {
            // The shards in one group per thread.
            let shards_per_thread = PAIR_SHARDS.div_ceil(mailboxes.len() + 1);
            let mut groups: Vec<Vec<_>> = Vec::with_capacity(mailboxes.len() + 1);
            for (k, shard) in self.pairs.iter_mut().zip(self.changes.iter_mut()).enumerate() {
                if k % shards_per_thread == 0 {
                    groups.push(Vec::with_capacity(shards_per_thread));
                }
                groups.last_mut().expect("pushed above").push(shard);
            }
            run_parts(mailboxes, groups, &|group: Vec<_>| group.into_iter().for_each(update_shard));
        } else {
            self.pairs.iter_mut().zip(self.changes.iter_mut()).for_each(update_shard);
        }
        // The queue's order depends only on the (count, pair) entries, not on their order.
        for changes in &mut self.changes {
            for (count, pair) in changes.pushes.drain(..) {
                self.queue.push(count, pair);
            }
        }
    }
}

/// Learns up to `num_merges` byte-level merges from chunk counts in one go. Stops early when the
/// best pair occurs fewer than `min_frequency` times or no pair is left. Returns the merges in
/// order, as pairs of internal ids.
pub fn learn_merges(counts: &ChunkCounts, num_merges: usize, min_frequency: u64) -> Result<Vec<Pair>> {
    let mut learner = MergeLearner::new(byte_words(counts), 256, vec![1; 256], min_frequency, None)?;
    learner.step(num_merges);
    Ok(learner.merges().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(words: &[(&str, u64)]) -> ChunkCounts {
        words.iter().map(|(w, c)| (Chunk::from_slice(w.as_bytes()), *c)).collect()
    }

    #[test]
    fn highest_count_then_lowest_ids() {
        // "ab" x3, "cd" x3: tie at 3, (a, b) has the smaller ids.
        let m = learn_merges(&counts(&[("ab", 3), ("cd", 3), ("abcd", 1)]), 3, 1).unwrap();
        assert_eq!(m[0], (b'a' as u32, b'b' as u32));
        assert_eq!(m[1], (b'c' as u32, b'd' as u32));
        assert_eq!(m[2], (256, 257));
    }

    #[test]
    fn min_frequency_stops_training() {
        let m = learn_merges(&counts(&[("ab", 3), ("cd", 1)]), 10, 2).unwrap();
        assert_eq!(m, vec![(b'a' as u32, b'b' as u32)]);
    }

    #[test]
    fn overlapping_pairs_merge_left_to_right() {
        // "aaa": (a, a) counted twice; merging gives [aa, a].
        let m = learn_merges(&counts(&[("aaa", 1)]), 2, 1).unwrap();
        assert_eq!(m, vec![(97, 97), (256, 97)]);
    }

    #[test]
    fn max_token_length_skips_long_tokens() {
        let c = counts(&[("abcd", 5)]);
        let mut l = MergeLearner::new(byte_words(&c), 256, vec![1; 256], 1, Some(2)).unwrap();
        l.step(10);
        // a+b, c+d allowed (length 2); ab+cd (length 4) is not.
        assert_eq!(l.merges(), &[(97, 98), (99, 100)]);
    }

    #[test]
    fn char_level_alphabet_suffix_and_limit() {
        let c = counts(&[("low", 5), ("lowé", 1)]);
        let (alphabet, words) = char_words(&c, None, "</w>").unwrap();
        assert!(alphabet.contains(&"w</w>".to_string()) && alphabet.contains(&"é</w>".to_string()));
        assert_eq!(words.len(), 2);
        // Limited to the 3 most frequent symbols: l, o (6 each), w</w> (5); w (1) and é</w> (1) drop out.
        let (alphabet, words) = char_words(&c, Some(3), "</w>").unwrap();
        assert_eq!(alphabet, vec!["l", "o", "w</w>"]);
        assert!(words.iter().any(|(w, _)| w.contains(&BARRIER)));
        let mut l = MergeLearner::new(words, 3, vec![1; 3], 1, None).unwrap();
        l.step(5);
        assert_eq!(l.merges(), &[(0, 1), (3, 2)]);
    }

    #[test]
    fn words_per_token_limit() {
        assert_eq!(count_words(b" by the way"), 3);
        assert_eq!(count_words(b"way, "), 1);
        let c = counts(&[("a b c", 10)]);
        let token_bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let taken = token_bytes.iter().cloned().collect();
        let constraints = Constraints { token_bytes, max_words: Some(2), forbidden: vec![], taken };
        let mut l = MergeLearner::new(byte_words(&c), 256, vec![1; 256], 1, None).unwrap().with_constraints(constraints);
        l.step(10);
        let c = l.constraints.as_ref().unwrap();
        assert!(c.token_bytes.iter().all(|t| count_words(t) <= 2));
        assert!(c.token_bytes.iter().any(|t| count_words(t) == 2));
    }

    /// Words of a pseudo-random corpus: few symbols (so pairs repeat and overlap, "a a a",
    /// "a b a b"), some barriers, and skewed counts.
    fn random_words(seed: u64, n: usize) -> Vec<(Vec<u32>, u64)> {
        let mut next = crate::lcg(seed);
        (0..n)
            .map(|_| {
                let len = 1 + next(12) as usize;
                let word = (0..len).map(|_| if next(40) == 0 { BARRIER } else { next(5) as u32 }).collect();
                (word, 1 + next(4) * next(50))
            })
            .collect()
    }

    fn learn_on(threads: usize, min_words_per_thread: usize, words: Vec<(Vec<u32>, u64)>) -> (Vec<Pair>, Vec<u64>) {
        learn_with(threads, min_words_per_thread, 1, 400, words)
    }

    fn learn_with(threads: usize, min_words_per_thread: usize, min_frequency: u64, steps: usize, words: Vec<(Vec<u32>, u64)>) -> (Vec<Pair>, Vec<u64>) {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let mut l = MergeLearner::new(words, 5, vec![1; 5], min_frequency, None)
                .unwrap()
                .with_min_words_per_thread(min_words_per_thread)
                .with_min_parallel_updates(min_words_per_thread);
            l.step(steps);
            (l.merges().to_vec(), l.counts().to_vec())
        })
    }

    #[test]
    fn merges_split_over_threads_give_the_same_result() {
        for seed in 0..4 {
            let words = random_words(seed, 3000);
            let one = learn_on(1, 1, words.clone());
            assert!(one.0.len() > 100);
            // Every merge split (1 word per thread), and its table changes too, over 2, 3 and 4
            // threads.
            for threads in [2, 3, 4] {
                assert_eq!(learn_on(threads, 1, words.clone()), one, "seed {seed}, {threads} threads");
            }
        }
    }

    /// Merges learned the slow way: every pair counted again before each merge.
    fn naive_merges(mut words: Vec<(Vec<u32>, u64)>, first_new_id: u32, min_frequency: u64, steps: usize) -> (Vec<Pair>, Vec<u64>) {
        let (mut merges, mut counts) = (Vec::new(), Vec::new());
        for new_id in first_new_id..first_new_id + steps as u32 {
            let mut pairs: std::collections::BTreeMap<Pair, u64> = Default::default();
            for (word, f) in &words {
                for p in word.windows(2).filter(|p| p[0] != BARRIER && p[1] != BARRIER) {
                    *pairs.entry((p[0], p[1])).or_default() += f;
                }
            }
            // Highest count, then smallest pair: the first of the highest in pair order.
            let Some((&pair, &count)) = pairs.iter().rev().max_by_key(|(_, &c)| c) else { break };
            if count < min_frequency.max(1) {
                break;
            }
            merges.push(pair);
            counts.push(count);
            for (word, _) in &mut words {
                let mut out = Vec::with_capacity(word.len());
                let mut i = 0;
                while i < word.len() {
                    if i + 1 < word.len() && (word[i], word[i + 1]) == pair {
                        out.push(new_id);
                        i += 2;
                    } else {
                        out.push(word[i]);
                        i += 1;
                    }
                }
                *word = out;
            }
        }
        (merges, counts)
    }

    #[test]
    fn merges_match_counting_every_pair_again() {
        // Few symbols and runs of one symbol ("a a a b a b"): overlapping and back-to-back
        // occurrences, words that hold a pair twice, barriers.
        for seed in 0..6 {
            let mut next = crate::lcg(100 + seed);
            let words: Vec<(Vec<u32>, u64)> = (0..400)
                .map(|_| {
                    let len = 1 + next(16) as usize;
                    let word = (0..len).map(|_| if next(30) == 0 { BARRIER } else { next(if seed % 2 == 0 { 3 } else { 5 }) as u32 }).collect();
                    (word, 1 + next(3) * next(20))
                })
                .collect();
            for min_frequency in [1, 4] {
                let expected = naive_merges(words.clone(), 5, min_frequency, 150);
                assert!(expected.0.len() > 40, "seed {seed}: only {} merges", expected.0.len());
                for threads in [1, 2] {
                    let got = learn_with(threads, 1, min_frequency, 150, words.clone());
                    assert_eq!(got, expected, "seed {seed}, min_frequency {min_frequency}, {threads} threads");
                }
            }
        }
    }

    #[test]
    fn a_raised_floor_learns_the_same_merges() {
        for seed in 0..8 {
            let mut words = random_words(200 + seed, 3000);
            if seed % 2 == 1 {
                // Small counts: many pairs tie, at the floor too.
                let mut next = crate::lcg(seed);
                words.iter_mut().for_each(|(_, f)| *f = 1 + next(3));
            }
            let plain = learn_with(1, 1, 1, 600, words.clone());
            assert!(plain.0.len() > 300, "seed {seed}: only {} merges", plain.0.len());
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                // A target of the merges asked for raises the floor from merge 16 on, every 8;
                // targets far past the end raise it too little; a target just past 16 predicts a
                // floor far too high, which the queue running dry must undo (`recount`).
                for target in [600, 5000, 17, 20] {
                    let (got, floors, recounts) = pool.install(|| {
                        let mut l = MergeLearner::new(words.clone(), 5, vec![1; 5], 1, None)
                            .unwrap()
                            .with_min_words_per_thread(1)
                            .with_min_parallel_updates(1)
                            .with_floor_schedule(16, 8);
                        l.set_target(target);
                        let (mut floors, mut recounts) = (0, 0);
                        while l.merges().len() < 600 {
                            let floor = l.table_floor;
                            if l.step(1) == 0 {
                                break;
                            }
                            floors += (l.table_floor > floor) as usize;
                            recounts += (l.table_floor < floor) as usize;
                        }
                        ((l.merges().to_vec(), l.counts().to_vec()), floors, recounts)
                    });
                    assert_eq!(got, plain, "seed {seed}, {threads} threads, target {target}");
                    if target <= 600 {
                        assert!(floors > 0, "seed {seed}, target {target}: the floor never rose");
                    }
                    if target < 600 {
                        assert!(recounts > 0, "seed {seed}, target {target}: no recount");
                    }
                }
            }
        }
    }

    #[test]
    fn a_raised_floor_with_limits_learns_the_same_merges_to_the_end() {
        // min_frequency 3 and tokens of at most 4 symbols: training runs out of pairs before
        // the target, while a far too high floor (a target just past the first raise) has to be
        // undone on the way, and pairs too long leave the table.
        for seed in 0..6 {
            let words = random_words(300 + seed, 2000);
            let learn = |target: Option<usize>, threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| {
                    let mut l = MergeLearner::new(words.clone(), 5, vec![1; 5], 3, Some(4))
                        .unwrap()
                        .with_min_words_per_thread(1)
                        .with_min_parallel_updates(1)
                        .with_floor_schedule(16, 8);
                    if let Some(t) = target {
                        l.set_target(t);
                    }
                    while l.step(7) > 0 {}
                    assert!(l.finished());
                    (l.merges().to_vec(), l.counts().to_vec())
                })
            };
            let plain = learn(None, 1);
            assert!(plain.0.len() > 30 && plain.0.len() < 2000, "seed {seed}: {} merges", plain.0.len());
            for target in [20, plain.0.len(), 5000] {
                for threads in [1, 2] {
                    assert_eq!(learn(Some(target), threads), plain, "seed {seed}, target {target}, {threads} threads");
                }
            }
        }
    }

    #[test]
    fn long_words_learn_the_same_merges() {
        // Every word of 2 symbols or more (then of 8 or more) merged through its `LongWord`
        // index must give the merges and counts of the plain rewrite, on 1 to 3 threads, with
        // and without rare pairs dropped (and so pruned from the indexes every 256 merges); on
        // words with runs ("a a a", "a b a b") and barriers, as `random_words` makes them.
        for seed in 0..4 {
            let mut words = random_words(seed, 2000);
            // A few long words too, made of the same symbols.
            let mut next = crate::lcg(seed + 100);
            for _ in 0..5 {
                let len = 100 + next(3000) as usize;
                words.push(((0..len).map(|_| if next(50) == 0 { BARRIER } else { next(4) as u32 }).collect(), 1 + next(3)));
            }
            for min_frequency in [1, 3] {
                let plain = learn_with(1, 1, min_frequency, 400, words.clone());
                assert!(plain.0.len() > PRUNE_LONG_WORDS, "the indexes are pruned during the run");
                for (threads, long_word) in [(1, 2), (3, 2), (2, 8)] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    let got = pool.install(|| {
                        let mut l = MergeLearner::new(words.clone(), 5, vec![1; 5], min_frequency, None)
                            .unwrap()
                            .with_min_words_per_thread(1)
                            .with_min_parallel_updates(1)
                            .with_long_word(long_word);
                        l.step(400);
                        (l.merges().to_vec(), l.counts().to_vec())
                    });
                    assert_eq!(got, plain, "seed {seed}, {threads} threads, long from {long_word}, min_frequency {min_frequency}");
                }
            }
        }
    }

    #[test]
    fn a_long_word_is_not_rewritten_at_every_merge() {
        // 1 MB of random letters as one word, 3,000 merges: each visits only its own pair's
        // positions (the plain rewrite of the whole word at every merge took seconds; this
        // bound is generous, not a speed target).
        let mut next = crate::lcg(9);
        let word: Vec<u32> = (0..1 << 20).map(|_| next(26) as u32).collect();
        let start = std::time::Instant::now();
        let mut l = MergeLearner::new(vec![(word, 1)], 26, vec![1; 26], 1, None).unwrap();
        assert_eq!(l.step(3000), 3000);
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "{:?}", start.elapsed());
    }

    #[test]
    fn rare_pairs_left_untracked_change_nothing() {
        // min_frequency k drops pairs below k from the table: the merges must be those of k = 1
        // up to the first one below k.
        let words = random_words(5, 3000);
        let all = learn_with(1, 1, 1, usize::MAX, words.clone());
        for k in [2, 5, 20] {
            let cut = all.1.iter().position(|&c| c < k).expect("some merge below k");
            let expected = (all.0[..cut].to_vec(), all.1[..cut].to_vec());
            assert_eq!(learn_with(1, 1, k, usize::MAX, words.clone()), expected, "min_frequency {k}");
            assert_eq!(learn_with(3, 1, k, usize::MAX, words.clone()), expected, "min_frequency {k}, 3 threads");
        }
    }

    #[test]
    fn word_order_does_not_change_the_merges() {
        let mut words = random_words(9, 2000);
        let sorted = learn_on(1, 1, words.clone());
        words.reverse();
        assert_eq!(learn_on(2, 1, words), sorted);
    }

    #[test]
    fn byte_pairs_count_as_hashed_pairs() {
        // The dense count of byte pairs against the hash maps', on 1 and 3 threads, with
        // min_count 1 and 3: the same pairs, counts and word lists.
        let mut rand = crate::lcg(5);
        let words: Vec<(Vec<u32>, u64)> = (0..3000).map(|_| ((0..1 + rand(12)).map(|_| [0, 7, 97, 98, 255][rand(5) as usize]).collect(), 1 + rand(4))).collect();
        let words = Words::new(words).unwrap();
        let table = |shards: Vec<PairShard>| -> Vec<(Pair, u64, Vec<u32>)> {
            let mut all: Vec<(Pair, u64, Vec<u32>)> = shards.into_iter().flat_map(|shard| shard.0).map(|(p, i)| (p, i.count, i.words)).collect();
            all.sort();
            all
        };
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            for min_count in [1, 3] {
                let dense = table(pool.install(|| count_byte_pairs(&words, min_count)));
                let hashed = table(pool.install(|| count_hashed_pairs(&words, min_count)));
                assert!(dense.len() > 10 && dense.iter().any(|(_, _, w)| w.len() > 100));
                assert_eq!(dense, hashed, "{threads} threads, min_count {min_count}");
            }
        }
        let none = Words::new(vec![]).unwrap();
        assert!(table(count_byte_pairs(&none, 1)).is_empty() && table(count_hashed_pairs(&none, 1)).is_empty());
    }

    #[test]
    fn word_records_keep_start_length_and_count() {
        for (start, len) in [(0, 0), (5, 1), ((1 << 36) - 2, 1), (12_345_678_901, MAX_WORD_SYMBOLS)] {
            let mut info = WordInfo::new(start, len, u64::MAX).unwrap();
            assert_eq!((info.start(), info.len() as usize, info.freq), (start, len, u64::MAX));
            info.set_len(3);
            assert_eq!((info.start(), info.len(), info.freq), (start, 3, u64::MAX));
        }
        let too_long = WordInfo::new(0, MAX_WORD_SYMBOLS + 1, 1).unwrap_err();
        assert!(too_long.to_string().contains("use a pattern that cuts"), "{too_long}");
        assert!(WordInfo::new((1 << 36) - 1, 1, 1).is_err());
    }

    #[test]
    fn words_from_chunk_groups_are_the_chunks_in_group_order() {
        // Chunks inline (up to 16 bytes) and on the heap.
        let chunk = |s: &str| Chunk::from_slice(s.as_bytes());
        let groups = vec![vec![(chunk("ab"), 3), (chunk(" sixteen bytes.."), 1)], vec![], vec![(chunk("hello"), 7), (chunk(" a chunk of seventeen"), 2)]];
        let expected: Vec<(Vec<u32>, u64)> = groups.iter().flatten().map(|(c, n)| (c.iter().map(|&b| b as u32).collect(), *n)).collect();
        let words = Words::from_chunk_groups(groups).unwrap();
        let plain = Words::new(expected).unwrap();
        assert_eq!((&words.symbols, &words.info), (&plain.symbols, &plain.info));
        assert_eq!(words.get(2), &[104, 101, 108, 108, 111]);
    }

    #[test]
    fn empty_corpus_is_an_error() {
        assert_eq!(learn_merges(&ChunkCounts::default(), 1, 1).unwrap_err().kind, ErrorKind::Training);
    }

    #[test]
    fn counting_skips_special_tokens() {
        let p = Pretokenizer::new(crate::pretokenize::GPT2_PATTERN).unwrap();
        let s = SpecialTokens::new(vec![("<|x|>".into(), 0)]).unwrap();
        let tables = count_chunks(&["hi<|x|>hi", "hi"], &p, &s).unwrap();
        let mut total: FxHashMap<Vec<u8>, u64> = FxHashMap::default();
        for table in &tables {
            table.for_each(|k, n| *total.entry(k.to_vec()).or_insert(0) += n);
        }
        assert_eq!(total.get(b"hi".as_slice()), Some(&3));
        assert_eq!(total.len(), 1);
    }

    #[test]
    fn counts_are_the_same_on_any_number_of_threads_and_tables_cover_about_table_bytes() {
        let p = Pretokenizer::new(crate::pretokenize::GPT2_PATTERN).unwrap();
        let s = SpecialTokens::new(vec![]).unwrap();
        // 3 MB in texts of 60 KB, words from a small vocabulary (so that chunks repeat).
        let mut rand = crate::lcg(7);
        let mut texts = Vec::new();
        for _ in 0..50 {
            let mut t = String::new();
            while t.len() < 60_000 {
                // Chunks of 15 and 16 bytes too: packed keys and text slices.
                t.push_str(["the ", "cat ", "sat, ", "on ", "a ", "mat. ", "42 ", "naïve ", " fifteenletters", " sixteenlettersx"][rand(10) as usize]);
            }
            texts.push(t);
        }
        let refs: Vec<&str> = texts.iter().map(|t| t.as_str()).collect();
        let mut expected: FxHashMap<Vec<u8>, u64> = FxHashMap::default();
        for t in &refs {
            p.for_each_chunk(t, |c: &str| *expected.entry(c.as_bytes().to_vec()).or_insert(0) += 1).unwrap();
        }
        assert!(expected.keys().any(|k| k.len() == 15) && expected.keys().any(|k| k.len() == 16));
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let tables = pool.install(|| count_chunks(&refs, &p, &s)).unwrap();
            let mut total: FxHashMap<Vec<u8>, u64> = FxHashMap::default();
            for table in &tables {
                table.for_each(|k, n| *total.entry(k.to_vec()).or_insert(0) += n);
            }
            assert_eq!(total, expected, "{threads} threads");
            // Each thread starts a new table once its table covers TABLE_BYTES: at most one
            // more table per thread than full ones, however the texts were shared out.
            let bytes: usize = refs.iter().map(|t| t.len()).sum();
            assert!(tables.len() <= bytes / TABLE_BYTES + threads, "{threads} threads: {} tables", tables.len());
        }
    }
}
