//! Decay: the Ebbinghaus retention curve, a note's missing degree and decayed link intensities.

use super::*;
use crate::model::{MemoryLink, MemoryNote, NodeKind};
use chrono::{DateTime, Utc};

/// Retention `R(t) = e^(−t/τ)` with `τ = adjusted_half_life / ln 2`, `t` in hours.
/// `t <= 0` (or NaN) gives 1: a memory is whole when formed, and a clock skew must not make it
/// "more than remembered".
pub fn retention(elapsed_hours: f64, retrieval_count: u32, cfg: &ForgetConfig) -> f64 {
    // NaN is not greater than 0 either, so it also gets full retention.
    if elapsed_hours.is_nan() || elapsed_hours <= 0.0 {
        return 1.0;
    }
    let tau = cfg.adjusted_half_life(retrieval_count) / std::f64::consts::LN_2;
    (-elapsed_hours / tau).exp()
}

/// `1 − R(t)`: 0 = fully remembered, → 1 = nearly all forgotten.
pub fn missing_degree_at(elapsed_hours: f64, retrieval_count: u32, cfg: &ForgetConfig) -> f64 {
    1.0 - retention(elapsed_hours, retrieval_count, cfg)
}

/// The seed's `edge_decay_intensity`: a link fades with its source note.
pub fn edge_decay_intensity(intensity: f64, source_retention: f64) -> f64 {
    intensity * source_retention
}

/// Hours elapsed on the configured clock (creation or last access) up to `now`.
pub fn elapsed_hours(note: &MemoryNote, now: DateTime<Utc>, cfg: &ForgetConfig) -> f64 {
    let start = match cfg.clock {
        DecayClock::SinceCreation => note.create_time,
        DecayClock::SinceLastAccess => note.last_accessed_time.max(note.create_time),
    };
    // Milliseconds keep sub-second precision irrelevant and cannot overflow for real dates.
    (now - start).num_milliseconds() as f64 / 3_600_000.0
}

/// True for the kinds that forget (SpecificSituation and Semantic), excluding core notes.
/// Procedures (habits) and abstract situations (patterns) do not fade, as in the seed; core
/// notes (the self) are always resident and whole.
pub fn forgettable(note: &MemoryNote) -> bool {
    !note.core
        && matches!(
            note.kind(),
            NodeKind::SpecificSituation | NodeKind::Semantic
        )
}

/// Retention factor of `note` at `now`, for retrieval to multiply link intensities and scores
/// by at query time. 1 for notes that do not forget (see [`forgettable`]).
pub fn decay_factor(note: &MemoryNote, now: DateTime<Utc>, cfg: &ForgetConfig) -> f64 {
    if !forgettable(note) {
        return 1.0;
    }
    retention(elapsed_hours(note, now, cfg), note.retrieval_count, cfg)
}

/// Missing degree of `note` at `now` (`1 − decay_factor`); 0 for notes that do not forget.
pub fn missing_degree(note: &MemoryNote, now: DateTime<Utc>, cfg: &ForgetConfig) -> f64 {
    1.0 - decay_factor(note, now, cfg)
}

/// The decayed intensity of `link` whose source is `source` (`intensity × R(source)`).
/// The stored intensity stays the undecayed base; this is the value to use at query time.
pub fn decayed_intensity(
    link: &MemoryLink,
    source: &MemoryNote,
    now: DateTime<Utc>,
    cfg: &ForgetConfig,
) -> f64 {
    edge_decay_intensity(link.intensity, decay_factor(source, now, cfg))
}
