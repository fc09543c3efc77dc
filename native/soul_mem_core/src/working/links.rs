//! The in-memory adjacency of the stored graph: every stored link, whole (id, source, target,
//! intensity, type, position), and which notes are active, so an activation walks k hops
//! without a SQLite B-tree lookup per neighbour and gives the notes it loads their links
//! without reading the links table (a third of a message's store reads at 100k notes).
//!
//! Built at [`WorkingMemory::open`] from two table scans and kept current by the writes
//! working memory makes itself (its partial checkpoints and releases apply the same note
//! upserts, archivals and deletions here). A write to note or link rows through any other path
//! moves the store's [`SyncTag`] past the one recorded here, and the next activation reloads
//! the adjacency (O(links)) before reading it — stale lists are never used.
//!
//! Memory: about 280 bytes per note with 3 stored links per note: two link lists per note
//! (48 bytes per link outgoing, 16 incoming; a store's few distinct link types shared), the
//! id map and the flags.

use super::stored::parse_uuid;
use super::WorkingMemory;
use crate::error::Result;
use crate::graph::{MemoryGraph, SyncTag};
use crate::model::{IdMap, IdSet};
use crate::model::{LinkId, MemoryId, MemoryLink, MemoryLinkType, MemoryNote};
use crate::store::{db_err, link_type_of, parse_id, text_column, Change, NeighbourSource, Store};
use rusqlite::Connection;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A stored link as the adjacency keeps it, from its source's list: enough to give it back
/// whole ([`MemoryLink`]).
#[derive(Debug, Clone)]
struct OutLink {
    id: LinkId,
    to: u32,
    // The row's `ord`: the link's place among its source's links.
    ord: i64,
    intensity: f64,
    // Shared by equal types: 1,268 distinct among 300k links at 100k notes.
    link_type: Arc<MemoryLinkType>,
}

/// Stored links by note slot, both directions.
#[derive(Debug, Clone, Default)]
pub(super) struct StoredLinks {
    ids: Vec<MemoryId>,
    slot: IdMap<u32>,
    // Stored and not archived: only such notes are neighbours.
    active: Vec<bool>,
    // Stored at all (an archived note keeps its row and its links).
    stored: Vec<bool>,
    out: Vec<Vec<OutLink>>,
    inc: Vec<Vec<(u32, f64)>>,
    // The store state these lists reflect.
    seen: Option<SyncTag>,
    // Which slots are in the working graph, as of graph version `resident_of` (set slots
    // listed, so clearing costs what setting did).
    resident: Vec<bool>,
    resident_slots: Vec<u32>,
    resident_of: Option<u64>,
}

impl StoredLinks {
    /// Reads every note's id and archived flag and every link of `store`, whole.
    /// Complexity: O(notes + links) rows read.
    pub(super) fn load(store: &Store) -> Result<Self> {
        Self::load_from(store.conn(), store.path(), store.sync_tag())
    }

    /// [`Self::load`] through `conn` (a reader of the store at `path`, whose state is `tag`),
    /// so it can run on another thread.
    /// Complexity: O(notes + links) rows read.
    pub(super) fn load_from(conn: &Connection, path: &Path, tag: SyncTag) -> Result<Self> {
        let e = |err| db_err(path, err);
        let mut links = StoredLinks::default();
        let (notes, n_links): (i64, i64) = conn
            .query_row(
                "SELECT (SELECT count(*) FROM notes), (SELECT count(*) FROM links)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(e)?;
        links.reserve(notes.max(0) as usize);
        let mut st = conn.prepare("SELECT id, archived FROM notes").map_err(e)?;
        let mut rows = st.query([]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let id = id_column(path, r, 0)?;
            let archived: bool = r.get(1).map_err(e)?;
            let s = links.slot_of(id);
            links.stored[s] = true;
            links.active[s] = !archived;
        }
        // Lists sized once: two passes would read the table twice, so grow, then trim.
        let avg = (n_links.max(0) as usize).div_ceil(links.ids.len().max(1));
        for v in &mut links.out {
            v.reserve_exact(avg);
        }
        for v in &mut links.inc {
            v.reserve_exact(avg);
        }
        let mut st = conn
            .prepare("SELECT id, from_id, to_id, intensity, link_type, ord FROM links")
            .map_err(e)?;
        let mut rows = st.query([]).map_err(e)?;
        let mut types: HashMap<String, Arc<MemoryLinkType>> = HashMap::new();
        while let Some(r) = rows.next().map_err(e)? {
            let id = text_column(path, r, 0)?;
            let from = id_column(path, r, 1)?;
            let to = id_column(path, r, 2)?;
            let w: f64 = r.get(3).map_err(e)?;
            let type_text = text_column(path, r, 4)?;
            let link_type = match types.get(type_text) {
                Some(t) => Arc::clone(t),
                None => {
                    let t = Arc::new(link_type_of(path, id, type_text)?);
                    types.insert(type_text.to_owned(), Arc::clone(&t));
                    t
                }
            };
            let ord: i64 = r.get(5).map_err(e)?;
            let (f, t) = (links.slot_of(from), links.slot_of(to));
            links.out[f].push(OutLink {
                id: LinkId(parse_id(path, id)?),
                to: t as u32,
                ord,
                intensity: w,
                link_type,
            });
            links.inc[t].push((f as u32, w));
        }
        for v in &mut links.out {
            v.shrink_to_fit();
        }
        for v in &mut links.inc {
            v.shrink_to_fit();
        }
        links.seen = Some(tag);
        Ok(links)
    }

    fn reserve(&mut self, n: usize) {
        self.ids.reserve(n);
        self.slot.reserve(n);
        self.active.reserve(n);
        self.stored.reserve(n);
        self.resident.reserve(n);
        self.out.reserve(n);
        self.inc.reserve(n);
    }

    fn slot_of(&mut self, id: MemoryId) -> usize {
        if let Some(&s) = self.slot.get(&id) {
            return s as usize;
        }
        let s = self.ids.len();
        self.ids.push(id);
        self.slot.insert(id, s as u32);
        self.active.push(false);
        self.stored.push(false);
        self.resident.push(false);
        self.out.push(Vec::new());
        self.inc.push(Vec::new());
        s
    }

    /// True when no write to note or link rows reached `store` since these lists were made.
    pub(super) fn is_current(&self, store: &Store) -> bool {
        self.seen == Some(store.sync_tag())
    }

    /// Active neighbours of `id` (either link direction, never itself) with each link's
    /// intensity — a neighbour appears once per link. Complexity: O(degree).
    fn neighbours_of(&self, id: &MemoryId) -> impl Iterator<Item = (u32, f64)> + '_ {
        let s = self.slot.get(id).map(|&s| s as usize);
        let (out, inc) = match s {
            Some(s) => (self.out[s].as_slice(), self.inc[s].as_slice()),
            None => (&[][..], &[][..]),
        };
        out.iter()
            .map(|l| (l.to, l.intensity))
            .chain(inc.iter().copied())
            .filter(move |&(n, _)| Some(n as usize) != s && self.active[n as usize])
    }

