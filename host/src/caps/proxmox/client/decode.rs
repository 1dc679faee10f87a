//! Lenient readers for the JSON PVE returns.
//!
//! PVE's JSON is produced by Perl, so a number may arrive as `2` or `"2"` and a
//! boolean as `1`, `"1"` or `true`. These helpers accept those spellings and
//! nothing else; a missing required field or a wrong type is an error text that
//! names the field (the caller wraps it in `ProxmoxError::Decode`).

use serde_json::{Map, Value};

pub(crate) type Object = Map<String, Value>;

/// `value` as an object.
pub(crate) fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Object, String> {
    value.as_object().ok_or_else(|| format!("{what} is not an object but {}", type_name(value)))
}

/// `value` as an array of objects.
pub(crate) fn objects<'a>(value: &'a Value, what: &str) -> Result<Vec<&'a Object>, String> {
    let list = value.as_array().ok_or_else(|| format!("{what} is not a list but {}", type_name(value)))?;
    list.iter().enumerate().map(|(i, v)| object(v, &format!("{what}[{i}]"))).collect()
}

/// A string or number field rendered as text; `None` when absent or null.
pub(crate) fn opt_string(o: &Object, key: &str) -> Option<String> {
    o.get(key).and_then(render)
}

/// A required string or number field.
pub(crate) fn string(o: &Object, key: &str) -> Result<String, String> {
    opt_string(o, key).ok_or_else(|| format!("field {key:?} is missing"))
}

/// An unsigned integer given as a number or a decimal string; `None` when absent.
pub(crate) fn opt_u64(o: &Object, key: &str) -> Result<Option<u64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_u64(v).map(Some).ok_or_else(|| format!("field {key:?} is not an unsigned integer: {v}")),
    }
}

/// A required unsigned integer.
pub(crate) fn u64_field(o: &Object, key: &str) -> Result<u64, String> {
    opt_u64(o, key)?.ok_or_else(|| format!("field {key:?} is missing"))
}

/// A required VMID.
pub(crate) fn vmid(o: &Object, key: &str) -> Result<u32, String> {
    let n = u64_field(o, key)?;
    u32::try_from(n).map_err(|_| format!("field {key:?} = {n} is not a VMID"))
}

/// A boolean flag (`1`, `"1"`, `true`); absent or null is false.
pub(crate) fn flag(o: &Object, key: &str) -> Result<bool, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => match as_u64(v) {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(format!("field {key:?} is not a 0/1 flag: {v}")),
        },
    }
}

/// A scalar rendered the way PVE writes it into a config file: strings verbatim,
/// integers without a fraction, booleans as `1`/`0`. Objects and arrays (which
/// config values never are) are rendered as JSON so nothing is silently dropped.
pub(crate) fn render(value: &Value) -> Option<String> {
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
        assert!(flag(o, "bad").unwrap_err().contains("\"bad\""));
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
