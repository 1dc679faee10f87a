//! One command in a channel of a built-in connection: input written from a
//! task of its own, output read until the channel's close, the channel
//! closed when the call ends any other way.

use std::time::Duration;

use russh::client::{self, Handle};
use russh::{ChannelMsg, ChannelWriteHalf};
use tokio::io::AsyncWriteExt;

use super::super::stream::Capped;
use super::super::transport::Input;
use super::super::{ExecOutput, show_command};
use super::Call;
use super::connect::{Checker, transport};
use crate::contract::{CapError, ErrorKind};

/// How a session failed.
pub(super) enum Failure {
    /// No channel was opened: nothing ran.
    NotOpened(CapError),
    /// The connection failed or the call timed out after the command may have started.
    Lost(CapError),
    /// Anything else (the server refused the command): the connection is fine.
    Refused(CapError),
}

impl Failure {
    pub(super) fn transport(&self) -> bool {
        matches!(self, Failure::NotOpened(_) | Failure::Lost(_))
    }

    pub(super) fn into_error(self) -> CapError {
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
pub(super) const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Runs one command in a new channel on `conn`.
pub(super) async fn session(
    conn: &Handle<Checker>,
    call: &Call<'_>,
    input: &mut Input<'_>,
) -> Result<ExecOutput, Failure> {
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
                super::super::stream::excerpt(&String::from_utf8_lossy(&stderr))
            ),
        ))),
    }
}

/// What a session's standard input is read from.
enum Source {
    Bytes(Vec<u8>),
    File(tokio::fs::File),
}
