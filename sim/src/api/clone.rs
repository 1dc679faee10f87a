//! `POST /nodes/{node}/qemu/{vmid}/clone`: the clone task and the shapes its
//! target goes through, as qemu-server writes them.
//!
//! Contract (qemu-server e6352be, src/PVE/API2/Qemu.pm `clone_vm`):
//! - The checks of `$load_and_check` (:4442-4503) answer HTTP 500 before the
//!   worker; a config of `newid` on another node fails inside it.
//! - The task is `qmclone` under the SOURCE's VMID (:4749). Its first act is
//!   the target's temporary config `# qmclone temporary file\nlock: clone\n`
//!   (:4615): no name, no disks; PVE reads the comment as its `description`
//!   (src/PVE/QemuServer.pm:2022-2024, trailing space trimmed :1971), and
//!   `cluster/resources` names it `VM <newid>` (`vmstatus`, QemuServer.pm:2574).
//!   It lives on the SOURCE node until the end (`config_file($newid)`, :4501).
//! - Drives are cloned in key order (:4633); after each one the new config is
//!   written (:4674-4676): every copied option, the name, the drives cloned so
//!   far and `lock: clone`. Each drive takes an equal share of `timings.clone`,
//!   a cloud-init drive too (on PVE the source volumes' activation and the new
//!   volume's allocation come first, :4626, and take time of their own): with
//!   the seed template (`ide2` cloud-init sorts before `scsi0`) the target has
//!   only the temporary config for the first half of the clone.
//! - At the end the lock is deleted and the config written (:4680-4689), then
//!   moved to `target` when one was given (:4693-4708).
//! - A failure removes the new disks and the config (:4712-4727): the VMID is
//!   free again and the task says `clone failed: ...`.
//! - What the worker still has to write is kept in the task's `args`
//!   (`config`, `target`), so a simulator that stopped mid-clone finishes it
//!   when it loads its state ([`finish_at_load`], from `crate::recover`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::qemu::{check_lock, vm_on};
use super::{ApiError, ApiResult, Params, Reply};
use crate::faults::FaultKind;
use crate::model::{Task, Vm, ids, props};
use crate::sim::{Sim, lock};

/// The target's config while the worker has cloned no drive yet: the temporary
/// file `# qmclone temporary file\nlock: clone\n` as PVE reads it back.
pub fn temporary_config() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("description".to_string(), " qmclone temporary file".to_string()),
        ("lock".to_string(), "clone".to_string()),
    ])
}

fn new_volume(vol: &str, newid: u32, linked: bool, storage: Option<&str>) -> String {
    let (store, volname) = vol.split_once(':').unwrap_or(("local-lvm", vol));
    let store = storage.unwrap_or(store);
    if volname.contains("cloudinit") {
        return format!("{store}:vm-{newid}-cloudinit");
    }
    let idx = volname.rsplit("-disk-").next().filter(|s| s.chars().all(|c| c.is_ascii_digit())).unwrap_or("0");
    if linked {
        let base = volname.rsplit('/').next_back().unwrap_or(volname);
        format!("{store}:{base}/vm-{newid}-disk-{idx}")
    } else {
        format!("{store}:vm-{newid}-disk-{idx}")
    }
}

fn uses_local_storage(sim: &Sim, vm: &Vm) -> bool {
    vm.config.iter().filter(|(k, _)| props::is_drive_key(k)).any(|(_, v)| {
        let store = v.split(':').next().unwrap_or("");
        sim.cfg.storages.iter().any(|s| s.id == store && !s.shared)
    })
}

/// A CD-ROM drive that is not the cloud-init drive (`drive_is_cdrom($drive, 1)`).
fn is_cdrom(value: &str) -> bool {
    value.contains("media=cdrom") && !value.contains("cloudinit")
}

/// One drive the worker clones.
struct Drive {
    key: String,
    /// The new drive's config value.
    value: String,
    /// The task log line when its copy starts (none for a cloud-init drive,
    /// which is allocated, not copied).
    log: Option<String>,
}

/// What the worker does after the request was accepted.
struct Job {
    upid: String,
    newid: u32,
    /// The node the clone ends on (the source's unless `target` was given).
    target: String,
    /// Every option but the drives to clone, with `lock: clone`.
    base: BTreeMap<String, String>,
    drives: Vec<Drive>,
    /// The time each drive's clone takes.
    per_drive: Duration,
    /// The injected `CloneFail` fault: the first disk's copy fails.
    fail: bool,
}

impl Job {
    /// The config once the first `done` drives are cloned.
    fn config(&self, done: usize) -> BTreeMap<String, String> {
        let mut config = self.base.clone();
        for d in &self.drives[..done] {
            config.insert(d.key.clone(), d.value.clone());
        }
        config
    }
}

