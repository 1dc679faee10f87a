//! [`progress`]: how far the apply of a plan has got, read from PVE alone, so
//! a rerun after a crash (kill -9 between any two steps) does nothing twice
//! and needs no local record.
//!
//! The rule:
//! - a plan with no operations is done, whatever the config;
//! - the config's digest is still the plan's: nothing was written since the
//!   plan; the config write is to do (when the plan writes anything) and
//!   every resize is to do;
//! - else the config's untouched keys must still hash to [`VmChanges::rest`]
//!   and every touched key ([`VmChanges::expect`]) must have either its
//!   planned effect (the write happened: the config step is done) or, in a
//!   plan with no config write, its plan-time value; a resized drive is
//!   compared without `size=`, and each resize is done iff the live size is
//!   its target, to do iff it is still the plan-time size; a moved drive is
//!   compared by storage (its new volume's name is PVE's choice), and each
//!   move is done iff the drive is on its target storage, to do iff it still
//!   holds its plan-time volume;
//! - anything else — a touched key with a third value, a key at its
//!   plan-time value while others have their planned effect (PVE writes a
//!   PUT at once: someone else did), an untouched key changed, or a new
//!   digest with nothing of the plan in effect — is `changed`: someone else
//!   changed the VM, and apply writes nothing ("plan again").

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::change::{Move, Resize, VmChanges};
use super::diff::rest_hash;
use super::pve;

/// Whether a step is still to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Still to do.
    Todo,
    /// Done (or nothing to do).
    Done,
}

/// How far an apply has got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The config write (`Done` when the plan writes nothing).
    pub config: Step,
    /// Moves still to do.
    pub moves: Vec<Move>,
    /// Resizes still to do.
    pub resize: Vec<Resize>,
    /// Set when someone else changed the VM since the plan: a sentence naming
    /// what differs, ending in "plan again".
    pub changed: Option<String>,
}

/// How far the apply of `planned` has got on `live_config` (the effective
/// config) whose digest is `digest` (see the module doc).
pub fn progress(planned: &VmChanges, live_config: &BTreeMap<String, String>, digest: &str) -> Progress {
    let writes = !planned.set.is_empty() || !planned.delete.is_empty();
    if !writes && planned.resize.is_empty() && planned.moves.is_empty() {
        // Nothing to do, so nothing to clobber: no digest or value matters.
        return Progress { config: Step::Done, moves: vec![], resize: vec![], changed: None };
    }
    if digest == planned.digest {
        let config = if writes { Step::Todo } else { Step::Done };
        return Progress { config, moves: planned.moves.clone(), resize: planned.resize.clone(), changed: None };
    }
    let changed = |why: String| Progress { config: Step::Todo, moves: vec![], resize: vec![], changed: Some(why) };
    let touched: BTreeSet<&str> = planned.expect.keys().map(String::as_str).collect();
    if rest_hash(live_config, &touched) != planned.rest {
        return changed(format!(
            "changed since the plan: {} settings the plan does not touch differ from what the plan read; plan again",
            planned.name
        ));
    }
    let resized: BTreeMap<&str, &Resize> = planned.resize.iter().map(|r| (r.disk.as_str(), r)).collect();
    let (mut at_expect, mut at_before, mut other) = (vec![], vec![], vec![]);
    for (key, expect) in &planned.expect {
        let live = live_config.get(key).map(String::as_str);
        let ignore_size = resized.contains_key(key.as_str());
        let before = planned.before.get(key).cloned().flatten();
        let expect = expected(planned, key, expect.as_deref(), live);
        if pve::same_effect(key, expect.as_deref(), live, ignore_size) {
            at_expect.push(key.as_str());
        } else if pve::same_effect(key, before.as_deref(), live, ignore_size) {
            at_before.push(key.as_str());
        } else {
            other.push(describe(key, live, before.as_deref()));
        }
    }
    // Keys only resized or moved are at their plan-time value and their
    // effect alike (size and volume aside): the config step does not decide
    // them.
    let config_keys = |keys: &[&str]| keys.iter().filter(|k| !only_operated(planned, k)).count();
    if !other.is_empty() {
        return changed(format!("changed since the plan: {}; plan again", other.join(", ")));
    }
    let config = match (config_keys(&at_expect), config_keys(&at_before)) {
        (_, 0) => Step::Done,
        (0, _) => Step::Todo,
        _ => {
            let keys: Vec<String> = at_before
                .iter()
                .filter(|k| !only_operated(planned, k))
                .map(|k| {
                    describe(
                        k,
                        live_config.get(*k).map(String::as_str),
                        planned.before.get(*k).cloned().flatten().as_deref(),
                    )
                })
                .collect();
            return changed(format!(
                "changed since the plan: {} back at what the plan read while the plan's other changes are in effect; plan again",
                keys.join(", ")
            ));
        }
    };
    let mut progressed = config == Step::Done && writes;
    let mut moves = vec![];
    for m in &planned.moves {
        let drive = live_config.get(&m.disk).map(|v| pve::Drive::parse(v));
        match drive {
            Some(d) if d.storage() == Some(m.to.as_str()) => progressed = true,
            Some(d) if d.volume == m.volume => moves.push(m.clone()),
            _ => {
                let now = drive.map_or("absent".to_string(), |d| format!("on {}", d.volume));
                return changed(format!(
                    "changed since the plan: {} is {now} (plan read {}, plan moves it to {}); plan again",
                    m.disk, m.volume, m.to
                ));
            }
        }
    }
    let mut todo = vec![];
    for r in &planned.resize {
        let size = live_config.get(&r.disk).and_then(|v| pve::Drive::parse(v).size_gib());
        let (from, to) = (pve::size_gib(&r.from), pve::size_gib(&r.to));
        if size.is_some() && size == to {
            progressed = true;
        } else if size.is_some() && size == from {
            todo.push(r.clone());
        } else {
            let now = size.map_or("unreadable".to_string(), |s| format!("{s} GiB"));
            return changed(format!(
                "changed since the plan: {} is {now} (plan read {}, plan grows it to {}); plan again",
                r.disk, r.from, r.to
            ));
        }
    }
    if !progressed {
        return changed(format!(
            "changed since the plan: {}'s config digest is no longer the plan's, though none of the plan is in effect (someone wrote the config or changed what is pending); plan again",
            planned.name
        ));
    }
    Progress { config, moves, resize: todo, changed: None }
}

/// Whether `key` is only grown or moved by the plan (not in `set`/`delete`).
fn only_operated(planned: &VmChanges, key: &str) -> bool {
    (planned.resize.iter().any(|r| r.disk == key) || planned.moves.iter().any(|m| m.disk == key))
        && !planned.set.contains_key(key)
        && !planned.delete.iter().any(|d| d == key)
}

/// `expect` for `key` as the live config shows it done: a planned move whose
/// drive is on its target storage has PVE's new volume ([`pve::moved`]).
pub(super) fn expected(planned: &VmChanges, key: &str, expect: Option<&str>, live: Option<&str>) -> Option<String> {
    let (Some(expect), Some(live)) = (expect, live) else { return expect.map(String::from) };
    if let Some(m) = planned.moves.iter().find(|m| m.disk == key) {
        let now = pve::Drive::parse(live);
        if now.storage() == Some(m.to.as_str()) {
            return Some(pve::moved(expect, &now.volume));
        }
    }
    Some(expect.to_string())
}

/// `memory is 3072 (plan read 2048)`.
fn describe(key: &str, live: Option<&str>, before: Option<&str>) -> String {
    format!("{key} is {} (plan read {})", live.unwrap_or("absent"), before.unwrap_or("absent"))
}
