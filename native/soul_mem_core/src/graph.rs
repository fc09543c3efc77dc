//! The in-memory graph of one character: notes with their outgoing links, a readable-id index,
//! and a buffer of links whose target has not been loaded yet.

use crate::error::{Error, Result};
use crate::model::{IdHasher, IdMap, IdSet};
use crate::model::{LinkId, LinkKind, MemoryId, MemoryLink, MemoryNote, NodeKind};
use indexmap::IndexMap;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

/// One state of one open store (see `Store::sync_tag`): a graph holding the tag of the store's
/// current state, plus its change log, is exactly what the store holds once the logged notes
/// are rewritten. Opaque outside the crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyncTag {
    /// Process-unique id of the open store handle.
    pub(crate) store: u64,
    /// The store's count of writes to note and link rows, at the time of the sync.
    pub(crate) generation: u64,
}

/// How a note changed since the graph was last synced with a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoteChange {
    /// Its row (payload, statistics or outgoing links) must be rewritten, in place. A note
    /// that left the graph since has this mark too: its row must go.
    Updated,
    /// It entered the graph since (at the end of the dense order): its row, if any, must be
    /// replaced by a new one at the end of the stored order.
    Inserted,
}

/// Notes changed since the last sync. Only kept while the graph carries a [`SyncTag`]: an
/// untracked graph is always written whole, so logging its changes would only cost memory.
#[derive(Debug, Clone, Default)]
struct ChangeLog {
    synced: Option<SyncTag>,
    notes: IdMap<NoteChange>,
}

impl ChangeLog {
    fn touch(&mut self, id: MemoryId) {
        if self.synced.is_some() {
            self.notes.entry(id).or_insert(NoteChange::Updated);
        }
    }

    fn inserted(&mut self, id: MemoryId) {
        if self.synced.is_some() {
            self.notes.insert(id, NoteChange::Inserted);
        }
    }
}

/// Counts of a graph, by kind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GraphStats {
    /// Number of notes.
    pub nodes: usize,
    /// Number of attached links.
    pub links: usize,
    /// Links buffered because their target is not loaded.
    pub pending_links: usize,
    /// Notes per kind (every kind present, possibly 0).
    pub nodes_by_kind: BTreeMap<&'static str, usize>,
    /// Links per kind (every kind present, possibly 0).
    pub links_by_kind: BTreeMap<&'static str, usize>,
}

/// One character's memory graph.
///
/// Notes keep insertion order (so dense positions `0..len` are stable between mutations and
/// exports are deterministic); links live on their source note, as in the seed. A link whose
/// target is absent waits in a buffer keyed by the target's UUID and is attached when that
/// note arrives — never by a positional index that removal could reuse.
///
/// A graph loaded from (or checkpointed to) a store remembers that store's state (a
/// [`SyncTag`]) and logs which notes every mutation touches from then on, so the next
/// `Store::checkpoint` rewrites only those. A clone carries the tag and the log: if both
/// copies are checkpointed, the second finds the store's state moved on and writes in full.
#[derive(Debug, Clone)]
pub struct MemoryGraph {
    character: String,
    notes: IndexMap<MemoryId, MemoryNote, IdHasher>,
    readable: HashMap<String, MemoryId>,
    pending: IdMap<Vec<MemoryLink>>,
    version: u64,
    log: ChangeLog,
    // Content revision of every note (see `content_revision`).
    content_revs: IdMap<u64>,
}

/// Source of content revisions: process-wide, so equal revisions mean equal content even
/// across clones of a graph that were changed apart.
static NEXT_CONTENT_REV: AtomicU64 = AtomicU64::new(1);

fn next_content_rev() -> u64 {
    NEXT_CONTENT_REV.fetch_add(1, Ordering::Relaxed)
}

impl MemoryGraph {
    /// An empty graph for `character`.
    pub fn new(character: impl Into<String>) -> Self {
        MemoryGraph {
            character: character.into(),
            notes: IndexMap::default(),
            readable: HashMap::new(),
            pending: Default::default(),
            version: 0,
            log: ChangeLog::default(),
            content_revs: Default::default(),
        }
    }

    /// The character this graph belongs to.
    pub fn character(&self) -> &str {
        &self.character
    }

    /// A counter bumped by every mutation; derived structures (CSR snapshots, similarity
    /// indexes) compare it to know when to rebuild.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Number of notes.
    pub fn len(&self) -> usize {
        self.notes.len()
    }

    /// True when there are no notes.
    pub fn is_empty(&self) -> bool {
        self.notes.is_empty()
    }

