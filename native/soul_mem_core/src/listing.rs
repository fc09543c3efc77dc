//! Note listing and search (`GET /api/characters/:id/notes?query=&kind=&page=`): filter a
//! character's notes by kind and by a text query, rank, and page. The same code lists the
//! in-memory graph ([`list_graph`]) and a store's notes table ([`crate::store::Store::list_notes`],
//! for working-memory mode, where the graph holds only the working set).
//!
//! Matching is a case-insensitive substring search over the note's readable id, its text
//! (content / narrative / pattern / action), aliases, description and tags. A query of several
//! words (whitespace or jieba tokens) also matches a note holding every one of them. Ranking:
//! notes *named* by the query first (it is the note's id, name or an alias; then: part of one),
//! then exact substring matches, then more matched tokens, then the given (graph or stored)
//! order — searching "Grandma" lists the note about her before the notes that mention her. No index: O(notes × text) per call, fine up to ~100k notes (measured in the tests).

use crate::error::{Error, Result};
use crate::graph::MemoryGraph;
use crate::model::{MemoryNote, MemoryType, NodeKind, Situation};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Items per page when the request gives none.
pub const DEFAULT_PER_PAGE: i64 = 50;
/// Largest page size.
pub const MAX_PER_PAGE: i64 = 200;

/// One listing request; every field optional (`None`: no filter, page 1, 50 per page).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListRequest {
    /// Text to search for (blank: every note).
    pub query: Option<String>,
    /// `semantic`, `specific_situation`, `abstract_situation` or `procedure`.
    pub kind: Option<String>,
    /// Page number, from 1.
    pub page: Option<i64>,
    /// Items per page, 1..=200 (default 50).
    pub per_page: Option<i64>,
}

/// One listed note.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListedNote {
    /// Readable id.
    pub id: String,
    /// Kind (snake_case).
    pub kind: &'static str,
    /// Display text ([`MemoryNote::display_text`]).
    pub text: String,
    /// Tags.
    pub tags: Vec<String>,
    /// Core memory.
    pub core: bool,
    /// Aliases of a semantic note (absent for other kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aliases: Option<Vec<String>>,
    /// Number of outgoing links (pending ones included).
    pub links: usize,
    /// How often it was recalled.
    pub retrieval_count: u32,
    /// When it was last recalled.
    pub last_accessed_time: DateTime<Utc>,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoteListing {
    /// Matching notes in all pages.
    pub total: usize,
    /// This page (from 1).
    pub page: usize,
    /// Page size.
    pub per_page: usize,
    /// The notes of this page, best first.
    pub items: Vec<ListedNote>,
}

/// A validated request: the kind parsed, the query lower-cased and split into tokens.
#[derive(Debug, Clone)]
pub struct NoteFilter {
    kind: Option<NodeKind>,
    query: String,
    tokens: Vec<String>,
    page: usize,
    per_page: usize,
}

