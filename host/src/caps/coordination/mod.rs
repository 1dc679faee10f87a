//! `[coordination]` in cradle.toml: where workflow locks and the records a
//! rerun depends on (finalization checkpoints, creation records and the VMID
//! reservations they make) live.
//!
//! `backend = "file"` (the default) keeps them in this control node's state
//! directory; `backend = "etcd"` in an etcd v3 cluster shared by several
//! control nodes ([`etcd::EtcdConn`], `lock::EtcdLockStore`), so a rerun on
//! another node sees them:
//!
//! ```toml
//! [coordination]
//! backend = "etcd"
//! endpoints = ["http://10.0.0.5:2379", "http://10.0.0.6:2379"]
//! user = "cradle"                       # optional; then password is required
//! password = { env = "ETCD_PASSWORD" }  # a secret reference, never inline
//! prefix = "cradle/"                    # every key cradle writes starts with it
//! lease_ttl_s = 15                      # a crashed holder's lock frees itself after this
//! records_key = { file = "/etc/cradle/records.key" }  # seals guests' private host keys in etcd
//! # https:// endpoints: the CA of etcd's certificate, and this node's client certificate
//! # ca_file = "/etc/cradle/etcd-ca.pem"; cert_file = "..."; key_file = "..."
//! ```
//!
//! Validation names the key to change: etcd keys without `backend = "etcd"`,
//! no endpoints, endpoints mixing `http://` and `https://`, `https://`
//! without `ca_file` (never the system roots: etcd runs its own CA), TLS
//! files with `http://`, a certificate without its key, a user without a
//! password or the reverse, no `records_key`, a TTL outside 2..=300 s, an
//! empty prefix. Relative file paths are relative to cradle.toml.

mod config;
pub mod etcd;
pub mod records;

pub use config::{CoordinationBackend, CoordinationConfig, DEFAULT_LEASE_TTL_S, DEFAULT_PREFIX};
