//! The [`TextEmbedder`] trait: the one interface through which anything that turns texts into
//! vectors (the candle model in `embed/`, wrapped with its cache in `embedder.rs`, or the
//! lexical [`super::hash_embedder::HashEmbedder`]) plugs into retrieval, plus [`EmbedKind`],
//! the query/passage side of a text. It holds no vectors: the per-note vectors built through
//! it are `field_vectors.rs`.

use crate::error::Result;

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
