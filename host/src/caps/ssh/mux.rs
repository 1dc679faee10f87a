//! Connection multiplexing: OpenSSH `ControlMaster=auto` masters, one per
//! target and pinned key, so a run pays one key exchange per guest instead of
//! one per command.
//!
//! Contract:
//! - The control directory is owner-only: a directory (not a symlink) owned by
//!   this user with no group or other bits. [`control_dir`] makes `<state>/mux`
//!   that way; [`check_control_dir`] refuses anything else.
//! - A socket's name is 20 hex digits of a SHA-256 over this process's random
//!   nonce, cradle's known_hosts file, the identity, user, host, port and every
//!   known_hosts line that decides which key `ssh` accepts for that host
//!   ([`super::KnownHosts::pin_material`]). So a master authenticated under one
//!   pin is unreachable once the pin changes (forgotten, replaced, or an operator
//!   edit); a new connection is made, and it checks the new pin. Clients in one
//!   process share masters (the runs of one `cradle provision` share their
//!   node's); other processes never reach them. A host with no pinned key gets
//!   no master (the direct connection is refused by `ssh`).
//! - Unix socket paths are short (104 bytes on some systems, and `ssh` binds
//!   `<path>.<16 random chars>` first), so the directory may be at most
//!   [`MAX_DIR_LEN`] bytes of `[A-Za-z0-9/._+-]`; [`control_dir`] returns `None`
//!   (one connection per call) for one that is not.
//! - A master lives at most [`CONTROL_PERSIST_S`] idle seconds after its last
//!   session. cradle ends it earlier: `ssh -O exit` when a call through it fails
//!   as a transport error or times out (a guest that rebooted or vanished must
//!   not keep answering through an old connection); `ssh -O stop` (the socket
//!   is removed at once, sessions in flight finish, then the master exits) when
//!   the host's pin changes and when the last client that used it is dropped
//!   (the end of the last run using it; [`register`]/[`release`] count the
//!   clients). A master killed without cleanup leaves a stale socket; `ssh`
//!   unlinks it and connects anew (ControlMaster=auto), and releasing removes
//!   leftovers.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::SshSettings;
use super::transport::Transport;
use crate::contract::CapError;

/// OpenSSH's transport: its shared connections are masters whose control
/// sockets are the keys, in the configured control directory.
pub(crate) struct OpenSsh;

impl Transport for OpenSsh {
    fn key_dir<'a>(&self, settings: &'a SshSettings) -> Option<&'a Path> {
        settings.control_dir.as_deref()
    }

    fn connected(&self, key: &Path) -> bool {
        key.exists()
    }

    fn stop(&self, keys: &[PathBuf]) {
        stop_masters(keys);
    }
}

/// Idle seconds before a master exits by itself (`ControlPersist`).
pub const CONTROL_PERSIST_S: u32 = 15;

/// Longest control directory: 104 (the smallest `sun_path`) − NUL − `ssh`'s
/// temporary `.XXXXXXXXXXXXXXXX` − `/` − the 20-digit name.
pub const MAX_DIR_LEN: usize = 104 - 1 - 17 - 1 - NAME_LEN;

const NAME_LEN: usize = 20;

/// How long closing masters may take in total.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);

/// Keys this process's sockets apart from every other process's.
static NONCE: LazyLock<String> = LazyLock::new(super::keys::random_hex);

/// How many live clients have used each socket.
static USERS: Mutex<BTreeMap<PathBuf, usize>> = Mutex::new(BTreeMap::new());

/// One lock per socket, held by the call that makes its master.
static OPENING: Mutex<BTreeMap<PathBuf, std::sync::Weak<tokio::sync::Mutex<()>>>> = Mutex::new(BTreeMap::new());

/// The lock to hold while making the master at `path`: concurrent first calls
/// to one target (a hundred runs uploading to one node) wait for one master
/// instead of each making a connection of its own.
pub(crate) fn opening_lock(path: &Path) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    let mut locks = OPENING.lock().unwrap_or_else(|e| e.into_inner());
    locks.retain(|_, l| l.strong_count() > 0);
    if let Some(l) = locks.get(path).and_then(std::sync::Weak::upgrade) {
        return l;
    }
    let l = std::sync::Arc::new(tokio::sync::Mutex::new(()));
    locks.insert(path.to_path_buf(), std::sync::Arc::downgrade(&l));
    l
}

