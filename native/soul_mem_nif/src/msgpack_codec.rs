//! MessagePack frames of the data plane, parsed and checked with `rmpv` (no rustler here, so
//! `tests/msgpack_codec.rs` can unit-test it: the NIF crate itself cannot link a test binary).
//!
//! A frame is accepted when it is one complete value, nested at most `max_depth` containers
//! deep (the top-level value is at depth 1), holding at most `max_elements` values (every value
//! counts, map keys too), with no ext types, only UTF-8 strings, only string map keys and only
//! finite floats (the BEAM has no NaN or infinity). `msgpack.rs` turns a checked value into an
//! Elixir term.

use rmpv::ValueRef;

/// What a frame may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Containers nested deeper than this are refused.
    pub max_depth: usize,
    /// More values than this are refused.
    pub max_elements: usize,
}

/// Why a frame was refused; `kind` is the reason Elixir sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// Not one well-formed MessagePack value (truncated, trailing bytes, an ext type, a map key
    /// that is not a string, a non-finite float).
    Invalid(String),
    /// Deeper or larger than the limits.
    Limit(String),
    /// A string that is not UTF-8.
    NotUtf8(String),
}

impl CodecError {
    /// The Elixir reason atom's name.
    pub fn kind(&self) -> &'static str {
        match self {
            CodecError::Invalid(_) => "invalid_msgpack",
            CodecError::Limit(_) => "limit_exceeded",
            CodecError::NotUtf8(_) => "not_utf8",
        }
    }

    /// The message for people.
    pub fn message(&self) -> &str {
        match self {
            CodecError::Invalid(m) | CodecError::Limit(m) | CodecError::NotUtf8(m) => m,
        }
    }
}

/// Parses `bytes` as one MessagePack value within `limits`.
pub fn parse(bytes: &[u8], limits: Limits) -> Result<ValueRef<'_>, CodecError> {
    let mut rest = bytes;
    // rmpv spends about two units of its depth budget per nesting level (a container and its
    // body); this bound only keeps its recursion off the stack, `check` applies the real limit.
    let rmpv_depth = limits.max_depth.saturating_add(1).saturating_mul(4);
    let value = rmpv::decode::read_value_ref_with_max_depth(&mut rest, rmpv_depth).map_err(
        |e| match e {
            rmpv::decode::Error::DepthLimitExceeded => too_deep(limits),
            other => CodecError::Invalid(format!("not a MessagePack value: {other}")),
        },
    )?;
    if !rest.is_empty() {
        return Err(CodecError::Invalid(format!(
            "{} trailing bytes after the value",
            rest.len()
        )));
    }
    let mut elements = 0;
    check(&value, 1, limits, &mut elements)?;
    Ok(value)
}

fn too_deep(limits: Limits) -> CodecError {
    CodecError::Limit(format!(
        "nested deeper than {} containers",
        limits.max_depth
    ))
}

