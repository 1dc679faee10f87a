//! cradle: provision Proxmox VE virtual machines through sandboxed WebAssembly
//! backends sequenced by operator-editable Rhai workflows.
//!
//! The binary (`src/main.rs`) is a thin shell over [`cli`]. Each concern lives in
//! one module: [`config`] (cradle.toml), [`contract`] (the WIT bindings and the
//! capability error, shared by the plugin host and the capabilities), [`plugin`]
//! (engine, cache, admission, limits), [`caps`] (one module per host
//! capability), [`workflow`] (Rhai), [`cluster`] (how an environment reaches its
//! cluster), [`inventory`] (Ansible inventories), [`cloudinit`] (the NoCloud
//! snippets), [`project`] and [`provision`] (runs),
//! [`journal`] (run records), [`reload`] (hot reload), [`state`] (owner-only files),
//! [`secrets`] (secret references), [`text`] (escaping untrusted text for
//! terminals), [`builtin`] (the workflows and plugins
//! shipped inside the binary), [`kit`] (writing and building plugin crates).

pub mod builtin;
pub mod caps;
pub mod cli;
pub mod cloudinit;
pub mod cluster;
pub mod config;
pub mod contract;
pub mod inventory;
pub mod journal;
pub mod kit;
pub mod maintain;
pub mod plugin;
pub mod project;
pub mod provision;
pub mod reload;
pub mod secrets;
pub mod serve;
pub mod state;
pub mod text;
pub mod workflow;

#[cfg(test)]
mod layers_tests;
