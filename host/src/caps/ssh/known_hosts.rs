//! cradle's own known_hosts file: keys are pinned before the first connection
//! and never learned from the network.
//!
//! Contract:
//! - Entries are written as `host KEYTYPE BASE64` for port 22 and
//!   `[host]:port KEYTYPE BASE64` otherwise (OpenSSH's format; host lowercased,
//!   never hashed). The file is 0600; one that group or others can access is
//!   refused with the `chmod 600` to run.
//! - [`KnownHosts::trust`]: pinning the key already pinned is a no-op; a host
//!   that has a different key is a `conflict` naming the host, both SHA256
//!   fingerprints and how to forget the old key. Nothing is replaced.
//! - [`KnownHosts::pin_own_server`]: only for a server this process runs (a
//!   built-in simulated cluster's nodes): replaces a different key at the port
//!   and drops this key's pins at other ports nothing listens on any more.
//! - [`KnownHosts::forget`]: removes the host from every plain entry.
//! - Changes are atomic (temp file, fsync, rename) and serialized, in this
//!   process by a mutex and across processes by an advisory lock on
//!   `<file>.lock`. Marker lines (`@cert-authority`, `@revoked`), hashed entries
//!   and comments an operator added are kept untouched and are not consulted.
//! - Public keys are validated: a known key type whose base64 blob decodes and
//!   names the same type. Error messages never echo the key material (a private
//!   key passed by mistake is recognised and not repeated).

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use sha2::{Digest, Sha256};

use super::check_host;
use crate::contract::{CapError, ErrorKind};

const KEY_TYPES: [&str; 8] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "ssh-dss",
];

/// A validated OpenSSH public key (type and base64 blob; the comment is dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// The key type (`ssh-ed25519`).
    pub kind: String,
    /// The base64 key blob.
    pub base64: String,
    blob: Vec<u8>,
}

impl PublicKey {
    /// Parses `KEYTYPE BASE64 [comment]`.
    pub fn parse(text: &str) -> Result<PublicKey, CapError> {
        let text = text.trim();
        if text.contains("PRIVATE KEY") {
            return Err(CapError::invalid(
                "ssh: this is a private key; pass the public half (the `.pub` file: `ssh-ed25519 AAAA…`)",
            ));
        }
        let mut words = text.split_whitespace();
        let kind = words.next().unwrap_or_default();
        let b64 = words.next().unwrap_or_default();
        if !KEY_TYPES.contains(&kind) {
            let shown = if kind.len() <= 40 && kind.chars().all(|c| c.is_ascii_graphic()) { kind } else { "…" };
            return Err(CapError::invalid(format!(
                "ssh: `{shown}` is not an OpenSSH public key type; expected e.g. `ssh-ed25519 AAAA…` ({})",
                KEY_TYPES.join(", ")
            )));
        }
        let blob = base64_decode(b64).filter(|blob| ssh_string(blob) == Some(kind.as_bytes())).ok_or_else(|| {
            CapError::invalid(format!("ssh: the {kind} public key's base64 part is not a {kind} key"))
        })?;
        Ok(PublicKey { kind: kind.to_string(), base64: b64.to_string(), blob })
    }

    /// `SHA256:…` as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> String {
        blob_fingerprint(&self.blob)
    }

    /// The key in the SSH wire format (what a server presents).
    pub(crate) fn blob(&self) -> &[u8] {
        &self.blob
    }

    fn same_key(&self, other: &PublicKey) -> bool {
        self.kind == other.kind && self.blob == other.blob
    }
}

/// The `SHA256:…` fingerprint of an OpenSSH public key line.
pub fn fingerprint(public_key: &str) -> Result<String, CapError> {
    PublicKey::parse(public_key).map(|k| k.fingerprint())
}

/// `SHA256:…` of a key in the SSH wire format.
pub(crate) fn blob_fingerprint(blob: &[u8]) -> String {
    format!("SHA256:{}", base64_encode_nopad(&Sha256::digest(blob)))
}

/// The known_hosts host field for `host`/`port`.
pub(crate) fn host_entry(host: &str, port: u16) -> String {
    let host = host.to_ascii_lowercase();
    if port == 22 { host } else { format!("[{host}]:{port}") }
}

/// cradle's known_hosts file.
#[derive(Debug)]
pub struct KnownHosts {
    path: PathBuf,
    lock: Mutex<()>,
    /// The file as last parsed, indexed by host; reused while the file's
    /// identity, size and times are unchanged (every SSH call consults the
    /// pins, and a file with a thousand guests must not be re-read and its
    /// keys re-decoded per call). Shared by every `KnownHosts` of the same
    /// path in this process: each run has its own client, and a cache per
    /// run would parse the whole file again after every other run's pin.
    view: SharedView,
}

