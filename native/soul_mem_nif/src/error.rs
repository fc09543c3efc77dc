//! The NIF crate's error type and its encoding as `{:error, {kind, message}}`.

use rustler::{Atom, Encoder, Env, Term};

mod atoms {
    rustler::atoms! { ok, error }
}

/// Errors the NIF layer returns to Elixir.
#[derive(Debug, thiserror::Error)]
pub enum NifError {
    /// An error from the core crate.
    #[error(transparent)]
    Core(#[from] soul_mem_core::Error),
    /// A lock was poisoned by an earlier panic while it was held for writing.
    #[error("the graph was left in an unknown state by an earlier panic; reload it")]
    Poisoned,
}

impl NifError {
    fn kind(&self) -> &'static str {
        match self {
            NifError::Core(e) => e.kind(),
            NifError::Poisoned => "poisoned",
        }
    }

    /// `{:error, {kind, message}}`.
    pub fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let kind = Atom::from_str(env, self.kind()).unwrap_or_else(|_| atoms::error());
        (atoms::error(), (kind, self.to_string())).encode(env)
    }
}

/// Encodes a result as `{:ok, value}` or `{:error, {kind, message}}`.
pub fn ok_or_error<'a, T: Encoder>(env: Env<'a>, result: Result<T, NifError>) -> Term<'a> {
    match result {
        Ok(v) => (atoms::ok(), v).encode(env),
        Err(e) => e.encode(env),
    }
}

/// Decodes a JSON argument; a malformed one is an `invalid_json` error naming the argument and
/// the path of the bad value.
pub fn parse_json<T: serde::de::DeserializeOwned>(
    what: &str,
    json: impl AsRef<[u8]>,
) -> Result<T, NifError> {
    let mut de = serde_json::Deserializer::from_slice(json.as_ref());
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        NifError::from(soul_mem_core::Error::InvalidJson(format!(
            "{what}: {} at {}",
            e.inner(),
            e.path()
        )))
    })
}
