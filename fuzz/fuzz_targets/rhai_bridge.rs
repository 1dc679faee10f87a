//! The workflow engine's Rhai ↔ WIT value bridge (`host/src/workflow/bridge`):
//! the input is one JSON document `{"type": T, "value": V}`, `T` a WIT type
//! as `cradle_fuzz::bridge::descriptor` reads it, `V` the script value (JSON
//! through `rhai::serde::to_dynamic`, as `cradle run` passes arguments).
//!
//! Invariants: converting never panics; when the script value converts to
//! the type, the script value the bridge gives back for it converts again,
//! to the same WIT value (what a workflow reads from a backend it can pass
//! back); errors name a path starting at the parameter.
#![no_main]

use cradle_fuzz::bridge::{descriptor, from_value, to_value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let (Some(ty), Some(value)) = (input.get("type"), input.get("value")) else { return };
    let Some(ty) = descriptor(ty) else { return };
    let Ok(value) = rhai::serde::to_dynamic(value) else { return };
    let first = match to_value(&value, &ty, "arg") {
        Ok(v) => v,
        Err(e) => {
            assert!(e.to_string().starts_with("arg"), "an error without its path: {e}");
            return;
        }
    };
    let back = from_value(&first, Some(&ty), "arg").expect("a value of a plain type converts back");
    let again = to_value(&back, &ty, "arg").unwrap_or_else(|e| panic!("the bridge's own output is refused: {e}"));
    assert_eq!(again, first, "round trip through {back:?}");
    // Untyped, as `from_val` converts a value whose type is not at hand.
    let _ = from_value(&first, None, "arg");
});
