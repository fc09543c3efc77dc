//! The approximate long-term index: an HNSW graph (the `usearch` crate) over the same
//! normalised rows as the brute-force int8 scan, for characters with more notes than
//! [`super::WorkingConfig::ann_from`].
//!
//! Why: the int8 scan reads n·d bytes per recall — 38 MB at 100k × 384, 388 MB at 1M, where it
//! becomes the largest cost of a recall (~25 ms of reading at this machine's bandwidth, per
//! query vector). An HNSW search visits a few thousand rows whatever n is. It is approximate:
//! `soul_tune bench working` measures its top-10 against the exact f32 scan, and the seeds are
//! still re-scored exactly on the stored f32 vectors (`WorkingMemory::seeds`), so only a
//! candidate the graph misses can change a result.
//!
//! Rows are keyed by their slot in [`super::index::LongTermIndex`] (its id and hash lists), so
//! a swap-remove there is a remove and a rename here. Vectors are stored as int8 (usearch's
//! `I8` quantisation of the normalised row, ×127), with cosine distance; connectivity 16,
//! expansion 128 when inserting and 256 when searching.

use crate::error::{Error, Result};
use std::path::Path;
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

/// Neighbours per node on the upper levels (twice that on the base level).
const CONNECTIVITY: usize = 16;
/// Candidate list while inserting: higher builds a better graph, slower.
const EXPANSION_ADD: usize = 128;
/// Candidate list while searching; a search for more results than this widens it to that.
/// At 1M notes and 128, the graph's own top-10 held 91.5–93.8 % of the exact top-10 on some
/// builds (under the 95 % the index is held to); 256 gives 95–96 % for ~0.5–0.8 ms more per
/// query vector, and 384 no more (`soul_tune bench working --nodes 1000000 --check 40`).
const EXPANSION_SEARCH: usize = 256;
/// Insert threads (the machine this is tuned for has two cores).
const INSERT_THREADS: usize = 2;
/// Fewer rows than this are inserted by one thread. Threads interleave their inserts in an
/// order that changes from run to run, and with it the graph and which of two near-equal rows
/// a search finds; one thread builds the same graph every time. Below this size a build takes
/// well under a second either way (a graph is built from [`super::WorkingConfig::ann_from`]
/// rows, far above it; a recall's own changes are a few rows).
const PARALLEL_INSERT_FROM: usize = 8192;

/// An HNSW index of normalised rows, keyed by slot.
pub(super) struct AnnRows {
    index: Index,
    dim: usize,
}

impl std::fmt::Debug for AnnRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnnRows")
            .field("dim", &self.dim)
            .field("rows", &self.index.size())
            .finish()
    }
}

fn ann_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid_argument("ann index", format!("{what}: {e}"))
}

fn options(dim: usize) -> IndexOptions {
    IndexOptions {
        dimensions: dim,
        metric: MetricKind::Cos,
        quantization: ScalarKind::I8,
        connectivity: CONNECTIVITY,
        expansion_add: EXPANSION_ADD,
        expansion_search: EXPANSION_SEARCH,
        multi: false,
    }
}

impl AnnRows {
    /// An empty index for `dim`-dimensional rows with room for `capacity` of them.
    pub(super) fn new(dim: usize, capacity: usize) -> Result<Self> {
        let index = Index::new(&options(dim)).map_err(|e| ann_err("create", e))?;
        let ann = AnnRows { index, dim };
        ann.reserve(capacity.max(1024))?;
        Ok(ann)
    }

    fn reserve(&self, capacity: usize) -> Result<()> {
        self.index
            .reserve_capacity_and_threads(capacity, INSERT_THREADS)
            .map_err(|e| ann_err("reserve", e))
    }

    /// Makes room for `more` rows beyond the current ones (doubling, so appends amortise).
    fn grow_for(&self, more: usize) -> Result<()> {
        let need = self.index.size() + more;
        if need > self.index.capacity() {
            self.reserve(need.max(2 * self.index.capacity()))?;
        }
        Ok(())
    }

    /// Row dimension.
    pub(super) fn dim(&self) -> usize {
        self.dim
    }

