//! In-process stand-ins for the services cradle's provisioning pipeline talks to
//! besides Proxmox VE: UniFi Network ([`unifi`], DHCP reservations), Technitium DNS
//! ([`technitium`], A/PTR records) and Semaphore UI ([`semaphore`], Ansible tasks).
//!
//! Contract: each stand-in serves real HTTP/1.1 on a loopback address (TLS optional:
//! a self-signed certificate whose CA the handle's `ca_pem()` returns), follows the upstream wire
//! facts collected in `docs/STAND-INS.md` (envelopes, status codes, error texts), and
//! is started from Rust with `start(config).await` → a handle exposing `url()`, the
//! credentials, and read accessors over its state for tests; dropping the handle stops
//! the server. Credentials are given by the caller or generated, never logged (their
//! `Debug` is redacted, see [`Secret`]) and written only on request, to 0600 files.
//! Events that tests need to order across services (a UniFi reservation, a DHCP
//! lease) carry a [`Stamp`] from one process-wide monotonic sequence. Failure modes:
//! [`ServiceError`] at start (bad config, bind, TLS) or when writing credential files;
//! API-level errors are answered to clients as the real service would, never raised.

mod http;
pub mod semaphore;
pub mod technitium;
pub mod unifi;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use http::Listen;

/// Why a stand-in could not start or write its credentials.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The configuration is unusable; the message names the field.
    #[error("invalid {service} stand-in configuration: {reason}")]
    Config {
        /// Which stand-in.
        service: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source} (is the address in use?)")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The self-signed certificate could not be made.
    #[error("TLS setup failed: {0}")]
    Tls(String),
    /// A credentials file could not be written.
    #[error(transparent)]
    Files(#[from] crate::SimError),
}

/// A secret (password, API key, token). Its `Debug` output is redacted so configs and
/// handles can be logged; read it with [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// A random secret: `bytes` random bytes as lower-case hex.
    pub fn generate(bytes: usize) -> Self {
        Secret(random_hex(bytes))
    }

    /// The secret value (do not log it).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Constant-time comparison with a candidate value.
    pub fn matches(&self, candidate: &str) -> bool {
        eq_ct(self.0.as_bytes(), candidate.as_bytes())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret::new(s)
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

/// When something happened: a process-wide monotonic sequence number (comparable
/// across all stand-ins and the simulated cluster's DHCP leases) and the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp {
    /// Strictly increasing over the process: a smaller `seq` happened first.
    pub seq: u64,
    /// Milliseconds since the Unix epoch (informational; order by `seq`).
    pub unix_ms: u64,
}

impl Stamp {
    /// The next stamp.
    pub fn now() -> Stamp {
        static SEQ: AtomicU64 = AtomicU64::new(1);
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Stamp { seq, unix_ms }
    }

    /// Whether `self` happened before `other`.
    pub fn before(&self, other: &Stamp) -> bool {
        self.seq < other.seq
    }
}

impl PartialOrd for Stamp {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Stamp {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.seq.cmp(&other.seq)
    }
}

/// `n` random bytes as lower-case hex.
pub(crate) fn random_hex(n: usize) -> String {
    let mut out = String::with_capacity(n * 2);
    while out.len() < n * 2 {
        let chunk: [u8; 16] = crate::model::ids::random_bytes();
        out.push_str(&hex::encode(chunk));
    }
    out.truncate(n * 2);
    out
}

/// Constant-time equality of two byte strings (length leaks, content does not).
pub(crate) fn eq_ct(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() || a.is_empty() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Write `files` (name, content) into `dir` (created 0700), each 0600; returns the
/// paths in the same order.
pub(crate) fn write_secret_files(dir: &Path, files: &[(&str, &str)]) -> Result<Vec<PathBuf>, ServiceError> {
    crate::fsutil::ensure_dir(dir)?;
    let mut out = Vec::new();
    for (name, content) in files {
        let path = dir.join(name);
        crate::fsutil::write_private(&path, content.as_bytes())?;
        out.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_and_stamps_strictly_increase() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert!(s.matches("hunter2") && !s.matches("hunter3") && !s.matches(""));
        assert_eq!(Secret::generate(16).expose().len(), 32);
        let a = Stamp::now();
        let b = Stamp::now();
        assert!(a.before(&b) && a < b);
    }

    #[test]
    fn secret_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let paths = write_secret_files(&dir.path().join("creds"), &[("a.password", "x")]).unwrap();
        assert_eq!(std::fs::read_to_string(&paths[0]).unwrap(), "x");
        assert_eq!(std::fs::metadata(&paths[0]).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
