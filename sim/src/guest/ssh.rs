//! The SSH servers of guests and nodes (russh), with public-key auth only.
//!
//! Contract: a guest accepts exactly the keys its user-data authorised for each user; a
//! node accepts `root` with the operator key and the configured keys. Exec requests run
//! through [`super::commands`]; a node command that reads stdin (an upload) streams it
//! into its file as it arrives ([`super::upload`]) and the line ends at EOF; other node
//! commands run on a blocking thread (`sha256sum` of a large file takes seconds).
//! When a boot ends (reboot, stop) the listener closes and open sessions are
//! disconnected, as a real guest drops them. A "silent" guest accepts TCP and never
//! sends a banner. No threads: one accept task per server, one task per connection.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use russh::server::{Auth, Msg, Session};
use russh::{Channel, ChannelId};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use super::GuestIdent;
use super::commands::{self, Action, Outcome};
use crate::sim::{Sim, lock};

/// sshd config for a host key.
pub fn server_config(key: russh::keys::PrivateKey) -> russh::server::Config {
    russh::server::Config {
        server_id: russh::SshId::Standard("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3".into()),
        keys: vec![key],
        auth_rejection_time: Duration::from_millis(200),
        auth_rejection_time_initial: Some(Duration::ZERO),
        inactivity_timeout: Some(Duration::from_secs(900)),
        // Large enough that an upload is not throttled by flow control on loopback.
        window_size: 16 << 20,
        channel_buffer_size: 16,
        methods: russh::MethodSet::from(&[russh::MethodKind::PublicKey][..]),
        ..Default::default()
    }
}

#[derive(Clone)]
enum Role {
    Guest { vmid: u32, generation: u64, ident: Arc<GuestIdent> },
    Node { node: String, authorized: Arc<Vec<russh::keys::PublicKey>> },
}

struct Handler {
    sim: Arc<Sim>,
    role: Role,
    user: String,
    pending: HashMap<ChannelId, Box<super::node_cmd::Streaming>>,
}

fn key_allowed(list: &[russh::keys::PublicKey], key: &russh::keys::PublicKey) -> bool {
    list.iter().any(|k| k.key_data() == key.key_data())
}

impl Handler {
    fn allowed(&self, user: &str, key: &russh::keys::PublicKey) -> bool {
        match &self.role {
            Role::Guest { ident, .. } => ident.authorized.get(user).is_some_and(|l| key_allowed(l, key)),
            Role::Node { authorized, .. } => user == "root" && key_allowed(authorized, key),
        }
    }

    fn finish(&self, channel: ChannelId, out: Outcome, session: &mut Session) -> Result<(), russh::Error> {
        let handle = session.handle();
        let sim = self.sim.clone();
        let role = self.role.clone();
        tokio::spawn(async move {
            if let Action::WaitCloudInit { until, json, long } = out.action {
                tokio::time::sleep_until(until).await;
                if let Role::Guest { vmid, generation, .. } = role {
                    let o = commands::cloud_init_status(&sim, vmid, generation, json, long);
                    send(&sim, &handle, channel, o).await;
                }
                return;
            }
            let action = out.action;
            if let (Action::Reboot, Role::Guest { vmid, .. }) = (action, &role) {
                // From the answer on, the guest takes no new session (its boot ends).
                super::going_down(&sim, *vmid);
            }
            send(&sim, &handle, channel, out).await;
            if let (Action::Reboot | Action::PowerOff, Role::Guest { vmid, .. }) = (action, role) {
                // Give the client the channel close first, as a real reboot races it.
                tokio::time::sleep(Duration::from_millis(20)).await;
                if action == Action::Reboot {
                    super::guest_reboot(&sim, vmid, sim.scaled(sim.cfg.timings.guest_reboot));
                } else {
                    crate::api::guest_poweroff(&sim, vmid);
                }
            }
        });
        Ok(())
    }
}

async fn send(sim: &Sim, handle: &russh::server::Handle, channel: ChannelId, out: Outcome) {
    // What the reply says about the cluster is written before the client hears it.
    sim.settle().await;
    if !out.stdout.is_empty() {
        let _ = handle.data(channel, out.stdout.into_bytes()).await;
    }
    if !out.stderr.is_empty() {
        let _ = handle.extended_data(channel, 1, out.stderr.into_bytes()).await;
    }
    if out.action == Action::PowerOff {
        // The connection drops with the guest: no exit status.
        return;
    }
    // `reboot` returns at once with exit 0 (systemd queues the job), then the
    // connection drops: what the real guest does.
    let _ = handle.exit_status_request(channel, out.code).await;
    let _ = handle.eof(channel).await;
    let _ = handle.close(channel).await;
}

