//! `POST /nodes/{node}/qemu/{vmid}/move_disk`: a VM disk moved to another storage, as
//! a `qmmove` task.
//!
//! Contract (qemu-server e6352be src/PVE/API2/Qemu.pm `move_vm_disk`, :4753-5205, and
//! `clone_disk`, src/PVE/QemuServer.pm:8005-8113):
//! - Parameters (:4766-4837): `disk` (required; a drive or `unusedN`), `storage`,
//!   `format` (`raw`, `qcow2`, `vmdk`), `delete` (default 0), `digest`, `bwlimit`
//!   (accepted, no effect), `target-disk` and `target-digest` (only the reassign form
//!   reads them). `storage` and `target-vmid` together are 400 on both keys `either
//!   set 'storage' or 'target-vmid', but not both` (:5169-5171); neither is 400 on
//!   both `both 'storage' and 'target-vmid' missing, either needs to be set`
//!   (:5200-5202). The reassign form (`target-vmid` alone, :5172-5189) is not
//!   modelled: 400 `must be different than source VMID to reassign disk` for its own
//!   VMID (:5176-5178), else 501.
//! - Before the task (`$load_and_check_move`, :4862-4894, run at :5193 before
//!   `fork_worker`), HTTP 500 unless said: `Configuration file
//!   'nodes/N/qemu-server/V.conf' does not exist`; the `lock` property (`VM is locked
//!   (L)`); a stale `digest` (`detected modified configuration - file changed by other
//!   user? Try again.`, pve-common's `assert_if_modified`: not `update_vm`'s `checksum
//!   mismatch`); `disk 'D' does not exist`; `disk 'D' has no associated volume`; `you
//!   can't move a cdrom` (the cloud-init drive is none: `drive_is_cdrom($drive, 1)`);
//!   `unable to parse volume ID 'X'` (`none`, a device path); `storage 'S' does not
//!   exist` (the volume's own storage, then the target); `you can't move to the same
//!   storage with same format` (the volume's storage without `format` or with its own
//!   format); a target without `images` content is 400 on `storage`: `storage 'S' does
//!   not support vm images`.
//! - The task is `qmmove`, id = VMID (:5195-5199). Its worker takes the VM's config
//!   file lock (`lock_config`, an flock on `/var/lock/qemu-server/lock-V.conf`, not the
//!   `lock` property) and holds it to the end; under it the checks run again (a
//!   refusal is the task's error), then it logs `copying volume ...`, `create full clone
//!   of drive D (X)` and `allocated target volume 'Y'`, the new volume exists (it counts
//!   in the target's usage), and after `timings.move_disk` (× `time_scale`) of copying
//!   the config gets the new drive and, unless `delete=1`, the old volume as the lowest
//!   free `unusedN` (`add_unused_volume`; `adding source volume 'X' as 'unusedN' to
//!   config`); with `delete=1` the old volume is freed (`removing source volume 'X'
//!   after successful copy`). Task OK.
//! - The new drive (`clone_disk`, QemuServer.pm:8105-8112, printed by `print_drive`):
//!   the old drive's options but `format`, sorted, the new volume first, `size=` of the
//!   new volume (the old size; a cloud-init drive and `tpmstate0` 4 MiB, `efidisk0` its
//!   OVMF vars size as `create` computes it; LVM storages round up to 4 MiB extents;
//!   an `unusedN` has no size). The new volume is the storage's next free
//!   `vm-V-disk-N` (`Vm::next_disk_name`), the cloud-init drive's `vm-V-cloudinit`; a
//!   template's moved disk becomes `base-V-disk-N` (`template_create`, :4963-4965). A
//!   `format` the target storage lacks is logged as PVE warns it (`format 'F' is not
//!   supported by the target storage 'S' - using 'raw' instead`; a plain `warn`, so the
//!   task still ends OK).
//! - Worker-time failures: `storage migration failed: cannot move TPM state while VM is
//!   running`, `storage migration failed: Too many unused volumes - please delete them
//!   first.`; the new volume is freed and the config unchanged (:4981-4987).
//! - The config file lock: a second `qmmove` of the VM that finds the lock held logs
//!   `trying to acquire lock...` and waits `lock_config`'s 10 s (× `time_scale`); if
//!   the lock is still held then, its task fails `can't lock file
//!   '/var/lock/qemu-server/lock-V.conf' - got timeout` (pve-common f665029
//!   src/PVE/Tools.pm:167 `got timeout`, :264 `can't lock file`), else it takes the
//!   lock (` OK`) and runs its checks, the digest included, against the config the
//!   first move wrote.
//! - Permissions (`crate::acl::endpoints`): VM.Config.Disk on the VM, then
//!   Datastore.AllocateSpace on the target storage (:5191).
//!
//! Simplified: a waiting worker takes a lock released before its timeout at the timeout,
//! where PVE's flock returns at once; only `qmmove` workers take the lock here, so the
//! simulator's other writers (config PUT/POST, resize, destroy) neither wait for a
//! running move nor make one wait, where on PVE they serialise on the same flock. The
//! copy's progress lines (`qemu-img convert`, `drive-mirror`) are not logged, and its
//! duration does not depend on the disk's size. Volumes carry no format in their names
//! (`local:101/vm-101-disk-0.qcow2` on a PVE dir storage), as everywhere in the
//! simulator. No snapshots exist, so `you can't move a disk with snapshots and delete
//! the source` (:4886-4891) never applies. A move running when the simulator stops
//! fails at the next load (`crate::recover`), the config unchanged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::qemu::{check_lock, vm_on, vm_on_mut};
use super::{ApiError, ApiResult, Params, Reply};
use crate::config::StorageSpec;
use crate::model::{ClusterState, Power, Vm, ids, props};
use crate::sim::{Sim, lock};

