//! PNG container: walks the chunks from the signature to `IEND`, checks every chunk's CRC and
//! extracts the card text from a `ccv3` or `chara` text chunk (tEXt, zTXt or iTXt), wherever
//! it is in the file (also after `IDAT`). Image data is never decoded.

use super::limits::{read_bounded, MAX_INPUT_BYTES};
use crate::error::{Error, Result};
use base64::Engine as _;

/// The eight bytes every PNG file starts with.
pub const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];

/// Keyword of a V3 card chunk; preferred over [`KEY_V2`] when both are present.
pub const KEY_V3: &str = "ccv3";
/// Keyword of a V2 (or V1) card chunk.
pub const KEY_V2: &str = "chara";

/// The card found in a PNG: the decoded JSON text and the keyword of its chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PngCard {
    /// `ccv3` or `chara`.
    pub keyword: &'static str,
    /// The UTF-8 JSON the chunk's base64 text decodes to.
    pub json: String,
}

/// One raw text chunk of interest: its type and data (after the CRC check).
struct TextChunk<'a> {
    kind: [u8; 4],
    data: &'a [u8],
}

/// Extracts the card JSON from PNG `bytes`.
///
/// Refuses (naming the chunk and its offset) a truncated file, a chunk whose length exceeds
/// the bytes that remain, a bad CRC, a file without `IEND`, a file without a card chunk,
/// a compressed chunk inflating past the limit and text that is not base64 of UTF-8.
///
/// Complexity: O(bytes) for the walk and CRCs; only the chosen card chunk is inflated.
pub fn extract_card(bytes: &[u8]) -> Result<PngCard> {
    if !bytes.starts_with(&SIGNATURE) {
        return Err(Error::invalid_card("not a PNG file (bad signature)"));
    }
    let mut v3: Option<TextChunk<'_>> = None;
    let mut v2: Option<TextChunk<'_>> = None;
    let mut offset = SIGNATURE.len();
    loop {
        let (kind, data, next) = read_chunk(bytes, offset)?;
        if matches!(&kind, b"tEXt" | b"zTXt" | b"iTXt") {
            let keyword = keyword_of(data);
            // The first chunk of each keyword counts; later duplicates are ignored.
            if keyword.eq_ignore_ascii_case(KEY_V3.as_bytes()) && v3.is_none() {
                v3 = Some(TextChunk { kind, data });
            } else if keyword.eq_ignore_ascii_case(KEY_V2.as_bytes()) && v2.is_none() {
                v2 = Some(TextChunk { kind, data });
            }
        }
        if &kind == b"IEND" {
            break;
        }
        offset = next;
    }
    let (keyword, chunk) = match (v3, v2) {
        (Some(c), _) => (KEY_V3, c),
        (None, Some(c)) => (KEY_V2, c),
        (None, None) => return Err(Error::invalid_card(
            "PNG has no character card chunk (no tEXt/zTXt/iTXt chunk with keyword ccv3 or chara)",
        )),
    };
    let text = chunk_text(keyword, &chunk)?;
    Ok(PngCard {
        keyword,
        json: decode_base64_json(keyword, &text)?,
    })
}

/// Encodes one PNG chunk: big-endian length, type, data and the CRC of type and data (for
/// writers of card PNGs and for tests).
pub fn encode_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 12);
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(kind);
    hasher.update(data);
    out.extend_from_slice(&hasher.finalize().to_be_bytes());
    out
}

