//! Replication NIFs (`soul_mem_core::store::replication`): change capture on an open store,
//! snapshots, and applying changesets to a replica file. All do file I/O: dirty I/O.

use crate::error::{ok_or_error, NifError};
use crate::store::{with_store, StoreHandle};
use rustler::{Binary, Encoder, Env, NewBinary, Term};
use soul_mem_core::store::{self, ReplicaState};
use std::path::Path;

/// Where a replica stands (`soul_mem_core::store::ReplicaState`).
#[derive(rustler::NifMap)]
struct ReplicaStateResult {
    base: String,
    seq: u64,
    epoch: u64,
}

impl From<ReplicaState> for ReplicaStateResult {
    fn from(s: ReplicaState) -> Self {
        ReplicaStateResult {
            base: s.base,
            seq: s.seq,
            epoch: s.epoch,
        }
    }
}

/// Turns change capture on or off (`Store::set_capture`).
#[rustler::nif(schedule = "DirtyIo")]
fn store_set_capture(env: Env<'_>, handle: StoreHandle, on: bool) -> Term<'_> {
    let result = with_store(&handle, |s| {
        s.set_capture(on);
        Ok(on)
    });
    ok_or_error(env, result)
}

/// The changesets recorded since the last call, as binaries, oldest first.
#[rustler::nif(schedule = "DirtyIo")]
fn store_take_changes(env: Env<'_>, handle: StoreHandle) -> Term<'_> {
    match with_store(&handle, |s| s.take_changes().map_err(NifError::from)) {
        Ok(changes) => {
            let binaries: Vec<Term> = changes
                .iter()
                .map(|c| {
                    let mut bin = NewBinary::new(env, c.len());
                    bin.as_mut_slice().copy_from_slice(c);
                    Binary::from(bin).encode(env)
                })
                .collect();
            ok_or_error(env, Ok(binaries))
        }
        Err(e) => ok_or_error::<()>(env, Err(e)),
    }
}

/// Writes a consistent copy of the store to `dest`; returns its size in bytes.
/// Complexity: O(file size).
#[rustler::nif(schedule = "DirtyIo")]
fn store_snapshot(env: Env<'_>, handle: StoreHandle, dest: String) -> Term<'_> {
    let result = with_store(&handle, |s| {
        s.snapshot_to(Path::new(&dest)).map_err(NifError::from)
    });
    ok_or_error(env, result)
}

/// The epoch of an open store's copy.
#[rustler::nif(schedule = "DirtyIo")]
fn store_epoch(env: Env<'_>, handle: StoreHandle) -> Term<'_> {
    ok_or_error(
        env,
        with_store(&handle, |s| s.epoch().map_err(NifError::from)),
    )
}

/// Stamps a snapshot at `path` as replica `base` at sequence 0.
#[rustler::nif(schedule = "DirtyIo")]
fn replica_init(env: Env<'_>, path: String, base: String) -> Term<'_> {
    let result = store::init_replica(Path::new(&path), &base).map(|()| base);
    ok_or_error(env, result.map_err(NifError::from))
}

/// Applies batch `seq` (changesets in order) to the replica at `path`, durably.
/// Complexity: O(changed rows).
#[rustler::nif(schedule = "DirtyIo")]
fn replica_apply<'a>(
    env: Env<'a>,
    path: String,
    base: String,
    seq: u64,
    changes: Vec<Binary<'a>>,
) -> Term<'a> {
    let owned: Vec<Vec<u8>> = changes.iter().map(|b| b.as_slice().to_vec()).collect();
    let result = store::apply_changes(Path::new(&path), &base, seq, &owned).map(|()| seq);
    ok_or_error(env, result.map_err(NifError::from))
}

/// Where the replica at `path` stands: `%{base, seq, epoch}`.
#[rustler::nif(schedule = "DirtyIo")]
fn replica_state(env: Env<'_>, path: String) -> Term<'_> {
    let result = store::replica_state(Path::new(&path)).map(ReplicaStateResult::from);
    ok_or_error(env, result.map_err(NifError::from))
}

/// Promotes the replica at `path` to a primary copy at the next epoch; returns the epoch.
#[rustler::nif(schedule = "DirtyIo")]
fn replica_promote(env: Env<'_>, path: String) -> Term<'_> {
    ok_or_error(
        env,
        store::promote_replica(Path::new(&path)).map_err(NifError::from),
    )
}
