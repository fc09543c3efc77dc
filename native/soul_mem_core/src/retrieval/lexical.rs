//! The lexical channel: an incremental BM25F index over each note's words (jieba search
//! segmentation for Chinese, whole words for Latin script; see [`crate::text::search_terms`]).
//!
//! Why our own scorer rather than a search-engine crate: the index must live inside a
//! character's retrieval snapshot, change by one note at a time in well under a millisecond
//! at 100k notes, and score a few query words against every note in one pass with the
//! same tokenizer the rest of the core uses. A segment-based engine (tantivy) commits in
//! batches, keeps its own files and threads, and would still need our jieba tokenizer
//! plugged in; BM25F itself is a dozen lines once the postings exist.
//!
//! Fields (from [`node_texts`]) are weighted before length normalisation (BM25F): names and
//! aliases count [`NAME_BOOST`] times, everything else once. Removal is lazy: a removed or
//! replaced note's postings stay until the dead share passes one half, then the postings are
//! compacted (amortised O(1) per change).

use super::field_texts::{node_texts, FieldKind};
use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::IdMap;
use crate::model::{MemoryId, MemoryNote, NodeKind};
use crate::text::search_terms;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// BM25 term-frequency saturation `k1`.
pub const K1: f32 = 1.2;
/// BM25 length normalisation `b`.
pub const B: f32 = 0.75;
/// Weight of name and alias words against other fields (BM25F field boost).
pub const NAME_BOOST: f32 = 2.0;
/// Largest text of one note the index accepts (bytes over all fields); a larger note is
/// refused with an error naming it and left out of the lexical channel.
pub const MAX_NOTE_TEXT_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone)]
struct Doc {
    id: MemoryId,
    /// Bumped on every (re)use of the slot: postings with another generation are stale.
    generation: u32,
    live: bool,
    /// Weighted length (Σ field boost × words).
    len: f32,
    /// Distinct term ids with their field-weighted frequency, by id (df bookkeeping on
    /// removal, and the words kept for a note that comes back: [`Recent`]).
    terms: Vec<(u32, f32)>,
    fingerprint: u64,
    /// The graph's content revision of the note when it was indexed (0: unknown), so a sync
    /// skips an unchanged note without collecting its text.
    revision: u64,
}

#[derive(Debug, Clone, Copy)]
struct Posting {
    slot: u32,
    generation: u32,
    /// Field-weighted term frequency.
    tf: f32,
}

/// How many removed notes keep their segmented words ([`Recent`]).
pub const RECENT_NOTES: usize = 16_384;

/// The words of a removed note: its text's fingerprint, weighted length and `(term,
/// frequency)` pairs. Term ids stay valid: the vocabulary only grows.
#[derive(Debug, Clone)]
struct Segmented {
    fingerprint: u64,
    len: f32,
    terms: Vec<(u32, f32)>,
}

/// The segmented words of the [`RECENT_NOTES`] notes removed last, by id: working memory
/// releases notes and loads them again as the conversation comes back to them, and a note
/// whose text did not change is then indexed without segmenting it again (jieba is most of
/// the cost of adding a note). About 300 bytes per note.
#[derive(Debug, Clone)]
struct Recent(lru::LruCache<MemoryId, Segmented>);

impl Default for Recent {
    fn default() -> Self {
        Recent(lru::LruCache::new(
            std::num::NonZeroUsize::new(RECENT_NOTES).unwrap_or(std::num::NonZeroUsize::MIN),
        ))
    }
}

/// An incremental BM25F index of notes, keyed by [`MemoryId`].
#[derive(Debug, Clone, Default)]
pub struct LexicalIndex {
    vocab: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
    /// Live documents containing each term.
    df: Vec<u32>,
    docs: Vec<Doc>,
    by_id: IdMap<u32>,
    free: Vec<u32>,
    live: usize,
    total_len: f64,
    stale_postings: usize,
    total_postings: usize,
    recent: Recent,
}

/// A note's lexical text: `(field boost, text)` per field (procedures have none: they are
/// reached through actions, never as memories).
pub fn note_fields(note: &MemoryNote) -> Vec<(f32, String)> {
    if note.kind() == NodeKind::Procedure {
        return Vec::new();
    }
    node_texts(note)
        .into_iter()
        .map(|(k, t)| {
            let boost = if k == FieldKind::SemName {
                NAME_BOOST
            } else {
                1.0
            };
            (boost, t)
        })
        .collect()
}

fn fingerprint(fields: &[(f32, String)]) -> u64 {
    let mut h = DefaultHasher::new();
    for (w, t) in fields {
        w.to_bits().hash(&mut h);
        t.hash(&mut h);
    }
    h.finish()
}

