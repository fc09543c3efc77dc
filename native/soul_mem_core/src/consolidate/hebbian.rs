//! Hebbian learning from the retrieval records: retrieval frequency f = n / T, links from new
//! notes to the most active ones, LTP for notes recalled together (a new link after repeated
//! co-activation), LTD for the other links of active notes.

use super::apply::{has_link, Run};
use super::HEBBIAN_VERB;
use crate::error::Result;
use crate::graph::MemoryGraph;
use crate::model::{IdMap, IdSet};
use crate::model::{LinkId, LinkKind, MemoryId, MemoryLinkType, SemMemLink};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// Confidence of Hebbian links: association, not a stated fact.
const HEBBIAN_CONFIDENCE: f32 = 0.5;

/// Co-activation partners considered per retrieval event, so a burst of records cannot make
/// the pair sweep quadratic.
const MAX_PARTNERS_PER_EVENT: usize = 64;

/// How often a note was retrieved since the last consolidation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Activity {
    /// The note.
    #[serde(skip)]
    pub id: MemoryId,
    /// Its readable id.
    pub readable_id: String,
    /// Its kind (snake_case).
    pub kind: &'static str,
    /// What it is about ([`crate::model::MemoryNote::display_text`]).
    pub text: String,
    /// n: retrievals.
    pub retrievals: usize,
    /// f = n / T, per hour, T = last − first retrieval (floored, see
    /// [`super::ConsolidateConfig::min_span_hours`]).
    pub frequency: f64,
}