/// pve-common f665029 src/PVE/Tools.pm:868-873 (`assert_if_modified`).
const MODIFIED: &str = "detected modified configuration - file changed by other user? Try again.";

/// `lock_config`'s flock timeout (pve-guest-common 4a8f6cb src/PVE/AbstractConfig.pm:329-333).
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// qemu-server `CLOUDINIT_DISK_SIZE` (src/PVE/QemuServer/Cloudinit.pm:19) and
/// `TPMSTATE_DISK_SIZE` (src/PVE/QemuServer/Drive.pm:604).
const FOUR_MIB: u64 = 4 << 20;

/// `valid_drive_names_with_unused` (qemu-server e6352be src/PVE/QemuServer/Drive.pm:734-736),
/// the enum of `disk` and `target-disk`.
fn drive_names() -> Vec<String> {
    let mut out = Vec::new();
    for (bus, n) in [("ide", 4), ("scsi", 31), ("virtio", 16), ("sata", 6)] {
        out.extend((0..n).map(|i| format!("{bus}{i}")));
    }
    out.push("efidisk0".into());
    out.push("tpmstate0".into());
    out.extend((0..256).map(|i| format!("unused{i}")));
    out
}

/// PVE's enum check (pve-common src/PVE/JSONSchema.pm:1680-1689).
fn check_enum(key: &str, value: &str, allowed: &[String]) -> Result<(), ApiError> {
    if allowed.iter().any(|a| a == value) {
        return Ok(());
    }
    Err(ApiError::param(
        key,
        format!("value '{value}' does not have a value in the enumeration '{}'", allowed.join(", ")),
    ))
}

/// PVE's storage id rule, `^[a-z][a-z0-9\-\_\.]*[a-z0-9]$` any case (pve-common
/// src/PVE/JSONSchema.pm:292-305 `parse_id`; pve-storage `parse_volume_id` the same).
fn is_storage_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_alphabetic()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
}

