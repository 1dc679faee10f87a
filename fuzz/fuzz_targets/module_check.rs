//! A terraform module's files through the host's module-content check, for both
//! flavours. The input is split at NUL bytes into files (`main.tf.json`,
//! `extra1.tf.json`, ...).
//!
//! Invariant: an accepted module is plain JSON holding no template sequence
//! (`${`, `%{`) in any key or value: that is how terraform's JSON syntax calls
//! functions that read the control node.
#![no_main]

use cradle_fuzz::terraform::Flavour;
use cradle_fuzz::terraform::module_check::check;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn has_template(v: &Value) -> bool {
    let t = |s: &str| s.contains("${") || s.contains("%{");
    match v {
        Value::String(s) => t(s),
        Value::Array(a) => a.iter().any(has_template),
        Value::Object(o) => o.iter().any(|(k, v)| t(k) || has_template(v)),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let files: Vec<(String, String)> = text
        .split('\0')
        .enumerate()
        .map(|(i, f)| (if i == 0 { "main.tf.json".to_string() } else { format!("extra{i}.tf.json") }, f.to_string()))
        .collect();
    for flavour in [Flavour::Telmate, Flavour::Bpg] {
        if check(flavour, &files).is_ok() {
            for (name, content) in &files {
                let v: Value =
                    serde_json::from_str(content).unwrap_or_else(|e| panic!("accepted {name}, not JSON: {e}"));
                assert!(!has_template(&v), "accepted {name} holding a template sequence");
            }
        }
    }
});
