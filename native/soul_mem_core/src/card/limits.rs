//! Limits of card import. Every input-dependent size is checked against one of these before
//! it is allocated or processed, so a hostile card is refused instead of exhausting memory.

use crate::error::{Error, Result};
use std::io::Read;

/// Largest card file accepted (PNG, CHARX or JSON): 20 MiB.
pub const MAX_INPUT_BYTES: usize = 20 * 1024 * 1024;

/// Largest single text field (a description, a greeting, one lorebook entry's content …):
/// 256 KiB of UTF-8. A longer field is refused with an error naming it.
pub const MAX_FIELD_BYTES: usize = 256 * 1024;

/// Most lorebook entries in one card or World Info file (disabled ones included).
pub const MAX_LORE_ENTRIES: usize = 10_000;

/// Most bytes one compressed text (a zTXt/iTXt chunk, CHARX `card.json`) may inflate to:
/// 16 MiB. Inflating stops one byte past it, so a decompression bomb costs at most this.
pub const MAX_INFLATED_BYTES: usize = 16 * 1024 * 1024;

/// Most entries (files and directories) in a CHARX archive.
pub const MAX_ZIP_ENTRIES: usize = 4096;

/// Most mention links one note gets (see `mentions`), so a lorebook whose entries all share
/// a key stays linear in size.
pub const MAX_MENTIONS_PER_NOTE: usize = 16;

/// Refuses an input larger than [`MAX_INPUT_BYTES`].
pub fn check_input(len: usize) -> Result<()> {
    if len > MAX_INPUT_BYTES {
        return Err(Error::TooLarge {
            size: len as u64,
            limit: MAX_INPUT_BYTES as u64,
        });
    }
    Ok(())
}

/// Refuses a text field longer than [`MAX_FIELD_BYTES`]; `field` names it in the error.
pub fn check_field(field: &str, text: &str) -> Result<()> {
    if text.len() > MAX_FIELD_BYTES {
        return Err(Error::LimitExceeded {
            what: format!("bytes in field {field}"),
            count: text.len(),
            limit: MAX_FIELD_BYTES,
        });
    }
    Ok(())
}

/// Reads `reader` to its end, refusing more than [`MAX_INFLATED_BYTES`]; `what` names the
/// stream in errors. Reads at most one byte past the limit, whatever the stream claims.
pub fn read_bounded(what: &str, reader: impl Read) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    reader
        .take(MAX_INFLATED_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::invalid_card(format!("{what}: cannot inflate: {e}")))?;
    if out.len() > MAX_INFLATED_BYTES {
        return Err(Error::invalid_card(format!(
            "{what} inflates to more than {MAX_INFLATED_BYTES} bytes (refused as a decompression bomb)"
        )));
    }
    Ok(out)
}
