//! The host side of the WIT contract, generated in one place.
//!
//! `bindgen!` reads `wit/` at compile time and produces one `Host` trait per
//! imported interface (implemented on `CapCtx` by each capability's WIT
//! adapter, `caps/<cap>/host.rs`; the empty one of `types` is in
//! `caps/terraform/host.rs`), the `add_to_linker` glue, and [`BackendPre`],
//! with which the plugin host checks a plugin's lifecycle exports against
//! `wit/backend.wit` at load. Host functions cannot trap: expected failures
//! are the WIT `result` types, so a misbehaving host dependency never kills a
//! plugin instance.
//!
//! Every generated type is `Serialize` and `Deserialize` with its Rust field
//! names (`ha_managed`, `memory_mib`), so the Rhai modules hand WIT records to
//! scripts with `rhai::serde::to_dynamic` instead of building maps by hand.
//! Enums serialize as their Rust variant names (`Start`, `Aaaa`), which is not
//! the WIT spelling scripts use: enums cross to scripts by hand.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "cradle:host/backend",
    additional_derives: [serde::Serialize, serde::Deserialize],
});

pub use cradle::host::types::Error as WitError;
