//! [`SshClient`]: runs OpenSSH's `ssh` with cradle's fixed options, bounds it
//! with a timeout, caps its output and turns its own failures (exit 255 with an
//! ssh diagnostic) into typed [`CapError`]s. With a control directory, calls to
//! one target share a master connection (see `mux`) and run on it
//! without an `ssh` process (`mux_client`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::task::JoinHandle;

use super::known_hosts::{KnownHosts, host_entry};
use super::stream::{Capped, excerpt, spawn_reader, take};
use super::transport::{Input, Transport, Trust, check_identity};
use super::{ClientKind, ExecOutput, SshSettings, Target, check_target, show_command};
use super::{mux, mux_client, native};
use crate::contract::{CapError, ErrorKind};

/// cradle's SSH client. Cheap to share (`Arc`). Without a control directory
/// every call is a new `ssh` process and connection; with one, a call runs as a
/// session on the target's master (`mux_client`), and the first call
/// (or one after the master ended) runs `ssh`, which makes the master. Dropping
/// the client releases its masters.
#[derive(Debug)]
pub struct SshClient {
    settings: SshSettings,
    known_hosts: KnownHosts,
    /// The control sockets this client has used (counted in [`mux::register`]),
    /// with their known_hosts entry.
    masters: Mutex<BTreeMap<PathBuf, String>>,
}

impl SshClient {
    /// A client for `settings`. Refuses an identity file that is missing or that
    /// group or others can read (with the `chmod 600` to run).
    pub fn new(settings: SshSettings) -> Result<SshClient, CapError> {
        if let Some(id) = &settings.identity {
            check_identity(id)?;
        }
        if let Some(dir) = &settings.control_dir {
            mux::check_control_dir(dir)?;
        }
        let known_hosts = KnownHosts::new(settings.known_hosts.clone());
        Ok(SshClient { settings, known_hosts, masters: Mutex::default() })
    }

    /// The settings this client was built with.
    pub fn settings(&self) -> &SshSettings {
        &self.settings
    }

    /// cradle's known_hosts.
    pub fn known_hosts(&self) -> &KnownHosts {
        &self.known_hosts
    }

