//! An answer's `data` against the method's `returns` schema (`check_prop` over JSON).
//!
//! Contract: pushes `(location, problem)` for every mismatch: the JSON type (with the
//! lenient scalar reading of the module doc), a missing non-optional object property,
//! an unknown one when the schema says `additionalProperties: 0`, array items, enums,
//! patterns and named formats of string values.

use serde_json::Value;

use super::value::{Formats, check_string, lookup};

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(if *b { "1".into() } else { "0".into() }),
        _ => None,
    }
}

fn type_matches(ty: &str, v: &Value) -> bool {
    match ty {
        "null" => v.is_null(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string() || v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_str().is_some_and(|s| s.parse::<i64>().is_ok()),
        "number" => v.is_number() || v.as_str().is_some_and(|s| s.parse::<f64>().is_ok()),
        "boolean" => {
            v.is_boolean() || v.as_i64().is_some_and(|n| n == 0 || n == 1) || matches!(v.as_str(), Some("0" | "1"))
        }
        _ => true,
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub fn check(formats: &Formats, schema: &Value, v: &Value, at: &str, out: &mut Vec<(String, String)>) {
    let Some(schema_obj) = schema.as_object() else { return };
    if schema_obj.is_empty() {
        return;
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| type_matches(t, v)) {
        out.push((at.to_string(), format!("type check ('{}') failed - got {}", types.join("|"), describe(v))));
        return;
    }
    match v {
        Value::Object(obj) => {
            let Some(props) = schema["properties"].as_object() else { return };
            for (k, x) in obj {
                match lookup(props, k) {
                    Some(s) if !x.is_null() => check(formats, s, x, &format!("{at}.{k}"), out),
                    Some(_) => {}
                    None if schema["additionalProperties"].as_i64() == Some(0) => {
                        out.push((format!("{at}.{k}"), "property is not defined in schema".into()));
                    }
                    None => {}
                }
            }
            for (k, s) in props {
                let required = s["optional"].as_i64() != Some(1) && s["type"].as_str() != Some("null");
                if required && !k.ends_with("[n]") && obj.get(k).is_none_or(Value::is_null) {
                    out.push((format!("{at}.{k}"), "property is missing and it is not optional".into()));
                }
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                check(formats, &schema["items"], x, &format!("{at}[{i}]"), out);
            }
        }
        Value::Null => {}
        scalar => {
            if let Some(text) = scalar_text(scalar) {
                out.extend(check_string(formats, schema, &text, at));
            }
        }
    }
}