/// A file's parsed view, shared by every `KnownHosts` of its path.
type SharedView = Arc<Mutex<Option<Arc<View>>>>;

/// The parsed views of this process, one per known_hosts path.
static VIEWS: LazyLock<Mutex<HashMap<PathBuf, SharedView>>> = LazyLock::new(Mutex::default);

/// What decides whether `ssh` accepts a host's key, parsed once per version of the file.
#[derive(Debug, Default, Clone)]
struct View {
    stamp: Option<Stamp>,
    /// The keys of plain entries by lowercased host field, each with whether its
    /// line also names patterns (such a line is among `others` too).
    pins: HashMap<String, Vec<(PublicKey, bool)>>,
    /// Every line that could apply to any host (markers, hashed entries,
    /// wildcard or negated patterns), verbatim and in file order.
    others: Vec<String>,
}

/// A version of the file: inode, size, modification and change times.
type Stamp = (u64, u64, i64, i64, i64, i64);

fn stamp(meta: &fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    (meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec(), meta.ctime(), meta.ctime_nsec())
}

impl View {
    fn parse(text: &str, stamp: Option<Stamp>) -> View {
        let mut view = View { stamp, ..View::default() };
        for line in text.lines() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let hosts = l.split_whitespace().next().unwrap_or_default();
            let other = l.starts_with('@') || hosts.contains(['|', '*', '?', '!']);
            if other {
                view.others.push(l.to_string());
            }
            if let Some((hosts, key)) = plain_entry(l) {
                for h in hosts.split(',') {
                    view.pins.entry(h.to_ascii_lowercase()).or_default().push((key.clone(), other));
                }
            }
        }
        view
    }

    fn keys(&self, entry: &str) -> impl Iterator<Item = &(PublicKey, bool)> {
        self.pins.get(entry).into_iter().flatten()
    }
}

impl KnownHosts {
    /// The file at `path` (created on the first change).
    pub fn new(path: PathBuf) -> KnownHosts {
        let view = VIEWS.lock().unwrap_or_else(|e| e.into_inner()).entry(path.clone()).or_default().clone();
        KnownHosts { path, lock: Mutex::new(()), view }
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The keys pinned for `host`/`port` (plain entries only).
    pub fn pinned(&self, host: &str, port: u16) -> Result<Vec<PublicKey>, CapError> {
        let entry = host_entry(host, port);
        Ok(self.view()?.keys(&entry).map(|(k, _)| k.clone()).collect())
    }

    /// Everything in the file that decides whether `ssh` accepts a key from
    /// `host`/`port`, for keying a multiplexing master on it: the keys pinned for
    /// the host (`KIND BASE64`, sorted) followed by every line that could apply to
    /// any host (markers, hashed entries, wildcard or negated patterns), verbatim.
    /// Empty when nothing is pinned for the host (no master may then be used).
    pub(crate) fn pin_material(&self, host: &str, port: u16) -> Result<Vec<String>, CapError> {
        let entry = host_entry(host, port);
        let view = self.view()?;
        let mut pinned: Vec<String> =
            view.keys(&entry).filter(|(_, other)| !other).map(|(k, _)| format!("{} {}", k.kind, k.base64)).collect();
        if pinned.is_empty() {
            return Ok(Vec::new());
        }
        pinned.sort();
        pinned.extend(view.others.iter().cloned());
        Ok(pinned)
    }

    /// The parsed file: the cached view while the file is unchanged, else read
    /// and parsed anew (refusing a file that is too open, as [`Self::read`]).
    fn view(&self) -> Result<Arc<View>, CapError> {
        let now = match fs::metadata(&self.path) {
            Ok(meta) => {
                self.check_mode(&meta)?;
                Some(stamp(&meta))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.io("inspect", &self.path, e)),
        };
        let mut cached = self.view.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = cached.as_ref().filter(|v| v.stamp == now) {
            return Ok(v.clone());
        }
        let text = match now {
            Some(_) => fs::read_to_string(&self.path).map_err(|e| self.io("read", &self.path, e))?,
            None => String::new(),
        };
        // The file may have changed between the stat and the read; then the
        // next call's stamp differs and it parses again.
        let view = Arc::new(View::parse(&text, now));
        *cached = Some(view.clone());
        Ok(view)
    }

    /// Pins `public_key` for `host`/`port`. `Ok(false)` when it was already pinned.
    pub fn trust(&self, host: &str, port: u16, public_key: &str) -> Result<bool, CapError> {
        check_host(host)?;
        let key = PublicKey::parse(public_key)?;
        let entry = host_entry(host, port);
        let before = std::cell::Cell::new(None);
        let after = || self.note_pin(&entry, &key, before.get());
        self.locked(after, |text| {
            // The view is checked against the file's stamp, and the file is locked.
            let view = self.view()?;
            before.set(view.stamp);
            let pinned: Vec<PublicKey> = view.keys(&entry).map(|(k, _)| k.clone()).collect();
            if pinned.iter().any(|k| k.same_key(&key)) {
                return Ok(None);
            }
            if !pinned.is_empty() {
                let old = pinned.iter().map(PublicKey::fingerprint).collect::<Vec<_>>().join(", ");
                return Err(CapError::new(
                    ErrorKind::Conflict,
                    format!(
                        "ssh: `{entry}` already has a different pinned host key in {path} ({old}); refusing to pin \
                         {new}. If the machine was re-created on purpose, forget the old key first (the remove \
                         workflow's forget-host-key, or `ssh-keygen -R '{entry}' -f {path}`)",
                        path = self.path.display(),
                        new = key.fingerprint()
                    ),
                ));
            }
            let mut out = text.to_string();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&format!("{entry} {} {}\n", key.kind, key.base64));
            Ok(Some(out))
        })
    }

