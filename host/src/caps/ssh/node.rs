//! `node_ssh` entries of `[clusters.NAME]`: how to reach one Proxmox VE node
//! over SSH, written `user@host[:port]`.
//!
//! Contract: [`NodeSsh::parse`] accepts `user@host[:port]` (user defaults to
//! root, port to 22) and refuses anything else with a [`NodeSshError`] quoting
//! the entry; no I/O (the `cradle.toml` loader checks every entry with it).

/// How to reach one node over SSH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSsh {
    /// Address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Login user.
    pub user: String,
    /// The node's SSH host key, pinned before the first connection, when known.
    pub host_key: Option<String>,
}

/// A `node_ssh` entry that is not `user@host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeSshError {
    /// The port is not a number.
    #[error("`{entry}`: port `{port}` is not a number")]
    Port {
        /// The entry.
        entry: String,
        /// Its port part.
        port: String,
    },
    /// The user or the host is empty.
    #[error("`{0}` must look like root@pve1.lab or root@10.0.0.11:22")]
    Shape(String),
}

impl NodeSsh {
    /// Parse `user@host[:port]` (user defaults to root, port to 22).
    pub fn parse(s: &str) -> Result<NodeSsh, NodeSshError> {
        let (user, rest) = s.split_once('@').unwrap_or(("root", s));
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => {
                (h, p.parse::<u16>().map_err(|_| NodeSshError::Port { entry: s.to_string(), port: p.to_string() })?)
            }
            _ => (rest, 22),
        };
        if user.is_empty() || host.is_empty() {
            return Err(NodeSshError::Shape(s.to_string()));
        }
        Ok(NodeSsh { host: host.to_string(), port, user: user.to_string(), host_key: None })
    }
}
