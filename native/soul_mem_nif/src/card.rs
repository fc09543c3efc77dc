//! Character card NIFs: import a SillyTavern card (PNG, CHARX, JSON) or World Info file as a
//! Graph JSON document, and export a graph as World Info or a V2 card.

use crate::error::{ok_or_error, NifError};
use crate::graph::Handle;
use rustler::{Binary, Env, Term};
use soul_mem_core::card::{self, CardOptions, CardReport};
use soul_mem_core::graph::MemoryGraph;

/// Options of `card_import`: `%{name: String.t() | nil}`.
#[derive(rustler::NifMap)]
struct ImportOpts {
    name: Option<String>,
}

/// `report` of `card_import`.
#[derive(rustler::NifMap)]
struct Report {
    format: String,
    name: String,
    notes: usize,
    links: usize,
    lore_entries: usize,
    skipped_disabled: usize,
    skipped_empty: usize,
    core_notes: usize,
}

impl From<CardReport> for Report {
    fn from(r: CardReport) -> Self {
        Report {
            format: r.format,
            name: r.name,
            notes: r.notes,
            links: r.links,
            lore_entries: r.lore_entries,
            skipped_disabled: r.skipped_disabled,
            skipped_empty: r.skipped_empty,
            core_notes: r.core_notes,
        }
    }
}

/// `{:ok, %{graph: graph_json, report: report}}`.
#[derive(rustler::NifMap)]
struct Imported {
    graph: String,
    report: Report,
}

/// Reads a card or World Info file: `{:ok, %{graph: binary, report: map}}` or
/// `{:error, {kind, message}}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn card_import<'a>(env: Env<'a>, bytes: Binary, opts: ImportOpts) -> Term<'a> {
    let options = CardOptions { name: opts.name };
    let result = card::import_card(bytes.as_slice(), &options)
        .map(|i| Imported {
            graph: i.graph_json,
            report: i.report.into(),
        })
        .map_err(NifError::from);
    ok_or_error(env, result)
}

/// Runs `export` over the handle's graph and encodes its value as a map with string keys.
fn export_with<'a>(
    env: Env<'a>,
    handle: &Handle,
    export: fn(&MemoryGraph) -> soul_mem_core::Result<serde_json::Value>,
) -> Term<'a> {
    let result = handle.read().and_then(|engine| {
        let value = export(engine.graph())?;
        crate::term::encode(env, &value)
    });
    ok_or_error(env, result)
}

/// The graph's semantic notes as a SillyTavern World Info file (a map with string keys).
#[rustler::nif(schedule = "DirtyCpu")]
fn graph_export_world_info<'a>(env: Env<'a>, handle: Handle) -> Term<'a> {
    export_with(env, &handle, card::export_world_info)
}

/// The graph as a V2 character card (a map with string keys).
#[rustler::nif(schedule = "DirtyCpu")]
fn graph_export_card<'a>(env: Env<'a>, handle: Handle) -> Term<'a> {
    export_with(env, &handle, card::export_card_v2)
}
