//! Guest host-key generation on the control node (the Trust rule: the guest's
//! SSH host key is made here, pre-seeded through user-data `ssh_keys` and pinned
//! before the first connection).
//!
//! [`generate_host_key`] runs `ssh-keygen -q -t ed25519 -N '' -C COMMENT -f KEY`
//! inside a fresh owner-only (0700) temporary directory, reads both halves and
//! removes the directory on every path. The private half becomes a
//! [`Secret`] (registered with the redactor, printed as `[redacted]`); errors
//! name the step and the temporary directory, never key material.

use std::fs::{self, DirBuilder};
use std::io::{self, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::known_hosts::PublicKey;
use crate::caps::context::CapError;
use crate::secrets::Secret;

/// How long `ssh-keygen` may run.
const KEYGEN_TIMEOUT: Duration = Duration::from_secs(30);

/// A host key made for a guest.
#[derive(Debug, Clone)]
pub struct GeneratedHostKey {
    /// The private key in OpenSSH format (for user-data `ssh_keys`).
    pub private_openssh: Secret,
    /// The public key line (`ssh-ed25519 AAAA… comment`).
    pub public: String,
}

impl GeneratedHostKey {
    /// The public key's `SHA256:…` fingerprint.
    pub fn fingerprint(&self) -> Result<String, CapError> {
        super::fingerprint(&self.public)
    }
}

/// Generates an ed25519 host key with `comment` (e.g. the VM's canonical name).
pub async fn generate_host_key(comment: &str) -> Result<GeneratedHostKey, CapError> {
    if comment.chars().any(char::is_control) || comment.len() > 200 {
        return Err(CapError::invalid("ssh: a host key comment must be one line of at most 200 characters"));
    }
    let dir = PrivateDir::create()?;
    let key = dir.0.join("host_key");
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(&key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| {
        CapError::failed(format!("ssh: cannot start `ssh-keygen` ({e}); install the OpenSSH client (openssh-client)"))
    })?;
    let out = tokio::time::timeout(KEYGEN_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| CapError::failed("ssh: `ssh-keygen` did not finish within 30 s"))?
        .map_err(|e| CapError::failed(format!("ssh: cannot wait for `ssh-keygen`: {e}")))?;
    if !out.status.success() {
        return Err(CapError::failed(format!(
            "ssh: `ssh-keygen -t ed25519` failed in {} ({}): {}",
            dir.0.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let private = read_small(&key)?;
    let public = read_small(&key.with_extension("pub"))?.trim().to_string();
    PublicKey::parse(&public)?;
    Ok(GeneratedHostKey { private_openssh: Secret::new(private), public })
}

fn read_small(path: &Path) -> Result<String, CapError> {
    let mut s = String::new();
    fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut s))
        .map_err(|e| CapError::failed(format!("ssh: cannot read the generated key {}: {e}", path.display())))?;
    Ok(s)
}

/// A 0700 directory under the system temp dir, removed when dropped.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create() -> Result<PrivateDir, CapError> {
        let base = std::env::temp_dir();
        let mut last = None;
        for _ in 0..8 {
            let path = base.join(format!("cradle-keygen-{}-{}", std::process::id(), random_hex()));
            // Not recursive: fails if the name exists, so nobody else's directory is reused.
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(PrivateDir(path)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => {
                    return Err(CapError::failed(format!(
                        "ssh: cannot create a private temporary directory in {}: {e}; check $TMPDIR",
                        base.display()
                    )));
                }
            }
        }
        Err(CapError::failed(format!(
            "ssh: cannot create a private temporary directory in {}: {}",
            base.display(),
            last.map(|e| e.to_string()).unwrap_or_default()
        )))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.0) {
            tracing::warn!(dir = %self.0.display(), error = %e, "could not remove the host-key temporary directory");
        }
    }
}

/// 16 hex digits from the kernel's random source (time and a counter if it is unreadable).
pub(crate) fn random_hex() -> String {
    let mut b = [0u8; 8];
    if fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_err() {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        b = ((nanos as u64) ^ n.rotate_left(32)).to_be_bytes();
    }
    hex::encode(b)
}