    /// Marks the notes of `graph` as resident, unless already done for its version.
    /// Complexity: O(1) when current, else O(resident notes).
    pub(super) fn mark_resident(&mut self, graph: &MemoryGraph) {
        if self.resident_of == Some(graph.version()) {
            return;
        }
        for s in self.resident_slots.drain(..) {
            self.resident[s as usize] = false;
        }
        for n in graph.notes() {
            if let Some(&s) = self.slot.get(&n.id) {
                self.resident[s as usize] = true;
                self.resident_slots.push(s);
            }
        }
        self.resident_of = Some(graph.version());
    }

    /// True when `id` has an active stored neighbour that is not in `graph` (flags from
    /// [`Self::mark_resident`] when they are of this graph version, else graph lookups).
    /// Complexity: O(degree).
    pub(super) fn on_boundary(&self, graph: &MemoryGraph, id: &MemoryId) -> bool {
        if self.resident_of == Some(graph.version()) {
            self.neighbours_of(id)
                .any(|(n, _)| !self.resident[n as usize])
        } else {
            self.neighbours_of(id)
                .any(|(n, _)| graph.get(&self.ids[n as usize]).is_none())
        }
    }

    /// Records what one successful write of working memory did: `extra` (in order), then an
    /// upsert of each of `notes` — what [`Store::upsert_notes`] wrote. When the store had
    /// moved on before this write (another writer), nothing is applied: the lists stay stale
    /// and the next activation reloads them. `before` is the store's tag before the write.
    /// Complexity: O(changes + Σ degree of the written notes).
    pub(super) fn wrote(
        &mut self,
        store: &Store,
        before: SyncTag,
        notes: &[MemoryNote],
        extra: &[Change],
    ) {
        if self.seen != Some(before) {
            return;
        }
        for ch in extra {
            match ch {
                Change::PutNote(n) => self.put_note(n),
                Change::ArchiveNote(id) => {
                    if let Some(&s) = self.slot.get(id) {
                        self.active[s as usize] = false;
                    }
                }
                Change::DeleteNote(id) => self.delete_note(id),
                // Link edits by id are not tracked here: reload.
                Change::PutLink(_) | Change::DeleteLink(_) => {
                    self.seen = None;
                    return;
                }
                _ => {}
            }
        }
        for n in notes {
            self.put_note(n);
        }
        self.seen = Some(store.sync_tag());
    }

    /// A note upserted: stored (its archived flag kept), its outgoing links replaced, in
    /// order (the store writes them at positions 0, 1, …).
    fn put_note(&mut self, n: &MemoryNote) {
        let s = self.slot_of(n.id);
        if !self.stored[s] {
            self.stored[s] = true;
            self.active[s] = true;
        }
        self.drop_out(s);
        for (ord, l) in (0..).zip(&n.links) {
            let t = self.slot_of(l.to);
            self.out[s].push(OutLink {
                id: l.id,
                to: t as u32,
                ord,
                intensity: l.intensity,
                link_type: Arc::new(l.link_type.clone()),
            });
            self.inc[t].push((s as u32, l.intensity));
        }
    }

