//! The host side of the WIT contract, generated in one place.
//!
//! `bindgen!` reads `wit/` at compile time and produces one `Host` trait per
//! capability interface (implemented in `caps::host`) and the `add_to_linker`
//! glue. Host functions cannot trap: expected failures are the WIT `result`
//! types, so a misbehaving host dependency never kills a plugin instance.

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "cradle:host/backend",
});

pub use cradle::host::types::Error as WitError;
