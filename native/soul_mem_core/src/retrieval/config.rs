//! Serde configuration of every retrieval strategy, with the seed's defaults.
//!
//! Every struct is `#[serde(deny_unknown_fields, default)]`: a map from the NIF (converted to
//! JSON) may name any subset of fields; a misspelt field is an error, not silently ignored.
//! Call `validate()` after deserialising.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

fn check(ok: bool, name: &str, msg: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_argument(name, msg))
    }
}

fn unit(x: f64) -> bool {
    x.is_finite() && (0.0..=1.0).contains(&x)
}

fn nonneg(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

/// Which link family PPR favours.
///
/// The seed indexes a two-element preference array: `[0]` is the type boost of `Sem` edges,
/// `[1]` that of `Situation` edges. The seed does not spell out the numbers; here the
/// preferred family gets 1.0 and the other 0.5 (so the preferred family's edges lean towards
/// weight 1 and the other's are damped, never cut off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum TypePreference {
    /// Favour situation (episodic) links — the seed's default.
    #[default]
    Situation,
    /// Favour semantic links.
    Semantic,
}

impl TypePreference {
    /// `[sem_type_boost, situation_type_boost]`.
    pub fn values(self) -> [f64; 2] {
        match self {
            TypePreference::Situation => [0.5, 1.0],
            TypePreference::Semantic => [1.0, 0.5],
        }
    }
}

/// Which memories association may lift into the results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum LiftTargets {
    /// Situations only (specific episodes and abstract patterns). The walk passes through
    /// semantic notes (people, places, concepts) to reach the episodes they take part in,
    /// but those notes enter the results by their own similarity: as HippoRAG ranks passages
    /// by the walk over the phrase nodes, not the phrase nodes themselves, and as the seed
    /// prefers situations. Lifting every kind let the entities next to the best episodes
    /// crowd out direct hits (corpus pairs: must-hit 98.0 → 97.0, abstract 76 → 73 of 84).
    #[default]
    Situations,
    /// Every memory kind.
    All,
}

/// PPR association (seed `AssociationConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AssociationConfig {
    /// Weight `i` of the link intensity in the dynamic edge weight. Default 1.0.
    pub intensity_factor: f64,
    /// Weight `c` of the confidence boost in the dynamic edge weight. Default 0.8.
    pub confidence_factor: f64,
    /// Continue probability `d` of the walk, in [0, 1). Default 0.65.
    pub damping_factor: f64,
    /// Forward-push residual threshold ε (relative to out-degree), > 0. Default 1e-5.
    pub residue_threshold: f64,
    /// Link family preference. Default Situation.
    pub preference: TypePreference,
    /// Number of PPR results kept by [`super::association`] (the pipeline ranks every reached
    /// node by its blended score instead). Default 8.
    pub top_k: usize,
    /// β: weight of the calibrated association score against the fused similarity score;
    /// a memory scores `max(similarity, (1 − β)·similarity + β·association)` (association
    /// can lift a memory, never sink one), β in [0, 1]. 0 turns association off for memories
    /// (actions still use it). Default 0.9 (0.875–1.0 is a plateau on the development set's
    /// multi-hop cases; lower keeps direct hits first more often on the corpus pairs).
    pub blend: f64,
    /// Which memories the blend may lift (see [`LiftTargets`]). Default situations.
    pub lift: LiftTargets,
    /// Weight of walking a link backwards, relative to forwards, in [0, 1]. 1 walks an
    /// undirected graph, as HippoRAG's PPR does: association runs both ways (the episode
    /// evokes the person, the person the episode), and a pattern (abstract situation), which
    /// links to the people and places it concerns and is linked from nothing, is reached from
    /// them. 0 walks links forwards only (the seed). Default 1.0.
    pub reverse_links: f64,
    /// γ of node specificity `(1 + degree)^−γ`: seeds are weighted, and walk results scored,
    /// by it, so hubs (the self, a speaker everyone links to) neither dominate the walk nor
    /// crowd episodes out of the results (HippoRAG 2's node specificity). 0 = off. Default 0.5.
    pub hub_exponent: f64,
    /// Seed weights of the walk are the seeds' fused scores raised to this power (≥ 1): a
    /// larger value concentrates the walk on the best match (0.9¹⁶ ≈ 0.19: the second-best seed still walks,
    /// a look-alike at 0.8 hardly). Measured flat from 4 to 16 on the development sets. Default 16.
    pub seed_exponent: f64,
}

impl Default for AssociationConfig {
    fn default() -> Self {
        AssociationConfig {
            intensity_factor: 1.0,
            confidence_factor: 0.8,
            damping_factor: 0.65,
            residue_threshold: 1e-5,
            preference: TypePreference::Situation,
            top_k: 8,
            blend: 0.9,
            lift: LiftTargets::Situations,
            reverse_links: 1.0,
            hub_exponent: 0.5,
            seed_exponent: 16.0,
        }
    }
}