/// The `pve-storage-id` format of the `storage` parameter.
fn check_storage_id(id: &str) -> Result<(), ApiError> {
    let bad = |why: &str| ApiError::param("storage", format!("invalid format - storage ID '{id}' {why}"));
    if id.chars().count() < 2 {
        return Err(bad("cannot be shorter than 2 characters"));
    }
    if !is_storage_id(id) {
        return Err(bad("contains illegal characters"));
    }
    Ok(())
}

/// One move as the handler extracts it (Qemu.pm:4850-4858).
#[derive(Debug, Clone)]
struct Move {
    node: String,
    vmid: u32,
    disk: String,
    storage: String,
    format: Option<String>,
    delete: bool,
    digest: Option<String>,
}

/// A refusal of `$load_and_check_move`: a `die`, or the parameter exception.
#[derive(Debug)]
enum Refusal {
    Die(String),
    Param(&'static str, String),
}

impl Refusal {
    fn api(self) -> ApiError {
        match self {
            Refusal::Die(e) => ApiError::die(e),
            Refusal::Param(k, m) => ApiError::param(k, m),
        }
    }

    /// The task's error: the exception stringified, newlines as spaces (as
    /// `qemu.rs`'s `Refused::task_text`).
    fn task_text(self) -> String {
        match self {
            Refusal::Die(e) => e,
            Refusal::Param(k, m) => format!("400 Parameter verification failed. {k}: {m}"),
        }
    }
}

/// What the checks found.
#[derive(Debug, Clone)]
struct Checked {
    /// The drive's config value.
    value: String,
    /// Its volume.
    old_volid: String,
    /// The volume's storage.
    old_store: String,
    /// The volume's format (`parse_volname`'s 7th value).
    old_format: String,
}

/// Perl's truth of a string (`""` and `"0"` are false).
fn perl_true(s: &str) -> bool {
    !s.is_empty() && s != "0"
}

/// The volume of a drive value (`parse_drive`'s `file`: the default key or `file=`).
fn drive_file(value: &str) -> String {
    props::split_props(value)
        .into_iter()
        .find(|(k, _)| k.is_empty() || k == "file" || k == "volume")
        .map(|(_, f)| f)
        .unwrap_or_default()
}

/// `drive_is_cloudinit` (qemu-server e6352be src/PVE/QemuServer/Drive.pm:756-759):
/// `[:/](vm-\d+-)?cloudinit(\.FMT)?$`.
fn is_cloudinit(file: &str) -> bool {
    let fmts = ["raw", "qcow", "qcow2", "qed", "vmdk", "cloop"];
    let stem = fmts.iter().find_map(|f| file.strip_suffix(&format!(".{f}"))).unwrap_or(file);
    let Some(head) = stem.strip_suffix("cloudinit") else { return false };
    let head = match head.strip_suffix('-').and_then(|h| h.rsplit_once("vm-")) {
        Some((before, id)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => before,
        _ => head,
    };
    head.ends_with(':') || head.ends_with('/')
}

/// `drive_is_cdrom($drive, 1)` (Drive.pm:761-767): `media=cdrom`, the cloud-init drive excluded.
fn is_cdrom(value: &str, file: &str) -> bool {
    props::prop(value, "media").as_deref() == Some("cdrom") && !is_cloudinit(file)
}

/// pve-storage 0c56bad src/PVE/Storage/Plugin.pm:420-428 (`parse_volume_id`).
fn parse_volume_id(volid: &str) -> Option<(&str, &str)> {
    let (sid, name) = volid.split_once(':')?;
    (is_storage_id(sid) && !name.is_empty()).then_some((sid, name))
}

/// A volume's format: its name's extension where it has one, else `raw` (the
/// simulator's volume names carry none; its storage listings say `raw`).
fn volume_format(volname: &str) -> String {
    ["qcow2", "vmdk", "raw"].iter().find(|f| volname.ends_with(&format!(".{f}"))).map_or("raw", |f| *f).to_string()
}

/// The formats a storage type takes for images, its default `raw` (pve-storage 0c56bad
/// `get_formats`, src/PVE/Storage/Plugin.pm:679-692: DirPlugin.pm:40, NFSPlugin.pm:68,
/// CIFSPlugin.pm:127, LVMPlugin.pm:410; LvmThin and others declare none: `raw`).
fn storage_formats(kind: &str) -> &'static [&'static str] {
    match kind {
        "dir" | "nfs" | "cifs" => &["raw", "qcow2", "vmdk"],
        "lvm" => &["raw", "qcow2"],
        _ => &["raw"],
    }
}

fn find_storage<'a>(sim: &'a Sim, id: &str) -> Option<&'a StorageSpec> {
    sim.cfg.storages.iter().find(|s| s.id == id)
}

