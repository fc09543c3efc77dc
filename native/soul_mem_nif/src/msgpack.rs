//! MessagePack for the data plane (`SoulMem.MsgPack`): frames to Elixir terms and back.
//!
//! Decoding parses and checks a frame with `rmpv` (`msgpack_codec`), then builds the term:
//! maps with string keys, lists, binaries for str, `{:bin, binary}` for bin, integers,
//! floats, booleans and `nil`. Encoding walks the term and writes it with `rmp`'s encoders
//! (the layer `rmpv` writes with), so strings go from the term's binaries straight into the
//! output: maps with atom or string keys, lists, UTF-8 binaries as str, `{:bin, binary}` as
//! bin, integers within i64/u64, floats, booleans, `nil`, other atoms as str.
//!
//! Both run on the normal scheduler up to `DIRTY_BYTES` and on a dirty CPU scheduler beyond:
//! the Elixir wrapper picks the decoder by the frame's size, and the normal encoder gives up
//! (`:dirty`) once its output passes the size (bench/README.md has the timings behind it).

use crate::msgpack_codec::{self, CodecError, Limits};
use rmpv::ValueRef;
use rustler::types::map::MapIterator;
use rustler::{Binary, Encoder, Env, NewBinary, NifMap, Term, TermType};

mod atoms {
    rustler::atoms! { ok, error, bin, invalid_argument, dirty }
}

/// The decode limits as Elixir passes them.
#[derive(NifMap)]
struct DecodeLimits {
    max_depth: usize,
    max_elements: usize,
}

/// Encoding refuses terms nested deeper than this (the decoder's ceiling too), so that a
/// pathological term cannot exhaust the scheduler's stack.
const MAX_ENCODE_DEPTH: usize = 64;

fn decode<'a>(env: Env<'a>, bytes: Binary<'a>, limits: DecodeLimits) -> Term<'a> {
    let limits = Limits {
        max_depth: limits.max_depth,
        max_elements: limits.max_elements,
    };
    let result = msgpack_codec::parse(bytes.as_slice(), limits).and_then(|v| to_term(env, &v));
    match result {
        Ok(term) => (atoms::ok(), term).encode(env),
        Err(e) => codec_error(env, &e),
    }
}

fn codec_error<'a>(env: Env<'a>, e: &CodecError) -> Term<'a> {
    let kind = rustler::Atom::from_str(env, e.kind()).unwrap_or_else(|_| atoms::error());
    (atoms::error(), (kind, e.message())).encode(env)
}

/// Decodes a MessagePack frame; `{:ok, term}` or `{:error, {kind, message}}`.
#[rustler::nif]
fn msgpack_decode<'a>(env: Env<'a>, bytes: Binary<'a>, limits: DecodeLimits) -> Term<'a> {
    decode(env, bytes, limits)
}

/// `msgpack_decode` on a dirty CPU scheduler, for large frames.
#[rustler::nif(schedule = "DirtyCpu")]
fn msgpack_decode_dirty<'a>(env: Env<'a>, bytes: Binary<'a>, limits: DecodeLimits) -> Term<'a> {
    decode(env, bytes, limits)
}