impl russh::server::Handler for Handler {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: russh::server::PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if self.allowed(user, offer.public_key) { Auth::Accept } else { Auth::reject() })
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: russh::server::VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        if self.allowed(user, key.public_key) {
            self.user = user.to_string();
            Ok(Auth::Accept)
        } else {
            Ok(Auth::reject())
        }
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: russh::server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        reply.accept().await;
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let cmd = String::from_utf8_lossy(data).into_owned();
        session.channel_success(channel)?;
        let node = match &self.role {
            Role::Guest { vmid, generation, .. } => {
                let out = commands::run_guest(&self.sim, *vmid, *generation, &self.user, &cmd);
                return self.finish(channel, out, session);
            }
            Role::Node { node, .. } => node.clone(),
        };
        if super::node_cmd::node_reads_stdin(&cmd) {
            match super::node_cmd::start_node(&self.sim, &node, &cmd) {
                super::node_cmd::Start::Done(out) => return self.finish(channel, out, session),
                super::node_cmd::Start::Stream(up) => {
                    let hello = up.sink.greeting();
                    if !hello.is_empty() {
                        session.data(channel, hello)?;
                    }
                    self.pending.insert(channel, up);
                    return Ok(());
                }
            }
        }
        let (sim, handle) = (self.sim.clone(), session.handle());
        tokio::spawn(async move {
            let s = sim.clone();
            let out = tokio::task::spawn_blocking(move || super::node_cmd::run_node(&s, &node, &cmd))
                .await
                .unwrap_or_else(|_| Outcome::fail(1, "command failed\n"));
            send(&sim, &handle, channel, out).await;
        });
        Ok(())
    }

    async fn shell_request(&mut self, channel: ChannelId, session: &mut Session) -> Result<(), Self::Error> {
        session.channel_failure(channel)?;
        Ok(())
    }

    async fn data(&mut self, channel: ChannelId, data: &[u8], session: &mut Session) -> Result<(), Self::Error> {
        let Some(up) = self.pending.get_mut(&channel) else { return Ok(()) };
        let step = up.sink.data(&self.sim, data);
        if !step.reply.is_empty() {
            session.data(channel, step.reply)?;
        }
        if let Some(out) = step.done
            && let Some(up) = self.pending.remove(&channel)
        {
            // The command ended (a full disk): what follows the upload runs now.
            let out = up.finish(&self.sim, out);
            self.finish(channel, out, session)?;
        }
        Ok(())
    }

    async fn channel_eof(&mut self, channel: ChannelId, session: &mut Session) -> Result<(), Self::Error> {
        if let Some(up) = self.pending.remove(&channel) {
            let up = *up;
            let sim = self.sim.clone();
            let handle = session.handle();
            // Flushing and what follows the upload (an `mv`) off the session's task.
            tokio::spawn(async move {
                let s = sim.clone();
                let out = tokio::task::spawn_blocking(move || up.end(&s))
                    .await
                    .unwrap_or_else(|_| Outcome::fail(1, "command failed\n"));
                send(&sim, &handle, channel, out).await;
            });
        }
        Ok(())
    }
}

async fn serve_conn(
    sim: Arc<Sim>,
    stream: tokio::net::TcpStream,
    role: Role,
    config: Arc<russh::server::Config>,
    mut cancel: watch::Receiver<bool>,
) {
    let mut down = sim.shutdown.subscribe();
    // Replies are several small packets (data, exit status, EOF, close); without
    // TCP_NODELAY each may wait for the client's delayed ACK (~40 ms) once a
    // connection carries more than one command (a multiplexing master).
    let _ = stream.set_nodelay(true);
    let handler = Handler { sim: sim.clone(), role, user: String::new(), pending: HashMap::new() };
    let Ok(running) = russh::server::run_stream(config, stream, handler).await else { return };
    let handle = running.handle();
    tokio::select! {
        _ = running => {}
        _ = fired(&mut cancel) => {
            let _ = handle.disconnect(russh::Disconnect::ByApplication, "system is going down".into(), String::new()).await;
        }
        _ = fired(&mut down) => {}
    }
}

