//! An OpenSSH known_hosts file as cradle's own store reads it (plain, hashed,
//! marked, wildcard and negated lines; `[host]:port` entries), then the pins of
//! a few hosts, a trust-on-first-use, and each line as a public key.
//!
//! Invariants: a key that parses re-parses from its own `kind base64` to the
//! same key, with a `SHA256:` fingerprint.
#![no_main]

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

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
    let dir = std::env::temp_dir().join(format!("cradle-fuzz-known-hosts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("known_hosts");
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
