//! The host side of the WIT contract, generated in one place.
//!
//! `bindgen!` reads `wit/` at compile time and produces one `Host` trait per
//! capability interface (implemented on `CapCtx` by each capability's WIT
//! adapter, `caps/<cap>/host.rs`) and the `add_to_linker`
//! glue. Host functions cannot trap: expected failures are the WIT `result`
//! types, so a misbehaving host dependency never kills a plugin instance.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "cradle:host/backend",
});

pub use cradle::host::types::Error as WitError;