    /// Pins `public_key` for `host`/`port` for a server this process itself
    /// runs and has just bound there (a built-in simulated cluster's node,
    /// whose key lives in its state directory and whose port is new each
    /// start). Unlike [`KnownHosts::trust`] it replaces instead of refusing:
    /// a different key pinned for this very port is stale by construction (the
    /// port is ours now), and a pin of this same key at another port of `host`
    /// is an earlier start's, dropped once nothing listens there any more (a
    /// concurrent start of the same cluster keeps its own). So the file keeps
    /// one line per node however many runs there were, and a port another
    /// cluster once used never fails a run. `Ok(false)` when nothing changed.
    pub fn pin_own_server(&self, host: &str, port: u16, public_key: &str) -> Result<bool, CapError> {
        check_host(host)?;
        let key = PublicKey::parse(public_key)?;
        let entry = host_entry(host, port);
        let host_lower = host.to_ascii_lowercase();
        // `[host]:port` of another port, or the bare host (port 22).
        let other_port = |field: &str| -> Option<u16> {
            if field == host_lower {
                return (port != 22).then_some(22);
            }
            let p = field.strip_prefix('[')?.strip_prefix(host_lower.as_str())?.strip_prefix("]:")?.parse().ok()?;
            (p != port).then_some(p)
        };
        // Only an address can be probed; a name's old pins are kept.
        let listening = |p: u16| {
            let Ok(ip) = host.parse::<std::net::IpAddr>() else { return true };
            std::net::TcpStream::connect_timeout(&(ip, p).into(), std::time::Duration::from_millis(300)).is_ok()
        };
        self.locked(
            || {},
            |text| {
                let mut out = String::with_capacity(text.len() + 128);
                let mut changed = false;
                let mut present = false;
                for line in text.lines() {
                    let drop = match plain_entry(line) {
                        Some((hosts, k)) if !hosts.contains(',') => {
                            let field = hosts.to_ascii_lowercase();
                            if field == entry {
                                present |= k.same_key(&key);
                                !k.same_key(&key)
                            } else {
                                k.same_key(&key) && other_port(&field).is_some_and(|p| !listening(p))
                            }
                        }
                        _ => false,
                    };
                    if drop {
                        changed = true;
                    } else {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
                if !present {
                    out.push_str(&format!("{entry} {} {}\n", key.kind, key.base64));
                    changed = true;
                }
                Ok(changed.then_some(out))
            },
        )
    }

    /// Removes every plain entry's pin for `host`/`port`. `Ok(false)` when none existed.
    pub fn forget(&self, host: &str, port: u16) -> Result<bool, CapError> {
        check_host(host)?;
        let entry = host_entry(host, port);
        self.locked(
            || {},
            |text| {
                let mut changed = false;
                let mut out = String::with_capacity(text.len());
                for line in text.lines() {
                    match plain_entry(line) {
                        Some((hosts, _)) if has_host(hosts, &entry) => {
                            changed = true;
                            let rest: Vec<&str> =
                                hosts.split(',').filter(|h| !h.eq_ignore_ascii_case(&entry)).collect();
                            if !rest.is_empty() {
                                let tail = line.trim_start()[hosts.len()..].to_string();
                                out.push_str(&rest.join(","));
                                out.push_str(&tail);
                                out.push('\n');
                            }
                        }
                        _ => {
                            out.push_str(line);
                            out.push('\n');
                        }
                    }
                }
                Ok(changed.then_some(out))
            },
        )
    }

    /// Reads the file ("" when missing), refusing one that is too open.
    fn read(&self) -> Result<String, CapError> {
        match fs::metadata(&self.path) {
            Ok(meta) => self.check_mode(&meta)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(String::new()),
            Err(e) => return Err(self.io("inspect", &self.path, e)),
        }
        fs::read_to_string(&self.path).map_err(|e| self.io("read", &self.path, e))
    }

    fn check_mode(&self, meta: &fs::Metadata) -> Result<(), CapError> {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(CapError::failed(format!(
                "ssh: {p} is accessible by group or others (mode {mode:03o}); run `chmod 600 {p}`",
                p = self.path.display()
            )));
        }
        Ok(())
    }

    /// Runs `change` on the current text under both locks and writes its result (if any).
    /// `after` runs once the new text is in place, still under both locks.
    fn locked(
        &self,
        after: impl FnOnce(),
        change: impl FnOnce(&str) -> Result<Option<String>, CapError>,
    ) -> Result<bool, CapError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut lock_path = self.path.clone().into_os_string();
        lock_path.push(".lock");
        let lock_path = PathBuf::from(lock_path);
        let lock_file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| self.io("open the lock file", &lock_path, e))?;
        lock_file.lock().map_err(|e| self.io("lock", &lock_path, e))?;
        let text = self.read()?;
        let Some(new) = change(&text)? else { return Ok(false) };
        crate::state::write_private_file_atomic(&self.path, new.as_bytes())
            .map_err(|e| CapError::failed(format!("ssh: cannot update cradle's known_hosts: {e}")))?;
        after();
        Ok(true)
    }

    /// After this process pinned `key` for `entry` in the file whose stamp was
    /// `before` (under the file lock): the cached view gains the one entry
    /// instead of parsing every line again. A view of another version of the
    /// file is left to be parsed anew.
    fn note_pin(&self, entry: &str, key: &PublicKey, before: Option<Stamp>) {
        let Ok(meta) = fs::metadata(&self.path) else { return };
        let mut cached = self.view.lock().unwrap_or_else(|e| e.into_inner());
        let Some(view) = cached.as_mut().filter(|v| v.stamp == before) else { return };
        let view = Arc::make_mut(view);
        view.pins.entry(entry.to_string()).or_default().push((key.clone(), false));
        view.stamp = Some(stamp(&meta));
    }

    fn io(&self, action: &str, path: &Path, e: io::Error) -> CapError {
        CapError::failed(format!("ssh: cannot {action} {}: {e}", path.display()))
    }
}