/// This process's socket-name nonce.
pub(crate) fn nonce() -> &'static str {
    &NONCE
}

/// Counts one more client using the master at `path`.
pub(crate) fn register(path: &Path) {
    *USERS.lock().unwrap_or_else(|e| e.into_inner()).entry(path.to_path_buf()).or_default() += 1;
}

/// A client is done with `paths`: the shared connections no other client
/// uses are stopped (`stop`, its transport's). The count stays locked
/// meanwhile, so no client starts a session on a connection being stopped.
/// The built-in client's pool keys are counted here too.
pub(crate) fn release(paths: &[PathBuf], stop: impl FnOnce(&[PathBuf])) {
    let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
    let mut unused = Vec::new();
    for p in paths {
        if let Some(n) = users.get_mut(p) {
            *n -= 1;
            if *n == 0 {
                users.remove(p);
                unused.push(p.clone());
            }
        }
    }
    if !unused.is_empty() {
        stop(&unused);
    }
}

/// The default control directory, `<state_root>/mux`, created owner-only.
/// `None` (with a warning) when the path is too long or has characters OpenSSH
/// would interpret, or cannot be made private: cradle then connects once per call.
pub fn control_dir(state_root: &Path) -> Option<PathBuf> {
    let dir = state_root.join("mux");
    if let Err(why) = usable_path(&dir) {
        tracing::warn!("ssh connection multiplexing is off: {why}");
        return None;
    }
    let made = crate::state::create_private_dir(&dir)
        .map_err(|e| CapError::failed(e.to_string()))
        .and_then(|()| check_control_dir(&dir));
    match made {
        Ok(()) => Some(dir),
        Err(e) => {
            tracing::warn!("ssh connection multiplexing is off: {}", e.message);
            None
        }
    }
}

/// Why a path cannot be the control directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ControlDirError {
    /// Not absolute, or not UTF-8.
    #[error("the control directory {0} is not an absolute UTF-8 path")]
    NotAbsolute(PathBuf),
    /// Longer than a unix socket path leaves room for.
    #[error(
        "the control directory {dir} is {len} bytes; unix socket paths leave room for at most {MAX_DIR_LEN} \
         (choose a shorter state directory)"
    )]
    TooLong {
        /// The directory.
        dir: String,
        /// Its length in bytes.
        len: usize,
    },
    /// Has characters `ssh` would expand or split on.
    #[error("the control directory {0} has characters OpenSSH would interpret (only letters, digits and `/._+-`)")]
    Interpreted(String),
}

fn usable_path(dir: &Path) -> Result<(), ControlDirError> {
    let s = dir.to_str().unwrap_or("");
    if !dir.is_absolute() || s.is_empty() {
        return Err(ControlDirError::NotAbsolute(dir.to_path_buf()));
    }
    if s.len() > MAX_DIR_LEN {
        return Err(ControlDirError::TooLong { dir: s.to_string(), len: s.len() });
    }
    if !s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '+' | '-')) {
        return Err(ControlDirError::Interpreted(s.to_string()));
    }
    Ok(())
}

