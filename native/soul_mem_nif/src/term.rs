//! Elixir terms into the core's serde-described types, without a JSON round trip: a term is
//! read into a `serde_json::Value` tree by rustler's serde support (maps with string keys,
//! lists, numbers, binaries, atoms as strings, `nil` as null) and the value into the
//! type, so the schema, defaults, `deny_unknown_fields` and validation stay defined once, in
//! the core. Used for the nested configuration and seed-shaped queries; flat arguments and all
//! results are `NifMap`s.

use crate::error::NifError;
use rustler::{Env, Term};
use serde::de::DeserializeOwned;
use serde::Serialize;
use soul_mem_core::Error;

/// The value tree of `term`. A term serde cannot read (a pid, a reference, a tuple shape) is
/// an `invalid_argument` error naming `what`.
pub fn value(what: &str, term: Term<'_>) -> Result<serde_json::Value, NifError> {
    rustler::serde::from_term(term).map_err(|e| {
        NifError::from(Error::invalid_argument(
            what,
            format!("unreadable term: {e}"),
        ))
    })
}

/// Decodes `term` as `T`; a wrong shape is an `invalid_json` error naming `what` and the path
/// of the bad value (the same error a JSON argument gave).
pub fn decode<T: DeserializeOwned>(what: &str, term: Term<'_>) -> Result<T, NifError> {
    from_value(what, value(what, term)?)
}

/// Decodes a value tree as `T` (see [`decode`]).
pub fn from_value<T: DeserializeOwned>(
    what: &str,
    value: serde_json::Value,
) -> Result<T, NifError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        NifError::from(Error::InvalidJson(format!(
            "{what}: {} at {}",
            e.inner(),
            e.path()
        )))
    })
}

/// `value` as an Elixir term in its JSON shape (maps with string keys, externally tagged
/// enums as one-key maps), through its value tree: rustler's serializer alone would make
/// structs and enums records.
pub fn encode<'a, T: Serialize>(env: Env<'a>, value: &T) -> Result<Term<'a>, NifError> {
    let tree = serde_json::to_value(value)
        .map_err(|e| NifError::from(Error::invalid_argument("result", e.to_string())))?;
    rustler::serde::to_term(env, tree)
        .map_err(|e| NifError::from(Error::invalid_argument("result", e.to_string())))
}

/// `term` unless it is `nil`. (An `Option<Term>` field decodes `nil` as `Some(nil)`: any term
/// is a `Term`.)
pub fn given(term: Option<Term<'_>>) -> Option<Term<'_>> {
    term.filter(|t| !(t.is_atom() && *t == rustler::types::atom::nil().to_term(t.get_env())))
}