pub fn clone(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&["newid", "name", "description", "pool", "full", "storage", "format", "target", "snapname", "bwlimit"])?;
    let newid = super::params::vmid("newid", p.required("newid")?)?;
    if let Some(n) = p.get("name") {
        props::normalize("name", n, &mut String::new).map_err(|e| ApiError::param("name", e))?;
    }
    // The checks of qemu-server e6352be, src/PVE/API2/Qemu.pm:4442-4503
    // (`$load_and_check`), in its order: the target node (pve-cluster's
    // `check_node_exists`, a plain die), the source's lock (templates too), `storage`
    // and `format` only for full clones, local disks, a config of `newid` on this node.
    let target = p.get("target").unwrap_or(node).to_string();
    if !sim.has_node(&target) {
        return Err(ApiError::die(format!("no such cluster node '{target}'")));
    }
    let mut st = lock(&sim.state);
    let src = vm_on(&st, node, vmid)?.clone();
    check_lock(&src).map_err(ApiError::die)?;
    let full = p.bool("full", !src.is_template())?;
    for opt in ["storage", "format"] {
        if !full && p.get(opt).is_some() {
            return Err(ApiError::die(format!("parameter '{opt}' not allowed for linked clones")));
        }
    }
    if !full && !src.is_template() {
        return Err(ApiError::die("Linked clone feature is not supported for a VM that is not a template"));
    }
    if target != node && uses_local_storage(sim, &src) {
        return Err(ApiError::die(format!("can't clone VM to node '{target}' (VM uses local storage)")));
    }
    if st.vms.get(&newid).is_some_and(|v| v.node == node && !v.is_ct()) {
        return Err(ApiError::die(format!("unable to create VM {newid}: config file already exists")));
    }
    if st.vms.contains_key(&newid) {
        // Only this node's `qemu-server/<newid>.conf` is checked before the worker;
        // inside it, pmxcfs refuses the config of a VMID that exists elsewhere
        // (pve-cluster 7091d92, src/pmxcfs/memdb.c:1099-1101, EEXIST) and
        // `file_set_contents` dies (pve-common f665029, src/PVE/File.pm, rename).
        let upid = sim.new_task(&mut st, node, "qmclone", &vmid.to_string(), None);
        Sim::task_log(&mut st, &upid, format!("creating a clone of VM {vmid} with ID {newid}"));
        Sim::finish_task_in(
            &mut st,
            &upid,
            Err(format!(
                "close (rename) atomic file '/etc/pve/nodes/{node}/qemu-server/{newid}.conf' failed: File exists"
            )),
        );
        sim.changed();
        return upid_reply(upid);
    }
    let seed = sim.cfg.seed;
    // Qemu.pm:4510-4579: what is copied, what is cloned, what is dropped.
    let mut base = BTreeMap::new();
    let mut drives = Vec::new();
    for (k, v) in &src.config {
        if k == "template" || (k.starts_with("unused") && props::is_drive_key(k)) {
            continue;
        }
        if k.starts_with("net") && props::is_config_key(k) && k.as_str() != "nameserver" {
            // Qemu.pm:4531-4535: always a new MAC.
            st.id_counter += 1;
            let mac = ids::mac(seed ^ u64::from(newid), st.id_counter);
            let parts: Vec<String> = v
                .split(',')
                .map(|part| match part.split_once('=') {
                    Some((m, _)) if props::NIC_MODELS.contains(&m) => format!("{m}={mac}"),
                    _ => part.to_string(),
                })
                .collect();
            base.insert(k.clone(), parts.join(","));
        } else if props::is_drive_key(k) && !is_cdrom(v) {
            let mut parts = v.splitn(2, ',');
            let vol = parts.next().unwrap_or("");
            let rest = parts.next().map(|r| format!(",{r}")).unwrap_or_default();
            let cloudinit = vol.contains("cloudinit");
            let log = (!cloudinit).then(|| {
                let how = if full { "full" } else { "linked" };
                format!("create {how} clone of drive {k} ({vol})")
            });
            let value = format!("{}{rest}", new_volume(vol, newid, !full, p.get("storage")));
            drives.push(Drive { key: k.clone(), value, log });
        } else {
            // A CD-ROM is copied as it is (Qemu.pm:4539-4540), like every other option.
            base.insert(k.clone(), v.clone());
        }
    }
    // Qemu.pm:4592-4611.
    st.id_counter += 2;
    base.insert("smbios1".into(), format!("uuid={}", ids::uuid(seed, st.id_counter)));
    if base.contains_key("vmgenid") {
        base.insert("vmgenid".into(), ids::uuid(seed, st.id_counter + 1));
    }
    let name = p.get("name").map(str::to_string).unwrap_or_else(|| format!("Copy-of-VM-{}", src.name()));
    base.insert("name".into(), name);
    if let Some(d) = p.get("description") {
        base.insert("description".into(), d.to_string());
    }
    base.insert("lock".into(), "clone".into());
    // The temporary config, on this node until the end (Qemu.pm:4501, 4615).
    st.vms.insert(newid, Vm::stopped(newid, node.to_string(), temporary_config()));
    let upid = sim.new_task(&mut st, node, "qmclone", &vmid.to_string(), Some(newid));
    Sim::task_log(&mut st, &upid, format!("creating a clone of VM {vmid} with ID {newid}"));
    let mut done = base.clone();
    done.remove("lock");
    for d in &drives {
        done.insert(d.key.clone(), d.value.clone());
    }
    Sim::task_arg(&mut st, &upid, "config", json!(done).to_string());
    Sim::task_arg(&mut st, &upid, "target", target.clone());
    sim.changed();
    drop(st);
    let shares = u32::try_from(drives.len().max(1)).unwrap_or(u32::MAX);
    let per_drive = sim.scaled(sim.cfg.timings.clone) / shares;
    // Drawn now, not at completion, so the decision follows request order.
    let fail = sim.faults.fire(FaultKind::CloneFail);
    let job = Arc::new(Job { upid: upid.clone(), newid, target, base, drives, per_drive, fail });
    next_drive(sim, job, 0);
    upid_reply(upid)
}

