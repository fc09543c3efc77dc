//! Typed reading of card JSON fields, with the path of the field in every error and the
//! per-field size limit applied to every string read. Cards in the wild write `null` for
//! empty fields; that reads as empty.

use super::limits::check_field;
use crate::error::{Error, Result};
use serde_json::{Map, Value};

/// A JSON object of a card and the path it sits at (for errors).
#[derive(Clone, Copy)]
pub struct Obj<'a> {
    /// The object.
    pub map: &'a Map<String, Value>,
    /// Its path, e.g. `data` or `lorebook entry uid 3 ("Sword")`.
    pub path: &'a str,
}

impl<'a> Obj<'a> {
    /// Wraps `value` (which must be an object; `path` names it in the error).
    pub fn new(value: &'a Value, path: &'a str) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Obj { map, path }),
            other => Err(Error::invalid_card(format!(
                "{path} must be a JSON object, found {}",
                type_name(other)
            ))),
        }
    }

    fn field_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The first present, non-null value among `keys` and its key.
    pub fn get_any(&self, keys: &[&'a str]) -> Option<(&'a str, &'a Value)> {
        keys.iter()
            .find_map(|k| self.map.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    }

    /// A string field (the first of `keys` present); missing or `null` is `""`. Longer than
    /// the field limit or not a string is an error naming the field.
    pub fn string(&self, keys: &[&'a str]) -> Result<String> {
        let Some((key, value)) = self.get_any(keys) else {
            return Ok(String::new());
        };
        let path = self.field_path(key);
        match value {
            Value::String(s) => {
                check_field(&path, s)?;
                Ok(s.clone())
            }
            other => Err(wrong_type(&path, "a string", other)),
        }
    }

    /// A boolean field; missing or `null` is `default`.
    pub fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(wrong_type(&self.field_path(key), "a boolean", other)),
        }
    }

    /// A list of strings (the first of `keys` present): an array of strings, or one string of
    /// comma-separated items (as old World Info files write keys). Blank items are dropped.
    pub fn string_list(&self, keys: &[&'a str]) -> Result<Vec<String>> {
        let Some((key, value)) = self.get_any(keys) else {
            return Ok(Vec::new());
        };
        let path = self.field_path(key);
        let items: Vec<String> = match value {
            Value::String(s) => {
                check_field(&path, s)?;
                s.split(',').map(|k| k.trim().to_owned()).collect()
            }
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let item_path = format!("{path}[{i}]");
                    match item {
                        Value::String(s) => {
                            check_field(&item_path, s)?;
                            out.push(s.trim().to_owned());
                        }
                        Value::Null => {}
                        other => return Err(wrong_type(&item_path, "a string", other)),
                    }
                }
                out
            }
            other => return Err(wrong_type(&path, "a list of strings", other)),
        };
        Ok(items.into_iter().filter(|s| !s.is_empty()).collect())
    }

    /// An array of strings kept verbatim (no comma splitting), blank items dropped; missing or
    /// `null` is empty.
    pub fn string_list_exact(&self, key: &'a str) -> Result<Vec<String>> {
        match self.map.get(key) {
            None | Some(Value::Null) | Some(Value::Array(_)) => self.string_list(&[key]),
            Some(other) => Err(wrong_type(
                &self.field_path(key),
                "an array of strings",
                other,
            )),
        }
    }

    /// A nested object field, if present and not `null`.
    pub fn object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(other) => Err(wrong_type(&self.field_path(key), "an object", other)),
        }
    }
}

/// Error for a field of the wrong JSON type.
pub fn wrong_type(path: &str, expected: &str, found: &Value) -> Error {
    Error::invalid_card(format!(
        "field {path} must be {expected}, found {}",
        type_name(found)
    ))
}

/// The JSON type of `value`, for messages.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
