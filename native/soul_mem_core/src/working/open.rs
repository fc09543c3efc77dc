//! Opening working memory: the long-term index built from the store (missing vectors embedded
//! and written back) and the engine's graph made a working graph.

use super::ann_file;
use super::index::*;
use super::stored::*;
use super::*;
use crate::embedding_cache::text_hash;
use crate::engine::{EmbedderChoice, Engine};
use crate::error::{Error, Result};
use crate::model::IdMap;
use crate::model::MemoryId;
use crate::retrieval::EmbedKind;
use crate::store::{blob_column, db_err, Store};

impl WorkingMemory {
    /// Builds the long-term index of `store` for `embedder` and makes `engine`'s graph a
    /// working graph: stored core notes missing from it are inserted (with their forgetting
    /// state), notes already in it become resident (and are written back on release, since
    /// their stored version is unknown). When the engine has no embedder yet it gets this one
    /// (recall needs it). `progress(done, total)` follows the embedding of missing vectors.
    ///
    /// Errors: invalid `cfg`, a graph of another character, store or embedder failures. A
    /// failure while embedding keeps the batches already written, so a retry resumes.
    ///
    /// Complexity: O(n) payload parses and vector rows read for n active notes, plus the
    /// embedding of the notes lacking a current vector (the model embeds ~60 texts/s on a CPU:
    /// ~30 min for 100k notes; the hash embedder ~1 s), written `cfg.embed_batch` per
    /// transaction.
    pub fn open(
        engine: &mut Engine,
        store: &mut Store,
        embedder: EmbedderChoice,
        cfg: WorkingConfig,
        progress: &dyn Fn(usize, usize),
    ) -> Result<(Self, IndexReport)> {
        cfg.validate()?;
        check_character(engine, store)?;
        let model = embedder.name();
        let dim = as_dyn(&embedder).dim();
        let texts = stored_texts(store)?;
        let notes = texts.len();
        let mut want: IdMap<[u8; 32]> =
            IdMap::with_capacity_and_hasher(texts.len(), Default::default());
        for (id, t) in &texts {
            if let Some(t) = t {
                want.insert(*id, text_hash(t));
            }
        }
        let graph = cfg.ann_from.is_some_and(|from| want.len() >= from);
        // The stored links load on a second connection while this one streams the vectors:
        // at 100k notes both take a few hundred ms, and the machine has cores to spare.
        let reader = store.reader()?;
        let (links_path, tag) = (store.path().to_path_buf(), store.sync_tag());
        let (links, filled) = std::thread::scope(|scope| -> Result<(StoredLinks, Filled)> {
            let loading = scope.spawn(move || StoredLinks::load_from(&reader, &links_path, tag));
            let filled = fill_index(store, &model, dim, &want, graph);
            let links = loading.join().map_err(|_| Error::Io {
                path: store.path().display().to_string(),
                message: "the thread loading the stored links panicked".into(),
            })?;
            Ok((links?, filled?))
        })?;
        let Filled {
            mut index,
            reused,
            from_saved,
        } = filled;
        let missing: Vec<(MemoryId, &str)> = texts
            .iter()
            .filter_map(|(id, t)| {
                let t = t.as_deref()?;
                (index.hash_of(id) != want.get(id)).then_some((*id, t))
            })
            .collect();
        let total = missing.len();
        progress(0, total);
        let mut done = 0;
        for chunk in missing.chunks(cfg.embed_batch) {
            let batch: Vec<&str> = chunk.iter().map(|(_, t)| *t).collect();
            let rows = embed_rows(&embedder, chunk.iter().map(|(id, _)| *id), &batch)?;
            store.put_embeddings(&model, &rows)?;
            index.upsert_rows(&rows)?;
            done += chunk.len();
            progress(done, total);
        }
        drop(texts);

        let wm_kind = index.kind();
        let released = released::Released::new(RELEASED_PER_CAP * cfg.cap);
        let mut wm = WorkingMemory {
            cfg,
            embedder,
            model: model.clone(),
            character: store.character().to_owned(),
            index,
            tick: 1,
            seq: 0,
            last: Default::default(),
            links,
            clean: Default::default(),
            clean_states: Default::default(),
            deleted: Default::default(),
            released,
            seed_vectors: seed_vectors::SeedVectors::new(seed_vectors::SEED_VECTORS),
        };
        let resident: Vec<MemoryId> = engine.graph().notes().map(|n| n.id).collect();
        for id in &resident {
            wm.touch_one(*id);
        }
        let core = store.activate_with(&[], 0, 0, &wm.links)?;
        let mut report = ActivationReport::default();
        wm.merge(engine, store, &core, &mut report)?;
        wm.ensure_engine_embedder(engine)?;
        let vectors = wm.index.len();
        let saved = wm.save_index_if_due(store);
        Ok((
            wm,
            IndexReport {
                model,
                dim,
                notes,
                vectors,
                reused,
                embedded: total,
                core_loaded: report.loaded.len(),
                kind: wm_kind,
                from_saved,
                saved,
            },
        ))
    }

