//! The `proxmox` capability: a Proxmox VE API client with pinned TLS, typed errors
//! and retries only where a call is idempotent.
//!
//! [`client`] speaks the API (one async method per `wit/proxmox.wit` function),
//! [`tls`] decides whom to trust, [`errors`] maps every failure onto the WIT error
//! cases. [`scope`] is what the `proxmox` grant allows and how a call is
//! compared with it; [`config_scope`] describes a `set-config`'s values for
//! that comparison. The host adapter ([`host`]) has every call checked and
//! journaled before any method here is called; `rhai.rs` is the scripts'
//! `proxmox` module, through the same adapter.

pub mod client;
pub mod config_scope;
#[cfg(test)]
mod digest_tests;
pub mod errors;
pub mod held;
#[cfg(test)]
mod held_tests;
pub mod tls;
// The WIT adapter (the guard: grant checks, journaling) lives beside the client.
pub mod host;
mod host_lxc;
pub(crate) mod rhai;
pub mod role;
pub mod scope;
#[cfg(test)]
mod wit_conformance_tests;
