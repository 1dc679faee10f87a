//! The seam between [`SshClient`](super::SshClient) and its two transports:
//! OpenSSH with its masters (`mux`, `mux_client`) and the built-in client
//! (`native`). A leaf of the ssh module's files: the client picks a
//! [`Transport`] and hands a transport what it checks against ([`Trust`]: the
//! settings, the pins, and the errors both transports report the same way);
//! no transport names the client.
//!
//! Contract of [`Transport`]: each transport names its shared connections by
//! its own keys (the pin-keyed names `mux::socket_path` computes, under its
//! own [`Transport::key_dir`]), so an OpenSSH master and a built-in connection
//! are never taken for one another; [`Transport::stop`] ends the ones under
//! the keys given (the end of their last client, a pin change).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::known_hosts::{KnownHosts, host_entry};
use super::{SshSettings, Target};
use crate::contract::{CapError, ErrorKind};

/// A way of reaching targets with shared connections.
pub(crate) trait Transport: Sync {
    /// Where this transport's connection keys are named for `settings`;
    /// `None` when it shares no connection (every call connects anew).
    fn key_dir<'a>(&self, settings: &'a SshSettings) -> Option<&'a Path>;

    /// Whether a shared connection is known to live under `key`.
    fn connected(&self, key: &Path) -> bool;

    /// Ends the shared connections under `keys`. Blocking.
    fn stop(&self, keys: &[PathBuf]);
}

/// What a connection is checked and reported against.
pub(crate) struct Trust<'a> {
    /// How cradle connects.
    pub settings: &'a SshSettings,
    /// cradle's known_hosts.
    pub known_hosts: &'a KnownHosts,
}

impl Trust<'_> {
    /// The host key `t` offered (`offered`, a fingerprint) is not the one pinned.
    pub(crate) fn changed_key_error(&self, t: &Target, offered: &str) -> CapError {
        let kh = self.settings.known_hosts.display();
        let pinned = self
            .known_hosts
            .pinned(&t.host, t.port)
            .map(|keys| keys.iter().map(|k| k.fingerprint()).collect::<Vec<_>>().join(", "))
            .unwrap_or_else(|e| format!("unreadable ({e})"));
        let entry = host_entry(&t.host, t.port);
        CapError::new(
            ErrorKind::Conflict,
            format!(
                "ssh {t}: the host key changed: it offered {offered} but {kh} pins {pinned} for `{entry}`; \
                 cradle never replaces a pinned key and made no connection. If the machine was re-created on \
                 purpose, forget the old key (the remove workflow's forget-host-key, or `ssh-keygen -R '{entry}' -f {kh}`) \
                 and pin the new one; otherwise investigate a possible man-in-the-middle"
            ),
        )
    }

    /// No pinned key of the kind `t` offered (`said`: what was seen).
    pub(crate) fn unknown_key_error(&self, t: &Target, said: &str) -> CapError {
        CapError::failed(format!(
            "ssh {t}: no host key of the kind the server offered is pinned for `{}` in {}; cradle never \
             trusts on first use: pin the key generated for this guest (trust-host-key) before connecting ({said})",
            host_entry(&t.host, t.port),
            self.settings.known_hosts.display()
        ))
    }

    /// `t` refused the login (`said`: what was seen).
    pub(crate) fn auth_error(&self, t: &Target, said: &str) -> CapError {
        let key = match &self.settings.identity {
            Some(p) => format!("the key {}", p.display()),
            None => "the default keys (no identity configured)".to_string(),
        };
        CapError::failed(format!(
            "ssh {t}: authentication failed for user `{}` with {key}; check that its public half is in \
             ~{}/.ssh/authorized_keys on {} (for a guest: the user-data ssh_authorized_keys) ({said})",
            t.user, t.user, t.host
        ))
    }
}

/// Refuses a private key that is missing or that group or others can read
/// (as OpenSSH refuses it), with the `chmod 600` to run.
pub(crate) fn check_identity(id: &Path) -> Result<(), CapError> {
    let meta = std::fs::metadata(id)
        .map_err(|e| CapError::failed(format!("ssh: cannot read the identity file {}: {e}", id.display())))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CapError::failed(format!(
            "ssh: identity file {} is accessible by group or others (mode {mode:03o}); run `chmod 600 {}`",
            id.display(),
            id.display()
        )));
    }
    Ok(())
}

/// What a command reads on its standard input.
pub(crate) enum Input<'a> {
    /// Nothing: stdin is closed.
    Closed,
    /// These bytes, written by cradle.
    Bytes(&'a [u8]),
    /// A local file `ssh` reads itself.
    File(std::fs::File),
}

impl<'a> From<Option<&'a [u8]>> for Input<'a> {
    fn from(v: Option<&'a [u8]>) -> Self {
        v.map_or(Input::Closed, Input::Bytes)
    }
}
