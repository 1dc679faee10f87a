//! An OpenSSH known_hosts file as cradle's own store reads it (plain, hashed,
//! marked, wildcard and negated lines; `[host]:port` entries), then the pins of
//! a few hosts, a trust-on-first-use, and each line as a public key.
//!
//! Invariants: a key that parses re-parses from its own `kind base64` to the
//! same key, with a `SHA256:` fingerprint.
//!
//! The store reads a file, so each execution rewrites one scratch file in a
//! directory of this process (`$TMPDIR/cradle-fuzz-known-hosts-<pid>/`). It is
//! removed when the process exits normally (libFuzzer's `exit()` after
//! `-runs`/`-max_total_time`); a process that crashed or was killed leaves its
//! directory, which the next run removes (its pid no longer runs).
#![no_main]

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cradle_fuzz::ssh::known_hosts::{KnownHosts, PublicKey};
use libfuzzer_sys::fuzz_target;

const NEW_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for line in text.lines() {
        if let Ok(key) = PublicKey::parse(line) {
            let again = PublicKey::parse(&format!("{} {}", key.kind, key.base64)).expect("a parsed key re-parses");
            assert_eq!(again, key);
            assert!(key.fingerprint().starts_with("SHA256:"));
        }
    }
    let path = scratch().join("known_hosts");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .expect("scratch known_hosts");
    f.write_all(data).expect("write scratch known_hosts");
    drop(f);
    let store = KnownHosts::new(path);
    for (host, port) in [("127.20.0.10", 22), ("127.20.0.10", 2222), ("pve1.lab", 22), ("::1", 22)] {
        let _ = store.pinned(host, port);
    }
    let _ = store.trust("10.9.9.9", 2200, NEW_KEY);
});

const SCRATCH_PREFIX: &str = "cradle-fuzz-known-hosts-";

/// This process's scratch directory: created on first use, after removing the
/// ones of processes that are gone; removed at exit.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        remove_stale(&tmp);
        let dir = tmp.join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        // SAFETY: `remove_scratch` is a plain `extern "C" fn` without arguments
        // that never unwinds (it ignores every error); registering it has no
        // other precondition.
        #[allow(unsafe_code, reason = "libc's atexit is the only exit hook libFuzzer's exit() runs")]
        let registered = unsafe { libc::atexit(remove_scratch) };
        assert_eq!(registered, 0, "atexit");
        dir
    })
}

extern "C" fn remove_scratch() {
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("{SCRATCH_PREFIX}{}", std::process::id())));
}

/// Removes the scratch directories of processes that no longer run (a crash
/// or a kill skips `atexit`).
fn remove_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(SCRATCH_PREFIX)) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
