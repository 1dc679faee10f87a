//! systemd's readiness protocol (`Type=notify`, sd_notify(3)): `cradle serve`
//! tells the service manager when it is ready and when it is stopping.
//!
//! Contract:
//! - [`take_from_env`] is called once, first thing in `cli::main` while the
//!   process has one thread: it reads `$NOTIFY_SOCKET` and removes it from the
//!   environment, so no child (ssh, terraform, ansible, a plugin's process)
//!   inherits it and can notify in cradle's name.
//! - [`send`] writes one datagram (`READY=1\nSTATUS=...`) to that socket: a
//!   path, or an abstract address written `@name`. Without `$NOTIFY_SOCKET`
//!   it does nothing. A failure to send is logged at debug level and is not
//!   an error: readiness is advice to the manager, and a manager that lost
//!   its socket will time the unit out on its own.
//!
//! - Between READY and STOPPING, [`Announcer`] keeps `STATUS=` (what
//!   `systemctl status cradle` prints) current: the listening address, the
//!   events running and waiting, and those done and failed since the start;
//!   sent when an event is accepted, starts or ends.
//!
//! Written here rather than with the `sd-notify` crate: the protocol is one
//! `sendto` of a text datagram, and that crate removes the variable only when
//! asked at send time, from a multi-threaded runtime (`remove_var` is unsafe
//! there); taking it at start-up is the point.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::store::EventStore;

/// The socket's address as `$NOTIFY_SOCKET` gave it, if it did.
static SOCKET: OnceLock<Option<String>> = OnceLock::new();

/// Take `$NOTIFY_SOCKET` out of the environment (module docs). Call while the
/// process is single-threaded; later calls keep the first value.
pub fn take_from_env() {
    let value = std::env::var("NOTIFY_SOCKET").ok().filter(|v| !v.is_empty());
    if std::env::var_os("NOTIFY_SOCKET").is_some() {
        // SAFETY: cli::main calls this before the runtime or any other thread
        // starts, so nothing reads the environment concurrently.
        #[allow(
            unsafe_code,
            reason = "remove_var while the process is single-threaded (cli::main, before the runtime)"
        )]
        unsafe {
            std::env::remove_var("NOTIFY_SOCKET");
        }
    }
    let _ = SOCKET.set(value);
}

/// Whether a service manager listens (`$NOTIFY_SOCKET` was set).
pub fn enabled() -> bool {
    SOCKET.get().is_some_and(Option::is_some)
}

/// Send `state` (newline-separated `KEY=value` assignments) to the service
/// manager, if there is one.
pub fn send(state: &str) {
    let Some(Some(socket)) = SOCKET.get() else { return };
    if let Err(e) = send_to(socket, state) {
        tracing::debug!(socket = %socket, error = %e, "cannot notify the service manager");
    }
}

fn send_to(socket: &str, state: &str) -> std::io::Result<()> {
    let addr = match socket.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt as _;
            SocketAddr::from_abstract_name(name.as_bytes())?
        }
        None => SocketAddr::from_pathname(socket)?,
    };
    let sender = UnixDatagram::unbound()?;
    let sent = sender.send_to_addr(state.as_bytes(), &addr)?;
    if sent != state.len() {
        return Err(std::io::Error::other(format!("sent {sent} of {} bytes", state.len())));
    }
    Ok(())
}

/// `STATUS=` text is one line: newlines in it would start new assignments.
pub fn status_line(text: &str) -> String {
    format!("STATUS={}", text.replace(['\n', '\r'], " "))
}

/// The service's load, as [`Announcer`] reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Pipelines running.
    pub running: usize,
    /// Events accepted, waiting for a pipeline slot.
    pub waiting: usize,
    /// Pipelines that succeeded since the start.
    pub done: u64,
    /// Pipelines that failed since the start.
    pub failed: u64,
}

/// Where the service is, for what [`Announcer`] may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Starting,
    Ready,
    Stopping,
}