/// `$load_and_check_move` (Qemu.pm:4862-4894), against the state as it is.
fn check(sim: &Sim, st: &ClusterState, m: &Move) -> Result<Checked, Refusal> {
    // :4863-4866: `load_config`, `check_lock`, `assert_if_modified`.
    let vm = vm_on(st, &m.node, m.vmid)
        .map_err(|_| Refusal::Die(format!("Configuration file '{}' does not exist", Vm::conf_path(&m.node, m.vmid))))?;
    check_lock(vm).map_err(Refusal::Die)?;
    if let Some(d) = m.digest.as_deref().filter(|d| perl_true(d))
        && d != vm.digest()
    {
        return Err(Refusal::Die(MODIFIED.into()));
    }
    // :4868-4873.
    let disk = &m.disk;
    let value = vm
        .config
        .get(disk)
        .filter(|v| perl_true(v))
        .ok_or_else(|| Refusal::Die(format!("disk '{disk}' does not exist")))?;
    let file = drive_file(value);
    if file.is_empty() {
        return Err(Refusal::Die(format!("disk '{disk}' has no associated volume")));
    }
    if is_cdrom(value, &file) {
        return Err(Refusal::Die("you can't move a cdrom".into()));
    }
    // :4875-4877: `parse_volume_id`, then `parse_volname` (`storage_config` of the
    // volume's storage, pve-storage src/PVE/Storage.pm:252-262).
    let (old_store, volname) =
        parse_volume_id(&file).ok_or_else(|| Refusal::Die(format!("unable to parse volume ID '{file}'")))?;
    if find_storage(sim, old_store).is_none() {
        return Err(Refusal::Die(format!("storage '{old_store}' does not exist")));
    }
    let old_format = volume_format(volname);
    // :4879-4880.
    if old_store == m.storage && m.format.as_deref().is_none_or(|f| f == old_format) {
        return Err(Refusal::Die("you can't move to the same storage with same format".into()));
    }
    // :4882-4884: `storage_check_enabled` (Storage.pm:280-291; the simulator's
    // storages are all enabled on every node), then the content.
    let spec =
        find_storage(sim, &m.storage).ok_or_else(|| Refusal::Die(format!("storage '{}' does not exist", m.storage)))?;
    if !spec.content.split(',').any(|c| c == "images") {
        return Err(Refusal::Param("storage", format!("storage '{}' does not support vm images", m.storage)));
    }
    Ok(Checked { value: value.clone(), old_volid: file.clone(), old_store: old_store.to_string(), old_format })
}

