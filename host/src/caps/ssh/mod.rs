//! The `ssh` capability's provider: cradle's SSH client, its own known_hosts,
//! and guest host-key generation. It drives the operator's OpenSSH client
//! (`ssh`) instead of an SSH library: operators already trust OpenSSH, and it
//! checks host keys exactly as they expect. Guest host keys are generated
//! in-process (`keys.rs`), not by `ssh-keygen`. The in-process client of
//! `native/` keeps the same contract (below) without an `ssh` process per
//! connection; it serves by default (`[ssh] client = "auto"`) wherever it can
//! use cradle's login key, and OpenSSH serves the rest (`choice.rs`, which
//! says once why) and whoever sets `client = "openssh"`.
//!
//! Contract:
//! - Every connection runs `ssh -F /dev/null -T -o BatchMode=yes
//!   -o StrictHostKeyChecking=yes -o UserKnownHostsFile=<cradle's known_hosts>
//!   -o GlobalKnownHostsFile=/dev/null -o UpdateHostKeys=no -o CheckHostIP=no
//!   -o IdentitiesOnly=yes -o ConnectTimeout=N -o ServerAliveInterval=15
//!   -o ServerAliveCountMax=3 -o ControlMaster=auto -o ControlPath=<socket>
//!   -o ControlPersist=15 [-i <identity>] -p PORT user@host -- <command>`
//!   (`SshClient::args`).
//!   `-F /dev/null` means neither `~/.ssh/config` nor `/etc/ssh/ssh_config` can
//!   change the behaviour (no proxy jumps, no aliases, no relaxed host-key
//!   checks): what cradle runs is what this file says. Without an identity the
//!   OpenSSH defaults apply (`~/.ssh/id_*` and the agent).
//! - Calls to one target share one master connection (one key exchange) when a
//!   control directory is set, which cradle does by default (`[ssh] multiplex`).
//!   The master is the connection that checked the host key, so its socket is
//!   keyed on the pinned key: a changed pin never reaches an old master, and a
//!   host with no pin never gets one. Calls after the first run as sessions on
//!   the master through its socket, without an `ssh` process (`mux_client`, over
//!   the `openssh-mux-client` crate).
//!   Without a control directory `ControlMaster=no -o ControlPath=none`. See
//!   `mux` for the lifecycle.
//! - [`SshClient::wait_for`] probes the port with TCP connects between `ssh`
//!   attempts, so waiting for a booting guest costs no process per poll.
//! - Host keys are pinned before the first connection ([`KnownHosts::trust`]) and
//!   never learned from the network: an unknown host is refused, a changed key is
//!   a `conflict` naming both fingerprints, and nothing is ever replaced silently.
//! - Nothing secret is passed on a command line; content goes through stdin. The
//!   private half of a generated host key is a [`crate::secrets::Secret`].
//! - [`SshClient::exec`]: a remote non-zero exit is a normal [`ExecOutput`]. When
//!   `ssh` itself fails (exit 255 with one of its own diagnostics) the error is
//!   `transient` (refused, reset, timed out, closed), `conflict` (host key
//!   changed), or `failed` (authentication, unknown host key, bad identity,
//!   unresolvable name). A remote command that exits 255 without an ssh
//!   diagnostic on stderr is reported as its output. A call that outlives its
//!   timeout is killed and is `transient` (the command may have partly run).
//! - Each output stream is capped at [`MAX_STREAM`] bytes; a cut stream ends with
//!   a note saying how much was discarded.
//!
//! Failure modes are [`CapError`]s whose messages name the user, host, port,
//! command (shortened, secrets redacted) and what to inspect; nothing panics.

pub mod choice;
mod client;
mod host;
mod keys;
mod keyscan;
mod known_hosts;
mod mux;
mod mux_client;
mod native;
mod node;
pub mod playbook;
pub(crate) mod rhai;
pub mod scope;
pub(crate) mod script_args;
mod stream;
mod transport;
mod upload;

#[cfg(test)]
mod host_tests;
#[cfg(test)]
mod native_tests;
#[cfg(test)]
mod playbook_tests;
#[cfg(test)]
mod sshd_fixture;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use client::SshClient;
pub use keys::{GeneratedHostKey, generate_host_key};
pub use known_hosts::{KnownHosts, fingerprint};
pub use mux::{CONTROL_PERSIST_S, control_dir};
pub use node::{NodeSsh, NodeSshError};

