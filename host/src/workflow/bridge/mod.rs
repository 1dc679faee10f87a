//! The Rhai ↔ component-model value bridge.
//!
//! [`to_val`] turns a script value into a [`Val`](wasmtime::component::Val) of a
//! given WIT [`Type`](wasmtime::component::Type), strictly: every mismatch is a [`BridgeError`] naming the
//! full path of the offending value (`vm.nics[0].vlan: expected u16, got string "x"`). [`from_val`] and
//! [`from_val_typed`] go the other way.
//!
//! The conversions themselves are pure code over the bridge's own type and
//! value ([`WitType`], [`WitValue`]): [`to_value`] and [`from_value`], in
//! `input.rs` and `output.rs`, with `error.rs` and `wit.rs` — the files the
//! fuzz crate compiles (target `rhai_bridge`). `wasm.rs` is the thin wasmtime
//! adapter: `Type` → `WitType`, `Val` ↔ `WitValue`.
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
//! | `map<string, V>` | object map (keys kept verbatim); other key types: array of `[key, value]` (a key twice is an error; `#{}` accepted as the empty map; string keys given as pairs are put in key order, as an object map's are) |
//! | bool, char, string | bool, char (a one-character string accepted), string |
//! | s8..s64, u8..u32 | INT, range-checked |
//! | u64 | INT; above `i64::MAX` it comes out as a decimal string, which is accepted back |
//! | f32, f64 | FLOAT (INT accepted) |
//! | resource, future, stream, error-context | error: not supported across the workflow boundary |

mod error;
mod input;
mod output;
mod wasm;
mod wit;

pub use error::{BridgeError, describe, snake};
pub(crate) use error::{did_you_mean, unsupported};
pub use input::to_value;
pub use output::from_value;
pub use wasm::{from_val, from_val_typed, to_val, type_name, wit_type};
pub use wit::{WitType, WitValue, wit_type_name};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod core_tests;
