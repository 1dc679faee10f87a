//! The Rhai glue every script module and typed parser shares, as plain
//! values: the result type [`Res`], [`throw`] (a [`CapError`] as the
//! `#{kind, message}` scripts catch), [`invalid`], [`to_map`] (a record as a
//! script map, through serde), [`int_arg`] and [`thrown_message`].
//!
//! Contract: a leaf. It imports nothing from the capabilities, the run or the
//! WIT bindings (only `rhai`, `serde` and `contract::CapError`), so the
//! capabilities' `rhai.rs` and `script_args.rs` files and `caps/script/` can
//! all use it without an import circle, and `fuzz/` compiles it as is. What
//! needs the run (`with_run`, `caps`, `wit_throw`) is in
//! [`super::script_run`].

use rhai::{EvalAltResult, Map};

use crate::contract::CapError;

/// What a function called from a script returns.
pub type Res<T> = Result<T, Box<EvalAltResult>>;

/// Throw `e` as `#{kind, message}`.
pub fn throw(e: CapError) -> Box<EvalAltResult> {
    let mut map = Map::new();
    map.insert("kind".into(), e.kind.as_str().into());
    map.insert("message".into(), e.message.into());
    Box::new(EvalAltResult::ErrorRuntime(map.into(), rhai::Position::NONE))
}

/// Throw `#{kind: "invalid", message}`.
pub fn invalid(message: impl Into<String>) -> Box<EvalAltResult> {
    throw(CapError::invalid(message.into()))
}

/// `value` (a WIT record or a view struct) as a script map, through serde:
/// fields by their Rust names, `()` for a none, INT for integers.
pub fn to_map<T: serde::Serialize>(value: &T) -> Res<Map> {
    let d = rhai::serde::to_dynamic(value)?;
    let kind = d.type_name();
    d.try_cast::<Map>().ok_or_else(|| format!("a record became a script {kind}, not a map").into())
}

/// A VMID (or other u32) argument from a script integer.
pub fn int_arg(v: i64, what: &str) -> Res<u32> {
    u32::try_from(v).map_err(|_| invalid(format!("{what} {v} is out of range")))
}

/// The message of a script error: the `message` of a thrown
/// `#{kind, message}`, or the error as text.
pub fn thrown_message(e: &EvalAltResult) -> String {
    match e {
        EvalAltResult::ErrorRuntime(v, _) => v
            .clone()
            .try_cast::<Map>()
            .and_then(|m| m.get("message").map(ToString::to_string))
            .unwrap_or_else(|| v.to_string()),
        other => other.to_string(),
    }
}
