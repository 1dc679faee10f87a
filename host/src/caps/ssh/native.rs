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
use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use russh::client::{self, Handle, Handler};
use russh::keys::{Algorithm, HashAlg, PrivateKeyWithHashAlg, PublicKeyBase64, PublicKeyOrCertificate};
use russh::{ChannelMsg, ChannelWriteHalf, Disconnect};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::client::Input;
use super::known_hosts::PublicKey;
use super::stream::Capped;
use super::{ClientKind, ExecOutput, SshClient, Target, show_command};
use crate::contract::{CapError, ErrorKind};

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

/// Whether a live shared connection is held under `key`.
pub(crate) fn connected(key: &Path) -> bool {
    let Some(lanes) = POOL.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned() else { return false };
    let lanes = lanes.lanes.lock().unwrap_or_else(|e| e.into_inner());
    lanes.iter().any(|s| s.conn.try_lock().is_ok_and(|h| h.as_ref().is_some_and(|h| !h.is_closed())))
}

/// Keep-alive interval and how many may go unanswered (as OpenSSH's path).
const KEEPALIVE: Duration = Duration::from_secs(15);
const KEEPALIVE_MAX: usize = 3;

/// What the server offered when it was refused.
#[derive(Debug, Clone)]
struct Offered {
    kind: String,
    fingerprint: String,
}

/// The host-key check: accepts only a pinned key, records what else was offered.
pub(crate) struct Checker {
    pinned: Vec<PublicKey>,
    offered: Arc<Mutex<Option<Offered>>>,
}

impl Handler for Checker {
    type Error = russh::Error;

    async fn check_server_key(&mut self, key: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        let (kind, blob) = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => (key.algorithm().to_string(), key.public_key_bytes()),
            // Never asked for (no certificate algorithms are offered).
            PublicKeyOrCertificate::Certificate(_) => ("a certificate".to_string(), Vec::new()),
        };
        if !blob.is_empty() && self.pinned.iter().any(|p| p.blob() == blob) {
            return Ok(true);
        }
        let fingerprint = super::known_hosts::blob_fingerprint(&blob);
        *self.offered.lock().unwrap_or_else(|e| e.into_inner()) = Some(Offered { kind, fingerprint });
        Ok(false)
    }
}

/// Drops the shared connections named by `keys` (the end of their last
/// client, a pin change). Sessions in flight keep their handle until they end.
pub(crate) fn forget(keys: &[PathBuf]) {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    for k in keys {
        pool.remove(k);
    }
}

