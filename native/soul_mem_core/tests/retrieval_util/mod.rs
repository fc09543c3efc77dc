//! Graph-building helpers shared by the retrieval tests.
#![allow(clippy::unwrap_used, dead_code)]

use chrono::{DateTime, Utc};
use soul_mem_core::graph::MemoryGraph;
use soul_mem_core::model::*;

pub const C: &str = "t";

pub fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

pub fn sem(id: &str, content: &str, desc: &str, tags: &[&str]) -> MemoryNote {
    let mut n = MemoryNote::new(
        C,
        id,
        MemoryType::Semantic(SemMemory {
            content: content.into(),
            aliases: vec![],
            concept_type: ConceptType::Entity,
            description: desc.into(),
        }),
        t0(),
    );
    n.tags = tags.iter().map(|t| t.to_string()).collect();
    n
}

pub fn spec(id: &str, narrative: &str, time: Option<&str>) -> MemoryNote {
    MemoryNote::new(
        C,
        id,
        MemoryType::Situation(Situation::SpecificSituation(SpecificSituation {
            narrative: narrative.into(),
            time_span: time.map(|t| DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc)),
            context: Context::default(),
        })),
        t0(),
    )
}

pub fn abs_loc(id: &str, name: &str) -> MemoryNote {
    MemoryNote::new(
        C,
        id,
        MemoryType::Situation(Situation::AbstractSituation(AbstractSituation::Location(
            Location {
                name: name.into(),
                coordinates: String::new(),
            },
        ))),
        t0(),
    )
}

pub fn proc_node(id: &str, content: &str) -> MemoryNote {
    MemoryNote::new(
        C,
        id,
        MemoryType::Procedure(ProcMemory {
            action: Action {
                content: content.into(),
                action_type: ActionType::Speak,
            },
        }),
        t0(),
    )
}

pub fn mid(id: &str) -> MemoryId {
    MemoryId::derive(C, id)
}

fn add(n: &mut MemoryNote, to: &str, intensity: f64, t: MemoryLinkType) {
    let to = mid(to);
    let ord = n.links.len();
    n.links.push(MemoryLink {
        id: LinkId::derive(n.id, to, ord),
        from: n.id,
        to,
        intensity,
        link_type: t,
    });
}

pub fn sem_link(n: &mut MemoryNote, to: &str, conf: f32) {
    add(
        n,
        to,
        1.0,
        MemoryLinkType::Sem(SemMemLink {
            verb: "r".into(),
            confidence: conf,
        }),
    );
}

pub fn sit_link(n: &mut MemoryNote, to: &str) {
    add(
        n,
        to,
        1.0,
        MemoryLinkType::Situation(SituationMemLink::SpecificToAbstract {}),
    );
}

pub fn trig(n: &mut MemoryNote, to: &str, prob: f64) {
    add(
        n,
        to,
        1.0,
        MemoryLinkType::Proc(ProcMemLink::TrigToAction { prob }),
    );
}

pub fn graph(notes: Vec<MemoryNote>) -> MemoryGraph {
    let mut g = MemoryGraph::new(C);
    for n in notes {
        g.insert(n).unwrap();
    }
    g
}
