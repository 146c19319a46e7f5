//! Unigram LM inference (SentencePiece): the segmentation with the highest total log
//! probability, by Viterbi over the lattice of pieces. A character no piece covers becomes the
//! unknown token (score: lowest piece score minus 10, as SentencePiece does), or its bytes
//! `<0xAB>` with byte fallback.
//!
//! Path scores are summed in f64, as Hugging Face and llama.cpp do. SentencePiece itself sums
//! and keeps them in f32 (`with_float32_scores`): the rounding decides near-ties, and even
//! exact ties, differently (kyoto's "....": "..." + "." there, "." + "..." in f64), so the
//! SentencePiece loader asks for it.
//!
//! Words are remembered (see `Segment`): when no piece has a `▁` past its first character, no
//! piece crosses the start of a `▁`, so every path passes there and the text's lattice falls
//! apart into segments, one per word. A segment's best path is found once per thread, in f64
//! from 0, with the margin to its second best; where it is met again, that path is the one the
//! whole text's Viterbi takes unless the margin is within the rounding error of the sums there
//! (which grows with the score the text has reached). Then, and for segments not remembered,
//! the segment's lattice is solved from that score, as SentencePiece's would be.

use crate::error::{Error, ErrorKind, Result};
use aho_corasick::{AhoCorasick, MatchKind};
use rustc_hash::FxHashMap;
use std::cell::RefCell;

/// Penalty of the unknown token relative to the lowest piece score (SentencePiece's kUnkPenalty).
const UNK_PENALTY: f64 = 10.0;

#[derive(Debug, Clone)]
pub struct UnigramModel {
    pieces: FxHashMap<String, (u32, f64)>,
    unk: Option<u32>,
    unk_score: f64,
    min_score: f64,
    byte_ids: Option<[u32; 256]>,
    fuse_unk: bool,
    max_piece_bytes: usize,
    float32_scores: bool,
    /// Finds every occurrence of every piece in a text in one pass: the edges of the lattice
    /// (made on first use). Looking each span up in `pieces` hashed it at every start for
    /// every length up to the longest piece: sentencepiece was 5x faster.
    edges: std::sync::OnceLock<Option<Edges>>,
    /// Whether words are remembered (see the module's comment): the lattice falls apart at each
    /// `▁` (no piece has one past its first character), and no score is above 0 (the
    /// rounding bound of `holds_from` takes a path's partial sums to grow in one direction).
    cuts_at_spaces: bool,
    /// Tells this model's remembered segments from other models' (see `with_segment_cache`).
    uid: u64,
    /// The score of each piece by id (NaN for ids that are no lattice piece): the scores of a
    /// remembered path without unknown characters, summed again from its ids.
    id_scores: Vec<f64>,
    /// One more than the largest id the model can give.
    id_bound: usize,
}

/// SentencePiece's (and Metaspace's) mark of a space.
const SPACE_MARK: char = '\u{2581}';
const SPACE_MARK_UTF8: &[u8] = "\u{2581}".as_bytes();

/// The best path of a segment (a word: from a `▁` to the next), summed in f64 from 0; its ids
/// and scores are in its `SegmentCache`'s arenas.
#[derive(Debug, Clone, Copy)]
struct Segment {
    /// Where its ids are, as `emit` gives them (unknown characters as bytes with byte
    /// fallback, else as the unknown id, consecutive ones fused), given that the id before is not
    /// an unknown.
    ids: (u32, u32),
    /// Where the score of each piece of its path is, in order, for a path with an unknown
    /// character (its ids are then not its pieces); empty otherwise (the ids' scores are the
    /// model's `id_scores`).
    scores: (u32, u32),
    /// The pieces of its path.
    pieces: u32,
    /// The path's score, and how far below it the second best path's is (infinite if none).
    score: f64,
    margin: f64,
    /// The segment's characters: no path has more pieces.
    chars: u32,
    /// Whether its path starts and ends with an unknown character that gives the unknown id
    /// (the first is then dropped after an unknown, when unknowns are fused).
    unk_first: bool,
    unk_last: bool,
    /// False when its ids cannot be told here (an unknown character and no unknown id): such a
    /// segment is solved every time, so that the error is raised there.
    usable: bool,
}

/// Segments of more bytes are not remembered (runs of text without spaces: CJK).
const MAX_SEGMENT_BYTES: usize = 128;
/// A thread's remembered segments per model, and the ids (or scores) they hold, before it starts
/// over: at most about 50 MB (the map 16 MB, ids 16 MB, scores of the words with unknown
/// characters, front 1 MB; arenas at up to twice their bound after growing). 5 MB of English
/// text has 120,000 distinct segments of a million ids for a vocabulary of 1,000 pieces (fewer
/// for larger ones).
const MAX_SEGMENTS: usize = 1 << 17;
const MAX_SEGMENT_IDS: usize = 1 << 21;
const SEGMENT_FRONT_BITS: u32 = 14;
/// A front slot's filler (its key, 0, is no segment's: a key's top byte is its length).
const EMPTY_FRONT: (u128, FrontSegment) = (0, FrontSegment { ids: 0, len: 0, limit: 0.0 });