    /// Notes in insertion order.
    pub fn notes(&self) -> impl ExactSizeIterator<Item = &MemoryNote> {
        self.notes.values()
    }

    /// The note at dense position `index` (`0..len`). Complexity: O(1).
    pub fn note_at(&self, index: usize) -> Option<&MemoryNote> {
        self.notes.get_index(index).map(|(_, n)| n)
    }

    /// Dense position of a note. Complexity: O(1).
    pub fn index_of(&self, id: &MemoryId) -> Option<usize> {
        self.notes.get_index_of(id)
    }

    /// Note by UUID. Complexity: O(1).
    pub fn get(&self, id: &MemoryId) -> Option<&MemoryNote> {
        self.notes.get(id)
    }

    /// Mutable note by UUID. Link edits must go through [`MemoryGraph::add_link`] and friends so
    /// the buffers stay consistent; callers may change payload, tags and statistics. The note
    /// is logged as changed, for the next incremental checkpoint.
    pub fn get_mut(&mut self, id: &MemoryId) -> Option<&mut MemoryNote> {
        self.version += 1;
        let note = self.notes.get_mut(id)?;
        self.log.touch(*id);
        self.content_revs.insert(*id, next_content_rev());
        Some(note)
    }

    /// The note's content revision: a process-unique number that changes whenever its content
    /// (type and payload, tags, flags) may have changed — [`Self::insert`], [`Self::get_mut`],
    /// [`Self::upsert`] — and not for link edits or retrieval statistics. Derived indexes
    /// keyed by it (vectors, word index) skip unchanged notes without reading their text.
    /// Complexity: O(1).
    pub fn content_revision(&self, id: &MemoryId) -> Option<u64> {
        self.content_revs.get(id).copied()
    }

    /// Records one retrieval of `id` at `at` (count and access time). Statistics are not
    /// structure, so this does not bump [`Self::version`] and derived indexes stay valid; the
    /// note is logged as changed for write-back. Returns false when the note is absent.
    pub fn record_retrieval(&mut self, id: &MemoryId, at: chrono::DateTime<chrono::Utc>) -> bool {
        match self.notes.get_mut(id) {
            Some(n) => {
                n.record_retrieval(at);
                self.log.touch(*id);
                true
            }
            None => false,
        }
    }

    /// Note by readable id. Complexity: O(1).
    pub fn get_by_readable(&self, readable_id: &str) -> Option<&MemoryNote> {
        self.readable
            .get(readable_id)
            .and_then(|id| self.notes.get(id))
    }

    /// Resolves a readable id or a UUID string to a note id.
    pub fn resolve(&self, id: &str) -> Option<MemoryId> {
        if let Some(found) = self.readable.get(id) {
            return Some(*found);
        }
        uuid::Uuid::parse_str(id)
            .ok()
            .map(MemoryId)
            .filter(|m| self.notes.contains_key(m))
    }

    /// The readable id of a note, or its UUID string when it is not in the graph.
    pub fn readable_of(&self, id: &MemoryId) -> String {
        self.notes
            .get(id)
            .map(|n| n.readable_id.clone())
            .unwrap_or_else(|| id.to_string())
    }

    /// Inserts a note with its outgoing links. Links to absent targets are buffered; links
    /// buffered earlier that point at this note are attached to their sources.
    ///
    /// Errors (and changes nothing) when the UUID or readable id is already present.
    pub fn insert(&mut self, mut note: MemoryNote) -> Result<()> {
        if self.notes.contains_key(&note.id) || self.readable.contains_key(&note.readable_id) {
            return Err(Error::DuplicateId {
                id: note.readable_id,
                index: None,
            });
        }
        let links = std::mem::take(&mut note.links);
        let id = note.id;
        self.readable.insert(note.readable_id.clone(), id);
        self.notes.insert(id, note);
        self.log.inserted(id);
        self.content_revs.insert(id, next_content_rev());
        for link in links {
            self.attach_or_buffer(link);
        }
        if let Some(waiting) = self.pending.remove(&id) {
            for link in waiting {
                self.attach_or_buffer(link);
            }
        }
        self.version += 1;
        Ok(())
    }

    fn attach_or_buffer(&mut self, link: MemoryLink) {
        // Attached or pending, the link is stored with its source.
        self.log.touch(link.from);
        if self.notes.contains_key(&link.to) {
            if let Some(src) = self.notes.get_mut(&link.from) {
                src.links.push(link);
                return;
            }
        }
        self.pending.entry(link.to).or_default().push(link);
    }