impl AssociationConfig {
    /// Rejects out-of-range values.
    pub fn validate(&self) -> Result<()> {
        check(
            nonneg(self.intensity_factor),
            "intensity_factor",
            "must be finite and >= 0",
        )?;
        check(
            nonneg(self.confidence_factor),
            "confidence_factor",
            "must be finite and >= 0",
        )?;
        check(
            self.damping_factor.is_finite() && (0.0..1.0).contains(&self.damping_factor),
            "damping_factor",
            "must be in [0, 1)",
        )?;
        check(
            self.residue_threshold.is_finite() && self.residue_threshold > 0.0,
            "residue_threshold",
            "must be finite and > 0",
        )?;
        check(unit(self.blend), "blend", "must be in [0, 1]")?;
        check(
            unit(self.reverse_links),
            "reverse_links",
            "must be in [0, 1]",
        )?;
        check(
            nonneg(self.hub_exponent) && self.hub_exponent <= 4.0,
            "hub_exponent",
            "must be finite and in [0, 4]",
        )?;
        check(
            self.seed_exponent.is_finite() && (1.0..=64.0).contains(&self.seed_exponent),
            "seed_exponent",
            "must be finite and in [1, 64]",
        )
    }
}

/// Bayes action inference (seed `BayesActionConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BayesActionConfig {
    /// Number of actions kept. Default 5.
    pub top_k: usize,
}

impl Default for BayesActionConfig {
    fn default() -> Self {
        BayesActionConfig { top_k: 5 }
    }
}

impl BayesActionConfig {
    /// Always valid (any `top_k`, 0 returns nothing).
    pub fn validate(&self) -> Result<()> {
        Ok(())
    }
}

/// PPR plus two-source Bayes (seed `AssociateWithActionConfig`).
///
/// As in the seed, the Bayes step keeps its own `bayes.top_k` (5) candidates and
/// AssociateWithAction then returns the best `action_top_k` (3) of those, so at most
/// `min(bayes.top_k, action_top_k)` actions come out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AssociateWithActionConfig {
    /// The PPR step.
    pub association: AssociationConfig,
    /// The Bayes action step (its own top-k, default 5).
    pub bayes: BayesActionConfig,
    /// Number of actions returned, taken from the Bayes step's. Default 3.
    pub action_top_k: usize,
    /// Multiplier of abstract-situation sources before the softmax. Default 2.0.
    pub abstract_source_priority: f64,
    /// Softmax temperature of the situation sources (scores in [0, 1]): low values let the
    /// best-matching situations decide, so a habit linked from many situations does not win
    /// every case by sheer count. > 0. Default 0.1.
    pub source_temperature: f64,
    /// Weight of a habit's own likeness to the query (its action text against the query's
    /// texts, calibrated over the character's habits) next to the Bayes evidence of the
    /// situations: a message that describes the habit itself evokes it even when no trigger
    /// situation is recalled. 0 leaves actions to Bayes alone. Default 0.5.
    pub habit_match: f64,
}

impl Default for AssociateWithActionConfig {
    fn default() -> Self {
        AssociateWithActionConfig {
            association: AssociationConfig::default(),
            bayes: BayesActionConfig::default(),
            action_top_k: 3,
            abstract_source_priority: 2.0,
            source_temperature: 0.1,
            habit_match: 0.5,
        }
    }
}

impl AssociateWithActionConfig {
    /// Rejects out-of-range values.
    pub fn validate(&self) -> Result<()> {
        self.association.validate()?;
        self.bayes.validate()?;
        check(
            nonneg(self.abstract_source_priority),
            "abstract_source_priority",
            "must be finite and >= 0",
        )?;
        check(
            self.source_temperature.is_finite() && self.source_temperature > 0.0,
            "source_temperature",
            "must be finite and > 0",
        )?;
        check(
            nonneg(self.habit_match),
            "habit_match",
            "must be finite and >= 0",
        )
    }
}

/// Short-term memory pass-through (seed `ShortOnlyConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ShortOnlyConfig {
    /// Keep only the last N window messages (None: all).
    pub clipping_length: Option<usize>,
    /// Hand the summary through. Default false.
    pub include_summary: bool,
}

impl ShortOnlyConfig {
    /// Always valid.
    pub fn validate(&self) -> Result<()> {
        Ok(())
    }
}

