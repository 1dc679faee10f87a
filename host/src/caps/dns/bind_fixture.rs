//! A throwaway BIND 9 (`named`) on 127.0.0.1 for the tests: a random free
//! port, fresh random TSIG keys, the primary zones `lab.example.` and
//! `10.0.10.in-addr.arpa.` (dynamic update allowed for the keys) and
//! `locked.example.` (no updates), everything in a temporary directory.
//! Killed when dropped.
//!
//! The tests need Debian's `bind9` (named) and `bind9-dnsutils` (dig). When
//! they are missing the tests fail and say what to install, unless
//! `CRADLE_SKIP_BIND_TESTS=1` is set: then they are skipped with a message.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{DnsProviderConfig, DnsProviderKind, TsigAlgorithmName};
use crate::secrets::SecretRef;

/// The variable that lets the BIND tests be skipped where BIND is not installed.
pub(super) const SKIP_ENV: &str = "CRADLE_SKIP_BIND_TESTS";
/// The HMAC-SHA256 key allowed to update `lab.example.` and the reverse zone.
pub(super) const KEY: &str = "cradle-test-key";
/// The HMAC-SHA512 key allowed to update `lab.example.`.
pub(super) const KEY512: &str = "cradle-test-512";

fn find(program: &str, dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    dirs.iter()
        .map(|d| d.to_string())
        .chain(path.split(':').map(str::to_string))
        .map(|d| Path::new(&d).join(program))
        .find(|p| p.is_file())
}

/// A running named.
pub(super) struct Bind {
    child: Child,
    dig: PathBuf,
    pub port: u16,
    pub dir: tempfile::TempDir,
    /// Base64 secret of [`KEY`].
    pub secret: String,
    /// Base64 secret of [`KEY512`].
    pub secret512: String,
}

/// Fresh random base64 key material.
pub(super) fn random_secret(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).expect("read /dev/urandom");
    data_encoding::BASE64.encode(&buf)
}

fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a TCP port");
        let port = tcp.local_addr().expect("local addr").port();
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
}

const ZONE: &str =
    "$TTL 300\n@ IN SOA ns.lab.example. hostmaster.lab.example. 1 3600 600 86400 300\n@ IN NS ns.lab.example.\n";

impl Bind {
    /// Start named, or `None` (with a message) when it is missing and
    /// [`SKIP_ENV`] allows skipping. Panics, naming the packages, otherwise.
    pub fn start(test: &str) -> Option<Bind> {
        let named = find("named", &["/usr/sbin", "/usr/local/sbin"]);
        let dig = find("dig", &["/usr/bin"]);
        let (Some(named), Some(dig)) = (named, dig) else {
            let why = "BIND 9 is not installed: the dns tests start a real named and query it with dig \
                       (Debian packages bind9 and bind9-dnsutils: apt-get install -y bind9 bind9-dnsutils)";
            if std::env::var(SKIP_ENV).as_deref() == Ok("1") {
                eprintln!("skipping {test}: {why}; {SKIP_ENV}=1 is set");
                return None;
            }
            panic!("{test}: {why}. Set {SKIP_ENV}=1 to skip these tests where BIND cannot be installed.");
        };
        let mut last = String::new();
        for _ in 0..3 {
            match Bind::try_start(&named, &dig) {
                Ok(bind) => return Some(bind),
                Err(log) => last = log,
            }
        }
        panic!("{test}: named did not start:\n{last}");
    }

    fn try_start(named: &Path, dig: &Path) -> Result<Bind, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        fs::set_permissions(d, fs::Permissions::from_mode(0o700)).expect("chmod");
        let port = free_port();
        let (secret, secret512) = (random_secret(32), random_secret(64));
        for zone in ["lab.example", "10.0.10.in-addr.arpa", "locked.example"] {
            let glue = if zone == "lab.example" { "ns IN A 127.0.0.1\n" } else { "" };
            fs::write(d.join(format!("{zone}.zone")), format!("{ZONE}{glue}")).expect("zone file");
        }
        let dd = d.display();
        let conf = format!(
            r#"key "{KEY}" {{ algorithm hmac-sha256; secret "{secret}"; }};
key "{KEY512}" {{ algorithm hmac-sha512; secret "{secret512}"; }};
options {{
    directory "{dd}";
    pid-file "{dd}/named.pid";
    session-keyfile "{dd}/session.key";
    managed-keys-directory "{dd}";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    notify no;
    dnssec-validation no;
    allow-transfer {{ none; }};
}};
controls {{ }};
zone "lab.example" {{ type primary; file "{dd}/lab.example.zone"; allow-update {{ key "{KEY}"; key "{KEY512}"; }}; }};
zone "10.0.10.in-addr.arpa" {{ type primary; file "{dd}/10.0.10.in-addr.arpa.zone"; allow-update {{ key "{KEY}"; }}; }};
zone "locked.example" {{ type primary; file "{dd}/locked.example.zone"; allow-update {{ none; }}; }};
"#
        );
        fs::write(d.join("named.conf"), conf).expect("named.conf");
        let log = fs::File::create(d.join("named.log")).expect("log file");
        let child = Command::new(named)
            .arg("-g")
            .arg("-c")
            .arg(d.join("named.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", named.display()))?;
        let mut bind = Bind { child, dig: dig.to_path_buf(), port, dir, secret, secret512 };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = bind.child.try_wait() {
                return Err(format!("named exited ({status}):\n{}", bind.log()));
            }
            if !bind.dig("lab.example.", "SOA").is_empty() && !bind.dig("10.0.10.in-addr.arpa.", "SOA").is_empty() {
                return Ok(bind);
            }
            if Instant::now() > deadline {
                return Err(format!("named did not answer within 20 s:\n{}", bind.log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// named's own log (stderr with `-g`).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("named.log")).unwrap_or_default()
    }

    /// The server address.
    pub fn server(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `(ttl, data)` of `name`'s `rtype` records, as dig sees them over TCP.
    pub fn dig(&self, name: &str, rtype: &str) -> Vec<(u32, String)> {
        let out = Command::new(&self.dig)
            .args(["+tcp", "+noall", "+answer", "+time=1", "+tries=1", "-p", &self.port.to_string(), "@127.0.0.1"])
            .args([name, rtype])
            .output()
            .expect("run dig");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 5 && f[3].eq_ignore_ascii_case(rtype))
                    .then(|| (f[1].parse().unwrap_or(0), f[4..].join(" ")))
            })
            .collect()
    }

    /// A provider config for this server: `key` with `secret` (written to an
    /// owner-only file), for `zones`.
    pub fn config(&self, key: &str, secret: &str, zones: &[&str]) -> DnsProviderConfig {
        let path = self.dir.path().join(format!("secret-{}", random_secret(6).replace(['/', '+', '='], "x")));
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).expect("secret file");
        f.write_all(secret.as_bytes()).expect("write secret");
        DnsProviderConfig {
            kind: DnsProviderKind::Rfc2136,
            server: self.server(),
            key_name: key.into(),
            algorithm: if key == KEY512 { TsigAlgorithmName::HmacSha512 } else { TsigAlgorithmName::HmacSha256 },
            secret: SecretRef::File(path),
            zones: zones.iter().map(|z| z.to_string()).collect(),
            ttl: 300,
        }
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
