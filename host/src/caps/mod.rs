//! Host capabilities: one folder per capability, one line per capability in
//! the [`registry`], and the one check every call goes through ([`policy`]).
//!
//! A capability never trusts its caller: plugins and workflows reach the same
//! functions, and every call is checked by [`policy::check`] (through
//! [`context::CapCtx::guard`]) and journaled before it does anything. The
//! exception is `log`, which nothing can refuse: its events go straight to
//! [`context::CapCtx::log_event`], charged to the call's budget and written to
//! the journal as log lines, not as capability calls.
//!
//! Each folder has one shape: the provider (the real work, typed Rust, in
//! `mod.rs`, for `proxmox` and `ssh` in `client.rs`: [`proxmox::client`],
//! [`ssh::SshClient`], [`dns::Rfc2136`], [`http::Endpoints`],
//! [`lock::LockStore`], [`checkpoint::CheckpointStore`],
//! [`context::CapCtx::log_event`]; [`creation`]'s record store in `mod.rs`,
//! its typed service in `service.rs` and `snippets.rs`), `scope.rs` what
//! the operator may grant and what of a call the grant looks at (the grant
//! section type, the call type, the capability's own rules, with a test per
//! denied case), `host.rs` the WIT adapter (builds the [`Call`] and runs the
//! work through [`context::CapCtx::guard`]), and `rhai.rs` the module workflow
//! scripts import, calling the same adapter. Not every folder has every file:
//! [`http`] and [`terraform`] have no Rhai module, [`terraform`] has an
//! adapter and no provider yet, and [`creation`] is no capability (no
//! `scope.rs`, no `host.rs`, no WIT interface, no grant): its Rhai module
//! `cloudinit` works through the `checkpoint`, `proxmox` and `ssh` checks.
//!
//! The [`registry`] generates [`Capability`], [`Grants`] and [`Call`] from
//! its lines; [`policy`] holds the shared rules; [`script`] the script-only
//! modules; [`script_glue`] and [`script_run`] the Rhai glue every script
//! module uses (leaves: they import no capability), and each capability's
//! `script_args.rs` reads script values into its typed requests;
//! [`context`] carries the services, [`budget`] the plugin call's budget,
//! [`run`] a run's data.

pub mod budget;
pub mod checkpoint;
pub mod context;
pub mod coordination;
pub mod creation;
pub mod dhcp;
pub mod dns;
pub mod http;
pub mod image;
pub mod lock;
pub mod log;
pub mod maintenance;
pub mod netbox;
pub mod policy;
pub mod post;
pub mod proxmox;
pub mod registry;
pub mod run;
pub mod script;
pub mod script_glue;
pub mod script_run;
pub mod ssh;
pub mod terraform;

use std::fmt;

pub use registry::{Call, Capability, Grants};

/// The WIT package version this host speaks. A plugin built against another
/// version is refused before instantiation.
pub const WIT_PACKAGE: &str = "cradle:host";
/// See [`WIT_PACKAGE`].
pub const WIT_VERSION: &str = "0.1.0";

impl Capability {
    /// Parse an interface name (`proxmox`).
    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The fully qualified import name (`cradle:host/proxmox@0.1.0`).
    pub fn interface(self) -> String {
        format!("{WIT_PACKAGE}/{}@{WIT_VERSION}", self.name())
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Grants {
    /// The granted capabilities, for `cradle plugins inspect`.
    pub fn granted(&self) -> Vec<Capability> {
        Capability::ALL.into_iter().filter(|c| self.allows(*c)).collect()
    }
}