/// A plain (unmarked, unhashed) entry: its host field and key.
fn plain_entry(line: &str) -> Option<(&str, PublicKey)> {
    let line = line.trim_start();
    if line.is_empty() || line.starts_with('#') || line.starts_with('@') || line.starts_with('|') {
        return None;
    }
    let mut words = line.split_whitespace();
    let hosts = words.next()?;
    let kind = words.next()?;
    let b64 = words.next()?;
    let key = PublicKey::parse(&format!("{kind} {b64}")).ok()?;
    Some((hosts, key))
}

fn has_host(hosts: &str, entry: &str) -> bool {
    hosts.split(',').any(|h| h.eq_ignore_ascii_case(entry))
}

/// The first SSH `string` of `blob` (4-byte big-endian length, then bytes).
fn ssh_string(blob: &[u8]) -> Option<&[u8]> {
    let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    blob.get(4..4usize.checked_add(len)?)
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if s.is_empty() || !s.len().is_multiple_of(4) || s.len() > 16 * 1024 {
        return None;
    }
    let body = s.strip_suffix(b"==").or_else(|| s.strip_suffix(b"=")).unwrap_or(s);
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in body {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

fn base64_encode_nopad(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_entries_follow_openssh() {
        assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_encode_nopad(b"hello"), "aGVsbG8");
        assert_eq!(base64_decode("a*=="), None);
        assert_eq!(host_entry("Guest.Lab", 22), "guest.lab");
        assert_eq!(host_entry("127.0.0.1", 2222), "[127.0.0.1]:2222");
    }

    const KEY_A: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f";
    const KEY_B: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/";

    #[test]
    fn the_parsed_file_is_reused_until_anyone_changes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        let kh = KnownHosts::new(path.clone());
        assert!(kh.pin_material("g1", 22).unwrap().is_empty());
        assert!(kh.trust("g1", 22, KEY_A).unwrap());
        assert_eq!(kh.pinned("G1", 22).unwrap().len(), 1, "hosts match case-insensitively");
        let first = kh.view().unwrap();
        assert!(Arc::ptr_eq(&first, &kh.view().unwrap()), "an unchanged file is not parsed again");
        // An operator's edit outside cradle (in place, same inode) is seen at once.
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, format!("{text}*.lab {KEY_A}\n[g2]:2222,g3 {KEY_A}\n")).unwrap();
        assert_eq!(kh.pinned("g2", 2222).unwrap().len(), 1);
        assert_eq!(kh.pinned("g3", 22).unwrap().len(), 1);
        let material = kh.pin_material("g1", 22).unwrap();
        assert_eq!(material.len(), 2, "the pin, then the wildcard line: {material:?}");
        assert!(material[1].starts_with("*.lab "));
        // A pin this process adds updates the view in place; it matches a fresh parse.
        assert!(kh.trust("g4", 22, KEY_A).unwrap());
        let fresh = KnownHosts::new(path.clone());
        for host in ["g1", "g2", "g3", "g4"] {
            assert_eq!(kh.pin_material(host, 22).unwrap(), fresh.pin_material(host, 22).unwrap(), "{host}");
        }
        assert_eq!(kh.pinned("g4", 22).unwrap().len(), 1);
        assert!(!kh.trust("g4", 22, KEY_A).unwrap(), "pinned once");
        assert!(kh.forget("g1", 22).unwrap());
        assert!(kh.pin_material("g1", 22).unwrap().is_empty());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(kh.pinned("g2", 2222).is_err(), "a file others can read is refused, cached or not");
    }

    #[test]
    fn an_own_servers_key_pinned_at_new_ports_keeps_one_line_and_replaces_a_stale_key_at_its_port() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("known_hosts");
        let kh = KnownHosts::new(path.clone());
        assert!(kh.trust("other", 22, KEY_B).unwrap());
        let lines = || fs::read_to_string(&path).unwrap().lines().count();
        // Five starts of the same node, each on a new port, the last still listening.
        let mut last = None;
        for _ in 0..5 {
            drop(last.take()); // the earlier start has stopped
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            assert!(kh.pin_own_server("127.0.0.1", port, KEY_A).unwrap());
            assert_eq!(lines(), 2, "one line for the node, the operator's other pin kept");
            last = Some((listener, port));
        }
        let (live, live_port) = last.unwrap();
        assert!(!kh.pin_own_server("127.0.0.1", live_port, KEY_A).unwrap(), "already pinned");
        // A port an earlier cluster pinned with another key is ours now: replaced.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let reused = listener.local_addr().unwrap().port();
        assert!(kh.forget("127.0.0.1", live_port).unwrap());
        assert!(kh.trust("127.0.0.1", live_port, KEY_A).unwrap());
        assert!(kh.trust("127.0.0.1", reused, KEY_B).unwrap());
        assert!(kh.trust("127.0.0.1", reused, KEY_A).is_err(), "trust refuses, as it must for any other host");
        assert!(kh.pin_own_server("127.0.0.1", reused, KEY_A).unwrap());
        assert_eq!(kh.pinned("127.0.0.1", reused).unwrap(), [PublicKey::parse(KEY_A).unwrap()]);
        // A concurrent start of the same cluster still listens at its port: kept.
        assert_eq!(kh.pinned("127.0.0.1", live_port).unwrap().len(), 1);
        assert_eq!(kh.pinned("other", 22).unwrap().len(), 1);
        drop((live, listener));
    }

    #[test]
    fn bad_and_private_keys_are_refused_without_echoing_them() {
        let canary = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAACANARY\n";
        let e = PublicKey::parse(canary).expect_err("private");
        assert!(!e.message.contains("CANARY") && e.message.contains("public half"), "{e}");
        let e = PublicKey::parse("ssh-ed25519 c3NoLXJzYQ==").expect_err("type mismatch");
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(PublicKey::parse("AAAAC3NzaC1lZDI1NTE5").is_err());
    }
}
