//! Host capabilities: one folder per WIT interface, plus the two places every
//! call goes through: [`grants`] (what the operator allowed, parsed once from
//! cradle.toml) and [`policy`] (the single permission check, Zellij-style).
//!
//! A capability never trusts its caller: plugins and workflows reach the same
//! functions, and every call is checked and journaled before it does anything.
//!
//! Each folder has one shape: `mod.rs` is the provider (the real work, typed
//! Rust: [`proxmox::client`], [`ssh::SshClient`], [`dns::Rfc2136`],
//! [`http::Endpoints`], [`lock::LockStore`], [`checkpoint::CheckpointStore`],
//! [`creation`]'s records), `host.rs` the WIT adapter (builds the policy
//! [`policy::Call`] and runs the work through [`context::CapCtx::guard`]), and
//! `rhai.rs` the module workflow scripts import, calling the same adapter.
//! [`script`] registers the Rhai modules and holds their shared glue;
//! [`terraform`] has an adapter and no provider yet. [`context`] carries the
//! services, [`budget`] the plugin call's budget, [`run`] a run's data.

pub mod budget;
pub mod checkpoint;
pub mod context;
pub mod creation;
pub mod dns;
pub mod grants;
pub mod http;
pub mod lock;
pub mod log;
pub mod policy;
pub mod proxmox;
pub mod run;
pub mod script;
pub mod ssh;
pub mod terraform;

use std::fmt;

/// The WIT package version this host speaks. A plugin built against another
/// version is refused before instantiation.
pub const WIT_PACKAGE: &str = "cradle:host";
/// See [`WIT_PACKAGE`].
pub const WIT_VERSION: &str = "0.1.0";

/// One host capability (a WIT interface a plugin may import).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// Structured events and progress; always granted.
    Log,
    /// The Proxmox VE API.
    Proxmox,
    /// SSH to guests and nodes.
    Ssh,
    /// DNS records.
    Dns,
    /// Workflow locks.
    Lock,
    /// Finalization checkpoints.
    Checkpoint,
    /// Terraform in host-owned module directories.
    Terraform,
    /// Outbound HTTP to named endpoints.
    Http,
}

impl Capability {
    /// Every capability, in WIT order.
    pub const ALL: [Capability; 8] = [
        Capability::Log,
        Capability::Proxmox,
        Capability::Ssh,
        Capability::Dns,
        Capability::Lock,
        Capability::Checkpoint,
        Capability::Terraform,
        Capability::Http,
    ];

    /// The interface name inside the package (`proxmox`).
    pub fn name(self) -> &'static str {
        match self {
            Capability::Log => "log",
            Capability::Proxmox => "proxmox",
            Capability::Ssh => "ssh",
            Capability::Dns => "dns",
            Capability::Lock => "lock",
            Capability::Checkpoint => "checkpoint",
            Capability::Terraform => "terraform",
            Capability::Http => "http",
        }
    }

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