/// Retrieval frequency f = n / T of every recorded note that exists (core notes excluded:
/// they are always shown, never "activated"), most frequent first (ties: more retrievals,
/// then readable id). Records of unknown ids are skipped. Complexity: O(records + m log m).
pub fn activity(
    graph: &MemoryGraph,
    records: &BTreeMap<String, Vec<DateTime<Utc>>>,
    min_span_hours: f64,
) -> Vec<Activity> {
    let mut by_id: IdMap<Vec<DateTime<Utc>>> = Default::default();
    for (key, times) in records {
        if let Some(id) = graph.resolve(key) {
            by_id.entry(id).or_default().extend(times.iter().copied());
        }
    }
    let mut out: Vec<Activity> = by_id
        .into_iter()
        .filter_map(|(id, times)| {
            let note = graph.get(&id).filter(|n| !n.core)?;
            let first = times.iter().min()?;
            let last = times.iter().max()?;
            let hours = (*last - *first).num_milliseconds() as f64 / 3_600_000.0;
            Some(Activity {
                id,
                readable_id: note.readable_id.clone(),
                kind: note.kind().as_str(),
                text: note.display_text(),
                retrievals: times.len(),
                frequency: times.len() as f64 / hours.max(min_span_hours),
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.frequency
            .total_cmp(&a.frequency)
            .then(b.retrievals.cmp(&a.retrievals))
            .then(a.readable_id.cmp(&b.readable_id))
    });
    out
}

/// Pairs of notes recalled together (retrievals within `window_ms`), with how often. Keys are
/// ordered pairs (smaller id first). Complexity: O(r log r + r × partners), partners per
/// event capped at [`MAX_PARTNERS_PER_EVENT`].
pub fn coactivations(
    graph: &MemoryGraph,
    records: &BTreeMap<String, Vec<DateTime<Utc>>>,
    window_ms: i64,
) -> BTreeMap<(MemoryId, MemoryId), usize> {
    let mut events: Vec<(i64, MemoryId)> = Vec::new();
    for (key, times) in records {
        if let Some(id) = graph.resolve(key) {
            events.extend(times.iter().map(|t| (t.timestamp_millis(), id)));
        }
    }
    events.sort();
    let mut pairs: BTreeMap<(MemoryId, MemoryId), usize> = BTreeMap::new();
    for (i, (t, a)) in events.iter().enumerate() {
        for (_, b) in events[i + 1..]
            .iter()
            .take(MAX_PARTNERS_PER_EVENT)
            .take_while(|(u, _)| u - t <= window_ms)
        {
            if a != b {
                *pairs.entry((*a.min(b), *a.max(b))).or_default() += 1;
            }
        }
    }
    pairs
}

impl Run<'_> {
    pub(super) fn hebbian(&mut self) -> Result<()> {
        let records = &self.changes.records;
        self.report.unknown_records = records
            .keys()
            .filter(|k| self.graph.resolve(k).is_none())
            .count();
        let activity = activity(self.graph, records, self.cfg.min_span_hours);
        let active: Vec<MemoryId> = activity.iter().take(self.cfg.top_k).map(|a| a.id).collect();
        self.report.active = activity
            .iter()
            .take(self.cfg.top_k)
            .map(|a| a.readable_id.clone())
            .collect();

        // New notes ↔ the top-k active notes, both ways (PPR walks directed edges).
        let hebbian = || {
            MemoryLinkType::Sem(SemMemLink {
                verb: HEBBIAN_VERB.to_owned(),
                confidence: HEBBIAN_CONFIDENCE,
            })
        };
        let created = self.created.clone();
        for c in &created {
            for a in &active {
                if has_link(self.graph, c, a, None) || has_link(self.graph, a, c, None) {
                    continue;
                }
                let there = self.link(*c, *a, self.cfg.base_intensity, hebbian())?;
                let back = self.link(*a, *c, self.cfg.base_intensity, hebbian())?;
                self.report.hebbian_links += usize::from(there) + usize::from(back);
            }
        }

        let pairs = coactivations(self.graph, records, self.cfg.coactivation_window_ms);
        let mut partners: IdMap<IdSet> = Default::default();
        for ((a, b), count) in &pairs {
            partners.entry(*a).or_default().insert(*b);
            partners.entry(*b).or_default().insert(*a);
            let mut linked = false;
            for (x, y) in [(*a, *b), (*b, *a)] {
                linked |= has_link(self.graph, &x, &y, None);
                self.strengthen(x, y, *count)?;
            }
            let core = |id: &MemoryId| self.graph.get(id).is_some_and(|n| n.core);
            if !linked && *count >= self.cfg.wire_after && !core(a) && !core(b) {
                let there = self.link(*a, *b, self.cfg.base_intensity, hebbian())?;
                let back = self.link(*b, *a, self.cfg.base_intensity, hebbian())?;
                self.report.wired += usize::from(there) + usize::from(back);
            }
        }

        // LTD: the other association links of every active note.
        let recorded: Vec<MemoryId> = activity.iter().map(|a| a.id).collect();
        for a in recorded {
            let with = partners.get(&a);
            let targets: Vec<(LinkId, f64)> = self
                .graph
                .get(&a)
                .map(|n| {
                    n.links
                        .iter()
                        .filter(|l| {
                            l.link_type.kind() == LinkKind::Sem
                                && !self.new_links.contains(&l.id)
                                && !with.is_some_and(|w| w.contains(&l.to))
                        })
                        .map(|l| (l.id, l.intensity))
                        .collect()
                })
                .unwrap_or_default();
            for (link, w) in targets {
                let weakened = w * self.cfg.ltd_factor;
                if weakened < self.cfg.disconnect_below {
                    self.graph.remove_link(&a, &link);
                    self.report.disconnected += 1;
                } else if weakened < w {
                    self.graph.set_link_intensity(&a, &link, weakened)?;
                    self.report.weakened += 1;
                }
            }
        }
        Ok(())
    }

    /// LTP on the association links `x → y`: + step per co-activation, capped (an intensity
    /// already above the cap is kept).
    fn strengthen(&mut self, x: MemoryId, y: MemoryId, count: usize) -> Result<()> {
        let targets: Vec<(LinkId, f64)> = self
            .graph
            .get(&x)
            .map(|n| {
                n.links
                    .iter()
                    .filter(|l| l.to == y && l.link_type.kind() == LinkKind::Sem)
                    .map(|l| (l.id, l.intensity))
                    .collect()
            })
            .unwrap_or_default();
        for (link, w) in targets {
            let raised = (w + self.cfg.ltp_step * count as f64).min(self.cfg.intensity_cap);
            if raised > w {
                self.graph.set_link_intensity(&x, &link, raised)?;
                self.report.strengthened += 1;
            }
        }
        Ok(())
    }
}
