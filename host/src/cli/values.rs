//! Command-line values ↔ Rhai values: `cradle run` arguments are JSON when they
//! parse as JSON (`42`, `true`, `{"name":"x"}`) and plain strings otherwise;
//! results are printed as JSON.

use rhai::{Array, Dynamic, Map};
use serde_json::Value;

/// A command-line argument as a Rhai value.
pub fn arg_to_dynamic(arg: &str) -> Dynamic {
    match serde_json::from_str::<Value>(arg) {
        Ok(v) => json_to_dynamic(&v),
        Err(_) => arg.into(),
    }
}

/// JSON to Rhai.
pub fn json_to_dynamic(v: &Value) -> Dynamic {
    match v {
        Value::Null => Dynamic::UNIT,
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64().unwrap_or(f64::NAN).into(),
        },
        Value::String(s) => s.clone().into(),
        Value::Array(a) => a.iter().map(json_to_dynamic).collect::<Array>().into(),
        Value::Object(o) => o.iter().map(|(k, v)| (k.as_str().into(), json_to_dynamic(v))).collect::<Map>().into(),
    }
}

/// Rhai to JSON (blobs become arrays of numbers, other opaque values their text).
pub fn dynamic_to_json(d: &Dynamic) -> Value {
    if d.is_unit() {
        Value::Null
    } else if let Ok(b) = d.as_bool() {
        Value::Bool(b)
    } else if let Ok(i) = d.as_int() {
        Value::from(i)
    } else if let Ok(f) = d.as_float() {
        Value::from(f)
    } else if d.is_string() {
        Value::String(d.clone().into_string().unwrap_or_default())
    } else if d.is_array() {
        Value::Array(d.clone().into_array().unwrap_or_default().iter().map(dynamic_to_json).collect())
    } else if d.is_blob() {
        Value::Array(d.clone().into_blob().unwrap_or_default().into_iter().map(Value::from).collect())
    } else if d.is_map() {
        let map = d.clone().cast::<Map>();
        Value::Object(map.iter().map(|(k, v)| (k.to_string(), dynamic_to_json(v))).collect())
    } else {
        Value::String(d.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_arguments_become_rhai_values_and_back() {
        let d = arg_to_dynamic(r#"{"name":"test-0","vmid":150,"tags":["a"],"disk":null}"#);
        let back = dynamic_to_json(&d);
        assert_eq!(back["name"], "test-0");
        assert_eq!(back["vmid"], 150);
        assert_eq!(back["tags"][0], "a");
        assert!(back["disk"].is_null());
    }

    #[test]
    fn non_json_arguments_are_strings() {
        assert_eq!(arg_to_dynamic("test-0").into_string().expect("string"), "test-0");
    }
}
