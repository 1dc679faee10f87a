//! Migration (+ precheck) and disk resize as tasks.
//!
//! Contract, as qemu-server e6352be decides it: the API checks the target, the VM's
//! existence, its lock and `online` for a running VM (`can't migrate running VM without
//! --online`) before the worker (HTTP 500); every other refusal happens inside the
//! `qmigrate` worker (`src/PVE/QemuMigrate.pm`), so the POST answers a UPID and the task
//! fails with exit status `migration aborted`, its log saying why: a running VM's
//! attached local disks without `with-local-disks=1`, a linked clone on local storage
//! (`can't migrate '<volid>' as it's a clone of '<base>'`). The VM holds `lock: migrate`
//! until a successful `qmigrate` ends, then lives on the target. Snippets are not
//! checked (as on PVE). Resize takes `+N[KMGT]` or an absolute size (no unit = bytes)
//! and never shrinks; a size equal to the current one is an OK task that writes nothing;
//! the POST checks only its parameters and returns a `resize` task, whose worker checks
//! the VM, its digest (`checksum mismatch (file change by other user?)`), lock, disk and
//! size (Qemu.pm:6002-6070) and fails the task when one does not fit.

use std::sync::Arc;

use serde_json::{Value, json};

use super::qemu::{check_lock, vm_on, vm_on_mut};
use super::{ApiError, ApiResult, Params, Reply};
use crate::model::{Power, Vm, ids, props};
use crate::sim::{Sim, lock};

fn upid_reply(upid: String) -> ApiResult {
    Ok(Reply::data(json!(upid)))
}

fn local_disks(sim: &Sim, vm: &Vm) -> Vec<Value> {
    vm.config
        .iter()
        .filter(|(k, _)| props::is_drive_key(k))
        .filter(|(_, v)| {
            let store = v.split(':').next().unwrap_or("");
            sim.cfg.storages.iter().any(|s| s.id == store && !s.shared)
        })
        .map(|(k, v)| {
            let volid = v.split(',').next().unwrap_or("");
            let size = props::prop(v, "size").and_then(|s| ids::parse_size(&s)).unwrap_or(4 << 20);
            json!({"volid": volid, "drivename": k, "size": size, "is_unused": 0, "cdrom": u8::from(volid.contains("cloudinit")), "shared": 0, "replicate": 1})
        })
        .collect()
}

pub fn migrate_precheck(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["target"])?;
    let st = lock(&sim.state);
    let vm = vm_on(&st, node, vmid)?;
    let others: Vec<&String> = sim.cfg.nodes.iter().filter(|n| *n != node).collect();
    Ok(Reply::data(json!({
        "running": u8::from(vm.power == Power::Running),
        "allowed_nodes": others,
        "not_allowed_nodes": {},
        "local_disks": local_disks(sim, vm),
        "local_resources": [],
        "mapped-resources": [],
        // qemu-server e6352be src/PVE/API2/Qemu.pm:5472-5473.
        "mapped-resource-info": {},
        "has-dbus-vmstate": 1,
    })))
}

pub fn migrate(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&[
        "target",
        "online",
        "with-local-disks",
        "targetstorage",
        "force",
        "bwlimit",
        "migration_type",
        "migration_network",
        "with-conntrack-state",
    ])?;
    let target = p.required("target")?.to_string();
    // qemu-server e6352be, src/PVE/API2/Qemu.pm:5567 (a parameter error) and :5571
    // (pve-cluster's `check_node_exists`, a plain die: src/PVE/Cluster.pm:807).
    if target == node {
        return Err(ApiError::param("target", "target is local node."));
    }
    if !sim.has_node(&target) {
        return Err(ApiError::die(format!("no such cluster node '{target}'")));
    }
    let online = p.bool("online", false)?;
    let with_local = p.bool("with-local-disks", false)?;
    let mut st = lock(&sim.state);
    let vm = vm_on(&st, node, vmid)?;
    // Qemu.pm:5588-5596: the lock and the `online` check before the worker (and
    // before the HA branch).
    check_lock(vm).map_err(ApiError::die)?;
    let running = vm.power == Power::Running;
    if running && !online {
        return Err(ApiError::die("can't migrate running VM without --online"));
    }
    if st.ha_of(vmid).is_some() {
        let upid = sim.new_task(&mut st, node, "hamigrate", &vmid.to_string(), Some(vmid));
        Sim::task_log(&mut st, &upid, format!("Requesting HA migration for VM {vmid} to node {target}"));
        Sim::finish_task_in(&mut st, &upid, Ok(()));
        sim.changed();
        drop(st);
        let n = node.to_string();
        sim.after(sim.scaled(sim.cfg.timings.ha_reaction), move |sim| {
            // The HA manager migrates a running VM online, never with local disks.
            migrate_task(sim, &n, vmid, target, false);
        });
        return upid_reply(upid);
    }
    drop(st);
    upid_reply(migrate_task(sim, node, vmid, target, with_local))
}

