//! SillyTavern character cards and World Info files → SoulMem Graph JSON, and back.
//!
//! [`import_card`] detects the container from the bytes — PNG signature → PNG (`png`), zip
//! signature → CHARX (`charx`), anything else → JSON — reads the card JSON (V1, V2, V3) or a
//! World Info file into a [`Card`] (`parse`, `lorebook`), and maps it to a Graph JSON
//! document (`mapping`, whose documentation gives the mapping) that
//! [`crate::import::import_bytes`] accepts. [`export_world_info`] and [`export_card_v2`] go
//! the other way (`export`).
//!
//! Limits are in `limits`: input ≤ 20 MiB, any text field ≤ 256 KiB, ≤ 10,000 lorebook
//! entries, compressed text inflates to ≤ 16 MiB, ≤ 4096 CHARX entries, ≤ 16 mention links
//! per note. Bad input is an [`Error`](crate::Error) that says what is wrong and where
//! (chunk, zip entry, field, lorebook entry uid and comment); nothing panics on input.

pub mod charx;
pub mod export;
pub mod fields;
pub mod limits;
pub mod lorebook;
pub mod mapping;
pub mod mentions;
pub mod parse;
pub mod png;
pub mod text;

pub use export::{export_card_v2, export_world_info};
pub use mapping::{card_to_graph, CardReport};
pub use parse::{parse_json, Card, CardSpec};

use crate::error::{Error, Result};

/// Options of [`import_card`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CardOptions {
    /// The character's name for a World Info file (required there; ignored for cards).
    pub name: Option<String>,
}

/// The result of [`import_card`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardImport {
    /// The Graph JSON document (compact; byte-identical for identical input).
    pub graph_json: String,
    /// What was imported.
    pub report: CardReport,
}

/// The container a card came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// A PNG image with a `ccv3`/`chara` text chunk.
    Png,
    /// A CHARX zip archive with `card.json`.
    Charx,
    /// Plain JSON.
    Json,
}

impl Container {
    /// Detects the container from the first bytes.
    pub fn detect(bytes: &[u8]) -> Self {
        if bytes.starts_with(&png::SIGNATURE) {
            Container::Png
        } else if bytes.starts_with(&charx::SIGNATURE) {
            Container::Charx
        } else {
            Container::Json
        }
    }

    /// `png`, `charx` or `json` (the first half of a report's `format`).
    pub fn as_str(self) -> &'static str {
        match self {
            Container::Png => "png",
            Container::Charx => "charx",
            Container::Json => "json",
        }
    }
}

/// Reads a card (PNG, CHARX or JSON; V1, V2, V3) or a World Info file and returns the card.
/// The report format is `<container>_<spec>` (`png_v3`, `json_v2`, `charx_v3`, …), and
/// `world_info` for a World Info JSON file.
///
/// Complexity: O(bytes).
pub fn read_card(bytes: &[u8], opts: &CardOptions) -> Result<(Card, String)> {
    limits::check_input(bytes.len())?;
    let container = Container::detect(bytes);
    let json = match container {
        Container::Png => png::extract_card(bytes)?.json,
        Container::Charx => charx::extract_card(bytes)?,
        Container::Json => {
            let text = std::str::from_utf8(bytes).map_err(|e| {
                Error::invalid_card(format!(
                    "not a PNG, CHARX or UTF-8 JSON file (bad UTF-8 at byte {})",
                    e.valid_up_to()
                ))
            })?;
            text.trim_start_matches('\u{feff}').to_owned()
        }
    };
    let card = parse_json(&json, opts.name.as_deref())?;
    let format = match (container, card.spec) {
        (Container::Json, CardSpec::WorldInfo) => "world_info".to_owned(),
        (c, spec) => format!("{}_{}", c.as_str(), spec.as_str()),
    };
    Ok((card, format))
}

/// Imports a card or World Info file as a Graph JSON document plus a report.
///
/// Complexity: O(bytes + entries) (see [`read_card`] and [`card_to_graph`]).
pub fn import_card(bytes: &[u8], opts: &CardOptions) -> Result<CardImport> {
    let (card, format) = read_card(bytes, opts)?;
    let (graph_json, report) = card_to_graph(&card, &format)?;
    Ok(CardImport { graph_json, report })
}
