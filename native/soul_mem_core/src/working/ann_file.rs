//! The saved HNSW index of a character: beside its store `<db>`, a manifest `<db>-ann` and the
//! graph `<db>-ann.<generation>` (usearch's file format).
//!
//! The files are a cache of what the store holds, never an authority: the manifest lists the
//! note and text hash of every slot, and opening keeps only the rows whose hash is still the
//! stored text's (the rest are removed, missing ones read from the `embeddings` table). A
//! missing, unreadable, foreign or corrupt pair is ignored and the graph rebuilt.
//!
//! Manifest layout: `SOULANN1`, a little-endian u32 length and that many bytes of JSON
//! ([`Header`]), then per slot the note's 16-byte UUID and 32-byte text hash, then the SHA-256
//! of everything before it. A save writes a new generation's graph, then replaces the manifest
//! by rename (the switch is atomic), then removes other generations: a crash at any point
//! leaves a manifest naming a complete graph, or none.

use super::ann::AnnRows;
use crate::error::{Error, Result};
use crate::model::MemoryId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"SOULANN1";
const ROW: usize = 16 + 32;

#[derive(Serialize, Deserialize)]
struct Header {
    model: String,
    dim: usize,
    rows: usize,
    /// File name of the graph (same directory).
    data: String,
    /// Its length in bytes.
    data_bytes: u64,
}

/// A loaded index: the graph and, per slot, the note and text hash it was built from.
pub(super) struct Saved {
    pub(super) ann: AnnRows,
    pub(super) rows: Vec<(MemoryId, [u8; 32])>,
}

/// The path beside `path` named `<its file name><suffix>`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    path.with_file_name(file_name(path, suffix))
}

/// The manifest's path for the store at `store`.
pub(super) fn manifest_path(store: &Path) -> PathBuf {
    sibling(store, "-ann")
}

/// Reads the saved index of `store` for `model` and `dim`. `None` when there is none or it is
/// unusable (another model or dimension, damaged, half-written): the caller rebuilds.
/// Complexity: O(file sizes) read, O(rows) checks.
pub(super) fn load(store: &Path, model: &str, dim: usize) -> Option<Saved> {
    let bytes = std::fs::read(manifest_path(store)).ok()?;
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if Sha256::digest(body).as_slice() != sum || !body.starts_with(MAGIC) {
        return None;
    }
    let len = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?) as usize;
    let header: Header = serde_json::from_slice(body.get(12..12 + len)?).ok()?;
    let table = body.get(12 + len..)?;
    if header.model != model || header.dim != dim || table.len() != header.rows * ROW {
        return None;
    }
    // The graph must sit beside the manifest under a plain file name.
    if header.data.contains(['/', '\\']) || !header.data.starts_with(&file_name(store, "-ann.")) {
        return None;
    }
    let data = store.with_file_name(&header.data);
    if std::fs::metadata(&data).ok()?.len() != header.data_bytes {
        return None;
    }
    let ann = AnnRows::load(&data, dim).ok()?;
    if ann.len() != header.rows || !(0..header.rows).all(|slot| ann.contains(slot)) {
        return None;
    }
    let rows = table
        .chunks_exact(ROW)
        .map(|r| {
            let id = MemoryId(uuid::Uuid::from_bytes(r[..16].try_into().ok()?));
            Some((id, r[16..].try_into().ok()?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Saved { ann, rows })
}

fn file_name(store: &Path, suffix: &str) -> String {
    let mut name = store.file_name().unwrap_or_default().to_owned();
    name.push(suffix);
    name.to_string_lossy().into_owned()
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path).map_err(|e| Error::io(path, &e))?;
    f.write_all(bytes).map_err(|e| Error::io(path, &e))?;
    f.sync_all().map_err(|e| Error::io(path, &e))
}

fn sync_file(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(path, &e))
}

/// Saves `ann` with its slots' `rows` for `model` beside `store`, replacing an earlier save.
/// On error nothing earlier is damaged (temporary files are removed).
/// Complexity: O(index bytes + rows) written and synced.
pub(super) fn save(
    store: &Path,
    model: &str,
    ann: &AnnRows,
    rows: &[(MemoryId, [u8; 32])],
) -> Result<()> {
    if ann.len() != rows.len() {
        return Err(Error::invalid_argument(
            "ann index",
            format!("{} rows in the graph, {} listed", ann.len(), rows.len()),
        ));
    }
    let data_name = file_name(store, &format!("-ann.{}", uuid::Uuid::new_v4().simple()));
    let data = store.with_file_name(&data_name);
    let manifest = manifest_path(store);
    let tmp_data = sibling(&data, ".tmp");
    let tmp_manifest = sibling(&manifest, ".tmp");
    let written = (|| -> Result<()> {
        ann.save(&tmp_data)?;
        sync_file(&tmp_data)?;
        std::fs::rename(&tmp_data, &data).map_err(|e| Error::io(&data, &e))?;
        let data_bytes = std::fs::metadata(&data)
            .map_err(|e| Error::io(&data, &e))?
            .len();
        let header = serde_json::to_vec(&Header {
            model: model.to_owned(),
            dim: ann.dim(),
            rows: rows.len(),
            data: data_name.clone(),
            data_bytes,
        })
        .map_err(|e| Error::InvalidJson(e.to_string()))?;
        let mut body = Vec::with_capacity(12 + header.len() + rows.len() * ROW + 32);
        body.extend_from_slice(MAGIC);
        body.extend_from_slice(&(header.len() as u32).to_le_bytes());
        body.extend_from_slice(&header);
        for (id, hash) in rows {
            body.extend_from_slice(id.0.as_bytes());
            body.extend_from_slice(hash);
        }
        let sum = Sha256::digest(&body);
        body.extend_from_slice(&sum);
        write_synced(&tmp_manifest, &body)?;
        std::fs::rename(&tmp_manifest, &manifest).map_err(|e| Error::io(&manifest, &e))?;
        if let Some(dir) = manifest.parent() {
            // The renames are durable once the directory is.
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp_data);
        let _ = std::fs::remove_file(&tmp_manifest);
        let _ = std::fs::remove_file(&data);
        return written;
    }
    remove_generations(store, Some(&data_name));
    Ok(())
}

/// Removes the saved graphs of `store` other than `keep` (and leftover temporary files).
fn remove_generations(store: &Path, keep: Option<&str>) {
    let prefix = file_name(store, "-ann.");
    let Some(dir) = store.parent() else { return };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && Some(name.as_str()) != keep {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Removes every saved-index file of the store at `store` (the character is deleted).
pub fn remove_files(store: &Path) -> Result<()> {
    let manifest = manifest_path(store);
    match std::fs::remove_file(&manifest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&manifest, &e)),
    }
    let _ = std::fs::remove_file(sibling(&manifest, ".tmp"));
    remove_generations(store, None);
    Ok(())
}