    /// Saves the HNSW graph beside the store when enough of it changed since the last save
    /// ([`LongTermIndex::save_due`]); true when it was written. A failed save is not an error:
    /// the files are a cache, and the next open rebuilds or repairs from the store.
    pub(super) fn save_index_if_due(&mut self, store: &Store) -> bool {
        self.index.save_due() && self.index.save(store.path(), &self.model).is_ok()
    }

    /// The configuration.
    pub fn config(&self) -> &WorkingConfig {
        &self.cfg
    }

    /// The embedder (model id) of the long-term index.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The embedder of the long-term index.
    pub fn embedder(&self) -> &EmbedderChoice {
        &self.embedder
    }

    /// Rows in the long-term index.
    pub fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Bytes of vector data in the long-term index (int8 rows and their scales).
    pub fn index_bytes(&self) -> usize {
        self.index.vector_bytes()
    }

    /// The kind of long-term index (brute-force scan or HNSW graph).
    pub fn index_kind(&self) -> IndexKind {
        self.index.kind()
    }

    /// The long-term index's own `k` nearest notes to `query` (normalised here), best first,
    /// with its approximate cosines: the candidates [`WorkingMemory::seeds`] re-scores. For
    /// measuring the index against an exact search. Complexity: one index search.
    pub fn index_top_k(&self, query: &[f32], k: usize) -> Result<Vec<(MemoryId, f32)>> {
        let Some(q) = crate::retrieval::dot::unit_vector(query) else {
            return Ok(Vec::new());
        };
        Ok(self.index.top_k(&[&q], k, None)?.pop().unwrap_or_default())
    }

    /// Bytes of the in-memory adjacency of the stored graph (link lists and the id map,
    /// approximate).
    pub fn links_bytes(&self) -> usize {
        self.links.bytes()
    }

    /// Vector dimension of the long-term index.
    pub fn dim(&self) -> usize {
        self.index.dim
    }

    /// Embeds query texts (query side) with the index's embedder.
    /// Complexity: one embedder call.
    pub fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        as_dyn(&self.embedder).embed(texts, EmbedKind::Query)
    }

    pub(super) fn ensure_engine_embedder(&self, engine: &mut Engine) -> Result<()> {
        if engine.embedder().is_none() {
            engine.embed_all(self.embedder.clone(), &|_, _| {})?;
        }
        Ok(())
    }
}

/// The long-term index as [`fill_index`] made it.
struct Filled {
    index: LongTermIndex,
    reused: usize,
    from_saved: usize,
}

/// Rows read one by one rather than by a scan of the whole `embeddings` table below this
/// share of the index (the scan reads every stored vector: ~1.5 GB at 1M notes).
const LOOKUP_SHARE: usize = 20;

