//! [`SshClient::trust_by_fingerprint`]: pin the host key a server presents
//! only when its SHA-256 fingerprint is one learned over a trusted channel
//! (a container's create task prints the fingerprints of the host keys PVE
//! generated for it; the API is TLS-pinned and token-authenticated).
//!
//! The key is read with OpenSSH's `ssh-keyscan` (no login, no trust
//! decision by it); cradle compares the fingerprint itself. A different key
//! is a `conflict` naming both fingerprints and nothing is pinned; a server
//! that does not answer in time is `transient`.

use std::time::Duration;

use tokio::process::Command;

use super::known_hosts::fingerprint;
use super::{SshClient, Target, check_target};
use crate::contract::{CapError, ErrorKind};

/// `SHA256:abc` or `abc` as `SHA256:abc`.
fn normalize(fp: &str) -> String {
    let fp = fp.trim();
    if fp.starts_with("SHA256:") { fp.to_string() } else { format!("SHA256:{fp}") }
}

/// The `type base64` keys of `ssh-keyscan` output (comments and the host field dropped).
fn scanned_keys(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (_host, kind, blob) = (w.next()?, w.next()?, w.next()?);
            Some(format!("{kind} {blob}"))
        })
        .collect()
}

impl SshClient {
    /// Pin the `kind` key (`ssh-ed25519`) of `host:port` if its fingerprint is
    /// `expected`; returns the pinned key. See the module docs.
    pub async fn trust_by_fingerprint(
        &self,
        host: &str,
        port: u16,
        kind: &str,
        expected: &str,
        timeout: Duration,
    ) -> Result<String, CapError> {
        check_target(&Target { host: host.to_string(), port, user: "nobody".into() })?;
        let short = kind.strip_prefix("ssh-").unwrap_or(kind);
        let out = Command::new("ssh-keyscan")
            .args(["-T", &timeout.as_secs().max(1).to_string(), "-t", short, "-p", &port.to_string(), "--", host])
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| {
                CapError::failed(format!(
                    "ssh {host}:{port}: cannot run `ssh-keyscan` ({e}); install the OpenSSH client (Debian: \
                     openssh-client)"
                ))
            })?;
        let keys = scanned_keys(&String::from_utf8_lossy(&out.stdout));
        let Some(key) = keys.into_iter().find(|k| k.starts_with(&format!("{kind} "))) else {
            return Err(CapError::new(
                ErrorKind::Transient,
                format!("ssh {host}:{port}: no {kind} host key was read (the server is not up yet, or offers none)"),
            ));
        };
        let presented = fingerprint(&key)?;
        let expected = normalize(expected);
        if presented != expected {
            return Err(CapError::new(
                ErrorKind::Conflict,
                format!(
                    "ssh {host}:{port}: the {kind} host key presented has fingerprint {presented}, not {expected} \
                     (the one Proxmox printed when it created the guest); it was not trusted: check what answers \
                     at {host}:{port}"
                ),
            ));
        }
        // A small file write; this runs on the blocking thread of the host call.
        self.trust_host_key(host, port, &key)?;
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyscan_output_gives_type_and_key_and_fingerprints_are_normalized() {
        let out = "# 127.0.0.1:2222 SSH-2.0-OpenSSH_9.2\n[127.0.0.1]:2222 ssh-ed25519 AAAAC3Nz\n";
        assert_eq!(scanned_keys(out), ["ssh-ed25519 AAAAC3Nz"]);
        assert_eq!(normalize("abc"), "SHA256:abc");
        assert_eq!(normalize(" SHA256:abc "), "SHA256:abc");
    }
}
