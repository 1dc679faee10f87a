//! Lenient readers for the JSON PVE returns.
//!
//! PVE's JSON is produced by Perl, so a number may arrive as `2` or `"2"` and a
//! boolean as `1`, `"1"` or `true`. These helpers accept those spellings and
//! nothing else; a missing required field or a wrong type is a [`DecodeError`]
//! that names the field (the client wraps its text in `ProxmoxError::Decode`,
//! naming the request).
//!
//! Self-contained (std, serde_json, thiserror): `fuzz/` compiles this file and
//! `answers.rs` on their own.

use serde_json::{Map, Value};

pub type Object = Map<String, Value>;

/// How an answer differs from the documented shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A value that must be an object.
    #[error("{what} is not an object but {found}")]
    NotAnObject { what: String, found: &'static str },
    /// A value that must be a list.
    #[error("{what} is not a list but {found}")]
    NotAList { what: String, found: &'static str },
    /// A required field is absent or null.
    #[error("field {key:?} is missing")]
    Missing { key: String },
    /// A field that must be an unsigned integer (a number or a decimal string).
    #[error("field {key:?} is not an unsigned integer: {value}")]
    NotUnsigned { key: String, value: Value },
    /// An integer field too large for a VMID.
    #[error("field {key:?} = {value} is not a VMID")]
    NotVmid { key: String, value: u64 },
    /// A field that must be a 0/1 flag.
    #[error("field {key:?} is not a 0/1 flag: {value}")]
    NotAFlag { key: String, value: Value },
    /// `GET /cluster/nextid` answered null.
    #[error("nextid answered null")]
    NextidNull,
    /// `GET /cluster/nextid` answered something that is not a VMID.
    #[error("nextid answered {text:?}, not a VMID")]
    NextidNotVmid { text: String },
    /// A task-starting call answered something that is not a string.
    #[error("expected a UPID string, got {value}")]
    NotAUpid { value: Value },
    /// A UPID that does not parse.
    #[error(transparent)]
    Upid(#[from] UpidError),
    /// A task status that is neither `running` nor `stopped`.
    #[error("task status {status:?} is neither running nor stopped")]
    TaskStatus { status: String },
}

/// A string that is not a UPID (the client turns it into `ProxmoxError::Upid`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid UPID {upid:?}: {reason}; expected UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:")]
pub struct UpidError {
    /// The text given.
    pub upid: String,
    /// What is wrong with it.
    pub reason: String,
}

/// `value` as an object.
pub fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Object, DecodeError> {
    value.as_object().ok_or_else(|| DecodeError::NotAnObject { what: what.to_string(), found: type_name(value) })
}

/// `value` as an array of objects.
pub fn objects<'a>(value: &'a Value, what: &str) -> Result<Vec<&'a Object>, DecodeError> {
    let list =
        value.as_array().ok_or_else(|| DecodeError::NotAList { what: what.to_string(), found: type_name(value) })?;
    list.iter().enumerate().map(|(i, v)| object(v, &format!("{what}[{i}]"))).collect()
}

/// A string or number field rendered as text; `None` when absent or null.
pub fn opt_string(o: &Object, key: &str) -> Option<String> {
    o.get(key).and_then(render)
}

/// A required string or number field.
pub fn string(o: &Object, key: &str) -> Result<String, DecodeError> {
    opt_string(o, key).ok_or_else(|| missing(key))
}

/// The error for a missing `key`.
pub fn missing(key: &str) -> DecodeError {
    DecodeError::Missing { key: key.to_string() }
}

/// An unsigned integer given as a number or a decimal string; `None` when absent.
pub fn opt_u64(o: &Object, key: &str) -> Result<Option<u64>, DecodeError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            as_u64(v).map(Some).ok_or_else(|| DecodeError::NotUnsigned { key: key.to_string(), value: v.clone() })
        }
    }
}

/// A required unsigned integer.
pub fn u64_field(o: &Object, key: &str) -> Result<u64, DecodeError> {
    opt_u64(o, key)?.ok_or_else(|| missing(key))
}

/// A required VMID.
pub fn vmid(o: &Object, key: &str) -> Result<u32, DecodeError> {
    let n = u64_field(o, key)?;
    u32::try_from(n).map_err(|_| DecodeError::NotVmid { key: key.to_string(), value: n })
}

/// A boolean flag (`1`, `"1"`, `true`); absent or null is false.
pub fn flag(o: &Object, key: &str) -> Result<bool, DecodeError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => match as_u64(v) {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(DecodeError::NotAFlag { key: key.to_string(), value: v.clone() }),
        },
    }
}

/// A scalar rendered the way PVE writes it into a config file: strings verbatim,
/// integers without a fraction, booleans as `1`/`0`. Objects and arrays (which
/// config values never are) are rendered as JSON so nothing is silently dropped.
pub fn render(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(if *b { "1" } else { "0" }.to_string()),
        other => Some(other.to_string()),
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_and_flags_are_read_in_every_spelling_pve_uses() {
        let v = json!({"a": 2, "b": "3", "t": 1, "u": "1", "w": true, "z": 0, "bad": "x", "neg": -1});
        let o = object(&v, "test").expect("object");
        assert_eq!(opt_u64(o, "a"), Ok(Some(2)));
        assert_eq!(opt_u64(o, "b"), Ok(Some(3)));
        assert_eq!(opt_u64(o, "missing"), Ok(None));
        assert!(opt_u64(o, "bad").is_err());
        assert!(opt_u64(o, "neg").is_err());
        assert_eq!(flag(o, "t"), Ok(true));
        assert_eq!(flag(o, "u"), Ok(true));
        assert_eq!(flag(o, "w"), Ok(true));
        assert_eq!(flag(o, "z"), Ok(false));
        assert_eq!(flag(o, "missing"), Ok(false));
        assert!(flag(o, "bad").unwrap_err().to_string().contains("\"bad\""));
    }

    #[test]
    fn config_values_render_as_pve_writes_them() {
        assert_eq!(render(&json!(2)), Some("2".into()));
        assert_eq!(render(&json!(0.5)), Some("0.5".into()));
        assert_eq!(
            render(&json!("virtio=BC:24:11:00:00:01,bridge=vmbr0")),
            Some("virtio=BC:24:11:00:00:01,bridge=vmbr0".into())
        );
        assert_eq!(render(&json!(true)), Some("1".into()));
        assert_eq!(render(&Value::Null), None);
    }
}