/// Notes the index refused while syncing, with the reason (e.g. text over
/// [`MAX_NOTE_TEXT_BYTES`]).
pub type Refusals = Vec<(MemoryId, Error)>;

impl LexicalIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of indexed notes.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no note is indexed.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Number of distinct terms ever seen.
    pub fn vocabulary(&self) -> usize {
        self.vocab.len()
    }

    /// True when `id` is indexed.
    pub fn contains(&self, id: &MemoryId) -> bool {
        self.by_id.contains_key(id)
    }

    /// Adds or replaces the note `id` with the weighted `fields`. Unchanged text costs O(1)
    /// after hashing. Errors (and leaves the index unchanged) when the text is larger than
    /// [`MAX_NOTE_TEXT_BYTES`]; `readable` names the note in the error.
    ///
    /// Complexity: O(words of the note) (jieba segmentation dominates).
    pub fn upsert(&mut self, id: MemoryId, readable: &str, fields: &[(f32, String)]) -> Result<()> {
        let bytes: usize = fields.iter().map(|(_, t)| t.len()).sum();
        if bytes > MAX_NOTE_TEXT_BYTES {
            return Err(Error::InvalidValue {
                node: readable.to_owned(),
                field: "text".into(),
                message: format!(
                    "{bytes} bytes of text, more than the lexical index accepts per note \
                     ({MAX_NOTE_TEXT_BYTES}); the note is left out of word search"
                ),
            });
        }
        let fp = fingerprint(fields);
        if let Some(&slot) = self.by_id.get(&id) {
            if self
                .docs
                .get(slot as usize)
                .is_some_and(|d| d.fingerprint == fp)
            {
                return Ok(());
            }
            self.remove(&id);
        }
        let (terms, len) = match self.recent.0.pop(&id) {
            Some(seg) if seg.fingerprint == fp => (seg.terms, seg.len),
            _ => self.segment(fields),
        };
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.docs.push(Doc {
                    id,
                    generation: 0,
                    live: false,
                    len: 0.0,
                    terms: Vec::new(),
                    fingerprint: 0,
                    revision: 0,
                });
                (self.docs.len() - 1) as u32
            }
        };
        let Some(doc) = self.docs.get_mut(slot as usize) else {
            return Err(Error::invalid_argument("lexical", "slot out of range"));
        };
        doc.id = id;
        doc.generation = doc.generation.wrapping_add(1);
        doc.live = true;
        doc.len = len;
        doc.fingerprint = fp;
        doc.revision = 0;
        let generation = doc.generation;
        for &(t, f) in &terms {
            if let (Some(p), Some(d)) = (
                self.postings.get_mut(t as usize),
                self.df.get_mut(t as usize),
            ) {
                p.push(Posting {
                    slot,
                    generation,
                    tf: f,
                });
                *d += 1;
                self.total_postings += 1;
            }
        }
        if let Some(doc) = self.docs.get_mut(slot as usize) {
            doc.terms = terms;
        }
        self.by_id.insert(id, slot);
        self.live += 1;
        self.total_len += f64::from(len);
        Ok(())
    }

    /// The distinct terms of `fields` (new ones added to the vocabulary) with their
    /// field-weighted frequencies, by term id, and the weighted length.
    /// Complexity: O(words) (jieba segmentation dominates).
    fn segment(&mut self, fields: &[(f32, String)]) -> (Vec<(u32, f32)>, f32) {
        let mut tf: HashMap<u32, f32> = HashMap::new();
        let mut len = 0f32;
        for (boost, text) in fields {
            for term in search_terms(text) {
                let next = self.vocab.len() as u32;
                let t = *self.vocab.entry(term).or_insert(next);
                if t as usize == self.postings.len() {
                    self.postings.push(Vec::new());
                    self.df.push(0);
                }
                *tf.entry(t).or_default() += boost;
                len += boost;
            }
        }
        let mut terms: Vec<(u32, f32)> = tf.into_iter().collect();
        terms.sort_unstable_by_key(|p| p.0);
        (terms, len)
    }

    /// Removes the note `id`; false when it was not indexed. Its postings are dropped lazily.
    /// Complexity: O(distinct words of the note), amortised.
    pub fn remove(&mut self, id: &MemoryId) -> bool {
        let Some(slot) = self.by_id.remove(id) else {
            return false;
        };
        if let Some(doc) = self.docs.get_mut(slot as usize) {
            doc.live = false;
            for &(t, _) in &doc.terms {
                if let Some(d) = self.df.get_mut(t as usize) {
                    *d = d.saturating_sub(1);
                }
            }
            self.stale_postings += doc.terms.len();
            self.total_len -= f64::from(doc.len);
            let seg = Segmented {
                fingerprint: doc.fingerprint,
                len: doc.len,
                terms: std::mem::take(&mut doc.terms),
            };
            self.recent.0.put(*id, seg);
        }
        self.free.push(slot);
        self.live = self.live.saturating_sub(1);
        if self.stale_postings * 2 > self.total_postings {
            self.compact();
        }
        true
    }

    /// Drops stale postings. Complexity: O(postings).
    fn compact(&mut self) {
        let docs = &self.docs;
        for list in &mut self.postings {
            list.retain(|p| {
                docs.get(p.slot as usize)
                    .is_some_and(|d| d.live && d.generation == p.generation)
            });
        }
        self.total_postings = self.postings.iter().map(Vec::len).sum();
        self.stale_postings = 0;
    }

    /// Brings the index in line with `graph`: notes whose text changed are re-indexed, new
    /// ones added, vanished ones removed; unchanged notes cost a hash of their text.
    /// Returns the notes refused (left out). Complexity: O(total text hashed) + O(words of the
    /// changed notes).
    pub fn sync(&mut self, graph: &MemoryGraph) -> Refusals {
        let mut refused = Vec::new();
        let mut present: IdMap<()> =
            IdMap::with_capacity_and_hasher(graph.len(), Default::default());
        for note in graph.notes() {
            present.insert(note.id, ());
            let rev = graph.content_revision(&note.id).unwrap_or(0);
            let slot = self.by_id.get(&note.id).map(|&s| s as usize);
            if rev != 0 && slot.is_some_and(|s| self.docs[s].revision == rev) {
                continue;
            }
            let fields = note_fields(note);
            if fields.is_empty() {
                self.remove(&note.id);
                continue;
            }
            match self.upsert(note.id, &note.readable_id, &fields) {
                Ok(()) => {
                    if let Some(&s) = self.by_id.get(&note.id) {
                        self.docs[s as usize].revision = rev;
                    }
                }
                Err(e) => {
                    self.remove(&note.id);
                    refused.push((note.id, e));
                }
            }
        }
        let gone: Vec<MemoryId> = self
            .by_id
            .keys()
            .filter(|id| !present.contains_key(id))
            .copied()
            .collect();
        for id in gone {
            self.remove(&id);
        }
        refused
    }

    /// BM25F score of every indexed note sharing a word with `terms` (query words; repeats
    /// count once), as `(note id, score)` in no particular order. Unknown words and an empty
    /// query give nothing. IDF is `ln(1 + (N − df + 0.5)/(df + 0.5))` (never negative).
    ///
    /// Complexity: O(Σ postings of the query's words).
    pub fn score(&self, terms: &[String]) -> Vec<(MemoryId, f32)> {
        let mut acc: HashMap<u32, f32> = HashMap::new();
        self.score_into(terms, |slot, s| *acc.entry(slot).or_default() += s);
        acc.into_iter()
            .filter_map(|(slot, s)| self.docs.get(slot as usize).map(|d| (d.id, s)))
            .collect()
    }

    /// Calls `add(slot, contribution)` for every live posting of the query's words; slots
    /// map to notes through [`Self::slot_id`]. The building block of [`Self::score`] for
    /// callers that keep their own dense accumulator.
    pub fn score_into(&self, terms: &[String], mut add: impl FnMut(u32, f32)) {
        if self.live == 0 {
            return;
        }
        let n = self.live as f32;
        let avg = (self.total_len / self.live as f64).max(1e-6) as f32;
        let mut seen: Vec<u32> = Vec::with_capacity(terms.len());
        for term in terms {
            let Some(&t) = self.vocab.get(term) else {
                continue;
            };
            if seen.contains(&t) {
                continue;
            }
            seen.push(t);
            let df = self.df.get(t as usize).copied().unwrap_or(0) as f32;
            if df == 0.0 {
                continue;
            }
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            let Some(list) = self.postings.get(t as usize) else {
                continue;
            };
            for p in list {
                let Some(d) = self.docs.get(p.slot as usize) else {
                    continue;
                };
                if !d.live || d.generation != p.generation {
                    continue;
                }
                let norm = K1 * (1.0 - B + B * d.len / avg);
                add(p.slot, idf * p.tf * (K1 + 1.0) / (p.tf + norm));
            }
        }
    }

    /// The note held in `slot` (live or not), if the slot exists.
    pub fn slot_id(&self, slot: u32) -> Option<MemoryId> {
        self.docs.get(slot as usize).map(|d| d.id)
    }

    /// Number of slots (the bound of slot numbers handed to [`Self::score_into`]).
    pub fn slots(&self) -> usize {
        self.docs.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use uuid::Uuid;

    fn id(n: u128) -> MemoryId {
        MemoryId(Uuid::from_u128(n))
    }

    fn f(t: &str) -> Vec<(f32, String)> {
        vec![(1.0, t.to_owned())]
    }

    fn q(t: &str) -> Vec<String> {
        search_terms(t)
    }

    fn top(idx: &LexicalIndex, query: &str) -> Vec<MemoryId> {
        let mut s = idx.score(&q(query));
        s.sort_by(|a, b| b.1.total_cmp(&a.1));
        s.into_iter().map(|x| x.0).collect()
    }

    #[test]
    fn rare_words_outrank_common_ones_and_updates_apply() {
        let mut idx = LexicalIndex::new();
        idx.upsert(id(1), "a", &f("我和姥爷在所城里修座钟"))
            .unwrap();
        idx.upsert(id(2), "b", &f("我在码头开岸桥")).unwrap();
        idx.upsert(id(3), "c", &f("我和白露吃夜宵")).unwrap();
        assert_eq!(top(&idx, "座钟")[0], id(1));
        assert_eq!(top(&idx, "码头")[0], id(2));
        assert!(idx.score(&q("冰岛极光")).is_empty());
        // Replace, then remove: the old words no longer match.
        idx.upsert(id(1), "a", &f("冬泳队的老队长")).unwrap();
        assert!(top(&idx, "座钟").is_empty());
        assert_eq!(top(&idx, "老队长")[0], id(1));
        assert!(idx.remove(&id(2)));
        assert!(!idx.remove(&id(2)));
        assert!(top(&idx, "码头").is_empty());
        assert_eq!(idx.len(), 2);
    }

    #[test]
    fn empty_queries_and_oversized_notes() {
        let mut idx = LexicalIndex::new();
        idx.upsert(id(1), "a", &f("麻辣烫")).unwrap();
        assert!(idx.score(&q("😀！…")).is_empty());
        let big = "字".repeat(MAX_NOTE_TEXT_BYTES / 3 + 10);
        let e = idx.upsert(id(2), "sem_big", &f(&big)).unwrap_err();
        assert!(e.to_string().contains("sem_big"), "{e}");
        assert_eq!(idx.len(), 1);
        assert_eq!(top(&idx, "麻辣烫"), vec![id(1)]);
    }

    #[test]
    fn a_note_that_comes_back_is_indexed_as_it_was() {
        // Removed notes keep their words: one that comes back with the same text scores as
        // in an index that never lost it; one that comes back changed is segmented anew.
        let text = |i: u128| format!("第{i}次 冬泳 码头 座钟{}", i % 7);
        let mut idx = LexicalIndex::new();
        let mut kept = LexicalIndex::new();
        for i in 0..30u128 {
            idx.upsert(id(i), "n", &f(&text(i))).unwrap();
            kept.upsert(id(i), "n", &f(&text(i))).unwrap();
        }
        for i in 0..20u128 {
            idx.remove(&id(i));
        }
        assert_eq!(idx.recent.0.len(), 20);
        for i in 0..10u128 {
            idx.upsert(id(i), "n", &f(&text(i))).unwrap();
        }
        idx.upsert(id(10), "n", &f("老队长的小船")).unwrap();
        for i in 11..20u128 {
            kept.remove(&id(i));
        }
        kept.upsert(id(10), "n", &f("老队长的小船")).unwrap();
        assert_eq!(
            idx.recent.0.len(),
            9,
            "the ten that came back left the memo"
        );
        for query in ["冬泳 座钟3", "码头", "小船"] {
            let mut a = idx.score(&q(query));
            let mut b = kept.score(&q(query));
            a.sort_by_key(|x| x.0);
            b.sort_by_key(|x| x.0);
            assert!(!a.is_empty());
            assert_eq!(a.len(), b.len(), "{query}");
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.0, y.0);
                assert!((x.1 - y.1).abs() < 1e-5, "{query}: {} vs {}", x.1, y.1);
            }
        }
        assert!(top(&idx, "座钟3").contains(&id(3)));
        assert!(!top(&idx, "座钟3").contains(&id(10)));
    }

    #[test]
    fn compaction_keeps_scores_equal_to_a_fresh_index() {
        let mut idx = LexicalIndex::new();
        for i in 0..50u128 {
            idx.upsert(id(i), "n", &f(&format!("第{i}次 冬泳 码头 座钟{}", i % 7)))
                .unwrap();
        }
        for i in 0..40u128 {
            idx.remove(&id(i));
        }
        let mut fresh = LexicalIndex::new();
        for i in 40..50u128 {
            fresh
                .upsert(id(i), "n", &f(&format!("第{i}次 冬泳 码头 座钟{}", i % 7)))
                .unwrap();
        }
        let mut a = idx.score(&q("冬泳 座钟3"));
        let mut b = fresh.score(&q("冬泳 座钟3"));
        a.sort_by_key(|x| x.0);
        b.sort_by_key(|x| x.0);
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.0, y.0);
            assert!((x.1 - y.1).abs() < 1e-5);
        }
    }
}
