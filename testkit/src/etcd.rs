//! A throwaway etcd (Debian's `etcd-server`, v3.4) on 127.0.0.1: free client
//! and peer ports, its data in an owner-only temporary directory, killed when
//! dropped. [`Etcd::pause`] / [`Etcd::resume`] stop and continue the server
//! (SIGSTOP/SIGCONT), as a lost quorum looks to a client.
//!
//! [`EtcdCluster`] is three members on loopback, for quorum loss: stop two
//! ([`EtcdCluster::stop_member`]) and the third can serve nothing.
//!
//! When `etcd` is missing, [`Etcd::start`] panics saying what to install: the
//! coordination tests never skip.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running single-member etcd.
pub struct Etcd {
    child: Child,
    /// The client URL (`http://127.0.0.1:PORT`, or `https://` with TLS).
    pub url: String,
    /// Data and log.
    pub dir: tempfile::TempDir,
    /// With TLS: the CA and a client certificate it accepts.
    pub tls: Option<TlsFiles>,
}

/// The PEM files of a TLS etcd (made with the `openssl` command, one day valid).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// A client certificate etcd accepts (client-cert-auth is on).
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
    /// A client certificate from another CA, which etcd refuses.
    pub stranger_cert: PathBuf,
    /// Its key.
    pub stranger_key: PathBuf,
}

/// Run `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[String]) {
    let out =
        Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl (Debian package openssl)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Arguments from words.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// A CA `ca` and, signed by it, certificates `certs` (name, extension lines) in `dir`.
fn make_certs(dir: &Path, ca: &str, certs: &[(&str, &str)]) {
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    openssl(dir, &words(&format!("req -x509 {ec} -keyout {ca}.key -out {ca}.pem -days 1 -subj /CN={ca}")));
    for (name, ext) in certs {
        std::fs::write(dir.join(format!("{name}.ext")), ext).expect("ext file");
        openssl(dir, &words(&format!("req {ec} -keyout {name}.key -out {name}.csr -subj /CN={name}")));
        openssl(
            dir,
            &words(&format!(
                "x509 -req -in {name}.csr -CA {ca}.pem -CAkey {ca}.key -CAcreateserial -out {name}.pem -days 1 -extfile {name}.ext"
            )),
        );
    }
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd").field("url", &self.url).finish_non_exhaustive()
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()).expect("a free port").port()
}

fn etcd_binary() -> PathBuf {
    ["/usr/bin/etcd", "/usr/local/bin/etcd"].iter().map(PathBuf::from).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "etcd is not installed: the coordination tests start a real etcd \
             (Debian package etcd-server: apt-get install -y etcd-server)"
        )
    })
}

impl Etcd {
    /// Start etcd and wait until it answers on its client port.
    pub fn start() -> Etcd {
        Self::start_with(false, true)
    }

    /// Start etcd serving clients over TLS only, with client-certificate
    /// authentication ([`Etcd::tls`] holds the CA and a client certificate).
    pub fn start_tls() -> Etcd {
        Self::start_with(true, true)
    }

    /// [`Etcd::start_tls`], with a server certificate for server
    /// authentication only: etcd's gRPC gateway, which presents it to etcd
    /// itself, is refused, as on an etcd set up that way.
    pub fn start_tls_server_auth_only() -> Etcd {
        Self::start_with(true, false)
    }

