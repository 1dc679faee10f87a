//! Shared helpers for the simulator's integration tests: a pinned HTTPS client, task
//! polling, and a small russh client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cradle_sim::{Cluster, RunningCluster, SimConfig};
use serde_json::Value;

/// Start a cluster with `time_scale` and ephemeral node SSH ports.
pub async fn start(time_scale: f64, tweak: impl FnOnce(&mut SimConfig)) -> RunningCluster {
    let mut cfg = SimConfig::with_nodes(2);
    cfg.time_scale = time_scale;
    cfg.node_ssh_port = 0;
    cfg.guest_ssh_port = 0;
    tweak(&mut cfg);
    Cluster::start(cfg).await.expect("cluster starts")
}

/// An API client trusting only the simulator's CA.
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Api {
    pub fn new(c: &RunningCluster) -> Self {
        let ca = reqwest::Certificate::from_pem(c.ca_pem().as_bytes()).expect("CA parses");
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        Api { http, base: c.api_url(), token: c.token() }
    }

    /// Send a request; returns (status, body JSON).
    pub async fn call(&self, method: &str, path: &str, form: &[(&str, &str)]) -> (u16, Value) {
        let url = format!("{}{}", self.base, path);
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.http.request(m, url).header("Authorization", format!("PVEAPIToken={}", self.token));
        if method == "GET" {
            req = req.query(form);
        } else if !form.is_empty() {
            req = req.form(form);
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status().as_u16();
        let body = resp.json::<Value>().await.unwrap_or(Value::Null);
        (status, body)
    }

    pub async fn get(&self, path: &str) -> Value {
        let (s, b) = self.call("GET", path, &[]).await;
        assert_eq!(s, 200, "GET {path}: {b}");
        b["data"].clone()
    }

    /// POST expecting success; returns `data`.
    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Value {
        let (s, b) = self.call("POST", path, form).await;
        assert_eq!(s, 200, "POST {path}: {b}");
        b["data"].clone()
    }

    /// Poll a task until it stops; returns its status object.
    pub async fn wait_task(&self, upid: &str) -> Value {
        let node = upid.split(':').nth(1).expect("node in UPID");
        let path = format!("/nodes/{node}/tasks/{}/status", urlencode(upid));
        for _ in 0..6000 {
            let st = self.get(&path).await;
            if st["status"] == "stopped" {
                return st;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {upid} did not finish");
    }

    /// Run a task-returning POST and wait for it; returns the exit status.
    pub async fn run(&self, path: &str, form: &[(&str, &str)]) -> String {
        let upid = self.post(path, form).await;
        let st = self.wait_task(upid.as_str().expect("UPID")).await;
        st["exitstatus"].as_str().unwrap_or_default().to_string()
    }
}

pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A generated client key pair: (private key, OpenSSH public line).
pub fn client_key() -> (russh::keys::PrivateKey, String) {
    let seed: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(31).wrapping_add(rand_byte()));
    let key = russh::keys::PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed));
    let public = key.public_key().to_openssh().expect("public key");
    (key, public)
}

fn rand_byte() -> u8 {
    use std::sync::atomic::{AtomicU8, Ordering};
    static C: AtomicU8 = AtomicU8::new(1);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    (t as u8) ^ C.fetch_add(17, Ordering::Relaxed)
}

pub struct Client {
    seen: Arc<std::sync::Mutex<Option<russh::keys::PublicKey>>>,
}

impl russh::client::Handler for Client {
    type Error = russh::Error;
    async fn check_server_key(&mut self, key: &russh::keys::PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        if let russh::keys::PublicKeyOrCertificate::PublicKey { key, .. } = key {
            *self.seen.lock().expect("lock") = Some(key.clone());
        }
        Ok(true)
    }
}

/// Result of one exec.
#[derive(Debug)]
pub struct Exec {
    pub stdout: String,
    pub stderr: String,
    /// None when the connection dropped without an exit status.
    pub code: Option<u32>,
    pub host_key: Option<russh::keys::PublicKey>,
}

/// An authenticated SSH session (russh client).
pub type Session = russh::client::Handle<Client>;

/// Connect and authenticate with `key` as `user`; returns the session and the seen host key.
pub async fn ssh_connect(
    addr: SocketAddr,
    user: &str,
    key: &russh::keys::PrivateKey,
) -> Result<(Session, Arc<std::sync::Mutex<Option<russh::keys::PublicKey>>>), String> {
    let config =
        Arc::new(russh::client::Config { inactivity_timeout: Some(Duration::from_secs(30)), ..Default::default() });
    let seen = Arc::new(std::sync::Mutex::new(None));
    let mut session = tokio::time::timeout(
        Duration::from_secs(20),
        russh::client::connect(config, addr, Client { seen: seen.clone() }),
    )
    .await
    .map_err(|_| "connect timed out".to_string())?
    .map_err(|e| format!("connect: {e}"))?;
    let auth = session
        .authenticate_publickey(user, russh::keys::PrivateKeyWithHashAlg::new(Arc::new(key.clone()), None))
        .await
        .map_err(|e| format!("auth: {e}"))?;
    if !auth.success() {
        return Err("authentication rejected".into());
    }
    Ok((session, seen))
}

/// Connect, authenticate with `key` as `user`, run `cmd` with `stdin`.
/// Err = connection or authentication failure (the text says which).
pub async fn ssh_exec(
    addr: SocketAddr,
    user: &str,
    key: &russh::keys::PrivateKey,
    cmd: &str,
    stdin: &[u8],
) -> Result<Exec, String> {
    let (session, seen) = ssh_connect(addr, user, key).await?;
    let mut ch = session.channel_open_session().await.map_err(|e| format!("open: {e}"))?;
    ch.exec(true, cmd).await.map_err(|e| format!("exec: {e}"))?;
    if !stdin.is_empty() {
        ch.data(stdin).await.map_err(|e| format!("data: {e}"))?;
    }
    ch.eof().await.map_err(|e| format!("eof: {e}"))?;
    let mut out = Exec { stdout: String::new(), stderr: String::new(), code: None, host_key: None };
    while let Some(msg) = ch.wait().await {
        match msg {
            russh::ChannelMsg::Data { data } => out.stdout.push_str(&String::from_utf8_lossy(&data)),
            russh::ChannelMsg::ExtendedData { data, .. } => out.stderr.push_str(&String::from_utf8_lossy(&data)),
            russh::ChannelMsg::ExitStatus { exit_status } => out.code = Some(exit_status),
            _ => {}
        }
    }
    out.host_key = seen.lock().expect("lock").clone();
    Ok(out)
}

/// Wait until a guest's sshd is bound; returns its address.
pub async fn guest_addr(c: &RunningCluster, vmid: u32) -> SocketAddr {
    for _ in 0..6000 {
        if let Some(a) = c.guest_ssh_addr(vmid) {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("guest {vmid} never bound sshd");
}
