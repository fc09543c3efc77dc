//! Opening working memory: the long-term index built from the store (missing vectors embedded
//! and written back) and the engine's graph made a working graph.

use super::index::*;
use super::stored::*;
use super::*;
use crate::embedding_cache::text_hash;
use crate::engine::{EmbedderChoice, Engine};
use crate::error::{Error, Result};
use crate::model::IdMap;
use crate::model::MemoryId;
use crate::retrieval::EmbedKind;
use crate::store::{db_err, Store};

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
        let mut index = LongTermIndex::new(dim);
        let mut want: IdMap<[u8; 32]> =
            IdMap::with_capacity_and_hasher(texts.len(), Default::default());
        for (id, t) in &texts {
            if let Some(t) = t {
                want.insert(*id, text_hash(t));
            }
        }
        // The stored links load on a second connection while this one streams the vectors:
        // at 100k notes both take a few hundred ms, and the machine has cores to spare.
        let reader = store.reader()?;
        let (links_path, tag) = (store.path().to_path_buf(), store.sync_tag());
        let (links, reused) = std::thread::scope(|scope| -> Result<(StoredLinks, usize)> {
            let loading = scope.spawn(move || StoredLinks::load_from(&reader, &links_path, tag));
            let reused = read_vectors(store, &model, dim, &want, &mut index);
            let links = loading.join().map_err(|_| Error::Io {
                path: store.path().display().to_string(),
                message: "the thread loading the stored links panicked".into(),
            })?;
            Ok((links?, reused?))
        })?;
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
            for (id, h, v) in &rows {
                index.upsert(*id, *h, v)?;
            }
            done += chunk.len();
            progress(done, total);
        }
        drop(texts);

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
            deleted: Default::default(),
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
            },
        ))
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
    let mut row_buf: Vec<f32> = Vec::with_capacity(dim);
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
        let blob = r.get_ref(2).map_err(|e| db_err(p, e))?;
        let bytes = blob.as_blob().map_err(|e| db_err(p, e.into()))?;
        if bytes.len() != dim * 4 {
            continue;
        }
        row_buf.clear();
        row_buf.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        index.upsert(id, *expected, &row_buf)?;
        reused += 1;
    }
    Ok(reused)
}
