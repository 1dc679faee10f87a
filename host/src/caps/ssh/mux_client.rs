//! A session through an existing master without an `ssh` process: cradle
//! speaks OpenSSH's multiplexing protocol (`PROTOCOL.mux`, version 4) on the
//! master's control socket itself. Starting `ssh` costs more CPU than the
//! command it carries (exec, dynamic linking, OpenSSL set-up), and a run makes
//! most of its calls through a master.
//!
//! Contract:
//! - Only a master already listening is used; anything short of an opened
//!   session (no socket, a stale one, a refused session, a protocol surprise)
//!   is [`Via::Unavailable`] and the caller runs `ssh`, which makes or repairs
//!   the master. Nothing has run on the remote then.
//! - The master is the same OpenSSH process that checked the pinned host key;
//!   its socket lives in the owner-only control directory and is keyed on the
//!   pin ([`super::mux`]), and it checks that the peer is the same user.
//! - stdin is `/dev/null` or a pipe fed with the given bytes; stdout and stderr
//!   are pipes read into capped buffers, exactly as with an `ssh` child. The
//!   outcome is the exit status the master reports. A session that ends
//!   without one is exit 255 when the master lives on (the remote command died
//!   of a signal; `ssh` says the same) and a `transient` error when the master
//!   is gone (its connection died): the command may have run.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

use super::stream::{Capped, DRAIN_GRACE, spawn_reader, take};
use super::{ExecOutput, Target, show_command};
use crate::contract::{CapError, ErrorKind};

const MUX_MSG_HELLO: u32 = 0x0000_0001;
const MUX_C_NEW_SESSION: u32 = 0x1000_0002;
const MUX_S_PERMISSION_DENIED: u32 = 0x8000_0002;
const MUX_S_FAILURE: u32 = 0x8000_0003;
const MUX_S_EXIT_MESSAGE: u32 = 0x8000_0004;
const MUX_S_SESSION_OPENED: u32 = 0x8000_0006;
const MUX_S_TTY_ALLOC_FAIL: u32 = 0x8000_0008;
const MUX_C_TERMINATE: u32 = 0x1000_0005;
const MUX_C_STOP_LISTENING: u32 = 0x1000_0009;
const MUX_S_OK: u32 = 0x8000_0001;
const MUX_VERSION: u32 = 4;
/// Largest control message accepted from the master.
const MAX_PACKET: usize = 256 * 1024;
/// How long the master may take to answer the hello and the session request.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// What a call through a master came to.
pub(crate) enum Via {
    /// The session ran (or was lost part-way: an error).
    Ran(Result<ExecOutput, CapError>),
    /// No session was opened; run `ssh` instead.
    Unavailable,
}