impl NoteFilter {
    /// Checks `req`: an unknown kind, `page` < 1 or `per_page` outside 1..=200 is an
    /// [`Error::InvalidArgument`] naming the field.
    pub fn new(req: &ListRequest) -> Result<Self> {
        let kind = match req.kind.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(k) => Some(
                NodeKind::ALL
                    .into_iter()
                    .find(|n| n.as_str() == k)
                    .ok_or_else(|| {
                        Error::invalid_argument(
                            "kind",
                            format!(
                                "must be one of semantic, specific_situation, \
                                 abstract_situation, procedure; got {k:?}"
                            ),
                        )
                    })?,
            ),
        };
        let page = req.page.unwrap_or(1);
        if page < 1 {
            return Err(Error::invalid_argument(
                "page",
                format!("must be at least 1, got {page}"),
            ));
        }
        let per_page = req.per_page.unwrap_or(DEFAULT_PER_PAGE);
        if !(1..=MAX_PER_PAGE).contains(&per_page) {
            return Err(Error::invalid_argument(
                "per_page",
                format!("must be in 1..={MAX_PER_PAGE}, got {per_page}"),
            ));
        }
        let query = req.query.as_deref().unwrap_or("").trim().to_lowercase();
        let mut tokens: Vec<String> = Vec::new();
        for word in query.split_whitespace() {
            for t in crate::text::tokens(word) {
                let t = t.trim();
                if t.chars().any(char::is_alphanumeric) && !tokens.iter().any(|x| x == t) {
                    tokens.push(t.to_owned());
                }
            }
        }
        Ok(NoteFilter {
            kind,
            query,
            // One token is the query itself: the substring test covers it.
            tokens: if tokens.len() > 1 { tokens } else { Vec::new() },
            page: usize::try_from(page).unwrap_or(usize::MAX),
            per_page: per_page as usize,
        })
    }

    /// How well `note` matches: `None` when it does not; else (named: 2 when the query is
    /// one of its names, 1 when part of one, 0 otherwise; exact substring; tokens matched).
    /// Complexity: O(text of the note × tokens).
    fn rank(&self, note: &MemoryNote) -> Option<Rank> {
        if self.kind.is_some_and(|k| k != note.kind()) {
            return None;
        }
        if self.query.is_empty() {
            return Some((0, true, 0));
        }
        let hay = haystack(note);
        let exact = hay.contains(&self.query);
        let matched = self
            .tokens
            .iter()
            .filter(|t| hay.contains(t.as_str()))
            .count();
        let named = if !exact {
            0
        } else {
            names(note)
                .map(|name| {
                    let name = name.to_lowercase();
                    if name == self.query {
                        2
                    } else {
                        u8::from(name.contains(&self.query))
                    }
                })
                .max()
                .unwrap_or(0)
        };
        (exact || (!self.tokens.is_empty() && matched == self.tokens.len()))
            .then_some((named, exact, matched))
    }

    /// Filters, ranks and pages `notes` (each with its outgoing link count), given in the
    /// order ties keep. Complexity: O(notes × text) plus sorting the matches.
    pub fn list<'a>(
        &self,
        notes: impl IntoIterator<Item = (&'a MemoryNote, usize)>,
    ) -> NoteListing {
        let mut hits: Vec<(Rank, usize, &'a MemoryNote, usize)> = Vec::new();
        for (order, (note, links)) in notes.into_iter().enumerate() {
            if let Some(rank) = self.rank(note) {
                hits.push((rank, order, note, links));
            }
        }
        // Best rank first (named, exact, more tokens), then the given order.
        hits.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let total = hits.len();
        let start = (self.page - 1).saturating_mul(self.per_page);
        let items = hits
            .into_iter()
            .skip(start)
            .take(self.per_page)
            .map(|(_, _, n, links)| listed(n, links))
            .collect();
        NoteListing {
            total,
            page: self.page,
            per_page: self.per_page,
            items,
        }
    }
}

/// Lists the notes of `graph` (see the module docs). Errors on a bad request, naming the field.
/// Complexity: O(notes × text).
pub fn list_graph(graph: &MemoryGraph, req: &ListRequest) -> Result<NoteListing> {
    let filter = NoteFilter::new(req)?;
    let pending = pending_counts(graph);
    Ok(filter.list(
        graph
            .notes()
            .map(|n| (n, n.links.len() + pending.get(&n.id).copied().unwrap_or(0))),
    ))
}

fn pending_counts(graph: &MemoryGraph) -> std::collections::HashMap<crate::model::MemoryId, usize> {
    let mut counts = std::collections::HashMap::new();
    for l in graph.pending_links() {
        *counts.entry(l.from).or_insert(0) += 1;
    }
    counts
}

fn listed(n: &MemoryNote, links: usize) -> ListedNote {
    ListedNote {
        id: n.readable_id.clone(),
        kind: n.kind().as_str(),
        text: n.display_text(),
        tags: n.tags.clone(),
        core: n.core,
        aliases: match &n.mem_type {
            MemoryType::Semantic(s) => Some(s.aliases.clone()),
            _ => None,
        },
        links,
        retrieval_count: n.retrieval_count,
        last_accessed_time: n.last_accessed_time,
    }
}

/// (named, exact substring, tokens matched) of a matching note; larger is better.
type Rank = (u8, bool, usize);

/// What a note is called: its readable id and, for a semantic note, its name and aliases.
fn names(n: &MemoryNote) -> impl Iterator<Item = &str> {
    let semantic = match &n.mem_type {
        MemoryType::Semantic(s) => Some(s),
        _ => None,
    };
    std::iter::once(n.readable_id.as_str())
        .chain(semantic.map(|s| s.content.as_str()))
        .chain(
            semantic
                .into_iter()
                .flat_map(|s| s.aliases.iter().map(String::as_str)),
        )
}

/// Everything a query is matched against, lower-cased, fields separated by a newline (so a
/// match never spans two fields).
fn haystack(n: &MemoryNote) -> String {
    let mut parts: Vec<&str> = vec![&n.readable_id];
    let rendered;
    match &n.mem_type {
        MemoryType::Semantic(s) => {
            parts.push(&s.content);
            parts.push(&s.description);
            parts.extend(s.aliases.iter().map(String::as_str));
        }
        MemoryType::Situation(Situation::SpecificSituation(s)) => parts.push(&s.narrative),
        MemoryType::Situation(Situation::AbstractSituation(a)) => {
            rendered = crate::model::abstract_text(a);
            parts.push(&rendered);
        }
        MemoryType::Procedure(p) => parts.push(&p.action.content),
    }
    parts.extend(n.tags.iter().map(String::as_str));
    parts.join("\n").to_lowercase()
}

#[cfg(test)]
mod tests;