/// What the front keeps of a remembered segment whose ids are its pieces (no unknown
/// character, so none is fused with a neighbour's): where its ids are, and `limit`, below which
/// the absolute score the text has reached lets its path hold (`holds_from` solved for that
/// score, rounded down). 32 bytes with the key, half a `Segment`'s: twice as many words stay in
/// the CPU cache.
#[derive(Debug, Clone, Copy)]
struct FrontSegment {
    ids: u32,
    len: u32,
    limit: f32,
}
/// Models whose segments a thread keeps at once.
const SEGMENT_CACHES_PER_THREAD: usize = 4;

/// A thread's remembered segments of one model: those of up to 15 bytes (most words) by their
/// bytes packed in a u128, longer ones by their text; ids and scores in one arena each.
struct SegmentCache {
    owner: u64,
    epoch: u64,
    /// The segments of short keys met last, direct-mapped (1 MB: the words that make up most
    /// of a text are answered from the CPU cache, not from a map of megabytes).
    front: Vec<(u128, FrontSegment)>,
    short: FxHashMap<u128, Segment>,
    long: FxHashMap<Box<str>, Segment>,
    ids: Vec<u32>,
    scores: Vec<f64>,
    /// `best_of_segment`'s lattice and path, kept for the next segment.
    lattice: Vec<(f64, f64, usize, Option<u32>, f64)>,
    path: Vec<(usize, usize, Option<u32>, f64)>,
}

impl SegmentCache {
    fn new(owner: u64, epoch: u64) -> Self {
        SegmentCache { owner, epoch, front: Vec::new(), short: FxHashMap::default(), long: FxHashMap::default(), ids: Vec::new(), scores: Vec::new(), lattice: Vec::new(), path: Vec::new() }
    }

    fn clear(&mut self) {
        self.front.clear();
        self.short.clear();
        self.long.clear();
        self.ids.clear();
        self.scores.clear();
    }

    fn front_slot(key: u128) -> usize {
        let mixed = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
        (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SEGMENT_FRONT_BITS)) as usize
    }

    /// The front's entry for `key`, if it holds one.
    #[inline]
    fn get_front(&self, key: u128) -> Option<FrontSegment> {
        match self.front.get(Self::front_slot(key)) {
            Some(&(k, front)) if k == key => Some(front),
            _ => None,
        }
    }

    /// The segment remembered for `text` (short key or text), put in the front if it may go there.
    fn get(&mut self, model: &UnigramModel, key: Option<u128>, text: &str) -> Option<Segment> {
        let Some(key) = key else { return self.long.get(text).copied() };
        let found = self.short.get(&key).copied()?;
        self.put_front(model, key, &found);
        Some(found)
    }

    fn put_front(&mut self, model: &UnigramModel, key: u128, segment: &Segment) {
        let Some(front) = model.front_segment(segment) else { return };
        if self.front.is_empty() {
            self.front = vec![EMPTY_FRONT; 1 << SEGMENT_FRONT_BITS];
        }
        self.front[Self::front_slot(key)] = (key, front);
    }

    fn insert(&mut self, model: &UnigramModel, key: Option<u128>, text: &str, segment: Segment) {
        match key {
            Some(key) => {
                self.short.insert(key, segment);
                self.put_front(model, key, &segment);
            }
            None => {
                self.long.insert(text.into(), segment);
            }
        }
    }

    fn ids(&self, segment: &Segment) -> &[u32] {
        &self.ids[segment.ids.0 as usize..(segment.ids.0 + segment.ids.1) as usize]
    }

    fn scores(&self, segment: &Segment) -> &[f64] {
        &self.scores[segment.scores.0 as usize..(segment.scores.0 + segment.scores.1) as usize]
    }
}

