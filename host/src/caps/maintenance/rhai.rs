//! `maintenance::*` for workflow scripts: the pure plan functions of this
//! folder over script values (no capability, no grant: the workflow's own
//! `proxmox` reads and writes are the checked calls).
//!
//! - `maintenance::diff(vm, live, allow)` → the VM's [`VmChanges`] as a map.
//!   `vm` is the workflow's vm value (`vm.spec`: the resolved vm-spec,
//!   `inventory::SpecRecord`; its `vmid` may be `()` when `live.vmid` is
//!   given); `live` is `#{ config: proxmox::get_config(..), pending:
//!   proxmox::get_pending(..), status: proxmox::vm_status(..), digest }`
//!   (`digest` may be left out or `()`: the config map's `digest` key, which
//!   `get_config` returns, is used); `allow` is `#{disk_removal,
//!   nic_replacement, disk_move}` (a missing flag is false).
//! - `maintenance::progress(planned, config, digest)` → `#{config:
//!   "todo"|"done", moves: [#{disk, volume, from, to}], resize: [#{disk,
//!   from, to}], changed: () | sentence}`
//!   (`digest` `()`: the config map's).
//! - `maintenance::outstanding(planned, config, pending)` → array of sentences.
//! - `maintenance::needs_cold_start(pending)` → bool.
//! - `maintenance::lift(planned)` → the terraform `ignore_changes` attributes
//!   the plan's operations need lifted (`["disk"]` when a disk is added,
//!   removed or grown; `[]` otherwise).
//!
//! Values convert through `rhai::serde`; a value of the wrong shape throws
//! `#{kind: "invalid", message}` naming the function, the VM and the field.

use std::collections::BTreeMap;

use rhai::serde::from_dynamic;
use rhai::{Array, Dynamic, FuncRegistration, Map, Module};

use super::change::{Allow, Live, PendingEntry, VmChanges, Wanted};
use super::{diff, needs_cold_start, outstanding, progress, pve};
use crate::caps::script_glue::{Res, invalid, to_map};

/// The module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("diff")
        .set_into_module(&mut m, |vm: Map, live: Map, allow: Map| -> Res<Map> { script_diff(&vm, &live, allow) });
    FuncRegistration::new("progress").set_into_module(
        &mut m,
        |planned: Map, config: Map, digest: Dynamic| -> Res<Map> {
            let planned = planned_of(planned, "progress")?;
            let config = config_of(&config, &planned.name, "progress")?;
            let digest = if digest.is_unit() {
                config.get("digest").cloned().unwrap_or_default()
            } else {
                digest.into_immutable_string().map(|s| s.to_string()).map_err(|t| {
                    invalid(format!("maintenance::progress: {}: the digest must be a string, not {t}", planned.name))
                })?
            };
            to_map(&progress(&planned, &config, &digest))
        },
    );
    FuncRegistration::new("outstanding").set_into_module(
        &mut m,
        |planned: Map, config: Map, pending: Array| -> Res<Array> {
            let planned = planned_of(planned, "outstanding")?;
            let config = config_of(&config, &planned.name, "outstanding")?;
            let pending = pending_of(pending, &planned.name, "outstanding")?;
            Ok(outstanding(&planned, &config, &pending).into_iter().map(Dynamic::from).collect())
        },
    );
    FuncRegistration::new("needs_cold_start").set_into_module(&mut m, |pending: Array| -> Res<bool> {
        Ok(needs_cold_start(&pending_of(pending, "the VM", "needs_cold_start")?))
    });
    FuncRegistration::new("lift").set_into_module(&mut m, |planned: Map| -> Res<Array> {
        let planned = planned_of(planned, "lift")?;
        Ok(lift(&planned).into_iter().map(|s| Dynamic::from(s.to_string())).collect())
    });
    m
}

/// The terraform `ignore_changes` attributes `planned` needs lifted.
pub fn lift(planned: &VmChanges) -> Vec<&'static str> {
    let disk =
        !planned.resize.is_empty() || planned.set.keys().chain(planned.delete.iter()).any(|k| pve::is_disk_key(k));
    if disk { vec!["disk"] } else { vec![] }
}