use crate::contract::CapError;

/// Largest number of bytes kept from each of stdout and stderr.
pub const MAX_STREAM: usize = 1024 * 1024;

/// How cradle connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshSettings {
    /// cradle's own known_hosts (in the state directory, 0600).
    pub known_hosts: PathBuf,
    /// The private key to log in with (must be 0600); `None` uses OpenSSH's defaults.
    pub identity: Option<PathBuf>,
    /// TCP connect timeout (`ConnectTimeout`, whole seconds, at least 1).
    pub connect_timeout: Duration,
    /// Where to keep multiplexing sockets (`ControlMaster=auto`,
    /// `ControlPersist` [`CONTROL_PERSIST_S`]); `None` opens one connection per
    /// call. Must be an owner-only directory of at most `mux::MAX_DIR_LEN` (65)
    /// bytes ([`control_dir`] makes one under the state directory). Only for
    /// [`ClientKind::OpenSsh`].
    pub control_dir: Option<PathBuf>,
    /// Which SSH client speaks to nodes and guests.
    pub client: ClientKind,
}

/// Which SSH client cradle uses (`[ssh] client`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientKind {
    /// The operator's OpenSSH `ssh`, with masters when `control_dir` is set.
    OpenSsh,
    /// The in-process client (`native`).
    Builtin {
        /// One connection per target and pin in this process, else one per call.
        share: bool,
        /// The operator's agent socket (`SSH_AUTH_SOCK`), used when no
        /// identity is configured.
        agent: Option<PathBuf>,
    },
}

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Login user.
    pub user: String,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{} port {}", self.user, self.host, self.port)
    }
}

/// Where an upload must land on the remote side: the granted directory the
/// path is in, and the config key that grants it (for the denial message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confine {
    /// The granted directory, as written in the grant.
    pub dir: String,
    /// The config key (`plugins.direct.grants.ssh.upload_dirs`).
    pub key: String,
}

/// The outcome of a remote command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// The exit status; `None` when `ssh` was killed by a signal.
    pub exit_code: Option<i32>,
    /// Standard output (capped at [`MAX_STREAM`]).
    pub stdout: Vec<u8>,
    /// Standard error (capped at [`MAX_STREAM`]).
    pub stderr: Vec<u8>,
}

/// Checks a host name or address: no option-like leading `-`, no whitespace,
/// control characters or the characters known_hosts and `user@host` give meaning to.
pub(crate) fn check_host(host: &str) -> Result<(), CapError> {
    let bad = host.is_empty()
        || host.starts_with('-')
        || host.len() > 253
        || host.chars().any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_' | '%')));
    if bad {
        return Err(CapError::invalid(format!(
            "ssh: `{}` is not a host name or address (letters, digits, `.`, `-`, `:`, `_`, `%`; not starting with `-`)",
            host.escape_debug()
        )));
    }
    Ok(())
}

/// Checks a target before anything is run.
pub(crate) fn check_target(t: &Target) -> Result<(), CapError> {
    check_host(&t.host)?;
    let bad_user = t.user.is_empty()
        || t.user.starts_with('-')
        || t.user.len() > 64
        || t.user.chars().any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '$')));
    if bad_user {
        return Err(CapError::invalid(format!(
            "ssh: `{}` is not a login user name for {}:{} (letters, digits, `.`, `-`, `_`)",
            t.user.escape_debug(),
            t.host,
            t.port
        )));
    }
    if t.port == 0 {
        return Err(CapError::invalid(format!("ssh: port 0 is not a valid port for {}", t.host)));
    }
    Ok(())
}

/// Quotes `s` for a POSIX shell: single quotes, each `'` as `'\''`.
pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A command as shown in messages: secrets redacted, shortened to 120 characters.
pub(crate) fn show_command(command: &str) -> String {
    let redacted = crate::secrets::redact(command);
    let one_line: String = redacted.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one_line.chars().count() > 120 {
        format!("{}…", one_line.chars().take(120).collect::<String>())
    } else {
        one_line
    }
}
