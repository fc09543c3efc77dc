//! The parameters of forgetting ([`ForgetConfig`]), the decay clock and the mask strings.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// What replaces each forgotten word (the seed's `MASK_WORD`, spaces included).
pub const MASK_WORD: &str = " [masked] ";

/// The marker inside [`MASK_WORD`], for detecting masked text.
pub const MASK_MARKER: &str = "[masked]";

/// Which clock the decay runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DecayClock {
    /// Hours since the note was created (the seed).
    #[default]
    SinceCreation,
    /// Hours since the note was last recalled (each recall restarts the curve).
    SinceLastAccess,
}

/// Forgetting parameters. Defaults are the seed's constants.
///
/// Unknown fields are rejected so a typo in a config file is an error, not a silent default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForgetConfig {
    /// Half-life of a never-recalled memory, in hours (R = 0.5 there). Default 24.
    pub base_half_life_hours: f64,
    /// Each recall lengthens the half-life by this fraction. Default 0.1.
    pub active_factor: f64,
    /// Recalls beyond this count do not slow forgetting further. Default 50.
    pub max_activation_cap: u32,
    /// Below this missing degree nothing happens (the seed's `MASK_THRESHOLD`). Default 0.05.
    pub mask_threshold: f64,
    /// From this missing degree on, an LLM revision is wanted (`REVISE_THRESHOLD`). Default 0.15.
    pub revise_threshold: f64,
    /// Below this missing degree the aliases of a semantic note may not grow during alignment
    /// (`ALIGN_LENGTH_CAP_THRESHOLD`). Default 0.6.
    pub alias_growth_threshold: f64,
    /// The sweep removes links whose decayed intensity is below this. Default 0.05.
    pub prune_threshold: f64,
    /// Notes left without links whose missing degree reaches this are archive candidates.
    /// Default 0.95.
    pub archive_threshold: f64,
    /// Decay clock. Default: since creation (the seed).
    pub clock: DecayClock,
}

impl Default for ForgetConfig {
    fn default() -> Self {
        ForgetConfig {
            base_half_life_hours: 24.0,
            active_factor: 0.1,
            max_activation_cap: 50,
            mask_threshold: 0.05,
            revise_threshold: 0.15,
            alias_growth_threshold: 0.6,
            prune_threshold: 0.05,
            archive_threshold: 0.95,
            clock: DecayClock::SinceCreation,
        }
    }
}

impl ForgetConfig {
    /// Checks every parameter: positive finite half-life, finite non-negative active factor,
    /// thresholds in [0, 1] with `mask_threshold <= revise_threshold`, finite non-negative
    /// prune threshold. The other functions of this module assume a validated config.
    pub fn validate(&self) -> Result<()> {
        if !(self.base_half_life_hours.is_finite() && self.base_half_life_hours > 0.0) {
            return Err(Error::invalid_argument(
                "base_half_life_hours",
                format!(
                    "must be a positive finite number, got {}",
                    self.base_half_life_hours
                ),
            ));
        }
        if !(self.active_factor.is_finite() && self.active_factor >= 0.0) {
            return Err(Error::invalid_argument(
                "active_factor",
                format!("must be a finite number >= 0, got {}", self.active_factor),
            ));
        }
        for (name, v) in [
            ("mask_threshold", self.mask_threshold),
            ("revise_threshold", self.revise_threshold),
            ("alias_growth_threshold", self.alias_growth_threshold),
            ("archive_threshold", self.archive_threshold),
        ] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(Error::invalid_argument(
                    name,
                    format!("must be in [0, 1], got {v}"),
                ));
            }
        }
        if self.mask_threshold > self.revise_threshold {
            return Err(Error::invalid_argument(
                "mask_threshold",
                format!(
                    "must not exceed revise_threshold ({} > {})",
                    self.mask_threshold, self.revise_threshold
                ),
            ));
        }
        if !(self.prune_threshold.is_finite() && self.prune_threshold >= 0.0) {
            return Err(Error::invalid_argument(
                "prune_threshold",
                format!("must be a finite number >= 0, got {}", self.prune_threshold),
            ));
        }
        Ok(())
    }

    /// Parses a JSON config (unknown fields rejected) and validates it.
    pub fn from_json(json: &str) -> Result<Self> {
        let cfg: ForgetConfig =
            serde_json::from_str(json).map_err(|e| Error::InvalidJson(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The half-life in hours after `retrieval_count` recalls:
    /// `base × (1 + active_factor × min(count, cap))`.
    pub fn adjusted_half_life(&self, retrieval_count: u32) -> f64 {
        let n = f64::from(retrieval_count.min(self.max_activation_cap));
        self.base_half_life_hours * (1.0 + self.active_factor * n)
    }
}
