//! Retrieval: fused similarity, weighted PPR association, Bayes actions, pipelines.
//!
//! Flow (seed DefaultPipeline): ① short-term context → ② fused similarity gives seeds →
//! ③ multi-source PPR from the seeds, situation sources softmaxed into Bayes actions →
//! memories merged with traces, actions in their own channel.
//!
//! Entry points: [`RetrievalIndex::build`] / [`RetrievalIndex::refresh`] over a graph and its
//! [`NodeVectors`]; [`DefaultPipeline::run`] with query vectors from [`QueryTexts`], or
//! [`DefaultPipeline::run_with_embedder`] with any [`TextEmbedder`]. The `_decayed` variants
//! take an [`EdgeDecay`] (per-node forgetting retention at query time) that scales link
//! intensities before they become PPR weights; the engine always passes one, evaluated once
//! per time bucket, and the index keeps the decayed matrix built from it (keyed by the
//! decay's stamp, patched in place when a few factors change) so queries do not rebuild it.
//!
//! The embedding pieces here, by concept (not to be confused with `crate::embed`, the
//! sentence-embedding model, nor `crate::embedding_cache`, its persistent cache):
//! [`text_embedder`] (the trait every embedder implements), [`hash_embedder`] (the lexical
//! stand-in for the model), [`field_texts`] (which text of a note is embedded, per field),
//! [`field_vectors`] (the per-field vectors of a graph that similarity scans) and [`dot`]
//! (the vector kernels they all use).

pub mod actions;
pub mod bayes;
pub mod config;
pub mod dense_channels;
pub mod dot;
pub mod field_texts;
pub mod field_vectors;
pub mod fusion;
pub mod hash_embedder;
pub mod index;
pub mod lexical;
pub mod pipeline;
pub mod ppr;
pub mod query;
pub mod similarity;
pub mod text_embedder;
pub(crate) mod top_k;

pub use actions::{actions_for, habit_likeness};
pub use bayes::{actions_from_sources, bayes_actions, situation_sources, softmax, ActionScore};
pub use config::{
    AssociateWithActionConfig, AssociationConfig, BayesActionConfig, BlendWeights,
    DefaultPipelineConfig, FusionConfig, FusionMethod, LiftTargets, PipelineConfig,
    ShortOnlyConfig, SimilarityConfig, TypePreference,
};
pub use dense_channels::{similarity_channels, similarity_channels_many, DenseChannels};
pub use field_texts::{node_texts, FieldKind};
pub use field_vectors::{NodeVectors, VectorPlan};
pub use fusion::{calibrate, Channel};
pub use hash_embedder::HashEmbedder;
pub use index::{EdgeDecay, NodeFacts, NodeMeta, RetrievalIndex};
pub use lexical::{LexicalIndex, Refusals};
pub use pipeline::{
    associate_with_action, associate_with_action_decayed, association, association_by_id,
    association_decayed, query_terms, seeds_of, short_only, DefaultPipeline, PipelineResult,
    RecalledAction, RecalledMemory, ShortContext, Stage,
};
pub use ppr::{
    edge_weight, forward_push, naive_ppr, Csr, EdgeWeightParams, PprParams, PprWorkspace,
};
pub use query::{
    distinct_query_texts, embed_queries, embed_query, EmbeddedQuery, QueryTexts, QueryVariant,
    QueryVectors, SubQuery,
};
pub use similarity::similarity;
pub use text_embedder::{embed_distinct, EmbedKind, TextEmbedder};
