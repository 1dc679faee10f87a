//! The `proxmox` capability: a Proxmox VE API client with pinned TLS, typed errors
//! and retries only where a call is idempotent.
//!
//! [`client`] speaks the API (one async method per `wit/proxmox.wit` function),
//! [`tls`] decides whom to trust, [`errors`] maps every failure onto the WIT error
//! cases. Grant checks and journaling happen in the host adapter, before any
//! method here is called.

pub mod client;
pub mod config_scope;
pub mod errors;
pub mod tls;
// The WIT adapter (grant checks, journaling) lives beside the client.
pub mod host;
pub(crate) mod rhai;
