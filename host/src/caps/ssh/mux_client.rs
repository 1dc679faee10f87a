//! A session through an existing master without an `ssh` process. Starting
//! `ssh` costs more CPU than the command it carries (exec, dynamic linking,
//! OpenSSL set-up), and a run makes most of its calls through a master, so
//! cradle opens the session on the master's control socket itself. The wire
//! protocol (OpenSSH's `PROTOCOL.mux`, version 4: hello, new session, the three
//! descriptors passed with `SCM_RIGHTS`, the exit message) is the maintained
//! `openssh-mux-client` crate's; this module decides what each outcome means.
//!
//! Contract:
//! - Only a master already listening is used; anything short of an opened
//!   session (no socket, a stale one, a refused session, another protocol
//!   version) is [`Via::Unavailable`] and the caller runs `ssh`, which makes or
//!   repairs the master. Nothing has run on the remote then.
//! - The master is the same OpenSSH process that checked the pinned host key;
//!   its socket lives in the owner-only control directory and is keyed on the
//!   pin ([`super::mux`]), and it checks that the peer is the same user.
//! - stdin is a pipe fed with the given bytes (closed at once without any);
//!   stdout and stderr are pipes read into capped buffers, exactly as with an
//!   `ssh` child. Both are read to their end *before* the exit message is
//!   taken: the master sends that message when the remote reports its status,
//!   which may precede the last output, and closing the control connection
//!   (what the crate does once it has the message) makes the master drop the
//!   session's remaining output. `ssh` itself reads until the master hangs up,
//!   for the same reason.
//! - The outcome is the exit status the master reports. A session that ends
//!   without one is exit 255 when the master lives on (the remote command died
//!   of a signal; `ssh` says the same) and a `transient` error when the master
//!   is gone (its connection died): the command may have run.
//! - [`stop`] asks a master to stop listening (`ssh -O stop`) through the same
//!   crate, bounded by [`CONTROL_TIMEOUT`]; ending one at once (`ssh -O exit`)
//!   has no request in the crate and stays with `ssh` ([`super::mux`]).

use std::borrow::Cow;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openssh_mux_client::{Connection, Error as MuxError, NonZeroByteSlice, Session, SessionStatus};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

use super::stream::{Capped, spawn_reader, take};
use super::{ExecOutput, Target, show_command};
use crate::contract::{CapError, ErrorKind};

/// How long the master may take to answer the hello and the session request.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a master may take to answer a stop request.
pub(crate) const CONTROL_TIMEOUT: Duration = Duration::from_secs(1);

/// What a call through a master came to.
pub(crate) enum Via {
    /// The session ran (or was lost part-way: an error).
    Ran(Result<ExecOutput, CapError>),
    /// No session was opened; run `ssh` instead.
    Unavailable,
}