#[cfg(test)]
thread_local! {
    /// Remembered segments met whose path held, and that were solved again (tests only).
    static SEGMENTS_HELD: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

thread_local! {
    /// Most recently used first.
    static SEGMENT_CACHES: RefCell<Vec<SegmentCache>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's remembered segments of model `uid` (emptied after
/// `clear_chunk_caches`, as the BPE chunk caches are).
fn with_segment_cache<R>(uid: u64, f: impl FnOnce(&mut SegmentCache) -> R) -> R {
    let epoch = crate::models::bpe::cache_epoch();
    SEGMENT_CACHES.with(|caches| {
        let Ok(mut caches) = caches.try_borrow_mut() else { return f(&mut SegmentCache::new(uid, epoch)) };
        match caches.iter().position(|c| c.owner == uid) {
            Some(0) => {}
            Some(i) => {
                let cache = caches.remove(i);
                caches.insert(0, cache);
            }
            None => {
                if caches.len() >= SEGMENT_CACHES_PER_THREAD {
                    caches.pop();
                }
                caches.insert(0, SegmentCache::new(uid, epoch));
            }
        }
        let cache = &mut caches[0];
        if cache.epoch != epoch {
            cache.clear();
            cache.epoch = epoch;
        }
        f(cache)
    })
}

/// The pieces that may enter the lattice (finite score), found all at once.
#[derive(Debug, Clone)]
struct Edges {
    matcher: AhoCorasick,
    /// (id, score) by the matcher's pattern index.
    pieces: Vec<(u32, f64)>,
}

impl UnigramModel {
    /// `pieces`: (piece, id, score); pieces that must never be produced by the lattice (control,
    /// unused) are left out by the caller. A piece whose score is not finite (-inf) never enters
    /// the lattice but is still there for byte fallback: SentencePiece's `<0xAB>` pieces.
    pub fn new(pieces: Vec<(String, u32, f64)>, unk: Option<u32>, byte_fallback: bool, fuse_unk: bool) -> Result<Self> {
        let min_score = pieces.iter().map(|p| p.2).filter(|s| s.is_finite()).fold(f64::INFINITY, f64::min);
        let max_piece_bytes = pieces.iter().map(|p| p.0.len()).max().unwrap_or(0);
        let map: FxHashMap<String, (u32, f64)> = pieces.into_iter().map(|(s, id, score)| (s, (id, score))).collect();
        let byte_ids = if byte_fallback {
            let mut ids = [0u32; 256];
            for b in 0..256usize {
                ids[b] = map.get(&format!("<0x{b:02X}>")).map(|p| p.0).ok_or_else(|| {
                    Error::new(ErrorKind::Format, format!("byte_fallback is on but the piece <0x{b:02X}> is missing"))
                })?;
            }
            Some(ids)
        } else {
            None
        };
        let unk_score = if min_score.is_finite() { min_score - UNK_PENALTY } else { -UNK_PENALTY };
        // (With byte fallback and fused unknowns, a "▁" that is no piece would be an unknown
        // character that fuses with the run before it, across the cut: no cuts then.)
        let space_is_piece = map.get(SPACE_MARK.to_string().as_str()).is_some_and(|p| p.1.is_finite());
        let cuts_at_spaces = unk_score <= 0.0
            && !(byte_fallback && fuse_unk && !space_is_piece)
            && map.iter().all(|(piece, p)| !p.1.is_finite() || (p.1 <= 0.0 && !piece.chars().skip(1).any(|c| c == SPACE_MARK)));
        let uid = crate::models::bpe::next_model_uid();
        let mut id_scores = Vec::new();
        let mut cuts_at_spaces = cuts_at_spaces;
        if cuts_at_spaces {
            for &(id, score) in map.values().filter(|p| p.1.is_finite()) {
                if id_scores.len() <= id as usize {
                    id_scores.resize(id as usize + 1, f64::NAN);
                }
                // (Two pieces of one id and different scores: an id does not tell its score.)
                cuts_at_spaces &= id_scores[id as usize].is_nan() || id_scores[id as usize] == score;
                id_scores[id as usize] = score;
            }
        }
        let id_bound = map.values().map(|p| p.0).chain(unk).max().map_or(0, |id| id as usize + 1);
        Ok(UnigramModel { pieces: map, unk, unk_score, min_score, byte_ids, fuse_unk, max_piece_bytes, float32_scores: false, edges: Default::default(), cuts_at_spaces, uid, id_scores, id_bound })
    }

    /// One more than the largest id the model can give (its pieces', the unknown's, the bytes').
    pub fn id_bound(&self) -> usize {
        self.id_bound
    }

    /// SentencePiece's arithmetic: path scores are f32, each step an f32 addition.
    pub fn with_float32_scores(mut self, on: bool) -> Self {
        self.float32_scores = on;
        // Remembered segments hold paths of the old arithmetic's choosing.
        self.uid = crate::models::bpe::next_model_uid();
        self.unk_score = match (self.min_score.is_finite(), on) {
            (false, _) => -UNK_PENALTY,
            (true, true) => (self.min_score as f32 - UNK_PENALTY as f32) as f64,
            (true, false) => self.min_score - UNK_PENALTY,
        };
        self
    }

    /// `base + score` in the model's arithmetic (an f32 addition for SentencePiece).
    fn add(&self, base: f64, score: f64) -> f64 {
        if self.float32_scores {
            (base as f32 + score as f32) as f64
        } else {
            base + score
        }
    }

    fn edges(&self) -> Option<&Edges> {
        self.edges
            .get_or_init(|| {
                let (strings, pieces): (Vec<&str>, Vec<(u32, f64)>) =
                    self.pieces.iter().filter(|(s, p)| p.1.is_finite() && !s.is_empty()).map(|(s, &p)| (s.as_str(), p)).unzip();
                // None (then the lookups below) if the automaton cannot be built.
                AhoCorasick::builder().match_kind(MatchKind::Standard).build(&strings).ok().map(|matcher| Edges { matcher, pieces })
            })
            .as_ref()
    }

    /// Appends the best segmentation of `text`.
    pub fn encode_word(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let Some(edges) = self.edges() else { return self.encode_word_by_lookup(text, out) };
        let mut prev_unk = false;
        if !self.cuts_at_spaces {
            let best = self.viterbi(edges, text, 0.0);
            return self.emit(text, &best, out, &mut prev_unk);
        }
        let first = out.len();
        let score = with_segment_cache(self.uid, |cache| {
            // The score of the best path so far, as the whole text's Viterbi has it at the start
            // of the current segment (every path passes there).
            let mut score: f64 = 0.0;
            let mut from = 0;
            let mut marks = memchr::memmem::find_iter(text.as_bytes(), SPACE_MARK_UTF8).chain([text.len()]);
            while from < text.len() {
                let to = marks.find(|&i| i > from).expect("the text's end comes last");
                let segment = &text[from..to];
                from = to;
                if segment.len() <= MAX_SEGMENT_BYTES {
                    let key = crate::models::bpe::pack_short(segment.as_bytes());
                    // Most words: in the front, and holding at this score.
                    if let Some(front) = key.and_then(|k| cache.get_front(k)).filter(|f| score.abs() < f.limit as f64) {
                        #[cfg(test)]
                        SEGMENTS_HELD.with(|n| n.set((n.get().0 + 1, n.get().1)));
                        let ids = &cache.ids[front.ids as usize..(front.ids + front.len) as usize];
                        out.extend_from_slice(ids);
                        score = ids.iter().fold(score, |sum, &id| self.add(sum, self.id_scores[id as usize]));
                        prev_unk = false;
                        continue;
                    }
                    let known = match cache.get(self, key, segment) {
                        Some(known) => known,
                        None => {
                            if cache.short.len() + cache.long.len() >= MAX_SEGMENTS || cache.ids.len().max(cache.scores.len()) >= MAX_SEGMENT_IDS {
                                cache.clear();
                            }
                            let known = self.best_of_segment(edges, segment, cache);
                            cache.insert(self, key, segment, known);
                            known
                        }
                    };
                    let holds = self.holds_from(&known, score);
                    #[cfg(test)]
                    SEGMENTS_HELD.with(|n| n.set((n.get().0 + holds as usize, n.get().1 + !holds as usize)));
                    if holds {
                        let skip = (prev_unk && known.unk_first && self.fuse_unk) as usize;
                        out.extend_from_slice(&cache.ids(&known)[skip..]);
                        score = if known.scores.1 > 0 {
                            cache.scores(&known).iter().fold(score, |sum, &piece| self.add(sum, piece))
                        } else {
                            cache.ids(&known).iter().fold(score, |sum, &id| self.add(sum, self.id_scores[id as usize]))
                        };
                        prev_unk = known.unk_last;
                        continue;
                    }
                }
                let best = self.viterbi(edges, segment, score);
                score = best[segment.len()].0;
                self.emit(segment, &best, out, &mut prev_unk)?;
            }
            Ok(score)
        })?;
        if !score.is_finite() {
            // Sums that overflowed (scores near the float's limit): every path then scores the
            // same, and which one the whole text's Viterbi keeps is not a word's business.
            out.truncate(first);
            let best = self.viterbi(edges, text, 0.0);
            return self.emit(text, &best, out, &mut false);
        }
        Ok(())
    }

    /// Calls `edge(start, end, score, id)` for every edge of the lattice of `text`, in order of
    /// `end`: each piece found in it, and the unknown token (id None) for each character that no
    /// piece of one character covers.
    fn for_each_edge(&self, edges: &Edges, text: &str, mut edge: impl FnMut(usize, usize, f64, Option<u32>)) {
        // The matches come in order of their end (the automaton reports each as it passes its
        // end); each is a span between character boundaries, as pieces are whole characters.
        let mut matches = edges.matcher.find_overlapping_iter(text).peekable();
        for (start, c) in text.char_indices() {
            let end = start + c.len_utf8();
            let mut matched_single = false;
            while let Some(m) = matches.next_if(|m| m.end() <= end) {
                debug_assert_eq!(m.end(), end, "matches must come in order of their end");
                let (id, score) = edges.pieces[m.pattern().as_usize()];
                edge(m.start(), end, score, Some(id));
                matched_single |= m.start() == start;
            }
            if !matched_single {
                // No piece for this character: the unknown token covers it.
                edge(start, end, self.unk_score, None);
            }
        }
    }

    /// The lattice of `text` solved from score `start_score` in the model's arithmetic:
    /// best[i] = (score, start of the last piece, its id or None for unknown) of text[..i].
    fn viterbi(&self, edges: &Edges, text: &str, start_score: f64) -> Vec<(f64, usize, Option<u32>)> {
        let mut best: Vec<(f64, usize, Option<u32>)> = vec![(f64::NEG_INFINITY, 0, None); text.len() + 1];
        best[0].0 = start_score;
        // Edges into a position may arrive in any order: the higher score wins, and of two
        // equal ones the earlier start, which is what trying starts in order and keeping the
        // first of equal scores gives (SentencePiece's lattice).
        self.for_each_edge(edges, text, |start, end, score, id| {
            let s = self.add(best[start].0, score);
            let (current, current_start, _) = best[end];
            if s > current || (s == current && start < current_start) {
                best[end] = (s, start, id);
            }
        });
        best
    }

    /// The best path of a segment and the margin to its second best, in f64 from 0 (scores
    /// rounded to f32 first where the model sums in f32); its ids and scores go to `cache`'s
    /// arenas.
    fn best_of_segment(&self, edges: &Edges, text: &str, cache: &mut SegmentCache) -> Segment {
        // (best score, second best score, start of the best's last piece, its id and score) of
        // text[..i].
        let mut best = std::mem::take(&mut cache.lattice);
        best.clear();
        best.resize(text.len() + 1, (f64::NEG_INFINITY, f64::NEG_INFINITY, 0, None, 0.0));
        best[0].0 = 0.0;
        self.for_each_edge(edges, text, |start, end, score, id| {
            let score = if self.float32_scores { score as f32 as f64 } else { score };
            let (first, second) = (best[start].0 + score, best[start].1 + score);
            let at = &mut best[end];
            if first > at.0 {
                *at = (first, at.0.max(second), start, id, score);
            } else {
                // An equal score is a second best as good as the best: margin 0.
                at.1 = at.1.max(first);
            }
        });
        let (score, second, ..) = best[text.len()];
        // The path's pieces, from the last back to the first.
        let mut path = std::mem::take(&mut cache.path);
        path.clear();
        let mut i = text.len();
        while i > 0 {
            let (_, _, start, id, piece_score) = best[i];
            path.push((start, i, id, piece_score));
            i = start;
        }
        // Scores kept only where the ids may not be the pieces (an unknown character, or the
        // unknown token's own piece, fused with its neighbours).
        let scores_from = cache.scores.len();
        if path.iter().any(|p| self.gives_unk(p.2)) {
            cache.scores.extend(path.iter().rev().map(|p| p.3));
        }
        // Its ids, as `emit` gives them.
        let ids_from = cache.ids.len();
        let mut unk_last = false;
        let usable = self.path_ids(text, path.iter().rev().map(|p| (p.0, p.1, p.2)), &mut cache.ids, &mut unk_last).is_ok();
        let unk_first = self.byte_ids.is_none() && path.last().is_some_and(|p| self.gives_unk(p.2));
        let ids = (ids_from as u32, (cache.ids.len() - ids_from) as u32);
        let scores = (scores_from as u32, (cache.scores.len() - scores_from) as u32);
        let pieces = path.len() as u32;
        (cache.lattice, cache.path) = (best, path);
        Segment { ids, scores, pieces, score, margin: score - second, chars: text.chars().count() as u32, unk_first, unk_last, usable }
    }

    /// Whether the whole text's Viterbi, having reached `score` at the start of the segment,
    /// takes the remembered path through it. Summing from `score` rounds each step by at most
    /// half a unit in the last place (u |sum|, u = 2^-24 in f32), so a path's sum is off by at
    /// most (pieces) * u * (|score| + |its score|); the Viterbi's sum (rounding being monotone)
    /// is at least the best path's, so any other path it takes is within both errors of the
    /// best. A margin above that (twice over, for the f64 sums here) rules all others out.
    fn holds_from(&self, segment: &Segment, score: f64) -> bool {
        segment.usable && segment.margin > self.hold_scale(segment) * (score.abs() + segment.score.abs() + 1.0)
    }

    /// The factor of `holds_from`'s bound: 4 x (pieces) x u.
    fn hold_scale(&self, segment: &Segment) -> f64 {
        let unit = if self.float32_scores { (f32::EPSILON / 2.0) as f64 } else { f64::EPSILON / 2.0 };
        4.0 * (segment.chars + segment.pieces + 2) as f64 * unit
    }

    /// `segment` as the front keeps it, or None where it may not go there: an unknown
    /// character in it (its ids are not its pieces, or cannot be told), or a margin that never
    /// lets it hold. The limit is `holds_from` solved for |score|, shrunk by a millionth and
    /// rounded down to an f32, so that |score| < limit implies `holds_from` (the condition has a
    /// factor of two to spare over its proof: see there).
    fn front_segment(&self, segment: &Segment) -> Option<FrontSegment> {
        if !segment.usable || segment.scores.1 > 0 {
            return None;
        }
        let limit = (segment.margin / self.hold_scale(segment) - segment.score.abs() - 1.0) * (1.0 - 1e-6);
        if !(limit > 0.0) {
            return None;
        }
        let mut rounded = limit as f32; // to nearest (infinity stays infinite)
        if rounded as f64 > limit {
            rounded = f32::from_bits(rounded.to_bits() - 1);
        }
        Some(FrontSegment { ids: segment.ids.0, len: segment.ids.1, limit: rounded })
    }

    /// `encode_word` by looking up every span up to the longest piece (where the automaton
    /// could not be built; and the tests' reference).
    fn encode_word_by_lookup(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let n = text.len();
        // best[i]: (score, start of the last piece, its id or None for unknown) of text[..i].
        let mut best: Vec<(f64, usize, Option<u32>)> = vec![(f64::NEG_INFINITY, 0, None); n + 1];
        best[0].0 = 0.0;
        for start in text.char_indices().map(|(i, _)| i) {
            let base = best[start].0;
            if base == f64::NEG_INFINITY {
                continue;
            }
            let mut matched_single = false;
            let char_len = text[start..].chars().next().map_or(1, |c| c.len_utf8());
            let limit = n.min(start + self.max_piece_bytes);
            let mut end = start + char_len;
            while end <= limit {
                if text.is_char_boundary(end) {
                    if let Some(&(id, score)) = self.pieces.get(&text[start..end]).filter(|p| p.1.is_finite()) {
                        if end == start + char_len {
                            matched_single = true;
                        }
                        let s = self.add(base, score);
                        // Ties keep the earlier-found path, as SentencePiece's lattice does.
                        if s > best[end].0 {
                            best[end] = (s, start, Some(id));
                        }
                    }
                }
                end += 1;
            }
            if !matched_single {
                // No piece for this character: the unknown token covers it.
                let end = start + char_len;
                let s = self.add(base, self.unk_score);
                if s > best[end].0 {
                    best[end] = (s, start, None);
                }
            }
        }
        self.emit(text, &best, out, &mut false)
    }

    /// Walks the best path back from the end and appends its ids.
    /// `prev_unk`: whether the last id appended was a fused unknown (carried from segment to
    /// segment).
    fn emit(&self, text: &str, best: &[(f64, usize, Option<u32>)], out: &mut Vec<u32>, prev_unk: &mut bool) -> Result<()> {
        let n = text.len();
        let mut path = Vec::new();
        let mut i = n;
        while i > 0 {
            let (_, start, id) = best[i];
            path.push((start, i, id));
            i = start;
        }
        self.path_ids(text, path.into_iter().rev(), out, prev_unk).map_err(|(start, end)| {
            Error::new(ErrorKind::Encode, format!("{:?} is not covered by any piece and the model has no unknown token", &text[start..end]))
        })
    }

    /// Whether a node of a path gives the unknown id: an unknown character (None), or, with
    /// `fuse_unk`, the unknown token's own piece matched in the text (a Hugging Face Unigram
    /// model lets it be), which `tokenizers` fuses with the unknown characters next to it.
    fn gives_unk(&self, id: Option<u32>) -> bool {
        id.is_none() || (self.fuse_unk && id == self.unk)
    }

    /// Appends the ids of a path, its nodes `(start, end, piece)` in text order (`piece` None for
    /// an unknown character). With `fuse_unk`, a run of nodes that give the unknown id is one
    /// unknown id, carried across calls by `prev_unk`; with byte fallback, the bytes of the
    /// run's text, unless the run is the unknown token's piece alone (as `tokenizers` looks the
    /// fused text up in the vocabulary first). Err: the span of an unknown character when the
    /// model has neither an unknown token nor byte fallback.
    fn path_ids(&self, text: &str, nodes: impl Iterator<Item = (usize, usize, Option<u32>)>, out: &mut Vec<u32>, prev_unk: &mut bool) -> std::result::Result<(), (usize, usize)> {
        let mut nodes = nodes.peekable();
        while let Some((start, mut end, id)) = nodes.next() {
            if !self.gives_unk(id) {
                out.push(id.expect("a node that is not unknown has a piece"));
                *prev_unk = false;
                continue;
            }
            // The run of nodes giving the unknown id that starts here.
            let mut alone = true;
            while self.fuse_unk && nodes.peek().is_some_and(|n| self.gives_unk(n.2)) {
                end = nodes.next().expect("peeked").1;
                alone = false;
            }
            match (&self.byte_ids, self.unk) {
                (Some(_), Some(unk)) if alone && id.is_some() => {
                    out.push(unk);
                    *prev_unk = false;
                }
                (Some(bytes), _) => {
                    out.extend(text[start..end].bytes().map(|b| bytes[b as usize]));
                    *prev_unk = false;
                }
                (None, Some(unk)) => {
                    if !(self.fuse_unk && *prev_unk) {
                        out.push(unk);
                    }
                    *prev_unk = true;
                }
                (None, None) => return Err((start, end)),
            }
        }
        Ok(())
    }

    pub fn encode_words<'a>(&self, words: impl IntoIterator<Item = &'a str>) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for w in words {
            self.encode_word(w, &mut out)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(byte_fallback: bool) -> UnigramModel {
        let mut pieces = vec![("<unk>".to_string(), 0, 0.0), ("a".into(), 1, -1.0), ("b".into(), 2, -1.0), ("ab".into(), 3, -1.5), ("abc".into(), 4, -5.0), ("c".into(), 5, -1.0)];
        pieces.retain(|p| p.0 != "<unk>");
        if byte_fallback {
            pieces.extend((0..256u32).map(|b| (format!("<0x{b:02X}>"), 10 + b, -20.0)));
        }
        UnigramModel::new(pieces, Some(0), byte_fallback, true).unwrap()
    }

    #[test]
    fn the_automatons_lattice_is_the_lookups() {
        // Pieces over a small alphabet, with many equal scores (ties) and f32 rounding.
        let alphabet = ["a", "b", "é", "字", "▁", "x"];
        let mut next = crate::lcg(5);
        for round in 0..40 {
            let mut pieces: Vec<(String, u32, f64)> = Vec::new();
            for id in 0..60u32 {
                let len = 1 + next(4) as usize;
                let piece: String = (0..len).map(|_| alphabet[next(alphabet.len() as u64) as usize]).collect();
                if pieces.iter().all(|p| p.0 != piece) && piece != "x" {
                    pieces.push((piece, id + 1, -((next(6) + 1) as f64) * 0.7));
                }
            }
            let byte_fallback = round % 3 == 0;
            if byte_fallback {
                pieces.extend((0..256u32).map(|b| (format!("<0x{b:02X}>"), 100 + b, f64::NEG_INFINITY)));
            }
            let m = UnigramModel::new(pieces, Some(0), byte_fallback, round % 2 == 0).unwrap().with_float32_scores(round % 4 < 2);
            for k in 0..50 {
                let text: String = (0..k % 25).map(|_| alphabet[next(alphabet.len() as u64) as usize]).collect();
                let (mut fast, mut slow) = (Vec::new(), Vec::new());
                m.encode_word(&text, &mut fast).unwrap();
                m.encode_word_by_lookup(&text, &mut slow).unwrap();
                assert_eq!(fast, slow, "{text:?}");
            }
        }
    }

    #[test]
    fn viterbi_picks_the_most_likely_segmentation() {
        let m = model(false);
        // ab + c = -2.5 beats abc = -5 and a + b + c = -3.
        assert_eq!(m.encode_words(["abc"]).unwrap(), vec![3, 5]);
    }

    #[test]
    fn unknown_characters() {
        assert_eq!(model(false).encode_words(["xyab"]).unwrap(), vec![0, 3]);
        assert_eq!(model(true).encode_words(["é"]).unwrap(), vec![10 + 0xC3, 10 + 0xA9]);
    }

    #[test]
    fn the_unknown_pieces_own_string_fuses_with_unknown_characters() {
        // A Hugging Face model matches "<unk>" as its piece; `tokenizers` fuses it with the
        // unknown characters beside it: one unknown id, or with byte fallback the bytes of the
        // whole run, unless the piece stands alone.
        for byte_fallback in [false, true] {
            let mut pieces = vec![("<unk>".to_string(), 0, -10.0), ("a".into(), 1, -1.0)];
            if byte_fallback {
                pieces.extend((0..256u32).map(|b| (format!("<0x{b:02X}>"), 10 + b, -20.0)));
            }
            let m = UnigramModel::new(pieces, Some(0), byte_fallback, true).unwrap();
            let bytes = |s: &str| s.bytes().map(|b| 10 + b as u32).collect::<Vec<_>>();
            for word in ["x<unk>", "<unk>x", "<unk><unk>", "a<unk>a", "<unk>"] {
                let got = m.encode_words([word]).unwrap();
                let run = word.trim_matches('a');
                let fused = if !byte_fallback || run == "<unk>" { vec![0] } else { bytes(run) };
                let want: Vec<u32> = word.starts_with('a').then_some(1).into_iter().chain(fused).chain(word.ends_with('a').then_some(1)).collect();
                assert_eq!(got, want, "{word:?}, byte fallback {byte_fallback}");
                // The same from the remembered segments, and after a word that ends unknown.
                assert_eq!(m.encode_words([word]).unwrap(), want);
            }
        }
    }

    #[test]
    fn float32_scores_decide_ties_as_sentencepiece() {
        // Both splits of "...." score the same; SentencePiece's f32 sums round so that
        // "..." + "." wins, f64 keeps the first found, "." + "...".
        let pieces = vec![("a".to_string(), 1, -7.3f32 as f64), (".".into(), 2, -8.356_37f32 as f64), ("...".into(), 3, -9.194_641f32 as f64)];
        let m = UnigramModel::new(pieces, Some(0), false, true).unwrap();
        assert_eq!(m.encode_words(["a...."]).unwrap(), vec![1, 2, 3]);
        let m = m.with_float32_scores(true);
        assert_eq!(m.encode_words(["a...."]).unwrap(), vec![1, 3, 2]);
    }

    #[test]
    fn pieces_without_finite_score_only_serve_byte_fallback() {
        let mut pieces = vec![("a".to_string(), 1, -1.0)];
        pieces.extend((0..256u32).map(|b| (format!("<0x{b:02X}>"), 10 + b, f64::NEG_INFINITY)));
        let m = UnigramModel::new(pieces, Some(0), true, true).unwrap();
        // The literal text of a byte piece is not that piece; its characters fall back to bytes.
        let ids = m.encode_words(["<0x61>a"]).unwrap();
        assert_eq!(ids, "<0x61>".bytes().map(|b| 10 + b as u32).chain([1]).collect::<Vec<_>>());
    }

    /// Random pieces over a small alphabet with `▁` only at their start, so that the lattice
    /// falls apart at each `▁`.
    fn word_pieces(next: &mut impl FnMut(u64) -> u64, scores: &mut impl FnMut(&mut dyn FnMut(u64) -> u64) -> f64) -> Vec<(String, u32, f64)> {
        let letters = ["a", "b", "é", "字", "x"];
        let mut pieces: Vec<(String, u32, f64)> = Vec::new();
        for id in 0..80u32 {
            let len = 1 + next(4) as usize;
            let mut piece: String = (0..len).map(|_| letters[next(letters.len() as u64) as usize]).collect();
            if next(3) == 0 {
                piece.insert(0, SPACE_MARK);
            }
            if pieces.iter().all(|p| p.0 != piece) && piece != "x" {
                pieces.push((piece, id + 1, scores(next)));
            }
        }
        pieces.push(("▁".into(), 90, scores(next)));
        pieces
    }

    fn words_text(next: &mut impl FnMut(u64) -> u64, words: usize) -> String {
        let letters = ["a", "b", "é", "字", "x", "a", "b"];
        let mut text = String::new();
        for _ in 0..words {
            if next(8) != 0 {
                text.push(SPACE_MARK);
            }
            for _ in 0..1 + next(6) {
                text.push_str(letters[next(letters.len() as u64) as usize]);
            }
        }
        text
    }

    #[test]
    fn remembered_segments_give_the_whole_texts_lattice() {
        // Scores with many exact ties (multiples of 0.7) and near ties (random f32 values), in
        // f32 and f64, texts of up to 3,000 words (scores reach thousands, where f32 rounds
        // by a few thousandths), with unknown characters fused, as bytes, or an error.
        let mut next = crate::lcg(11);
        let (mut held, mut solved) = (0, 0);
        for round in 0..48 {
            let mut scores = |next: &mut dyn FnMut(u64) -> u64| -> f64 {
                if round % 2 == 0 {
                    -((next(6) + 1) as f64) * 0.7
                } else {
                    -(next(1 << 20) as f32 / (1 << 17) as f32 + 0.5) as f64
                }
            };
            let mut pieces = word_pieces(&mut next, &mut scores);
            let byte_fallback = round % 3 == 0;
            if byte_fallback {
                pieces.extend((0..256u32).map(|b| (format!("<0x{b:02X}>"), 100 + b, f64::NEG_INFINITY)));
            }
            let unk = (round % 5 != 4).then_some(0);
            let m = UnigramModel::new(pieces, unk, byte_fallback, round % 4 < 2).unwrap().with_float32_scores(round % 4 != 1);
            assert!(m.cuts_at_spaces);
            SEGMENTS_HELD.with(|n| n.set((0, 0)));
            for k in 0..12 {
                let words = [1, 3, 10, 40, 3000][k % 5];
                let text = words_text(&mut next, words);
                let mut slow = Vec::new();
                let expected = m.encode_word_by_lookup(&text, &mut slow).map(|_| slow);
                for _ in 0..2 {
                    let mut fast = Vec::new();
                    let got = m.encode_word(&text, &mut fast).map(|_| fast);
                    match (&got, &expected) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b, "round {round}: {text:?}"),
                        (Err(_), Err(_)) => {}
                        _ => panic!("round {round}: {got:?} against {expected:?} for {text:?}"),
                    }
                }
            }
            let (h, s) = SEGMENTS_HELD.with(|n| n.get());
            (held, solved) = (held + h, solved + s);
        }
        // Both ways were taken: remembered paths, and segments solved again because their
        // margin was within the rounding.
        assert!(held > 100_000 && solved > 1_000, "held {held}, solved {solved}");
    }

    #[test]
    fn a_near_tie_is_solved_from_the_texts_score() {
        // "ab" scores a hair below "a" + "b" in exact sums; in f32 from a score of thousands,
        // the rounding decides. After a long text the remembered path must not be trusted.
        let pieces = vec![
            ("▁".to_string(), 1, -1.0f32 as f64),
            ("a".into(), 2, -2.25f32 as f64),
            ("b".into(), 3, -2.5f32 as f64),
            ("ab".into(), 4, (-4.75f32 - 1e-6) as f64),
            ("c".into(), 5, -1.3f32 as f64),
        ];
        let m = UnigramModel::new(pieces, Some(0), false, true).unwrap().with_float32_scores(true);
        let mut next = crate::lcg(3);
        for words in [1, 10, 100, 1000, 5000] {
            let mut text = String::new();
            for _ in 0..words {
                text.push(SPACE_MARK);
                text.push_str(["ab", "c", "cc", "abc"][next(4) as usize]);
            }
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            m.encode_word(&text, &mut fast).unwrap();
            m.encode_word_by_lookup(&text, &mut slow).unwrap();
            assert_eq!(fast, slow, "{words} words");
        }
    }

    #[test]
    fn a_piece_with_an_inner_space_mark_keeps_the_lattice_whole() {
        let pieces = vec![("a".to_string(), 1, -1.0), ("a▁a".into(), 2, -1.5), ("▁".into(), 3, -1.0)];
        let m = UnigramModel::new(pieces, Some(0), false, true).unwrap();
        assert!(!m.cuts_at_spaces);
        // Cut at the `▁`, "a▁a" would be a + ▁ + a (-3).
        assert_eq!(m.encode_words(["a▁a"]).unwrap(), vec![2]);
    }

    #[test]
    fn positive_scores_keep_the_lattice_whole() {
        // Partial sums that swing by 2^20 round by far more than the words' scores suggest
        // ("a" + "b" cancel): the remembered path of "▁abc" would be trusted wrongly.
        let f = |x: f64| x as f32 as f64;
        let pieces = vec![("d".to_string(), 1, f(-0.89)), ("▁abc".into(), 2, -1.0), ("▁".into(), 3, 0.0), ("a".into(), 4, 1048576.0), ("b".into(), 5, -1048576.0), ("c".into(), 6, -1.0 - 2f64.powi(-17))];
        let m = UnigramModel::new(pieces, Some(0), false, true).unwrap().with_float32_scores(true);
        assert!(!m.cuts_at_spaces);
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        m.encode_word("d▁abc", &mut fast).unwrap();
        m.encode_word_by_lookup("d▁abc", &mut slow).unwrap();
        assert_eq!(fast, slow);
        assert_eq!(fast, vec![1, 3, 4, 5, 6]);
    }

    #[test]
    fn overflowing_sums_give_the_whole_texts_path() {
        let pieces = vec![("▁".to_string(), 1, -2e38), ("a".into(), 2, -1.0), ("b".into(), 3, -1.0)];
        let m = UnigramModel::new(pieces, Some(0), false, true).unwrap().with_float32_scores(true);
        assert!(m.cuts_at_spaces);
        for text in ["a▁a▁b", "▁a▁a▁a▁b▁", "ab"] {
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            m.encode_word(text, &mut fast).unwrap();
            m.encode_word_by_lookup(text, &mut slow).unwrap();
            assert_eq!(fast, slow, "{text:?}");
        }
    }
}
