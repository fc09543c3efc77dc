//! The parameters of consolidation ([`ConsolidateConfig`]) and their domains.

use crate::error::{Error, Result};
use crate::model::DEFAULT_INTENSITY;
use serde::{Deserialize, Serialize};

/// Parameters of consolidation. Unknown fields are rejected so a typo is an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsolidateConfig {
    /// Largest change set in bytes (JSON). Default 4 MB.
    pub max_bytes: u64,
    /// Most notes in one change set. Default 200.
    pub max_notes: usize,
    /// Most links in one change set. Default 1000.
    pub max_links: usize,
    /// Most retrieval timestamps in one change set. Default 100 000.
    pub max_records: usize,
    /// Longest string of a note, in characters. Default 2000.
    pub max_text_chars: usize,
    /// Longest list of a note (aliases, tags, participants …). Default 64.
    pub max_list_len: usize,
    /// Intensity of a change-set link that gives none. Default 1.0.
    pub default_intensity: f64,
    /// How many of the most frequently retrieved notes new notes are linked to. Default 5.
    pub top_k: usize,
    /// Floor of T (hours) in f = n / T, so one retrieval does not divide by zero. Default 1.
    pub min_span_hours: f64,
    /// Intensity of links created by Hebbian learning. Default 0.5.
    pub base_intensity: f64,
    /// Retrievals this close (ms) count as recalled together. Default 1000.
    pub coactivation_window_ms: i64,
    /// Co-activations after which two unlinked notes get a link. Default 2.
    pub wire_after: usize,
    /// LTP: intensity added per co-activation. Default 0.1.
    pub ltp_step: f64,
    /// LTP never raises an intensity above this (higher ones are kept). Default 1.0.
    pub intensity_cap: f64,
    /// LTD: factor applied to a link of an active note that was not co-activated. Default 0.9.
    pub ltd_factor: f64,
    /// A link weakened below this is disconnected. Default 0.05.
    pub disconnect_below: f64,
    /// Embedding similarity above which a new Semantic note is the same concept. Default 0.93.
    pub merge_similarity: f32,
    /// Embedding similarity above which a specific situation repeats a known one (same day).
    /// Default 0.95.
    pub situation_similarity: f32,
    /// Specific situations needed to induce a pattern (k). Default 3.
    pub pattern_min_support: usize,
    /// Embedding similarity above which two participant/location/event names are one pattern.
    /// Default 0.9.
    pub pattern_similarity: f32,
    /// Situations of a pattern in which a behaviour must show to become a habit. Default 3.
    pub behaviour_min_support: usize,
    /// Names the character is known by (besides "我", the graph's character and the self node).
    pub self_names: Vec<String>,
}

impl Default for ConsolidateConfig {
    fn default() -> Self {
        ConsolidateConfig {
            max_bytes: 4_000_000,
            max_notes: 200,
            max_links: 1000,
            max_records: 100_000,
            max_text_chars: 2000,
            max_list_len: 64,
            default_intensity: DEFAULT_INTENSITY,
            top_k: 5,
            min_span_hours: 1.0,
            base_intensity: 0.5,
            coactivation_window_ms: 1000,
            wire_after: 2,
            ltp_step: 0.1,
            intensity_cap: 1.0,
            ltd_factor: 0.9,
            disconnect_below: 0.05,
            merge_similarity: 0.93,
            situation_similarity: 0.95,
            pattern_min_support: 3,
            pattern_similarity: 0.9,
            behaviour_min_support: 3,
            self_names: Vec::new(),
        }
    }
}

fn check_range(name: &str, v: f64, lo: f64, hi: f64) -> Result<()> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(Error::invalid_argument(
            name,
            format!("must be a finite number in [{lo}, {hi}], got {v}"),
        ))
    }
}

impl ConsolidateConfig {
    /// Checks every field's domain.
    pub fn validate(&self) -> Result<()> {
        check_range("default_intensity", self.default_intensity, 0.0, 1e6)?;
        check_range("min_span_hours", self.min_span_hours, 1e-6, 1e6)?;
        check_range("base_intensity", self.base_intensity, 0.0, 1e6)?;
        check_range("ltp_step", self.ltp_step, 0.0, 1e6)?;
        check_range("intensity_cap", self.intensity_cap, 0.0, 1e6)?;
        check_range("ltd_factor", self.ltd_factor, 0.0, 1.0)?;
        check_range("disconnect_below", self.disconnect_below, 0.0, 1e6)?;
        for (name, v) in [
            ("merge_similarity", self.merge_similarity),
            ("situation_similarity", self.situation_similarity),
            ("pattern_similarity", self.pattern_similarity),
        ] {
            check_range(name, f64::from(v), -1.0, 1.0)?;
        }
        if self.coactivation_window_ms < 0 {
            return Err(Error::invalid_argument(
                "coactivation_window_ms",
                "must be >= 0",
            ));
        }
        for (name, v) in [
            ("max_notes", self.max_notes),
            ("max_text_chars", self.max_text_chars),
            ("max_list_len", self.max_list_len),
            ("wire_after", self.wire_after),
            ("pattern_min_support", self.pattern_min_support),
            ("behaviour_min_support", self.behaviour_min_support),
        ] {
            if v == 0 {
                return Err(Error::invalid_argument(name, "must be at least 1"));
            }
        }
        Ok(())
    }
}
