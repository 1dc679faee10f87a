//! The built-in SSH client (`[ssh] client = "builtin"`): the same contract as
//! the OpenSSH path (`client.rs`), spoken in-process over `russh`, so a
//! connection costs a key exchange, not an `ssh` process. An `ssh` process
//! costs 10–15 ms of CPU before it sends a byte (exec, dynamic linking,
//! OpenSSL set-up; docs/BENCHMARKS.md): at a thousand guests, two
//! connections each, that is most of a run's CPU.
//!
//! Contract:
//! - Host keys: the server must present a key pinned for the host in cradle's
//!   known_hosts (plain entries; markers, hashed and wildcard lines are not
//!   consulted, as by [`super::KnownHosts`]). Only the pinned key types are
//!   offered in the key exchange, so a server with several keys shows the
//!   pinned one. A host with no pin is refused before any connection; a key of
//!   a pinned type that differs is a `conflict` naming both fingerprints; a
//!   key of an unpinned type is `failed`. The same messages as OpenSSH's path.
//! - Authentication: public key only. The configured identity alone; without
//!   one, the keys of the operator's agent (`SSH_AUTH_SOCK`), then the first
//!   of `~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa` that exists (0600, as
//!   OpenSSH demands). An encrypted key file cannot be used (nothing prompts;
//!   put it in the agent). RSA signs with the best SHA-2 the server announces.
//! - Sharing: with a connection key (the pin-keyed name `mux` computes),
//!   calls to one target share a connection per process, at most
//!   [`SESSIONS_PER_CONNECTION`] sessions at once (sshd refuses more than its
//!   `MaxSessions`, 10 by default); while every connection is that busy another
//!   one opens, up to [`MAX_LANES`], then calls wait. The first call on a
//!   connection makes it while the others wait. A server refusing a session is
//!   `transient` and keeps the connection. [`forget`] drops connections (the end
//!   of the last run that used them, a pin change); a transport failure drops
//!   the one it happened on. A session that cannot be opened on a shared
//!   connection (the guest rebooted) costs one reconnect, never an error:
//!   nothing ran.
//! - A command's outcome is its exit status; a remote signal is exit 255
//!   with no diagnostic (as `ssh` reports it). stdout and stderr are read
//!   until the channel closes, so output after the exit status is kept;
//!   a connection that dies before the status, or before the output's end,
//!   is `transient` ("the command may have partly run", "the output is
//!   incomplete"). A call that outlives its timeout, or that its caller gives
//!   up on, closes its channel (the remote command gets its hang-up) and is
//!   `transient`. Streams are capped as with `ssh`.
//! - A host key is checked at the first key exchange; russh does not call
//!   the check again at a re-key inside the encrypted session (OpenSSH does).
//! - Keep-alives every 15 s, three unanswered end the connection
//!   (`ServerAliveInterval=15`, `ServerAliveCountMax=3`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use russh::Disconnect;
use russh::client::Handle;
use tokio::time::Instant;

use super::transport::{Input, Transport, Trust};
use super::{ClientKind, ExecOutput, SshSettings, Target, show_command};
use crate::contract::{CapError, ErrorKind};

mod connect;
mod session;

use connect::{Checker, connect};
use session::{CLOSE_WAIT, Failure, session};

/// One shared connection (or the place where the first call makes it) and
/// the sessions it may carry at once.
struct Shared {
    conn: tokio::sync::Mutex<Option<Arc<Handle<Checker>>>>,
    sessions: Arc<tokio::sync::Semaphore>,
}

type Slot = Arc<Shared>;

impl Shared {
    fn new() -> Slot {
        Arc::new(Shared {
            conn: tokio::sync::Mutex::default(),
            sessions: Arc::new(tokio::sync::Semaphore::new(SESSIONS_PER_CONNECTION)),
        })
    }
}

/// The shared connections to one target and pin: a second one opens only
/// when the first carries all the sessions it may.
#[derive(Default)]
struct Lanes {
    lanes: Mutex<Vec<Slot>>,
    next: std::sync::atomic::AtomicUsize,
}

impl Lanes {
    /// A connection with a free session (and the permit), else a new one if
    /// there may be more, else the next one in turn to wait on.
    fn pick(&self) -> (Slot, Option<tokio::sync::OwnedSemaphorePermit>) {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        for lane in lanes.iter() {
            if let Ok(permit) = lane.sessions.clone().try_acquire_owned() {
                return (lane.clone(), Some(permit));
            }
        }
        if lanes.len() < MAX_LANES {
            let lane = Shared::new();
            lanes.push(lane.clone());
            let permit = lane.sessions.clone().try_acquire_owned().ok();
            return (lane, permit);
        }
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % lanes.len();
        (lanes[i].clone(), None)
    }
}

/// Sessions one shared connection carries at once: below sshd's default
/// `MaxSessions` (10), which refuses the eleventh.
const SESSIONS_PER_CONNECTION: usize = 8;