pub fn move_disk(sim: &Arc<Sim>, node: &str, vmid: u32, p: &Params) -> ApiResult {
    p.only(&[
        "disk",
        "storage",
        "format",
        "delete",
        "digest",
        "bwlimit",
        "target-vmid",
        "target-disk",
        "target-digest",
    ])?;
    // The schema (Qemu.pm:4766-4837), checked before the code runs.
    let names = drive_names();
    let disk = p.required("disk")?.to_string();
    check_enum("disk", &disk, &names)?;
    if let Some(t) = p.get("target-disk") {
        check_enum("target-disk", t, &names)?;
    }
    let format = p.get("format").map(str::to_string);
    if let Some(f) = &format {
        check_enum("format", f, &["raw".into(), "qcow2".into(), "vmdk".into()])?;
    }
    let delete = p.bool("delete", false)?;
    p.int("bwlimit", 0, i64::MAX)?;
    for k in ["digest", "target-digest"] {
        if p.get(k).is_some_and(|d| d.chars().count() > 40) {
            return Err(ApiError::param(k, "value may only be 40 characters long"));
        }
    }
    let storage = p.get("storage").map(str::to_string);
    if let Some(s) = &storage {
        check_storage_id(s)?;
    }
    let target = p.get("target-vmid").map(|v| super::params::vmid("target-vmid", v)).transpose()?;
    let storage = match (target, storage) {
        // Qemu.pm:5169-5171.
        (Some(_), Some(_)) => {
            let msg = "either set 'storage' or 'target-vmid', but not both";
            return Err(ApiError::Params(BTreeMap::from([
                ("target-vmid".to_string(), msg.to_string()),
                ("storage".to_string(), msg.to_string()),
            ])));
        }
        (Some(t), None) => {
            // :5176-5178, then the reassign (:5180-5189), not modelled.
            if t == vmid {
                return Err(ApiError::param("target-vmid", "must be different than source VMID to reassign disk"));
            }
            return Err(ApiError::status(
                501,
                "simulator: moving a disk to another VM ('target-vmid') is not modelled",
            ));
        }
        // :5200-5202.
        (None, None) => {
            let msg = "both 'storage' and 'target-vmid' missing, either needs to be set";
            return Err(ApiError::Params(BTreeMap::from([
                ("target-vmid".to_string(), msg.to_string()),
                ("storage".to_string(), msg.to_string()),
            ])));
        }
        (None, Some(s)) => s,
    };
    let m = Move {
        node: node.to_string(),
        vmid,
        disk,
        storage,
        format,
        delete,
        digest: p.get("digest").map(str::to_string),
    };
    let mut st = lock(&sim.state);
    // :5193: the early checks, before forking (and without the lock).
    check(sim, &st, &m).map_err(Refusal::api)?;
    let upid = sim.new_task(&mut st, node, "qmmove", &vmid.to_string(), Some(vmid));
    drop(st);
    worker(sim, m, upid.clone());
    Ok(Reply::data(json!(upid)))
}

/// Take the VM's config flock for `upid` when no running task holds it.
fn take_flock(st: &mut ClusterState, vmid: u32, upid: &str) -> bool {
    let held = st
        .config_flocks
        .get(&vmid)
        .is_some_and(|holder| holder != upid && st.task(holder).is_some_and(crate::model::Task::running));
    if held {
        return false;
    }
    st.config_flocks.insert(vmid, upid.to_string());
    true
}

/// Release the flock if `upid` holds it, and end the task.
fn end(st: &mut ClusterState, vmid: u32, upid: &str, result: Result<(), String>) {
    if st.config_flocks.get(&vmid).is_some_and(|h| h == upid) {
        st.config_flocks.remove(&vmid);
    }
    Sim::finish_task_in(st, upid, result);
}

/// The worker (:5195-5197): `lock_config($vmid, $move_updatefn)`.
fn worker(sim: &Arc<Sim>, m: Move, upid: String) {
    let mut st = lock(&sim.state);
    if take_flock(&mut st, m.vmid, &upid) {
        drop(st);
        locked(sim, m, upid);
        return;
    }
    // pve-common f665029 src/PVE/Tools.pm:217-218: the non-blocking flock failed (:231 ` OK`).
    Sim::task_log(&mut st, &upid, "trying to acquire lock...");
    sim.changed();
    drop(st);
    sim.after(sim.scaled(LOCK_TIMEOUT), move |sim| {
        let mut st = lock(&sim.state);
        if take_flock(&mut st, m.vmid, &upid) {
            Sim::task_log(&mut st, &upid, " OK");
            drop(st);
            locked(sim, m, upid);
            return;
        }
        // Tools.pm:167 (`run_with_timeout`'s alarm: `got timeout`), :264 (`can't lock
        // file '$filename' - $@`), re-raised by pve-guest-common AbstractConfig.pm:305-307.
        let file = format!("/var/lock/qemu-server/lock-{}.conf", m.vmid);
        Sim::finish_task_in(&mut st, &upid, Err(format!("can't lock file '{file}' - got timeout")));
        sim.changed();
    });
}

