//! The plugin kit: everything a cradle backend plugin needs on the guest side.
//!
//! - [`bindings`]: the `cradle:host` bindings, generated once here from wit/.
//!   A plugin implements [`Backend`] and calls [`export_backend!`]; it does
//!   not run `wit_bindgen::generate!` itself. A backend that supports
//!   reviewed maintenance (`cradle plan` / `cradle apply`) also implements
//!   [`Maintainer`] and calls [`export_maintenance!`].
//! - One module per capability ([`log`], [`proxmox`], [`ssh`], [`dns`],
//!   [`lock`], [`checkpoint`], [`http`], [`terraform`]): the host calls with
//!   typed arguments, each returning [`Result`] with the WIT [`Error`] enum, and
//!   the helpers for the recurring work (wait for a task, find a VM by its
//!   identity, clone exactly once after an ambiguous failure, read and render
//!   property strings).
//! - [`manifest!`]: the plugin's manifest (name, version, the capabilities it
//!   needs, the WIT version it was built against), embedded as the wasm custom
//!   section `cradle-manifest`. The host reads it before compiling the plugin
//!   and refuses a component whose imports are not all declared there, or one
//!   built against another WIT version (the message names both versions).
//!
//! The kit is versioned with the WIT: [`WIT_VERSION`] is the version of the
//! `cradle:host` package it was generated from.
//!
//! ```ignore
//! use cradle_guest::{Backend, Error, Result, types::*, lifecycle::*};
//! struct Mine;
//! impl Backend for Mine { /* discover, check_ownership, plan, create, reconcile, remove */ }
//! cradle_guest::export_backend!(Mine);
//! cradle_guest::manifest! {
//!     name: "mine",
//!     version: env!("CARGO_PKG_VERSION"),
//!     description: "What it does, in one line",
//!     needs: ["log", "proxmox"],
//! }
//! ```

#[allow(unsafe_code, reason = "generated ABI glue; the kit's own code has none")]
pub mod bindings;
pub mod config;
mod error;
pub mod log;
pub mod proxmox;

pub use error::{Error, Result};

/// `export_backend!(MyBackend)`: export `MyBackend`'s [`Backend`]
/// implementation as the component's `cradle:host/lifecycle`.
pub use bindings::export_backend;

/// `export_maintenance!(MyBackend)`: export `MyBackend`'s [`Maintainer`]
/// implementation as the component's `cradle:host/maintenance` (optional;
/// call it besides [`export_backend!`]).
pub use bindings::maintenance::export_maintenance;

/// Reviewed maintenance of existing VMs (wit/maintenance.wit): `plan_update`
/// and `apply_update`, which a backend MAY implement besides [`Backend`];
/// wire it with [`export_maintenance!`]. Workflows call them as
/// `backend.plan_update(vm.spec, lift)` when `"plan_update" in
/// backend.functions`.
pub use bindings::maintenance::exports::cradle::host::maintenance::Guest as Maintainer;

/// The shared records of the WIT (`vm-spec`, `vm-state`, `entry`, ...).
pub use bindings::cradle::host::types;

/// What `plan` returns (`plan-outcome`, `plan-action`).
pub use bindings::exports::cradle::host::lifecycle;

/// The lifecycle a backend implements: `discover`, `check_ownership`, `plan`,
/// `create`, `reconcile`, `remove` (wit/backend.wit). Wire it with
/// [`export_backend!`].
pub use bindings::exports::cradle::host::lifecycle::Guest as Backend;

/// `ssh`: run a command on a guest or node, upload a file, wait for sshd, pin
/// or forget a host key (scoped by the `ssh` grant).
pub use bindings::cradle::host::ssh;

/// `dns`: upsert and delete records by RFC 2136 in the granted zones.
pub use bindings::cradle::host::dns;

/// `dhcp`: reserve, release and look up fixed addresses for MACs in the
/// granted subnets (the host's UniFi provider holds the credentials).
pub use bindings::cradle::host::dhcp;

/// `post`: run a post-provision task template (Semaphore) of the granted
/// projects and templates and wait for it (the host holds the API token).
pub use bindings::cradle::host::post;

/// `lock`: named locks, released by the run that took them.
pub use bindings::cradle::host::lock;

/// `checkpoint`: the finalization checkpoint of the call's VM.
pub use bindings::cradle::host::checkpoint;

/// `http`: requests to one configured endpoint, its credential added by the host.
pub use bindings::cradle::host::http;

/// `terraform`: write a module, plan, show, apply a saved plan, read the state.
pub use bindings::cradle::host::terraform;

/// The version of the `cradle:host` WIT package this kit was generated from.
/// A host speaking another version refuses the plugin, naming both.
pub const WIT_VERSION: &str = "0.1.0";

/// The custom section name the host reads the manifest from.
pub const MANIFEST_SECTION: &str = "cradle-manifest";

/// Copy a byte string into a fixed-size array at compile time (used by
/// [`manifest!`], which needs a sized static for `link_section`).
#[doc(hidden)]
pub const fn to_array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// Declare the plugin's manifest: its name, version, a one-line description and
/// the capability interfaces it needs (`log`, `proxmox`, `ssh`, `dns`, `lock`,
/// `checkpoint`, `terraform`, `http`). The WIT version the kit was generated
/// from is added as `wit` (the literal below is [`WIT_VERSION`]; a test keeps
/// them equal).
///
/// ```ignore
/// cradle_guest::manifest! {
///     name: "direct",
///     version: env!("CARGO_PKG_VERSION"),
///     description: "Clone and configure VMs through the Proxmox API",
///     needs: ["log", "proxmox", "lock"],
/// }
/// ```
#[macro_export]
macro_rules! manifest {
    (name: $name:expr, version: $version:expr, description: $desc:expr, needs: [$($need:expr),* $(,)?] $(,)?) => {
        const _CRADLE_MANIFEST_TEXT: &str = concat!(
            "name = \"", $name, "\"\n",
            "version = \"", $version, "\"\n",
            "description = \"", $desc, "\"\n",
            "needs = [", $("\"", $need, "\", ",)* "]\n",
            "wit = \"0.1.0\"\n",
        );
        #[allow(unsafe_code, reason = "link_section is an unsafe attribute")]
        #[used]
        #[unsafe(link_section = "cradle-manifest")]
        static _CRADLE_MANIFEST: [u8; _CRADLE_MANIFEST_TEXT.len()] =
            $crate::to_array(_CRADLE_MANIFEST_TEXT.as_bytes());
    };
}

#[cfg(test)]
mod tests {
    crate::manifest! { name: "t", version: "1", description: "d", needs: ["log"] }

    #[test]
    fn the_manifest_names_the_wit_version_the_kit_was_generated_from() {
        let line = format!("wit = \"{}\"\n", super::WIT_VERSION);
        assert!(_CRADLE_MANIFEST_TEXT.ends_with(&line), "{_CRADLE_MANIFEST_TEXT}");
        let wit = include_str!("../wit/types.wit");
        assert!(wit.starts_with(&format!("package cradle:host@{};", super::WIT_VERSION)), "wit/types.wit");
    }
}