/// Connections to one target and pin at most (so at most 32 sessions at once;
/// further calls wait for one to end).
const MAX_LANES: usize = 4;

/// The shared connections of this process, by connection key.
static POOL: LazyLock<Mutex<HashMap<PathBuf, Arc<Lanes>>>> = LazyLock::new(Mutex::default);

/// The stand-in directory of the built-in client's pool keys (nothing is
/// created there: the keys only name connections).
pub(crate) const POOL_DIR: &str = "/cradle-builtin-ssh";

/// The built-in client's transport: its shared connections are the pool's,
/// under keys in [`POOL_DIR`] (with `share`).
pub(crate) struct Builtin;

impl Transport for Builtin {
    fn key_dir<'a>(&self, settings: &'a SshSettings) -> Option<&'a Path> {
        match settings.client {
            ClientKind::Builtin { share: true, .. } => Some(Path::new(POOL_DIR)),
            _ => None,
        }
    }

    fn connected(&self, key: &Path) -> bool {
        connected(key)
    }

    fn stop(&self, keys: &[PathBuf]) {
        forget(keys);
    }
}

/// Whether a live shared connection is held under `key`.
fn connected(key: &Path) -> bool {
    let Some(lanes) = POOL.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned() else { return false };
    let lanes = lanes.lanes.lock().unwrap_or_else(|e| e.into_inner());
    lanes.iter().any(|s| s.conn.try_lock().is_ok_and(|h| h.as_ref().is_some_and(|h| !h.is_closed())))
}

/// Drops the shared connections named by `keys` (the end of their last
/// client, a pin change). Sessions in flight keep their handle until they end.
fn forget(keys: &[PathBuf]) {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    for k in keys {
        pool.remove(k);
    }
}

/// Runs `command` on `t` (see the module docs); `key` shares the connection.
pub(crate) async fn exec(
    c: &Trust<'_>,
    key: Option<&Path>,
    t: &Target,
    command: &str,
    mut input: Input<'_>,
    timeout: Duration,
) -> Result<ExecOutput, CapError> {
    let call = Call { t, command, timeout, deadline: Instant::now() + timeout };
    let Some(key) = key else {
        let conn = within(&call, connect(c, t)).await??;
        let out = session(&conn, &call, &mut input).await;
        let _ = conn.disconnect(Disconnect::ByApplication, "", "en").await;
        return out.map_err(Failure::into_error);
    };
    let lanes = POOL.lock().unwrap_or_else(|e| e.into_inner()).entry(key.to_path_buf()).or_default().clone();
    let (slot, permit) = lanes.pick();
    let _permit = match permit {
        Some(p) => p,
        None => within(&call, slot.sessions.clone().acquire_owned())
            .await?
            .map_err(|_| CapError::failed(format!("ssh {t}: the shared connection was closed")))?,
    };
    let mut fresh = false;
    loop {
        let conn = {
            let mut held = within(&call, slot.conn.lock()).await?;
            match held.as_ref().filter(|h| !h.is_closed()) {
                Some(h) => h.clone(),
                None => {
                    let h = Arc::new(within(&call, connect(c, t)).await??);
                    *held = Some(h.clone());
                    fresh = true;
                    h
                }
            }
        };
        match session(&conn, &call, &mut input).await {
            // Nothing ran on a connection that went away (a reboot): one new one.
            Err(Failure::NotOpened(_)) if !fresh => {
                drop_if_same(&slot, &conn).await;
                fresh = true;
            }
            Err(f) => {
                if f.transport() {
                    drop_if_same(&slot, &conn).await;
                }
                return Err(f.into_error());
            }
            Ok(out) => return Ok(out),
        }
    }
}

/// Empties `slot` if it still holds `conn`. Bounded: behind another call's
/// connect it gives up (that call replaces the connection anyway).
async fn drop_if_same(slot: &Slot, conn: &Arc<Handle<Checker>>) {
    if let Ok(mut held) = tokio::time::timeout(CLOSE_WAIT, slot.conn.lock()).await
        && held.as_ref().is_some_and(|h| Arc::ptr_eq(h, conn))
    {
        *held = None;
    }
}

/// One command's call: where, what, and until when.
struct Call<'a> {
    t: &'a Target,
    command: &'a str,
    timeout: Duration,
    deadline: Instant,
}

impl Call<'_> {
    /// The call's transient error once its time is up (`what` happened then).
    fn timed_out(&self, what: &str) -> CapError {
        CapError::new(
            ErrorKind::Transient,
            format!(
                "ssh {}: `{}` did not finish within {} ms ({what}); the command may have partly run (or still run) \
                 on the remote",
                self.t,
                show_command(self.command),
                self.timeout.as_millis()
            ),
        )
    }
}

/// Awaits `f` until the call's deadline; past it, the call's timeout error.
async fn within<T>(call: &Call<'_>, f: impl std::future::Future<Output = T>) -> Result<T, CapError> {
    tokio::time::timeout_at(call.deadline, f).await.map_err(|_| call.timed_out("no session was opened"))
}