/// Runs `command` on `t` (see the module docs); `key` shares the connection.
pub(crate) async fn exec(
    c: &SshClient,
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

/// A new authenticated connection to `t`, its host key checked against the pins.
async fn connect(c: &SshClient, t: &Target) -> Result<Handle<Checker>, CapError> {
    let pinned = c.known_hosts().pinned(&t.host, t.port)?;
    if pinned.is_empty() {
        return Err(c.unknown_key_error(t, "no key is pinned for it; the built-in client made no connection"));
    }
    let mut algorithms: Vec<Algorithm> = Vec::new();
    for p in &pinned {
        let wanted: Vec<Algorithm> = if p.kind == "ssh-rsa" {
            vec![Algorithm::Rsa { hash: Some(HashAlg::Sha512) }, Algorithm::Rsa { hash: Some(HashAlg::Sha256) }]
        } else {
            Algorithm::new(&p.kind).into_iter().collect()
        };
        for a in wanted {
            if russh::Preferred::DEFAULT.key.contains(&a) && !algorithms.contains(&a) {
                algorithms.push(a);
            }
        }
    }
    if algorithms.is_empty() {
        let kinds: Vec<&str> = pinned.iter().map(|p| p.kind.as_str()).collect();
        return Err(CapError::failed(format!(
            "ssh {t}: the built-in client cannot check a {} host key; set `[ssh] client = \"openssh\"`",
            kinds.join(" or ")
        )));
    }
    let config = client::Config {
        preferred: russh::Preferred { key: algorithms.into(), ..russh::Preferred::DEFAULT },
        keepalive_interval: Some(KEEPALIVE),
        keepalive_max: KEEPALIVE_MAX,
        nodelay: true,
        ..client::Config::default()
    };
    let offered = Arc::new(Mutex::new(None));
    let checker = Checker { pinned: pinned.clone(), offered: offered.clone() };
    let limit = c.settings().connect_timeout + Duration::from_secs(10);
    let connected = tokio::time::timeout(limit, client::connect(Arc::new(config), (t.host.as_str(), t.port), checker));
    let mut handle = match connected.await {
        Ok(Ok(h)) => h,
        Err(_) => {
            return Err(CapError::new(
                ErrorKind::Transient,
                format!("ssh {t}: Connection timed out: no SSH session within {} s", limit.as_secs()),
            ));
        }
        Ok(Err(e)) => {
            let offered = offered.lock().unwrap_or_else(|e| e.into_inner()).clone();
            return Err(connect_error(c, t, &pinned, offered, e));
        }
    };
    let mut tried_agent = false;
    if c.settings().identity.is_none()
        && let ClientKind::Builtin { agent: Some(sock), .. } = &c.settings().client
    {
        if agent_login(&mut handle, t, sock).await {
            return Ok(handle);
        }
        tried_agent = true;
    }
    let key = identity(c, t)?;
    let hash = match key.algorithm() {
        Algorithm::Rsa { .. } => handle.best_supported_rsa_hash().await.ok().flatten().flatten(),
        _ => None,
    };
    let auth = handle
        .authenticate_publickey(t.user.clone(), PrivateKeyWithHashAlg::new(Arc::new(key), hash))
        .await
        .map_err(|e| match tried_agent {
            // sshd hangs up after MaxAuthTries refused keys: a login failure, not the network's.
            true => c.auth_error(t, &format!("the server ended the login after refusing the agent's keys ({e})")),
            false => transport(t, "authentication", &e),
        })?;
    if !auth.success() {
        return Err(c.auth_error(t, "the server refused the key (Permission denied (publickey))"));
    }
    Ok(handle)
}

/// Logs in with a key the agent at `sock` holds: whether one was accepted.
/// An agent that cannot be reached or declines to sign is passed over, as
/// OpenSSH passes it over.
async fn agent_login(handle: &mut Handle<Checker>, t: &Target, sock: &Path) -> bool {
    let Ok(mut agent) = russh::keys::agent::client::AgentClient::connect_uds(sock).await else {
        tracing::debug!("ssh {t}: the agent at {} cannot be reached", sock.display());
        return false;
    };
    let Ok(identities) = agent.request_identities().await else { return false };
    for id in identities {
        let key = id.public_key().into_owned();
        let hash = match key.algorithm() {
            Algorithm::Rsa { .. } => handle.best_supported_rsa_hash().await.ok().flatten().flatten(),
            _ => None,
        };
        if let Ok(r) = handle.authenticate_publickey_with(t.user.clone(), key, hash, &mut agent).await
            && r.success()
        {
            return true;
        }
    }
    false
}

/// The private key to log in with (see the module docs).
fn identity(c: &SshClient, t: &Target) -> Result<russh::keys::PrivateKey, CapError> {
    let path = match &c.settings().identity {
        Some(p) => p.clone(),
        None => {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
            ["id_ed25519", "id_ecdsa", "id_rsa"]
                .iter()
                .map(|n| home.join(".ssh").join(n))
                .find(|p| p.exists())
                .ok_or_else(|| {
                    c.auth_error(t, "no identity is configured and ~/.ssh has no id_ed25519, id_ecdsa or id_rsa")
                })?
        }
    };
    if c.settings().identity.is_none() {
        // A configured identity was checked when the client was made; a
        // default one is refused here as OpenSSH refuses it.
        super::client::check_identity(&path)?;
    }
    russh::keys::load_secret_key(&path, None).map_err(|e| {
        let why = match e {
            russh::keys::Error::KeyIsEncrypted => {
                "it is encrypted and nothing can prompt for its passphrase (leave `identity` unset and add the key \
                 to your agent, SSH_AUTH_SOCK, or use an unencrypted key kept for cradle)"
                    .to_string()
            }
            other => other.to_string(),
        };
        CapError::failed(format!("ssh {t}: the identity file {} cannot be used: {why}", path.display()))
    })
}

/// The error for a connection that did not come up.
fn connect_error(
    c: &SshClient,
    t: &Target,
    pinned: &[PublicKey],
    offered: Option<Offered>,
    e: russh::Error,
) -> CapError {
    if let russh::Error::NoCommonAlgo { kind: russh::AlgorithmKind::Key, ours, theirs } = &e {
        return c.unknown_key_error(
            t,
            &format!(
                "it offers none of the pinned host key types (key types: {} / {})",
                ours.join(","),
                theirs.join(",")
            ),
        );
    }
    if let Some(o) = offered {
        if pinned.iter().any(|p| same_family(&p.kind, &o.kind)) {
            return c.changed_key_error(t, &o.fingerprint);
        }
        return c.unknown_key_error(t, &format!("it offered a {} key, {}", o.kind, o.fingerprint));
    }
    if let russh::Error::IO(io) = &e {
        let text = match io.kind() {
            IoKind::ConnectionRefused => Some("Connection refused"),
            IoKind::ConnectionReset | IoKind::ConnectionAborted => Some("Connection reset"),
            IoKind::TimedOut => Some("Connection timed out"),
            IoKind::HostUnreachable => Some("No route to host"),
            IoKind::NetworkUnreachable => Some("Network is unreachable"),
            IoKind::UnexpectedEof | IoKind::BrokenPipe => Some("Connection closed"),
            _ => None,
        };
        if let Some(text) = text {
            return CapError::new(ErrorKind::Transient, format!("ssh {t}: {text} ({io})"));
        }
        let said = io.to_string();
        if said.contains("Temporary failure") {
            return CapError::new(
                ErrorKind::Transient,
                format!("ssh {t}: Temporary failure in name resolution ({io})"),
            );
        }
        if said.contains("lookup") || said.contains("resolve") {
            return CapError::failed(format!(
                "ssh {t}: the host name does not resolve; check the inventory address ({io})"
            ));
        }
    }
    transport(t, "connecting", &e)
}

/// Whether two key algorithm names are the same kind of key (`ssh-rsa` and
/// `rsa-sha2-512` are one RSA key).
fn same_family(a: &str, b: &str) -> bool {
    fn family(s: &str) -> &str {
        if s == "ssh-rsa" || s.starts_with("rsa-sha2") { "rsa" } else { s }
    }
    family(a) == family(b)
}

fn transport(t: &Target, what: &str, e: &russh::Error) -> CapError {
    CapError::new(ErrorKind::Transient, format!("ssh {t}: connection failed while {what} ({e})"))
}

/// How a session failed.
enum Failure {
    /// No channel was opened: nothing ran.
    NotOpened(CapError),
    /// The connection failed or the call timed out after the command may have started.
    Lost(CapError),
    /// Anything else (the server refused the command): the connection is fine.
    Refused(CapError),
}

impl Failure {
    fn transport(&self) -> bool {
        matches!(self, Failure::NotOpened(_) | Failure::Lost(_))
    }

    fn into_error(self) -> CapError {
        match self {
            Failure::NotOpened(e) | Failure::Lost(e) | Failure::Refused(e) => e,
        }
    }
}

/// A session's sending half and input writer. Unless the server closed the
/// channel, dropping it (a timeout, a refusal, the caller giving up on the
/// call) stops the writer and sends the channel's close without waiting on
/// it for long: the remote command gets its hang-up, the connection keeps no
/// channel for a call that is gone.
struct Open {
    tx: Option<ChannelWriteHalf<client::Msg>>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(w) = self.writer.take() {
            w.abort();
        }
        if let Some(tx) = self.tx.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = tokio::time::timeout(CLOSE_WAIT, tx.close()).await;
            });
        }
    }
}

