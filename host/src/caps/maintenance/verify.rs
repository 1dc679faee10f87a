//! After an apply: which planned changes are not in effect and not pending
//! ([`outstanding`]: PVE dropped or refused them), and whether anything waits
//! for a cold start ([`needs_cold_start`]).
//!
//! `GET config` returns the effective config (pending values applied, pending
//! deletes gone), so a change PVE keeps pending counts as in effect there;
//! `GET pending` tells the two apart.

use std::collections::BTreeMap;

use super::change::{PendingEntry, VmChanges};
use super::pve;

/// The planned changes whose effect is not in `live_config` (the effective
/// config), one sentence each (`memory is 2048, the plan wanted 4096`);
/// empty when the plan is in effect or pending.
pub fn outstanding(
    planned: &VmChanges,
    live_config: &BTreeMap<String, String>,
    pending: &[PendingEntry],
) -> Vec<String> {
    let mut out = vec![];
    for (key, expect) in &planned.expect {
        let live = live_config.get(key).map(String::as_str);
        let expect = &super::progress::expected(planned, key, expect.as_deref(), live);
        if let Some(m) = planned.moves.iter().find(|m| &m.disk == key)
            && live.map(pve::Drive::parse).as_ref().and_then(pve::Drive::storage) != Some(m.to.as_str())
        {
            out.push(format!("{key} is {}, the plan moves it to {}", live.unwrap_or("absent"), m.to));
            continue;
        }
        let pending_here = pending.iter().find(|p| &p.key == key);
        let in_pending = pending_here.is_some_and(|p| {
            if p.delete {
                expect.is_none()
            } else {
                pve::same_effect(key, expect.as_deref(), p.pending.as_deref(), false)
            }
        });
        if in_pending || pve::same_effect(key, expect.as_deref(), live, false) {
            continue;
        }
        let want = expect.as_deref().unwrap_or("removed");
        out.push(format!("{key} is {}, the plan wanted {want}", live.unwrap_or("absent")));
    }
    out
}

/// Whether anything is pending until a cold start (a pending value or a
/// pending delete, this plan's or not).
pub fn needs_cold_start(pending: &[PendingEntry]) -> bool {
    pending.iter().any(|p| p.pending.is_some() || p.delete)
}
