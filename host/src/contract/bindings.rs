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

/// The optional `maintenance` export (world `maintainer`, wit/backend.wit),
/// generated over the same imports and records as [`Backend`]: the plugin
/// host checks a backend's `maintenance` export against it at load
/// ([`maintainer::exports::cradle::host::maintenance::GuestIndices`]). Calls
/// go by name through the workflow bridge, like any export beyond `lifecycle`.
pub mod maintainer {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "cradle:host/maintainer",
        with: {
            "cradle:host/types": super::cradle::host::types,
            "cradle:host/log": super::cradle::host::log,
            "cradle:host/proxmox": super::cradle::host::proxmox,
            "cradle:host/ssh": super::cradle::host::ssh,
            "cradle:host/dns": super::cradle::host::dns,
            "cradle:host/dhcp": super::cradle::host::dhcp,
            "cradle:host/post": super::cradle::host::post,
            "cradle:host/lock": super::cradle::host::lock,
            "cradle:host/checkpoint": super::cradle::host::checkpoint,
            "cradle:host/terraform": super::cradle::host::terraform,
            "cradle:host/http": super::cradle::host::http,
            "cradle:host/netbox": super::cradle::host::netbox,
        },
    });
}