/// Runs `command` through the master at `socket` (see the module docs).
pub(crate) async fn exec(socket: &Path, t: &Target, command: &str, stdin: Option<&[u8]>, timeout: Duration) -> Via {
    let open = OPEN_TIMEOUT.min(timeout);
    let Ok(Ok(conn)) = tokio::time::timeout(open, Connection::connect(socket)).await else { return Via::Unavailable };
    // The caller refuses NUL bytes; `ssh` reports anything left.
    let Some(cmd) = NonZeroByteSlice::new(command.as_bytes()) else { return Via::Unavailable };
    // No tty is asked for, so no terminal type either.
    let Some(no_term) = NonZeroByteSlice::new(b"") else { return Via::Unavailable };
    let session = Session::builder().term(Cow::Borrowed(no_term)).cmd(Cow::Borrowed(cmd)).build();
    let Ok(pipes) = Pipes::new() else { return Via::Unavailable };
    let fds = [pipes.stdin_remote.as_raw_fd(), pipes.stdout_remote.as_raw_fd(), pipes.stderr_remote.as_raw_fd()];
    // From here the master may have started the command.
    let opened = tokio::time::timeout(open, conn.open_new_session(&session, &fds)).await;
    let Pipes { stdin_remote, stdout_remote, stderr_remote, stdin_tx, stdout_rx, stderr_rx } = pipes;
    // The master holds its own copies now; ours would keep the streams open.
    drop((stdin_remote, stdout_remote, stderr_remote));
    let established = match opened {
        Ok(Ok(s)) => s,
        // Refused before opening: nothing ran.
        Ok(Err(MuxError::PermissionDenied(_) | MuxError::RequestFailure(_))) => return Via::Unavailable,
        Ok(Err(e)) => return Via::Ran(Err(lost(t, command, &e.to_string()))),
        Err(_) => return Via::Ran(Err(lost(t, command, "the master did not answer the session request"))),
    };
    let stdout = Arc::new(Mutex::new(Capped::default()));
    let stderr = Arc::new(Mutex::new(Capped::default()));
    let readers = [spawn_reader(stdout_rx, stdout.clone()), spawn_reader(stderr_rx, stderr.clone())];
    let aborts = readers.each_ref().map(|r| r.abort_handle());
    let writer = match stdin {
        Some(data) => {
            let (mut tx, data) = (stdin_tx, data.to_vec());
            Some(tokio::spawn(async move {
                let _ = tx.write_all(&data).await;
            }))
        }
        // No input: the remote command reads end-of-file at once.
        None => {
            drop(stdin_tx);
            None
        }
    };
    let session_over = async {
        for r in readers {
            let _ = r.await;
        }
        let mut session = established;
        loop {
            match session.wait().await {
                // No tty was asked for; the exit message still follows.
                Ok(SessionStatus::TtyAllocFail(s)) => session = s,
                Ok(SessionStatus::Exited { exit_value }) => break exit_value,
                Err((e, _)) => {
                    tracing::debug!("ssh {t}: the mux session ended without a status: {e}");
                    break None;
                }
            }
        }
    };
    let waited = tokio::time::timeout(timeout, session_over).await;
    if let Some(w) = writer {
        w.abort();
    }
    let code = match waited {
        Ok(code) => code,
        Err(_) => {
            for a in &aborts {
                a.abort();
            }
            // The control connection is dropped with the future: the master closes the session.
            return Via::Ran(Err(CapError::new(
                ErrorKind::Transient,
                format!(
                    "ssh {t}: `{}` did not finish within {} ms and its session was closed; the command may have \
                     partly run (or still run) on the remote",
                    show_command(command),
                    timeout.as_millis()
                ),
            )));
        }
    };
    let stderr = take(&stderr);
    if code.is_none() && master_lives(socket).await {
        // The session ended without an exit status but the connection lives: the
        // remote command died of a signal. `ssh` reports that as a silent 255.
        return Via::Ran(Ok(ExecOutput { exit_code: Some(255), stdout: take(&stdout), stderr }));
    }
    let Some(code) = code else {
        return Via::Ran(Err(CapError::new(
            ErrorKind::Transient,
            format!(
                "ssh {t}: the connection closed while running `{}` before it reported an exit status; the command \
                 may have partly run ({})",
                show_command(command),
                super::stream::excerpt(&String::from_utf8_lossy(&stderr))
            ),
        )));
    };
    Via::Ran(Ok(ExecOutput { exit_code: Some(i32::try_from(code).unwrap_or(255)), stdout: take(&stdout), stderr }))
}

fn lost(t: &Target, command: &str, why: &str) -> CapError {
    CapError::new(
        ErrorKind::Transient,
        format!(
            "ssh {t}: the shared connection failed while starting `{}` ({why}); the command may have run",
            show_command(command)
        ),
    )
}

/// Whether the master at `socket` still runs a moment after a session ended
/// without an exit status (a master whose connection died exits and removes it).
pub(crate) async fn master_lives(socket: &Path) -> bool {
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if !socket.exists() {
            return false;
        }
    }
    UnixStream::connect(socket).await.is_ok()
}

/// The session's three pipes: the ends the master gets (blocking, as the
/// protocol requires) and the ends cradle keeps (non-blocking, for tokio).
struct Pipes {
    stdin_remote: OwnedFd,
    stdout_remote: OwnedFd,
    stderr_remote: OwnedFd,
    stdin_tx: pipe::Sender,
    stdout_rx: pipe::Receiver,
    stderr_rx: pipe::Receiver,
}

impl Pipes {
    fn new() -> io::Result<Pipes> {
        let (stdin_remote, stdin_tx) = std::io::pipe()?;
        let (stdout_rx, stdout_remote) = std::io::pipe()?;
        let (stderr_rx, stderr_remote) = std::io::pipe()?;
        Ok(Pipes {
            stdin_remote: stdin_remote.into(),
            stdout_remote: stdout_remote.into(),
            stderr_remote: stderr_remote.into(),
            stdin_tx: pipe::Sender::from_owned_fd(stdin_tx.into())?,
            stdout_rx: pipe::Receiver::from_owned_fd(stdout_rx.into())?,
            stderr_rx: pipe::Receiver::from_owned_fd(stderr_rx.into())?,
        })
    }
}

/// Asks the master at `socket` to stop listening (`ssh -O stop`: the socket
/// goes at once, sessions in flight finish, then it exits). Blocking, at most
/// [`CONTROL_TIMEOUT`]: whether it said yes. `false` when there is no master
/// or it did not answer in time; the request then runs on in a thread of its
/// own until the master answers or goes (the crate's request has no timeout).
pub(crate) fn stop(socket: &Path) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = socket.to_path_buf();
    let spawned = std::thread::Builder::new().name("cradle-mux-stop".into()).spawn(move || {
        let _ = tx.send(openssh_mux_client::shutdown_mux_master(&path).is_ok());
    });
    spawned.is_ok() && rx.recv_timeout(CONTROL_TIMEOUT).unwrap_or(false)
}