/// Runs `command` through the master at `socket` (see the module docs).
pub(crate) async fn exec(socket: &Path, t: &Target, command: &str, stdin: Option<&[u8]>, timeout: Duration) -> Via {
    let Ok(mut sock) = UnixStream::connect(socket).await else { return Via::Unavailable };
    match tokio::time::timeout(OPEN_TIMEOUT.min(timeout), hello(&mut sock)).await {
        Ok(Ok(true)) => {}
        _ => return Via::Unavailable,
    }
    // From here the master may have started the command.
    let opened = tokio::time::timeout(OPEN_TIMEOUT.min(timeout), open_session(&mut sock, command)).await;
    let (sid, pipes) = match opened {
        Ok(Ok(Some(v))) => v,
        // Refused before opening: nothing ran.
        Ok(Ok(None)) => return Via::Unavailable,
        Ok(Err(e)) => return Via::Ran(Err(lost(t, command, &e.to_string()))),
        Err(_) => return Via::Ran(Err(lost(t, command, "the master did not answer the session request"))),
    };
    let Pipes { stdin_tx, stdout_rx, stderr_rx } = pipes;
    let stdout = Arc::new(Mutex::new(Capped::default()));
    let stderr = Arc::new(Mutex::new(Capped::default()));
    let readers = [spawn_reader(stdout_rx, stdout.clone()), spawn_reader(stderr_rx, stderr.clone())];
    let writer = match (stdin_tx, stdin) {
        (Some(mut tx), Some(data)) => {
            let data = data.to_vec();
            Some(tokio::spawn(async move {
                let _ = tx.write_all(&data).await;
            }))
        }
        _ => None,
    };
    let waited = tokio::time::timeout(timeout, exit_status(&mut sock, sid)).await;
    if let Some(w) = writer {
        w.abort();
    }
    let code = match waited {
        Ok(code) => code,
        Err(_) => {
            for r in &readers {
                r.abort();
            }
            // Dropping the control connection makes the master close the session.
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
    for r in readers {
        let abort = r.abort_handle();
        if tokio::time::timeout(DRAIN_GRACE, r).await.is_err() {
            abort.abort();
        }
    }
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
    Via::Ran(Ok(ExecOutput { exit_code: Some(code as i32), stdout: take(&stdout), stderr }))
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

struct Pipes {
    stdin_tx: Option<pipe::Sender>,
    stdout_rx: pipe::Receiver,
    stderr_rx: pipe::Receiver,
}

/// The hello exchange: whether the master speaks our version.
async fn hello(sock: &mut UnixStream) -> io::Result<bool> {
    let mut hello = Vec::new();
    put_u32(&mut hello, MUX_MSG_HELLO);
    put_u32(&mut hello, MUX_VERSION);
    write_packet(sock, &hello).await?;
    let theirs = read_packet(sock).await?;
    let mut r = Reader(&theirs);
    Ok(r.u32()? == MUX_MSG_HELLO && r.u32()? == MUX_VERSION)
}

/// Session request, the three descriptors, and the master's answer:
/// `Ok(None)` when it refused to open a session.
async fn open_session(sock: &mut UnixStream, command: &str) -> io::Result<Option<(u32, Pipes)>> {
    let request_id = 1;
    let mut m = Vec::new();
    put_u32(&mut m, MUX_C_NEW_SESSION);
    put_u32(&mut m, request_id);
    put_string(&mut m, b""); // reserved
    put_u32(&mut m, 0); // tty
    put_u32(&mut m, 0); // X11 forwarding
    put_u32(&mut m, 0); // agent forwarding
    put_u32(&mut m, 0); // subsystem
    put_u32(&mut m, 0xffff_ffff); // no escape character
    put_string(&mut m, b""); // terminal type
    put_string(&mut m, command.as_bytes());
    write_packet(sock, &m).await?;

    let (stdin_remote, stdin_tx): (OwnedFd, Option<pipe::Sender>) = {
        let (rx, tx) = std::io::pipe()?;
        (OwnedFd::from(rx), Some(pipe::Sender::from_owned_fd(OwnedFd::from(tx))?))
    };
    let (out_rx, out_tx) = std::io::pipe()?;
    let (err_rx, err_tx) = std::io::pipe()?;
    let out_tx = OwnedFd::from(out_tx);
    let err_tx = OwnedFd::from(err_tx);
    for fd in [stdin_remote.as_raw_fd(), out_tx.as_raw_fd(), err_tx.as_raw_fd()] {
        loop {
            sock.writable().await?;
            match sock.try_io(Interest::WRITABLE, || send_fd(sock_fd(sock), fd)) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
    // The master holds its own copies now; ours would keep the streams open.
    drop((stdin_remote, out_tx, err_tx));
    let stdout_rx = pipe::Receiver::from_owned_fd(OwnedFd::from(out_rx))?;
    let stderr_rx = pipe::Receiver::from_owned_fd(OwnedFd::from(err_rx))?;

    let reply = read_packet(sock).await?;
    let mut r = Reader(&reply);
    let kind = r.u32()?;
    if r.u32()? != request_id {
        return Ok(None);
    }
    match kind {
        MUX_S_SESSION_OPENED => {
            let sid = r.u32()?;
            Ok(Some((sid, Pipes { stdin_tx, stdout_rx, stderr_rx })))
        }
        MUX_S_PERMISSION_DENIED | MUX_S_FAILURE => Ok(None),
        _ => Ok(None),
    }
}

/// Reads until the master closes the control connection (the session is
/// over): the exit status it reported for `sid`, if any.
async fn exit_status(sock: &mut UnixStream, sid: u32) -> Option<u32> {
    let mut code = None;
    while let Ok(p) = read_packet(sock).await {
        let mut r = Reader(&p);
        match r.u32() {
            Ok(MUX_S_EXIT_MESSAGE) => {
                if r.u32().ok() == Some(sid) {
                    code = r.u32().ok();
                }
            }
            Ok(MUX_S_TTY_ALLOC_FAIL) => {}
            _ => break,
        }
    }
    code
}

fn sock_fd(sock: &UnixStream) -> RawFd {
    sock.as_raw_fd()
}

/// Sends `fd` over the unix socket `sock` with one data byte (OpenSSH's `mm_send_fd`).
#[allow(unsafe_code, reason = "sendmsg(2) with SCM_RIGHTS has no safe std API")]
fn send_fd(sock: RawFd, fd: RawFd) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // Aligned for `cmsghdr`, and larger than CMSG_SPACE(sizeof(int)).
    let mut control = [0u64; 8];
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    debug_assert!(space <= std::mem::size_of_val(&control));
    // SAFETY: an all-zero msghdr is valid; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg_control points at `space` writable, aligned bytes, so the first
    // header exists and its data has room for one descriptor.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    // SAFETY: `msg` is fully initialised; MSG_NOSIGNAL turns a closed peer into EPIPE.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_be_bytes());
}

fn put_string(buf: &mut Vec<u8>, s: &[u8]) {
    put_u32(buf, s.len() as u32);
    buf.extend_from_slice(s);
}

async fn write_packet(sock: &mut UnixStream, body: &[u8]) -> io::Result<()> {
    let mut p = Vec::with_capacity(body.len() + 4);
    put_u32(&mut p, body.len() as u32);
    p.extend_from_slice(body);
    sock.write_all(&p).await
}

async fn read_packet(sock: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    sock.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_PACKET {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "oversized mux packet"));
    }
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body).await?;
    Ok(body)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u32(&mut self) -> io::Result<u32> {
        let Some((head, rest)) = self.0.split_first_chunk::<4>() else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "short mux packet"));
        };
        self.0 = rest;
        Ok(u32::from_be_bytes(*head))
    }
}

