//! The BIND 9 of the end-to-end tests: `cradle-testkit`'s throwaway named
//! (shared with the host's unit tests) with one HMAC-SHA256 TSIG key [`KEY`]
//! allowed to update every zone it serves. See [`cradle_testkit::bind`] for
//! what it needs and how the tests are skipped where BIND is missing.

pub use cradle_testkit::bind::{Bind, SKIP_ENV, random_secret, write_secret};
use cradle_testkit::bind::{TsigKey, Zone};

/// The name of the HMAC-SHA256 key allowed to update every zone.
pub const KEY: &str = "cradle-e2e-key";

/// Start named as primary for `zones` (names without the trailing dot, e.g.
/// `lab.example`, each with its own `ns.` host), updatable with [`KEY`]
/// (its secret: `bind.secret(KEY)`); `None` when BIND is missing and the
/// test may be skipped.
pub fn start(test: &str, zones: &[&'static str]) -> Option<Bind> {
    let zones: Vec<Zone> = zones.iter().map(|z| Zone::new(z, &[KEY])).collect();
    Bind::start(test, &[TsigKey { name: KEY, algorithm: "hmac-sha256", bytes: 32 }], &zones)
}
