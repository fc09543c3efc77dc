//! What a recall hands its caller: each recalled note with its readable id, the text the
//! character sees and its trace, as plain typed values (the NIF turns them into Elixir maps,
//! the CLI prints them).

use crate::engine::Engine;
use crate::model::{ActionType, MemoryId, MemoryNote, MemoryType, NodeKind};
use crate::retrieval::{Channel, PipelineResult, RecalledAction, Stage};

/// One recalled memory, action or core note.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallItem {
    /// Readable id.
    pub id: String,
    /// UUID.
    pub uuid: String,
    /// Kind (snake_case name).
    pub kind: &'static str,
    /// The note's display text (an action's content for actions).
    pub content: String,
    /// Merge score (1.0 for core notes).
    pub score: f64,
    /// How it was found: `Similarity`, `Ppr`, `Both`, `Action` or `Core`.
    pub stage: &'static str,
    /// Readable ids of the seeds it came from.
    pub seeds: Vec<String>,
    /// The channels that found it (`dense`, `tag`, `lexical`, `association`).
    pub channels: Vec<&'static str>,
    /// Readable ids of the strongest link path from a seed to it (seed first).
    pub path: Vec<String>,
    /// Whether the note is core (appears in every recall).
    pub core: bool,
    /// For actions: `speak`, `think` or `skill`.
    pub action_type: Option<&'static str>,
}

/// The items of one recall.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecallItems {
    /// Memories, best first.
    pub memories: Vec<RecallItem>,
    /// Inferred actions, best first.
    pub actions: Vec<RecallItem>,
    /// Procedures reached from semantic memories.
    pub self_knowledge: Vec<RecallItem>,
    /// The core notes, in graph order.
    pub core: Vec<RecallItem>,
}

/// The name of a stage as recall traces show it.
pub fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Similarity => "Similarity",
        Stage::Ppr => "Ppr",
        Stage::Both => "Both",
        Stage::Action => "Action",
    }
}

/// The name of a channel as recall traces show it.
pub fn channel_name(channel: Channel) -> &'static str {
    match channel {
        Channel::Dense => "dense",
        Channel::Tag => "tag",
        Channel::Lexical => "lexical",
        Channel::Association => "association",
    }
}

fn action_type_name(note: Option<&MemoryNote>) -> Option<&'static str> {
    match note.map(|n| &n.mem_type) {
        Some(MemoryType::Procedure(p)) => Some(match p.action.action_type {
            ActionType::Speak => "speak",
            ActionType::Think => "think",
            ActionType::Skill(_) => "skill",
        }),
        _ => None,
    }
}

impl Engine {
    /// The items of `result`, with readable ids and display texts from this engine's graph.
    /// Complexity: O(items × (seeds + path)).
    pub fn items(&self, result: &PipelineResult) -> RecallItems {
        let g = self.graph();
        let readable = |ids: &[MemoryId]| ids.iter().map(|id| g.readable_of(id)).collect();
        let memories = result
            .memories
            .iter()
            .map(|m| {
                let note = g.get(&m.id);
                RecallItem {
                    id: m.readable_id.clone(),
                    uuid: m.id.to_string(),
                    kind: m.kind.as_str(),
                    content: note.map(MemoryNote::display_text).unwrap_or_default(),
                    score: m.score,
                    stage: stage_name(m.stage),
                    seeds: readable(&m.seeds),
                    channels: m.channels.iter().copied().map(channel_name).collect(),
                    path: readable(&m.path),
                    core: note.is_some_and(|n| n.core),
                    action_type: None,
                }
            })
            .collect();
        let action = |a: &RecalledAction| RecallItem {
            id: a.readable_id.clone(),
            uuid: a.id.to_string(),
            kind: NodeKind::Procedure.as_str(),
            content: a.content.clone(),
            score: a.score,
            stage: stage_name(a.stage),
            seeds: readable(&a.seeds),
            channels: Vec::new(),
            path: Vec::new(),
            core: g.get(&a.id).is_some_and(|n| n.core),
            action_type: action_type_name(g.get(&a.id)),
        };
        RecallItems {
            memories,
            actions: result.actions.iter().map(action).collect(),
            self_knowledge: result.self_knowledge.iter().map(action).collect(),
            core: self.core_items(),
        }
    }

    /// The core notes (flagged core, e.g. the self node) in graph order, as items with stage
    /// `Core` and score 1: they appear in every recall, also one that runs no retrieval.
    /// Complexity: O(core notes) when the index is current (it lists them), else O(nodes).
    pub fn core_items(&self) -> Vec<RecallItem> {
        let g = self.graph();
        let item = |n: &MemoryNote| RecallItem {
            id: n.readable_id.clone(),
            uuid: n.id.to_string(),
            kind: n.kind().as_str(),
            content: n.display_text(),
            score: 1.0,
            stage: "Core",
            seeds: Vec::new(),
            channels: Vec::new(),
            path: Vec::new(),
            core: true,
            action_type: action_type_name(Some(n)),
        };
        match self.index().filter(|_| self.is_indexed()) {
            // Every recall lists the core notes: a walk over every note would grow with
            // the character.
            Some(idx) => idx
                .core_nodes()
                .iter()
                .filter_map(|&p| idx.node(p as usize).and_then(|m| g.get(&m.id)))
                .map(item)
                .collect(),
            None => g.notes().filter(|n| n.core).map(item).collect(),
        }
    }
}