    fn start_with(tls: bool, server_cert_client_auth: bool) -> Etcd {
        let binary = etcd_binary();
        let mut last = String::new();
        for _ in 0..3 {
            let dir = tempfile::Builder::new().prefix("cradle-etcd-").tempdir().expect("tempdir");
            let (client, peer) = (free_port(), free_port());
            let scheme = if tls { "https" } else { "http" };
            let url = format!("{scheme}://127.0.0.1:{client}");
            let files = tls.then(|| {
                let d = dir.path();
                make_certs(
                    d,
                    "etcd-ca",
                    &[
                        // clientAuth too, as etcd's TLS guide has it: with
                        // --client-cert-auth, etcd's gRPC gateway (which
                        // cradle speaks) presents the server certificate to
                        // etcd's own gRPC server.
                        (
                            "server",
                            if server_cert_client_auth {
                                "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
                            } else {
                                "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
                            },
                        ),
                        ("client", "extendedKeyUsage=clientAuth\n"),
                    ],
                );
                make_certs(d, "other-ca", &[("stranger", "extendedKeyUsage=clientAuth\n")]);
                TlsFiles {
                    ca: d.join("etcd-ca.pem"),
                    client_cert: d.join("client.pem"),
                    client_key: d.join("client.key"),
                    stranger_cert: d.join("stranger.pem"),
                    stranger_key: d.join("stranger.key"),
                }
            });
            let log = std::fs::File::create(dir.path().join("etcd.log")).expect("log file");
            let mut cmd = Command::new(&binary);
            if tls {
                let d = dir.path();
                cmd.arg(format!("--cert-file={}", d.join("server.pem").display()))
                    .arg(format!("--key-file={}", d.join("server.key").display()))
                    .arg(format!("--trusted-ca-file={}", d.join("etcd-ca.pem").display()))
                    .arg("--client-cert-auth");
            }
            let child = cmd
                .arg("--name=cradle-test")
                .arg(format!("--data-dir={}", dir.path().join("data").display()))
                .arg(format!("--listen-client-urls={url}"))
                .arg(format!("--advertise-client-urls={url}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!("--initial-cluster=cradle-test=http://127.0.0.1:{peer}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn etcd");
            let mut etcd = Etcd { child, url, dir, tls: files };
            if etcd.wait_ready(client) {
                return etcd;
            }
            last = std::fs::read_to_string(etcd.dir.path().join("etcd.log")).unwrap_or_default();
            let _ = etcd.child.kill();
        }
        panic!("etcd did not start (three tries); its log:\n{last}");
    }

    fn wait_ready(&mut self, port: u16) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            let up = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok();
            // Over TLS the health URL needs a client certificate: the log says when it serves.
            let ready =
                if self.tls.is_some() { self.log().contains("ready to serve client requests") } else { self.healthy() };
            if up && ready {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// `GET /health` answers `"health":"true"`.
    fn healthy(&self) -> bool {
        healthy(&self.url)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Where its data lives.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stop the server process (SIGSTOP): requests hang, leases are not renewed.
    pub fn pause(&self) {
        signal(self.child.id(), "STOP");
    }

    /// Continue a paused server (SIGCONT).
    pub fn resume(&self) {
        signal(self.child.id(), "CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}

impl Drop for Etcd {
    fn drop(&mut self) {
        signal_quiet(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A paused server must be continued before it can be killed cleanly.
fn signal_quiet(pid: u32) {
    let _ = Command::new("kill").arg("-CONT").arg(pid.to_string()).status();
}

/// A three-member etcd cluster on loopback.
pub struct EtcdCluster {
    members: Vec<Option<Child>>,
    /// The members' client URLs.
    pub urls: Vec<String>,
    /// Data and logs.
    pub dir: tempfile::TempDir,
}

impl std::fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCluster").field("urls", &self.urls).finish_non_exhaustive()
    }
}

impl EtcdCluster {
    /// Start three members and wait until each answers healthy. Three tries,
    /// as [`Etcd`]'s start: a peer or client port picked free can be taken by
    /// another test before its member binds it, and that member exits.
    pub fn start() -> EtcdCluster {
        let mut last = String::new();
        for _ in 0..3 {
            match EtcdCluster::try_start() {
                Ok(cluster) => return cluster,
                Err(logs) => last = logs,
            }
        }
        panic!("the etcd cluster did not become healthy (three tries); the last try's logs:\n{last}");
    }

    /// One try: the members' logs when a member exits or the cluster is not
    /// healthy within 30 s.
    fn try_start() -> Result<EtcdCluster, String> {
        let binary = etcd_binary();
        let dir = tempfile::Builder::new().prefix("cradle-etcd3-").tempdir().expect("tempdir");
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let initial: Vec<String> =
            ports.iter().enumerate().map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}")).collect();
        let mut members = Vec::new();
        let mut urls = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let url = format!("http://127.0.0.1:{client}");
            let log = std::fs::File::create(dir.path().join(format!("m{i}.log"))).expect("log file");
            let child = Command::new(&binary)
                .arg(format!("--name=m{i}"))
                .arg(format!("--data-dir={}", dir.path().join(format!("m{i}")).display()))
                .arg(format!("--listen-client-urls={url}"))
                .arg(format!("--advertise-client-urls={url}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!("--initial-cluster={}", initial.join(",")))
                .arg("--initial-cluster-state=new")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn etcd");
            members.push(Some(child));
            urls.push(url);
        }
        let mut cluster = EtcdCluster { members, urls, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        let all_healthy = |c: &EtcdCluster| c.urls.iter().all(|u| healthy(u));
        while !all_healthy(&cluster) {
            let exited = cluster.members.iter_mut().flatten().any(|m| matches!(m.try_wait(), Ok(Some(_))));
            if exited || Instant::now() >= deadline {
                let why = if exited { "a member exited" } else { "not healthy within 30 s" };
                return Err(format!("{why}\n{}", cluster.logs()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(cluster)
    }

    /// The last lines of each member's log.
    fn logs(&self) -> String {
        (0..self.members.len())
            .map(|i| {
                let text = std::fs::read_to_string(self.dir.path().join(format!("m{i}.log"))).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!("== m{i}.log\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Kill member `i` (SIGKILL): with two of three gone, no quorum.
    pub fn stop_member(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.stop_member(i);
        }
    }
}

/// `GET <url>/health` answers `"health":"true"`.
fn healthy(url: &str) -> bool {
    let port = url.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()).unwrap_or(0);
    let Ok(mut s) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else { return false };
    use std::io::{Read, Write};
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n").is_err() {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}