/// Reads the chunk at `offset`: its type, its data and the offset of the next chunk.
fn read_chunk(bytes: &[u8], offset: usize) -> Result<([u8; 4], &[u8], usize)> {
    let header = bytes.get(offset..offset + 8).ok_or_else(|| {
        Error::invalid_card(format!(
            "PNG is truncated: no chunk header at offset {offset} (missing IEND)"
        ))
    })?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let kind = [header[4], header[5], header[6], header[7]];
    let name = chunk_name(&kind);
    if !kind.iter().all(u8::is_ascii_alphabetic) {
        return Err(Error::invalid_card(format!(
            "PNG chunk at offset {offset} has an invalid type {name:?}"
        )));
    }
    // Compare against what is left before slicing, so a chunk claiming 4 GB allocates nothing.
    let remaining = bytes.len() - offset - 8;
    if len > MAX_INPUT_BYTES || len.saturating_add(4) > remaining {
        return Err(Error::invalid_card(format!(
            "PNG chunk {name} at offset {offset} claims {len} bytes but only {} remain (truncated or corrupt)",
            remaining.saturating_sub(4)
        )));
    }
    let data = &bytes[offset + 8..offset + 8 + len];
    let crc_at = offset + 8 + len;
    let stored = u32::from_be_bytes([
        bytes[crc_at],
        bytes[crc_at + 1],
        bytes[crc_at + 2],
        bytes[crc_at + 3],
    ]);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&kind);
    hasher.update(data);
    if hasher.finalize() != stored {
        return Err(Error::invalid_card(format!(
            "PNG chunk {name} at offset {offset}: CRC mismatch (corrupt file)"
        )));
    }
    Ok((kind, data, crc_at + 4))
}

fn chunk_name(kind: &[u8; 4]) -> String {
    String::from_utf8_lossy(kind).into_owned()
}

/// The keyword of a text chunk: the bytes before the first NUL (or all of them).
fn keyword_of(data: &[u8]) -> &[u8] {
    data.split(|b| *b == 0).next().unwrap_or_default()
}

/// The (inflated) text of a tEXt, zTXt or iTXt chunk.
fn chunk_text(keyword: &str, chunk: &TextChunk<'_>) -> Result<Vec<u8>> {
    let name = chunk_name(&chunk.kind);
    let what = format!("PNG {name} chunk {keyword:?}");
    let after_keyword = chunk
        .data
        .iter()
        .position(|b| *b == 0)
        .map(|i| &chunk.data[i + 1..])
        .ok_or_else(|| Error::invalid_card(format!("{what}: no NUL after the keyword")))?;
    let short = || Error::invalid_card(format!("{what}: chunk is too short"));
    match &chunk.kind {
        b"tEXt" => Ok(after_keyword.to_vec()),
        b"zTXt" => {
            let (&method, compressed) = after_keyword.split_first().ok_or_else(short)?;
            check_method(&what, method)?;
            inflate(&what, compressed)
        }
        _ => {
            // iTXt: flag, method, language tag NUL, translated keyword NUL, text.
            let [flag, method, rest @ ..] = after_keyword else {
                return Err(short());
            };
            let mut parts = rest.splitn(3, |b| *b == 0);
            let (_lang, _translated, text) = (parts.next(), parts.next(), parts.next());
            let text = text.ok_or_else(short)?;
            if *flag == 0 {
                return Ok(text.to_vec());
            }
            check_method(&what, *method)?;
            inflate(&what, text)
        }
    }
}

fn check_method(what: &str, method: u8) -> Result<()> {
    if method != 0 {
        return Err(Error::invalid_card(format!(
            "{what}: unknown compression method {method}"
        )));
    }
    Ok(())
}

fn inflate(what: &str, compressed: &[u8]) -> Result<Vec<u8>> {
    read_bounded(what, flate2::read::ZlibDecoder::new(compressed))
}

/// Decodes the base64 text of a card chunk into its UTF-8 JSON (checked to parse as JSON).
fn decode_base64_json(keyword: &str, text: &[u8]) -> Result<String> {
    let trimmed: Vec<u8> = text
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let raw = engine.decode(&trimmed).map_err(|e| {
        Error::invalid_card(format!("PNG chunk {keyword:?}: text is not base64: {e}"))
    })?;
    let json = String::from_utf8(raw).map_err(|e| {
        Error::invalid_card(format!(
            "PNG chunk {keyword:?}: base64 does not decode to UTF-8 text (bad byte at {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    serde_json::from_str::<serde::de::IgnoredAny>(&json).map_err(|e| {
        Error::invalid_card(format!(
            "PNG chunk {keyword:?}: base64 does not decode to JSON: {e}"
        ))
    })?;
    Ok(json)
}
