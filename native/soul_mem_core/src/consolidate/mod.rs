//! Consolidation (巩固): what an LLM extracted from the cumulative summary becomes memory, all
//! or nothing, and the graph evolves with it.
//!
//! One call of [`consolidate`] applies one [`ChangeSet`] to a [`MemoryGraph`]:
//!
//! 1. **notes** of all four kinds get stable ids (UUIDv5 of character + a readable id derived
//!    from kind and normalised text); a new Semantic note whose content or an alias matches an
//!    existing concept (normalised string first, then embedding similarity) is **merged** into
//!    it (aliases union, description merged, its links moved), a Specific situation that
//!    repeats a known one on the same day is reused, likewise identical patterns and actions;
//! 2. **links** among new and existing notes (endpoint kinds checked);
//! 3. **Hebbian** learning from the retrieval records: frequency f = n / T picks the top-k
//!    active notes, which every new note is linked to; notes recalled together get LTP on their
//!    links (or a new link after repeated co-activation), other links of active notes get LTD,
//!    and a link that falls below the threshold is disconnected;
//! 4. **self-evolution**: when at least k specific situations share a participant, a location
//!    or an event (structured fields, merged by embedding similarity) an AbstractSituation is
//!    induced or reused with SpecificToAbstract / AbstractToSpecific edges, and behaviour the
//!    character shows repeatedly in them becomes a Procedure with a TrigToAction edge whose
//!    probability is the behaviour's share (normalised by sum, not softmax). Induced notes
//!    carry their evidence as `evidence:<readable id>` tags.
//!
//! Everything happens on a copy of the graph that replaces the original only when every step
//! succeeded, so an invalid change set (unknown kind, wrong type, too many notes, a link to an
//! unknown id) leaves the graph exactly as it was.
//!
//! Files, in the order of a run: `config.rs` (the parameters), `change_set.rs` (decoding and
//! validating what the LLM extracted), `apply.rs` (the all-or-nothing run: notes and links),
//! `dedupe.rs` (matching new notes against existing ones), `hebbian.rs` (retrieval frequency
//! and co-activation), `induce.rs` (patterns and habits) and `report.rs` (what a run did).

mod apply;
mod change_set;
mod config;
mod dedupe;
mod hebbian;
mod induce;
mod report;
#[cfg(test)]
mod tests;

pub use change_set::{ChangeSet, NewLink, NewNote};
pub use config::ConsolidateConfig;
pub use dedupe::{duplicate_semantic_groups, normalize_name};
pub use hebbian::{activity, coactivations, Activity};
pub use report::{InducedHabit, InducedPattern, Merged, Report};

use crate::error::Result;
use crate::graph::MemoryGraph;
use crate::retrieval::TextEmbedder;
use apply::Run;

/// Prefix of the tags that record an induced note's evidence.
pub const EVIDENCE_TAG: &str = "evidence:";

/// Verb of the links Hebbian learning creates.
pub const HEBBIAN_VERB: &str = "联想";

/// Applies `changes` to `graph`, all or nothing (see the module docs). `embedder` enables the
/// similarity steps (dedupe after exact matching, pattern names); without it only structured
/// fields and normalised strings are compared.
///
/// Complexity: O(nodes + links) for the working copy and the name indexes, plus embedding the
/// new texts and the existing Semantic names, specific narratives and pattern names once.
pub fn consolidate(
    graph: &mut MemoryGraph,
    changes: &ChangeSet,
    cfg: &ConsolidateConfig,
    embedder: Option<&dyn TextEmbedder>,
) -> Result<Report> {
    cfg.validate()?;
    changes.validate(cfg)?;
    let mut work = graph.clone();
    let report = Run::new(&mut work, changes, cfg, embedder).run()?;
    *graph = work;
    Ok(report)
}