/// Builds the long-term index of the `want`ed notes (id → text hash) from the store: a scan
/// index from the `embeddings` table, or an HNSW graph (`graph`) — the saved one when it is
/// usable, its stale rows removed and the lacking ones read from the table, else built anew.
/// Notes whose current vector is not stored stay out (the caller embeds them).
/// Complexity: O(rows read); building a graph O(n log n) on two threads.
fn fill_index(
    store: &Store,
    model: &str,
    dim: usize,
    want: &IdMap<[u8; 32]>,
    graph: bool,
) -> Result<Filled> {
    let saved = if graph {
        ann_file::load(store.path(), model, dim)
    } else {
        None
    };
    let Some(saved) = saved else {
        let mut index = if graph {
            LongTermIndex::new_graph(dim, want.len())?
        } else {
            LongTermIndex::new(dim)
        };
        let reused = read_vectors(store, model, dim, want, &mut index)?;
        return Ok(Filled {
            index,
            reused,
            from_saved: 0,
        });
    };
    let mut index = LongTermIndex::from_saved(dim, saved.ann, saved.rows);
    let stale: Vec<MemoryId> = index
        .slots()
        .filter(|(id, h)| want.get(*id) != Some(*h))
        .map(|(id, _)| *id)
        .collect();
    for id in &stale {
        index.remove(id);
    }
    let from_saved = index.len();
    let lacking: IdMap<[u8; 32]> = want
        .iter()
        .filter(|(id, _)| index.hash_of(id).is_none())
        .map(|(id, h)| (*id, *h))
        .collect();
    let read = if lacking.len() * LOOKUP_SHARE < want.len() {
        let mut rows = Vec::with_capacity(lacking.len());
        for (id, h) in &lacking {
            if let Some((hash, v)) = store.embedding(id, model)? {
                if hash == *h && v.len() == dim {
                    rows.push((*id, hash, v));
                }
            }
        }
        index.upsert_rows(&rows)?;
        rows.len()
    } else {
        read_vectors(store, model, dim, &lacking, &mut index)?
    };
    Ok(Filled {
        index,
        reused: from_saved + read,
        from_saved,
    })
}

/// Rows inserted into the index at a time while streaming (the graph inserts each batch on
/// two threads).
const READ_BATCH: usize = 4096;

/// Streams the stored vectors of `model` whose text hash is the wanted one into `index`;
/// returns how many it took. Complexity: O(rows of the model) read.
fn read_vectors(
    store: &Store,
    model: &str,
    dim: usize,
    want: &IdMap<[u8; 32]>,
    index: &mut LongTermIndex,
) -> Result<usize> {
    let mut reused = 0;
    let p = store.path();
    let mut st = store
        .conn()
        .prepare("SELECT note_id, text_hash, vec FROM embeddings WHERE model=?1")
        .map_err(|e| db_err(p, e))?;
    let mut rows = st.query([&model]).map_err(|e| db_err(p, e))?;
    let mut batch: Vec<VectorRow> = Vec::with_capacity(READ_BATCH);
    while let Some(r) = rows.next().map_err(|e| db_err(p, e))? {
        let id: String = r.get(0).map_err(|e| db_err(p, e))?;
        let Ok(uuid) = uuid::Uuid::parse_str(&id) else {
            continue;
        };
        let id = MemoryId(uuid);
        let Some(expected) = want.get(&id) else {
            continue;
        };
        let hash: Vec<u8> = r.get(1).map_err(|e| db_err(p, e))?;
        if hash.as_slice() != expected.as_slice() {
            continue;
        }
        let bytes = blob_column(p, r, 2)?;
        if bytes.len() != dim * 4 {
            continue;
        }
        let v = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        batch.push((id, *expected, v));
        reused += 1;
        if batch.len() == READ_BATCH {
            index.upsert_rows(&batch)?;
            batch.clear();
        }
    }
    index.upsert_rows(&batch)?;
    Ok(reused)
}