fn upid_reply(upid: String) -> ApiResult {
    Ok(Reply::data(json!(upid)))
}

/// Clone drive `i` of the job (or finish it once every drive is done).
fn next_drive(sim: &Arc<Sim>, job: Arc<Job>, i: usize) {
    let Some(drive) = job.drives.get(i) else {
        // No drive at all: the clone still takes its time.
        let delay = if job.drives.is_empty() { job.per_drive } else { Duration::ZERO };
        sim.after(delay, move |sim| finish(sim, &job));
        return;
    };
    if let Some(line) = &drive.log {
        let mut st = lock(&sim.state);
        Sim::task_log(&mut st, &job.upid, line.clone());
    }
    let delay = job.per_drive;
    sim.after(delay, move |sim| {
        let mut st = lock(&sim.state);
        if !st.task(&job.upid).is_some_and(Task::running) {
            // Finished elsewhere (a simulator restart's `recover`).
            return;
        }
        if job.fail && job.drives[i].log.is_some() {
            drop(st);
            fail(sim, &job);
            return;
        }
        if let Some(vm) = st.vms.get_mut(&job.newid) {
            vm.config = job.config(i + 1);
        }
        sim.changed();
        drop(st);
        next_drive(sim, job, i + 1);
    });
}

/// Qemu.pm:4680-4708: the lock deleted, the config on the target node.
fn finish(sim: &Arc<Sim>, job: &Job) {
    if job.fail && !job.drives.iter().any(|d| d.log.is_some()) {
        return fail(sim, job);
    }
    let mut st = lock(&sim.state);
    if !st.task(&job.upid).is_some_and(Task::running) {
        return;
    }
    if let Some(vm) = st.vms.get_mut(&job.newid) {
        vm.config = job.config(job.drives.len());
        vm.config.remove("lock");
        vm.node = job.target.clone();
    }
    Sim::finish_task_in(&mut st, &job.upid, Ok(()));
    sim.changed();
}

/// Qemu.pm:4712-4727: the new disks and the config removed.
fn fail(sim: &Arc<Sim>, job: &Job) {
    let mut st = lock(&sim.state);
    st.vms.remove(&job.newid);
    let newid = job.newid;
    Sim::finish_task_in(
        &mut st,
        &job.upid,
        Err(format!(
            "clone failed: lvcreate 'pve/vm-{newid}-disk-0' error:   Volume group \"pve\" has insufficient free space (1023 extents): 1024 required."
        )),
    );
    sim.changed();
}

/// A `qmclone` task the simulator was running when it stopped: its worker
/// would have completed the clone, so `vm` (the target) gets the config the
/// task recorded, without the lock, on the task's target node. A task of an
/// older state file (no recorded config) only has its lock removed.
pub fn finish_at_load(vm: &mut Vm, task: &Task) {
    if let Some(config) = task.args.get("config").and_then(|c| serde_json::from_str(c).ok()) {
        vm.config = config;
    }
    if let Some(target) = task.args.get("target") {
        vm.node = target.clone();
    }
    if vm.lock() == Some("clone") {
        vm.config.remove("lock");
    }
}
