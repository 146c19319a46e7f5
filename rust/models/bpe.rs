//! Byte-level BPE inference: pre-tokenize, then in each chunk apply the lowest-ranked
//! (earliest learned) merge first until no merge applies.

use crate::error::{Error, ErrorKind, Result};
use crate::models::char_start::{CharStart, CharTables, CharTokens, AS_BYTES, ONE_TOKEN, TABLE_CHARS};
use crate::pretokenize::Pretokenizer;
use crate::special::{Cuts, Piece, SpecialTokens};
use rustc_hash::{FxHashMap, FxHashSet};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Chunks up to this many bytes use the simple quadratic scan, which is faster than a heap
/// for the short chunks ordinary text consists of, and for the runs of a few tens of CJK
/// characters that Chinese and Japanese text make; longer ones use the O(n log n) heap.
const SHORT_CHUNK: usize = 128;
/// Ids may leave at most this many unused ids in all (see `BpeModel::build`).
const MAX_ID_GAP: usize = 1 << 20;

/// Chunks longer than `SHORT_CHUNK` and up to this many symbols are merged by `merge_heap`;
/// longer ones by `merge_queued` (or `merge_run`), whose buckets of positions per rank keep
/// the queue small when a rank has thousands of positions (a megabyte of one letter).
const HEAP_CHUNK: usize = 1024;

/// Byte-level chunks of up to this many bytes (all that have a cache key) are merged by
/// `merge_small`.
const SMALL_CHUNK: usize = 15;

/// `merge_short` keeps the ranks of up to this many pairs on the stack (most chunks are short:
/// filling a larger array costs them more than the allocation it saves the longer ones, whose
/// merging takes far longer anyway; 16 instead of 48 pairs: random Latin-1 text +10%).
const STACK_PAIRS: usize = 16;
/// Lists of symbols up to this long are merged with a bit mask of the positions that still
/// hold one (`merge_masked`), longer ones by shifting (`merge_shifting`).
const MASKED_SYMBOLS: usize = 64;

/// Packs up to 15 bytes and their length into one integer (little-endian bytes, the length in
/// the top byte), so that two different short byte strings never share a key. Reads the bytes
/// as two overlapping words instead of copying them one by one: this runs once per chunk.
#[inline]
pub(crate) fn pack_short(b: &[u8]) -> Option<u128> {
    let n = b.len();
    let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let (lo, hi) = match n {
        0 => (0, 0),
        1 => (b[0] as u64, 0),
        2..=3 => {
            let a = u16::from_le_bytes([b[0], b[1]]) as u64;
            let c = u16::from_le_bytes([b[n - 2], b[n - 1]]) as u64;
            (a | c << (8 * (n - 2)), 0)
        }
        4..=7 => {
            let a = u32::from_le_bytes(b[..4].try_into().unwrap()) as u64;
            let c = u32::from_le_bytes(b[n - 4..].try_into().unwrap()) as u64;
            (a | c << (8 * (n - 4)), 0)
        }
        8 => (word(0), 0),
        9..=15 => (word(0), word(n - 8) >> (8 * (16 - n))),
        _ => return None,
    };
    Some((lo as u128) | ((hi | (n as u64) << 56) as u128) << 64)
}

/// `pack_short` of `text[at..at + n]` when `text` has 16 bytes from `at`: one 16-byte load,
/// masked to the chunk's bytes, instead of a branch on the length.
#[inline(always)]
pub(crate) fn pack_short_within(text: &[u8], at: usize, n: usize) -> Option<u128> {
    match text.get(at..at + 16) {
        Some(window) if n < 16 => {
            const MASKS: [u128; 16] = {
                let mut masks = [0u128; 16];
                let mut k = 1;
                while k < 16 {
                    masks[k] = (1u128 << (8 * k)) - 1;
                    k += 1;
                }
                masks
            };
            let v = u128::from_le_bytes(window.try_into().expect("16 bytes"));
            Some(v & MASKS[n] | (n as u128) << 120)
        }
        _ => pack_short(&text[at..at + n]),
    }
}

/// Encodes the chunks of a byte-level text as the scanner finds them, one chunk behind it: while
/// a chunk is encoded, the cache line its successor will look up is already on its way (most
/// chunks are answered by that one load, so its latency would otherwise be paid on every chunk).
/// `chunk` does only what most chunks need (a short chunk, or a hit in the cache's front), and is
/// inlined into the scanner's loop with its state in registers; the rest is
/// `BpeModel::encode_rest`, out of line.
struct ByteLevelSink<'m, 'c, 't> {
    model: &'m BpeModel,
    /// The whole text the chunks are of.
    text: &'t [u8],
    cache: &'c mut ChunkCache,
    out: &'c mut Vec<u32>,
    scratch: &'c mut Vec<u32>,
    result: &'c mut Result<()>,
    /// The chunk the scanner found last, not encoded yet, and its cache key (0 if it has none:
    /// a key is never 0, its top byte being the chunk's length).
    pending: &'t [u8],
    pending_key: u128,
}

impl<'t> crate::pretokenize::ChunkSink<'t> for &mut ByteLevelSink<'_, '_, 't> {
    #[inline(always)]
    fn chunk(&mut self, chunk: &'t str) {
        let at = chunk.as_ptr() as usize - self.text.as_ptr() as usize;
        let key = pack_short_within(self.text, at, chunk.len()).unwrap_or(0);
        // (Chunks of one or two bytes mostly do not ask the cache: see `merging_suffices_upto`.)
        if key != 0 && chunk.len() >= 3 && self.cache.rest[chunk.len()] == 0 {
            self.cache.prefetch(key);
        }
        let (bytes, pending_key) = (self.pending, self.pending_key);
        (self.pending, self.pending_key) = (chunk.as_bytes(), key);
        self.encode(bytes, pending_key);
    }
}

impl<'t> ByteLevelSink<'_, '_, 't> {
    #[inline(always)]
    fn encode(&mut self, bytes: &'t [u8], key: u128) {
        // (Short CJK chunks do not rest: merging them from whole characters beats merging their
        // bytes on fixed arrays, and real Chinese text repeats more of them than a window of
        // its first ones shows.)
        if key != 0 && bytes.len() >= REST_FROM && self.cache.resting(bytes.len()) && !has_wide_chars(bytes) {
            self.model.encode_resting(bytes, key, self.out, self.cache);
            return;
        }
        let key = (key != 0).then_some(key);
        if !bytes.is_empty() && !self.model.encode_common(bytes, key, self.out, self.cache) {
            self.model.encode_rest(bytes, key, self.out, self.scratch, self.cache, self.result);
        }
    }

    /// Encodes the last chunk.
    fn finish(&mut self) {
        self.encode(self.pending, self.pending_key);
    }
}

/// A chunk of 9 to 15 bytes with three characters of three bytes or more (CJK): merging it
/// from whole characters saves six merges or more.
#[inline]
fn has_wide_chars(bytes: &[u8]) -> bool {
    bytes.len() >= 9 && bytes.iter().filter(|&&b| (0xE0..0xF0).contains(&b)).count() >= 3
}