/// Sends READY, STOPPING and, between them, a current `STATUS=` (module
/// docs). One lock orders the datagrams: no status before READY (resumed
/// events start while the service gets ready), none after STOPPING (the
/// pipelines finishing in the grace period would overwrite its text).
pub struct Announcer {
    addr: String,
    phase: Mutex<Phase>,
    done: AtomicU64,
    failed: AtomicU64,
}

impl Announcer {
    /// For a service listening on `addr`.
    pub fn new(addr: String) -> Announcer {
        Announcer { addr, phase: Mutex::new(Phase::Starting), done: AtomicU64::new(0), failed: AtomicU64::new(0) }
    }

    /// READY=1: listening, `resumed` unfinished events loaded and queued.
    pub fn ready(&self, resumed: usize) {
        let mut phase = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        send(&format!(
            "READY=1\n{}",
            status_line(&format!("listening on {}, {resumed} pending event(s) resumed", self.addr))
        ));
        *phase = Phase::Ready;
    }

    /// STOPPING=1: no new work; running pipelines get `grace`.
    pub fn stopping(&self, grace: std::time::Duration) {
        let mut phase = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        send(&format!(
            "STOPPING=1\n{}",
            status_line(&format!(
                "stopping: running pipelines get {}s to finish, the rest resume at the next start",
                grace.as_secs()
            ))
        ));
        *phase = Phase::Stopping;
    }

    /// Count a pipeline's end.
    pub fn finished(&self, ok: bool) {
        let counter = if ok { &self.done } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The load now, from the store's in-flight events and the counts.
    pub fn load(&self, store: &EventStore) -> Load {
        let (waiting, running) = store.in_flight();
        Load { running, waiting, done: self.done.load(Ordering::Relaxed), failed: self.failed.load(Ordering::Relaxed) }
    }

    /// The `STATUS=` text for `load`.
    pub fn text(&self, load: Load) -> String {
        let Load { running, waiting, done, failed } = load;
        format!(
            "listening on {}: {running} running, {waiting} waiting; {done} done, {failed} failed since the start",
            self.addr
        )
    }

    /// Send the current status, between READY and STOPPING, if a service
    /// manager listens.
    pub fn announce(&self, store: &EventStore) {
        if !enabled() {
            return;
        }
        let phase = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        if *phase == Phase::Ready {
            send(&status_line(&self.text(self.load(store))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_reaches_a_path_socket_and_an_abstract_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        send_to(path.to_str().unwrap(), "READY=1\nSTATUS=up").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=up");

        use std::os::linux::net::SocketAddrExt as _;
        let name = format!("cradle-notify-test-{}", std::process::id());
        let listener = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        send_to(&format!("@{name}"), "STOPPING=1").unwrap();
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn the_socket_is_taken_out_of_the_environment_so_children_cannot_notify() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        // nextest runs each test in its own process, single-threaded here.
        #[allow(unsafe_code, reason = "set_var in a test process of its own, before any thread reads it")]
        unsafe {
            std::env::set_var("NOTIFY_SOCKET", &path);
        }
        take_from_env();
        assert_eq!(std::env::var_os("NOTIFY_SOCKET"), None, "a child would inherit it");
        let child = std::process::Command::new("sh").args(["-c", "echo \"${NOTIFY_SOCKET-unset}\""]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&child.stdout).trim(), "unset");
        assert!(enabled());
        send("READY=1");
        let mut buf = [0u8; 16];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn the_status_counts_what_runs_waits_and_ended_since_the_start() {
        let a = Announcer::new("127.0.0.1:8080".into());
        a.finished(true);
        a.finished(true);
        a.finished(false);
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = EventStore::open(&dir.path().join("serve"), 10).unwrap();
        let load = a.load(&store);
        assert_eq!(load, Load { running: 0, waiting: 0, done: 2, failed: 1 });
        assert_eq!(
            a.text(Load { running: 2, waiting: 5, ..load }),
            "listening on 127.0.0.1:8080: 2 running, 5 waiting; 2 done, 1 failed since the start"
        );
    }

    #[test]
    fn a_status_line_stays_one_assignment() {
        assert_eq!(status_line("a\nREADY=1"), "STATUS=a READY=1");
    }
}
