//! What one consolidation did ([`Report`]), returned to the caller and shown by `soul_tune`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// A new note merged into (or reused as) an existing one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Merged {
    /// The change-set key.
    pub key: String,
    /// Readable id of the note it became part of.
    pub into: String,
    /// `"exact"` (normalised string) or `"similarity"` (embedding).
    pub by: &'static str,
    /// Similarity for `"similarity"` merges, 1 for exact ones.
    pub score: f32,
}

/// An induced (or reused and extended) abstract situation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InducedPattern {
    /// Readable id.
    pub id: String,
    /// `"participant"`, `"location"` or `"event"`.
    pub facet: &'static str,
    /// The pattern's name.
    pub name: String,
    /// The specific situations it was induced from (readable ids).
    pub evidence: Vec<String>,
    /// True when an existing abstract situation was reused.
    pub reused: bool,
}

/// An induced (or reused) habit of a pattern.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InducedHabit {
    /// Readable id of the procedure.
    pub id: String,
    /// Readable id of the abstract situation that triggers it.
    pub trigger: String,
    /// TrigToAction probability: the behaviour's share among the pattern's behaviours.
    pub prob: f64,
    /// The specific situations that show it (readable ids).
    pub evidence: Vec<String>,
    /// True when an existing procedure was reused.
    pub reused: bool,
}

/// What one consolidation did.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Report {
    /// Readable ids of the notes created from the change set, in order.
    pub created: Vec<String>,
    /// New notes merged into or reused as existing ones.
    pub merged: Vec<Merged>,
    /// Change-set key → readable id, for every note.
    pub keys: BTreeMap<String, String>,
    /// Links added in total (change set, Hebbian, induction).
    pub linked: usize,
    /// Change-set links skipped because the same link already existed (or a merge made them a
    /// self-loop).
    pub skipped_links: usize,
    /// The top-k active notes new notes were linked to (readable ids).
    pub active: Vec<String>,
    /// Links from new notes to active ones and back.
    pub hebbian_links: usize,
    /// Links created between notes recalled together repeatedly.
    pub wired: usize,
    /// Links strengthened (LTP).
    pub strengthened: usize,
    /// Links weakened (LTD).
    pub weakened: usize,
    /// Links removed because LTD took them below the threshold.
    pub disconnected: usize,
    /// Induced or extended patterns.
    pub induced: Vec<InducedPattern>,
    /// Induced or updated habits.
    pub habits: Vec<InducedHabit>,
    /// Record keys that name no note.
    pub unknown_records: usize,
    /// The newest retrieval timestamp consumed (records up to it can be dropped).
    pub records_until: Option<DateTime<Utc>>,
}