/// Start a guest's sshd at `up_at` on `addr`; ends when `cancel` fires.
#[allow(clippy::too_many_arguments, reason = "one guest's boot facts, each used once; a struct would only be unpacked")]
pub fn spawn_guest_sshd(
    sim: Arc<Sim>,
    vmid: u32,
    generation: u64,
    addr: SocketAddr,
    ident: Arc<GuestIdent>,
    up_at: Instant,
    mut cancel: watch::Receiver<bool>,
    silent: bool,
) {
    tokio::spawn(async move {
        let mut down = sim.shutdown.subscribe();
        let Some(listener) = listen_when_up(vmid, addr, up_at, &mut cancel, &mut down, "guest sshd").await else {
            return;
        };
        let bound = listener.local_addr().ok();
        {
            let mut guests = lock(&sim.guests);
            match guests.get_mut(&vmid) {
                Some(g) if g.generation == generation => g.ssh_addr = bound,
                _ => return,
            }
        }
        let role = Role::Guest { vmid, generation, ident: ident.clone() };
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = fired(&mut cancel) => return,
                _ = fired(&mut down) => return,
            };
            let Ok((stream, _)) = accepted else { continue };
            // Going down (a `reboot` answered a moment ago): no new sessions.
            if lock(&sim.guests).get(&vmid).is_none_or(|g| g.generation != generation || g.down) {
                continue;
            }
            let c = cancel.clone();
            if silent {
                // Hold the socket open without a banner until the boot ends.
                tokio::spawn(async move {
                    let mut c = c;
                    let _keep = stream;
                    let _ = fired(&mut c).await;
                });
                continue;
            }
            tokio::spawn(serve_conn(sim.clone(), stream, role.clone(), ident.ssh_config.clone(), c));
        }
    });
}

/// Bind a node's sshd now and serve it until shutdown; returns the bound address.
pub async fn spawn_node_sshd(
    sim: Arc<Sim>,
    node: String,
    addr: SocketAddr,
    key: russh::keys::PrivateKey,
    authorized: Vec<russh::keys::PublicKey>,
) -> Result<SocketAddr, std::io::Error> {
    // A cluster just shut down in this process may still hold the address briefly.
    let mut attempts = 0;
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempts < 25 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    };
    let bound = listener.local_addr()?;
    let config = Arc::new(server_config(key));
    let role = Role::Node { node, authorized: Arc::new(authorized) };
    let (_never_tx, never) = watch::channel(false);
    tokio::spawn(async move {
        let _keep = _never_tx;
        let mut down = sim.shutdown.subscribe();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = fired(&mut down) => return,
            };
            let Ok((stream, _)) = accepted else { continue };
            tokio::spawn(serve_conn(sim.clone(), stream, role.clone(), config.clone(), never.clone()));
        }
    });
    Ok(bound)
}

/// Resolves when the flag becomes true or its sender is gone (never holds the guard
/// across an await, so callers stay `Send`).
/// Wait until the guest's service is up (`up_at`), then bind `addr`. The
/// previous boot's listener may still be closing (an instant reboot): "address
/// in use" is retried briefly instead of leaving the guest unreachable. `None`
/// when the boot is cancelled, the simulator shuts down, or the address cannot
/// be bound (warned, naming `what`).
pub(super) async fn listen_when_up(
    vmid: u32,
    addr: SocketAddr,
    up_at: Instant,
    cancel: &mut watch::Receiver<bool>,
    down: &mut watch::Receiver<bool>,
    what: &str,
) -> Option<TcpListener> {
    tokio::select! {
        () = tokio::time::sleep_until(up_at) => {}
        _ = fired(cancel) => return None,
        _ = fired(down) => return None,
    }
    let mut attempts = 0;
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return Some(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempts < 100 => {
                attempts += 1;
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = fired(cancel) => return None,
                }
            }
            Err(e) => {
                tracing::warn!(vmid, %addr, error = %e, "{what} cannot bind; it will not answer");
                return None;
            }
        }
    }
}

pub async fn fired(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|x| *x).await.map(|_| ());
}