/// Gives every model its own number, so a thread's chunk cache knows whose results it holds.
static NEXT_MODEL_UID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Bumped by `clear_chunk_caches`: every thread's caches filled before are then emptied on use.
static CACHE_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Empties the chunk caches of all threads (lazily: each thread empties its own on next use,
/// keeping their memory, so that this releases none).
/// Benchmarks call it so that every timed run starts cold, as a peer without a cache does.
pub fn clear_chunk_caches() {
    CACHE_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// The number of `clear_chunk_caches` calls so far: a per-thread cache filled under another
/// number is to be emptied before use (the Unigram model's segment cache too).
pub(crate) fn cache_epoch() -> u64 {
    CACHE_EPOCH.load(std::sync::atomic::Ordering::Relaxed)
}

/// A number no other model of this process has, for the per-thread caches to tell models apart.
pub(crate) fn next_model_uid() -> u64 {
    NEXT_MODEL_UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One entry of the front of the chunk cache: a packed chunk and up to 3 ids.
#[derive(Clone, Copy, Default)]
struct FrontSlot {
    key: u128,
    len: u32,
    ids: [u32; 3],
}

/// A set of the 2-way front: two slots in one 64-byte cache line; the newer entry first.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct FrontSet([FrontSlot; 2]);

/// 2^FRONT_BITS sets of 64 bytes (1 MB) stay in the L2 cache. A few thousand words make up
/// most chunk occurrences of real text, so most chunks are answered here with one cache-resident
/// load, instead of probing the multi-megabyte token table.
const FRONT_BITS: u32 = 14;

/// Per-thread, per-model memo of merge results for short chunks (byte level). A direct-mapped
/// front for results of up to 3 ids, then a hash map whose ids live in one flat arena (no
/// allocation per entry). Bounded: the map is cleared when full, front slots are overwritten.
struct ChunkCache {
    owner: u64,
    epoch: u64,
    front: Vec<FrontSet>,
    index: FxHashMap<u128, (u32, u32)>,
    /// Results for chunks of 16 to `LONG_CHUNK` bytes (runs of CJK characters, long words),
    /// and for the chunks of character-level models up to that length, keyed by their bytes;
    /// their ids are in `ids` too.
    long: FxHashMap<Box<[u8]>, (u32, u32)>,
    /// Bytes of the keys of `long`, bounded by `LONG_KEY_BYTES`.
    long_bytes: usize,
    ids: Vec<u32>,
    pairs: PairMemo,
    /// The characters of the current chunk that start as bytes (see `CharStart`), one bit per
    /// byte.
    cut: Vec<u64>,
    /// The bytes of the current chunk that an occurrence of a crossing token covers together
    /// with the byte before (see `CharTables::mark_cut`).
    spanned: Vec<u64>,
    /// Where the current chunk's symbols (from `char_symbols`) may be cut into pieces merged
    /// apart: the index of the first symbol of each piece after the first (see `CharStart`).
    pieces: Vec<u32>,
    /// The symbols of one piece while it is merged.
    piece: Vec<u32>,
    /// Probes of `index` and their hits in the current window, and how many probes to skip:
    /// text whose chunks never repeat (random characters) would only pay a cache miss per
    /// probe and per insert, so the map rests while its hit rate is that low.
    probes: u32,
    hits: u32,
    skip: u32,
    /// The same for `long` (see `LONG_WINDOW`).
    long_probes: u32,
    long_hits: u32,
    long_skip: u32,
    /// Per length of a keyed chunk (3 to 15 bytes): such chunks seen in the current window,
    /// how many of them were merged anew (the cache and the vocabulary did not have them), and
    /// how many to merge next without asking (see `LENGTH_WINDOW`).
    seen: [u16; 16],
    merged: [u16; 16],
    rest: [u32; 16],
}

/// Keyed chunks of `REST_FROM` to 15 bytes are counted per length over windows of this many;
/// when at most `LENGTH_MAX_HITS` of a window were answered without merging (by the cache or
/// the vocabulary), that length rests: its next `LENGTH_REST` chunks are merged without asking
/// the cache or the vocabulary, and without filling the cache. In text whose chunks are all new
/// (random letters), each of those probes and inserts is a miss of the CPU cache, and the
/// inserts push the merge tables out of it: random Latin-1 text +19%. English, Python and the
/// Handbook's languages (nearly) never have such a window (1 in 47,000 of English); Chinese news
/// has them at 4 and 5 characters, but such chunks do not rest (see `ByteLevelSink::encode`).
const LENGTH_WINDOW: u16 = 1 << 6;
const LENGTH_MAX_HITS: u16 = LENGTH_WINDOW / 16;
const LENGTH_REST: u32 = 64 * LENGTH_WINDOW as u32;

/// The shortest chunks that may rest. Shorter ones cost about as much to merge as to look up,
/// and in random letters they do repeat, but only once the cache has filled: a length that
/// rests while the cache is still cold would see few hits after its rest, and rest on.
const REST_FROM: usize = 5;

/// `index` is checked over windows of this many probes; below 1/64 hits in one, it is left
/// alone (neither asked nor filled) for the next `INDEX_REST` probes.
const INDEX_WINDOW: u32 = 1 << 14;
const INDEX_REST: u32 = 16 * INDEX_WINDOW;

/// The longest chunk whose result is cached, and the bytes of such chunks a cache may hold.
const LONG_CHUNK: usize = 256;

/// `long` is checked over windows of this many probes; with fewer than `LONG_MIN_HITS` hits
/// in one (a quarter), it rests (neither asked nor filled) for the next `LONG_REST` chunks.
/// A miss costs a hash of the chunk and an allocation for its key; Chinese and Japanese
/// text repeats 10-15% of its long chunks, and merging them again (from characters, see
/// `CharStart`) costs less than that (in-process A/B, 10 Handbooks of 1 MB, o200k: +2.5%;
/// Chinese and Japanese alone +6-9%; a limit of 1/8 or 1/2 of hits gained less).
const LONG_WINDOW: u32 = 1 << 10;
const LONG_MIN_HITS: u32 = LONG_WINDOW / 4;
const LONG_REST: u32 = 16 * LONG_WINDOW;
const LONG_KEY_BYTES: usize = 8 << 20;

const CACHE_ENTRIES: usize = 1 << 17;
/// Caches kept per thread: a program alternating between a few tokenizers keeps each one's.
const CACHES_PER_THREAD: usize = 4;

impl ChunkCache {
    fn new(owner: u64) -> Self {
        let epoch = CACHE_EPOCH.load(std::sync::atomic::Ordering::Relaxed);
        ChunkCache { owner, epoch, front: vec![FrontSet::default(); 1 << FRONT_BITS], index: FxHashMap::with_capacity_and_hasher(CACHE_ENTRIES, Default::default()), long: FxHashMap::default(), long_bytes: 0, ids: Vec::new(), pairs: PairMemo::new(PAIR_MEMO_BITS), cut: Vec::new(), spanned: Vec::new(), pieces: Vec::new(), piece: Vec::new(), probes: 0, hits: 0, skip: 0, long_probes: 0, long_hits: 0, long_skip: 0, seen: [0; 16], merged: [0; 16], rest: [0; 16] }
    }

    /// Whether a keyed chunk of `n` (3 to 15) bytes is merged without the cache (counting the
    /// rest down); otherwise it is counted in its length's window.
    #[inline(always)]
    fn resting(&mut self, n: usize) -> bool {
        if self.rest[n] > 0 {
            self.rest[n] -= 1;
            return true;
        }
        self.seen[n] += 1;
        if self.seen[n] == LENGTH_WINDOW {
            self.end_length_window(n);
        }
        false
    }

    #[inline(never)]
    fn end_length_window(&mut self, n: usize) {
        if self.merged[n] >= LENGTH_WINDOW - LENGTH_MAX_HITS {
            self.rest[n] = LENGTH_REST;
        }
        (self.seen[n], self.merged[n]) = (0, 0);
    }

    #[inline]
    fn set(key: u128) -> usize {
        let mixed = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
        (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FRONT_BITS)) as usize
    }

    /// Whether results for `key` also go to the map: not for chunks of up to 4 bytes, which
    /// take about as long to merge again as to look up in a map that is not in the CPU cache
    /// (text that is all such chunks, e.g. random accented letters, would only churn the map).
    #[inline(always)]
    fn indexed(key: u128) -> bool {
        (key >> 120) as usize > 4
    }

    /// Starts loading the front set of `key` into the CPU cache, so that the `get` that follows
    /// a little later does not wait for it.
    #[inline(always)]
    fn prefetch(&self, key: u128) {
        #[cfg(target_arch = "x86_64")]
        {
            let set: *const FrontSet = &self.front[Self::set(key)];
            // SAFETY: a prefetch is only a hint; the address is that of a live element.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(set as *const i8) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = key;
    }

    /// Appends the ids of `key` to `out` if the front holds them; false if not.
    #[inline]
    fn get_front(&self, key: u128, out: &mut Vec<u32>) -> bool {
        for slot in &self.front[Self::set(key)].0 {
            if slot.key == key {
                push_up_to_3(out, &slot.ids, slot.len as usize);
                return true;
            }
        }
        false
    }

    /// Appends the ids of `key` to `out` if the map holds them; false if not. Asked after the
    /// vocabulary (for models whose chunks may be whole tokens): a chunk missing from the front
    /// is more often a token than a cached merge result, and each of these probes is a miss
    /// of the CPU cache.
    #[inline]
    fn get_index(&mut self, key: u128, out: &mut Vec<u32>) -> bool {
        if !Self::indexed(key) {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        self.probes += 1;
        let found = self.copy_ids(self.index.get(&key).copied(), out);
        self.hits += found as u32;
        if self.probes == INDEX_WINDOW {
            if self.hits < INDEX_WINDOW / 64 {
                self.skip = INDEX_REST;
            }
            (self.probes, self.hits) = (0, 0);
        }
        found
    }

    /// Results of up to 3 ids go to the front; those of several ids (the costly ones to
    /// recompute) also to the map, where they outlive their eviction from the front.
    #[inline]
    fn insert(&mut self, key: u128, ids: &[u32]) {
        if ids.len() <= 3 {
            let set = &mut self.front[Self::set(key)].0;
            set[1] = set[0];
            let slot = &mut set[0];
            slot.key = key;
            slot.len = ids.len() as u32;
            slot.ids[..ids.len()].copy_from_slice(ids);
            if ids.len() == 1 || !Self::indexed(key) {
                return;
            }
        }
        if self.skip > 0 {
            return;
        }
        self.make_room(0);
        let range = self.store_ids(ids);
        self.index.insert(key, range);
    }

    /// Appends the ids stored at `range` (from `store_ids`) to `out`; false if there is none.
    #[inline]
    fn copy_ids(&self, range: Option<(u32, u32)>, out: &mut Vec<u32>) -> bool {
        match range {
            Some((start, len)) => {
                out.extend_from_slice(&self.ids[start as usize..(start + len) as usize]);
                true
            }
            None => false,
        }
    }

    /// Stores `ids` in the arena the maps share; returns their (start, length) there.
    fn store_ids(&mut self, ids: &[u32]) -> (u32, u32) {
        let range = (self.ids.len() as u32, ids.len() as u32);
        self.ids.extend_from_slice(ids);
        range
    }

    /// Empties the maps (both: they share `ids`) when another entry, with `key_bytes` of key
    /// for `long`, would pass their bounds.
    fn make_room(&mut self, key_bytes: usize) {
        if self.index.len() + self.long.len() >= CACHE_ENTRIES || self.long_bytes + key_bytes > LONG_KEY_BYTES {
            self.clear_maps();
        }
    }

    /// Empties the cache for model `owner`, keeping its memory.
    fn reset(&mut self, owner: u64) {
        self.owner = owner;
        (self.probes, self.hits, self.skip) = (0, 0, 0);
        (self.long_probes, self.long_hits, self.long_skip) = (0, 0, 0);
        (self.seen, self.merged, self.rest) = ([0; 16], [0; 16], [0; 16]);
        self.front.fill(FrontSet::default());
        self.clear_maps();
        self.pairs.clear();
    }

    fn clear_maps(&mut self) {
        self.index.clear();
        self.long.clear();
        self.long_bytes = 0;
        self.ids.clear();
    }

    /// Appends the cached ids of a chunk of more than 15 bytes to `out`; false if not cached.
    /// `may_rest`: whether `long` may rest (at byte level; the words of a character-level model
    /// cost more to merge again).
    #[inline]
    fn get_long(&mut self, bytes: &[u8], out: &mut Vec<u32>, may_rest: bool) -> bool {
        if may_rest && self.long_skip > 0 {
            return false;
        }
        let found = self.copy_ids(self.long.get(bytes).copied(), out);
        if may_rest {
            self.long_probes += 1;
            self.long_hits += found as u32;
            if self.long_probes == LONG_WINDOW {
                if self.long_hits < LONG_MIN_HITS {
                    self.long_skip = LONG_REST;
                }
                (self.long_probes, self.long_hits) = (0, 0);
            }
        }
        found
    }

    /// True while `long` rests (then `insert_long` is not called); counts the rest down.
    fn long_rests(&mut self, may_rest: bool) -> bool {
        if may_rest && self.long_skip > 0 {
            self.long_skip -= 1;
            return true;
        }
        false
    }

    fn insert_long(&mut self, bytes: &[u8], ids: &[u32]) {
        self.make_room(bytes.len());
        let range = self.store_ids(ids);
        self.long.insert(bytes.into(), range);
        self.long_bytes += bytes.len();
    }
}

/// A small memo of the merge table, per thread and model: the pairs merging meets in new
/// chunks are mostly the same few thousand ("in" + "g", " th" + "e"...), and the table itself is
/// many megabytes, so each lookup there is a miss of the CPU cache. Sets of two entries: the
/// first keeps the lower-ranked (more common) merge of those met, the second takes the rest, so
/// that the rare pairs of rare words do not push the common ones out.
struct PairMemo {
    sets: Vec<MemoSet>,
    bits: u32,
    /// Pairs the memo did not answer in the current window, and how many had no merge.
    window: u32,
    unmerged: u32,
    /// Whether the model's pair filter is asked, before the memo: when most pairs looked up
    /// have no merge (random letters, runs of CJK characters), it answers them from the CPU
    /// cache; when most have one (words), it would only add a load.
    filter: bool,
}

/// Lookups per window of `PairMemo`'s count of pairs without a merge.
const MEMO_WINDOW: u32 = 1 << 12;

/// Two entries of [left, right, rank, merged id]; no id is u32::MAX, so that marks an empty one
/// (whose rank, u32::MAX, is above every other).
#[derive(Clone, Copy)]
#[repr(align(32))]
struct MemoSet([[u32; 4]; 2]);

const EMPTY_SET: MemoSet = MemoSet([[u32::MAX; 4]; 2]);

/// 2^13 sets of 32 bytes: 256 KB, most of it L2-resident next to the chunk cache's front (a larger
/// memo measured no faster).
const PAIR_MEMO_BITS: u32 = 13;

impl PairMemo {
    fn new(bits: u32) -> Self {
        PairMemo { sets: vec![EMPTY_SET; 1 << bits], bits, window: 0, unmerged: 0, filter: false }
    }

    fn clear(&mut self) {
        self.sets.fill(EMPTY_SET);
        (self.window, self.unmerged, self.filter) = (0, 0, false);
    }

    /// (rank, merged id) of the pair, as `BpeModel::merge_of`.
    #[inline(always)]
    fn merge_of(&mut self, model: &BpeModel, left: u32, right: u32) -> (u32, u32) {
        // While most pairs have no merge, the filter answers those before the memo is asked:
        // its 256 KB are more often in the CPU cache than the memo's set for a rare pair.
        if self.filter && !model.may_merge((left, right)) {
            self.count(NO_MERGE.0);
            return NO_MERGE;
        }
        let at = (pair_hash(left, right) >> (64 - self.bits)) as usize;
        for e in self.sets[at].0.iter() {
            if e[0] == left && e[1] == right {
                return (e[2], e[3]);
            }
        }
        let (rank, id) = model.merge_of(left, right);
        self.count(rank);
        let set = &mut self.sets[at].0;
        let entry = [left, right, rank, id];
        if rank < set[0][2] {
            set[1] = set[0];
            set[0] = entry;
        } else {
            set[1] = entry;
        }
        (rank, id)
    }

    /// Counts a pair the memo did not answer (`rank`: its merge's, `NO_MERGE.0` for none), and
    /// at the end of each window turns the filter on or off.
    #[inline(always)]
    fn count(&mut self, rank: u32) {
        self.window += 1;
        self.unmerged += (rank == NO_MERGE.0) as u32;
        if self.window == MEMO_WINDOW {
            self.filter = self.unmerged > MEMO_WINDOW / 2;
            (self.window, self.unmerged) = (0, 0);
        }
    }
}

/// Appends `ids[..len]` (`len` <= 3) to `out`. Copies all three ids, then sets the length:
/// a fixed-size copy instead of a `memcpy` call of variable length, once per cached chunk.
#[inline(always)]
fn push_up_to_3(out: &mut Vec<u32>, ids: &[u32; 3], len: usize) {
    assert!(len <= 3);
    out.reserve(3);
    let at = out.len();
    // SAFETY: `reserve(3)` makes room for three more ids after `at`; only `len` of them, all
    // just written, become part of the vector.
    unsafe {
        std::ptr::copy_nonoverlapping(ids.as_ptr(), out.as_mut_ptr().add(at), 3);
        out.set_len(at + len);
    }
}

thread_local! {
    /// Most recently used first.
    static CHUNK_CACHES: std::cell::RefCell<Vec<ChunkCache>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's chunk cache for model `uid` (made or recycled as needed).
fn with_chunk_cache<R>(uid: u64, f: impl FnOnce(&mut ChunkCache) -> R) -> R {
    CHUNK_CACHES.with(|caches| {
        let Ok(mut caches) = caches.try_borrow_mut() else {
            // Re-entered from inside `f` (cannot happen today): work without a shared cache.
            return f(&mut ChunkCache::new(uid));
        };
        let epoch = CACHE_EPOCH.load(std::sync::atomic::Ordering::Relaxed);
        // Caches made before `clear_chunk_caches` are emptied and kept, not freed: their memory
        // (megabytes) is then not faulted in again page by page.
        for c in caches.iter_mut().filter(|c| c.epoch != epoch) {
            c.reset(c.owner);
            c.epoch = epoch;
        }
        match caches.iter().position(|c| c.owner == uid) {
            Some(0) => {}
            Some(i) => {
                let c = caches.remove(i);
                caches.insert(0, c);
            }
            None => {
                let c = if caches.len() >= CACHES_PER_THREAD {
                    let mut c = caches.pop().unwrap();
                    c.reset(uid);
                    c
                } else {
                    ChunkCache::new(uid)
                };
                caches.insert(0, c);
            }
        }
        f(&mut caches[0])
    })
}

/// The symbol of a position that a merge folded into its left neighbour (`Node`,
/// `dropout_queued`): no token has this id.
const GONE: u32 = u32::MAX;

/// One position of a chunk in `merge_heap` and `merge_queued`: its symbol (`GONE` once merged
/// into its left neighbour) and links to the neighbours still there (past the ends: `u32::MAX`
/// before, the chunk's length after). Together, so that visiting a position costs one cache
/// miss, not one per array (a rare pair's positions lie far apart in 1 MB).
#[derive(Clone, Copy)]
struct Node {
    sym: u32,
    prev: u32,
    next: u32,
}

impl Node {
    /// The positions of `symbols` (fewer than `u32::MAX`), each linked to its neighbours.
    fn list(symbols: &[u32]) -> Vec<Node> {
        (0..symbols.len() as u32).map(|i| Node { sym: symbols[i as usize], prev: i.wrapping_sub(1), next: i + 1 }).collect()
    }

    /// Appends the symbols still there, in order.
    fn push_symbols(nodes: &[Node], out: &mut Vec<u32>) {
        let mut i = 0;
        while let Some(node) = nodes.get(i) {
            out.push(node.sym);
            i = node.next as usize;
        }
    }
}

/// Chunks up to this many symbols are merged with dropout step by step (see `merge_dropout`).
const DROPOUT_SCAN_MAX: usize = 32;

/// `dropout_queued`'s buffers, kept from one chunk to the next.
#[derive(Default)]
struct DropoutScratch {
    next: Vec<usize>,
    prev: Vec<usize>,
    heap: BinaryHeap<Reverse<(u32, usize)>>,
    skipped: Vec<Reverse<(u32, usize)>>,
}

/// `merge_long`'s queue: rank -> positions of the candidate pairs of that rank (buckets in a
/// slab), and the ranks in a min-heap. A small direct-mapped memo of rank -> bucket answers most
/// adds without hashing: runs of adds go to a few ranks (1 MB of spaces merges the same two or
/// three pairs hundreds of thousands of times).
struct RankBuckets {
    index: FxHashMap<u32, u32>,
    slab: Vec<Vec<u32>>,
    free: Vec<u32>,
    memo: [(u32, u32); 64],
    heap: BinaryHeap<Reverse<u32>>,
}

impl RankBuckets {
    fn new() -> Self {
        RankBuckets { index: FxHashMap::default(), slab: Vec::new(), free: Vec::new(), memo: [(NO_MERGE.0, 0); 64], heap: BinaryHeap::new() }
    }

    #[inline]
    fn add(&mut self, rank: u32, pos: u32) {
        let m = rank as usize & 63;
        let slot = if self.memo[m].0 == rank {
            self.memo[m].1
        } else {
            let slot = match self.index.get(&rank) {
                Some(&slot) => slot,
                None => {
                    let slot = self.free.pop().unwrap_or_else(|| {
                        self.slab.push(Vec::new());
                        self.slab.len() as u32 - 1
                    });
                    self.index.insert(rank, slot);
                    self.heap.push(Reverse(rank));
                    slot
                }
            };
            self.memo[m] = (rank, slot);
            slot
        };
        self.slab[slot as usize].push(pos);
    }

    /// The lowest rank and its positions (in no particular order), removed from the queue.
    fn pop(&mut self) -> Option<(u32, Vec<u32>)> {
        let Reverse(rank) = self.heap.pop()?;
        let slot = self.index.remove(&rank).expect("a queued rank has a bucket");
        if self.memo[rank as usize & 63].0 == rank {
            self.memo[rank as usize & 63] = (NO_MERGE.0, 0);
        }
        self.free.push(slot);
        Some((rank, std::mem::take(&mut self.slab[slot as usize])))
    }
}

/// `merge_run` takes chunks whose symbols other than one repeated run number at most this many
/// on either side, and whose run is at least `MIN_RUN` long: each of its steps looks at every
/// pair outside the run, so the sides must be few for it to stay linear in the chunk's length.
const RUN_SIDES: usize = 64;
const MIN_RUN: usize = 1024;

/// The run of one repeated symbol that makes up all of `symbols` but at most `RUN_SIDES` symbols
/// on each side, if it is at least `MIN_RUN` long: (start, end).
fn long_run(symbols: &[u32]) -> Option<(usize, usize)> {
    if symbols.len() < MIN_RUN {
        return None;
    }
    // Such a run covers position RUN_SIDES; most long chunks (CJK text) differ right there.
    let s = symbols[RUN_SIDES];
    let mut start = RUN_SIDES;
    while start > 0 && symbols[start - 1] == s {
        start -= 1;
    }
    let end = RUN_SIDES + symbols[RUN_SIDES..].iter().take_while(|&&x| x == s).count();
    (end - start >= MIN_RUN && symbols.len() - end <= RUN_SIDES).then_some((start, end))
}

/// The rank of a pair that does not merge: larger than every real rank.
const NO_MERGE: (u32, u32) = (u32::MAX, u32::MAX);

fn format_err(m: String) -> Error {
    Error::new(ErrorKind::Format, m)
}

/// What the merges start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Level {
    /// Every byte is a symbol (GPT-2, tiktoken): any text can be encoded.
    #[default]
    Byte,
    /// Every character is a symbol (SentencePiece-style BPE, classic BPE); characters not in the
    /// vocabulary become byte-fallback tokens `<0xAB>` or the unknown token.
    Char,
}

/// Options of the Hugging Face BPE model (all off by default).
#[derive(Debug, Clone, Default)]
pub struct BpeOptions {
    pub level: Level,
    pub unk: Option<u32>,
    pub byte_fallback: bool,
    pub fuse_unk: bool,
    pub continuing_subword_prefix: Option<String>,
    pub end_of_word_suffix: Option<String>,
    /// Emit a whole chunk as one token when it is in the vocabulary, before any merge.
    pub ignore_merges: bool,
}

/// A small, fast, seedable generator for BPE-dropout (quality is ample for coin flips).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Whether a token spans whitespace: whitespace that follows a non-whitespace byte
/// (" the" does not; "the way" and ", and" do).
fn spans_whitespace(bytes: &[u8]) -> bool {
    bytes.windows(2).any(|w| !w[0].is_ascii_whitespace() && w[1].is_ascii_whitespace())
}

#[derive(Debug, Clone)]
pub struct BpeModel {
    /// id -> token bytes; `None` for ids that are special tokens (or unused).
    vocab: Vec<Option<Vec<u8>>>,
    by_bytes: FxHashMap<Vec<u8>, u32>,
    /// The tokens of at most 15 bytes again, keyed by their bytes packed into one integer:
    /// looking a chunk up costs one hash of a u128 instead of hashing and comparing a slice
    /// (most chunks of real text are a single short token).
    short_tokens: FxHashMap<u128, u32>,
    /// The tokens of more than 15 bytes again (5,500 of o200k's 200,000): a chunk of 16 bytes or
    /// more is looked up whole (tiktoken's rule) in this small map, mostly in the CPU cache,
    /// not in `by_bytes` (a cache miss per chunk of Chinese or Japanese text, which is rarely
    /// a token).
    long_tokens: FxHashMap<Box<[u8]>, u32>,
    /// Byte level: the id of each byte. Char level: the byte-fallback tokens `<0xAB>`, if any.
    byte_ids: Option<[u32; 256]>,
    /// (left id, right id) -> (rank, merged id). Lower rank merges first.
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    /// `merges` in a smaller table, where the ids allow (see `PackedMerges`).
    packed: Option<PackedMerges>,
    /// Byte level: `merges` for the pairs of single bytes, indexed by `left << 8 | right`
    /// (512 KB, cache-resident: every merge of a chunk starts with its byte pairs).
    byte_pairs: Vec<(u32, u32)>,
    /// One bit per hash of a pair, set for the pairs `merges` has: a clear bit answers "no
    /// merge" from 256 KB that stay in the CPU cache, where the map would cost a miss.
    pair_filter: Vec<u64>,
    specials: SpecialTokens,
    /// None: the caller pre-tokenizes, each piece given is one chunk.
    pretokenizer: Option<Pretokenizer>,
    options: BpeOptions,
    /// This model's number for the per-thread chunk cache.
    uid: u64,
    /// Chunks of at most this many bytes encode to what merging their bytes gives: all of them
    /// without `ignore_merges`; with it, those no longer than the tokens that merging their own
    /// bytes gives back whole (all tokens up to `WHOLE_CHECK_BYTES` in tiktoken's encodings).
    /// Such chunks skip the whole-token lookup: text of new short chunks (random accented
    /// letters) would pay a miss of the CPU cache in the token table for each.
    merging_suffices_upto: usize,
    /// Byte level, when the merges are in order: merging may start from whole characters.
    char_start: Option<CharStart>,
    /// With `ignore_merges`: every token of at most this many bytes comes back whole from
    /// merging its own bytes (tiktoken's encodings: known from loading, where each token's
    /// bytes are merged to find its merge; others: `merging_suffices_upto`). Chunks that long
    /// need no whole-token lookup when they rest (see `ChunkCache::resting`).
    made_upto: usize,
    /// Per length from `made_upto + 1` to 15 bytes, made on first use: the keys of
    /// the tokens of that length that merging their own bytes does not give back whole (with
    /// `ignore_merges`, a chunk that is such a token encodes to it). Lets a chunk merged without
    /// the cache (see `ChunkCache::resting`) skip the lookup in the whole vocabulary.
    unmade: [std::sync::OnceLock<FxHashSet<u128>>; 16],
    /// The most bytes of a chunk one token can cover: the longest token, at least 4 (an unknown
    /// character's `<unk>` covers up to 4). A chunk of n bytes takes at least n / this many tokens.
    longest_token: usize,
    /// Chunks encoded by `encode_resting` (for tests: the per-thread caches may be emptied
    /// by other tests at any time, this count not).
    #[cfg(test)]
    rested_chunks: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// A byte-level model's tables, filled merge by merge while a trainer learns the merges (bytes
/// are ids 0-255, merge k makes id 256 + k). A trainer on several threads extends it on a
/// thread that would otherwise wait, so that little of the model is left to build after the
/// last merge (on one thread, for 32,000 tokens, that took 12 ms at the end of every training).
/// `finish` gives the same model as `BpeModel::new` from the same tokens and merges.
pub struct MergesModelBuilder {
    /// Internal id -> token bytes.
    tokens: Vec<Vec<u8>>,
    by_bytes: FxHashMap<Vec<u8>, u32>,
    short_tokens: FxHashMap<u128, u32>,
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    /// The first token whose bytes an earlier token already has: `BpeModel::new` refuses that.
    repeated: Option<(u32, u32)>,
}

impl Default for MergesModelBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl MergesModelBuilder {
    /// The 256 byte tokens and no merges.
    pub fn new() -> Self {
        let mut builder = MergesModelBuilder {
            tokens: Vec::new(),
            by_bytes: FxHashMap::default(),
            short_tokens: FxHashMap::default(),
            merges: FxHashMap::default(),
            repeated: None,
        };
        for b in 0..=255u8 {
            builder.add_token(vec![b]);
        }
        builder
    }

    /// How many merges it holds.
    pub fn num_merges(&self) -> usize {
        self.tokens.len() - 256
    }

    fn add_token(&mut self, bytes: Vec<u8>) {
        let id = self.tokens.len() as u32;
        if let Some(k) = pack_short(&bytes) {
            self.short_tokens.entry(k).or_insert(id);
        }
        match self.by_bytes.entry(bytes.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => {
                self.repeated.get_or_insert((*e.get(), id));
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(id);
            }
        }
        self.tokens.push(bytes);
    }

    /// Adds the next merges (pairs of ids it already has).
    pub fn extend(&mut self, merges: &[(u32, u32)]) -> Result<()> {
        self.merges.reserve(merges.len());
        for &(l, r) in merges {
            let rank = self.num_merges() as u32;
            let (Some(lb), Some(rb)) = (self.tokens.get(l as usize), self.tokens.get(r as usize)) else {
                return Err(format_err(format!("merge #{rank} ({l}, {r}) names an id that is not a token")));
            };
            let joined = [lb.as_slice(), rb.as_slice()].concat();
            self.merges.entry((l, r)).or_insert((rank, 256 + rank));
            self.add_token(joined);
        }
        Ok(())
    }

    /// The model, every id shifted by `offset` (special tokens laid out first).
    pub fn finish(self, offset: u32, pattern: Option<&str>, specials: Vec<(String, u32)>) -> Result<BpeModel> {
        let MergesModelBuilder { tokens, mut by_bytes, mut short_tokens, mut merges, repeated } = self;
        // The checks of `BpeModel::new`, in its order.
        let max_id = (offset as u64 + tokens.len() as u64 - 1).max(specials.iter().map(|s| s.1 as u64).max().unwrap_or(0));
        if max_id >= 1 << 28 {
            return Err(format_err(format!("token id {max_id} is too large; ids must be below 2^28")));
        }
        if let Some((first, again)) = repeated {
            return Err(format_err(format!(
                "token {:?} appears twice in the vocabulary (ids {} and {})",
                String::from_utf8_lossy(&tokens[again as usize]),
                first + offset,
                again + offset
            )));
        }
        let mut vocab: Vec<Option<Vec<u8>>> = vec![None; offset as usize];
        vocab.extend(tokens.into_iter().map(Some));
        vocab.resize(max_id as usize + 1, None);
        if offset != 0 {
            by_bytes.values_mut().for_each(|id| *id += offset);
            short_tokens.values_mut().for_each(|id| *id += offset);
            merges = merges.into_iter().map(|((l, r), (rank, id))| ((l + offset, r + offset), (rank, id + offset))).collect();
        }
        let byte_ids = std::array::from_fn(|b| b as u32 + offset);
        BpeModel::assemble(vocab, by_bytes, short_tokens, Some(byte_ids), merges, pattern, specials, BpeOptions::default())
    }
}

/// 2^21 bits (256 KB): with o200k's 200,000 merges, 96.6% of pairs without a merge find one
/// of their two bits clear (see `pair_filter_bits`).
const PAIR_FILTER_BITS: u32 = 21;

/// `merges` again in 8-byte slots, for models whose merged id is the rank plus a constant
/// (tiktoken's encodings: the id is the rank): a slot holds left (21 bits), right (21 bits)
/// and rank (22 bits), eight to a cache line, lines probed in turn. For o200k it is 2 MB,
/// half of the map's buckets and control bytes, so more of it stays in the CPU cache, which
/// merging new words (a miss of the map per merge step) waits on.
#[derive(Debug, Clone)]
struct PackedMerges {
    lines: Vec<PackedLine>,
    /// lines.len() - 1 (a power of two).
    mask: usize,
    /// merged id = rank + offset
    offset: u32,
    /// Bit k: some pair whose first line is k lies in a later line. A pair not in its first
    /// line whose bit is clear has no merge, without a second line read.
    spilled: Vec<u64>,
}

/// Eight slots in one cache line (aligned: a `[u64; 8]` may straddle two).
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
struct PackedLine([u64; 8]);

const PACKED_ID_BITS: u32 = 21;
const PACKED_RANK_BITS: u32 = 22;
const PACKED_EMPTY: u64 = u64::MAX;
/// The largest id a packed pair may hold (all ones is left out: see `PackedMerges::get`).
const PACKED_MAX_ID: u32 = (1 << PACKED_ID_BITS) - 2;

impl PackedMerges {
    /// None when some merge's id is not its rank plus one offset, or ids or ranks are too large.
    fn new(merges: &FxHashMap<(u32, u32), (u32, u32)>) -> Option<Self> {
        let offset = merges.values().next().map_or(0, |&(rank, id)| id.wrapping_sub(rank));
        let max_rank = (1u32 << PACKED_RANK_BITS) - 2;
        if merges.iter().any(|(&(l, r), &(rank, id))| id.wrapping_sub(rank) != offset || l.max(r) > PACKED_MAX_ID || rank > max_rank) {
            return None;
        }
        // At most 7/8 full: most pairs lie in their first line (93% for o200k) and the spilled
        // bits save a second read for most pairs without a merge; 3/8 full (4 MB for o200k)
        // measured slower.
        let n_lines = (merges.len() * 8 / 7 / 8 + 1).next_power_of_two();
        let mut table = PackedMerges { lines: vec![PackedLine([PACKED_EMPTY; 8]); n_lines], mask: n_lines - 1, offset, spilled: vec![0; n_lines.div_ceil(64)] };
        for (&(l, r), &(rank, _)) in merges {
            let home = table.line_of(l, r);
            let mut at = home;
            loop {
                if at != home {
                    table.spilled[home >> 6] |= 1 << (home & 63);
                }
                if let Some(slot) = table.lines[at].0.iter_mut().find(|s| **s == PACKED_EMPTY) {
                    *slot = Self::key(l, r) << PACKED_RANK_BITS | rank as u64;
                    break;
                }
                at = (at + 1) & table.mask;
            }
        }
        Some(table)
    }

    #[inline(always)]
    fn key(left: u32, right: u32) -> u64 {
        (left as u64) << PACKED_ID_BITS | right as u64
    }

    #[inline(always)]
    fn line_of(&self, left: u32, right: u32) -> usize {
        (pair_hash(left, right).rotate_left(29) as usize) & self.mask
    }

    /// (rank, merged id) of a pair, or `NO_MERGE`.
    #[inline(always)]
    fn get(&self, left: u32, right: u32) -> (u32, u32) {
        // No merge has a part this large; such an id would not fit the key (nor may one of
        // all ones: its key would be an empty slot's).
        if left.max(right) > PACKED_MAX_ID {
            return NO_MERGE;
        }
        let key = Self::key(left, right);
        let home = self.line_of(left, right);
        let mut at = home;
        loop {
            let line = &self.lines[at].0;
            for &slot in line {
                if slot >> PACKED_RANK_BITS == key {
                    let rank = (slot & ((1 << PACKED_RANK_BITS) - 1)) as u32;
                    return (rank, rank.wrapping_add(self.offset));
                }
            }
            if line[7] == PACKED_EMPTY || (at == home && self.spilled[home >> 6] & (1 << (home & 63)) == 0) {
                return NO_MERGE;
            }
            at = (at + 1) & self.mask;
        }
    }
}

/// The word of `pair_filter` for a pair and the two bits it sets there (a Bloom filter whose
/// two bits share one word: one load answers). Of random pairs without a merge, one bit let
/// 9.1% through for o200k and 4.6% for cl100k; two let 3.4% and 1.1%.
#[inline(always)]
fn pair_filter_bits((left, right): (u32, u32)) -> (usize, u64) {
    // Mixed again past the memo's hash, so that pairs sharing a memo set do not share a word.
    let h = pair_hash(left, right).rotate_left(17).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let word = (h >> (64 - (PAIR_FILTER_BITS - 6))) as usize;
    (word, 1u64 << (h & 63) | 1u64 << ((h >> 6) & 63))
}

/// A hash of a pair of ids, whose top bits pick the pair's set in `PairMemo`.
#[inline(always)]
fn pair_hash(left: u32, right: u32) -> u64 {
    ((left as u64) << 32 | right as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The id of the token whose bytes are exactly `bytes`, if any: by its packed key when it has
/// one (`short_tokens`, one hash of a u128), else by its bytes.
#[inline]
fn token_id_in(by_bytes: &FxHashMap<Vec<u8>, u32>, short_tokens: &FxHashMap<u128, u32>, bytes: &[u8]) -> Option<u32> {
    match pack_short(bytes) {
        Some(key) => short_tokens.get(&key).copied(),
        None => by_bytes.get(bytes).copied(),
    }
}

/// The merges of a ranks model (tiktoken's encodings): two adjacent parts merge when their
/// concatenation is a token, lowest rank (= id) first. Of all the ways to split a token into two
/// tokens, only one can ever apply: the last merge of merging the token's own bytes. So the
/// merge table holds that one per token (none for a token that merging its bytes does not give
/// back): o200k has 200,000 merges instead of the 446,000 splits, a smaller table with more of
/// it in the CPU cache, and a pair filter with half as many bits set.
///
/// Why no other split applies: a token forms from the symbols inside its span, and no merge
/// across the span's ends happens before (it would join bytes inside and outside the span for
/// good). So the merges inside the span are, step by step, the lowest-ranked pair of the span
/// (leftmost among equals): the merges of the token's bytes alone, in the same order, up to
/// the last one. Any other split of the token is never the lowest-ranked pair while it is
/// adjacent, so leaving it out changes no result.
///
/// Also returns the length of the shortest token that merging its own bytes does not give back
/// whole (`usize::MAX` if there is none): tiktoken encodes a chunk that is such a token to it.
fn last_merges(by_bytes: &FxHashMap<Vec<u8>, u32>, short_tokens: &FxHashMap<u128, u32>) -> (FxHashMap<(u32, u32), (u32, u32)>, usize) {
    let token = |b: &[u8]| token_id_in(by_bytes, short_tokens, b);
    let mut merges = FxHashMap::with_capacity_and_hasher(by_bytes.len(), Default::default());
    let mut shortest_unmade = usize::MAX;
    // Symbol i is bytes[starts[i]..starts[i + 1]] (the last one up to the end); the rank of the
    // pair of symbols i and i + 1 is the id of their concatenation, if it is a token.
    let (mut starts, mut ranks): (Vec<usize>, Vec<u32>) = (Vec::new(), Vec::new());
    for (bytes, &id) in by_bytes.iter().filter(|(b, _)| b.len() >= 2) {
        let n = bytes.len();
        let end = |starts: &[usize], i: usize| starts.get(i + 1).copied().unwrap_or(n);
        let rank = |from: usize, to: usize| token(&bytes[from..to]).unwrap_or(u32::MAX);
        starts.clear();
        starts.extend(0..n);
        ranks.clear();
        ranks.extend((0..n - 1).map(|i| rank(i, i + 2)));
        let mut last = None;
        loop {
            // The lowest rank, leftmost among equals.
            let mut at = None;
            for (i, &r) in ranks.iter().enumerate() {
                if r != u32::MAX && at.map_or(true, |j: usize| r < ranks[j]) {
                    at = Some(i);
                }
            }
            let Some(i) = at else { break };
            last = Some((starts[i], starts[i + 1], end(&starts, i + 1)));
            starts.remove(i + 1);
            ranks.remove(i);
            if i < ranks.len() {
                ranks[i] = rank(starts[i], end(&starts, i + 1));
            }
            if i > 0 {
                ranks[i - 1] = rank(starts[i - 1], end(&starts, i));
            }
        }
        // One symbol left: it is the whole token, and `last` the merge that made it.
        if let (1, Some((from, split, to))) = (starts.len(), last) {
            if let (Some(l), Some(r)) = (token(&bytes[from..split]), token(&bytes[split..to])) {
                merges.insert((l, r), (id, id));
            }
        } else {
            shortest_unmade = shortest_unmade.min(n);
        }
    }
    (merges, shortest_unmade)
}

/// The longest tokens `merging_suffices_upto` is checked for (o200k has some 40,000 tokens
/// of up to 4 bytes: checking them takes a few milliseconds of the load).
const WHOLE_CHECK_BYTES: usize = 4;

impl BpeModel {
    /// Builds a model from `(id, bytes)` tokens, merges in rank order given as
    /// `(left id, right id)`, a pre-tokenization regex and `(string, id)` special tokens.
    /// Every single byte must be a token, and every merge must produce a token.
    pub fn new(
        tokens: Vec<(u32, Vec<u8>)>,
        merges: &[(u32, u32)],
        pattern: Option<&str>,
        specials: Vec<(String, u32)>,
        options: BpeOptions,
    ) -> Result<Self> {
        // With a continuing-subword prefix, merging (a, ##b) gives a + b: the prefix of the
        // right part is dropped (as in Hugging Face).
        let prefix = options.continuing_subword_prefix.clone().unwrap_or_default().into_bytes();
        Self::build(tokens, pattern, specials, options, |vocab, by_bytes, _| {
            let mut merge_map = FxHashMap::with_capacity_and_hasher(merges.len(), Default::default());
            for (rank, &(l, r)) in merges.iter().enumerate() {
                let get = |id: u32| vocab.get(id as usize).and_then(|t| t.as_ref());
                let (Some(lb), Some(rb)) = (get(l), get(r)) else {
                    return Err(format_err(format!("merge #{rank} ({l}, {r}) names an id that is not a token")));
                };
                let rb = rb.strip_prefix(prefix.as_slice()).unwrap_or(rb);
                let joined = [lb.as_slice(), rb].concat();
                let Some(&new_id) = by_bytes.get(&joined) else {
                    return Err(format_err(format!(
                        "merge #{rank} ({:?} + {:?}) produces {:?}, which is not in the vocabulary",
                        String::from_utf8_lossy(lb), String::from_utf8_lossy(rb), String::from_utf8_lossy(&joined)
                    )));
                };
                // With duplicate merges the first (lowest rank) one wins, as in Hugging Face.
                merge_map.entry((l, r)).or_insert((rank as u32, new_id));
            }
            Ok((merge_map, None))
        })
    }

    /// Builds a byte-level model from tiktoken-style ranks: the id of a token is its rank, and two
    /// adjacent parts merge when their concatenation is a token, lowest rank first. That is the
    /// same as merges over every split `(left, right)` of every token whose halves are both
    /// tokens, ranked by the token they form; of those, only the one merging can apply is
    /// stored (see `last_merges`).
    ///
    /// As in tiktoken, a chunk that is itself a token is emitted whole, before any merging.
    pub fn from_ranks(tokens: Vec<(u32, Vec<u8>)>, pattern: Option<&str>, specials: Vec<(String, u32)>) -> Result<Self> {
        let options = BpeOptions { ignore_merges: true, ..BpeOptions::default() };
        Self::build(tokens, pattern, specials, options, |_, by_bytes, short_tokens| {
            let (merges, shortest_unmade) = last_merges(by_bytes, short_tokens);
            Ok((merges, Some(shortest_unmade - 1)))
        })
    }

    #[allow(clippy::type_complexity)]
    fn build(
        tokens: Vec<(u32, Vec<u8>)>,
        pattern: Option<&str>,
        specials: Vec<(String, u32)>,
        options: BpeOptions,
        // The merges, and (when known) the length up to which every token comes back whole
        // from merging its own bytes (see `made_upto`).
        make_merges: impl FnOnce(&[Option<Vec<u8>>], &FxHashMap<Vec<u8>, u32>, &FxHashMap<u128, u32>) -> Result<(FxHashMap<(u32, u32), (u32, u32)>, Option<usize>)>,
    ) -> Result<Self> {
        let max_id = tokens.iter().map(|t| t.0).chain(specials.iter().map(|s| s.1)).max().unwrap_or(0);
        if max_id as usize >= (1 << 28) {
            return Err(format_err(format!("token id {max_id} is too large; ids must be below 2^28")));
        }
        // The tables are indexed by id: an id far past the others (a special token at 10^8)
        // would make them gigabytes of holes.
        let count = tokens.len() + specials.len();
        if max_id as usize >= count + MAX_ID_GAP {
            return Err(format_err(format!(
                "token id {max_id} is far past the vocabulary's {count} tokens; ids must be below {} (the \
                 number of tokens plus {MAX_ID_GAP}): number the tokens without such a gap",
                count + MAX_ID_GAP
            )));
        }
        let mut vocab: Vec<Option<Vec<u8>>> = vec![None; max_id as usize + 1];
        let mut by_bytes: FxHashMap<Vec<u8>, u32> = FxHashMap::with_capacity_and_hasher(tokens.len(), Default::default());
        for (id, bytes) in tokens {
            if vocab[id as usize].is_some() {
                return Err(format_err(format!("token id {id} appears twice in the vocabulary")));
            }
            if bytes.is_empty() {
                return Err(format_err(format!("token id {id} has no bytes")));
            }
            if let Some(other) = by_bytes.insert(bytes.clone(), id) {
                return Err(format_err(format!(
                    "token {:?} appears twice in the vocabulary (ids {other} and {id})",
                    String::from_utf8_lossy(&bytes)
                )));
            }
            vocab[id as usize] = Some(bytes);
        }
        let byte_ids = match options.level {
            Level::Byte => {
                let mut ids = [0u32; 256];
                for b in 0..=255u8 {
                    ids[b as usize] = *by_bytes.get([b].as_slice()).ok_or_else(|| {
                        format_err(format!("the vocabulary has no token for byte 0x{b:02x}; byte-level BPE needs all 256"))
                    })?;
                }
                Some(ids)
            }
            Level::Char if options.byte_fallback => {
                // Byte fallback needs all 256 `<0xAB>` tokens; without them it cannot apply.
                let mut ids = [0u32; 256];
                let mut all = true;
                for b in 0..=255usize {
                    match by_bytes.get(format!("<0x{b:02X}>").as_bytes()) {
                        Some(&id) => ids[b] = id,
                        None => all = false,
                    }
                }
                all.then_some(ids)
            }
            Level::Char => None,
        };
        let short_tokens = by_bytes.iter().filter_map(|(b, &id)| pack_short(b).map(|k| (k, id))).collect();
        let (merges, made_upto) = make_merges(&vocab, &by_bytes, &short_tokens)?;
        let mut model = Self::assemble(vocab, by_bytes, short_tokens, byte_ids, merges, pattern, specials, options)?;
        if let (true, Some(upto)) = (model.options.ignore_merges, made_upto) {
            model.made_upto = model.made_upto.max(upto);
        }
        Ok(model)
    }

    /// The model from its token and merge tables (checked: no id twice): the special tokens
    /// (none on an ordinary token's id), the pre-tokenizer and the tables derived for speed.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        vocab: Vec<Option<Vec<u8>>>,
        by_bytes: FxHashMap<Vec<u8>, u32>,
        short_tokens: FxHashMap<u128, u32>,
        byte_ids: Option<[u32; 256]>,
        merges: FxHashMap<(u32, u32), (u32, u32)>,
        pattern: Option<&str>,
        specials: Vec<(String, u32)>,
        options: BpeOptions,
    ) -> Result<Self> {
        for (s, id) in &specials {
            if vocab[*id as usize].is_some() {
                return Err(format_err(format!("special token {s:?} has id {id}, which is also an ordinary token")));
            }
        }
        let specials = SpecialTokens::new(specials)?;
        let pretokenizer = pattern.map(Pretokenizer::new).transpose()?;
        let uid = next_model_uid();
        let byte_pairs = match (options.level, &byte_ids) {
            (Level::Byte, Some(ids)) => (0..1usize << 16)
                .map(|i| merges.get(&(ids[i >> 8], ids[i & 0xff])).copied().unwrap_or(NO_MERGE))
                .collect(),
            _ => Vec::new(),
        };
        let mut pair_filter = vec![0u64; 1 << (PAIR_FILTER_BITS - 6)];
        for &pair in merges.keys() {
            let (word, bits) = pair_filter_bits(pair);
            pair_filter[word] |= bits;
        }
        // Not with a continuing-subword prefix: merged tokens would not be the text they cover.
        let char_start = if options.level == Level::Byte && options.continuing_subword_prefix.is_none() { CharStart::new(vocab.len(), &merges) } else { None };
        let long_tokens = by_bytes.iter().filter(|(b, _)| b.len() > 15).map(|(b, &id)| (b.as_slice().into(), id)).collect();
        let packed = PackedMerges::new(&merges);
        let longest_token = vocab.iter().flatten().map(Vec::len).max().unwrap_or(0).max(4);
        let mut model = BpeModel { vocab, by_bytes, short_tokens, long_tokens, byte_ids, byte_pairs, pair_filter, merges, packed, specials, pretokenizer, options, uid, merging_suffices_upto: usize::MAX, made_upto: usize::MAX, char_start, unmade: Default::default(), longest_token, #[cfg(test)] rested_chunks: Default::default() };
        if model.options.ignore_merges {
            model.merging_suffices_upto = model.longest_tokens_merges_make(WHOLE_CHECK_BYTES);
            model.made_upto = model.merging_suffices_upto;
        }
        Ok(model)
    }

    /// The largest n <= `max_len` such that every token of 2 to n bytes is what merging its
    /// bytes gives (0 at character level, where the value is not used).
    fn longest_tokens_merges_make(&self, max_len: usize) -> usize {
        if self.options.level != Level::Byte {
            return 0;
        }
        // Each token that merging does not give back lowers the bound below its length.
        let mut upto = max_len;
        let mut memo = PairMemo::new(12);
        let mut symbols = Vec::new();
        for (id, bytes) in self.tokens() {
            if (2..=upto).contains(&bytes.len()) && !self.merging_gives_back(id, bytes, &mut symbols, &mut memo) {
                upto = bytes.len() - 1;
            }
        }
        upto
    }

    /// Whether merging the bytes of token `id` (byte level) gives back that one token.
    /// `symbols` is scratch space.
    fn merging_gives_back(&self, id: u32, bytes: &[u8], symbols: &mut Vec<u32>, memo: &mut PairMemo) -> bool {
        symbols.clear();
        self.initial_symbols(bytes, symbols).is_ok() && {
            self.merge_short(symbols, Some(bytes), memo);
            *symbols == [id]
        }
    }

    /// Reads a `.tiktoken` file (`base64(token) rank` per line) into a ranks model.
    pub fn from_tiktoken_file(path: &std::path::Path, pattern: Option<&str>, specials: Vec<(String, u32)>) -> Result<Self> {
        use base64::Engine;
        let data = std::fs::read(path).map_err(|e| format_err(format!("cannot read {}: {e}", path.display())))?;
        let mut tokens = Vec::new();
        for (n, line) in data.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            let bad = |what: &str| {
                format_err(format!("{}:{}: {what}; a .tiktoken line is 'base64(token) rank'", path.display(), n + 1))
            };
            let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
            let (Some(token), Some(rank), None) = (fields.next(), fields.next(), fields.next()) else {
                return Err(bad("expected two fields"));
            };
            let token = base64::engine::general_purpose::STANDARD.decode(token).map_err(|e| bad(&format!("bad base64 ({e})")))?;
            let rank: u32 = std::str::from_utf8(rank).ok().and_then(|r| r.parse().ok()).ok_or_else(|| bad("the rank is not a number"))?;
            tokens.push((rank, token));
        }
        if tokens.is_empty() {
            return Err(format_err(format!("{} holds no tokens; is it a .tiktoken file?", path.display())));
        }
        Self::from_ranks(tokens, pattern, specials)
    }

    /// Every ordinary token as (id, bytes), in id order.
    pub fn tokens(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.vocab.iter().enumerate().filter_map(|(i, t)| t.as_deref().map(|b| (i as u32, b)))
    }

    /// The merges as (rank, left, right), lowest rank first.
    fn ranked_merges(&self) -> Vec<(u32, u32, u32)> {
        let mut by_rank: Vec<(u32, u32, u32)> = self.merges.iter().map(|(&(l, r), &(rank, _))| (rank, l, r)).collect();
        by_rank.sort_unstable();
        by_rank
    }

    /// The merges as given to `new` (or learned), lowest rank first.
    pub fn merges_by_rank(&self) -> Vec<(u32, u32)> {
        self.ranked_merges().into_iter().map(|(_, l, r)| (l, r)).collect()
    }

    /// For each token of two or more bytes, the pair of tokens BPE joins last to form it, in
    /// rank order: running the merges ranked below the token's own on its bytes leaves two parts.
    /// Tokens that BPE cannot produce from their own bytes are left out.
    pub fn derive_merges(&self) -> Vec<(u32, u32)> {
        let by_rank = self.ranked_merges();
        // For ranks-based models several splits share a rank (the token's id); keep the one
        // BPE actually uses, found by replaying the lower-ranked merges on the token's bytes.
        let mut out = Vec::new();
        let mut seen = FxHashSet::default();
        for &(rank, l, r) in &by_rank {
            if !seen.insert(rank) {
                continue;
            }
            let new_id = self.merges[&(l, r)].1;
            let Some(Some(bytes)) = self.vocab.get(new_id as usize) else { continue };
            let mut parts = Vec::new();
            if self.initial_symbols(bytes, &mut parts).is_err() {
                continue;
            }
            self.merge_below(&mut parts, rank);
            if parts.len() == 2 && self.merges.get(&(parts[0], parts[1])).map(|m| m.0) == Some(rank) {
                out.push((parts[0], parts[1]));
            }
        }
        out
    }

    /// `merge_short`, using only merges ranked below `limit`.
    fn merge_below(&self, symbols: &mut Vec<u32>, limit: u32) {
        loop {
            let mut best: Option<(u32, usize, u32)> = None;
            for i in 0..symbols.len().saturating_sub(1) {
                if let Some(&(rank, new_id)) = self.merges.get(&(symbols[i], symbols[i + 1])) {
                    if rank < limit && best.map_or(true, |b| rank < b.0) {
                        best = Some((rank, i, new_id));
                    }
                }
            }
            let Some((_, i, new_id)) = best else { return };
            symbols[i] = new_id;
            symbols.remove(i + 1);
        }
    }

    pub fn vocab_len(&self) -> usize {
        self.vocab.len()
    }

    pub fn pretokenizer(&self) -> Option<&Pretokenizer> {
        self.pretokenizer.as_ref()
    }

    /// The id of a token given by its bytes (UTF-8 of its string at char level).
    pub fn token_id(&self, bytes: &[u8]) -> Option<u32> {
        self.by_bytes.get(bytes).copied()
    }

    /// Encodes `text` with every special-token string treated as plain text.
    pub fn encode_ordinary(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3);
        self.encode_text(text, &mut out)?;
        Ok(out)
    }

    /// Encodes `text`, mapping the special tokens for which `allowed(id)` holds to their ids.
    pub fn encode(&self, text: &str, allowed: impl Fn(u32) -> bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3);
        self.encode_until(text, allowed, usize::MAX, &mut out)?;
        Ok(out)
    }

    /// Encodes `text` into `out` but stops as soon as `out` holds more than `limit` ids, or a
    /// chunk is too long to fit in what is left (each token covers at most `longest_token`
    /// bytes: one long chunk over a small limit is not merged at all). Returns whether the
    /// whole text was encoded within the limit (if not, `out` holds some of its ids).
    pub fn encode_until(&self, text: &str, allowed: impl Fn(u32) -> bool, limit: usize, out: &mut Vec<u32>) -> Result<bool> {
        with_chunk_cache(self.uid, |cache| {
            let mut result = Ok(());
            let mut scratch = Vec::new();
            let mut over = false;
            let bounded = limit != usize::MAX; // (no division per chunk for a plain encode)
            let mut encode_chunk = |bytes: &[u8], out: &mut Vec<u32>, result: &mut Result<()>, over: &mut bool| {
                if bounded && out.len().saturating_add(bytes.len().div_ceil(self.longest_token)) > limit {
                    *over = true;
                } else {
                    *result = self.encode_chunk_with(bytes, out, &mut scratch, cache);
                }
            };
            self.specials.split(text, allowed, |piece| {
                if result.is_err() || over || out.len() > limit {
                    return;
                }
                match piece {
                    Piece::Special(id) => out.push(id),
                    Piece::Text(t) => match &self.pretokenizer {
                        None => encode_chunk(t.as_bytes(), out, &mut result, &mut over),
                        Some(p) => {
                            // Stopping early: the pre-tokenizer is driven chunk by chunk and the
                            // callback ignores the rest once the limit is passed.
                            let r = p.for_each_chunk(t, |chunk: &str| {
                                if result.is_ok() && !over && out.len() <= limit {
                                    encode_chunk(chunk.as_bytes(), out, &mut result, &mut over);
                                }
                            });
                            if result.is_ok() {
                                result = r;
                            }
                        }
                    },
                }
            });
            result.map(|_| !over && out.len() <= limit)
        })
    }

    /// Encodes pieces that the caller already pre-tokenized: each one is one chunk, or at
    /// character level with a pattern, the pattern's chunks of it (a split the caller knows
    /// gives the same ids, see `models.BPE`'s `split_pattern`).
    pub fn encode_words<'a>(&self, words: impl IntoIterator<Item = &'a str>) -> Result<Vec<u32>> {
        with_chunk_cache(self.uid, |cache| {
            let mut out = Vec::new();
            let mut scratch = Vec::new();
            match &self.pretokenizer {
                Some(p) if self.options.level == Level::Char => {
                    for w in words {
                        self.encode_char_chunks(p, w, &mut out, &mut scratch, cache)?;
                    }
                }
                _ => {
                    for w in words {
                        self.encode_chunk_with(w.as_bytes(), &mut out, &mut scratch, cache)?;
                    }
                }
            }
            Ok(out)
        })
    }

    /// `encode_ordinary`, appending to `out`.
    pub fn encode_ordinary_into(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        self.encode_text(text, out)
    }

    /// `text` cut by `cuts`: the ids of its matches, and between them the ids of the pieces
    /// (replaced as `cuts` says) as `encode_ordinary` gives them; appended to `out`.
    pub fn encode_cut_into(&self, text: &str, cuts: &Cuts, out: &mut Vec<u32>) -> Result<()> {
        cuts.for_each_piece(text, |piece| match piece {
            Piece::Text(t) => self.encode_text(t, out),
            Piece::Special(id) => {
                out.push(id);
                Ok(())
            }
        })
    }

    fn encode_text(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        with_chunk_cache(self.uid, |cache| {
            let mut scratch = Vec::new();
            let mut result = Ok(());
            match &self.pretokenizer {
                None => self.encode_chunk_with(text.as_bytes(), out, &mut scratch, cache),
                Some(p) if self.options.level == Level::Byte => {
                    let mut sink = ByteLevelSink { model: self, text: text.as_bytes(), cache, out, scratch: &mut scratch, result: &mut result, pending: &[], pending_key: 0 };
                    p.for_each_chunk(text, &mut sink)?;
                    sink.finish();
                    result
                }
                Some(p) => self.encode_char_chunks(p, text, out, &mut scratch, cache),
            }
        })
    }

    /// Character level: the chunks of `text` by pattern `p`, one after the other.
    fn encode_char_chunks(&self, p: &Pretokenizer, text: &str, out: &mut Vec<u32>, scratch: &mut Vec<u32>, cache: &mut ChunkCache) -> Result<()> {
        let mut result = Ok(());
        p.for_each_chunk(text, |chunk: &str| {
            if result.is_ok() {
                result = self.encode_char_chunk(chunk.as_bytes(), out, scratch, cache);
            }
        })?;
        result
    }

    /// One chunk of a character-level model. Chunks of up to 15 bytes (most words) are keyed
    /// like byte-level ones: answered from the front of the cache with one load, where the
    /// map of long chunks hashed and compared their bytes behind a pointer (Gemma 3: a third of
    /// its time). Not with `ignore_merges`, whose whole-token check comes before the cache.
    fn encode_char_chunk(&self, bytes: &[u8], out: &mut Vec<u32>, scratch: &mut Vec<u32>, cache: &mut ChunkCache) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let key = if self.options.ignore_merges { None } else { pack_short(bytes) };
        if key.is_some_and(|key| cache.get_front(key, out)) {
            return Ok(());
        }
        self.encode_uncommon(bytes, key, out, scratch, cache).map(|_| ())
    }

    /// The ids of a byte-level chunk that most chunks of text get with a few instructions: one or
    /// two bytes, or a result in the front of the cache. False (nothing appended) otherwise.
    #[inline(always)]
    fn encode_common(&self, bytes: &[u8], key: Option<u128>, out: &mut Vec<u32>, cache: &ChunkCache) -> bool {
        let Some(key) = key else { return false };
        // One or two bytes: the byte's id, or the pair's merge from the dense byte-pair table
        // (L2-resident), without the cache.
        if bytes.len() <= 2 && self.merging_suffices_upto >= 2 {
            let ids = self.byte_ids.as_ref().expect("byte level has byte ids");
            match *bytes {
                [b] => out.push(ids[b as usize]),
                [b0, b1] => match self.byte_pair(b0, b1) {
                    NO_MERGE => out.extend_from_slice(&[ids[b0 as usize], ids[b1 as usize]]),
                    (_, id) => out.push(id),
                },
                _ => unreachable!(),
            }
            return true;
        }
        cache.get_front(key, out)
    }

    /// `encode_uncommon` out of line, keeping the first error in `result` (and doing nothing
    /// after one).
    #[inline(never)]
    fn encode_rest(&self, bytes: &[u8], key: Option<u128>, out: &mut Vec<u32>, scratch: &mut Vec<u32>, cache: &mut ChunkCache, result: &mut Result<()>) {
        if result.is_ok() {
            match self.encode_uncommon(bytes, key, out, scratch, cache) {
                // Counted for the chunk's length (see `ChunkCache::resting`).
                Ok(true) if key.is_some() && bytes.len() >= REST_FROM && self.may_rest() => cache.merged[bytes.len()] += 1,
                Ok(_) => {}
                Err(e) => *result = Err(e),
            }
        }
    }

    /// Whether chunk lengths may rest (see `ChunkCache::resting`): at byte level, without a
    /// continuing-subword prefix. With one, a merge drops the prefix of its right part, so a
    /// chunk may merge into one token that is not its own bytes, while with `ignore_merges` the
    /// chunk's own token is what it encodes to: only the vocabulary's table can tell.
    fn may_rest(&self) -> bool {
        !self.byte_pairs.is_empty() && self.options.continuing_subword_prefix.is_none()
    }

    /// A keyed chunk of 5 to 15 bytes whose length rests (see `ChunkCache::resting`): merged
    /// on fixed arrays, without asking the cache or filling it. With `ignore_merges`, a chunk
    /// that is a token merging does not make encodes to that token.
    #[inline(never)]
    fn encode_resting(&self, bytes: &[u8], key: u128, out: &mut Vec<u32>, cache: &mut ChunkCache) {
        #[cfg(test)]
        self.rested_chunks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let first = out.len();
        self.merge_small(bytes, out, &mut cache.pairs);
        if out.len() - first > 1 && bytes.len() > self.made_upto {
            if self.unmade_tokens(bytes.len()).contains(&key) {
                out.truncate(first);
                out.push(self.short_tokens[&key]);
            }
        }
    }

    /// The keys of the tokens of `n` bytes (more than `made_upto`, at most 15)
    /// that merging their own bytes does not give back as one token (see `unmade`).
    fn unmade_tokens(&self, n: usize) -> &FxHashSet<u128> {
        self.unmade[n].get_or_init(|| {
            let mut memo = PairMemo::new(12);
            let mut symbols = Vec::with_capacity(n);
            self.tokens()
                .filter(|&(id, bytes)| bytes.len() == n && !self.merging_gives_back(id, bytes, &mut symbols, &mut memo))
                .filter_map(|(_, bytes)| pack_short(bytes))
                .collect()
        })
    }

    /// The id of the token whose bytes are exactly `bytes`, if any.
    #[inline]
    fn whole_token(&self, bytes: &[u8]) -> Option<u32> {
        match pack_short(bytes) {
            Some(key) => self.short_tokens.get(&key).copied(),
            None => self.long_tokens.get(bytes).copied(),
        }
    }

    /// Applies the merges to one chunk (UTF-8 bytes of a str) and appends its ids to `out`.
    pub fn encode_chunk(&self, bytes: &[u8], out: &mut Vec<u32>, scratch: &mut Vec<u32>) -> Result<()> {
        with_chunk_cache(self.uid, |cache| self.encode_chunk_with(bytes, out, scratch, cache))
    }

    /// `encode_chunk` with this thread's cache already in hand (borrowed once per text).
    #[inline]
    fn encode_chunk_with(&self, bytes: &[u8], out: &mut Vec<u32>, scratch: &mut Vec<u32>, cache: &mut ChunkCache) -> Result<()> {
        // Short chunks repeat a lot (" the", " tokenizer"): their results are cached per
        // thread, whether they are one token or several.
        if self.options.level != Level::Byte {
            return self.encode_char_chunk(bytes, out, scratch, cache);
        }
        self.encode_chunk_keyed(bytes, pack_short(bytes), out, scratch, cache)
    }

    /// `encode_chunk_with` given the chunk's cache key (`pack_short` of its bytes at byte
    /// level, else None).
    #[inline(always)]
    fn encode_chunk_keyed(&self, bytes: &[u8], key: Option<u128>, out: &mut Vec<u32>, scratch: &mut Vec<u32>, cache: &mut ChunkCache) -> Result<()> {
        if bytes.is_empty() || self.encode_common(bytes, key, out, cache) {
            return Ok(());
        }
        self.encode_uncommon(bytes, key, out, scratch, cache).map(|_| ())
    }

    /// `encode_chunk_keyed` for a chunk that `encode_common` did not answer. True when the
    /// chunk was merged anew (no cache and not the vocabulary had it).
    #[inline(always)]
    fn encode_uncommon(&self, bytes: &[u8], key: Option<u128>, out: &mut Vec<u32>, scratch: &mut Vec<u32>, cache: &mut ChunkCache) -> Result<bool> {
        if let Some(key) = key {
            if bytes.len() > self.merging_suffices_upto {
                if let Some(&id) = self.short_tokens.get(&key) {
                    out.push(id);
                    cache.insert(key, &[id]);
                    return Ok(false);
                }
            }
            if cache.get_index(key, out) {
                return Ok(false);
            }
        } else if self.options.ignore_merges {
            if let Some(id) = self.whole_token(bytes) {
                out.push(id);
                return Ok(false);
            }
        }
        // Longer chunks at byte level (the runs of Chinese or Japanese text) repeat too, less
        // often than words but at a higher cost each; so do the words of a character-level
        // model (which have no short key), whose merging costs more than at byte level.
        let cache_long = key.is_none() && bytes.len() <= LONG_CHUNK;
        // At byte level the map of long chunks may rest (see `LONG_WINDOW`); the words of a
        // character-level model cost more to merge again.
        let long_may_rest = self.options.level == Level::Byte;
        if cache_long && cache.get_long(bytes, out, long_may_rest) {
            return Ok(false);
        }
        let first = out.len();
        // Byte-level chunks with characters of several bytes may start from whole characters:
        // all of 16 bytes or more (they have no key), and shorter ones (at most 15 bytes: they
        // have a key) with three characters of three bytes (CJK: six merges saved). Fewer or
        // shorter ones (accented letters, Cyrillic) save less than the search for crossing
        // tokens costs (random Latin-1 text: -6%); they are merged on fixed arrays.
        let short = key.is_some() && !self.byte_pairs.is_empty();
        let try_chars = !short || has_wide_chars(bytes);
        if short && !try_chars {
            self.merge_small(bytes, out, &mut cache.pairs);
            cache.insert(key.expect("a short chunk has a key"), &out[first..]);
            return Ok(true);
        }
        scratch.clear();
        let from_chars = try_chars && self.char_start.as_ref().is_some_and(|start| self.char_symbols(start, bytes, scratch, cache));
        if !from_chars {
            scratch.clear();
            self.initial_symbols(bytes, scratch)?;
        }
        let level_bytes = (self.options.level == Level::Byte && !from_chars).then_some(bytes);
        if from_chars && !cache.pieces.is_empty() {
            self.merge_pieces(scratch, out, cache);
        } else if scratch.len() <= SHORT_CHUNK {
            self.merge_short(scratch, level_bytes, &mut cache.pairs);
            out.extend_from_slice(scratch);
        } else {
            self.merge_long(scratch, level_bytes, out, &mut cache.pairs);
        }
        if let Some(key) = key {
            cache.insert(key, &out[first..]);
        } else if cache_long && !cache.long_rests(long_may_rest) {
            cache.insert_long(bytes, &out[first..]);
        }
        Ok(true)
    }

    /// Merges the symbols of a chunk (from `char_symbols`) piece by piece, cut where
    /// `cache.pieces` says no token spans (see `CharStart`), appending the ids to `out`.
    fn merge_pieces(&self, symbols: &[u32], out: &mut Vec<u32>, cache: &mut ChunkCache) {
        let ChunkCache { pieces, piece, pairs, .. } = cache;
        debug_assert!(pieces.windows(2).all(|w| w[0] < w[1]) && pieces.first().is_none_or(|&p| p > 0) && pieces.last().is_none_or(|&p| (p as usize) < symbols.len()));
        let mut from = 0;
        for end in pieces.iter().map(|&p| p as usize).chain([symbols.len()]) {
            match symbols[from..end] {
                [one] => out.push(one),
                [a, b] => match pairs.merge_of(self, a, b) {
                    NO_MERGE => out.extend_from_slice(&[a, b]),
                    (_, id) => out.push(id),
                },
                ref several if several.len() <= SHORT_CHUNK => {
                    piece.clear();
                    piece.extend_from_slice(several);
                    self.merge_short(piece, None, pairs);
                    out.extend_from_slice(piece);
                }
                ref long => self.merge_long(long, None, out, pairs),
            }
            from = end;
        }
    }

    /// The symbols merging starts from when it starts from characters (see `CharStart`): the
    /// bytes of ASCII characters and of the characters a crossing token cuts, each other
    /// character's tokens when merged alone. False (nothing usable in `out`) for a chunk that
    /// is all ASCII, where nothing would change, or that is not valid UTF-8. Also sets
    /// `cache.pieces`: where the symbols may be cut into pieces merged apart (none when the
    /// chunk is merged whole).
    fn char_symbols(&self, start: &CharStart, bytes: &[u8], out: &mut Vec<u32>, cache: &mut ChunkCache) -> bool {
        if bytes.is_ascii() {
            return false;
        }
        let Ok(text) = std::str::from_utf8(bytes) else { return false };
        let ids = self.byte_ids.as_ref().expect("byte level has byte ids");
        let Some(tables) = start.tables.get_or_init(|| CharTables::new(&self.vocab, self.char_table())) else { return false };
        let table = &tables.chars;
        tables.mark_cut(bytes, &mut cache.cut, &mut cache.spanned);
        cache.pieces.clear();
        let first = out.len();
        // (Pieces are found by their first symbol's index, a u32: a longer chunk is merged whole.)
        let may_cut = bytes.len() <= u32::MAX as usize;
        let mut before = None;
        for (p, c) in text.char_indices() {
            let (code, n) = (c as u32, c.len_utf8());
            // A new piece starts here when no token can span the place before this character.
            if let (Some(before), true) = (before, may_cut) {
                if cache.spanned[p / 64] >> (p % 64) & 1 == 0 && !tables.may_join(before, code) {
                    cache.pieces.push((out.len() - first) as u32);
                }
            }
            before = Some(code);
            let as_bytes = |out: &mut Vec<u32>| out.extend(bytes[p..p + n].iter().map(|&b| ids[b as usize]));
            if n == 1 || n == 4 || cache.cut[p / 64] >> (p % 64) & 1 == 1 {
                // ASCII, a cut character, or one of 4 bytes (emoji, rare: merged with the rest)
                as_bytes(out);
            } else {
                match table[code as usize].0 {
                    [AS_BYTES, _] => as_bytes(out),
                    [id, ONE_TOKEN] => out.push(id),
                    two => out.extend_from_slice(&two),
                }
            }
        }
        true
    }

    /// `CharStart::chars`: each character of 2 or 3 bytes merged alone.
    fn char_table(&self) -> Vec<CharTokens> {
        let mut memo = PairMemo::new(12);
        let mut merged = Vec::with_capacity(3);
        (0..TABLE_CHARS)
            .map(|code| {
                let Some(c) = char::from_u32(code).filter(|c| c.len_utf8() > 1) else { return CharTokens([AS_BYTES, 0]) };
                let mut utf8 = [0u8; 4];
                let bytes = c.encode_utf8(&mut utf8).as_bytes();
                merged.clear();
                self.merge_small(bytes, &mut merged, &mut memo);
                match merged[..] {
                    [id] => CharTokens([id, ONE_TOKEN]),
                    [a, b] if bytes.len() == 3 => CharTokens([a, b]),
                    _ => CharTokens([AS_BYTES, 0]), // nothing merged
                }
            })
            .collect()
    }

    fn initial_symbols(&self, bytes: &[u8], out: &mut Vec<u32>) -> Result<()> {
        if self.options.level == Level::Byte {
            let ids = self.byte_ids.as_ref().expect("byte level has byte ids");
            out.extend(bytes.iter().map(|&b| ids[b as usize]));
            return Ok(());
        }
        let text = std::str::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::Encode, "a character-level chunk is not valid UTF-8"))?;
        let o = &self.options;
        let n_chars = text.chars().count();
        let mut buf = Vec::with_capacity(16);
        let mut prev_unk = false;
        for (i, c) in text.chars().enumerate() {
            buf.clear();
            if i > 0 {
                if let Some(p) = &o.continuing_subword_prefix {
                    buf.extend_from_slice(p.as_bytes());
                }
            }
            let mut utf8 = [0u8; 4];
            let c_bytes = c.encode_utf8(&mut utf8).as_bytes();
            buf.extend_from_slice(c_bytes);
            if i + 1 == n_chars {
                if let Some(s) = &o.end_of_word_suffix {
                    buf.extend_from_slice(s.as_bytes());
                }
            }
            if let Some(&id) = self.by_bytes.get(buf.as_slice()) {
                out.push(id);
                prev_unk = false;
            } else if let (true, Some(fallback)) = (o.byte_fallback, &self.byte_ids) {
                out.extend(c_bytes.iter().map(|&b| fallback[b as usize]));
                prev_unk = false;
            } else if let Some(unk) = o.unk {
                if !(o.fuse_unk && prev_unk) {
                    out.push(unk);
                }
                prev_unk = true;
            } else {
                return Err(Error::new(
                    ErrorKind::Encode,
                    format!("the character {c:?} is not in the vocabulary and the model has no unknown token or byte fallback"),
                ));
            }
        }
        Ok(())
    }

    /// BPE-dropout (Provilkov et al., 2020): like `encode`, but at every merge step each
    /// candidate merge is skipped with probability `p` (only the merges whose token spans
    /// whitespace when `superword_only`, for SuperBPE); when every candidate is skipped the
    /// chunk is done. Deterministic for a given `seed`.
    pub fn encode_dropout(&self, text: &str, allowed: impl Fn(u32) -> bool, p: f64, seed: u64, superword_only: bool) -> Result<Vec<u32>> {
        let mut rng = SplitMix64(seed);
        let mut out = Vec::new();
        let mut result = Ok(());
        let mut symbols = Vec::new();
        let mut scratch = DropoutScratch::default();
        let mut encode_chunk = |chunk: &str, out: &mut Vec<u32>, rng: &mut SplitMix64| -> Result<()> {
            symbols.clear();
            self.initial_symbols(chunk.as_bytes(), &mut symbols)?;
            self.merge_dropout(&mut symbols, p, rng, superword_only, &mut scratch);
            out.extend_from_slice(&symbols);
            Ok(())
        };
        self.specials.split(text, allowed, |piece| {
            if result.is_err() {
                return;
            }
            match piece {
                Piece::Special(id) => out.push(id),
                Piece::Text(t) => match &self.pretokenizer {
                    None => result = encode_chunk(t, &mut out, &mut rng),
                    Some(pre) => {
                        let r = pre.for_each_chunk(t, |chunk| {
                            if result.is_ok() {
                                result = encode_chunk(chunk, &mut out, &mut rng);
                            }
                        });
                        if result.is_ok() {
                            result = r;
                        }
                    }
                },
            }
        });
        result.map(|_| out)
    }

    /// BPE with dropout on one chunk (Provilkov et al., 2020). At each step every candidate
    /// merge is skipped with probability `p` (only those making a token that spans whitespace
    /// when `superword_only`), and the lowest-ranked one left, leftmost among equals, is merged;
    /// when all are skipped, the chunk is done. Chunks of up to `DROPOUT_SCAN_MAX` symbols are
    /// merged so, step by step; longer ones by `dropout_queued`, whose segmentations have the
    /// same distribution (a test compares them) but which draws from `rng` in another order.
    fn merge_dropout(&self, symbols: &mut Vec<u32>, p: f64, rng: &mut SplitMix64, superword_only: bool, scratch: &mut DropoutScratch) {
        if symbols.len() <= DROPOUT_SCAN_MAX {
            self.dropout_by_steps(symbols, p, rng, superword_only);
        } else {
            self.dropout_queued(symbols, p, rng, superword_only, scratch);
        }
    }

    /// `merge_dropout` step by step: every pair drawn at every step. Quadratic, but the fastest
    /// way for the short chunks of most text.
    fn dropout_by_steps(&self, symbols: &mut Vec<u32>, p: f64, rng: &mut SplitMix64, superword_only: bool) {
        loop {
            let mut best: Option<(u32, usize, u32)> = None;
            for i in 0..symbols.len().saturating_sub(1) {
                let Some(&(rank, new_id)) = self.merges.get(&(symbols[i], symbols[i + 1])) else { continue };
                let droppable = !superword_only || self.vocab[new_id as usize].as_deref().is_some_and(spans_whitespace);
                if droppable && rng.next_f64() < p {
                    continue;
                }
                if best.map_or(true, |b| rank < b.0) {
                    best = Some((rank, i, new_id));
                }
            }
            let Some((_, i, new_id)) = best else { return };
            symbols[i] = new_id;
            symbols.remove(i + 1);
        }
    }

    /// `merge_dropout` for long chunks. Taking the candidates in (rank, position) order and
    /// skipping each with probability `p` until one is kept gives the same merge as drawing
    /// them all (the first kept is the lowest one left), so the candidates wait in a heap, and
    /// those skipped go back in after the next merge, to be drawn again at the next step. Each
    /// step draws only until a merge is kept and never rescans the chunk: n log n in its
    /// length (the step-by-step way took 4.7 s for 32 KB of `a` with o200k).
    fn dropout_queued(&self, symbols: &mut Vec<u32>, p: f64, rng: &mut SplitMix64, superword_only: bool, scratch: &mut DropoutScratch) {
        let n = symbols.len();
        if n < 2 {
            return;
        }
        // Positions link to their neighbours still there; a merged-away position is `GONE`.
        let DropoutScratch { next, prev, heap, skipped } = scratch;
        next.clear();
        next.extend(1..=n);
        prev.clear();
        prev.extend((0..n).map(|i| i.wrapping_sub(1)));
        heap.clear();
        skipped.clear();
        let rank_at = |symbols: &[u32], next: &[usize], i: usize| -> Option<(u32, u32)> {
            let j = next[i];
            (j < n).then(|| self.merges.get(&(symbols[i], symbols[j])).copied()).flatten()
        };
        for i in 0..n - 1 {
            if let Some((rank, _)) = rank_at(symbols, next, i) {
                heap.push(Reverse((rank, i)));
            }
        }
        while let Some(Reverse((rank, i))) = heap.pop() {
            // Still this pair? An earlier merge may have consumed or changed it.
            if symbols[i] == GONE {
                continue;
            }
            let Some((r, new_id)) = rank_at(symbols, next, i) else { continue };
            if r != rank {
                continue;
            }
            let droppable = !superword_only || self.vocab[new_id as usize].as_deref().is_some_and(spans_whitespace);
            if droppable && rng.next_f64() < p {
                skipped.push(Reverse((rank, i)));
                continue;
            }
            let j = next[i];
            symbols[i] = new_id;
            symbols[j] = GONE;
            next[i] = next[j];
            if next[j] < n {
                prev[next[j]] = i;
            }
            if prev[i] < n {
                if let Some((rank, _)) = rank_at(symbols, next, prev[i]) {
                    heap.push(Reverse((rank, prev[i])));
                }
            }
            if let Some((rank, _)) = rank_at(symbols, next, i) {
                heap.push(Reverse((rank, i)));
            }
            // A new step: the candidates skipped in this one are drawn again.
            heap.extend(skipped.drain(..));
        }
        symbols.retain(|&s| s != GONE);
    }

    /// Repeatedly finds the adjacent pair with the lowest merge rank and merges it
    /// (the leftmost one among equals). Quadratic, but tight for short chunks.
    /// `bytes`: the chunk's bytes when `symbols` are still its byte ids (byte level), so the
    /// first ranks come from the dense byte-pair table instead of the large merge map.
    /// `memo`: this thread's memo of the merge table.
    fn merge_short(&self, symbols: &mut Vec<u32>, bytes: Option<&[u8]>, memo: &mut PairMemo) {
        // Arrays of the size that fits: filling them costs short lists more than the merging.
        match symbols.len() {
            0..=8 => self.merge_masked::<8>(symbols, bytes, memo),
            9..=32 => self.merge_masked::<32>(symbols, bytes, memo),
            33..=MASKED_SYMBOLS => self.merge_masked::<MASKED_SYMBOLS>(symbols, bytes, memo),
            _ => self.merge_shifting(symbols, bytes, memo),
        }
    }

    /// `merge_short` of at most `N` (up to 64) symbols, the way `merge_small` merges bytes:
    /// each symbol stays where it started and a bit says which positions still hold one, so a
    /// merge moves nothing (`merge_shifting` moves the symbols and ranks after it down by one,
    /// two `memmove` calls per merge). Ranks sit apart from the merged ids, so that the scan for
    /// the lowest reads only ranks.
    fn merge_masked<const N: usize>(&self, symbols: &mut Vec<u32>, bytes: Option<&[u8]>, memo: &mut PairMemo) {
        let n = symbols.len();
        assert!(n <= N && N <= 64, "merge_masked::<{N}> takes at most {N} symbols");
        if n < 2 {
            return;
        }
        let mut syms = [0u32; N];
        syms[..n].copy_from_slice(symbols);
        // ranks[p]: the rank of merging the symbol at p with the next one (u32::MAX: none, or
        // p holds no symbol); made[p]: the id that merge makes.
        let mut ranks = [NO_MERGE.0; N];
        let mut made = [0u32; N];
        for i in 0..n - 1 {
            (ranks[i], made[i]) = self.initial_pair(symbols, bytes, i, memo);
        }
        let mut alive: u64 = u64::MAX >> (64 - n);
        loop {
            // The lowest rank, the leftmost among equals (positions are in text order).
            let mut best = NO_MERGE.0;
            let mut at = usize::MAX;
            for (i, &rank) in ranks[..n - 1].iter().enumerate() {
                if rank < best {
                    best = rank;
                    at = i;
                }
            }
            if at == usize::MAX {
                break;
            }
            // Positions after `at` (at most n - 2 < 63, so the shift does not overflow).
            let later = !((2u64 << at) - 1);
            let next = (alive & later).trailing_zeros() as usize;
            syms[at] = made[at];
            ranks[next] = NO_MERGE.0;
            alive &= !(1 << next);
            let after = alive & later;
            (ranks[at], made[at]) = if after != 0 { memo.merge_of(self, syms[at], syms[after.trailing_zeros() as usize]) } else { NO_MERGE };
            let before = alive & ((1u64 << at) - 1);
            if before != 0 {
                let prev = 63 - before.leading_zeros() as usize;
                (ranks[prev], made[prev]) = memo.merge_of(self, syms[prev], syms[at]);
            }
        }
        symbols.clear();
        while alive != 0 {
            symbols.push(syms[alive.trailing_zeros() as usize]);
            alive &= alive - 1;
        }
    }

    /// `merge_short` for any number of symbols: each merge shifts the rest down by one.
    fn merge_shifting(&self, symbols: &mut Vec<u32>, bytes: Option<&[u8]>, memo: &mut PairMemo) {
        // ranks[i]: (rank, new id) of merging symbols i and i+1. After a merge only the two
        // neighbouring entries change, so each merge costs two lookups and one linear scan.
        // On the stack up to `STACK_PAIRS` pairs (most chunks), on the heap beyond.
        let mut pairs = symbols.len().saturating_sub(1);
        let mut on_stack = [NO_MERGE; STACK_PAIRS];
        let mut on_heap = Vec::new();
        let ranks: &mut [(u32, u32)] = if pairs <= STACK_PAIRS {
            &mut on_stack
        } else {
            on_heap.resize(pairs, NO_MERGE);
            &mut on_heap
        };
        for (i, rank) in ranks[..pairs].iter_mut().enumerate() {
            *rank = self.initial_pair(symbols, bytes, i, memo);
        }
        loop {
            let mut best = NO_MERGE.0;
            let mut at = usize::MAX;
            for (i, &(rank, _)) in ranks[..pairs].iter().enumerate() {
                if rank < best {
                    best = rank;
                    at = i;
                }
            }
            if at == usize::MAX {
                return;
            }
            symbols[at] = ranks[at].1;
            symbols.remove(at + 1);
            ranks.copy_within(at + 1..pairs, at);
            pairs -= 1;
            if at > 0 {
                ranks[at - 1] = memo.merge_of(self, symbols[at - 1], symbols[at]);
            }
            if at < pairs {
                ranks[at] = memo.merge_of(self, symbols[at], symbols[at + 1]);
            }
        }
    }

    /// `merge_short` of a byte-level chunk of at most `SMALL_CHUNK` bytes, appending the ids to
    /// `out`. Nothing moves: each symbol stays at the position of its first byte, and a bit set
    /// says which positions still start a symbol. Merging the pair at `at` folds the next
    /// symbol into the one at `at` and clears that symbol's bit; the neighbours are found with
    /// a count of zero bits. (Shifting the arrays down by one on every merge, even branch-free,
    /// was a third of this function's instructions; memmove calls cost more still.)
    fn merge_small(&self, bytes: &[u8], out: &mut Vec<u32>, memo: &mut PairMemo) {
        let n = bytes.len();
        assert!(n <= SMALL_CHUNK, "merge_small takes at most {SMALL_CHUNK} bytes");
        let ids = self.byte_ids.as_ref().expect("byte level has byte ids");
        // syms[p]: the symbol starting at byte p (if bit p of `alive` is set); ranks[p]: its merge
        // with the next symbol (NO_MERGE when it is the last or gone).
        let mut syms = [0u32; SMALL_CHUNK];
        let mut ranks = [NO_MERGE; SMALL_CHUNK];
        for (i, &b) in bytes.iter().enumerate() {
            syms[i] = ids[b as usize];
        }
        for i in 1..n {
            ranks[i - 1] = self.byte_pair(bytes[i - 1], bytes[i]);
        }
        let mut alive: u32 = (1 << n) - 1;
        loop {
            // The lowest rank, the leftmost among equals (positions are in text order).
            let mut best = NO_MERGE.0;
            let mut at = usize::MAX;
            for (i, &(rank, _)) in ranks[..n.saturating_sub(1)].iter().enumerate() {
                if rank < best {
                    best = rank;
                    at = i;
                }
            }
            if at == usize::MAX {
                break;
            }
            // The symbol after `at` (it exists: `at` has a merge) joins it.
            let next = (alive & !((2u32 << at) - 1)).trailing_zeros() as usize;
            syms[at] = ranks[at].1;
            ranks[next] = NO_MERGE;
            alive &= !(1 << next);
            let after = alive & !((2u32 << at) - 1);
            ranks[at] = if after != 0 { memo.merge_of(self, syms[at], syms[after.trailing_zeros() as usize]) } else { NO_MERGE };
            let before = alive & ((1u32 << at) - 1);
            if before != 0 {
                let prev = 31 - before.leading_zeros() as usize;
                ranks[prev] = memo.merge_of(self, syms[prev], syms[at]);
            }
        }
        out.reserve(n);
        while alive != 0 {
            out.push(syms[alive.trailing_zeros() as usize]);
            alive &= alive - 1;
        }
    }

    /// (rank, merged id) of symbols i and i+1 before any merge: from the dense byte-pair table
    /// when `bytes` are the chunk's bytes at byte level, else through the memo.
    #[inline]
    fn initial_pair(&self, symbols: &[u32], bytes: Option<&[u8]>, i: usize, memo: &mut PairMemo) -> (u32, u32) {
        match bytes {
            Some(b) if !self.byte_pairs.is_empty() => self.byte_pair(b[i], b[i + 1]),
            _ => memo.merge_of(self, symbols[i], symbols[i + 1]),
        }
    }

    /// (rank, merged id) of two single bytes at byte level, from the dense byte-pair table.
    #[inline(always)]
    fn byte_pair(&self, left: u8, right: u8) -> (u32, u32) {
        self.byte_pairs[(left as usize) << 8 | right as usize]
    }

    /// False if the pair surely has no merge (by `pair_filter`); true if it may have one.
    #[inline(always)]
    fn may_merge(&self, pair: (u32, u32)) -> bool {
        let (word, bits) = pair_filter_bits(pair);
        self.pair_filter[word] & bits == bits
    }

    /// (rank, merged id) of a pair, or `NO_MERGE`.
    #[inline]
    fn merge_of(&self, left: u32, right: u32) -> (u32, u32) {
        match &self.packed {
            Some(packed) => packed.get(left, right),
            None => self.merges.get(&(left, right)).copied().unwrap_or(NO_MERGE),
        }
    }

    /// The same merge order as `merge_short` (lowest rank first, leftmost first among equals),
    /// in near-linear time for long chunks: `merge_run` for one symbol repeated, `merge_queued`
    /// for the rest.
    fn merge_long(&self, initial: &[u32], bytes: Option<&[u8]>, out: &mut Vec<u32>, memo: &mut PairMemo) {
        if initial.len() <= HEAP_CHUNK {
            return self.merge_heap(initial, bytes, out, memo);
        }
        if let Some((start, end)) = long_run(initial) {
            self.merge_run(&initial[..start], initial[start], end - start, &initial[end..], out, memo);
            return;
        }
        self.merge_queued(initial, bytes, out, memo);
    }

    /// BPE of `head` ++ `sym` x `k` ++ `tail`, appended to `out`, for a chunk that is one symbol
    /// repeated, give or take a few (1 MB of `a`, of spaces, of `^`). The repeated part is never
    /// spelled out: it stays one symbol and a count, so a megabyte merges in a few hundred steps,
    /// not a million.
    ///
    /// Each step does what `merge_short` does, the lowest-ranked pair first and the leftmost among
    /// equals, where the candidates are the pairs of the head, the pair across the head and the
    /// run, the run's own pair (t, t), the pair across the run and the tail, and the tail's pairs.
    /// When (t, t) is chosen, BPE merges the run's pairs one after the other from its left end;
    /// if no pair that sweep creates ranks at or below (t, t), nothing else can come between
    /// those merges, and the run becomes (tt) x k/2 (and a t that joins the tail when k is odd)
    /// in one step. Otherwise, or once the run is short, the state (an exact intermediate state of
    /// BPE) is spelled out and merged by the general path. Returns the length of that state (for
    /// tests: it is short unless the fast steps stopped early).
    fn merge_run(&self, head: &[u32], sym: u32, k: usize, tail: &[u32], out: &mut Vec<u32>, memo: &mut PairMemo) -> usize {
        let (mut head, mut t, mut k, mut tail) = (head.to_vec(), sym, k, std::collections::VecDeque::from(tail.to_vec()));
        loop {
            // Copies of t next to the run belong to it (so that no pair beside it is (t, t)).
            while head.last() == Some(&t) {
                head.pop();
                k += 1;
            }
            while tail.front() == Some(&t) {
                tail.pop_front();
                k += 1;
            }
            if k < 4 || head.len() + tail.len() > 2 * RUN_SIDES {
                break;
            }
            // The lowest-ranked candidate, the leftmost among equals (strict < in left-to-right order).
            #[derive(Clone, Copy)]
            enum At {
                Head(usize),
                IntoRun,
                Run,
                OutOfRun,
                Tail(usize),
            }
            let mut best: Option<(u32, u32, At)> = None;
            let mut consider = |pair: (u32, u32), at: At| {
                if pair.0 != NO_MERGE.0 && best.map_or(true, |b| pair.0 < b.0) {
                    best = Some((pair.0, pair.1, at));
                }
            };
            for i in 0..head.len().saturating_sub(1) {
                consider(memo.merge_of(self, head[i], head[i + 1]), At::Head(i));
            }
            if let Some(&h) = head.last() {
                consider(memo.merge_of(self, h, t), At::IntoRun);
            }
            consider(memo.merge_of(self, t, t), At::Run);
            if let Some(&f) = tail.front() {
                consider(memo.merge_of(self, t, f), At::OutOfRun);
            }
            for i in 0..tail.len().saturating_sub(1) {
                consider(memo.merge_of(self, tail[i], tail[i + 1]), At::Tail(i));
            }
            let Some((rank, id, at)) = best else { break };
            match at {
                At::Head(i) => {
                    head[i] = id;
                    head.remove(i + 1);
                }
                At::IntoRun => {
                    *head.last_mut().unwrap() = id;
                    k -= 1;
                }
                At::OutOfRun => {
                    tail[0] = id;
                    k -= 1;
                }
                At::Tail(i) => {
                    tail[i] = id;
                    tail.remove(i + 1);
                }
                At::Run => {
                    // The pairs the sweep creates before its last merge: (tt, t) ahead of the
                    // next merge, (tt, tt) behind it (for k of 4 or 5 only at the last merge:
                    // checking it then only hands a few more cases over), (h, tt) at the head.
                    // What the last merge creates, the next step weighs as BPE would.
                    let tt = id;
                    let mut created = vec![(tt, t), (tt, tt)];
                    created.extend(head.last().map(|&h| (h, tt)));
                    if created.iter().any(|&(l, r)| memo.merge_of(self, l, r).0 <= rank) {
                        break;
                    }
                    if k % 2 == 1 {
                        tail.push_front(t);
                    }
                    t = tt;
                    k /= 2;
                }
            }
        }
        let mut state = head;
        state.extend(std::iter::repeat(t).take(k));
        state.extend(tail);
        let spelled = state.len();
        if spelled <= SHORT_CHUNK {
            self.merge_short(&mut state, None, memo);
            out.extend_from_slice(&state);
        } else {
            self.merge_queued(&state, None, out, memo);
        }
        spelled
    }

    /// BPE of a chunk of `SHORT_CHUNK` to `HEAP_CHUNK` symbols (runs of Japanese or Chinese
    /// text, long words): every pair goes into one min-heap as (rank, position), and so does
    /// each pair a merge makes. The lowest entry still true of its position (the pair there
    /// may have been merged or changed since) is the lowest-ranked pair, the leftmost among
    /// equals: BPE's next merge. Two allocations per chunk, where `merge_queued`'s buckets make
    /// one per rank (a few hundred in such a chunk), and its map of ranks costs a lookup per add.
    fn merge_heap(&self, initial: &[u32], bytes: Option<&[u8]>, out: &mut Vec<u32>, memo: &mut PairMemo) {
        debug_assert!(initial.len() <= HEAP_CHUNK);
        let n = initial.len() as u32;
        let mut nodes = Node::list(initial);
        // (rank << 32 | position): ascending order is BPE's order.
        let mut heap: BinaryHeap<Reverse<u64>> = (0..initial.len().saturating_sub(1))
            .filter_map(|i| {
                let rank = self.initial_pair(initial, bytes, i, memo).0;
                (rank != NO_MERGE.0).then_some(Reverse((rank as u64) << 32 | i as u64))
            })
            .collect();
        while let Some(Reverse(entry)) = heap.pop() {
            let (rank, i) = ((entry >> 32) as u32, entry as u32);
            let Node { sym, prev, next: j } = nodes[i as usize];
            if sym == GONE || j >= n {
                continue;
            }
            let Node { sym: right, next: after, .. } = nodes[j as usize];
            let (r, new_id) = memo.merge_of(self, sym, right);
            if r != rank {
                continue; // the pair there changed since this entry was made
            }
            nodes[i as usize] = Node { sym: new_id, prev, next: after };
            nodes[j as usize].sym = GONE;
            if after < n {
                nodes[after as usize].prev = i;
                let r = memo.merge_of(self, new_id, nodes[after as usize].sym).0;
                if r != NO_MERGE.0 {
                    heap.push(Reverse((r as u64) << 32 | i as u64));
                }
            }
            if prev < n {
                let r = memo.merge_of(self, nodes[prev as usize].sym, new_id).0;
                if r != NO_MERGE.0 {
                    heap.push(Reverse((r as u64) << 32 | prev as u64));
                }
            }
        }
        Node::push_symbols(&nodes, out);
    }

    /// The same merge order as `merge_short` (lowest rank first, leftmost first among equals),
    /// in near-linear time for any long chunk (1 MB of Chinese, of random letters...).
    ///
    /// Candidate pairs are kept in buckets by rank, and ranks in a min-heap. Merging a rank-r pair
    /// only creates pairs of other ranks, so all rank-r pairs can be merged in one left-to-right
    /// sweep of its bucket; the heap is touched once per distinct rank, not once per merge. If
    /// a merge creates a pair ranked below r (vocabularies need not forbid it), the sweep pauses
    /// so the lower rank goes first, exactly as a per-merge priority queue would order it.
    ///
    /// `bytes`: as for `merge_short` (the first ranks from the dense byte-pair table: on 1 MB of
    /// Chinese that saves a million probes of the large merge map).
    fn merge_queued(&self, initial: &[u32], bytes: Option<&[u8]>, out: &mut Vec<u32>, memo: &mut PairMemo) {
        // Positions are u32 (chunks of 4 GiB and more are not a use case; they are cut below):
        // half the memory of usize for the links and buckets, which is what this loop touches.
        if initial.len() >= u32::MAX as usize {
            let half = initial.len() / 2;
            self.merge_queued(&initial[..half], bytes.map(|b| &b[..half]), out, memo);
            return self.merge_queued(&initial[half..], bytes.map(|b| &b[half..]), out, memo);
        }
        let n = initial.len() as u32;
        let mut nodes = Node::list(initial);
        let mut queue = RankBuckets::new();
        for i in 0..n as usize - 1 {
            let rank = self.initial_pair(initial, bytes, i, memo).0;
            if rank != NO_MERGE.0 {
                queue.add(rank, i as u32);
            }
        }
        // Pairs made during a sweep that rank at most the sweep's own: they go first, lowest
        // rank and then leftmost first (see below).
        let mut made: BinaryHeap<Reverse<(u32, u32)>> = BinaryHeap::new();
        while let Some((rank, mut positions)) = queue.pop() {
            positions.sort_unstable();
            positions.dedup();
            let mut k = 0;
            loop {
                // A merge makes pairs only at its own position and its left neighbour's, both at
                // or before the sweep's last position, and every pair ranked below the sweep's
                // was merged before it began: so the pairs in `made` are the lowest-ranked of
                // the chunk, and the leftmost among its equals. They are merged here, before the
                // sweep goes on, and the sweep's positions are never queued again (doing that on
                // every merge that made a lower pair was quadratic in the run's length).
                let (i, expected) = if let Some(Reverse((r, p))) = made.pop() {
                    (p, r)
                } else if k < positions.len() {
                    // A rank's positions lie far apart in a long chunk: each visit would wait
                    // for its node. Asking for the node a few positions ahead overlaps those
                    // waits.
                    if let Some(&ahead) = positions.get(k + 8) {
                        crate::prefetch(&nodes[ahead as usize]);
                    }
                    k += 1;
                    (positions[k - 1], rank)
                } else {
                    break;
                };
                // Still this pair? Earlier merges may have consumed or changed it.
                let node = nodes[i as usize];
                if node.sym == GONE || node.next >= n {
                    continue;
                }
                let j = node.next;
                let right = nodes[j as usize];
                let (r, new_id) = memo.merge_of(self, node.sym, right.sym);
                if r != expected {
                    continue;
                }
                nodes[i as usize].sym = new_id;
                nodes[j as usize].sym = GONE;
                nodes[i as usize].next = right.next;
                if right.next < n {
                    nodes[right.next as usize].prev = i;
                }
                let mut add = |r: u32, at: u32| {
                    if r <= rank {
                        made.push(Reverse((r, at)));
                    } else if r != NO_MERGE.0 {
                        queue.add(r, at);
                    }
                };
                let p = node.prev;
                if p < n {  // u32::MAX: no previous symbol
                    add(memo.merge_of(self, nodes[p as usize].sym, new_id).0, p);
                }
                let q = right.next;
                if q < n {
                    add(memo.merge_of(self, new_id, nodes[q as usize].sym).0, i);
                }
            }
        }
        Node::push_symbols(&nodes, out);
    }

    /// Joins the bytes of `ids`; special tokens decode to their strings.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.token_bytes(id)?);
        }
        Ok(out)
    }

    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        if let Some(Some(b)) = self.vocab.get(id as usize) {
            return Ok(b);
        }
        if let Some((s, _)) = self.specials.tokens().iter().find(|(_, i)| *i == id) {
            return Ok(s.as_bytes());
        }
        Err(Error::new(
            ErrorKind::Decode,
            format!("id {id} is not in the vocabulary (ids run from 0 to {}); check that the ids come from this tokenizer", self.vocab.len().saturating_sub(1)),
        ))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn pack_short_is_the_bytes_and_length() {
        // The word-wise packing must equal the plain byte-by-byte layout, for every length.
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let n = (state >> 60) as usize;
            let bytes: Vec<u8> = (0..n).map(|i| (state >> (i % 8 * 8)) as u8 ^ i as u8).collect();
            let mut buf = [0u8; 16];
            buf[..n].copy_from_slice(&bytes);
            buf[15] = n as u8;
            assert_eq!(pack_short(&bytes), Some(u128::from_le_bytes(buf)), "{bytes:?}");
        }
        assert_eq!(pack_short(&[7u8; 16]), None);
    }

    use super::*;

    #[test]
    fn pack_short_within_a_text_is_pack_short() {
        let text: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        for at in 0..text.len() {
            for n in 1..=(text.len() - at).min(20) {
                assert_eq!(pack_short_within(&text, at, n), pack_short(&text[at..at + n]), "at {at}, n {n}");
            }
        }
    }
    use crate::pretokenize::GPT2_PATTERN;
    use crate::lcg;

    /// Bytes 0..=255 as ids 0..=255, plus merges given as byte strings.
    fn model(merges: &[(&str, &str)], specials: Vec<(String, u32)>) -> BpeModel {
        let mut tokens: Vec<(u32, Vec<u8>)> = (0..=255u8).map(|b| (b as u32, vec![b])).collect();
        let mut ids: FxHashMap<Vec<u8>, u32> = tokens.iter().map(|(i, b)| (b.clone(), *i)).collect();
        let mut pairs = Vec::new();
        for (l, r) in merges {
            let id = tokens.len() as u32;
            let joined = [l.as_bytes(), r.as_bytes()].concat();
            pairs.push((ids[l.as_bytes()], ids[r.as_bytes()]));
            ids.insert(joined.clone(), id);
            tokens.push((id, joined));
        }
        BpeModel::new(tokens, &pairs, Some(GPT2_PATTERN), specials, BpeOptions::default()).unwrap()
    }

    /// `encode_until` says a text fits exactly when its encoding has at most `limit` ids, and a
    /// chunk longer than `limit` of the longest tokens is not merged at all (one long chunk over
    /// a small limit costs a scan, not a merge of the whole chunk).
    #[test]
    fn encode_until_agrees_with_encode_and_skips_chunks_too_long_to_fit() {
        let m = model(&[("a", "b"), ("ab", "ab"), ("abab", "abab"), (" ", "c")], vec![("<s>".to_string(), 300)]);
        assert_eq!(m.longest_token, 8);
        let mut rand = lcg(7);
        for _ in 0..400 {
            let text: String = (0..rand(60)).map(|_| ["a", "b", " ", "c", "<s>", "x"][rand(6) as usize]).collect();
            let full = m.encode(&text, |_| true).unwrap().len();
            for limit in [0, 1, 2, 3, 5, 8, 13, 21, 60] {
                let mut out = Vec::new();
                assert_eq!(m.encode_until(&text, |_| true, limit, &mut out).unwrap(), full <= limit, "{text:?} {limit}");
            }
        }
        // 80 KB of "ab" in one chunk needs at least 10,000 tokens: over 100 at once, nothing merged.
        let mut out = Vec::new();
        assert!(!m.encode_until(&"ab".repeat(40_000), |_| true, 100, &mut out).unwrap());
        assert!(out.is_empty());
        assert!(m.encode_until(&"ab".repeat(40_000), |_| true, 10_000, &mut out).unwrap());
    }

    /// `MergesModelBuilder`, fed its merges in pieces, gives the model `BpeModel::new` gives
    /// from the same tokens and merges: every table, with ids shifted or not, special tokens
    /// first or last; and both refuse a vocabulary where two merges make the same bytes.
    #[test]
    fn merges_model_builder_is_bpe_model_new() {
        let mut rand = lcg(99);
        let mut merges: Vec<(u32, u32)> = Vec::new();
        let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let mut seen: std::collections::HashSet<Vec<u8>> = bytes.iter().cloned().collect();
        while merges.len() < 3000 {
            let n = bytes.len() as u64;
            let (l, r) = (rand(n) as u32, rand(n) as u32);
            let joined = [bytes[l as usize].as_slice(), bytes[r as usize].as_slice()].concat();
            if joined.len() <= 24 && seen.insert(joined.clone()) && !merges.contains(&(l, r)) {
                merges.push((l, r));
                bytes.push(joined);
            }
        }
        let n = bytes.len() as u32;
        for (offset, specials) in [(0, vec![]), (2, vec![("<a>".to_string(), 0), ("<b>".to_string(), 1)]), (0, vec![("<end>".to_string(), n)])] {
            let tokens = bytes.iter().enumerate().map(|(i, b)| (i as u32 + offset, b.clone())).collect();
            let shifted: Vec<(u32, u32)> = merges.iter().map(|&(l, r)| (l + offset, r + offset)).collect();
            let expected = BpeModel::new(tokens, &shifted, Some(GPT2_PATTERN), specials.clone(), BpeOptions::default()).unwrap();
            let mut builder = MergesModelBuilder::new();
            let mut at = 0;
            while at < merges.len() {
                let end = (at + 1 + rand(300) as usize).min(merges.len());
                builder.extend(&merges[at..end]).unwrap();
                at = end;
            }
            let got = builder.finish(offset, Some(GPT2_PATTERN), specials).unwrap();
            assert_eq!(got.vocab, expected.vocab);
            assert_eq!(got.by_bytes, expected.by_bytes);
            assert_eq!(got.short_tokens, expected.short_tokens);
            assert_eq!(got.byte_ids, expected.byte_ids);
            assert_eq!(got.merges, expected.merges);
            assert_eq!(got.byte_pairs, expected.byte_pairs);
            assert_eq!(got.pair_filter, expected.pair_filter);
            assert_eq!(got.merging_suffices_upto, expected.merging_suffices_upto);
            let text = "hello <a> world <end> 123 ünïcödé <b>";
            let all = |_: u32| true;
            assert_eq!(got.encode(text, all).unwrap(), expected.encode(text, all).unwrap());
        }
        // "ab" made twice: by a + b, then by a + b again through another pair of ids.
        let twice = [(97, 98), (256, 99), (98, 99), (97, 258)];
        let mut builder = MergesModelBuilder::new();
        builder.extend(&twice).unwrap();
        let tokens: Vec<(u32, Vec<u8>)> = (0..=255u8).map(|b| (b as u32, vec![b])).chain([(256, b"ab".to_vec()), (257, b"abc".to_vec()), (258, b"bc".to_vec()), (259, b"abc".to_vec())]).collect();
        let a = builder.finish(0, None, vec![]).err().expect("a repeated token is refused");
        let b = BpeModel::new(tokens, &twice, None, vec![], BpeOptions::default()).err().expect("a repeated token is refused");
        assert_eq!(a.to_string(), b.to_string());
    }

    #[test]
    fn applies_lowest_rank_first() {
        // "bc" is learned before "ab", so "abc" becomes a + bc, not ab + c.
        let m = model(&[("b", "c"), ("a", "b")], vec![]);
        assert_eq!(m.encode_ordinary("abc").unwrap(), vec![b'a' as u32, 256]);
    }

    #[test]
    fn long_and_short_paths_agree() {
        let m = model(&[("a", "a"), ("aa", "aa"), ("a", "b"), ("ab", "a"), ("aaaa", "ab")], vec![]);
        let mut seed = 12345u64;
        for len in [2usize, 10, 49, 60, 200, 1000] {
            for _ in 0..20 {
                let s: Vec<u8> = (0..len)
                    .map(|_| {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        if (seed >> 33) % 3 == 0 { b'b' } else { b'a' }
                    })
                    .collect();
                let ids: Vec<u32> = s.iter().map(|&b| b as u32).collect();
                let mut short = ids.clone();
                m.merge_short(&mut short, None, &mut PairMemo::new(4));
                let mut long = Vec::new();
                m.merge_long(&ids, None, &mut long, &mut PairMemo::new(4));
                assert_eq!(short, long, "input {:?}", String::from_utf8_lossy(&s));
            }
        }
    }

    /// The 256 bytes and random strings of 2 to 6 letters over {a, b, c}, `count` tokens in all.
    fn abc_tokens(rand: &mut impl FnMut(u64) -> u64, count: usize) -> Vec<Vec<u8>> {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        while tokens.len() < count {
            let len = 2 + rand(5) as usize;
            let t: Vec<u8> = (0..len).map(|_| b"abc"[rand(3) as usize]).collect();
            if !tokens.contains(&t) {
                tokens.push(t);
            }
        }
        tokens
    }

    #[test]
    fn heap_and_queue_paths_match_the_short_path() {
        // `merge_heap` and `merge_queued` each against the plain scan, on random vocabularies
        // (tiktoken-style shuffled ranks, and Hugging Face-style merge lists in order and
        // shuffled) and chunks of 2 to `HEAP_CHUNK` symbols, given as bytes too (the first
        // pairs then come from the byte-pair table).
        let mut rand = lcg(2024);
        for round in 0..24 {
            let m = match round % 3 {
                0 => {
                    let tokens = abc_tokens(&mut rand, 320);
                    shuffled_ranks_model(tokens, &mut rand)
                }
                1 => random_merges_model(&mut rand, false),
                _ => random_merges_model(&mut rand, true),
            };
            for _ in 0..25 {
                let len = 2 + rand(HEAP_CHUNK as u64 - 1) as usize;
                let bytes: Vec<u8> = (0..len).map(|_| b"abc"[rand(3) as usize]).collect();
                let ids: Vec<u32> = bytes.iter().map(|&b| b as u32).collect();
                let mut short = ids.clone();
                m.merge_short(&mut short, None, &mut PairMemo::new(4));
                for given in [None, Some(&bytes[..])] {
                    let (mut heap, mut queued) = (Vec::new(), Vec::new());
                    m.merge_heap(&ids, given, &mut heap, &mut PairMemo::new(4));
                    m.merge_queued(&ids, given, &mut queued, &mut PairMemo::new(4));
                    assert_eq!(heap, short, "heap, round {round}, {len} symbols");
                    assert_eq!(queued, short, "queue, round {round}, {len} symbols");
                }
            }
        }
    }

    #[test]
    fn long_path_matches_short_path_on_random_rank_tables() {
        // Random tiktoken-style vocabularies over {a, b, c}: ranks need not grow with length, so
        // merges can create pairs ranked below the current one.
        let mut rand = lcg(99);
        for _ in 0..30 {
            let tokens = abc_tokens(&mut rand, 300);
            let m = shuffled_ranks_model(tokens, &mut rand);
            for _ in 0..20 {
                let len = 49 + rand(300) as usize;
                let ids: Vec<u32> = (0..len).map(|_| b"abc"[rand(3) as usize] as u32).collect();
                let mut short = ids.clone();
                m.merge_short(&mut short, None, &mut PairMemo::new(4));
                let mut long = Vec::new();
                m.merge_long(&ids, None, &mut long, &mut PairMemo::new(4));
                assert_eq!(short, long);
            }
        }
    }

    #[test]
    fn run_path_matches_queue_path_on_random_rank_tables() {
        // Chunks of a long run of one byte with a few others on each side, on random
        // vocabularies: tiktoken-style ones rich in runs, ranks in order of length or shuffled,
        // and Hugging Face-style merge lists, in order or shuffled. Shuffled, sweeps can create
        // pairs ranked below the run's own pair and the run path must hand over to the general
        // one.
        let mut rand = lcg(7);
        let mut fast = 0;
        for round in 0..32 {
            let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
            for len in 2..=12 {
                if rand(3) > 0 {
                    tokens.push(vec![b'a'; len]);
                }
            }
            // And tokens that join the run to its sides ("baa", "aaab").
            for len in 1..=8 {
                for (before, after) in [(&b"b"[..], &b""[..]), (b"", b"b")] {
                    if rand(2) > 0 {
                        tokens.push([before, &vec![b'a'; len], after].concat());
                    }
                }
            }
            while tokens.len() < 300 {
                let len = 2 + rand(5) as usize;
                let t: Vec<u8> = (0..len).map(|_| b"aab"[rand(3) as usize]).collect();
                if !tokens.contains(&t) {
                    tokens.push(t);
                }
            }
            let m = match round % 4 {
                0 => {
                    // Ranks in order of length: the sweeps go through.
                    tokens[256..].sort_by_key(|t| t.len());
                    let list = tokens.into_iter().enumerate().map(|(i, t)| (i as u32, t)).collect();
                    BpeModel::from_ranks(list, None, vec![]).unwrap()
                }
                1 => random_merges_model(&mut rand, false),
                2 => random_merges_model(&mut rand, true),
                _ => shuffled_ranks_model(tokens, &mut rand),
            };
            for _ in 0..10 {
                let side = |rand: &mut dyn FnMut(u64) -> u64| -> Vec<u32> {
                    let n = rand(RUN_SIDES as u64 + 1) as usize;
                    (0..n).map(|_| b"ab"[rand(2) as usize] as u32).collect()
                };
                let head = side(&mut rand);
                let tail = side(&mut rand);
                let k = MIN_RUN + rand(1000) as usize;
                let mut ids = head.clone();
                ids.extend(std::iter::repeat(b'a' as u32).take(k));
                ids.extend(&tail);
                assert!(long_run(&ids).is_some());
                let mut queued = Vec::new();
                m.merge_queued(&ids, None, &mut queued, &mut PairMemo::new(4));
                let mut run = Vec::new();
                m.merge_long(&ids, None, &mut run, &mut PairMemo::new(4));
                assert_eq!(run, queued, "head {head:?}, {k} x a, tail {tail:?}");
                let (start, end) = long_run(&ids).unwrap();
                let spelled = m.merge_run(&ids[..start], ids[start], end - start, &ids[end..], &mut Vec::new(), &mut PairMemo::new(4));
                fast += (spelled < 500) as usize;
            }
        }
        // The fast steps do run (the check above would pass if they always handed over at once).
        assert!(fast >= 50, "the run path finished in fast steps only {fast} times of 320");
    }

    /// A Hugging Face-style model over {a, b}: 60 merges of random pairs of the tokens made so
    /// far (some making the same token from different pairs), in the order they were made or
    /// shuffled.
    fn random_merges_model(rand: &mut impl FnMut(u64) -> u64, shuffle: bool) -> BpeModel {
        let mut tokens: Vec<(u32, Vec<u8>)> = (0..=255u8).map(|b| (b as u32, vec![b])).collect();
        let id_of = |tokens: &[(u32, Vec<u8>)], t: &[u8]| tokens.iter().position(|(_, b)| b == t).unwrap() as u32;
        let mut made: Vec<Vec<u8>> = vec![b"a".to_vec(), b"b".to_vec()];
        let mut pairs = Vec::new();
        while pairs.len() < 60 {
            let l = made[rand(made.len() as u64) as usize].clone();
            let r = made[rand(made.len() as u64) as usize].clone();
            let joined = [l.as_slice(), r.as_slice()].concat();
            let pair = (id_of(&tokens, &l), id_of(&tokens, &r));
            if joined.len() > 12 || pairs.contains(&pair) {
                continue;
            }
            if !made.contains(&joined) {
                made.push(joined.clone());
                tokens.push((tokens.len() as u32, joined));
            }
            pairs.push(pair);
        }
        if shuffle {
            for i in (1..pairs.len()).rev() {
                pairs.swap(i, rand(i as u64 + 1) as usize);
            }
        }
        BpeModel::new(tokens, &pairs, None, vec![], BpeOptions::default()).unwrap()
    }

    #[test]
    fn masked_merging_matches_shifting() {
        // merge_short merges up to 64 symbols in place under a bit mask, longer lists by
        // shifting: both on the same lists of every length around the array sizes (32, 64), from
        // bytes (the dense byte-pair table) and from ids (through the memo).
        let mut rand = lcg(33);
        for round in 0..40 {
            let m = random_merges_model(&mut rand, round % 2 == 1);
            for n in (0..=66).chain([100, 127]) {
                let bytes: Vec<u8> = (0..n).map(|_| if rand(3) == 0 { b'b' } else { b'a' }).collect();
                let ids: Vec<u32> = bytes.iter().map(|&b| b as u32).collect();
                let mut shifting = ids.clone();
                m.merge_shifting(&mut shifting, None, &mut PairMemo::new(4));
                for with_bytes in [None, Some(bytes.as_slice())] {
                    let mut short = ids.clone();
                    m.merge_short(&mut short, with_bytes, &mut PairMemo::new(4));
                    assert_eq!(short, shifting, "{n} symbols, bytes given: {}", with_bytes.is_some());
                }
                if n <= 64 {
                    let mut masked = ids.clone();
                    m.merge_masked::<64>(&mut masked, None, &mut PairMemo::new(4));
                    assert_eq!(masked, shifting, "{n} symbols in arrays of 64");
                }
            }
        }
    }

    #[test]
    fn queue_path_stays_fast_when_every_merge_makes_a_lower_pair() {
        // "aaa" ranks before "aa": in a run of a, each merge of (a, a) makes (aa, a), which
        // ranks lower and must merge before the sweep of (a, a) goes on. The queue path used to
        // queue the rest of the sweep again at each of those merges: quadratic in the run (2^18
        // took minutes). Its result is checked against `merge_short` on shorter runs, with
        // other symbols around, and a run of 2^18 must take well under the time a quadratic
        // path needs (seconds against minutes: a generous bound, not a speed target).
        let mut tokens: Vec<(u32, Vec<u8>)> = (0..=255u8).map(|b| (b as u32, vec![b])).collect();
        for t in ["aaa", "aa", "ba", "aab", "aaab"] {
            tokens.push((tokens.len() as u32, t.as_bytes().to_vec()));
        }
        let m = BpeModel::from_ranks(tokens, None, vec![]).unwrap();
        let mut rand = lcg(5);
        for _ in 0..50 {
            let mut ids: Vec<u32> = vec![b'a' as u32; 1 + rand(3000) as usize];
            for _ in 0..rand(20) {
                let at = rand(ids.len() as u64) as usize;
                ids[at] = b'b' as u32;
            }
            let mut queued = Vec::new();
            m.merge_queued(&ids, None, &mut queued, &mut PairMemo::new(4));
            let mut shifting = ids.clone(); // merge_short: one merge at a time, shifting the rest
            m.merge_short(&mut shifting, None, &mut PairMemo::new(4));
            assert_eq!(queued, shifting);
        }
        let run = vec![b'a' as u32; 1 << 18];
        let start = std::time::Instant::now();
        let mut queued = Vec::new();
        m.merge_queued(&run, None, &mut queued, &mut PairMemo::new(4));
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "{:?} for a run of 2^18", start.elapsed());
        let aaa = m.whole_token(b"aaa").unwrap();
        assert!(queued.iter().filter(|&&t| t == aaa).count() > (1 << 18) / 4, "mostly aaa");
    }

    #[test]
    fn dropout_queue_has_the_distribution_of_dropout_by_steps() {
        // Both on the same chunks, 100,000 seeds each: the segmentations' frequencies must agree
        // (total variation distance under 0.02; the largest seen is 0.009, and it falls with
        // more seeds as sampling noise does; skipped candidates never drawn again give 0.16
        // to 0.46). With p = 0, plain BPE; with p = 1, the bytes.
        let mut rand = lcg(21);
        let mut compared = 0;
        for round in 0..6 {
            let m = random_merges_model(&mut rand, round % 2 == 1);
            let bytes: Vec<u8> = (0..6 + rand(5)).map(|_| if rand(2) == 0 { b'a' } else { b'b' }).collect();
            let ids: Vec<u32> = bytes.iter().map(|&b| b as u32).collect();
            let mut plain = ids.clone();
            m.merge_short(&mut plain, None, &mut PairMemo::new(4));
            for p in [0.0, 1.0] {
                let mut queued = ids.clone();
                m.dropout_queued(&mut queued, p, &mut SplitMix64(1), false, &mut DropoutScratch::default());
                assert_eq!(queued, if p == 0.0 { plain.clone() } else { ids.clone() }, "p = {p}");
            }
            let mut counts: FxHashMap<Vec<u32>, (i64, i64)> = FxHashMap::default();
            const SEEDS: u64 = 100_000;
            let mut scratch = DropoutScratch::default();
            for seed in 0..SEEDS {
                let mut queued = ids.clone();
                m.dropout_queued(&mut queued, 0.3, &mut SplitMix64(seed), false, &mut scratch);
                counts.entry(queued).or_default().0 += 1;
                let mut steps = ids.clone();
                m.dropout_by_steps(&mut steps, 0.3, &mut SplitMix64(seed ^ 0x5555_5555), false);
                counts.entry(steps).or_default().1 += 1;
            }
            let distance = counts.values().map(|&(a, b)| (a - b).abs()).sum::<i64>() as f64 / (2 * SEEDS) as f64;
            assert!(distance < 0.02, "round {round}: total variation {distance:.4} over {} segmentations", counts.len());
            compared += (counts.len() > 3) as usize;
        }
        assert!(compared >= 3, "the chunks have several likely segmentations");
    }

    #[test]
    fn dropout_on_a_long_run_is_not_quadratic() {
        // 2^17 a: one chunk of tens of thousands of merges (the rescanning version took 4.7 s
        // for 32 KB with o200k; this would take many minutes).
        let m = random_merges_model(&mut lcg(2), false);
        let mut symbols = vec![b'a' as u32; 1 << 17];
        let start = std::time::Instant::now();
        m.merge_dropout(&mut symbols, 0.1, &mut SplitMix64(3), false, &mut DropoutScratch::default());
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "{:?}", start.elapsed());
        assert!(symbols.len() < (1 << 17) / 2);
    }

    #[test]
    fn long_run_needs_a_long_run_and_few_others() {
        let a = b'a' as u32;
        let mut ids = vec![a; MIN_RUN - 1];
        assert_eq!(long_run(&ids), None, "a chunk shorter than MIN_RUN");
        ids.push(a);
        assert_eq!(long_run(&ids), Some((0, MIN_RUN)));
        ids.insert(0, 1);
        assert_eq!(long_run(&ids), Some((1, MIN_RUN + 1)));
        ids.extend(vec![2; RUN_SIDES]);
        assert_eq!(long_run(&ids), Some((1, MIN_RUN + 1)));
        ids.push(2);
        assert_eq!(long_run(&ids), None, "more than RUN_SIDES after the run");
        let mut ids = vec![2; RUN_SIDES + 1];
        ids.extend(vec![a; MIN_RUN]);
        assert_eq!(long_run(&ids), None, "more than RUN_SIDES before the run");
    }

    /// A small seeded generator for the random tests: `rand(m)` is in 0..m.
    /// A ranks model of `tokens` (the 256 bytes first), the ranks of the multi-byte ones shuffled.
    fn shuffled_ranks_model(mut tokens: Vec<Vec<u8>>, rand: &mut impl FnMut(u64) -> u64) -> BpeModel {
        for i in (257..tokens.len()).rev() {
            let j = 256 + rand((i - 255) as u64) as usize;
            tokens.swap(i, j);
        }
        let list: Vec<(u32, Vec<u8>)> = tokens.into_iter().enumerate().map(|(i, t)| (i as u32, t)).collect();
        BpeModel::from_ranks(list, None, vec![]).unwrap()
    }

    /// Byte-level merges made from `corpus` one after the other, each of the pair `pick` chooses
    /// from the corpus's words (as merged so far) and the tokens so far (None: stop): in order,
    /// as real vocabularies are. Returns the tokens (id, bytes) and the merges.
    fn grown_merges(corpus: &[Vec<u8>], n: usize, mut pick: impl FnMut(&[Vec<u32>], &[Vec<u8>]) -> Option<(u32, u32)>) -> (Vec<(u32, Vec<u8>)>, Vec<(u32, u32)>) {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let mut words: Vec<Vec<u32>> = corpus.iter().map(|w| w.iter().map(|&b| b as u32).collect()).collect();
        let mut merges = Vec::new();
        while merges.len() < n {
            let Some(pair) = pick(&words, &tokens) else { break };
            let id = tokens.len() as u32;
            tokens.push([tokens[pair.0 as usize].as_slice(), &tokens[pair.1 as usize]].concat());
            merges.push(pair);
            for w in &mut words {
                let mut out = Vec::with_capacity(w.len());
                let mut i = 0;
                while i < w.len() {
                    if i + 1 < w.len() && (w[i], w[i + 1]) == pair {
                        out.push(id);
                        i += 2;
                    } else {
                        out.push(w[i]);
                        i += 1;
                    }
                }
                *w = out;
            }
        }
        (tokens.into_iter().enumerate().map(|(i, t)| (i as u32, t)).collect(), merges)
    }

    /// Whether the token of a pair would be one of `tokens` already (made another way).
    fn made_already(tokens: &[Vec<u8>], (a, b): (u32, u32)) -> bool {
        let joined = [tokens[a as usize].as_slice(), &tokens[b as usize]].concat();
        tokens.contains(&joined)
    }

    /// Byte-level merges learned the way training learns them (the most frequent pair first,
    /// ties to the smallest ids) from `corpus`.
    fn learned_merges(corpus: &[Vec<u8>], n: usize) -> (Vec<(u32, Vec<u8>)>, Vec<(u32, u32)>) {
        grown_merges(corpus, n, |words, tokens| {
            let mut counts: FxHashMap<(u32, u32), u32> = FxHashMap::default();
            for w in words {
                for p in w.windows(2) {
                    *counts.entry((p[0], p[1])).or_default() += 1;
                }
            }
            // A pair whose token exists already is left alone.
            counts.into_iter().filter(|&(p, c)| c >= 2 && !made_already(tokens, p)).max_by_key(|&((a, b), c)| (c, Reverse((a, b)))).map(|(p, _)| p)
        })
    }

    /// Merges made by joining a random pair of neighbours of the corpus (not the most frequent
    /// one): odd crossing tokens, tokens of 4-byte characters, tokens that start inside a
    /// character.
    fn random_merges(corpus: &[Vec<u8>], n: usize, rand: &mut impl FnMut(u64) -> u64) -> (Vec<(u32, Vec<u8>)>, Vec<(u32, u32)>) {
        grown_merges(corpus, n, |words, tokens| {
            (0..100).find_map(|_| {
                let w = &words[rand(words.len() as u64) as usize];
                let i = (w.len() >= 2).then(|| rand(w.len() as u64 - 1) as usize)?;
                Some((w[i], w[i + 1])).filter(|&p| !made_already(tokens, p))
            })
        })
    }

    /// `encode_chunk` of a byte-level chunk gives what merging its bytes gives.
    fn assert_encodes_as_bytes_merge(m: &BpeModel, chunk: &[u8]) {
        let mut bytes_first = Vec::new();
        m.initial_symbols(chunk, &mut bytes_first).unwrap();
        m.merge_short(&mut bytes_first, Some(chunk), &mut PairMemo::new(4));
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        m.encode_chunk(chunk, &mut out, &mut scratch).unwrap();
        assert_eq!(out, bytes_first, "chunk {:?}", String::from_utf8_lossy(chunk));
    }

    #[test]
    fn merging_from_characters_matches_merging_from_bytes() {
        // Texts of characters of 1 to 4 bytes, with words that repeat (so that merges join
        // characters, and parts of characters across their boundaries: crossing tokens),
        // learned into merges; then random chunks of the same characters, merged from bytes
        // (`merge_short` on the bytes) and by `encode_chunk` (from characters: chunks of 16 bytes
        // or more, and shorter ones with three CJK characters), as a merges model and as a ranks
        // model of the same tokens.
        // Characters that share their first bytes (U+4E00.., U+0430..) make pairs such as (space,
        // first byte) more frequent than any one character's own: byte-level BPE then learns
        // crossing tokens, as real vocabularies do (" \xe5", "о\xd0").
        let mut chars: Vec<String> = ["a", "b", " ", "é", "中", "国", "の", "🙂", "\u{a0}"].map(String::from).to_vec();
        chars.extend((0..24).map(|k| char::from_u32(0x4E00 + k * 3).unwrap().to_string()));
        chars.extend((0..16).map(|k| char::from_u32(0x0430 + k).unwrap().to_string()));
        let mut rand = lcg(11);
        let (mut cut_seen, mut fewer_symbols, mut pieces_seen, mut spans_seen) = (0, 0, 0, 0);
        for round in 0..12 {
            let words: Vec<String> = (0..8).map(|_| (0..1 + rand(4)).map(|_| chars[rand(chars.len() as u64) as usize].as_str()).collect()).collect();
            let text = |rand: &mut dyn FnMut(u64) -> u64, n: usize| -> Vec<u8> {
                let mut t = String::new();
                while t.len() < n {
                    if rand(3) == 0 {
                        t.push_str(&chars[rand(chars.len() as u64) as usize]);
                    } else {
                        t.push_str(&words[rand(words.len() as u64) as usize]);
                    }
                }
                t.into_bytes()
            };
            let corpus: Vec<Vec<u8>> = (0..60).map(|_| text(&mut rand, 40)).collect();
            let (tokens, merges) = learned_merges(&corpus, 150);
            let by_merges = BpeModel::new(tokens.clone(), &merges, None, vec![], BpeOptions::default()).unwrap();
            let by_ranks = BpeModel::from_ranks(tokens.clone(), None, vec![]).unwrap();
            for m in [&by_merges, &by_ranks] {
                let start = m.char_start.as_ref().expect("learned merges are in order");
                let mut cache = ChunkCache::new(m.uid);
                for _ in 0..150 {
                    let n = 9 + rand(if round % 3 == 0 { 400 } else { 100 }) as usize;
                    let chunk = text(&mut rand, n);
                    assert_encodes_as_bytes_merge(m, &chunk);
                    let mut symbols = Vec::new();
                    assert!(m.char_symbols(start, &chunk, &mut symbols, &mut cache) || chunk.is_ascii());
                    fewer_symbols += (symbols.len() < chunk.len()) as u32;
                    cut_seen += cache.cut.iter().map(|w| w.count_ones()).sum::<u32>();
                    pieces_seen += cache.pieces.len();
                    spans_seen += cache.spanned.iter().map(|w| w.count_ones()).sum::<u32>();
                }
            }
        }
        // The vocabularies had crossing tokens, chunks had characters they cut, and most chunks
        // did start from fewer symbols than bytes.
        assert!(cut_seen > 100, "{cut_seen} cut characters");
        assert!(fewer_symbols > 3000, "{fewer_symbols} of 3600 chunks started from fewer symbols");
        // Chunks were cut into pieces merged apart (`merge_pieces`), and occurrences of crossing
        // tokens kept some places whole.
        assert!(pieces_seen > 1000 && spans_seen > 100, "{pieces_seen} places cut, {spans_seen} spanned");
    }

    #[test]
    fn pieces_merged_apart_match_merging_the_whole_chunk() {
        // Long chunks of a few characters (of 1 to 4 bytes), vocabularies learned by frequency
        // or by random merges, as merges models and ranks models: encoding (cut into pieces where
        // no token can span) against merging the chunk's bytes whole. Pieces of every size that
        // `merge_pieces` treats apart must come up.
        let mut chars: Vec<String> = ["a", " ", "é", "中", "国", "の", "🙂", "😀", "\u{a0}", "\u{10348}"].map(String::from).to_vec();
        chars.extend((0..12).map(|k| char::from_u32(0x4E00 + k * 3).unwrap().to_string()));
        chars.extend((0..8).map(|k| char::from_u32(0x0430 + k).unwrap().to_string()));
        chars.extend((0..6).map(|k| char::from_u32(0x1F600 + k).unwrap().to_string()));
        let mut rand = lcg(12345);
        // Pieces of 1, 2, 3-8, 9-128, 129-1024 and more symbols.
        let mut sizes = [0u64; 6];
        // The last rounds: three characters, long chunks with a character no token holds in the
        // middle (a place always cut), so that pieces of over 1,024 symbols come up.
        for round in 0..44 {
            let n_chars = if round >= 40 { 3 } else if round % 2 == 0 { 6 } else { chars.len() };
            let pool: Vec<String> = (0..n_chars).map(|_| chars[rand(chars.len() as u64) as usize].clone()).collect();
            let text = |rand: &mut dyn FnMut(u64) -> u64, n: usize| -> Vec<u8> {
                let mut t = String::new();
                while t.len() < n {
                    t.push_str(&pool[rand(pool.len() as u64) as usize]);
                }
                t.into_bytes()
            };
            let corpus: Vec<Vec<u8>> = (0..80).map(|_| text(&mut rand, 30)).collect();
            let n_merges = [50, 200, 600][round % 3];
            let (tokens, merges) = if round % 4 < 2 { random_merges(&corpus, n_merges, &mut rand) } else { learned_merges(&corpus, n_merges.min(200)) };
            let by_merges = BpeModel::new(tokens.clone(), &merges, None, vec![], BpeOptions::default()).unwrap();
            let by_ranks = BpeModel::from_ranks(tokens.clone(), None, vec![]).unwrap();
            for m in [&by_merges, &by_ranks] {
                let start = m.char_start.as_ref().expect("merges made one after the other are in order");
                let mut cache = ChunkCache::new(m.uid);
                for k in 0..if round >= 40 { 4 } else { 40 } {
                    let n = 1 + rand(if round >= 40 { 4_000 } else { [40, 300, 1500][k % 3] }) as usize;
                    let mut chunk = text(&mut rand, n);
                    if round >= 40 {
                        chunk.extend_from_slice("\u{9F8D}".as_bytes());
                        chunk.extend(text(&mut rand, n / 2));
                    }
                    let mut whole = Vec::new();
                    m.initial_symbols(&chunk, &mut whole).unwrap();
                    m.merge_short(&mut whole, Some(&chunk), &mut PairMemo::new(4));
                    // (A ranks model encodes a chunk that is a token as that token.)
                    if let (true, Some(id)) = (m.options.ignore_merges, m.whole_token(&chunk)) {
                        whole = vec![id];
                    }
                    let (mut out, mut scratch) = (Vec::new(), Vec::new());
                    m.encode_chunk(&chunk, &mut out, &mut scratch).unwrap();
                    assert_eq!(out, whole, "round {round}, chunk {:?}", String::from_utf8_lossy(&chunk));
                    let mut symbols = Vec::new();
                    if m.char_symbols(start, &chunk, &mut symbols, &mut cache) && !cache.pieces.is_empty() {
                        let ends: Vec<usize> = cache.pieces.iter().map(|&p| p as usize).chain([symbols.len()]).collect();
                        for (from, end) in std::iter::once(0).chain(ends.iter().copied()).zip(&ends) {
                            sizes[match end - from { 1 => 0, 2 => 1, 3..=8 => 2, 9..=128 => 3, 129..=1024 => 4, _ => 5 }] += 1;
                        }
                    }
                }
            }
        }
        assert!(sizes.iter().all(|&n| n > 0), "pieces of 1, 2, 3-8, 9-128, 129-1024, more symbols: {sizes:?}");
    }

    #[test]
    fn no_start_from_characters_with_a_continuing_subword_prefix() {
        // With a prefix, merging (l, ##y) makes l + y: the merged token is not the text it
        // covers, so crossing tokens cannot be found in the chunk; merging starts from bytes.
        let mut tokens: Vec<(u32, Vec<u8>)> = (0..=255u8).map(|b| (b as u32, vec![b])).collect();
        for t in [&b"##"[..], b"##y", b"\xady", b"\xe4\xb8", "\u{4e2d}".as_bytes()] {
            tokens.push((tokens.len() as u32, t.to_vec()));
        }
        let merges = [(35, 35), (256, 121), (0xad, 257), (0xe4, 0xb8), (259, 0xad)];
        let options = BpeOptions { continuing_subword_prefix: Some("##".into()), ..BpeOptions::default() };
        let m = BpeModel::new(tokens, &merges, None, vec![], options).unwrap();
        assert!(m.char_start.is_none());
        assert_encodes_as_bytes_merge(&m, "\u{4e2d}##yaaaaaaaaaa".as_bytes());
    }

    #[test]
    fn ranks_out_of_order_merge_from_bytes() {
        // Random tokens of multi-byte characters and their parts, ranks shuffled: a merge may
        // rank before the merge of one of its parts, where starting from characters would give
        // other results; such models must not start from characters (results of `encode_chunk`
        // against merging the bytes; this fails when the order is not checked).
        let mut rand = lcg(5);
        let alphabet: Vec<Vec<u8>> = ["中", "国", "ж", "о", "a"].iter().map(|c| c.as_bytes().to_vec()).collect();
        let mut out_of_order = 0;
        for _ in 0..40 {
            let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
            while tokens.len() < 300 {
                let mut t: Vec<u8> = (0..1 + rand(3)).flat_map(|_| alphabet[rand(alphabet.len() as u64) as usize].clone()).collect();
                // Parts of characters too: cut a byte off either end now and then.
                match rand(3) {
                    0 if t.len() > 2 => t.truncate(t.len() - 1),
                    1 if t.len() > 2 => drop(t.remove(0)),
                    _ => {}
                }
                if t.len() > 1 && !tokens.contains(&t) {
                    tokens.push(t);
                }
            }
            let m = shuffled_ranks_model(tokens, &mut rand);
            out_of_order += m.char_start.is_none() as usize;
            for _ in 0..100 {
                let chunk: Vec<u8> = (0..8 + rand(30)).flat_map(|_| alphabet[rand(alphabet.len() as u64) as usize].clone()).collect();
                assert_encodes_as_bytes_merge(&m, &chunk);
            }
        }
        assert!(out_of_order > 30, "{out_of_order} of 40 shuffled models out of order");
    }

    #[test]
    fn small_path_matches_short_path_on_random_rank_tables() {
        // As above, over bytes {a, b, c, é} (é: two bytes), chunks of 1 to 15 bytes.
        let mut rand = lcg(7);
        let alphabet: [&[u8]; 4] = [b"a", b"b", b"c", "é".as_bytes()];
        for _ in 0..30 {
            let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
            while tokens.len() < 320 {
                let t: Vec<u8> = (0..1 + rand(4)).flat_map(|_| alphabet[rand(4) as usize].to_vec()).collect();
                if t.len() > 1 && !tokens.contains(&t) {
                    tokens.push(t);
                }
            }
            let m = shuffled_ranks_model(tokens, &mut rand);
            for _ in 0..200 {
                let mut bytes: Vec<u8> = Vec::new();
                while bytes.len() < 1 + rand(15) as usize {
                    bytes.extend_from_slice(alphabet[rand(4) as usize]);
                }
                bytes.truncate(SMALL_CHUNK);
                let mut short: Vec<u32> = bytes.iter().map(|&b| b as u32).collect();
                m.merge_short(&mut short, Some(&bytes), &mut PairMemo::new(4));
                let mut small = Vec::new();
                m.merge_small(&bytes, &mut small, &mut PairMemo::new(4));
                assert_eq!(small, short, "{bytes:?}");
            }
        }
    }

    /// tiktoken's merging, straight from the vocabulary: adjacent parts whose concatenation
    /// is a token merge, lowest id first (leftmost among equals); a chunk that is a token is
    /// emitted whole.
    fn merge_by_vocabulary(tokens: &[Vec<u8>], bytes: &[u8]) -> Vec<u32> {
        let id = |b: &[u8]| tokens.iter().position(|t| t == b).map(|i| i as u32);
        if let Some(whole) = id(bytes) {
            return vec![whole];
        }
        let mut parts: Vec<Vec<u8>> = bytes.iter().map(|&b| vec![b]).collect();
        loop {
            let best = (0..parts.len().saturating_sub(1))
                .filter_map(|i| id(&[parts[i].as_slice(), &parts[i + 1]].concat()).map(|rank| (rank, i)))
                .min();
            let Some((_, i)) = best else { break };
            let right = parts.remove(i + 1);
            parts[i].extend(right);
        }
        parts.iter().map(|p| id(p).unwrap()).collect()
    }

    #[test]
    fn ranks_models_keep_one_merge_per_token_and_encode_as_every_split_would() {
        // Random vocabularies with shuffled ranks: many tokens have several splits into two
        // tokens, and some cannot be made by merging their bytes at all.
        let mut rand = lcg(5);
        let alphabet: [&[u8]; 3] = [b"a", b"b", "é".as_bytes()];
        for _ in 0..20 {
            let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
            while tokens.len() < 330 {
                let t: Vec<u8> = (0..2 + rand(4)).flat_map(|_| alphabet[rand(3) as usize].to_vec()).collect();
                if !tokens.contains(&t) {
                    tokens.push(t);
                }
            }
            let m = shuffled_ranks_model(tokens, &mut rand);
            let tokens: Vec<Vec<u8>> = (0..m.vocab_len() as u32).map(|i| m.token_bytes(i).unwrap().to_vec()).collect();
            assert!(m.merges.len() <= tokens.len() - 256, "at most one merge per token");
            let (mut scratch, mut cache) = (Vec::new(), ChunkCache::new(u64::MAX));
            for n in [1, 2, 3, 5, 8, 15, 16, 40, 200] {
                for _ in 0..20 {
                    let mut bytes: Vec<u8> = Vec::new();
                    while bytes.len() < n {
                        bytes.extend_from_slice(alphabet[rand(3) as usize]);
                    }
                    let mut ids = Vec::new();
                    m.encode_chunk_with(&bytes, &mut ids, &mut scratch, &mut cache).unwrap();
                    assert_eq!(ids, merge_by_vocabulary(&tokens, &bytes), "{:?}", String::from_utf8_lossy(&bytes));
                }
            }
        }
    }

    /// `PackedMerges::get` against the map, for every pair of a table whose lines overflow
    /// (spilled pairs, one wrapping from the last line to the first) and for pairs without a
    /// merge, out-of-range ids included.
    #[test]
    fn packed_merges_answer_as_the_map() {
        let mut rand = lcg(41);
        // Offsets: none, 256 (trained models), and one that wraps (ids below their ranks).
        for offset in [0u32, 256, u32::MAX - 6] {
            let mut merges: FxHashMap<(u32, u32), (u32, u32)> = FxHashMap::default();
            // Pairs with the largest ids a slot holds.
            for pair in [(PACKED_MAX_ID, 1), (2, PACKED_MAX_ID), (PACKED_MAX_ID, PACKED_MAX_ID)] {
                let rank = merges.len() as u32;
                merges.insert(pair, (rank, rank.wrapping_add(offset)));
            }
            while merges.len() < 5000 {
                let pair = (rand(3000) as u32, rand(3000) as u32);
                let rank = merges.len() as u32;
                merges.entry(pair).or_insert((rank, rank.wrapping_add(offset)));
            }
            // Twenty more pairs whose first line is the last one: they must wrap to line 0.
            let probe = PackedMerges::new(&merges).unwrap();
            let last = probe.mask;
            let mut extra = Vec::new();
            let mut candidate = 0u32;
            while extra.len() < 20 {
                let pair = (3000 + candidate / 3000, candidate % 3000);
                candidate += 1;
                if probe.line_of(pair.0, pair.1) == last && !merges.contains_key(&pair) {
                    extra.push(pair);
                }
            }
            for pair in extra.iter().copied() {
                let rank = merges.len() as u32;
                merges.insert(pair, (rank, rank.wrapping_add(offset)));
            }
            let packed = PackedMerges::new(&merges).unwrap();
            assert_eq!(packed.mask, probe.mask, "the extra pairs keep the size");
            assert!(packed.spilled.iter().any(|&w| w != 0), "some line spilled");
            assert!(extra.iter().any(|&(l, r)| !packed.lines[last].0.iter().any(|&s| s >> PACKED_RANK_BITS == PackedMerges::key(l, r))), "a pair wrapped");
            for (&(l, r), &expected) in &merges {
                assert_eq!(packed.get(l, r), expected, "({l}, {r})");
            }
            for _ in 0..100_000 {
                let (l, r) = (rand(3100) as u32, rand(3100) as u32);
                assert_eq!(packed.get(l, r), merges.get(&(l, r)).copied().unwrap_or(NO_MERGE), "({l}, {r})");
            }
            for (l, r) in [(PACKED_MAX_ID + 1, PACKED_MAX_ID + 1), (0, u32::MAX), (u32::MAX, 5), (PACKED_MAX_ID + 1, 0)] {
                assert_eq!(packed.get(l, r), NO_MERGE);
            }
        }
        // No merges: one empty line.
        let empty = PackedMerges::new(&FxHashMap::default()).unwrap();
        assert_eq!(empty.get(1, 2), NO_MERGE);
        // Not packed: ids that are not the rank plus one offset, ids or ranks too large for a slot.
        let uneven: FxHashMap<(u32, u32), (u32, u32)> = [((1, 2), (0, 300)), ((2, 3), (1, 302))].into_iter().collect();
        assert!(PackedMerges::new(&uneven).is_none());
        let large: FxHashMap<(u32, u32), (u32, u32)> = [((1, PACKED_MAX_ID + 1), (0, 300))].into_iter().collect();
        assert!(PackedMerges::new(&large).is_none());
        let late = 1u32 << PACKED_RANK_BITS;
        let high_rank: FxHashMap<(u32, u32), (u32, u32)> = [((1, 2), (late, late + 5))].into_iter().collect();
        assert!(PackedMerges::new(&high_rank).is_none());
    }

    #[test]
    fn pair_filter_passes_every_merge_and_memo_with_filter_agrees_with_the_map() {
        let mut rand = lcg(11);
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        while tokens.len() < 2000 {
            let t: Vec<u8> = (0..2 + rand(3)).map(|_| b'a' + rand(8) as u8).collect();
            if !tokens.contains(&t) {
                tokens.push(t);
            }
        }
        let m = shuffled_ranks_model(tokens, &mut rand);
        assert!(m.merges.keys().all(|&pair| m.may_merge(pair)));
        let mut memo = PairMemo::new(4);
        memo.filter = true;
        let (mut rejected, mut unmerged) = (0, 0);
        for _ in 0..20_000 {
            let (left, right) = (rand(m.vocab_len() as u64) as u32, rand(m.vocab_len() as u64) as u32);
            let expected = m.merge_of(left, right);
            if expected == NO_MERGE {
                unmerged += 1;
                rejected += !m.may_merge((left, right)) as u32;
            }
            memo.window = 0; // keep the filter on
            assert_eq!(memo.merge_of(&m, left, right), expected, "({left}, {right})");
        }
        // The filter is of use: most pairs without a merge are answered by it.
        assert!(rejected * 10 > unmerged * 9, "{rejected} of {unmerged}");
    }

    #[test]
    fn specials_only_when_allowed() {
        let m = model(&[], vec![("<|eot|>".into(), 300)]);
        assert_eq!(m.encode("a<|eot|>", |id| id == 300).unwrap(), vec![97, 300]);
        assert_eq!(m.encode("a<|eot|>", |_| false).unwrap().len(), 8);
        assert_eq!(m.decode_bytes(&[97, 300]).unwrap(), b"a<|eot|>");
    }

    #[test]
    fn ranks_model_matches_merges_model() {
        let m = model(&[("b", "c"), ("a", "b"), ("a", "bc")], vec![]);
        // The same vocabulary as ranks: "bc"=256, "ab"=257, "abc"=258.
        let tokens: Vec<(u32, Vec<u8>)> = (0..m.vocab_len() as u32).map(|i| (i, m.token_bytes(i).unwrap().to_vec())).collect();
        let r = BpeModel::from_ranks(tokens, Some(GPT2_PATTERN), vec![]).unwrap();
        for text in ["abc", "abcabc", "aabbcc", "cab"] {
            assert_eq!(r.encode_ordinary(text).unwrap(), m.encode_ordinary(text).unwrap(), "{text}");
        }
        assert_eq!(r.derive_merges(), vec![(98, 99), (97, 98), (97, 256)]);
    }

    /// A character-level model over string tokens, ids in list order.
    fn char_model(tokens: &[&str], merges: &[(&str, &str)], options: BpeOptions) -> BpeModel {
        let toks: Vec<(u32, Vec<u8>)> = tokens.iter().enumerate().map(|(i, t)| (i as u32, t.as_bytes().to_vec())).collect();
        let id = |t: &str| tokens.iter().position(|x| *x == t).unwrap() as u32;
        let pairs: Vec<(u32, u32)> = merges.iter().map(|(l, r)| (id(l), id(r))).collect();
        BpeModel::new(toks, &pairs, None, vec![], BpeOptions { level: Level::Char, ..options }).unwrap()
    }

    #[test]
    fn char_level_with_prefix_suffix_unk_and_fallback() {
        let m = char_model(&["<unk>", "a", "##b", "ab", "c</w>", "##c</w>"], &[("a", "##b")],
            BpeOptions { unk: Some(0), fuse_unk: true, continuing_subword_prefix: Some("##".into()), end_of_word_suffix: Some("</w>".into()), ..Default::default() });
        assert_eq!(m.encode_words(["abc"]).unwrap(), vec![3, 5]);
        // x, y unknown and fused into one <unk>
        assert_eq!(m.encode_words(["xyc"]).unwrap(), vec![0, 5]);
        let mut toks: Vec<String> = (0..256).map(|b| format!("<0x{b:02X}>")).collect();
        toks.push("a".into());
        let refs: Vec<&str> = toks.iter().map(|s| s.as_str()).collect();
        let f = char_model(&refs, &[], BpeOptions { byte_fallback: true, ..Default::default() });
        assert_eq!(f.encode_words(["aé"]).unwrap(), vec![256, 0xC3, 0xA9]);
        let strict = char_model(&["a"], &[], BpeOptions::default());
        assert_eq!(strict.encode_words(["b"]).unwrap_err().kind, ErrorKind::Encode);
    }

    #[test]
    fn ignore_merges_emits_whole_words() {
        // "abc" is a token, but merges alone would give a + bc.
        let tokens = ["a", "b", "c", "bc", "abc", "ab"];
        let opts = BpeOptions { ignore_merges: true, ..Default::default() };
        let m = char_model(&tokens, &[("b", "c"), ("a", "b")], opts);
        assert_eq!(m.encode_words(["abc"]).unwrap(), vec![4]);
        let plain = char_model(&tokens, &[("b", "c"), ("a", "b")], BpeOptions::default());
        assert_eq!(plain.encode_words(["abc"]).unwrap(), vec![0, 3]);
    }

    #[test]
    fn ignore_merges_at_byte_level_emits_tokens_merges_cannot_make() {
        // "ab" has no merge, and merging "abc" gives a + bc: with `ignore_merges` both short
        // chunks are still emitted whole (they skip no whole-token lookup).
        let mut tokens: Vec<(u32, Vec<u8>)> = (0..=255u8).map(|b| (b as u32, vec![b])).collect();
        for (id, t) in [(256, "bc"), (257, "ab"), (258, "abc"), (259, "xy")] {
            tokens.push((id, t.as_bytes().to_vec()));
        }
        let merges = [(b'b' as u32, b'c' as u32), (b'x' as u32, b'y' as u32)];
        let opts = BpeOptions { ignore_merges: true, ..Default::default() };
        let m = BpeModel::new(tokens.clone(), &merges, Some(GPT2_PATTERN), vec![], opts.clone()).unwrap();
        assert_eq!(m.merging_suffices_upto, 1);
        assert_eq!(m.encode_words(["ab", "abc", "xy", "xyz"]).unwrap(), vec![257, 258, 259, 259, b'z' as u32]);
        // With "ab" merged too, 2-byte chunks are left to the byte-pair table, "abc" still not.
        let merges = [(b'b' as u32, b'c' as u32), (b'x' as u32, b'y' as u32), (b'a' as u32, b'b' as u32)];
        let m = BpeModel::new(tokens, &merges, Some(GPT2_PATTERN), vec![], opts).unwrap();
        assert_eq!(m.merging_suffices_upto, 2);
        assert_eq!(m.encode_words(["ab", "abc", "xy"]).unwrap(), vec![257, 258, 259]);
    }

    /// Encodes 3,000 random words of `letters` (4 to 9 of them after a space), with `special`
    /// (a word that is a token merging does not make) at 20 places past the 2,000th; checks
    /// that most words rested, that the ids are those of each word encoded alone, and that
    /// `special` came out as its token.
    fn assert_resting_encodes_as_words_alone(m: &BpeModel, letters: &[u8], special: &str) {
        let id = m.token_id(special.as_bytes()).expect("the special word is a token");
        let mut rand = lcg(7);
        let mut words: Vec<String> = (0..3000)
            .map(|_| {
                let len = 4 + rand(6) as usize;
                " ".to_string() + &(0..len).map(|_| letters[rand(letters.len() as u64) as usize] as char).collect::<String>()
            })
            .collect();
        for i in (2000..3000).step_by(50) {
            words[i] = special.to_string();
        }
        let text: String = words.concat();
        let ids = m.encode_ordinary(&text).unwrap();
        let rested = m.rested_chunks.load(std::sync::atomic::Ordering::Relaxed);
        assert!(rested > 1000, "words should rest ({rested} chunks rested)");
        let alone: Vec<u32> = words.iter().flat_map(|w| m.encode_words([w.as_str()]).unwrap()).collect();
        let first_difference = ids.iter().zip(&alone).position(|(a, b)| a != b);
        assert!(ids.len() == alone.len() && first_difference.is_none(), "ids differ from word by word from id {first_difference:?}");
        assert_eq!(ids.iter().filter(|&&i| i == id).count(), 20);
    }

    /// Text of new words makes their lengths rest (merged without the cache); what they encode
    /// to stays what each word alone encodes to, also a word that is a token merging does not
    /// make (with `ignore_merges`), met while its length rests: in a model from merges (the
    /// per-length set of such tokens) and in one from ranks (the length up to which loading
    /// found every token made).
    #[test]
    fn resting_lengths_encode_as_words_alone() {
        let mut tokens: Vec<(u32, Vec<u8>)> = (0..=255u8).map(|b| (b as u32, vec![b])).collect();
        let mut merges = Vec::new();
        for (l, r) in [(" ", "q"), ("a", "b"), ("c", "d"), ("ab", "cd"), (" q", "u")] {
            let (l, r) = (tokens.iter().find(|t| t.1 == l.as_bytes()).unwrap().0, tokens.iter().find(|t| t.1 == r.as_bytes()).unwrap().0);
            let joined = [tokens[l as usize].1.clone(), tokens[r as usize].1.clone()].concat();
            merges.push((l, r));
            tokens.push((tokens.len() as u32, joined));
        }
        // Six bytes, and merging gives " q" + "z" + ...: only its whole lookup finds it.
        tokens.push((tokens.len() as u32, b" qzqzq".to_vec()));
        let opts = BpeOptions { ignore_merges: true, ..Default::default() };
        let m = BpeModel::new(tokens.clone(), &merges, Some(GPT2_PATTERN), vec![], opts).unwrap();
        assert!(m.made_upto < 6);
        assert_resting_encodes_as_words_alone(&m, b"abcdquz", " qzqzq");
        // Ranks (id = rank): loading merges every token's bytes, and " qzqzq" (6 bytes) is the
        // shortest token that does not come back whole.
        let ranks = BpeModel::from_ranks(tokens, Some(GPT2_PATTERN), vec![]).unwrap();
        assert_eq!(ranks.made_upto, 5);
        assert_resting_encodes_as_words_alone(&ranks, b"abcdquz", " qzqzq");
    }

    /// A byte-level model with a continuing-subword prefix and `ignore_merges` never rests:
    /// merging " axxb" drops the prefix of "xxb" and gives the single token " ab", while the
    /// chunk is a token of its own (the reviewer's counterexample).
    #[test]
    fn no_resting_with_a_continuing_subword_prefix() {
        let mut tokens: Vec<(u32, Vec<u8>)> = (0..=255u8).map(|b| (b as u32, vec![b])).collect();
        for t in ["xx", "xxb", " a", " ab", " axxb"] {
            tokens.push((tokens.len() as u32, t.as_bytes().to_vec()));
        }
        let merges = [(b'x' as u32, b'x' as u32), (256, b'b' as u32), (b' ' as u32, b'a' as u32), (258, 257)];
        let opts = BpeOptions { ignore_merges: true, continuing_subword_prefix: Some("xx".into()), ..Default::default() };
        let m = BpeModel::new(tokens, &merges, Some(GPT2_PATTERN), vec![], opts).unwrap();
        assert_eq!(m.encode_words([" axxb"]).unwrap(), vec![260]);
        let mut rand = lcg(3);
        let mut text: String = (0..2000).map(|_| " ".to_string() + &(0..4).map(|_| b"cdefghijklmnoprstuvw"[rand(20) as usize] as char).collect::<String>()).collect();
        text.push_str(" axxb");
        let ids = m.encode_ordinary(&text).unwrap();
        assert_eq!(ids.last(), Some(&260));
        assert_eq!(m.rested_chunks.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn dropout_zero_is_plain_bpe_and_one_is_bytes() {
        let m = model(&[("a", "b"), ("ab", "c"), ("c", " "), ("ab", "c ")], vec![]);
        let text = "abc abcabc";
        assert_eq!(m.encode_dropout(text, |_| false, 0.0, 1, false).unwrap(), m.encode_ordinary(text).unwrap());
        assert_eq!(m.encode_dropout(text, |_| false, 1.0, 1, false).unwrap().len(), text.len());
        // Superword-only dropout never drops merges inside a word.
        let sw = m.encode_dropout("abc", |_| false, 1.0, 1, true).unwrap();
        assert_eq!(sw, m.encode_ordinary("abc").unwrap());
        assert!(spans_whitespace(b"c ") && !spans_whitespace(b" c"));
    }

    #[test]
    fn unknown_id_is_a_decode_error() {
        let m = model(&[], vec![]);
        assert_eq!(m.decode_bytes(&[999]).unwrap_err().kind, ErrorKind::Decode);
    }

    #[test]
    fn merge_producing_unknown_token_is_rejected() {
        let tokens: Vec<(u32, Vec<u8>)> = (0..=255u8).map(|b| (b as u32, vec![b])).collect();
        let err = BpeModel::new(tokens, &[(97, 98)], Some(GPT2_PATTERN), vec![], BpeOptions::default()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Format);
    }
}
