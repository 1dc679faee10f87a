//! JSON ↔ script values, in one place: `cradle run` arguments and results,
//! and the inventory values a workflow's `vm` carries.
//!
//! - [`from_json`] is `rhai::serde::to_dynamic`: `null` → `()`, integers →
//!   INT (above `i64::MAX` a FLOAT), other numbers → FLOAT, arrays and objects →
//!   arrays and object maps. Any other `Serialize` value goes the same way
//!   through `rhai::serde::to_dynamic` directly.
//! - [`to_json`] walks the script value itself: blobs become arrays of numbers
//!   and every opaque value (a function pointer, a range, a timestamp, a
//!   backend handle) its script text (`Fn(step)`, `1..5`), which is what rhai's
//!   own `Serialize` does not print.
//! - [`arg`] reads a command-line argument: JSON when it parses as JSON
//!   (`42`, `true`, `{"name":"x"}`), a plain string otherwise.

use rhai::{Dynamic, EvalAltResult, Map};
use serde_json::Value;

/// JSON as a script value.
pub fn from_json(v: &Value) -> Result<Dynamic, Box<EvalAltResult>> {
    rhai::serde::to_dynamic(v)
}

/// A command-line argument as a script value.
pub fn arg(text: &str) -> Result<Dynamic, Box<EvalAltResult>> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => from_json(&v),
        Err(_) => Ok(text.into()),
    }
}

/// A script value as JSON (blobs become arrays of numbers, other opaque values
/// their text).
pub fn to_json(d: &Dynamic) -> Value {
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
        Value::Array(d.clone().into_array().unwrap_or_default().iter().map(to_json).collect())
    } else if d.is_blob() {
        Value::Array(d.clone().into_blob().unwrap_or_default().into_iter().map(Value::from).collect())
    } else if d.is_map() {
        let map = d.clone().cast::<Map>();
        Value::Object(map.iter().map(|(k, v)| (k.to_string(), to_json(v))).collect())
    } else {
        Value::String(d.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_arguments_become_rhai_values_and_back() {
        let d = arg(r#"{"name":"test-0","vmid":150,"tags":["a"],"disk":null}"#).expect("value");
        let back = to_json(&d);
        assert_eq!(back["name"], "test-0");
        assert_eq!(back["vmid"], 150);
        assert_eq!(back["tags"][0], "a");
        assert!(back["disk"].is_null());
    }

    #[test]
    fn non_json_arguments_are_strings() {
        assert_eq!(arg("test-0").expect("value").into_string().expect("string"), "test-0");
    }

    #[test]
    fn integers_stay_int_floats_float_and_blobs_become_numbers() {
        let d = from_json(&serde_json::json!({"i": 3, "big": u64::MAX, "f": 2.0, "neg": -1})).expect("value");
        let m = d.cast::<Map>();
        assert_eq!(m["i"].as_int(), Ok(3));
        assert_eq!(m["neg"].as_int(), Ok(-1));
        assert!(m["f"].is_float(), "2.0 stays a FLOAT");
        assert!(m["big"].is_float(), "above i64::MAX: a FLOAT, as JSON has it");
        assert_eq!(to_json(&Dynamic::from_blob(vec![1, 255])), serde_json::json!([1, 255]));
        let fn_ptr = rhai::Engine::new().eval::<Dynamic>("Fn(\"step\")").expect("fn ptr");
        assert_eq!(to_json(&fn_ptr), Value::String(fn_ptr.to_string()));
    }
}
