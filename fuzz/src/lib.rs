//! The parsers cargo-fuzz exercises, compiled from the host's own source files.
//!
//! Contract: every module here is a `#[path]` include of a self-contained host
//! file (no `crate::` imports of wasmtime-dependent modules), so the fuzz
//! targets run exactly the code `cradle` runs, without building the `cradle`
//! crate (and wasmtime) a second time. Where a host file names a type of the
//! host's WIT bindings, [`contract`] provides a plain stand-in with the same
//! fields: the parser is the host's, only its input type is rebuilt here.

#![allow(dead_code, reason = "the host files carry items only the host uses")]
#![allow(unused_imports, reason = "the host files carry imports only the host's cfgs use")]

/// Ansible INI/YAML inventories, `--limit` patterns, templates, resolution.
#[path = "../../host/src/inventory/mod.rs"]
pub mod inventory;

/// The assertions the inventory targets share.
pub mod inventory_checks;

/// The terraform capability's module-content check.
pub mod terraform;

/// `cloud-init status --format=json`.
#[path = "../../host/src/cloudinit/status.rs"]
pub mod cloudinit_status;

/// `cradle serve`: the NetBox webhook body and its `X-Hook-Signature`.
pub mod serve;

/// PVE config property strings as the proxmox capability scopes them.
#[path = "../../host/src/caps/proxmox/config_scope.rs"]
pub mod config_scope;

/// The PVE response decoders of the proxmox client (`client/answers.rs`) and
/// their lenient readers (`client/decode.rs`), siblings as in the host.
pub mod pve;

/// A run journal's lines and summary, as `cradle runs` reads them.
pub mod journal;

/// The host's secret registry and redaction (`host/src/secrets`), which the
/// journal's events use when they are written.
#[path = "../../host/src/secrets/mod.rs"]
pub mod secrets;

/// The host's capability error, with stand-ins for the WIT binding types the
/// included files name.
pub mod contract;

/// cradle's known_hosts (`caps/ssh/known_hosts.rs`) and what it takes from its
/// parent module.
pub mod ssh;

/// What the included files take from `host/src/state`.
pub mod state;

/// The guest kit's config values and property strings (plugins/guest/src/config.rs),
/// as the direct and terraform backends compare and write them.
#[path = "../../plugins/guest/src/config.rs"]
pub mod guest_config;

/// Stand-ins for the guest kit's WIT types (`crate::types` there) with the fields
/// `guest_config` reads.
pub mod types {
    pub use crate::contract::bindings::cradle::host::types::Entry;

    /// `cradle:host/types.nic` (the fields the config code reads).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Nic {
        pub bridge: String,
        pub vlan: Option<u16>,
    }

    /// `cradle:host/types.vm-spec` (the fields the config code reads).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct VmSpec {
        pub startup_order: Option<u32>,
    }
}
