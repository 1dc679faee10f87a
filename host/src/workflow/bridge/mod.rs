//! The Rhai ↔ component-model value bridge.
//!
//! [`to_val`] turns a script value into a [`Val`](wasmtime::component::Val) of a
//! given WIT [`Type`], strictly: every mismatch is a [`BridgeError`] naming the
//! full path of the offending value (`vm.nics[0].vlan: expected u16, got string "x"`). [`from_val`] and
//! [`from_val_typed`] go the other way.
//!
//! Mapping (input accepts what output produces, plus the noted extras):
//!
//! | WIT | Rhai |
//! |---|---|
//! | record | object map, keys snake_case (`memory_mib`); kebab keys accepted on input; a missing `option` field is none, any other missing or unknown key is an error |
//! | `list<u8>` | blob (a string is accepted as its UTF-8 bytes) |
//! | list, fixed-length list, tuple | array (tuples and fixed lists of exact length) |
//! | flags | array of flag names |
//! | enum | string, the WIT spelling (`no-op`); snake_case accepted on input |
//! | variant | payload-less case: its name; otherwise `#{kind: "<name>", value: <payload>}` (`case` is a reserved word in Rhai; `kind` matches the thrown error maps) |
//! | option | `()` or the value (so `option<option<T>>` cannot say "some(none)") |
//! | result | `#{ok: value}` or `#{err: value}` (a backend call's *return* result is unwrapped or thrown instead, see `backend`) |
//! | `map<string, V>` | object map (keys kept verbatim); other key types: array of `[key, value]` |
//! | bool, char, string | bool, char (a one-character string accepted), string |
//! | s8..s64, u8..u32 | INT, range-checked |
//! | u64 | INT; above `i64::MAX` it comes out as a decimal string, which is accepted back |
//! | f32, f64 | FLOAT (INT accepted) |
//! | resource, future, stream, error-context | error: not supported across the workflow boundary |

use rhai::Dynamic;
use wasmtime::component::Type;

mod input;
mod output;

pub use input::to_val;
pub use output::{from_val, from_val_typed};

/// A value that does not fit the WIT type it must be converted to or from.
/// Every case starts with the path of the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    /// The script value has the wrong kind.
    #[error("{path}: expected {expected}, got {got}")]
    Mismatch { path: String, expected: String, got: String },
    /// A record field that is not an `option` is absent from the map.
    #[error("{path}: missing field (expected {expected})")]
    MissingField { path: String, expected: String },
    /// The map has a key the record does not declare (a typo, most often).
    #[error("{path}: unknown field '{key}'{hint}; the fields are: {fields}")]
    UnknownField {
        path: String,
        key: String,
        /// ` (did you mean 'x'?)` or empty.
        hint: String,
        fields: String,
    },
    /// An integer outside the range of the WIT integer type.
    #[error("{path}: {value} does not fit {ty}")]
    OutOfRange { path: String, value: String, ty: &'static str },
    /// An enum, flag or variant case name that the type does not declare.
    #[error("{path}: unknown {what} \"{got}\"{hint}; expected one of: {valid}")]
    UnknownCase { path: String, what: &'static str, got: String, hint: String, valid: String },
    /// A tuple or fixed-length list with the wrong number of elements.
    #[error("{path}: expected {expected} elements, got {got}")]
    WrongLength { path: String, expected: usize, got: usize },
    /// Resources, futures, streams and error-contexts cannot become script values.
    #[error(
        "{path}: {kind} values are not supported across the workflow boundary; \
         the export must use plain data types"
    )]
    Unsupported { path: String, kind: &'static str },
}

pub(crate) fn unsupported<T>(path: &str, kind: &'static str) -> Result<T, BridgeError> {
    Err(BridgeError::Unsupported { path: path.to_string(), kind })
}

/// `memory-mib` → `memory_mib`: the spelling scripts use for WIT names.
pub fn snake(name: &str) -> String {
    name.replace('-', "_")
}

/// A human name for a WIT type, as written in WIT (`list<string>`, `option<u16>`).
pub fn type_name(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(l) => format!("list<{}>", type_name(&l.ty())),
        Type::FixedLengthList(l) => format!("list<{}, {}>", type_name(&l.ty()), l.len()),
        Type::Map(m) => format!("map<{}, {}>", type_name(&m.key()), type_name(&m.value())),
        Type::Record(r) => {
            let names: Vec<String> = r.fields().map(|f| snake(f.name)).collect();
            format!("record {{{}}}", names.join(", "))
        }
        Type::Tuple(t) => {
            let names: Vec<String> = t.types().map(|t| type_name(&t)).collect();
            format!("tuple<{}>", names.join(", "))
        }
        Type::Variant(v) => {
            let names: Vec<&str> = v.cases().map(|c| c.name).collect();
            format!("variant {{{}}}", names.join(", "))
        }
        Type::Enum(e) => format!("enum {{{}}}", e.names().collect::<Vec<_>>().join(", ")),
        Type::Flags(f) => format!("flags {{{}}}", f.names().collect::<Vec<_>>().join(", ")),
        Type::Option(o) => format!("option<{}>", type_name(&o.ty())),
        Type::Result(r) => {
            let ok = r.ok().map_or("_".to_string(), |t| type_name(&t));
            let err = r.err().map_or("_".to_string(), |t| type_name(&t));
            format!("result<{ok}, {err}>")
        }
        Type::Own(_) | Type::Borrow(_) => "resource".into(),
        Type::Future(_) => "future".into(),
        Type::Stream(_) => "stream".into(),
        Type::ErrorContext => "error-context".into(),
    }
}

/// A short description of a script value for error messages: its kind and, for
/// scalars, the value (`string "x"`, `int -1`).
pub fn describe(value: &Dynamic) -> String {
    if value.is_unit() {
        return "()".into();
    }
    if let Ok(s) = value.as_immutable_string_ref() {
        let mut shown: String = s.chars().take(40).collect();
        if shown.len() < s.len() {
            shown.push('…');
        }
        return format!("string {shown:?}");
    }
    if value.is_int() || value.is_float() || value.is_bool() || value.is_char() {
        return format!("{} {value}", value.type_name());
    }
    if value.is_map() {
        return "map".into();
    }
    if value.is_array() {
        return "array".into();
    }
    if value.is_blob() {
        return "blob".into();
    }
    value.type_name().to_string()
}

/// ` (did you mean 'x'?)` when one of `candidates` is within two edits of `got`.
pub(crate) fn did_you_mean<'a>(got: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    candidates
        .map(|c| (edit_distance(got, &snake(c)), c))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| format!(" (did you mean '{}'?)", snake(c)))
        .unwrap_or_default()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests;
