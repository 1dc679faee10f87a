//! What the bridge reports, and the helpers every direction shares: the
//! error with the path of the offending value, snake_case names, value
//! descriptions and "did you mean" hints. Pure code (no wasmtime), compiled
//! by the fuzz crate too.

use rhai::Dynamic;

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
    /// A `map` given as `[key, value]` pairs names a key twice.
    #[error("{path}: duplicate key {key}")]
    DuplicateKey { path: String, key: String },
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