    /// Adds a link. Its source must exist; a missing target buffers it (see [`Self::insert`]).
    pub fn add_link(&mut self, link: MemoryLink) -> Result<()> {
        if !self.notes.contains_key(&link.from) {
            return Err(Error::NotFound(format!(
                "link source {:?}",
                self.readable_of(&link.from)
            )));
        }
        validate_intensity(&self.readable_of(&link.from), link.intensity)?;
        self.attach_or_buffer(link);
        self.version += 1;
        Ok(())
    }

    /// Removes a link by id from its source note. Returns it when found.
    /// Complexity: O(out-degree of the source) after the caller names the source.
    pub fn remove_link(&mut self, from: &MemoryId, link: &LinkId) -> Option<MemoryLink> {
        let note = self.notes.get_mut(from)?;
        let pos = note.links.iter().position(|l| l.id == *link)?;
        self.version += 1;
        self.log.touch(*from);
        Some(note.links.remove(pos))
    }

    /// Sets the intensity of the link `link` of note `from` (LTP/LTD). Errors, changing
    /// nothing, on a non-finite or negative intensity; returns false when the link is absent.
    /// Complexity: O(out-degree of the source).
    pub fn set_link_intensity(
        &mut self,
        from: &MemoryId,
        link: &LinkId,
        intensity: f64,
    ) -> Result<bool> {
        validate_intensity(&self.readable_of(from), intensity)?;
        let Some(l) = self
            .notes
            .get_mut(from)
            .and_then(|n| n.links.iter_mut().find(|l| l.id == *link))
        else {
            return Ok(false);
        };
        l.intensity = intensity;
        self.version += 1;
        self.log.touch(*from);
        Ok(true)
    }

    /// What [`Self::upsert`] would store for `note`: `note` itself when its id is new; else
    /// the existing note with `note`'s type, tags, core flag and outgoing links, keeping its
    /// history (creation and access times, retrieval count). Every link must start at the
    /// note and end at a note of the graph (or itself).
    ///
    /// Complexity: O(out-degree).
    pub fn prepare_upsert(&self, note: MemoryNote) -> Result<MemoryNote> {
        for (i, l) in note.links.iter().enumerate() {
            if l.from != note.id {
                return Err(Error::invalid_value(
                    &note.readable_id,
                    &format!("mem_links[{i}].from"),
                    "must be the note itself",
                ));
            }
            if l.to != note.id && !self.notes.contains_key(&l.to) {
                return Err(Error::MissingLinkTarget {
                    node: note.readable_id.clone(),
                    target: self.readable_of(&l.to),
                });
            }
            validate_intensity(&note.readable_id, l.intensity)?;
        }
        Ok(match self.notes.get(&note.id) {
            None => note,
            Some(old) => MemoryNote {
                retrieval_count: old.retrieval_count,
                create_time: old.create_time,
                last_accessed_time: old.last_accessed_time,
                ..note
            },
        })
    }

    /// Inserts a note prepared by [`Self::prepare_upsert`], or replaces the one with its id
    /// (links pointing at it stay). Returns true when it replaced.
    ///
    /// Complexity: O(out-degree).
    pub fn upsert(&mut self, note: MemoryNote) -> Result<bool> {
        let note = self.prepare_upsert(note)?;
        match self.notes.get_mut(&note.id) {
            None => self.insert(note).map(|()| false),
            Some(slot) => {
                let id = note.id;
                *slot = note;
                self.version += 1;
                self.log.touch(id);
                self.content_revs.insert(id, next_content_rev());
                Ok(true)
            }
        }
    }

    /// Removes a note, its outgoing links and every link pointing at it.
    /// Complexity: O(nodes + links) — removal is rare (archiving), lookups are not.
    pub fn remove(&mut self, id: &MemoryId) -> Option<MemoryNote> {
        self.remove_many(std::slice::from_ref(id), false).pop()
    }

