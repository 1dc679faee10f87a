//! The Rhai ↔ WIT value bridge's pure core (`host/src/workflow/bridge`:
//! `error.rs`, `wit.rs`, `input.rs`, `output.rs`, siblings here as in the host,
//! where `mod.rs` re-exports the same names and adds the wasmtime adapter),
//! and [`descriptor`], which reads a fuzz input's type.

#[path = "../../host/src/workflow/bridge/error.rs"]
mod error;
#[path = "../../host/src/workflow/bridge/input.rs"]
mod input;
#[path = "../../host/src/workflow/bridge/output.rs"]
mod output;
#[path = "../../host/src/workflow/bridge/wit.rs"]
mod wit;

pub use error::{BridgeError, describe, snake};
pub(crate) use error::{did_you_mean, unsupported};
pub use input::to_value;
pub use output::from_value;
pub use wit::{WitType, WitValue, wit_type_name};

/// A [`WitType`] from its JSON description, as the seeds write them:
/// `"u32"`, `{"list": T}`, `{"fixed": [T, n]}`, `{"map": [K, V]}`,
/// `{"record": [[name, T], ...]}`, `{"tuple": [T, ...]}`,
/// `{"variant": [[name, T or null], ...]}`, `{"enum": [names]}`,
/// `{"flags": [names]}`, `{"option": T}`, `{"result": [T or null, T or null]}`,
/// and `"resource"`, `"future"`, `"stream"`, `"error-context"`.
///
/// Only types WIT can declare: names are WIT identifiers (kebab-case words
/// of lowercase letters and digits, each starting with a letter), unique
/// within their type; nesting is at most [`MAX_DEPTH`] deep. `None` for
/// anything else.
pub fn descriptor(json: &serde_json::Value) -> Option<WitType> {
    parse(json, 0)
}

/// How deep a fuzzed type may nest (a real `vm-spec` is 3 deep).
pub const MAX_DEPTH: usize = 8;

fn parse(json: &serde_json::Value, depth: usize) -> Option<WitType> {
    use serde_json::Value;
    if depth > MAX_DEPTH {
        return None;
    }
    let sub = |v: &Value| parse(v, depth + 1).map(Box::new);
    if let Value::String(s) = json {
        return Some(match s.as_str() {
            "bool" => WitType::Bool,
            "s8" => WitType::S8,
            "u8" => WitType::U8,
            "s16" => WitType::S16,
            "u16" => WitType::U16,
            "s32" => WitType::S32,
            "u32" => WitType::U32,
            "s64" => WitType::S64,
            "u64" => WitType::U64,
            "f32" => WitType::Float32,
            "f64" => WitType::Float64,
            "char" => WitType::Char,
            "string" => WitType::String,
            "resource" => WitType::Unsupported("resource"),
            "future" => WitType::Unsupported("future"),
            "stream" => WitType::Unsupported("stream"),
            "error-context" => WitType::Unsupported("error-context"),
            _ => return None,
        });
    }
    let obj = json.as_object()?;
    if obj.len() != 1 {
        return None;
    }
    let (kind, arg) = obj.iter().next()?;
    let pair = |v: &Value| -> Option<(Value, Value)> {
        match v.as_array()?.as_slice() {
            [a, b] => Some((a.clone(), b.clone())),
            _ => None,
        }
    };
    let optional =
        |v: &Value| -> Option<Option<Box<WitType>>> { if v.is_null() { Some(None) } else { sub(v).map(Some) } };
    Some(match kind.as_str() {
        "list" => WitType::List(sub(arg)?),
        "fixed" => {
            let (t, n) = pair(arg)?;
            let n = u32::try_from(n.as_u64()?).ok().filter(|n| (1..=64).contains(n))?;
            WitType::FixedLengthList(sub(&t)?, n)
        }
        "map" => {
            let (k, v) = pair(arg)?;
            WitType::Map(sub(&k)?, sub(&v)?)
        }
        "record" => {
            let mut fields = Vec::new();
            for field in arg.as_array()? {
                let (name, t) = pair(field)?;
                fields.push((name.as_str()?.to_string(), *sub(&t)?));
            }
            unique_names(fields.iter().map(|(n, _)| n.as_str()))?;
            WitType::Record(fields)
        }
        "tuple" => WitType::Tuple(arg.as_array()?.iter().map(|t| sub(t).map(|t| *t)).collect::<Option<_>>()?),
        "variant" => {
            let mut cases = Vec::new();
            for case in arg.as_array()? {
                let (name, t) = pair(case)?;
                cases.push((name.as_str()?.to_string(), optional(&t)?.map(|t| *t)));
            }
            unique_names(cases.iter().map(|(n, _)| n.as_str()))?;
            WitType::Variant(cases)
        }
        "enum" | "flags" => {
            let names: Vec<String> =
                arg.as_array()?.iter().map(|n| n.as_str().map(str::to_string)).collect::<Option<_>>()?;
            unique_names(names.iter().map(String::as_str))?;
            if kind == "enum" { WitType::Enum(names) } else { WitType::Flags(names) }
        }
        "option" => WitType::Option(sub(arg)?),
        "result" => {
            let (ok, err) = pair(arg)?;
            WitType::Result { ok: optional(&ok)?, err: optional(&err)? }
        }
        _ => return None,
    })
}

/// `Some` when every name is a WIT identifier and none repeats; WIT needs at
/// least one case or field for the kinds that take names.
fn unique_names<'a>(names: impl Iterator<Item = &'a str>) -> Option<()> {
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        let words_ok = name.split('-').all(|w| {
            w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && w.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
        if !words_ok || !seen.insert(name) {
            return None;
        }
    }
    if seen.is_empty() { None } else { Some(()) }
}