    /// A note deleted with its links in both directions.
    fn delete_note(&mut self, id: &MemoryId) {
        let Some(&s) = self.slot.get(id) else {
            return;
        };
        let s = s as usize;
        self.drop_out(s);
        for (f, _) in std::mem::take(&mut self.inc[s]) {
            self.out[f as usize].retain(|l| l.to as usize != s);
        }
        self.stored[s] = false;
        self.active[s] = false;
    }

    fn drop_out(&mut self, s: usize) {
        for l in std::mem::take(&mut self.out[s]) {
            self.inc[l.to as usize].retain(|&(f, _)| f as usize != s);
        }
    }

    /// Bytes held (approximate: the lists' capacities; per note its id, the id map's key and
    /// slot, and three flags — the map's own overhead and the shared link types are not
    /// counted).
    pub(super) fn bytes(&self) -> usize {
        use std::mem::size_of;
        let out: usize = self
            .out
            .iter()
            .map(|v| v.capacity() * size_of::<OutLink>() + size_of::<Vec<OutLink>>())
            .sum();
        let inc: usize = self
            .inc
            .iter()
            .map(|v| v.capacity() * size_of::<(u32, f64)>() + size_of::<Vec<(u32, f64)>>())
            .sum();
        let lists = out + inc;
        let per_note = 2 * size_of::<MemoryId>() + size_of::<u32>() + 3;
        lists + self.ids.capacity() * per_note
    }
}

/// Column `i` of `r`: a note id stored as UUID text (read without allocating).
fn id_column(path: &Path, r: &rusqlite::Row<'_>, i: usize) -> Result<MemoryId> {
    parse_uuid(path, text_column(path, r, i)?)
}

impl NeighbourSource for StoredLinks {
    /// As [`Store::neighbour_lists`], from memory: strongest link first, ties by id.
    /// Complexity: O(Σ degree · log degree).
    fn neighbour_lists(&self, ids: &[MemoryId]) -> Result<IdMap<Vec<MemoryId>>> {
        let mut out = IdMap::with_capacity_and_hasher(ids.len(), Default::default());
        let mut links: Vec<(u32, f64)> = Vec::new();
        for id in ids {
            // Each neighbour once, with its strongest link (the first seen of equal ones): a
            // stable sort by neighbour, strongest first, keeps the first of each run.
            links.clear();
            links.extend(self.neighbours_of(id));
            links.sort_by(|a, b| {
                a.0.cmp(&b.0)
                    .then(b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal))
            });
            links.dedup_by_key(|l| l.0);
            let mut list: Vec<(MemoryId, f64)> = links
                .iter()
                .map(|&(n, w)| (self.ids[n as usize], w))
                .collect();
            list.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            out.insert(*id, list.into_iter().map(|(n, _)| n).collect());
        }
        Ok(out)
    }

    /// From the flags. Complexity: O(ids).
    fn active_of(&self, ids: &[MemoryId]) -> Result<IdSet> {
        Ok(ids
            .iter()
            .filter(|id| self.slot.get(id).is_some_and(|&s| self.active[s as usize]))
            .copied()
            .collect())
    }

    /// From the lists, as the store orders them (`ord`, ties by link id).
    /// Complexity: O(Σ degree · log degree).
    fn links_from(&self, ids: &[MemoryId]) -> Result<IdMap<Vec<MemoryLink>>> {
        let mut out = IdMap::with_capacity_and_hasher(ids.len(), Default::default());
        for id in ids {
            let Some(&s) = self.slot.get(id) else {
                continue;
            };
            let mut list: Vec<&OutLink> = self.out[s as usize].iter().collect();
            if list.is_empty() {
                continue;
            }
            list.sort_by_key(|l| (l.ord, l.id));
            let links = list
                .into_iter()
                .map(|l| MemoryLink {
                    id: l.id,
                    from: *id,
                    to: self.ids[l.to as usize],
                    intensity: l.intensity,
                    link_type: (*l.link_type).clone(),
                })
                .collect();
            out.insert(*id, links);
        }
        Ok(out)
    }
}

impl WorkingMemory {
    /// [`Store::upsert_notes`] with the adjacency kept in step: every note write of working
    /// memory goes through here. Complexity: that of the write plus [`StoredLinks::wrote`].
    pub(super) fn upsert_notes(
        &mut self,
        store: &mut Store,
        notes: &[MemoryNote],
        extra: &[Change],
    ) -> Result<()> {
        let before = store.sync_tag();
        store.upsert_notes(notes, extra)?;
        self.links.wrote(store, before, notes, extra);
        self.released.wrote(store, before, notes, extra);
        self.seed_vectors.wrote(store, before);
        Ok(())
    }

    /// Brings working memory's copies of stored rows up to date when something other than
    /// working memory wrote note or link rows since: reloads the stored adjacency, and drops
    /// the released notes held (`released.rs`). Complexity: O(1) when current, else
    /// O(notes + links).
    pub(super) fn refresh_from_store(&mut self, store: &Store) -> Result<()> {
        self.released.check(store);
        if !self.links.is_current(store) {
            self.links = StoredLinks::load(store)?;
        }
        Ok(())
    }
}