/// What the copy produced: the new volume and its size.
#[derive(Debug)]
struct Copied {
    checked: Checked,
    new_volid: String,
    /// The new volume's size (`volume_size_info`), when known.
    size: Option<u64>,
}

/// `$move_updatefn` (Qemu.pm:4896-4996) up to the copy: the checks under the lock,
/// the log, the new volume. The copy then takes `timings.move_disk`.
fn locked(sim: &Arc<Sim>, m: Move, upid: String) {
    let mut st = lock(&sim.state);
    let checked = match check(sim, &st, &m) {
        Ok(c) => c,
        Err(r) => {
            end(&mut st, m.vmid, &upid, Err(r.task_text()));
            sim.changed();
            return;
        }
    };
    // :4906-4907.
    Sim::task_log(
        &mut st,
        &upid,
        format!(
            "copying volume '{}' from current storage '{}' to target storage '{}'",
            checked.old_volid, checked.old_store, m.storage
        ),
    );
    match allocate(sim, &mut st, &m, &upid, checked) {
        Ok(copied) => {
            sim.changed();
            drop(st);
            sim.after(sim.scaled(sim.cfg.timings.move_disk), move |sim| finish(sim, &m, &upid, copied));
        }
        Err(e) => {
            end(&mut st, m.vmid, &upid, Err(format!("storage migration failed: {e}")));
            sim.changed();
        }
    }
}

/// `clone_disk` (QemuServer.pm:8005-8086) up to the copy: checks, format, size and
/// the new volume (kept in the VM's volume list while the copy runs: it exists on the
/// target and counts in its usage).
fn allocate(sim: &Sim, st: &mut ClusterState, m: &Move, upid: &str, checked: Checked) -> Result<Copied, String> {
    let vm = vm_on(st, &m.node, m.vmid).map_err(|_| format!("VM {} vanished during the move", m.vmid))?;
    let unused = m.disk.starts_with("unused");
    // :8015, :8028-8029.
    if vm.power == Power::Running && !unused && m.disk == "tpmstate0" {
        return Err("cannot move TPM state while VM is running".into());
    }
    let spec = find_storage(sim, &m.storage).ok_or_else(|| format!("storage '{}' does not exist", m.storage))?;
    let mut log = vec![format!("create full clone of drive {} ({})", m.disk, checked.old_volid)];
    // :8044-8049, `resolve_dst_disk_format` (:8181-8190): the requested format, else
    // the source's, when the target takes it; else its default.
    let formats = storage_formats(&spec.kind);
    let hint = m.format.clone().unwrap_or_else(|| checked.old_format.clone());
    let dst_format = if formats.contains(&hint.as_str()) { hint } else { "raw".to_string() };
    if let Some(f) = m.format.as_deref().filter(|f| *f != dst_format) {
        log.push(format!(
            "format '{f}' is not supported by the target storage '{}' - using '{dst_format}' instead",
            m.storage
        ));
    }
    // :8053-8071: the size to allocate.
    let cloudinit = is_cloudinit(&checked.old_volid);
    let size = if cloudinit || m.disk == "tpmstate0" {
        Some(FOUR_MIB)
    } else if m.disk == "efidisk0" {
        // `get_efivars_size` (:4942), as `create` sizes a new EFI disk.
        let four_m = props::prop(&checked.value, "efitype").as_deref() == Some("4m");
        Some(if four_m { 528 << 10 } else { 128 << 10 })
    } else {
        vm.volume_size(&checked.old_volid)
    };
    // LVM rounds a volume up to whole 4 MiB extents.
    let size =
        size.map(|s| if matches!(spec.kind.as_str(), "lvm" | "lvmthin") { s.next_multiple_of(FOUR_MIB) } else { s });
    let new_volid =
        if cloudinit { format!("{}:vm-{}-cloudinit", m.storage, m.vmid) } else { vm.next_disk_name(&m.storage) };
    let exists = vm.volids().contains(&new_volid);
    if !exists {
        log.push(format!("allocated target volume '{new_volid}'"));
    }
    for l in log {
        Sim::task_log(st, upid, l);
    }
    if exists {
        // Only the cloud-init drive's fixed name can meet a volume of its own.
        return Err(format!("simulator: volume '{new_volid}' exists already (not modelled)"));
    }
    if let Some(vm) = st.vms.get_mut(&m.vmid) {
        vm.volumes.insert(new_volid.clone(), size.unwrap_or(0));
    }
    Ok(Copied { checked, new_volid, size })
}

