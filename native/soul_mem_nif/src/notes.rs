//! Note listing and deletion NIFs (`soul_mem_core::listing`, `soul_mem_core::note_delete`).
//! The listing request is a typed map; its result crosses through the serde encoder of
//! `term.rs` (string keys, as the JSON API shows it).

use crate::error::{ok_or_error, NifError};
use crate::graph::GraphResource;
use crate::store::{with_store, StoreResource};
use crate::working::{delete_working_note, WorkingResource};
use rustler::{Env, NifMap, ResourceArc, Term};
use soul_mem_core::listing::{list_graph, ListRequest};
use soul_mem_core::note_delete::DeleteReport;
use soul_mem_core::Error;

/// `%{query, kind, page, per_page}`, each `nil` for its default (no filter, page 1, 50).
#[derive(NifMap)]
pub struct ListNotesRequest {
    query: Option<String>,
    kind: Option<String>,
    page: Option<i64>,
    per_page: Option<i64>,
}

impl From<ListNotesRequest> for ListRequest {
    fn from(r: ListNotesRequest) -> Self {
        ListRequest {
            query: r.query,
            kind: r.kind,
            page: r.page,
            per_page: r.per_page,
        }
    }
}

/// What `note_delete` removed.
#[derive(NifMap)]
pub struct Deleted {
    id: String,
    links_removed: usize,
}

impl From<DeleteReport> for Deleted {
    fn from(r: DeleteReport) -> Self {
        Deleted {
            id: r.id,
            links_removed: r.links_removed,
        }
    }
}

/// Lists the notes of the graph: `%{"total", "page", "per_page", "items" => [%{"id", "kind",
/// "text", "tags", "core", "aliases" (semantic only), "links", "retrieval_count",
/// "last_accessed_time"}]}`. A bad kind, page or per_page is `invalid_argument` naming it.
///
/// Complexity: O(notes × text).
#[rustler::nif(schedule = "DirtyCpu")]
fn graph_list_notes<'a>(
    env: Env<'a>,
    handle: ResourceArc<GraphResource>,
    request: ListNotesRequest,
) -> Term<'a> {
    let result = handle.read().and_then(|engine| {
        let listing = list_graph(engine.graph(), &request.into())?;
        crate::term::encode(env, &listing)
    });
    ok_or_error(env, result)
}

/// `graph_list_notes` over the active notes of a store (working-memory mode, where the graph
/// holds only the working set). Complexity: O(stored notes × text).
#[rustler::nif(schedule = "DirtyIo")]
fn store_list_notes<'a>(
    env: Env<'a>,
    store: ResourceArc<StoreResource>,
    request: ListNotesRequest,
) -> Term<'a> {
    let result = with_store(&store, |s| Ok(s.list_notes(&request.into())?))
        .and_then(|listing| crate::term::encode(env, &listing));
    ok_or_error(env, result)
}

/// Deletes a note (readable id or UUID) for good: from the graph and, when `store` is given,
/// from the store in one transaction (store first). `handle` is a graph handle, or a working
/// handle (activation mode: its own store is used, the long-term index forgets the note).
/// Returns `%{id, links_removed}`; `not_found` names the id; the self node is
/// `invalid_argument`.
#[rustler::nif(schedule = "DirtyIo")]
fn note_delete<'a>(
    env: Env<'a>,
    handle: Term<'a>,
    store: Option<ResourceArc<StoreResource>>,
    id: String,
) -> Term<'a> {
    let result = (|| -> Result<Deleted, NifError> {
        if let Ok(working) = handle.decode::<ResourceArc<WorkingResource>>() {
            return Ok(delete_working_note(&working, &id)?.into());
        }
        let graph: ResourceArc<GraphResource> = handle.decode().map_err(|_| {
            Error::invalid_argument("handle", "expected a graph or working-memory handle")
        })?;
        let mut engine = graph.write()?;
        let report = match &store {
            Some(store) => with_store(store, |s| Ok(engine.delete_note(Some(s), None, &id)?))?,
            None => engine.delete_note(None, None, &id)?,
        };
        Ok(report.into())
    })();
    ok_or_error(env, result)
}