/// Checks that `dir` can hold control sockets safely (see the module docs).
pub(crate) fn check_control_dir(dir: &Path) -> Result<(), CapError> {
    usable_path(dir).map_err(|why| CapError::failed(format!("ssh: {why}")))?;
    let meta = fs::symlink_metadata(dir)
        .map_err(|e| CapError::failed(format!("ssh: cannot inspect the control directory {}: {e}", dir.display())))?;
    if !meta.is_dir() {
        return Err(CapError::failed(format!("ssh: the control directory {} is not a directory", dir.display())));
    }
    #[allow(unsafe_code, reason = "a libc call without preconditions")]
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(CapError::failed(format!(
            "ssh: the control directory {} belongs to uid {}, not to this user (uid {me})",
            dir.display(),
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CapError::failed(format!(
            "ssh: the control directory {d} is accessible by group or others (mode {mode:03o}); run `chmod 700 {d}`",
            d = dir.display()
        )));
    }
    Ok(())
}

/// The socket path in `dir` for the given key parts (see the module docs).
pub(crate) fn socket_path(dir: &Path, parts: &[&[u8]]) -> PathBuf {
    let mut h = Sha256::new();
    h.update(b"cradle-ssh-mux-v1");
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    let mut name = hex::encode(h.finalize());
    name.truncate(NAME_LEN);
    dir.join(name)
}

/// `ssh -O OP` (`exit`, `stop`) for the master at `path` (nothing when there is none).
fn control_command(path: &Path, op: &str) -> std::process::Command {
    let mut c = std::process::Command::new("ssh");
    c.args(["-F", "/dev/null", "-o", "BatchMode=yes", "-o"])
        .arg(format!("ControlPath={}", path.display()))
        .args(["-O", op, "cradle-mux"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Stops the masters at `paths` (`-O stop`, in parallel, bounded by
/// [`CLOSE_TIMEOUT`]) and removes sockets left behind. Blocking; for the end
/// of a client and pin changes.
pub(crate) fn stop_masters(paths: &[PathBuf]) {
    let live: Vec<&PathBuf> = paths.iter().filter(|p| fs::symlink_metadata(p).is_ok()).collect();
    // The protocol first (no process); `ssh -O stop` for a master that would not answer it.
    let mut children: Vec<_> = live
        .iter()
        .filter(|p| !super::mux_client::stop(p))
        .filter_map(|p| control_command(p, "stop").spawn().ok())
        .collect();
    let started = Instant::now();
    while !children.is_empty() {
        children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        if started.elapsed() > CLOSE_TIMEOUT {
            for c in &mut children {
                let _ = c.kill();
                let _ = c.wait();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    for p in live {
        // A master that was killed leaves its socket; nothing listens there.
        if fs::symlink_metadata(p).is_ok() && std::os::unix::net::UnixStream::connect(p).is_err() {
            let _ = fs::remove_file(p);
        }
    }
}

/// Ends the master at `path` now (`ssh -O exit`, its sessions too), without
/// blocking the runtime: after a transport failure or a timeout through it.
/// A process, not the protocol: the mux crate has no terminate request, and
/// this runs only after a failure.
pub(crate) async fn close_master(path: &Path) {
    if fs::symlink_metadata(path).is_err() {
        return;
    }
    let mut c = tokio::process::Command::from(control_command(path, "exit"));
    c.kill_on_drop(true);
    if let Ok(mut child) = c.spawn() {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, child.wait()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_names_are_short_and_keyed_on_every_part() {
        let dir = Path::new("/s/mux");
        let a = socket_path(dir, &[b"n", b"host", b"22", b"ssh-ed25519 AAAA1"]);
        assert_eq!(a.file_name().unwrap().len(), NAME_LEN);
        assert_ne!(a, socket_path(dir, &[b"n", b"host", b"22", b"ssh-ed25519 AAAA2"]), "the pin");
        assert_ne!(a, socket_path(dir, &[b"m", b"host", b"22", b"ssh-ed25519 AAAA1"]), "the client");
        // Parts are length-prefixed: moving bytes between them changes the name.
        assert_ne!(socket_path(dir, &[b"ab", b"c"]), socket_path(dir, &[b"a", b"bc"]));
    }

    #[test]
    fn the_control_dir_must_be_short_plain_private_and_ours() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("state");
        let dir = control_dir(&root).expect("a short state dir gets a control dir");
        assert_eq!(dir, root.join("mux"));
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        check_control_dir(&dir).expect("private");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_control_dir(&dir).expect_err("too open");
        assert!(e.message.contains("chmod 700"), "{e}");
        assert_eq!(control_dir(&root), None, "an open existing dir is refused, not used");
        let long = tmp.path().join("x".repeat(MAX_DIR_LEN));
        assert_eq!(control_dir(&long), None);
        assert!(!long.exists(), "nothing is created for an unusable path");
        assert_eq!(control_dir(&tmp.path().join("a b")), None, "ssh would split the path");
        assert_eq!(control_dir(&tmp.path().join("a%h")), None, "ssh would expand %h");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("state"), &link).unwrap();
        assert!(check_control_dir(&link).is_err(), "a symlink is not the directory itself");
    }
}