/// `add_unused_volume` (pve-guest-common 4a8f6cb src/PVE/AbstractConfig.pm:428-446): the
/// lowest free `unusedN`, none for a volume already unused.
fn add_unused(config: &mut BTreeMap<String, String>, volid: &str) -> Result<Option<String>, String> {
    let keys: Vec<String> = (0..256).map(|i| format!("unused{i}")).collect();
    if keys.iter().any(|k| config.get(k).is_some_and(|v| v == volid)) {
        return Ok(None);
    }
    let key = keys
        .into_iter()
        .find(|k| config.get(k).is_none_or(|v| !perl_true(v)))
        .ok_or("Too many unused volumes - please delete them first.")?;
    config.insert(key.clone(), volid.to_string());
    Ok(Some(key))
}

/// The new drive (`clone_disk`, QemuServer.pm:8105-8112, then `print_drive`): the old
/// options but `format`, the new volume, its size (none for `unusedN`).
fn new_drive(old: &str, volid: &str, size: Option<u64>, unused: bool) -> String {
    if unused {
        return volid.to_string();
    }
    let mut opts: BTreeMap<String, String> = props::split_props(old)
        .into_iter()
        .filter(|(k, _)| !k.is_empty() && !["file", "volume", "format", "size"].contains(&k.as_str()))
        .collect();
    if let Some(s) = size {
        opts.insert("size".into(), ids::format_size_exact(s));
    }
    let rest: String = opts.iter().map(|(k, v)| format!(",{k}={v}")).collect();
    format!("{volid}{rest}")
}