    /// What a transport checks and reports against: the settings and the pins.
    fn trust(&self) -> Trust<'_> {
        Trust { settings: &self.settings, known_hosts: &self.known_hosts }
    }

    /// The transport of the configured client: OpenSSH with its masters, or
    /// the built-in client with its pool.
    fn transport(&self) -> &'static dyn Transport {
        match self.settings.client {
            ClientKind::OpenSsh => &mux::OpenSsh,
            ClientKind::Builtin { .. } => &native::Builtin,
        }
    }

    /// Pins `public_key` for `host`/`port` (see [`KnownHosts::trust`]); blocking file I/O.
    /// A change closes this client's masters for the host.
    pub fn trust_host_key(&self, host: &str, port: u16, public_key: &str) -> Result<bool, CapError> {
        let changed = self.known_hosts.trust(host, port, public_key)?;
        if changed {
            self.close_masters_for(host, port);
        }
        Ok(changed)
    }

    /// Pins the key of a server this process runs (see [`KnownHosts::pin_own_server`]);
    /// blocking file I/O. A change closes this client's masters for the host.
    pub fn pin_own_server_key(&self, host: &str, port: u16, public_key: &str) -> Result<bool, CapError> {
        let changed = self.known_hosts.pin_own_server(host, port, public_key)?;
        if changed {
            self.close_masters_for(host, port);
        }
        Ok(changed)
    }

    /// Removes the keys pinned for `host`/`port` (see [`KnownHosts::forget`]); blocking file I/O.
    /// A change closes this client's masters for the host.
    pub fn forget_host_key(&self, host: &str, port: u16) -> Result<bool, CapError> {
        let changed = self.known_hosts.forget(host, port)?;
        if changed {
            self.close_masters_for(host, port);
        }
        Ok(changed)
    }

    /// Where calls to `t` share a connection: the control socket (OpenSSH) or
    /// the built-in client's pool key. `None` without sharing or when nothing
    /// is pinned for the host. Keyed on the pins (see `mux`).
    pub(crate) fn control_path(&self, t: &Target) -> Result<Option<PathBuf>, CapError> {
        let Some(dir) = self.transport().key_dir(&self.settings) else { return Ok(None) };
        let material = self.known_hosts.pin_material(&t.host, t.port)?;
        if material.is_empty() {
            return Ok(None);
        }
        let port = t.port.to_string();
        let host = t.host.to_ascii_lowercase();
        let identity = self.settings.identity.as_deref().map(|p| p.as_os_str().as_bytes()).unwrap_or(b"");
        let mut parts: Vec<&[u8]> = vec![
            mux::nonce().as_bytes(),
            self.settings.known_hosts.as_os_str().as_bytes(),
            identity,
            t.user.as_bytes(),
            host.as_bytes(),
            port.as_bytes(),
        ];
        parts.extend(material.iter().map(|l| l.as_bytes()));
        Ok(Some(mux::socket_path(dir, &parts)))
    }

    /// Counts this client as a user of the shared connection at `control`
    /// (once), so it lives until the last of its clients is dropped.
    fn note_master(&self, t: &Target, control: Option<&Path>) {
        if let Some(p) = control {
            let mut m = self.masters.lock().unwrap_or_else(|e| e.into_inner());
            if !m.contains_key(p) {
                mux::register(p);
                m.insert(p.to_path_buf(), host_entry(&t.host, t.port));
            }
        }
    }

    /// A call through the built-in client, on the target's shared connection.
    async fn exec_builtin(
        &self,
        t: &Target,
        command: &str,
        input: Input<'_>,
        timeout: Duration,
    ) -> Result<ExecOutput, CapError> {
        let control = self.control_path(t)?;
        self.note_master(t, control.as_deref());
        native::exec(&self.trust(), control.as_deref(), t, command, input, timeout).await
    }

    /// Stops the masters this client used for `host`/`port` (blocking). They
    /// stay counted as used until the client is dropped.
    fn close_masters_for(&self, host: &str, port: u16) {
        let entry = host_entry(host, port);
        let paths: Vec<PathBuf> = {
            let m = self.masters.lock().unwrap_or_else(|e| e.into_inner());
            m.iter().filter(|(_, e)| **e == entry).map(|(p, _)| p.clone()).collect()
        };
        self.transport().stop(&paths);
    }

    /// The options that make a connection as strict as cradle's own: no
    /// prompts, host keys only from cradle's known_hosts, only the given
    /// identity. Shared with the `ssh` that `ansible-playbook` runs.
    pub(crate) fn trust_options(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("BatchMode", "yes".into()),
            ("StrictHostKeyChecking", "yes".into()),
            ("UserKnownHostsFile", self.settings.known_hosts.clone().into_os_string()),
            ("GlobalKnownHostsFile", "/dev/null".into()),
            ("UpdateHostKeys", "no".into()),
            ("CheckHostIP", "no".into()),
            ("IdentitiesOnly", "yes".into()),
            ("ConnectTimeout", self.settings.connect_timeout.as_secs().max(1).to_string().into()),
        ]
    }

    /// The `ssh` arguments for `command` on `t` through the master at `control`
    /// (none: a connection of its own). No secret is ever among them.
    pub(crate) fn args(&self, t: &Target, command: &str, control: Option<&Path>) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut opt = |k: &str, v: OsString| {
            a.push("-o".into());
            let mut s = OsString::from(format!("{k}="));
            s.push(v);
            a.push(s);
        };
        for (k, v) in self.trust_options() {
            opt(k, v);
        }
        opt("ServerAliveInterval", "15".into());
        opt("ServerAliveCountMax", "3".into());
        match control {
            Some(path) => {
                opt("ControlMaster", "auto".into());
                opt("ControlPath", path.as_os_str().to_owned());
                opt("ControlPersist", mux::CONTROL_PERSIST_S.to_string().into());
            }
            None => {
                opt("ControlMaster", "no".into());
                opt("ControlPath", "none".into());
            }
        }
        let mut args: Vec<OsString> = vec!["-F".into(), "/dev/null".into(), "-T".into()];
        args.append(&mut a);
        if let Some(id) = &self.settings.identity {
            args.push("-i".into());
            args.push(id.clone().into_os_string());
        }
        args.push("-p".into());
        args.push(t.port.to_string().into());
        args.push(format!("{}@{}", t.user, t.host).into());
        args.push("--".into());
        args.push(command.into());
        args
    }

    /// Runs `command` on `t`, feeding `stdin` (closed when `None`), killed after
    /// `timeout`. A remote non-zero exit is an [`ExecOutput`]; see the module docs
    /// for the errors.
    pub async fn exec(
        &self,
        t: &Target,
        command: &str,
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<ExecOutput, CapError> {
        check_target(t)?;
        if timeout.is_zero() {
            return Err(CapError::invalid(format!("ssh {t}: the timeout must be longer than 0 ms")));
        }
        if command.contains('\0') {
            return Err(CapError::invalid(format!("ssh {t}: the command contains a NUL byte")));
        }
        if self.settings.client != ClientKind::OpenSsh {
            return self.exec_builtin(t, command, Input::from(stdin), timeout).await;
        }
        let control = self.control_path(t)?;
        self.note_master(t, control.as_deref());
        let started = Instant::now();
        let mut opening = None;
        if let Some(p) = &control {
            if let mux_client::Via::Ran(result) = mux_client::exec(p, t, command, stdin, timeout).await {
                return self.through_master(p, t, result).await;
            }
            // No master: this call makes it, unless another call is making it now.
            let lock = mux::opening_lock(p);
            let Ok(guard) = tokio::time::timeout(timeout, lock.lock_owned()).await else {
                return Err(CapError::new(
                    ErrorKind::Transient,
                    format!(
                        "ssh {t}: `{}` did not start within {} ms: another call was still connecting to the host",
                        show_command(command),
                        timeout.as_millis()
                    ),
                ));
            };
            opening = Some(guard);
            if let mux_client::Via::Ran(result) = mux_client::exec(p, t, command, stdin, timeout).await {
                return self.through_master(p, t, result).await;
            }
        }
        let limit = timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
        let run = self.run(t, command, Input::from(stdin), timeout, limit, control.as_deref());
        tokio::pin!(run);
        let ran = loop {
            // Let the waiting calls in as soon as the master listens, not when
            // this call's command is done.
            let listening = async {
                match (&opening, &control) {
                    (Some(_), Some(p)) if !p.exists() => tokio::time::sleep(Duration::from_millis(10)).await,
                    (Some(_), Some(_)) => {}
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                r = &mut run => break r,
                () = listening => if control.as_ref().is_some_and(|p| p.exists()) { opening = None },
            }
        };
        let result = match ran {
            Ok(out) if out.exit_code == Some(255) => {
                match self.classify(t, command, &String::from_utf8_lossy(&out.stderr)) {
                    Some(e) => Err(e),
                    None => Ok(out),
                }
            }
            other => other,
        };
        if let (Err(e), Some(p)) = (&result, &control)
            && e.kind == ErrorKind::Transient
        {
            // The connection behind the master may be dead (a rebooted or vanished
            // guest): the next call connects anew.
            mux::close_master(p).await;
        }
        result
    }

    /// The outcome of a call the master ran: its exit status is the remote
    /// command's own. After a failed session the shared connection is kept
    /// only if it still works (a `true` answers within [`PROBE_TIMEOUT`]): a
    /// command that merely ran past its timeout loses its own session, and the
    /// other runs' sessions on the connection (e.g. every VM's snippet upload
    /// to one node) carry on; a dead or hung connection is ended, so the next
    /// call connects anew.
    async fn through_master(
        &self,
        p: &Path,
        t: &Target,
        result: Result<ExecOutput, CapError>,
    ) -> Result<ExecOutput, CapError> {
        if result.is_err() {
            let works = mux_client::master_lives(p).await
                && matches!(
                    mux_client::exec(p, t, "true", None, PROBE_TIMEOUT).await,
                    mux_client::Via::Ran(Ok(ExecOutput { exit_code: Some(0), .. }))
                );
            if !works {
                mux::close_master(p).await;
            }
        }
        result
    }

    /// Runs `command` on `t` with the local file `input` as its standard
    /// input, read by `ssh` itself on a connection of its own, so a file of
    /// any size streams without passing through cradle's memory. Killed after `timeout`; errors as [`SshClient::exec`]'s.
    pub async fn exec_with_file(
        &self,
        t: &Target,
        command: &str,
        input: std::fs::File,
        timeout: Duration,
    ) -> Result<ExecOutput, CapError> {
        check_target(t)?;
        if command.contains('\0') {
            return Err(CapError::invalid(format!("ssh {t}: the command contains a NUL byte")));
        }
        if self.settings.client != ClientKind::OpenSsh {
            // In-process, the shared connection carries the data as well as any.
            return self.exec_builtin(t, command, Input::File(input), timeout).await;
        }
        // A connection of its own, not a session on the target's master: the
        // bulk data then goes straight from this `ssh` to the server instead
        // of through the master process (one more key exchange, nothing
        // against gigabytes; docs/BENCHMARKS.md).
        let out = self.run(t, command, Input::File(input), timeout, timeout, None).await?;
        if out.exit_code == Some(255)
            && let Some(e) = self.classify(t, command, &String::from_utf8_lossy(&out.stderr))
        {
            return Err(e);
        }
        Ok(out)
    }

    /// Runs `true` on `t` until a session authenticates, or fails with
    /// `transient` after `timeout`. Authentication and host-key failures end
    /// the wait at once (waiting cannot fix them).
    ///
    /// A guest's sshd must never see what sshguard or fail2ban count as an
    /// attack (a connection that sends no identification, or many that end
    /// before authenticating), and a booting guest should be seen soon after
    /// its sshd listens. So, without a master for the target: while the port
    /// refuses connections it is probed with TCP connects, which the guest's
    /// kernel answers and its sshd never sees (every 100 ms at first, slowing
    /// to 1 s, so a long boot costs a few dozen probes, not hundreds). The
    /// probe that is accepted identifies itself as an SSH client before it
    /// closes ([`tcp_probe`]): at most one unauthenticated connection per boot.
    /// From then on the port is only reached by real `ssh` attempts, which back
    /// off from 200 ms to 3 s; an attempt refused at the TCP level (the guest
    /// rebooted) goes back to probing.
    pub async fn wait_for(&self, t: &Target, timeout: Duration) -> Result<(), CapError> {
        check_target(t)?;
        let started = Instant::now();
        let mut backoff = Duration::from_millis(200);
        let mut probe_every = PROBE_INTERVAL;
        let mut last = String::from("no attempt finished");
        // A master, or an accepted probe, makes an `ssh` attempt the next step.
        let mut open = self.control_path(t)?.is_some_and(|p| self.transport().connected(&p));
        loop {
            let remaining = timeout.saturating_sub(started.elapsed());
            if remaining.is_zero() {
                return Err(CapError::new(
                    ErrorKind::Transient,
                    format!("ssh {t}: no SSH session within {} ms; last attempt: {last}", timeout.as_millis()),
                ));
            }
            if !open {
                if tcp_probe(t, probe_every.min(remaining)).await == Some(false) {
                    last = format!("ssh {t}: the port refused the connection (TCP probe)");
                    tokio::time::sleep(probe_every.min(timeout.saturating_sub(started.elapsed()))).await;
                    probe_every = (probe_every * 5 / 4).min(MAX_PROBE_INTERVAL);
                    continue;
                }
                // Accepted, or no answer in time (a slow network is not a closed port).
                open = true;
            }
            let attempt = remaining.min(self.settings.connect_timeout + Duration::from_secs(10));
            match self.exec(t, "true", None, attempt).await {
                Ok(out) if out.exit_code == Some(0) => return Ok(()),
                Ok(out) => last = format!("`true` exited with {:?}", out.exit_code),
                Err(e) if e.kind == ErrorKind::Transient => {
                    if e.message.contains("Connection refused") {
                        // sshd went away (a reboot): probe quietly until it is back.
                        open = false;
                        probe_every = PROBE_INTERVAL;
                        last = e.message;
                        continue;
                    }
                    last = e.message;
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(backoff.min(timeout.saturating_sub(started.elapsed()))).await;
            backoff = (backoff * 2).min(Duration::from_secs(3));
        }
    }

    /// Spawns `ssh`, writes stdin, waits (at most `limit`, what is left of the
    /// call's `timeout`), collects capped output.
    async fn run(
        &self,
        t: &Target,
        command: &str,
        stdin: Input<'_>,
        timeout: Duration,
        limit: Duration,
        control: Option<&Path>,
    ) -> Result<ExecOutput, CapError> {
        let mut cmd = Command::new("ssh");
        cmd.args(self.args(t, command, control))
            .stdin(match &stdin {
                Input::Closed => Stdio::null(),
                Input::Bytes(_) => Stdio::piped(),
                Input::File(f) => Stdio::from(f.try_clone().map_err(|e| {
                    CapError::failed(format!("ssh {t}: cannot hand the file to `ssh` as its input: {e}"))
                })?),
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            CapError::failed(format!(
                "ssh {t}: cannot start `ssh` ({e}); install the OpenSSH client (Debian: openssh-client)"
            ))
        })?;
        let stdout = Arc::new(Mutex::new(Capped::default()));
        let stderr = Arc::new(Mutex::new(Capped::default()));
        let readers = [
            child.stdout.take().map(|s| spawn_reader(s, stdout.clone())),
            child.stderr.take().map(|s| spawn_reader(s, stderr.clone())),
        ];
        let writer = match (child.stdin.take(), stdin) {
            (Some(mut pipe), Input::Bytes(data)) => {
                let data = data.to_vec();
                // A write error (the remote closed stdin early) shows in the outcome.
                Some(tokio::spawn(async move {
                    let _ = pipe.write_all(&data).await;
                    let _ = pipe.shutdown().await;
                }))
            }
            _ => None,
        };
        let deadline = tokio::time::Instant::now() + limit;
        let waited = tokio::time::timeout(limit, child.wait()).await;
        if let Some(w) = writer {
            w.abort();
        }
        let status = match waited {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => {
                abort_all(readers);
                return Err(CapError::failed(format!("ssh {t}: cannot wait for `ssh`: {e}")));
            }
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                abort_all(readers);
                return Err(CapError::new(
                    ErrorKind::Transient,
                    format!(
                        "ssh {t}: `{}` did not finish within {} ms and ssh was killed; the command may have partly run (or still run) on the remote",
                        show_command(command),
                        timeout.as_millis()
                    ),
                ));
            }
        };
        // `ssh` may exit before its output ends (a process it started holds the
        // streams, or a master still writes the session's last output into our
        // pipes). The streams are read to their end within what is left of the
        // call's time; one that does not end is an error, never a shortened
        // output reported as success (issue 10's "printed no JSON (exit 0)").
        for r in readers.into_iter().flatten() {
            let abort = r.abort_handle();
            if tokio::time::timeout_at(deadline, r).await.is_err() {
                abort.abort();
                return Err(CapError::new(
                    ErrorKind::Transient,
                    format!(
                        "ssh {t}: `{}` exited with {} but its output did not end within {} ms (something it \
                         started may still hold it open); the output is incomplete, so it is not used",
                        show_command(command),
                        status.code().map_or_else(|| "a signal".to_string(), |c| c.to_string()),
                        timeout.as_millis()
                    ),
                ));
            }
        }
        Ok(ExecOutput { exit_code: status.code(), stdout: take(&stdout), stderr: take(&stderr) })
    }

    /// The error for an `ssh` exit 255 whose stderr is one of ssh's own
    /// diagnostics; `None` when it looks like the remote command's own 255.
    fn classify(&self, t: &Target, command: &str, stderr: &str) -> Option<CapError> {
        let said = excerpt(stderr);
        let has = |p: &str| stderr.contains(p);
        if has("REMOTE HOST IDENTIFICATION HAS CHANGED") || has("Host key for") && has("has changed") {
            let offered = stderr
                .split_whitespace()
                .find(|w| w.starts_with("SHA256:"))
                .map(|f| f.trim_end_matches('.').to_string())
                .unwrap_or_else(|| "unknown".into());
            return Some(self.trust().changed_key_error(t, &offered));
        }
        if has("host key is known for") || has("Host key verification failed") {
            return Some(self.trust().unknown_key_error(t, &said));
        }
        if has("Permission denied (") || has("Too many authentication failures") {
            return Some(self.trust().auth_error(t, &said));
        }
        if has("Load key") || has("UNPROTECTED PRIVATE KEY FILE") || has("no such identity") {
            return Some(CapError::failed(format!("ssh {t}: the identity file cannot be used ({said})")));
        }
        const TRANSIENT: [&str; 14] = [
            "Connection refused",
            "Connection timed out",
            "Connection reset",
            "Connection closed",
            "closed by remote host",
            "timed out",
            "Timeout, server",
            "No route to host",
            "Network is unreachable",
            "kex_exchange_identification",
            "Broken pipe",
            "client_loop: send disconnect",
            "Temporary failure in name resolution",
            "read from master failed",
        ];
        if TRANSIENT.iter().any(|p| has(p)) {
            return Some(CapError::new(
                ErrorKind::Transient,
                format!("ssh {t}: connection failed while running `{}` ({said})", show_command(command)),
            ));
        }
        if has("Could not resolve hostname") {
            return Some(CapError::failed(format!(
                "ssh {t}: the host name does not resolve; check the inventory address ({said})"
            )));
        }
        if stderr.lines().any(|l| l.starts_with("ssh: ") || l.contains("ssh_dispatch") || l.starts_with("Bad ")) {
            return Some(CapError::failed(format!("ssh {t}: ssh failed ({said})")));
        }
        None
    }
}

impl Drop for SshClient {
    /// Releases the masters this client used; those no other client uses are
    /// stopped (the end of a run).
    fn drop(&mut self) {
        let masters = std::mem::take(self.masters.get_mut().unwrap_or_else(|e| e.into_inner()));
        if !masters.is_empty() {
            let transport = self.transport();
            mux::release(&masters.into_keys().collect::<Vec<_>>(), |unused| transport.stop(unused));
        }
    }
}

/// How often [`SshClient::wait_for`] first probes a port that refuses connections...
const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// ...and how often at most after a while.
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// How long a shared connection has to run `true` after one of its sessions
/// failed before it counts as dead and is ended.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// What an accepted probe says it is (RFC 4253 §4.2: `SSH-protoversion-softwareversion`).
const PROBE_IDENT: &[u8] = b"SSH-2.0-cradle_wait\r\n";

/// Whether `t`'s port accepts a TCP connection: `Some(false)` when refused or
/// unreachable, `None` when neither happened within `limit` (unknown: a slow
/// network is not taken for a closed port). An accepted connection is not just
/// dropped (sshd would log "did not receive identification string", which
/// sshguard and fail2ban count as an attack): it sends an SSH identification
/// line and reads the server's before it closes, so the server's buffer holds
/// nothing unread and it sees an ordinary client hanging up before key exchange.
async fn tcp_probe(t: &Target, limit: Duration) -> Option<bool> {
    use tokio::io::AsyncReadExt;
    let mut stream = match tokio::time::timeout(limit, tokio::net::TcpStream::connect((t.host.as_str(), t.port))).await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(_)) => return Some(false),
        Err(_) => return None,
    };
    let polite = async {
        stream.write_all(PROBE_IDENT).await?;
        let mut banner = [0u8; 256];
        let mut seen = 0;
        while seen < banner.len() && !banner[..seen].contains(&b'\n') {
            let n = stream.read(&mut banner[seen..]).await?;
            if n == 0 {
                break;
            }
            seen += n;
        }
        stream.shutdown().await
    };
    // A guest that accepts and never speaks (a hung sshd) still counts as open.
    let _ = tokio::time::timeout(Duration::from_millis(500), polite).await;
    Some(true)
}

fn abort_all(readers: [Option<JoinHandle<()>>; 2]) {
    for r in readers.into_iter().flatten() {
        r.abort();
    }
}
