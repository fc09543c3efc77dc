//! Notes released from working memory lately, kept parsed exactly as the store holds them, so
//! that a note coming back (the next messages often return to people and places of the last
//! ones) is inserted without reading and parsing its row and its links again. (Its forgetting
//! state is still read, with those of the notes read: one statement for all.)
//!
//! An entry is what a read of the store would return at the moment it is used, or nothing:
//! - a release puts only notes it did not rewrite — unchanged ones as loaded, recalled ones
//!   as loaded with the two columns it patched (`Change::SetRetrieval`, whose timestamp
//!   round-trips to the nanosecond) — and only notes whose copy was read from the store
//!   ([`Released::loaded`]) with no other writer since and no write of theirs by working
//!   memory since (a checkpoint writes its version of a note, which is not a read);
//! - working memory's own later writes ([`Released::wrote`]) drop the entries of the notes
//!   they touch, and everything on a change that may reach a released note's links (a note
//!   archived or deleted, a link written by id);
//! - any other writer moves the store's [`SyncTag`] past the one recorded, and the next use
//!   ([`Released::check`]) drops everything.
//!
//! A note brought back leaves the cache (the working graph holds it again): an entry is never
//! also resident. At most `capacity` notes are kept, the least recently released dropped
//! first.

use crate::graph::SyncTag;
use crate::model::{IdSet, MemoryId, MemoryNote};
use crate::store::{Change, Store};
use std::num::NonZeroUsize;

/// The cache (see the module doc): each note as stored, its links sorted by id (as working
/// memory keeps them). Capacity 0 keeps nothing.
#[derive(Debug)]
pub(super) struct Released {
    notes: Option<lru::LruCache<MemoryId, MemoryNote>>,
    /// The store's state the entries match.
    seen: Option<SyncTag>,
    /// Resident notes whose clean copy is a read of the store as it still is.
    trusted: IdSet,
}

impl Released {
    /// An empty cache of at most `capacity` notes.
    pub(super) fn new(capacity: usize) -> Self {
        Released {
            notes: NonZeroUsize::new(capacity).map(lru::LruCache::new),
            seen: None,
            trusted: Default::default(),
        }
    }

    /// Drops everything, and the trust in every resident note's copy, unless the store is
    /// still as the entries know it. Complexity: O(1) when current, else O(entries).
    pub(super) fn check(&mut self, store: &Store) {
        if self.seen != Some(store.sync_tag()) {
            self.distrust_all();
            self.seen = Some(store.sync_tag());
        }
    }

    /// `id` became resident as read from the store just now (after [`Self::check`]).
    pub(super) fn loaded(&mut self, id: MemoryId) {
        self.trusted.insert(id);
    }

    /// `id` is no longer resident. Complexity: O(1).
    pub(super) fn unloaded(&mut self, id: &MemoryId) {
        self.trusted.remove(id);
    }

    /// True when `id` is held. Complexity: O(1).
    pub(super) fn contains(&self, id: &MemoryId) -> bool {
        self.notes.as_ref().is_some_and(|c| c.contains(id))
    }

    /// Takes `id` out (it is about to be resident again). Complexity: O(1).
    pub(super) fn take(&mut self, id: &MemoryId) -> Option<MemoryNote> {
        self.notes.as_mut()?.pop(id)
    }

    /// Keeps those of the notes a release just left in the store as they are whose copies
    /// are trusted, `store` being the store right after that release's write (or unwritten,
    /// when it wrote nothing). Complexity: O(notes).
    pub(super) fn put(&mut self, store: &Store, notes: Vec<MemoryNote>) {
        self.check(store);
        if let Some(c) = self.notes.as_mut() {
            for n in notes {
                if self.trusted.remove(&n.id) {
                    c.put(n.id, n);
                }
            }
        }
    }

    /// Records one successful write of working memory: `extra`, then an upsert of each of
    /// `notes` (what [`Store::upsert_notes`] wrote). Entries of the notes touched go; a change
    /// that may alter a released note's links (an archive, a delete, a link by id) or one the
    /// cache does not know drops everything, as does a store another writer had moved since
    /// `before` (its tag before the write). Complexity: O(changes + notes).
    pub(super) fn wrote(
        &mut self,
        store: &Store,
        before: SyncTag,
        notes: &[MemoryNote],
        extra: &[Change],
    ) {
        let after = Some(store.sync_tag());
        if self.seen != Some(before) {
            self.distrust_all();
            self.seen = after;
            return;
        }
        for ch in extra {
            let touched = match ch {
                Change::PutNote(n) => {
                    self.trusted.remove(&n.id);
                    n.id
                }
                // Exact: the entry could be patched, but a recall's release patches the notes
                // it then puts, after this.
                Change::SetRetrieval(id, ..) => *id,
                // Rows of other tables.
                Change::SetForgetState(..)
                | Change::ClearForgetState(_)
                | Change::AppendFeedback(..)
                | Change::AppendRecords(_)
                | Change::AppendMessage(_)
                | Change::PopMessages(_)
                | Change::SetSummary(_)
                | Change::SetMeta(..) => continue,
                _ => {
                    self.distrust_all();
                    self.seen = after;
                    return;
                }
            };
            self.take(&touched);
        }
        for n in notes {
            self.take(&n.id);
            self.trusted.remove(&n.id);
        }
        self.seen = after;
    }

    /// Drops every entry and the trust in every resident copy.
    fn distrust_all(&mut self) {
        if let Some(c) = self.notes.as_mut() {
            c.clear();
        }
        self.trusted.clear();
    }
}