/// All tunable weights of the fused similarity (the seed's `BlendWeights`, 16 values).
///
/// Top level: `emb = (tag·tag_sim + variant·variant_sim) / (tag + variant)` (only the
/// channel(s) the query has), then the string channel: `max(emb, α·emb + (1−α)·str)`.
/// Inside a variant, fields are fused by weighted max (`max_f w_f · sim_f`); two-part fields
/// (concept + description, participant name + role) are weighted means of the parts present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BlendWeights {
    /// Tag channel weight. Default 0.3.
    pub tag: f32,
    /// Variant (structured query) channel weight. Default 0.7.
    pub variant: f32,
    /// α of the string blend. Default 0.6.
    pub string_blend_alpha: f32,
    /// Semantic query: concept identifier part. Default 0.7.
    pub sem_concept: f32,
    /// Semantic query: description part. Default 0.3.
    pub sem_description: f32,
    /// Situation query: narrative field. Default 1.0.
    pub sit_narrative: f32,
    /// Situation query: location field. Default 1.0.
    pub sit_location: f32,
    /// Situation query: participant name part. Default 0.8.
    pub sit_participant_name: f32,
    /// Situation query: participant role part. Default 0.2.
    pub sit_participant_role: f32,
    /// Situation query: environment vs. the memory's emotions. Default 0.8.
    pub sit_emotion: f32,
    /// Situation query: environment field. Default 1.0.
    pub sit_environment: f32,
    /// Situation query: event field. Default 1.0.
    pub sit_event: f32,
    /// Abstract situations matched through their narrative fallback. Default 1.0 (the seed's
    /// 0.9 damped raw cosines; under calibrated fusion it only hid patterns: 64 → 68 of 84
    /// abstract situations found on the corpus pairs, 15 → 16 of 16 on the development set).
    pub abstract_narrative_fallback: f32,
    /// Cross-variant matches (semantic query vs. situation text and back). Default 0.8.
    pub cross_variant: f32,
    /// A specific situation inside a queried time range gains `boost·(1 − score)`. Default 0.1.
    pub time_match_boost: f32,
    /// A specific situation with a time outside every queried range is scaled. Default 0.8.
    pub time_mismatch_factor: f32,
    /// The character's habits count as fields of the notes that hold them (the self note
    /// holds every procedure; a semantic note those it links to), at this weight. 0 = off.
    /// Default 1.0.
    pub own_habits: f32,
}

impl Default for BlendWeights {
    fn default() -> Self {
        BlendWeights {
            tag: 0.3,
            variant: 0.7,
            string_blend_alpha: 0.6,
            sem_concept: 0.7,
            sem_description: 0.3,
            sit_narrative: 1.0,
            sit_location: 1.0,
            sit_participant_name: 0.8,
            sit_participant_role: 0.2,
            sit_emotion: 0.8,
            sit_environment: 1.0,
            sit_event: 1.0,
            abstract_narrative_fallback: 1.0,
            cross_variant: 0.8,
            time_match_boost: 0.1,
            time_mismatch_factor: 0.8,
            own_habits: 1.0,
        }
    }
}

impl BlendWeights {
    /// Rejects negative, non-finite or out-of-[0, 1] values (all weights are in [0, 1]).
    pub fn validate(&self) -> Result<()> {
        let all = [
            ("tag", self.tag),
            ("variant", self.variant),
            ("string_blend_alpha", self.string_blend_alpha),
            ("sem_concept", self.sem_concept),
            ("sem_description", self.sem_description),
            ("sit_narrative", self.sit_narrative),
            ("sit_location", self.sit_location),
            ("sit_participant_name", self.sit_participant_name),
            ("sit_participant_role", self.sit_participant_role),
            ("sit_emotion", self.sit_emotion),
            ("sit_environment", self.sit_environment),
            ("sit_event", self.sit_event),
            (
                "abstract_narrative_fallback",
                self.abstract_narrative_fallback,
            ),
            ("cross_variant", self.cross_variant),
            ("time_match_boost", self.time_match_boost),
            ("time_mismatch_factor", self.time_mismatch_factor),
            ("own_habits", self.own_habits),
        ];
        for (name, v) in all {
            check(unit(f64::from(v)), name, "must be in [0, 1]")?;
        }
        check(
            self.tag + self.variant > 0.0,
            "tag",
            "tag + variant must be > 0",
        )
    }
}

/// Fused similarity (seed `SimilarityConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimilarityConfig {
    /// Floor: nodes scoring below are dropped before top-k. Default 0.35; depends on the
    /// embedding model, so set it per model.
    pub similarity_threshold: f32,
    /// Top-k: the number of similarity seeds of the walk. Default 2: few, sharp seeds let the
    /// walk favour what hangs together with the best matches (measured on the development
    /// sets: 2 seeds beat 3, 4 and 8 on multi-hop cases and on the corpus alike).
    pub max_results: usize,
    /// Channel weights.
    pub blend: BlendWeights,
    /// Graphs with at least this many nodes are scored in parallel with rayon.
    /// Default 20 000.
    pub parallel_min_nodes: usize,
    /// How the dense, tag and lexical channels are made comparable and fused into seeds.
    pub fusion: FusionConfig,
}