    /// Removes the notes `ids` (absent ones are skipped) with their outgoing links, in one
    /// pass, and returns them in graph order. Links from the remaining notes to them are
    /// dropped, or with `keep_incoming` buffered as pending links — as a store keeps them —
    /// so they attach again when the note is inserted again (working memory releasing notes).
    ///
    /// Complexity: O(nodes + links) for the whole batch.
    pub fn remove_many(&mut self, ids: &[MemoryId], keep_incoming: bool) -> Vec<MemoryNote> {
        let set: IdSet = ids
            .iter()
            .filter(|id| self.notes.contains_key(*id))
            .copied()
            .collect();
        if set.is_empty() {
            return Vec::new();
        }
        let mut removed = Vec::with_capacity(set.len());
        let mut kept =
            IndexMap::with_capacity_and_hasher(self.notes.len() - set.len(), IdHasher::default());
        for (id, note) in std::mem::take(&mut self.notes) {
            if set.contains(&id) {
                removed.push(note);
            } else {
                kept.insert(id, note);
            }
        }
        self.notes = kept;
        for note in &removed {
            self.readable.remove(&note.readable_id);
            self.log.touch(note.id);
            self.content_revs.remove(&note.id);
        }
        for (from, other) in self.notes.iter_mut() {
            if !other.links.iter().any(|l| set.contains(&l.to)) {
                continue;
            }
            self.log.touch(*from);
            let (gone, stay): (Vec<MemoryLink>, Vec<MemoryLink>) = std::mem::take(&mut other.links)
                .into_iter()
                .partition(|l| set.contains(&l.to));
            other.links = stay;
            if keep_incoming {
                for l in gone {
                    self.pending.entry(l.to).or_default().push(l);
                }
            }
        }
        for waiting in self.pending.values_mut() {
            waiting.retain(|l| !set.contains(&l.from));
        }
        self.pending.retain(|_, v| !v.is_empty());
        self.version += 1;
        removed
    }

    /// Drops the links buffered for the absent note `to` (it was deleted for good); their
    /// sources are logged as changed. Returns them. Complexity: O(their number).
    pub fn remove_pending_to(&mut self, to: &MemoryId) -> Vec<MemoryLink> {
        let gone = self.pending.remove(to).unwrap_or_default();
        for l in &gone {
            self.log.touch(l.from);
        }
        if !gone.is_empty() {
            self.version += 1;
        }
        gone
    }

    /// Links buffered for absent targets, grouped by target.
    pub fn pending_links(&self) -> impl Iterator<Item = &MemoryLink> {
        self.pending.values().flatten()
    }

    /// Links buffered for the absent note `to`. Complexity: O(1).
    pub fn pending_to(&self, to: &MemoryId) -> &[MemoryLink] {
        self.pending.get(to).map(Vec::as_slice).unwrap_or_default()
    }

    /// The store state this graph was last loaded from or checkpointed to, if any (`None`:
    /// never synced, e.g. imported from JSON — the next checkpoint writes it whole).
    pub fn sync_tag(&self) -> Option<SyncTag> {
        self.log.synced
    }

    /// Notes changed, inserted or removed since the last sync (0 when untracked).
    /// Complexity: O(1).
    pub fn unsynced_notes(&self) -> usize {
        self.log.notes.len()
    }

    /// Notes in the change log since the last sync; one absent from the graph left it.
    /// Complexity: O(1) per item.
    pub(crate) fn changed_ids(&self) -> impl Iterator<Item = &MemoryId> {
        self.log.notes.keys()
    }

    /// How `id` changed since the last sync, if it did. Complexity: O(1).
    pub(crate) fn change_of(&self, id: &MemoryId) -> Option<NoteChange> {
        self.log.notes.get(id).copied()
    }

    /// Marks the graph as exactly what the store holds at `tag`: the log starts empty.
    pub(crate) fn mark_synced(&mut self, tag: SyncTag) {
        self.log.synced = Some(tag);
        self.log.notes.clear();
    }

    /// Moves the tag to `tag` keeping the log, for a store write the log already covers (a
    /// note written to the store and then upserted here). Complexity: O(1).
    pub(crate) fn retag(&mut self, tag: SyncTag) {
        if self.log.synced.is_some() {
            self.log.synced = Some(tag);
        }
    }

    /// Number of attached links. Complexity: O(nodes).
    pub fn link_count(&self) -> usize {
        self.notes.values().map(|n| n.links.len()).sum()
    }

    /// Counts by kind. Complexity: O(nodes + links).
    pub fn stats(&self) -> GraphStats {
        let mut nodes_by_kind: BTreeMap<&'static str, usize> =
            NodeKind::ALL.iter().map(|k| (k.as_str(), 0)).collect();
        let mut links_by_kind: BTreeMap<&'static str, usize> =
            LinkKind::ALL.iter().map(|k| (k.as_str(), 0)).collect();
        let mut links = 0;
        for n in self.notes.values() {
            *nodes_by_kind.entry(n.kind().as_str()).or_default() += 1;
            for l in &n.links {
                links += 1;
                *links_by_kind
                    .entry(l.link_type.kind().as_str())
                    .or_default() += 1;
            }
        }
        GraphStats {
            nodes: self.notes.len(),
            links,
            pending_links: self.pending.values().map(Vec::len).sum(),
            nodes_by_kind,
            links_by_kind,
        }
    }
}

