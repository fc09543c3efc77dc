//! The [`TextEmbedder`] trait: the one interface through which anything that turns texts into
//! vectors (the candle model in `embed/`, wrapped with its cache in `embedder.rs`, or the
//! lexical [`super::hash_embedder::HashEmbedder`]) plugs into retrieval, plus [`EmbedKind`],
//! the query/passage side of a text. It holds no vectors: the per-note vectors built through
//! it are `field_vectors.rs`.

use crate::error::{Error, Result};
use std::collections::HashMap;

/// Query or passage side of an asymmetric embedding model (BGE prepends an instruction to
/// queries); symmetric models ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedKind {
    /// A retrieval query.
    Query,
    /// A stored memory text.
    Passage,
}

/// Anything that turns texts into vectors of a fixed dimension. Implementations should return
/// L2-normalised vectors (similarity is a plain dot product); an empty text may map to a zero
/// vector.
pub trait TextEmbedder {
    /// Output dimension.
    fn dim(&self) -> usize;
    /// One vector per input text, in order.
    fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>>;
}

/// What [`embed_distinct`] returns: each distinct text's index into the vectors, and the
/// vectors in order of first appearance.
pub type DistinctVectors<'t> = (HashMap<&'t str, usize>, Vec<Vec<f32>>);

/// Embeds each distinct text of `texts` once, in one `embedder` call (none when there are no
/// texts): the vectors in order of first appearance, and each text's index into them.
///
/// Errors when the embedder fails or returns another number of vectors than texts.
pub fn embed_distinct<'t>(
    embedder: &dyn TextEmbedder,
    texts: impl IntoIterator<Item = &'t str>,
    kind: EmbedKind,
) -> Result<DistinctVectors<'t>> {
    let mut distinct: HashMap<&str, usize> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for t in texts {
        distinct.entry(t).or_insert_with(|| {
            order.push(t);
            order.len() - 1
        });
    }
    let vectors = if order.is_empty() {
        Vec::new()
    } else {
        embedder.embed(&order, kind)?
    };
    Error::check_vector_count("embedder", vectors.len(), order.len())?;
    Ok((distinct, vectors))
}