/// A `qmigrate` log line (pve-guest-common 4a8f6cb, src/PVE/AbstractMigrate.pm:15-27:
/// a time stamp, and `ERROR:` for errors).
fn log_line(error: bool, msg: &str) -> String {
    let stamp = ids::log_stamp(ids::now_unix());
    let stamp = stamp.split(',').next().unwrap_or_default();
    format!("{stamp}{} {msg}", if error { " ERROR:" } else { "" })
}

/// The base image a volume is a linked clone of (pve-storage's `parse_volname`, its
/// 4th value: `local-lvm:base-9000-disk-0/vm-101-disk-0` → `base-9000-disk-0`).
fn clone_base(volid: &str) -> Option<&str> {
    let volname = volid.split_once(':').map_or(volid, |(_, v)| v);
    let (dir, _) = volname.rsplit_once('/')?;
    let base = dir.rsplit('/').next().unwrap_or(dir);
    base.starts_with("base-").then_some(base)
}

/// `QemuMigrate::scan_local_volumes` (qemu-server e6352be, src/PVE/QemuMigrate.pm:367-605)
/// for the volumes the simulator has: the lines it logs and, when it refuses, its error.
fn scan_local_volumes(sim: &Sim, vm: &Vm, with_local: bool) -> (Vec<String>, Result<(), String>) {
    let running = vm.power == Power::Running;
    let (mut lines, mut errors, mut local) = (Vec::new(), Vec::new(), Vec::new());
    for (_, value) in vm.config.iter().filter(|(k, _)| props::is_drive_key(k)) {
        let volid = value.split(',').next().unwrap_or_default();
        if volid == "none" || volid == "cdrom" || volid.starts_with('/') {
            continue;
        }
        let store = volid.split(':').next().unwrap_or_default();
        let Some(spec) = sim.cfg.storages.iter().find(|s| s.id == store) else { continue };
        if spec.shared {
            continue;
        }
        let cdrom = value.contains("media=cdrom");
        if cdrom && volid.contains("-cloudinit") {
            lines.push(log_line(false, &format!("found generated disk '{volid}' (in current VM config)")));
            continue;
        }
        local.push((volid.to_string(), spec.kind.clone()));
        lines.push(log_line(false, &format!("found local disk '{volid}' (attached)")));
        if cdrom {
            errors.push((volid.to_string(), "local cdrom image".to_string()));
        } else if running && !with_local {
            // :540-543, logged per volume; the scan then aborts.
            errors.push((
                volid.to_string(),
                "can't live migrate attached local disks without with-local-disks option".to_string(),
            ));
        }
    }
    for (volid, err) in &errors {
        lines.push(log_line(false, &format!("can't migrate local disk '{volid}': {err}")));
    }
    let refused = if !errors.is_empty() {
        Some("can't migrate VM - check log".to_string())
    } else {
        // :569-588, the additional checks of local volumes. The clone check's `die` has
        // no newline, so Perl appends where it died.
        local.iter().find_map(|(volid, kind)| {
            if !["dir", "btrfs", "zfspool", "lvmthin", "lvm"].contains(&kind.as_str()) {
                return Some(format!("can't migrate '{volid}' - storage type '{kind}' not supported"));
            }
            clone_base(volid).map(|base| {
                format!(
                    "can't migrate '{volid}' as it's a clone of '{base}' at /usr/share/perl5/PVE/QemuMigrate.pm line 586."
                )
            })
        })
    };
    match refused {
        Some(e) => (lines, Err(format!("Problem found while scanning volumes - {e}"))),
        None => (lines, Ok(())),
    }
}

/// The `qmigrate` worker. `prepare` and phase 1 (the lock, the local volumes) run at
/// once; a refusal ends the task `migration aborted`, its reason in the log
/// (AbstractMigrate.pm:178-188, 240-242). Otherwise the VM is `lock: migrate` until
/// it lives on the target.
fn migrate_task(sim: &Arc<Sim>, node: &str, vmid: u32, target: String, with_local: bool) -> String {
    let mut st = lock(&sim.state);
    let upid = sim.new_task(&mut st, node, "qmigrate", &vmid.to_string(), Some(vmid));
    Sim::task_arg(&mut st, &upid, "target", target.clone());
    let checked = match vm_on(&st, node, vmid) {
        Err(_) => Err((false, format!("Configuration file '{}' does not exist", Vm::conf_path(node, vmid)))),
        Ok(vm) => match check_lock(vm) {
            Err(e) => Err((false, e)),
            Ok(()) => {
                let (lines, r) = scan_local_volumes(sim, vm, with_local);
                let starting = log_line(false, &format!("starting migration of VM {vmid} to node '{target}'"));
                let lines: Vec<String> = std::iter::once(starting).chain(lines).collect();
                for l in lines {
                    Sim::task_log(&mut st, &upid, l);
                }
                r.map_err(|e| (true, e))
            }
        },
    };
    if let Err((phase1, e)) = checked {
        if phase1 {
            Sim::task_log(&mut st, &upid, log_line(true, &e));
        }
        Sim::task_log(&mut st, &upid, log_line(true, &format!("migration aborted (duration 00:00:00): {e}")));
        Sim::finish_task_in(&mut st, &upid, Err("migration aborted".into()));
        sim.changed();
        return upid;
    }
    if let Ok(vm) = vm_on_mut(&mut st, node, vmid) {
        vm.config.insert("lock".into(), "migrate".into());
    }
    sim.changed();
    drop(st);
    let u = upid.clone();
    let src = node.to_string();
    sim.after(sim.scaled(sim.cfg.timings.migrate), move |sim| {
        let mut st = lock(&sim.state);
        let r = match vm_on_mut(&mut st, &src, vmid) {
            Ok(vm) => {
                vm.node = target.clone();
                if vm.lock() == Some("migrate") {
                    vm.config.remove("lock");
                }
                Ok(())
            }
            Err(_) => Err(format!("VM {vmid} vanished during migration")),
        };
        Sim::task_log(&mut st, &u, log_line(false, "migration finished successfully (duration 00:00:08)"));
        Sim::finish_task_in(&mut st, &u, r);
        sim.changed();
    });
    upid
}

