//! `[coordination]` in cradle.toml, as `super` describes it: the backend, the
//! etcd endpoints, credentials (secret references, never inline), prefix,
//! lease TTL, the records key and the TLS files.
//!
//! Contract: [`CoordinationConfig::validate`] names the key to change; no I/O
//! (the `cradle.toml` loader runs it, and the fuzz crate compiles this file as
//! it is).

use std::path::PathBuf;

use serde::Deserialize;

use crate::secrets::SecretRef;

/// Which store holds the locks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoordinationBackend {
    /// This control node's state directory (`FsLockStore`).
    #[default]
    File,
    /// An etcd v3 cluster.
    Etcd,
}

/// `[coordination]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinationConfig {
    /// `file` or `etcd`.
    #[serde(default)]
    pub backend: CoordinationBackend,
    /// etcd client URLs (`http://host:2379`).
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// The etcd user, if etcd has authentication enabled.
    #[serde(default)]
    pub user: Option<String>,
    /// The user's password, as a secret reference.
    #[serde(default)]
    pub password: Option<SecretRef>,
    /// The prefix of every key cradle writes (default `cradle/`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Seconds a lock outlives its holder's last keep-alive (default 15).
    #[serde(default)]
    pub lease_ttl_s: Option<u64>,
    /// The key that seals creation records' private host keys in etcd, as a
    /// secret reference (required with etcd; the same on every control node).
    #[serde(default)]
    pub records_key: Option<SecretRef>,
    /// The CA that signed etcd's certificate (PEM), for `https://` endpoints.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// This node's client certificate (PEM), when etcd asks for one.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The key of `cert_file` (PEM; owner-only).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

/// The key prefix when `prefix` is not set.
pub const DEFAULT_PREFIX: &str = "cradle/";
/// The lease TTL when `lease_ttl_s` is not set.
pub const DEFAULT_LEASE_TTL_S: u64 = 15;

impl CoordinationConfig {
    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or(DEFAULT_PREFIX)
    }

    /// The lease TTL in seconds.
    pub fn lease_ttl_s(&self) -> u64 {
        self.lease_ttl_s.unwrap_or(DEFAULT_LEASE_TTL_S)
    }

    /// What is wrong, naming the key to change.
    pub fn validate(&self) -> Result<(), String> {
        let etcd_keys = !self.endpoints.is_empty()
            || self.user.is_some()
            || self.password.is_some()
            || self.prefix.is_some()
            || self.lease_ttl_s.is_some()
            || self.records_key.is_some()
            || self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some();
        if self.backend == CoordinationBackend::File {
            if etcd_keys {
                return Err(
                    "coordination: endpoints, user, password, prefix, lease_ttl_s, records_key and the TLS files are etcd settings; \
                            add backend = \"etcd\" or remove them"
                        .into(),
                );
            }
            return Ok(());
        }
        if self.endpoints.is_empty() {
            return Err("coordination.endpoints: backend = \"etcd\" needs at least one endpoint, \
                        e.g. endpoints = [\"http://10.0.0.5:2379\"]"
                .into());
        }
        let tls = self.endpoints.iter().any(|e| e.starts_with("https://"));
        for e in &self.endpoints {
            let scheme = if tls { "https://" } else { "http://" };
            if !e.starts_with(scheme) || e.len() <= scheme.len() {
                return Err(format!(
                    "coordination.endpoints: `{e}`: every endpoint must be an {scheme} URL such as {scheme}10.0.0.5:2379 \
                     (one scheme for all of them)"
                ));
            }
        }
        let files = self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some();
        if tls && self.ca_file.is_none() {
            return Err("coordination.ca_file: https:// endpoints need the CA that signed etcd's certificate \
                        (ca_file = \"/etc/cradle/etcd-ca.pem\")"
                .into());
        }
        if !tls && files {
            return Err(
                "coordination: ca_file, cert_file and key_file are for https:// endpoints; the endpoints are http://"
                    .into(),
            );
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err("coordination: cert_file and key_file go together (this node's client certificate)".into());
        }
        match (&self.user, &self.password) {
            (Some(_), None) => return Err("coordination.password: a user needs a password (a secret reference)".into()),
            (None, Some(_)) => return Err("coordination.user: a password needs a user".into()),
            _ => {}
        }
        if self.records_key.is_none() {
            return Err("coordination.records_key: backend = \"etcd\" stores creation records (they hold guests' \
                        private host keys) sealed with this key; give a secret reference to 32 random bytes or more, \
                        the same on every control node, e.g. records_key = { file = \"/etc/cradle/records.key\" }"
                .into());
        }
        if !(2..=300).contains(&self.lease_ttl_s()) {
            return Err(format!("coordination.lease_ttl_s = {}: must be 2..=300 seconds", self.lease_ttl_s()));
        }
        let prefix = self.prefix();
        if prefix.is_empty() || prefix.chars().any(char::is_control) {
            return Err("coordination.prefix: must be non-empty printable text, e.g. \"cradle/\"".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml: &str) -> CoordinationConfig {
        toml::from_str(toml).expect("parse")
    }

    #[test]
    fn the_file_backend_is_the_default_and_refuses_etcd_keys() {
        let c = parse("");
        assert_eq!(c.backend, CoordinationBackend::File);
        assert!(c.validate().is_ok());
        let err = parse("endpoints = [\"http://127.0.0.1:2379\"]").validate().expect_err("etcd key").to_string();
        assert!(err.contains("backend = \"etcd\""), "{err}");
    }

    #[test]
    fn etcd_settings_are_checked_naming_the_key() {
        let cases = [
            ("backend = \"etcd\"", "coordination.endpoints"),
            ("backend = \"etcd\"\nendpoints = [\"https://e:2379\"]", "coordination.ca_file"),
            ("backend = \"etcd\"\nendpoints = [\"https://e:2379\", \"http://f:2379\"]", "one scheme for all"),
            ("backend = \"etcd\"\nendpoints = [\"http://e:2379\"]\nca_file = \"ca.pem\"", "are for https://"),
            (
                "backend = \"etcd\"\nendpoints = [\"https://e:2379\"]\nca_file = \"ca.pem\"\ncert_file = \"c.pem\"",
                "cert_file and key_file go together",
            ),
            ("backend = \"etcd\"\nendpoints = [\"e:2379\"]", "must be an http:// URL"),
            ("backend = \"etcd\"\nendpoints = [\"http://e:2379\"]\nuser = \"u\"", "coordination.password"),
            ("backend = \"etcd\"\nendpoints = [\"http://e:2379\"]", "coordination.records_key"),
            (
                "backend = \"etcd\"\nendpoints = [\"http://e:2379\"]\nrecords_key = { env = \"K\" }\nlease_ttl_s = 1",
                "2..=300",
            ),
            (
                "backend = \"etcd\"\nendpoints = [\"http://e:2379\"]\nrecords_key = { env = \"K\" }\nprefix = \"\"",
                "coordination.prefix",
            ),
        ];
        for (toml, want) in cases {
            let err = parse(toml).validate().expect_err(toml);
            assert!(err.contains(want), "{toml}: {err}");
        }
        let ok = parse(
            "backend = \"etcd\"\nendpoints = [\"http://e:2379\"]\nuser = \"u\"\npassword = { env = \"P\" }\nrecords_key = { env = \"K\" }",
        );
        assert!(ok.validate().is_ok());
        assert_eq!((ok.prefix(), ok.lease_ttl_s()), ("cradle/", 15));
    }
}