impl Default for SimilarityConfig {
    fn default() -> Self {
        SimilarityConfig {
            similarity_threshold: 0.35,
            max_results: 2,
            blend: BlendWeights::default(),
            parallel_min_nodes: 20_000,
            fusion: FusionConfig::default(),
        }
    }
}

/// How each channel's scores are put on one scale per query before fusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FusionMethod {
    /// Per-query standardisation: `z = (x − mean)/sd` over the nodes the channel scores,
    /// mapped to (0, 1) by the logistic approximation of the normal CDF (`1/(1 + e^−1.702z)`).
    #[default]
    Zscore,
    /// Reciprocal rank: `(k + 1)/(k + rank)` within the channel (1 for its best node).
    Rrf,
    /// No calibration (ablation): raw cosines as they are, BM25 divided by the query's best.
    Raw,
}

/// Calibrated fusion of the similarity channels (and the scale of the association channel).
///
/// A node's fused score is the weighted mean of its calibrated channels over the channels
/// *present* for it: no tags on the note or the query, or no shared word, leave that channel
/// out of the node's mean instead of counting it as 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FusionConfig {
    /// Calibration. Default zscore.
    pub method: FusionMethod,
    /// Weight of the dense (per-field embedding) channel. Default 1.0.
    pub dense: f64,
    /// Weight of the tag channel. Default 0.25.
    pub tag: f64,
    /// Weight of the lexical (BM25F) channel. Default 1.0.
    pub lexical: f64,
    /// `k` of reciprocal-rank calibration, > 0. Default 60.
    pub rrf_k: f64,
}

impl Default for FusionConfig {
    fn default() -> Self {
        FusionConfig {
            method: FusionMethod::Zscore,
            dense: 1.0,
            tag: 0.25,
            lexical: 1.0,
            rrf_k: 60.0,
        }
    }
}

impl FusionConfig {
    /// Rejects negative or non-finite weights, all-zero weights and a bad `rrf_k`.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("fusion.dense", self.dense),
            ("fusion.tag", self.tag),
            ("fusion.lexical", self.lexical),
        ] {
            check(nonneg(v), name, "must be finite and >= 0")?;
        }
        check(
            self.dense + self.tag + self.lexical > 0.0,
            "fusion.dense",
            "fusion weights must not all be 0",
        )?;
        check(
            self.rrf_k.is_finite() && self.rrf_k > 0.0,
            "fusion.rrf_k",
            "must be finite and > 0",
        )
    }
}

impl SimilarityConfig {
    /// Rejects out-of-range values.
    pub fn validate(&self) -> Result<()> {
        check(
            self.similarity_threshold.is_finite()
                && (-1.0..=1.0).contains(&self.similarity_threshold),
            "similarity_threshold",
            "must be in [-1, 1]",
        )?;
        self.blend.validate()?;
        self.fusion.validate()
    }
}

/// The default three-stage pipeline (seed `DefaultPipelineConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DefaultPipelineConfig {
    /// Stage ①.
    pub short_mem_with_history: ShortOnlyConfig,
    /// Stage ②.
    pub similarity: SimilarityConfig,
    /// Stage ③.
    pub assoc_with_action: AssociateWithActionConfig,
    /// Memories returned after merging (seed `MAX_PIPELINE_NOTES`). Default 10.
    pub max_memories: usize,
    /// Self-knowledge procedures (reached from semantic memories) returned. Default 3.
    pub self_knowledge_top_k: usize,
    /// Largest score offset a sub-query's priority adds when merging queries. Default 0.05.
    pub priority_offset: f64,
}

impl Default for DefaultPipelineConfig {
    fn default() -> Self {
        DefaultPipelineConfig {
            short_mem_with_history: ShortOnlyConfig::default(),
            similarity: SimilarityConfig::default(),
            assoc_with_action: AssociateWithActionConfig::default(),
            max_memories: 10,
            self_knowledge_top_k: 3,
            priority_offset: 0.05,
        }
    }
}

/// The configuration the NIF passes: the default pipeline's.
pub type PipelineConfig = DefaultPipelineConfig;

impl DefaultPipelineConfig {
    /// Rejects out-of-range values in any stage.
    pub fn validate(&self) -> Result<()> {
        self.short_mem_with_history.validate()?;
        self.similarity.validate()?;
        self.assoc_with_action.validate()?;
        check(
            self.priority_offset.is_finite() && (0.0..=1.0).contains(&self.priority_offset),
            "priority_offset",
            "must be in [0, 1]",
        )
    }
}