/// The end of `$move_updatefn` (:4956-4996): the config written, the old volume kept
/// as unused or freed, the lock released.
fn finish(sim: &Arc<Sim>, m: &Move, upid: &str, copied: Copied) {
    let mut st = lock(&sim.state);
    let Copied { checked, mut new_volid, size } = copied;
    let unused = m.disk.starts_with("unused");
    let mut log = Vec::new();
    let linked_clones = |st: &ClusterState| {
        let prefix = format!("{}/", checked.old_volid);
        st.vms.values().any(|v| v.vmid != m.vmid && v.volids().iter().any(|x| x.starts_with(&prefix)))
    };
    let base_in_use = linked_clones(&st);
    let result = match vm_on_mut(&mut st, &m.node, m.vmid) {
        Err(_) => Err(format!("storage migration failed: VM {} vanished during the move", m.vmid)),
        Ok(vm) => {
            let mut config = vm.config.clone();
            let template = vm.is_template();
            // :4956.
            config.insert(m.disk.clone(), new_drive(&checked.value, &new_volid, size, unused));
            // :4958-4961.
            let added = if m.delete { Ok(None) } else { add_unused(&mut config, &checked.old_volid) };
            match added {
                Err(e) => {
                    // :4981-4986: the new volume is freed, nothing written.
                    vm.volumes.remove(&new_volid);
                    Err(format!("storage migration failed: {e}"))
                }
                Ok(key) => {
                    if let Some(key) = key {
                        log.push(format!("adding source volume '{}' as '{key}' to config", checked.old_volid));
                    }
                    // :4963-4965, `template_create` (QemuServer.pm:7886-7910): a
                    // template's moved disk (not a CD-ROM, cloud-init included) becomes a
                    // base volume (`vdisk_create_base`).
                    let cdrom = props::prop(&checked.value, "media").as_deref() == Some("cdrom");
                    if template && !unused && !cdrom {
                        let base = new_volid.replacen(&format!(":vm-{}-", m.vmid), &format!(":base-{}-", m.vmid), 1);
                        if let Some(v) = vm.volumes.remove(&new_volid) {
                            vm.volumes.insert(base.clone(), v);
                        }
                        config.insert(m.disk.clone(), new_drive(&checked.value, &base, size, unused));
                        new_volid = base;
                    }
                    // :4967: the config written. The new volume's size is on its line
                    // now (an `unusedN` and a volume of unknown size stay in the list).
                    vm.config = config;
                    if !unused && size.is_some() {
                        vm.volumes.remove(&new_volid);
                    }
                    if !m.delete && !unused {
                        // The source volume, now unused, keeps its size in the list.
                        if let Some(s) = size_of_old(&checked.value) {
                            vm.volumes.insert(checked.old_volid.clone(), s);
                        }
                    }
                    if m.delete {
                        // :4989-4995.
                        log.push(format!("removing source volume '{}' after successful copy", checked.old_volid));
                        if base_in_use {
                            // pve-storage Storage.pm:1203-1205, a `warn` here: the volume stays.
                            let volname = checked.old_volid.split_once(':').map_or("", |(_, v)| v);
                            log.push(format!("base volume '{volname}' is still in use by linked clones"));
                            if let Some(s) = size_of_old(&checked.value) {
                                vm.volumes.insert(checked.old_volid.clone(), s);
                            }
                        } else {
                            vm.volumes.remove(&checked.old_volid);
                        }
                    }
                    Ok(())
                }
            }
        }
    };
    for l in log {
        Sim::task_log(&mut st, upid, l);
    }
    end(&mut st, m.vmid, upid, result);
    sim.changed();
}

/// The size on a drive line (`size=`), for a volume leaving the config's drives.
fn size_of_old(value: &str) -> Option<u64> {
    props::prop(value, "size").and_then(|s| ids::parse_size(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_enum_is_valid_drive_names_with_unused() {
        let names = drive_names();
        // Drive.pm: 4 ide, 31 scsi, 16 virtio, 6 sata, efidisk0, tpmstate0, 256 unused.
        assert_eq!(names.len(), 4 + 31 + 16 + 6 + 2 + 256);
        assert_eq!(names.first().map(String::as_str), Some("ide0"));
        assert_eq!(names.last().map(String::as_str), Some("unused255"));
    }

    #[test]
    fn cloud_init_volumes_are_told_apart_as_drive_is_cloudinit_does() {
        for yes in ["local-lvm:vm-101-cloudinit", "local:101/vm-101-cloudinit.qcow2", "local:cloudinit"] {
            assert!(is_cloudinit(yes), "{yes}");
        }
        for no in ["local-lvm:vm-101-disk-0", "local-lvm:vm-101-cloudinitx", "local-lvm:myvm-101-cloudinit", "none"] {
            assert!(!is_cloudinit(no), "{no}");
        }
        assert!(is_cdrom("none,media=cdrom", "none"));
        assert!(!is_cdrom("local-lvm:vm-101-cloudinit,media=cdrom", "local-lvm:vm-101-cloudinit"));
    }

    #[test]
    fn the_new_drive_keeps_every_option_but_format_and_takes_the_new_size() {
        let old = "local-lvm:vm-101-disk-1,iothread=1,format=raw,size=4G,discard=on";
        assert_eq!(
            new_drive(old, "fast:vm-101-disk-0", Some(4 << 30), false),
            "fast:vm-101-disk-0,discard=on,iothread=1,size=4G"
        );
        assert_eq!(
            new_drive("local-lvm:vm-101-disk-3", "fast:vm-101-disk-0", Some(1 << 30), true),
            "fast:vm-101-disk-0"
        );
    }
}