fn check(
    value: &ValueRef<'_>,
    depth: usize,
    limits: Limits,
    elements: &mut usize,
) -> Result<(), CodecError> {
    *elements += 1;
    if *elements > limits.max_elements {
        return Err(CodecError::Limit(format!(
            "more than {} values",
            limits.max_elements
        )));
    }
    match value {
        ValueRef::Nil | ValueRef::Boolean(_) | ValueRef::Integer(_) => Ok(()),
        ValueRef::F32(f) if f.is_finite() => Ok(()),
        ValueRef::F64(f) if f.is_finite() => Ok(()),
        ValueRef::F32(_) | ValueRef::F64(_) => {
            Err(CodecError::Invalid("a float is NaN or infinite".into()))
        }
        ValueRef::String(s) => s
            .as_str()
            .map(|_| ())
            .ok_or_else(|| CodecError::NotUtf8("a string is not UTF-8".into())),
        ValueRef::Binary(_) => Ok(()),
        ValueRef::Ext(ty, _) => Err(CodecError::Invalid(format!(
            "ext type {ty} is not accepted"
        ))),
        ValueRef::Array(items) => {
            if depth > limits.max_depth {
                return Err(too_deep(limits));
            }
            items
                .iter()
                .try_for_each(|item| check(item, depth + 1, limits, elements))
        }
        ValueRef::Map(entries) => {
            if depth > limits.max_depth {
                return Err(too_deep(limits));
            }
            entries.iter().try_for_each(|(k, v)| {
                if !matches!(k, ValueRef::String(_)) {
                    return Err(CodecError::Invalid("a map key is not a string".into()));
                }
                check(k, depth + 1, limits, elements)?;
                check(v, depth + 1, limits, elements)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rmpv::Value;

    const LIMITS: Limits = Limits {
        max_depth: 64,
        max_elements: 100_000,
    };

    fn bytes(value: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, value).expect("a Vec takes any write");
        out
    }

    fn nested(depth: usize) -> Value {
        (0..depth).fold(Value::Nil, |inner, _| Value::Array(vec![inner]))
    }

    /// Values a frame may hold: string keys, UTF-8 strings, finite floats, no ext.
    fn frame_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            any::<bool>().prop_map(Value::Boolean),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::F64),
            ".{0,12}".prop_map(Value::from),
            prop::collection::vec(any::<u8>(), 0..12).prop_map(Value::Binary),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((".{0,8}", inner), 0..8).prop_map(|entries| {
                    Value::Map(
                        entries
                            .into_iter()
                            .map(|(k, v)| (Value::from(k), v))
                            .collect(),
                    )
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn every_frame_value_parses_back_to_itself(value in frame_value()) {
            let encoded = bytes(&value);
            let parsed = parse(&encoded, LIMITS).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            prop_assert_eq!(parsed.to_owned(), value);
        }

        #[test]
        fn no_strict_prefix_of_a_frame_parses(value in frame_value()) {
            let encoded = bytes(&value);
            for end in 0..encoded.len() {
                prop_assert!(parse(&encoded[..end], LIMITS).is_err());
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse(&input, LIMITS);
        }
    }

    #[test]
    fn depth_is_counted_in_containers() {
        assert!(parse(&bytes(&nested(64)), LIMITS).is_ok());
        let err = parse(&bytes(&nested(65)), LIMITS).expect_err("65 deep");
        assert_eq!(err.kind(), "limit_exceeded");
        assert_eq!(err.message(), "nested deeper than 64 containers");
        // Far deeper than rmpv's own bound: still the limit, not a stack overflow. (Written
        // as bytes: building and dropping such a `Value` would recurse as deep.)
        let mut deep = vec![0x91; 100_000]; // fixarray of one
        deep.push(0xc0); // nil
        let err = parse(&deep, LIMITS).expect_err("100k deep");
        assert_eq!(err.kind(), "limit_exceeded");
    }

    #[test]
    fn elements_count_every_value() {
        let limits = Limits {
            max_depth: 64,
            max_elements: 5,
        };
        // a map of two entries: the map, two keys, two values
        let map = Value::Map(vec![
            (Value::from("a"), Value::from(1)),
            (Value::from("b"), Value::from(2)),
        ]);
        assert!(parse(&bytes(&map), limits).is_ok());
        let list = Value::Array((0..5).map(Value::from).collect());
        assert_eq!(
            parse(&bytes(&list), limits).expect_err("6 values").kind(),
            "limit_exceeded"
        );
    }

    #[test]
    fn refuses_what_has_no_elixir_term() {
        let refused = [
            Value::Ext(1, vec![0, 1]),
            Value::Map(vec![(Value::from(1), Value::Nil)]),
            Value::Map(vec![(Value::Binary(b"k".to_vec()), Value::Nil)]),
            Value::F64(f64::NAN),
            Value::F32(f32::INFINITY),
            Value::Array(vec![Value::Ext(-1, vec![])]),
        ];
        for value in refused {
            let err = parse(&bytes(&value), LIMITS).expect_err("refused");
            assert_eq!(err.kind(), "invalid_msgpack", "{value:?}");
        }
        // a str (fixstr of 2 bytes) holding invalid UTF-8
        assert_eq!(
            parse(&[0xa2, 0xff, 0xfe], LIMITS)
                .expect_err("not UTF-8")
                .kind(),
            "not_utf8"
        );
        let mut two = bytes(&Value::from(1));
        two.extend(bytes(&Value::from(2)));
        assert_eq!(
            parse(&two, LIMITS).expect_err("trailing").kind(),
            "invalid_msgpack"
        );
        assert!(parse(&[], LIMITS).is_err());
    }

    #[test]
    fn a_huge_claimed_length_fails_without_allocating_it() {
        // array32 claiming 4 billion elements, with none present
        let err = parse(&[0xdd, 0xff, 0xff, 0xff, 0xff], LIMITS).expect_err("truncated");
        assert_eq!(err.kind(), "invalid_msgpack");
    }
}
