//! A throwaway OpenSSH server on 127.0.0.1 for the tests: its own host key
//! (made by [`generate_host_key`]), its own client key and `authorized_keys`,
//! all in a temporary directory. Killed when dropped.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{GeneratedHostKey, SshClient, SshSettings, Target, generate_host_key};

/// The server binary the tests need (Debian: openssh-server).
pub(super) const SSHD: &str = "/usr/sbin/sshd";

/// Whether sshd is installed; prints why a test is skipped when it is not.
pub(super) fn available(test: &str) -> bool {
    if Path::new(SSHD).exists() {
        return true;
    }
    eprintln!("skipping {test}: {SSHD} is missing (install openssh-server: apt-get install -y openssh-server)");
    false
}

pub(super) fn write_private(path: &Path, content: &[u8]) {
    let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path).unwrap();
    f.write_all(content).unwrap();
}

pub(super) struct Sshd {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub user: String,
    pub host_key: GeneratedHostKey,
    pub client_key: PathBuf,
}

impl Sshd {
    /// Starts a server with a freshly generated host key.
    pub async fn start() -> Sshd {
        let key = generate_host_key("cradle-test-sshd").await.expect("generate the server's host key");
        Sshd::start_with(key, "")
    }

    /// Starts a server presenting `host_key`, with `extra` lines of sshd_config.
    pub fn start_with(host_key: GeneratedHostKey, extra: &str) -> Sshd {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        fs::set_permissions(d, fs::Permissions::from_mode(0o700)).unwrap();
        write_private(&d.join("host_key"), host_key.private_openssh.expose().as_bytes());
        let client_key = d.join("client_key");
        let st = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "cradle-test-client", "-f"])
            .arg(&client_key)
            .status()
            .expect("ssh-keygen");
        assert!(st.success());
        let public = fs::read(client_key.with_extension("pub")).unwrap();
        write_private(&d.join("authorized_keys"), &public);
        let out = Command::new("id").arg("-un").output().expect("id -un");
        let user = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if user == "root" {
            // sshd's privilege-separation directory (the openssh-server package normally makes it).
            let _ = fs::create_dir_all("/run/sshd");
        }
        for attempt in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let config = format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
                 StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPidFile none\nLogLevel VERBOSE\nMaxStartups 100\n{extra}",
                d = d.display()
            );
            fs::write(d.join("sshd_config"), config).unwrap();
            let log = fs::File::create(d.join(format!("sshd-{attempt}.log"))).unwrap();
            let mut child = Command::new(SSHD)
                .args(["-D", "-e", "-f"])
                .arg(d.join("sshd_config"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start sshd");
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Sshd { child, port, dir, user, host_key, client_key };
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            eprintln!(
                "sshd attempt {attempt} on port {port} failed: {}",
                fs::read_to_string(d.join(format!("sshd-{attempt}.log"))).unwrap_or_default()
            );
        }
        panic!("sshd did not start; see the logs above");
    }

    pub fn target(&self) -> Target {
        Target { host: "127.0.0.1".into(), port: self.port, user: self.user.clone() }
    }

    /// A client with a fresh (empty) known_hosts in the server's directory,
    /// multiplexing through [`Sshd::mux_dir`] as cradle does by default.
    pub fn client(&self, name: &str) -> SshClient {
        self.client_with(name, Some(self.client_key.clone()), Some(self.mux_dir()))
    }

    /// A client that opens one connection per call.
    pub fn direct_client(&self, name: &str) -> SshClient {
        self.client_with(name, Some(self.client_key.clone()), None)
    }

    /// The owner-only control directory of this server's clients.
    pub fn mux_dir(&self) -> PathBuf {
        super::control_dir(self.dir.path()).expect("a short private control directory")
    }

    /// Drops every open connection, as a guest that reboots does: kills the
    /// server's per-connection processes (SIGKILL), keeping the listener.
    /// All of them, not only the listener's children: OpenSSH 10 serves a
    /// connection from a child of its `sshd-session [priv]` monitor even for
    /// root, and that child keeps the connection open when only the monitor dies.
    pub fn drop_connections(&self) {
        signal(&descendants_of(self.child.id()), "-KILL");
    }

    /// Stops (SIGSTOP) every connection's server processes: the TCP connection
    /// stays open but nothing answers, like a frozen guest.
    pub fn freeze_connections(&self) {
        signal(&descendants_of(self.child.id()), "-STOP");
    }

    /// How many connections have authenticated so far (from sshd's log).
    pub fn logins(&self) -> usize {
        self.log().matches("Accepted publickey for").count()
    }

    /// Everything sshd has logged so far (LogLevel VERBOSE).
    pub fn log(&self) -> String {
        fs::read_dir(self.dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("sshd-"))
            .map(|e| fs::read_to_string(e.path()).unwrap_or_default())
            .collect()
    }

    pub fn client_with(&self, name: &str, identity: Option<PathBuf>, control_dir: Option<PathBuf>) -> SshClient {
        SshClient::new(SshSettings {
            known_hosts: self.dir.path().join(name),
            identity,
            connect_timeout: Duration::from_secs(5),
            control_dir,
            client: super::ClientKind::OpenSsh,
        })
        .expect("client")
    }

    /// A built-in (in-process) client with a fresh known_hosts; `share`: one
    /// connection per target, as `[ssh] client = "builtin"` does by default.
    pub fn builtin_client(&self, name: &str, identity: Option<PathBuf>, share: bool) -> SshClient {
        SshClient::new(SshSettings {
            known_hosts: self.dir.path().join(name),
            identity,
            connect_timeout: Duration::from_secs(5),
            control_dir: None,
            client: super::ClientKind::Builtin { share, agent: None },
        })
        .expect("client")
    }

    /// A sharing built-in client with no identity and the agent at `sock`.
    pub fn builtin_with_agent(&self, name: &str, sock: &Path) -> SshClient {
        SshClient::new(SshSettings {
            known_hosts: self.dir.path().join(name),
            identity: None,
            connect_timeout: Duration::from_secs(5),
            control_dir: None,
            client: super::ClientKind::Builtin { share: true, agent: Some(sock.to_path_buf()) },
        })
        .expect("client")
    }

    /// A sharing built-in client whose known_hosts already pins this server's key.
    pub fn pinned_builtin(&self, name: &str) -> SshClient {
        let c = self.builtin_client(name, Some(self.client_key.clone()), true);
        assert!(c.trust_host_key("127.0.0.1", self.port, &self.host_key.public).expect("pin"));
        c
    }

    /// A client whose known_hosts already pins this server's key.
    pub fn pinned_client(&self, name: &str) -> SshClient {
        let c = self.client(name);
        assert!(c.trust_host_key("127.0.0.1", self.port, &self.host_key.public).expect("pin"));
        c
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Connection processes outlive the listener (a frozen one forever).
        signal(&descendants_of(self.child.id()), "-KILL");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every process below `pid`: children, their children, and so on.
fn descendants_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        let children = super::tests::children_of(p);
        next.extend(&children);
        out.extend(children);
    }
    out
}

fn signal(pids: &[u32], sig: &str) {
    if !pids.is_empty() {
        let _ = Command::new("kill").arg(sig).args(pids.iter().map(u32::to_string)).status();
    }
}
