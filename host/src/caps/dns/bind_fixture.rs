//! The BIND 9 of the provider's tests: `cradle-testkit`'s throwaway named
//! (shared with the end-to-end tests) with fresh random TSIG keys [`KEY`]
//! (HMAC-SHA256) and [`KEY512`] (HMAC-SHA512) and the primary zones
//! `lab.example.` (updatable with either key), `10.0.10.in-addr.arpa.`
//! (with [`KEY`]) and `locked.example.` (no updates), all served by
//! `ns.lab.example.`. See [`cradle_testkit::bind`] for what it needs and how
//! the tests are skipped where BIND is missing.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

pub(super) use cradle_testkit::bind::random_secret;
use cradle_testkit::bind::{TsigKey, Zone};

use super::{DnsProviderConfig, DnsProviderKind, TsigAlgorithmName};
use crate::secrets::SecretRef;

/// The HMAC-SHA256 key allowed to update `lab.example.` and the reverse zone.
pub(super) const KEY: &str = "cradle-test-key";
/// The HMAC-SHA512 key allowed to update `lab.example.`.
pub(super) const KEY512: &str = "cradle-test-512";

const KEYS: [TsigKey; 2] = [
    TsigKey { name: KEY, algorithm: "hmac-sha256", bytes: 32 },
    TsigKey { name: KEY512, algorithm: "hmac-sha512", bytes: 64 },
];

const ZONES: [Zone; 3] = [
    Zone::new("lab.example", &[KEY, KEY512]),
    Zone { name: "10.0.10.in-addr.arpa", update_keys: &[KEY], ns_of: "lab.example" },
    Zone { name: "locked.example", update_keys: &[], ns_of: "lab.example" },
];

/// A running named (its `dig`, `log`, `port` and `dir` through `Deref`).
pub(super) struct Bind {
    named: cradle_testkit::bind::Bind,
    /// Base64 secret of [`KEY`].
    pub secret: String,
    /// Base64 secret of [`KEY512`].
    pub secret512: String,
}

impl std::ops::Deref for Bind {
    type Target = cradle_testkit::bind::Bind;

    fn deref(&self) -> &Self::Target {
        &self.named
    }
}

impl Bind {
    /// Start named, or `None` (with a message) when it is missing and
    /// `CRADLE_SKIP_BIND_TESTS=1` allows skipping. Panics, naming the packages, otherwise.
    pub fn start(test: &str) -> Option<Bind> {
        let named = cradle_testkit::bind::Bind::start(test, &KEYS, &ZONES)?;
        let (secret, secret512) = (named.secret(KEY).to_string(), named.secret(KEY512).to_string());
        Some(Bind { named, secret, secret512 })
    }

    /// A provider config for this server: `key` with `secret` (written to an
    /// owner-only file), for `zones`.
    pub fn config(&self, key: &str, secret: &str, zones: &[&str]) -> DnsProviderConfig {
        let path = self.dir.path().join(format!("secret-{}", random_secret(6).replace(['/', '+', '='], "x")));
        let mut f =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).expect("secret file");
        f.write_all(secret.as_bytes()).expect("write secret");
        DnsProviderConfig {
            kind: DnsProviderKind::Rfc2136,
            server: Some(self.server()),
            key_name: Some(key.into()),
            algorithm: if key == KEY512 { TsigAlgorithmName::HmacSha512 } else { TsigAlgorithmName::HmacSha256 },
            secret: Some(SecretRef::File(path)),
            endpoint: None,
            ptr: true,
            zones: zones.iter().map(|z| z.to_string()).collect(),
            ttl: 300,
        }
    }
}