fn to_term<'a>(env: Env<'a>, value: &ValueRef<'_>) -> Result<Term<'a>, CodecError> {
    Ok(match value {
        ValueRef::Nil => rustler::types::atom::nil().encode(env),
        ValueRef::Boolean(b) => b.encode(env),
        ValueRef::Integer(i) => match (i.as_i64(), i.as_u64()) {
            (Some(n), _) => n.encode(env),
            (None, Some(n)) => n.encode(env),
            (None, None) => return Err(CodecError::Invalid("an integer out of range".into())),
        },
        ValueRef::F32(f) => f64::from(*f).encode(env),
        ValueRef::F64(f) => f.encode(env),
        ValueRef::String(s) => s
            .as_str()
            .ok_or_else(|| CodecError::NotUtf8("a string is not UTF-8".into()))?
            .encode(env),
        ValueRef::Binary(b) => (atoms::bin(), binary(env, b)).encode(env),
        ValueRef::Array(items) => items
            .iter()
            .map(|item| to_term(env, item))
            .collect::<Result<Vec<_>, _>>()?
            .encode(env),
        ValueRef::Map(entries) => {
            let mut keys = Vec::with_capacity(entries.len());
            let mut values = Vec::with_capacity(entries.len());
            for (k, v) in entries {
                keys.push(to_term(env, k)?);
                values.push(to_term(env, v)?);
            }
            // enif_make_map_from_arrays refuses duplicate keys.
            Term::map_from_term_arrays(env, &keys, &values)
                .map_err(|_| CodecError::Invalid("a map has a duplicate key".into()))?
        }
        ValueRef::Ext(ty, _) => {
            return Err(CodecError::Invalid(format!(
                "ext type {ty} is not accepted"
            )))
        }
    })
}

fn binary<'a>(env: Env<'a>, bytes: &[u8]) -> Term<'a> {
    let mut new = NewBinary::new(env, bytes.len());
    new.as_mut_slice().copy_from_slice(bytes);
    new.into()
}

/// Why a term cannot be encoded. `path` names the offending value, innermost segment first:
/// it is only built while an error propagates, so a successful encode allocates nothing for it.
struct EncodeError {
    path: Vec<String>,
    what: String,
}

/// `what` of the error that stops an encode on the normal scheduler once its output passes
/// `DIRTY_BYTES`: the wrapper then runs it again on a dirty scheduler.
const TOO_LARGE_FOR_NORMAL: &str = "too large for the normal scheduler";

/// Output (and frame) size from which the work belongs on a dirty scheduler.
const DIRTY_BYTES: usize = 16 * 1024;

impl EncodeError {
    fn at(mut self, segment: String) -> Self {
        self.path.push(segment);
        self
    }

    fn message(&self) -> String {
        if self.path.is_empty() {
            format!("the term: {}", self.what)
        } else {
            let path: String = self.path.iter().rev().map(String::as_str).collect();
            format!("{path}: {}", self.what)
        }
    }
}

fn encode<'a>(env: Env<'a>, term: Term<'a>, budget: usize) -> Term<'a> {
    let mut out = Vec::with_capacity(256);
    match write_term(&mut out, term, 1, budget) {
        Ok(()) => (atoms::ok(), binary(env, &out)).encode(env),
        Err(e) if e.what == TOO_LARGE_FOR_NORMAL => atoms::dirty().encode(env),
        Err(e) => (atoms::error(), (atoms::invalid_argument(), e.message())).encode(env),
    }
}

/// Encodes a term as MessagePack: `{:ok, binary}`, `{:error, {:invalid_argument, message}}`,
/// or `:dirty` when the output passes `DIRTY_BYTES` (at most that much work was spent; the
/// wrapper calls `msgpack_encode_dirty`). The size of a term is not known before walking it,
/// so this is how encoding is split by size.
#[rustler::nif]
fn msgpack_encode<'a>(env: Env<'a>, term: Term<'a>) -> Term<'a> {
    encode(env, term, DIRTY_BYTES)
}

/// `msgpack_encode` on a dirty CPU scheduler, without a budget.
#[rustler::nif(schedule = "DirtyCpu")]
fn msgpack_encode_dirty<'a>(env: Env<'a>, term: Term<'a>) -> Term<'a> {
    encode(env, term, usize::MAX)
}

fn refuse(what: &str) -> EncodeError {
    EncodeError {
        path: Vec::new(),
        what: what.to_owned(),
    }
}

// Writes to a Vec cannot fail; rmp still returns a Result, mapped rather than unwrapped.
fn io<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<(), EncodeError> {
    r.map(|_| ())
        .map_err(|e| refuse(&format!("write failed: {e}")))
}

