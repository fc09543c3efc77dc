//! The idle sweep: LLM-free pruning of links whose decayed intensity fell below the threshold.

use super::*;
use crate::graph::MemoryGraph;
use crate::model::IdSet;
use crate::model::MemoryId;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// One link removed by the sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrunedLink {
    /// Source note.
    pub from: MemoryId,
    /// Target note.
    pub to: MemoryId,
    /// The link's id.
    pub link_id: crate::model::LinkId,
    /// Its stored (undecayed) intensity.
    pub intensity: f64,
    /// Its decayed intensity at sweep time.
    pub decayed_intensity: f64,
}

/// What an idle sweep found and did.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct SweepReport {
    /// Notes examined.
    pub notes: usize,
    /// Notes per decided action: `[NoAction, MaskOnly, Revised]`.
    pub actions: [usize; 3],
    /// Mean missing degree over forgettable notes (0 when there are none).
    pub mean_missing_degree: f64,
    /// Links removed from the graph.
    pub pruned: Vec<PrunedLink>,
    /// Forgettable notes left with no link in or out and `md >= archive_threshold`, in graph
    /// order. Never deleted here: the caller archives them.
    pub archive: Vec<MemoryId>,
    /// Forgetting states written or changed ([`crate::engine::Engine::forget_sweep`]; 0 from
    /// [`sweep`] alone).
    pub states_updated: usize,
}

/// The idle sweep, with no LLM: computes every note's decay, removes links whose decayed
/// intensity (`intensity × R(source)`) is below `prune_threshold`, and lists archive
/// candidates (see [`SweepReport::archive`]).
///
/// Stored intensities are not rewritten: they are the undecayed base that LTP raises;
/// retrieval multiplies by [`decay_factor`] at query time, so the sweep is idempotent at a
/// given `now` and a later recall (which slows decay) is not fighting an already-lowered value.
///
/// Complexity: O(nodes + links).
pub fn sweep(graph: &mut MemoryGraph, now: DateTime<Utc>, cfg: &ForgetConfig) -> SweepReport {
    let mut report = SweepReport {
        notes: graph.len(),
        ..SweepReport::default()
    };
    let mut md_sum = 0.0;
    let mut md_n = 0usize;
    let mut to_prune = Vec::new();
    let mut degree_md = Vec::with_capacity(graph.len());
    for note in graph.notes() {
        let d = decide(note, now, cfg);
        report.actions[d.action as usize] += 1;
        if forgettable(note) {
            md_sum += d.missing_degree;
            md_n += 1;
        }
        degree_md.push((note.id, forgettable(note), d.missing_degree));
        let r = decay_factor(note, now, cfg);
        for link in &note.links {
            let decayed = edge_decay_intensity(link.intensity, r);
            if decayed < cfg.prune_threshold {
                to_prune.push(PrunedLink {
                    from: link.from,
                    to: link.to,
                    link_id: link.id,
                    intensity: link.intensity,
                    decayed_intensity: decayed,
                });
            }
        }
    }
    for p in &to_prune {
        graph.remove_link(&p.from, &p.link_id);
    }
    report.pruned = to_prune;
    report.mean_missing_degree = if md_n == 0 { 0.0 } else { md_sum / md_n as f64 };

    // Degree after pruning: a note is isolated when no attached link starts or ends at it.
    let mut linked: IdSet = Default::default();
    for note in graph.notes() {
        for l in &note.links {
            linked.insert(l.from);
            linked.insert(l.to);
        }
    }
    for l in graph.pending_links() {
        linked.insert(l.from);
    }
    report.archive = degree_md
        .into_iter()
        .filter(|(id, f, md)| *f && *md >= cfg.archive_threshold && !linked.contains(id))
        .map(|(id, _, _)| id)
        .collect();
    report
}
