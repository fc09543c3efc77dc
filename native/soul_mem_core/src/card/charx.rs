//! CHARX container (the V3 spec's zip archive): only `card.json` at the archive's root is
//! read. Every entry name is checked first, so an archive with a path-traversing or
//! absolute entry is refused as a whole even though nothing is extracted.

use super::limits::{read_bounded, MAX_ZIP_ENTRIES};
use crate::error::{Error, Result};
use std::io::Cursor;

/// The four bytes a zip file (and so a CHARX file) starts with.
pub const SIGNATURE: [u8; 4] = [b'P', b'K', 0x03, 0x04];

/// Name of the card inside a CHARX archive.
pub const CARD_ENTRY: &str = "card.json";

/// Reads `card.json` out of a CHARX archive.
///
/// Refuses an archive that zip cannot read, one with more than [`MAX_ZIP_ENTRIES`] entries,
/// any entry whose name is not an enclosed relative path (`../x`, `/etc/x`), a missing
/// `card.json`, a `card.json` that inflates past the limit (the header's size is not
/// trusted: inflating stops one byte past the limit) and one that is not UTF-8.
///
/// Complexity: O(entries) for the name checks plus the inflated size of `card.json`.
pub fn extract_card(bytes: &[u8]) -> Result<String> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| Error::invalid_card(format!("CHARX is not a readable zip archive: {e}")))?;
    if archive.len() > MAX_ZIP_ENTRIES {
        return Err(Error::LimitExceeded {
            what: "entries in the CHARX archive".into(),
            count: archive.len(),
            limit: MAX_ZIP_ENTRIES,
        });
    }
    let mut card_index = None;
    for i in 0..archive.len() {
        let entry = archive
            .by_index_raw(i)
            .map_err(|e| Error::invalid_card(format!("CHARX entry #{i} is unreadable: {e}")))?;
        let name = entry
            .name()
            .map_err(|e| {
                Error::invalid_card(format!("CHARX entry #{i} has no readable name: {e}"))
            })?
            .into_owned();
        if entry.enclosed_name().is_none() || !is_enclosed(&name) {
            return Err(Error::invalid_card(format!(
                "CHARX entry {name:?} is not an enclosed relative path (path traversal refused)"
            )));
        }
        if name == CARD_ENTRY && card_index.is_none() {
            card_index = Some(i);
        }
    }
    let index = card_index.ok_or_else(|| {
        Error::invalid_card(format!("CHARX archive has no {CARD_ENTRY} at its root"))
    })?;
    let entry = archive
        .by_index(index)
        .map_err(|e| Error::invalid_card(format!("CHARX {CARD_ENTRY}: {e}")))?;
    let raw = read_bounded(&format!("CHARX {CARD_ENTRY}"), entry)?;
    String::from_utf8(raw).map_err(|e| {
        Error::invalid_card(format!(
            "CHARX {CARD_ENTRY} is not UTF-8 (bad byte at {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Our own check, independent of the zip crate's: a relative path without `..` components,
/// backslashes, NULs or a drive letter (`C:`) in its first component.
fn is_enclosed(name: &str) -> bool {
    let first = name.split('/').next().unwrap_or_default();
    !name.is_empty()
        && !name.starts_with('/')
        && !name.contains(['\\', '\0'])
        && !first.contains(':')
        && !name.split('/').any(|part| part == "..")
}