/// Checks that a link intensity is finite and non-negative.
pub(crate) fn validate_intensity(node: &str, intensity: f64) -> Result<()> {
    if intensity.is_finite() && intensity >= 0.0 {
        Ok(())
    } else {
        Err(Error::invalid_value(
            node,
            "mem_links.intensity",
            format!("must be a finite number >= 0, got {intensity}"),
        ))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::*;
    use chrono::Utc;

    /// A semantic note `id` of character `g` (content = id). Shared by unit tests.
    pub(crate) fn sem(g: &str, id: &str) -> MemoryNote {
        MemoryNote::new(
            g,
            id,
            MemoryType::Semantic(SemMemory {
                content: id.into(),
                aliases: vec![],
                concept_type: ConceptType::Entity,
                description: String::new(),
            }),
            Utc::now(),
        )
    }

    /// A semantic link of intensity 1 with a random id. Shared by unit tests.
    pub(crate) fn link(from: &MemoryNote, to: MemoryId) -> MemoryLink {
        MemoryLink {
            id: LinkId::random(),
            from: from.id,
            to,
            intensity: 1.0,
            link_type: MemoryLinkType::Sem(SemMemLink {
                verb: "r".into(),
                confidence: 1.0,
            }),
        }
    }

    #[test]
    fn content_revisions_move_with_content_only() {
        let mut g = MemoryGraph::new("c");
        let a = sem("c", "a");
        let b = sem("c", "b");
        let (ia, ib) = (a.id, b.id);
        g.insert(a).unwrap();
        let r0 = g.content_revision(&ia).unwrap();
        g.insert(b).unwrap();
        let a_to_b = link(g.get(&ia).unwrap(), ib);
        g.add_link(a_to_b).unwrap();
        g.record_retrieval(&ia, Utc::now());
        assert_eq!(
            g.content_revision(&ia),
            Some(r0),
            "links and statistics are not content"
        );
        let mut other = g.clone();
        g.get_mut(&ia).unwrap().tags.push("t".into());
        other.get_mut(&ia).unwrap().tags.push("u".into());
        let (r1, r2) = (g.content_revision(&ia), other.content_revision(&ia));
        assert!(
            r1 != Some(r0) && r2 != Some(r0) && r1 != r2,
            "clones changed apart differ"
        );
        g.upsert(sem("c", "a")).unwrap();
        assert_ne!(g.content_revision(&ia), r1);
        g.remove(&ia);
        assert_eq!(g.content_revision(&ia), None);
    }

    #[test]
    fn links_to_absent_targets_wait_and_attach_on_arrival() {
        let mut g = MemoryGraph::new("c");
        let mut a = sem("c", "a");
        let b = sem("c", "b");
        a.links.push(link(&a, b.id));
        g.insert(a).unwrap();
        assert_eq!(g.stats().pending_links, 1);
        assert_eq!(g.link_count(), 0);
        g.insert(b).unwrap();
        assert_eq!(g.stats().pending_links, 0);
        assert_eq!(g.link_count(), 1);
    }

    #[test]
    fn duplicate_insert_changes_nothing() {
        let mut g = MemoryGraph::new("c");
        g.insert(sem("c", "a")).unwrap();
        let v = g.version();
        assert!(matches!(
            g.insert(sem("c", "a")),
            Err(Error::DuplicateId { .. })
        ));
        assert_eq!(g.len(), 1);
        assert_eq!(g.version(), v);
    }

    #[test]
    fn remove_drops_incoming_links_and_keeps_indices_dense() {
        let mut g = MemoryGraph::new("c");
        let a = sem("c", "a");
        let mut b = sem("c", "b");
        let c = sem("c", "c");
        b.links.push(link(&b, a.id));
        let (aid, cid) = (a.id, c.id);
        g.insert(a).unwrap();
        g.insert(b).unwrap();
        g.insert(c).unwrap();
        assert!(g.remove(&aid).is_some());
        assert_eq!(g.link_count(), 0);
        assert_eq!(g.index_of(&cid), Some(1));
        assert!(g.resolve("a").is_none());
        assert_eq!(g.resolve("c"), Some(cid));
        assert_eq!(g.resolve(&cid.to_string()), Some(cid));
    }
}