/// What [`control`] asks a master to do.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Control {
    /// `ssh -O stop`: remove the socket now, exit after the sessions in flight.
    Stop,
    /// `ssh -O exit`: exit now, ending its sessions.
    Exit,
}

/// Sends `op` to the master at `socket` (blocking, at most about a second):
/// whether it said yes. `false` when there is no master or it did not answer.
pub(crate) fn control(socket: &Path, op: Control) -> bool {
    control_io(socket, op).unwrap_or(false)
}

fn control_io(socket: &Path, op: Control) -> io::Result<bool> {
    use std::io::{Read, Write};
    let mut sock = std::os::unix::net::UnixStream::connect(socket)?;
    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
    sock.set_write_timeout(Some(Duration::from_secs(1)))?;
    let packet = |body: &[u8]| {
        let mut p = Vec::with_capacity(body.len() + 4);
        put_u32(&mut p, body.len() as u32);
        p.extend_from_slice(body);
        p
    };
    let read = |sock: &mut std::os::unix::net::UnixStream| -> io::Result<Vec<u8>> {
        let mut len = [0u8; 4];
        sock.read_exact(&mut len)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_PACKET {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "oversized mux packet"));
        }
        let mut body = vec![0u8; len];
        sock.read_exact(&mut body)?;
        Ok(body)
    };
    let mut hello = Vec::new();
    put_u32(&mut hello, MUX_MSG_HELLO);
    put_u32(&mut hello, MUX_VERSION);
    sock.write_all(&packet(&hello))?;
    let theirs = read(&mut sock)?;
    let mut r = Reader(&theirs);
    if r.u32()? != MUX_MSG_HELLO || r.u32()? != MUX_VERSION {
        return Ok(false);
    }
    let mut m = Vec::new();
    put_u32(
        &mut m,
        match op {
            Control::Stop => MUX_C_STOP_LISTENING,
            Control::Exit => MUX_C_TERMINATE,
        },
    );
    put_u32(&mut m, 1);
    sock.write_all(&packet(&m))?;
    let reply = read(&mut sock)?;
    let mut r = Reader(&reply);
    Ok(r.u32()? == MUX_S_OK && r.u32()? == 1)
}
