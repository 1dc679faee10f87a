//! A throwaway BIND 9 (`named`) on 127.0.0.1: a random free port, the TSIG
//! keys and primary zones the caller asks for (each key with fresh random
//! material), everything in an owner-only temporary directory. Killed when
//! dropped.
//!
//! Needs Debian's `bind9` (named) and `bind9-dnsutils` (dig). When they are
//! missing [`Bind::start`] panics saying what to install, unless
//! `CRADLE_SKIP_BIND_TESTS=1` ([`SKIP_ENV`]) is set: then it returns `None`
//! and prints that the test is skipped.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The variable that lets the BIND tests be skipped where BIND is not installed.
pub const SKIP_ENV: &str = "CRADLE_SKIP_BIND_TESTS";

/// A TSIG key named knows, with fresh random material at every start.
#[derive(Debug, Clone, Copy)]
pub struct TsigKey {
    /// The key's name.
    pub name: &'static str,
    /// named's algorithm name, e.g. `hmac-sha256`.
    pub algorithm: &'static str,
    /// How many random bytes the secret has.
    pub bytes: usize,
}

/// A primary zone named serves.
#[derive(Debug, Clone, Copy)]
pub struct Zone {
    /// The zone, without the trailing dot (e.g. `lab.example`).
    pub name: &'static str,
    /// The keys allowed to update it (`allow-update { none; }` when empty).
    pub update_keys: &'static [&'static str],
    /// The zone whose `ns.` host is its SOA primary and NS (`ns.<zone>.`,
    /// with glue `ns IN A 127.0.0.1`, when it is the zone itself).
    pub ns_of: &'static str,
}

impl Zone {
    /// `name` with its own `ns.<name>.` (and glue), updatable by `update_keys`.
    pub const fn new(name: &'static str, update_keys: &'static [&'static str]) -> Zone {
        Zone { name, update_keys, ns_of: name }
    }
}

fn find(program: &str, dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    dirs.iter()
        .map(|d| d.to_string())
        .chain(path.split(':').map(str::to_string))
        .map(|d| Path::new(&d).join(program))
        .find(|p| p.is_file())
}

/// Standard base64 (with padding), as in a `key` statement's `secret`.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Fresh random key material of `bytes` bytes, base64.
pub fn random_secret(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).expect("read /dev/urandom");
    base64(&buf)
}

/// Write `secret` to a new owner-only (0600) file at `path` (replacing any),
/// as a `secret = { file = ... }` reference wants it.
pub fn write_secret(path: &Path, secret: &str) {
    let _ = fs::remove_file(path);
    let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).expect("secret file");
    f.write_all(secret.as_bytes()).expect("write secret");
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

/// A running named, primary for its zones.
pub struct Bind {
    child: Child,
    dig: PathBuf,
    /// The port named listens on (TCP and UDP, 127.0.0.1).
    pub port: u16,
    /// Configuration, zone files, journals and log.
    pub dir: tempfile::TempDir,
    /// Each key's name and base64 secret.
    secrets: Vec<(&'static str, String)>,
    zones: Vec<Zone>,
}

impl std::fmt::Debug for Bind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bind").field("port", &self.port).field("zones", &self.zones).finish_non_exhaustive()
    }
}

impl Bind {
    /// Start named with `keys`, as primary for `zones`, or `None` (with a
    /// message) when it is missing and [`SKIP_ENV`] allows skipping. Panics,
    /// naming the packages, otherwise; `test` names the test in messages.
    pub fn start(test: &str, keys: &[TsigKey], zones: &[Zone]) -> Option<Bind> {
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
            match Bind::try_start(&named, &dig, keys, zones) {
                Ok(bind) => return Some(bind),
                Err(log) => last = log,
            }
        }
        panic!("{test}: named did not start:\n{last}");
    }

    fn try_start(named: &Path, dig: &Path, keys: &[TsigKey], zones: &[Zone]) -> Result<Bind, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        fs::set_permissions(d, fs::Permissions::from_mode(0o700)).expect("chmod");
        let port = free_port();
        let secrets: Vec<(&'static str, String)> = keys.iter().map(|k| (k.name, random_secret(k.bytes))).collect();
        let dd = d.display();
        let mut conf = String::new();
        for (key, (_, secret)) in keys.iter().zip(&secrets) {
            conf.push_str(&format!("key \"{}\" {{ algorithm {}; secret \"{secret}\"; }};\n", key.name, key.algorithm));
        }
        conf.push_str(&format!(
            r#"options {{
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
"#
        ));
        for zone in zones {
            let (z, ns) = (zone.name, zone.ns_of);
            let glue = if z == ns { "ns IN A 127.0.0.1\n" } else { "" };
            let soa =
                format!("$TTL 300\n@ IN SOA ns.{ns}. hostmaster.{ns}. 1 3600 600 86400 300\n@ IN NS ns.{ns}.\n{glue}");
            fs::write(d.join(format!("{z}.zone")), soa).expect("zone file");
            let update = if zone.update_keys.is_empty() {
                "none; ".to_string()
            } else {
                zone.update_keys.iter().map(|k| format!("key \"{k}\"; ")).collect()
            };
            conf.push_str(&format!(
                "zone \"{z}\" {{ type primary; file \"{dd}/{z}.zone\"; allow-update {{ {update}}}; }};\n"
            ));
        }
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
        let mut bind = Bind { child, dig: dig.to_path_buf(), port, dir, secrets, zones: zones.to_vec() };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = bind.child.try_wait() {
                return Err(format!("named exited ({status}):\n{}", bind.log()));
            }
            if bind.zones.iter().all(|z| !bind.dig(&format!("{}.", z.name), "SOA").is_empty()) {
                return Ok(bind);
            }
            if Instant::now() > deadline {
                return Err(format!("named did not answer within 20 s:\n{}", bind.log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The base64 secret of key `name` (one of those it was started with).
    pub fn secret(&self, name: &str) -> &str {
        self.secrets.iter().find(|(k, _)| *k == name).map(|(_, s)| s.as_str()).expect("a key named was started with")
    }

    /// named's own log (stderr with `-g`).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("named.log")).unwrap_or_default()
    }

    /// The server's address.
    pub fn server(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `(ttl, data)` of `name`'s `rtype` records, as dig sees them over TCP.
    pub fn dig(&self, name: &str, rtype: &str) -> Vec<(u32, String)> {
        let out = Command::new(&self.dig)
            .args(["+tcp", "+noall", "+answer", "+time=2", "+tries=1", "-p", &self.port.to_string(), "@127.0.0.1"])
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

    /// The SOA serial of `zone` (e.g. `lab.example.`): it moves with every
    /// dynamic update the server applies, and only then.
    pub fn serial(&self, zone: &str) -> u64 {
        let soa = self.dig(zone, "SOA");
        let data = soa.first().unwrap_or_else(|| panic!("no SOA for {zone}:\n{}", self.log())).1.clone();
        data.split_whitespace().nth(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("SOA of {zone}: {data}"))
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_rfc_4648_test_vectors() {
        let cases =
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")];
        for (plain, encoded) in cases {
            assert_eq!(super::base64(plain.as_bytes()), encoded);
        }
        assert_eq!(super::base64(b"foobar"), "Zm9vYmFy");
    }
}
