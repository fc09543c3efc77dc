//! `--mode working`: a file's cases answered by working memory instead of the whole graph.
//!
//! The graph is saved in a temporary store; every case opens a fresh [`WorkingMemory`] over
//! it (so cases do not see each other's activations) with `--working-cap` resident notes and
//! `--working-budget` notes per activation, and recalls through [`WorkingMemory::recall_at`]:
//! long-term seeds, k-hop activation, boundary expansion and the pipeline over the working
//! graph, as the service does for a character above its working-memory threshold. The first
//! open embeds the notes' primary texts (through the embedding cache) and stores them; later
//! opens read them back.

use super::eval::Returned;
use soul_mem_core::engine::{EmbedderChoice, Engine};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::retrieval::{PipelineConfig, SubQuery};
use soul_mem_core::store::Store;
use soul_mem_core::working::{WorkingConfig, WorkingMemory};
use soul_mem_core::Result;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One file's graph in a temporary store, answered through working memory.
pub struct WorkingRun {
    dir: PathBuf,
    path: PathBuf,
    character: String,
    embedder: EmbedderChoice,
    cfg: WorkingConfig,
}

impl WorkingRun {
    /// Saves `graph` in a fresh temporary store and opens working memory over it once (which
    /// embeds and stores the long-term index's vectors).
    pub fn new(graph: &MemoryGraph, embedder: EmbedderChoice, cfg: WorkingConfig) -> Result<Self> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "soul_tune_working_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| soul_mem_core::Error::io(&dir, &e))?;
        let character = graph.character().to_owned();
        let path = Store::path_for(&dir, &character);
        let run = WorkingRun {
            dir,
            path,
            character,
            embedder,
            cfg,
        };
        Store::open(&run.path, &run.character)?.save_graph(graph)?;
        run.open()?;
        Ok(run)
    }

    fn open(&self) -> Result<(Engine, WorkingMemory, Store)> {
        let mut store = Store::open(&self.path, &self.character)?;
        let mut engine = Engine::new(MemoryGraph::new(&self.character));
        let (wm, _) = WorkingMemory::open(
            &mut engine,
            &mut store,
            self.embedder.clone(),
            self.cfg.clone(),
            &|_, _| {},
        )?;
        Ok((engine, wm, store))
    }

    /// One recall of `subs` through a fresh working memory.
    /// Complexity: opening the store and the index (O(notes)) plus the recall.
    pub fn recall(&self, subs: &[SubQuery], cfg: &PipelineConfig) -> Result<Returned> {
        let (mut engine, mut wm, mut store) = self.open()?;
        let (result, _) =
            wm.recall_at(&mut engine, &mut store, subs, cfg, None, chrono::Utc::now())?;
        Ok(Returned::of(result))
    }
}

impl Drop for WorkingRun {
    fn drop(&mut self) {
        // A temporary store: nothing to keep.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