    /// Rows held.
    pub(super) fn len(&self) -> usize {
        self.index.size()
    }

    /// Inserts `rows` (slot, normalised row), `INSERT_THREADS` at a time from
    /// `PARALLEL_INSERT_FROM` rows (then the graph's shape depends on the threads' timing), in
    /// order below it. The slots must not be in the index.
    /// Complexity: O(r · log n · expansion) distance computations.
    pub(super) fn add_many(&self, rows: &[(usize, &[f32])]) -> Result<()> {
        self.grow_for(rows.len())?;
        let add = |part: &[(usize, &[f32])]| -> Result<()> {
            for (slot, row) in part {
                self.index
                    .add(*slot as u64, row)
                    .map_err(|e| ann_err("add", e))?;
            }
            Ok(())
        };
        if rows.len() < PARALLEL_INSERT_FROM {
            return add(rows);
        }
        let per = rows.len().div_ceil(INSERT_THREADS);
        std::thread::scope(|scope| {
            let workers: Vec<_> = rows
                .chunks(per)
                .map(|part| scope.spawn(move || add(part)))
                .collect();
            workers.into_iter().try_for_each(|w| {
                w.join()
                    .map_err(|_| ann_err("add", "an insert thread panicked"))?
            })
        })
    }

    /// Removes the row at `slot`. Complexity: O(1) (a tombstone; the space is reused).
    pub(super) fn remove(&self, slot: usize) -> Result<()> {
        self.index
            .remove(slot as u64)
            .map(drop)
            .map_err(|e| ann_err("remove", e))
    }

    /// Moves the row at slot `from` to slot `to` (free). Complexity: O(1).
    pub(super) fn rename(&self, from: usize, to: usize) -> Result<()> {
        self.index
            .rename(from as u64, to as u64)
            .map(drop)
            .map_err(|e| ann_err("rename", e))
    }

    /// True when `slot` holds a row.
    pub(super) fn contains(&self, slot: usize) -> bool {
        self.index.contains(slot as u64)
    }

    /// The `count` nearest rows of the normalised `query`: (slot, cosine), best first.
    /// Complexity: O(log n · expansion) distance computations.
    pub(super) fn search(&self, query: &[f32], count: usize) -> Result<Vec<(usize, f32)>> {
        if count == 0 || self.index.size() == 0 {
            return Ok(Vec::new());
        }
        let m = self
            .index
            .search(query, count)
            .map_err(|e| ann_err("search", e))?;
        Ok(m.keys
            .iter()
            .zip(&m.distances)
            .map(|(k, d)| (*k as usize, 1.0 - d))
            .collect())
    }

    /// Bytes the index holds (graph and int8 rows). Complexity: O(1).
    pub(super) fn bytes(&self) -> usize {
        self.index.memory_usage()
    }

    /// Writes the index to `path` (usearch's own file format).
    pub(super) fn save(&self, path: &Path) -> Result<()> {
        let p = path
            .to_str()
            .ok_or_else(|| ann_err("save", "path is not UTF-8"))?;
        self.index.save(p).map_err(|e| Error::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// Reads an index written by [`AnnRows::save`]; errors when it is unreadable or of another
    /// dimension, metric or quantisation.
    pub(super) fn load(path: &Path, dim: usize) -> Result<Self> {
        let p = path
            .to_str()
            .ok_or_else(|| ann_err("load", "path is not UTF-8"))?;
        let meta = Index::metadata(p).map_err(|e| ann_err("load", e))?;
        let want = options(dim);
        if meta.dimensions != dim as u64
            || meta.metric != want.metric
            || meta.quantization != want.quantization
            || meta.multi
        {
            return Err(ann_err("load", "saved with other options"));
        }
        let index = Index::new(&want).map_err(|e| ann_err("create", e))?;
        index.load(p).map_err(|e| ann_err("load", e))?;
        if index.dimensions() != dim {
            return Err(ann_err("load", "saved with another dimension"));
        }
        let ann = AnnRows { index, dim };
        // Threads for later inserts (a loaded index has room only for what it holds).
        ann.reserve(ann.len().max(1024))?;
        Ok(ann)
    }
}