fn write_term(
    out: &mut Vec<u8>,
    term: Term<'_>,
    depth: usize,
    budget: usize,
) -> Result<(), EncodeError> {
    use rmp::encode as w;
    if out.len() > budget {
        return Err(refuse(TOO_LARGE_FOR_NORMAL));
    }
    match term.get_type() {
        TermType::Atom => {
            let name = term
                .atom_to_string()
                .map_err(|_| refuse("an unreadable atom"))?;
            match name.as_str() {
                "nil" => io(w::write_nil(out)),
                "true" => io(w::write_bool(out, true)),
                "false" => io(w::write_bool(out, false)),
                other => io(w::write_str(out, other)),
            }
        }
        TermType::Integer => {
            if let Ok(n) = term.decode::<i64>() {
                io(w::write_sint(out, n))
            } else if let Ok(n) = term.decode::<u64>() {
                io(w::write_uint(out, n))
            } else {
                Err(refuse("an integer outside i64/u64"))
            }
        }
        TermType::Float => {
            let f = term
                .decode::<f64>()
                .map_err(|_| refuse("an unreadable float"))?;
            io(w::write_f64(out, f))
        }
        TermType::Binary => {
            let bin = Binary::from_term(term).map_err(|_| refuse("a bitstring"))?;
            let s = std::str::from_utf8(bin.as_slice())
                .map_err(|_| refuse("a binary that is not UTF-8 (use {:bin, binary})"))?;
            io(w::write_str(out, s))
        }
        TermType::Tuple => {
            let items = rustler::types::tuple::get_tuple(term)
                .map_err(|_| refuse("an unreadable tuple"))?;
            match items.as_slice() {
                [tag, payload] if tag.decode::<rustler::Atom>().ok() == Some(atoms::bin()) => {
                    let bin = Binary::from_term(*payload)
                        .map_err(|_| refuse("{:bin, _} needs a binary"))?;
                    io(w::write_bin(out, bin.as_slice()))
                }
                _ => Err(refuse("a tuple (only {:bin, binary} is encoded)")),
            }
        }
        TermType::List => {
            if depth > MAX_ENCODE_DEPTH {
                return Err(refuse("nested too deep"));
            }
            let len = term.list_length().map_err(|_| refuse("an improper list"))?;
            io(w::write_array_len(out, len_u32(len)?))?;
            let items = term
                .decode::<rustler::ListIterator>()
                .map_err(|_| refuse("an improper list"))?;
            for (i, item) in items.enumerate() {
                write_term(out, item, depth + 1, budget).map_err(|e| e.at(format!("[{i}]")))?;
            }
            Ok(())
        }
        TermType::Map => {
            if depth > MAX_ENCODE_DEPTH {
                return Err(refuse("nested too deep"));
            }
            let len = term.map_size().map_err(|_| refuse("not a map"))?;
            io(w::write_map_len(out, len_u32(len)?))?;
            let entries = MapIterator::new(term).ok_or_else(|| refuse("not a map"))?;
            for (key, value) in entries {
                let name = key_name(key)
                    .ok_or_else(|| refuse("a map key that is not an atom or a UTF-8 string"))?;
                io(w::write_str(out, &name))?;
                write_term(out, value, depth + 1, budget).map_err(|e| e.at(format!(".{name}")))?;
            }
            Ok(())
        }
        TermType::Fun | TermType::Pid | TermType::Port | TermType::Ref | TermType::Unknown => {
            Err(refuse("a fun, pid, port or reference"))
        }
    }
}

fn len_u32(len: usize) -> Result<u32, EncodeError> {
    u32::try_from(len).map_err(|_| refuse("more than 2^32 - 1 items"))
}

fn key_name(key: Term<'_>) -> Option<String> {
    match key.get_type() {
        TermType::Atom => key.atom_to_string().ok(),
        TermType::Binary => Binary::from_term(key)
            .ok()
            .and_then(|b| std::str::from_utf8(b.as_slice()).ok().map(str::to_owned)),
        _ => None,
    }
}
