//! Deterministic fault injection: a spec (`kind=probability,...`) and a seed.
//!
//! Contract: each fault kind draws from its own SplitMix64 stream seeded from the seed
//! and the kind's name, so the N-th decision of a kind is the same on every run with the
//! same spec and seed, whatever other kinds were drawn meanwhile. A probability of 1
//! always fires, 0 never. Parsing fails on unknown kinds or probabilities outside 0..=1.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::SimError;

/// The faults the simulator can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Any API request fails with a transient 500 before doing anything.
    Api500,
    /// A VM-changing request fails with `VM is locked (backup)`.
    Locked,
    /// A VM-changing request fails with the node-local lock-file timeout.
    LockFile,
    /// A task-starting request fails with `got no worker upid - start worker failed`.
    NoWorker,
    /// A task-starting request does its action, then answers HTTP 596.
    Http596,
    /// A task-starting request does its action, then the connection is dropped unanswered.
    Drop,
    /// A clone task fails (and the half-made VM is removed, as PVE does).
    CloneFail,
    /// A booted guest never answers SSH (the TCP connection opens, no banner follows).
    SshSilent,
    /// Cloud-init finishes with `status: error` (exit 1).
    CloudInitError,
    /// Cloud-init finishes `done` with recoverable errors (exit 2, `degraded done`).
    CloudInitDegraded,
    /// A reboot (in-guest or API) never comes back.
    RebootHang,
    /// The image's cloud-init has `datasource_list: [NoCloud, None]`: a cold start
    /// without the cloud-init drive falls back to DataSourceNone, a new instance,
    /// and regenerates the SSH host key.
    DatasourceNone,
    /// Another writer makes the same HA rule change first: a create finds the
    /// rule already defined, a digest-checked update finds the file changed.
    HaRace,
}

impl FaultKind {
    /// All kinds with their spec names.
    pub const ALL: [(FaultKind, &'static str); 13] = [
        (FaultKind::Api500, "api-500"),
        (FaultKind::Locked, "locked"),
        (FaultKind::LockFile, "lock-timeout"),
        (FaultKind::NoWorker, "no-worker"),
        (FaultKind::Http596, "http-596"),
        (FaultKind::Drop, "drop-after"),
        (FaultKind::CloneFail, "clone-fail"),
        (FaultKind::SshSilent, "ssh-silent"),
        (FaultKind::CloudInitError, "cloud-init-error"),
        (FaultKind::CloudInitDegraded, "cloud-init-degraded"),
        (FaultKind::RebootHang, "reboot-hang"),
        (FaultKind::DatasourceNone, "datasource-none"),
        (FaultKind::HaRace, "ha-race"),
    ];

    /// The spec name.
    pub fn name(self) -> &'static str {
        FaultKind::ALL.iter().find(|(k, _)| *k == self).map(|(_, n)| *n).unwrap_or("?")
    }
}

/// Which faults fire and how often.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultSpec {
    /// Probability (0..=1) per kind.
    pub rates: BTreeMap<FaultKind, f64>,
}

impl FaultSpec {
    /// Parse `kind=p,kind2=p2` (a bare `kind` means p = 1). Empty = no faults.
    pub fn parse(spec: &str) -> Result<Self, SimError> {
        let mut rates = BTreeMap::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, p) = match part.split_once('=') {
                Some((n, p)) => (n.trim(), p.trim()),
                None => (part, "1"),
            };
            let err = |reason: String| SimError::FaultSpec { spec: spec.to_string(), reason };
            let kind = FaultKind::ALL.iter().find(|(_, n)| *n == name).map(|(k, _)| *k).ok_or_else(|| {
                let known: Vec<&str> = FaultKind::ALL.iter().map(|(_, n)| *n).collect();
                err(format!("unknown fault '{name}'; known: {}", known.join(", ")))
            })?;
            let p: f64 = p
                .parse()
                .ok()
                .filter(|p: &f64| (0.0..=1.0).contains(p))
                .ok_or_else(|| err(format!("probability '{p}' of '{name}' is not in 0..1")))?;
            rates.insert(kind, p);
        }
        Ok(FaultSpec { rates })
    }
}

/// The live fault source of one cluster.
#[derive(Debug)]
pub struct Faults {
    spec: FaultSpec,
    streams: Mutex<BTreeMap<FaultKind, u64>>,
    seed: u64,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn name_hash(name: &str) -> u64 {
    // FNV-1a: stable across Rust versions, unlike std's hasher.
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl Faults {
    /// A fault source for `spec` and `seed`.
    pub fn new(spec: FaultSpec, seed: u64) -> Self {
        Faults { spec, streams: Mutex::new(BTreeMap::new()), seed }
    }

    /// Draw the next decision of `kind`: true = inject it now.
    pub fn fire(&self, kind: FaultKind) -> bool {
        let Some(&p) = self.spec.rates.get(&kind) else {
            return false;
        };
        if p <= 0.0 {
            return false;
        }
        let mut streams = match self.streams.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let state = streams.entry(kind).or_insert_with(|| self.seed ^ name_hash(kind.name()));
        let x = splitmix(state);
        // 53 random bits -> [0, 1)
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        u < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_gives_same_decisions_and_other_kinds_do_not_disturb() {
        let spec = FaultSpec::parse("api-500=0.5,clone-fail=0.5").unwrap();
        let a = Faults::new(spec.clone(), 42);
        let b = Faults::new(spec, 42);
        let seq_a: Vec<bool> = (0..64).map(|_| a.fire(FaultKind::Api500)).collect();
        let seq_b: Vec<bool> = (0..64)
            .map(|_| {
                b.fire(FaultKind::CloneFail);
                b.fire(FaultKind::Api500)
            })
            .collect();
        assert_eq!(seq_a, seq_b);
        assert!(seq_a.iter().any(|x| *x) && seq_a.iter().any(|x| !*x));
    }

    #[test]
    fn probability_one_always_fires_and_unlisted_never() {
        let f = Faults::new(FaultSpec::parse("ssh-silent").unwrap(), 7);
        assert!((0..100).all(|_| f.fire(FaultKind::SshSilent)));
        assert!((0..100).all(|_| !f.fire(FaultKind::Drop)));
    }

    #[test]
    fn bad_specs_are_rejected_with_the_reason() {
        let e = FaultSpec::parse("nope=0.1").unwrap_err().to_string();
        assert!(e.contains("unknown fault 'nope'"), "{e}");
        let e = FaultSpec::parse("drop-after=2").unwrap_err().to_string();
        assert!(e.contains("not in 0..1"), "{e}");
    }
}