/// How long closing a channel may wait for room in the connection's queue.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Runs one command in a new channel on `conn`.
async fn session(conn: &Handle<Checker>, call: &Call<'_>, input: &mut Input<'_>) -> Result<ExecOutput, Failure> {
    let (t, command, deadline) = (call.t, call.command, call.deadline);
    let shown = show_command(command);
    let opened = tokio::time::timeout_at(deadline, conn.channel_open_session()).await;
    let channel = match opened {
        Ok(Ok(ch)) => ch,
        // The server said no to one more session; the connection is fine.
        Ok(Err(e @ russh::Error::ChannelOpenFailure(_))) => {
            return Err(Failure::Refused(CapError::new(
                ErrorKind::Transient,
                format!("ssh {t}: the server refused a new session for `{shown}` ({e}; its MaxSessions?)"),
            )));
        }
        Ok(Err(e)) => return Err(Failure::NotOpened(transport(t, &format!("opening a session for `{shown}`"), &e))),
        Err(_) => return Err(Failure::Lost(call.timed_out("the session was not opened"))),
    };
    let (mut rx, tx) = channel.split();
    let mut open = Open { tx: Some(tx), writer: None };
    let Some(tx) = open.tx.as_ref() else { unreachable!("set just above") };
    match tokio::time::timeout_at(deadline, tx.exec(true, command.as_bytes())).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(Failure::Lost(transport(t, &format!("starting `{shown}`"), &e))),
        Err(_) => return Err(Failure::Lost(call.timed_out("the command was not started"))),
    }
    // Input goes in its own task, so a command that writes before it reads
    // cannot stall on a full window. It is taken only now: a session that
    // was not opened leaves it for the retry.
    let mut w = tx.make_writer();
    let data = match std::mem::replace(input, Input::Closed) {
        Input::Closed => None,
        Input::Bytes(b) => Some(Source::Bytes(b.to_vec())),
        Input::File(f) => Some(Source::File(tokio::fs::File::from_std(f))),
    };
    open.writer = Some(tokio::spawn(async move {
        let _ = match data {
            Some(Source::Bytes(b)) => w.write_all(&b).await,
            Some(Source::File(mut f)) => tokio::io::copy(&mut f, &mut w).await.map(|_| ()),
            None => Ok(()),
        };
        // Shutting the writer down sends EOF: the command reads end-of-file.
        let _ = w.shutdown().await;
    }));
    let (mut stdout, mut stderr) = (Capped::default(), Capped::default());
    let mut status: Option<u32> = None;
    let (mut signalled, mut eof, mut closed) = (false, false, false);
    loop {
        match tokio::time::timeout_at(deadline, rx.wait()).await {
            Err(_) => {
                // Stop reading first: the connection must not wait on this
                // channel's full queue while its close is sent (by `open`).
                drop(rx);
                return Err(Failure::Lost(call.timed_out("its channel was closed")));
            }
            Ok(None) => break,
            Ok(Some(msg)) => match msg {
                ChannelMsg::Data { data } => stdout.push(&data),
                ChannelMsg::ExtendedData { data, ext: 1 } => stderr.push(&data),
                ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                ChannelMsg::ExitSignal { .. } => signalled = true,
                ChannelMsg::Eof => eof = true,
                ChannelMsg::Failure => {
                    return Err(Failure::Refused(CapError::failed(format!(
                        "ssh {t}: the server refused to run `{shown}`"
                    ))));
                }
                ChannelMsg::Close => {
                    open.tx = None;
                    closed = true;
                    break;
                }
                _ => {}
            },
        }
    }
    drop(open);
    let (stdout, stderr) = (stdout.finish(), stderr.finish());
    // Output is complete once the server closed the channel, or said end of
    // output and the status; a connection that died short of that may have
    // taken output with it.
    let complete = closed || eof && (status.is_some() || signalled);
    match status {
        Some(code) if complete => {
            Ok(ExecOutput { exit_code: Some(i32::try_from(code).unwrap_or(255)), stdout, stderr })
        }
        None if complete && signalled && !conn.is_closed() => Ok(ExecOutput { exit_code: Some(255), stdout, stderr }),
        Some(code) => Err(Failure::Lost(CapError::new(
            ErrorKind::Transient,
            format!(
                "ssh {t}: `{shown}` exited with {code} but the connection closed before its output ended; the \
                 output is incomplete, so it is not used"
            ),
        ))),
        None => Err(Failure::Lost(CapError::new(
            ErrorKind::Transient,
            format!(
                "ssh {t}: the connection closed while running `{shown}` before it reported an exit status; the \
                 command may have partly run ({})",
                super::stream::excerpt(&String::from_utf8_lossy(&stderr))
            ),
        ))),
    }
}

/// What a session's standard input is read from.
enum Source {
    Bytes(Vec<u8>),
    File(tokio::fs::File),
}