/// The `size` parameter (`\+?\d+(\.\d+)?[KMGT]?`, Qemu.pm:5960) as `(relative,
/// bytes)`: no unit means bytes (Qemu.pm:6036-6046).
fn resize_amount(size: &str) -> Option<(bool, u64)> {
    let (relative, s) = match size.strip_prefix('+') {
        Some(s) => (true, s),
        None => (false, size),
    };
    let (num, mult) = match s.char_indices().last()? {
        (i, 'K') => (&s[..i], 1u64 << 10),
        (i, 'M') => (&s[..i], 1 << 20),
        (i, 'G') => (&s[..i], 1 << 30),
        (i, 'T') => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, "0"));
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !digits(frac) {
        return None;
    }
    let n: f64 = num.parse().ok()?;
    Some((relative, (n * mult as f64) as u64))
}

pub fn resize(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["disk", "size", "digest", "skiplock"])?;
    let disk = p.required("disk")?.to_string();
    let size = p.required("size")?.to_string();
    let (relative, amount) = resize_amount(&size)
        .ok_or_else(|| ApiError::param("size", format!("value does not match the regex pattern: {size}")))?;
    let skiplock = p.bool("skiplock", false)?;
    let digest = p.get("digest").map(str::to_string);
    // Only the parameters are checked before the worker (Qemu.pm:6068-6071): the
    // worker's first step is the `$updatefn` below, so it runs at once and a
    // refusal is a failed task, not an HTTP error.
    let mut st = lock(&sim.state);
    let upid = sim.new_task(&mut st, node, "resize", &vmid.to_string(), Some(vmid));
    let checked = (|| {
        let Ok(vm) = vm_on(&st, node, vmid) else {
            return Err(format!("Configuration file '{}' does not exist", Vm::conf_path(node, vmid)));
        };
        // Qemu.pm:6006-6008: the digest, then the lock.
        if digest.as_deref().is_some_and(|d| d != vm.digest()) {
            return Err("checksum mismatch (file change by other user?)".into());
        }
        if !skiplock {
            check_lock(vm)?;
        }
        let val = vm.config.get(&disk).ok_or_else(|| format!("disk '{disk}' does not exist"))?;
        if val.contains("media=cdrom") {
            return Err("you can't resize a cdrom".into());
        }
        // `volume_size_info` (Qemu.pm:6030): the volume's size, `size=` or what the
        // VM's volume list remembers.
        let old = vm.volume_size(val.split(',').next().unwrap_or("")).unwrap_or(0);
        let new = if relative { old + amount } else { amount };
        // Qemu.pm:6048.
        if new < old {
            return Err("shrinking disks is not supported".into());
        }
        Ok((old, new))
    })();
    let new = match checked {
        // Qemu.pm:6050 `return if $size == $newsize;`: the task ends OK and the
        // config (and so its digest) is left as it is.
        Ok((old, new)) if old == new => {
            Sim::finish_task_in(&mut st, &upid, Ok(()));
            sim.changed();
            return upid_reply(upid);
        }
        Ok((_, new)) => new,
        Err(e) => {
            Sim::finish_task_in(&mut st, &upid, Err(e));
            sim.changed();
            return upid_reply(upid);
        }
    };
    drop(st);
    let u = upid.clone();
    sim.after(sim.scaled(sim.cfg.timings.resize), move |sim| {
        let mut st = lock(&sim.state);
        if let Some(vm) = st.vms.get_mut(&vmid)
            && let Some(v) = vm.config.get_mut(&disk)
        {
            let parts: Vec<String> = v.split(',').filter(|x| !x.starts_with("size=")).map(str::to_string).collect();
            *v = format!("{},size={}", parts.join(","), ids::format_size(new));
        }
        Sim::finish_task_in(&mut st, &u, Ok(()));
        sim.changed();
    });
    upid_reply(upid)
}