fn script_diff(vm: &Map, live: &Map, allow: Map) -> Res<Map> {
    let name = vm.get("name").map(|n| n.to_string()).unwrap_or_else(|| "the VM".into());
    let fail = |field: &str, e: &dyn std::fmt::Display| invalid(format!("maintenance::diff: {name}: {field}: {e}"));
    let mut spec = vm
        .get("spec")
        .and_then(|s| s.clone().try_cast::<Map>())
        .ok_or_else(|| fail("vm.spec", &"missing or not a map"))?;
    if spec.get("vmid").is_none_or(Dynamic::is_unit) {
        let vmid = live
            .get("vmid")
            .filter(|v| !v.is_unit())
            .cloned()
            .ok_or_else(|| fail("vm.spec.vmid", &"is () and live.vmid is not given: discover the VM first"))?;
        spec.insert("vmid".into(), vmid);
    }
    let want: Wanted = from_dynamic(&spec.into()).map_err(|e| fail("vm.spec", &e))?;
    let config_map = live
        .get("config")
        .and_then(|c| c.clone().try_cast::<Map>())
        .ok_or_else(|| fail("live.config", &"missing or not a map (proxmox::get_config)"))?;
    let config = config_of(&config_map, &name, "diff")?;
    let pending = match live.get("pending") {
        None => vec![],
        Some(p) if p.is_unit() => vec![],
        Some(p) => pending_of(
            p.clone()
                .try_cast::<Array>()
                .ok_or_else(|| fail("live.pending", &"not an array (proxmox::get_pending)"))?,
            &name,
            "diff",
        )?,
    };
    let running = match live.get("status") {
        Some(s) if !s.is_unit() => {
            let s =
                s.clone().try_cast::<Map>().ok_or_else(|| fail("live.status", &"not a map (proxmox::vm_status)"))?;
            s.get("status").is_some_and(|v| v.to_string() == "running")
        }
        _ => return Err(fail("live.status", &"missing (proxmox::vm_status)")),
    };
    let digest = match live.get("digest") {
        Some(d) if !d.is_unit() => d.to_string(),
        _ => config
            .get("digest")
            .cloned()
            .ok_or_else(|| fail("live.digest", &"missing, and the config has no digest"))?,
    };
    let allow: Allow = from_dynamic(&allow.into()).map_err(|e| fail("allow", &e))?;
    let live = Live { config, pending, running, digest };
    let changes = diff(&want, &live, &allow).map_err(|e| invalid(format!("maintenance::diff: {e}")))?;
    planned_map(&changes)
}

/// A VM's changes as scripts see them: every list present, `moves` too (the
/// plan file leaves an empty `moves` out, for plans written before moves
/// existed; a script reads `planned.moves` all the same).
pub fn planned_map(changes: &VmChanges) -> Res<Map> {
    let mut map = to_map(changes)?;
    map.entry("moves".into()).or_insert_with(|| Dynamic::from_array(Array::new()));
    Ok(map)
}

fn planned_of(planned: Map, function: &str) -> Res<VmChanges> {
    let name = planned.get("name").map(|n| n.to_string()).unwrap_or_else(|| "the VM".into());
    from_dynamic(&planned.into())
        .map_err(|e| invalid(format!("maintenance::{function}: {name}: planned is not a maintenance plan's VM: {e}")))
}

/// A config map as strings (`()` values dropped: no value).
fn config_of(config: &Map, name: &str, function: &str) -> Res<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (k, v) in config {
        if v.is_unit() {
            continue;
        }
        if v.is_map() || v.is_array() {
            return Err(invalid(format!(
                "maintenance::{function}: {name}: config key `{k}` is a {}, not a value",
                v.type_name()
            )));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

fn pending_of(pending: Array, name: &str, function: &str) -> Res<Vec<PendingEntry>> {
    pending
        .into_iter()
        .map(|p| {
            from_dynamic(&p).map_err(|e| invalid(format!("maintenance::{function}: {name}: a pending entry: {e}")))
        })
        .collect()
}
