//! [`diff`]: what makes a complete VM's live config what the inventory asks
//! for, each change classified the way PVE takes it.
//!
//! The PVE facts, qemu-server e6352be (src/PVE/QemuServer.pm unless named):
//! - A STOPPED VM takes every change into its config at once
//!   (src/PVE/API2/Qemu.pm `update_vm_api` → `vmconfig_apply_pending`): every
//!   allowed change is `live` (in effect at its next start).
//! - A RUNNING VM gets every change written to `[PENDING]`, then
//!   `vmconfig_hotplug_pending` (:4617) moves what it can: the
//!   `$fast_plug_option`s (:4594: `startup`, `tags`, …) at once; `memory`
//!   only with the `memory` hotplug feature (:4877, Memory.pm:201
//!   `qemu_memory_hotplug`, which needs `numa` — Memory.pm:364 — and at
//!   least 1024 MiB — Memory.pm:219); anything not listed, `cores` included,
//!   `die "skip"` (:4889) and stays pending until a cold start.
//! - `netN` (:4847 → `vmconfig_update_net` :5108): bridge / tag changes are
//!   made on the running tap device WITHOUT any hotplug feature (:5139-5190);
//!   a model/MAC/queues/mtu change or a bridge added to a NAT NIC (:5116-5122)
//!   and a new NIC (:5193) unplug and plug a device, only with `network`.
//!   Deleting a NIC needs `network` (:4767).
//! - Disks: a new disk is hot-plugged with `disk`, not on ide/sata (:5334);
//!   deleting a disk with `disk` (not efidisk/ide/sata/tpmstate, :4777)
//!   unplugs it and keeps the volume as `unusedN`; a grow is the online
//!   `resize` (src/PVE/API2/Qemu.pm:5939-6072), which refuses to shrink
//!   (:6048).
//! - A disk on another storage moves with `move_disk` (src/PVE/API2/Qemu.pm
//!   `move_vm_disk`): a copy (drive-mirror while running, no reboot) to a new
//!   volume; the source volume stays as `unusedN` unless `delete` is sent,
//!   which cradle never does. Only with `--allow-disk-move`.
//! - Deleting a key named in `boot: order=` rewrites `boot` without it
//!   (src/PVE/API2/Qemu.pm:2305-2309): [`VmChanges::expect`] predicts it.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use super::change::{Allow, Change, Class, Live, Move, Resize, VmChanges, Wanted};
use super::pve::{self, Drive};

/// A live config the diff cannot read, or an inventory VM it cannot plan.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DiffError {
    /// A value it cannot parse.
    #[error("{vm}: cannot read `{key}` of the live config ({value:?}): {reason}")]
    Unreadable {
        /// The VM.
        vm: String,
        /// The config key.
        key: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The inventory's description of the VM cannot be planned (a slot
    /// given twice or not a slot, a storage or bridge that is no PVE id).
    #[error("{vm}: the inventory {message}")]
    Inventory {
        /// The VM.
        vm: String,
        /// What is wrong, after "the inventory".
        message: String,
    },
    /// Something the inventory asks for has nothing to act on.
    #[error("{vm}: {message}")]
    Missing {
        /// The VM.
        vm: String,
        /// What is missing.
        message: String,
    },
}

/// The changes that make `live` what `want` asks for (see the module doc).
pub fn diff(want: &Wanted, live: &Live, allow: &Allow) -> Result<VmChanges, DiffError> {
    let mut d = Differ::new(want, live, allow)?;
    d.cores();
    d.memory()?;
    d.tags();
    d.startup();
    d.nics();
    d.boot_disk()?;
    d.data_disks()?;
    Ok(d.finish())
}

/// The sha256 (hex) of `config`'s keys outside `touched`, `digest` and
/// `unusedN` (a drive delete adds one), as sorted `k=v\n` lines.
pub fn rest_hash(config: &BTreeMap<String, String>, touched: &BTreeSet<&str>) -> String {
    let mut h = Sha256::new();
    for (k, v) in config {
        if k == "digest" || pve::is_unused_key(k) || touched.contains(k.as_str()) {
            continue;
        }
        h.update(format!("{k}={v}\n").as_bytes());
    }
    hex::encode(h.finalize())
}

struct Differ<'a> {
    want: &'a Wanted,
    live: &'a Live,
    allow: &'a Allow,
    hotplug: BTreeSet<String>,
    changes: Vec<Change>,
    set: BTreeMap<String, String>,
    delete: Vec<String>,
    moves: Vec<Move>,
    resize: Vec<Resize>,
}

impl<'a> Differ<'a> {
    fn new(want: &'a Wanted, live: &'a Live, allow: &'a Allow) -> Result<Differ<'a>, DiffError> {
        check_wanted(want)?;
        check_live(want, live)?;
        let hotplug = pve::hotplug_features(live.config.get("hotplug").map(String::as_str))
            .map_err(|reason| unreadable(want, live, "hotplug", reason))?;
        Ok(Differ {
            want,
            live,
            allow,
            hotplug,
            changes: vec![],
            set: BTreeMap::new(),
            delete: vec![],
            moves: vec![],
            resize: vec![],
        })
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.live.config.get(key).map(String::as_str)
    }

    fn has(&self, feature: &str) -> bool {
        self.hotplug.contains(feature)
    }

    fn push(
        &mut self,
        what: impl Into<String>,
        key: &str,
        from: Option<String>,
        to: Option<String>,
        class: Class,
        why: impl Into<String>,
    ) {
        self.changes.push(Change { what: what.into(), key: key.into(), from, to, class, flag: None, why: why.into() });
    }

    fn refuse(
        &mut self,
        what: impl Into<String>,
        key: &str,
        from: Option<String>,
        to: Option<String>,
        flag: Option<&str>,
        why: impl Into<String>,
    ) {
        self.changes.push(Change {
            what: what.into(),
            key: key.into(),
            from,
            to,
            class: Class::Refused,
            flag: flag.map(String::from),
            why: why.into(),
        });
    }

    /// The class of a change PVE makes on a running VM only when `ok`.
    fn running_class(&self, ok: bool) -> Class {
        match (self.live.running, ok) {
            (false, _) | (true, true) => Class::Live,
            (true, false) => Class::NextBoot,
        }
    }

    fn stopped_why(&self) -> Option<&'static str> {
        (!self.live.running).then_some("the VM is stopped: PVE writes it to the config, in effect at its next start")
    }

    fn cores(&mut self) {
        let have = self.get("cores").and_then(|v| v.parse::<u32>().ok()).unwrap_or(1);
        if have == self.want.cores {
            return;
        }
        self.set.insert("cores".into(), self.want.cores.to_string());
        let class = self.running_class(false);
        let why = self
            .stopped_why()
            .unwrap_or("cores need a cold start: PVE keeps them pending on a running VM (QemuServer.pm:4889)");
        self.push("cores", "cores", Some(have.to_string()), Some(self.want.cores.to_string()), class, why);
    }

    fn memory(&mut self) -> Result<(), DiffError> {
        let raw = self.get("memory");
        let have = pve::memory_mib(raw)
            .ok_or_else(|| unreadable(self.want, self.live, "memory", "not `N` or `current=N` MiB".into()))?;
        let want = u64::from(self.want.memory_mib);
        if have == want {
            return Ok(());
        }
        let (from, to) = (Some(format!("{have} MiB")), Some(format!("{want} MiB")));
        let (class, why) = if !self.live.running {
            (Class::Live, self.stopped_why().unwrap_or_default())
        } else if !self.has("memory") {
            (
                Class::NextBoot,
                "memory needs a cold start: the VM's hotplug setting has no `memory`, so PVE keeps it pending",
            )
        } else if self.get("numa") != Some("1") {
            (
                Class::Refused,
                "PVE refuses memory hotplug without NUMA (Memory.pm:364): set numa=1 or drop `memory` from hotplug, cold-start the VM, then plan again",
            )
        } else if want < 1024 {
            (
                Class::Refused,
                "PVE refuses to hotplug memory below 1024 MiB (Memory.pm:219): stop the VM and change it by hand, or ask for 1024 MiB or more",
            )
        } else {
            (Class::Live, "PVE hotplugs the memory (the `memory` hotplug feature, NUMA on)")
        };
        if class == Class::Refused {
            self.refuse("memory", "memory", from, to, None, why);
        } else {
            self.set.insert("memory".into(), want.to_string());
            self.push("memory", "memory", from, to, class, why);
        }
        Ok(())
    }

    /// Like creation, an inventory without tags leaves the VM's tags alone.
    fn tags(&mut self) {
        if self.want.tags.is_empty() {
            return;
        }
        let want = pve::tags_value(&self.want.tags);
        let have = self.get("tags").map(|t| pve::pve_tags(t).join(";"));
        if have.as_deref() == Some(want.as_str()) {
            return;
        }
        self.set.insert("tags".into(), want.clone());
        let why = self.stopped_why().unwrap_or("PVE changes tags at once, running or not");
        self.push("tags", "tags", have, Some(want), Class::Live, why);
    }

    /// Like creation, `startup` is written as `order=N` when the inventory
    /// has an order, and left alone when it has none.
    fn startup(&mut self) {
        let Some(order) = self.want.startup_order else { return };
        let want = format!("order={order}");
        let have = self.get("startup");
        if have.is_some_and(|h| pve::props(h) == pve::props(&want)) {
            return;
        }
        self.set.insert("startup".into(), want.clone());
        let why = self.stopped_why().unwrap_or("PVE changes the startup order at once, running or not");
        self.push("startup order", "startup", have.map(String::from), Some(want), Class::Live, why);
    }

    fn nics(&mut self) {
        let wanted: BTreeSet<&str> = self.want.nics.iter().map(|n| n.slot.as_str()).collect();
        for nic in &self.want.nics {
            let slot = nic.slot.as_str();
            let value = pve::net_value(self.get(slot), &nic.bridge, nic.vlan);
            let Some(have) = self.get(slot) else {
                let class = self.running_class(self.has("network"));
                let why = self.stopped_why().unwrap_or(match class {
                    Class::Live => "PVE hot-plugs the new NIC (the `network` hotplug feature)",
                    _ => "a new NIC needs a cold start: the VM's hotplug setting has no `network`",
                });
                self.set.insert(slot.into(), value.clone());
                self.push(slot, slot, None, Some(value), class, why);
                continue;
            };
            let old = pve::props(have);
            let old_bridge = old.get("bridge").cloned().flatten();
            let old_tag = old.get("tag").cloned().flatten();
            let new_tag = nic.vlan.map(|v| v.to_string());
            if old_bridge.as_deref() == Some(nic.bridge.as_str()) && old_tag == new_tag {
                continue;
            }
            if old_bridge.is_none() {
                // A NAT NIC given a bridge: PVE unplugs and plugs the device
                // (QemuServer.pm:5121), the guest sees its NIC replaced.
                let what = format!("{slot} bridge");
                let (from, to) = (Some("none (NAT)".to_string()), Some(nic.bridge.clone()));
                if !self.allow.nic_replacement {
                    self.refuse(what, slot, from, to, Some("--allow-nic-replacement"), "giving a NAT NIC a bridge replaces the NIC in the guest: pass --allow-nic-replacement to plan it");
                    continue;
                }
                let class = self.running_class(self.has("network"));
                let why = self.stopped_why().unwrap_or(match class {
                    Class::Live => "PVE unplugs and plugs the NIC (the guest sees it replaced; its MAC is kept)",
                    _ => "replacing a NIC needs a cold start: the VM's hotplug setting has no `network`",
                });
                self.set.insert(slot.into(), value);
                self.push(what, slot, from, to, class, why);
                continue;
            }
            self.set.insert(slot.into(), value);
            if old_bridge.as_deref() != Some(nic.bridge.as_str()) {
                let why = self
                    .stopped_why()
                    .unwrap_or("PVE moves the running NIC to the new bridge (no reboot; its MAC is kept)");
                self.push(
                    format!("{slot} bridge"),
                    slot,
                    old_bridge.clone(),
                    Some(nic.bridge.clone()),
                    Class::Live,
                    why,
                );
            }
            if old_tag != new_tag {
                let why = self.stopped_why().unwrap_or("PVE retags the running NIC (no reboot; its MAC is kept)");
                self.push(format!("{slot} VLAN"), slot, old_tag, new_tag, Class::Live, why);
            }
        }
        let extra: Vec<String> =
            self.live.config.keys().filter(|k| pve::is_net_key(k) && !wanted.contains(k.as_str())).cloned().collect();
        for slot in extra {
            let from = self.get(&slot).map(String::from);
            if !self.allow.nic_replacement {
                self.refuse(
                    &slot,
                    &slot,
                    from,
                    None,
                    Some("--allow-nic-replacement"),
                    format!("{slot} is not in the inventory: pass --allow-nic-replacement to remove it"),
                );
                continue;
            }
            let class = self.running_class(self.has("network"));
            let why = self.stopped_why().unwrap_or(match class {
                Class::Live => "PVE unplugs the NIC (the `network` hotplug feature)",
                _ => "removing a NIC needs a cold start: the VM's hotplug setting has no `network`",
            });
            self.delete.push(slot.clone());
            self.push(&slot, &slot, from, None, class, why);
        }
    }

    fn boot_disk(&mut self) -> Result<(), DiffError> {
        let Some(want_gib) = self.want.disk_gib else { return Ok(()) };
        let Some(disk) = pve::boot_disk(&self.live.config) else {
            return Err(DiffError::Missing {
                vm: self.want.name.clone(),
                message: format!("the config has no boot disk (scsi0/virtio0/sata0) to make {want_gib} GiB"),
            });
        };
        let value = self.get(&disk).unwrap_or_default();
        let drive = Drive::parse(value);
        let have_size = drive.opts.get("size").cloned().flatten().unwrap_or_default();
        let have =
            drive.size_gib().ok_or_else(|| unreadable(self.want, self.live, &disk, "no readable size=".into()))?;
        if !self.storage_change("boot disk storage", &disk, &drive, &self.want.storage) {
            return Ok(());
        }
        self.size_change("boot disk size", &disk, have, &have_size, u64::from(want_gib));
        Ok(())
    }

    /// A drive on another storage than the inventory's: a move with
    /// `--allow-disk-move`, else refused. False when refused (the drive's
    /// other changes are not planned either: the operator decides first).
    fn storage_change(&mut self, what: &str, disk: &str, drive: &Drive, want: &str) -> bool {
        let Some(have) = drive.storage() else { return true };
        if have == want {
            return true;
        }
        let (from, to) = (Some(have.to_string()), Some(want.to_string()));
        if !self.allow.disk_move {
            let why = format!(
                "moving {disk} from {have} to {want} copies the whole disk: pass --allow-disk-move to plan it (PVE keeps the old volume as an unused disk)"
            );
            self.refuse(what, disk, from, to, Some("--allow-disk-move"), why);
            return false;
        }
        self.moves.push(Move { disk: disk.into(), volume: drive.volume.clone(), from: have.into(), to: want.into() });
        let why = if self.live.running {
            "PVE copies the disk to the new storage while the VM runs (a drive-mirror, no reboot) and keeps the old volume as an unused disk"
        } else {
            "the VM is stopped: PVE copies the disk to the new storage now and keeps the old volume as an unused disk"
        };
        self.push(what, disk, from, to, Class::Live, why);
        true
    }

    fn size_change(&mut self, what: &str, disk: &str, have: u64, have_size: &str, want: u64) {
        let (from, to) = (Some(format!("{have} GiB")), Some(format!("{want} GiB")));
        if want > have {
            self.resize.push(Resize { disk: disk.into(), from: have_size.into(), to: format!("{want}G") });
            self.push(
                what,
                disk,
                from,
                to,
                Class::Live,
                "PVE grows the disk online (the guest sees the new size; grow its partition and file system)",
            );
        } else if want < have {
            self.refuse(what, disk, from, to, None, format!("PVE cannot shrink disks (shrinking disks is not supported): keep {disk} at {have} GiB in the inventory, or replace the disk by hand"));
        }
    }

    fn data_disks(&mut self) -> Result<(), DiffError> {
        let boot = pve::boot_disk(&self.live.config);
        let mut wanted = BTreeSet::new();
        for disk in &self.want.disks {
            let slot = disk.slot.as_str();
            wanted.insert(slot);
            let Some(value) = self.get(slot) else {
                let ok = self.has("disk") && !slot.starts_with("ide") && !slot.starts_with("sata");
                let class = self.running_class(ok);
                let why = self.stopped_why().unwrap_or(match class {
                    Class::Live => "PVE creates the volume and hot-plugs the disk (the `disk` hotplug feature)",
                    _ => {
                        "a new disk needs a cold start: the VM's hotplug setting has no `disk`, or the slot is ide/sata"
                    }
                });
                let value = format!("{}:{}", disk.storage, disk.size_gib);
                self.set.insert(slot.into(), value);
                self.push(slot, slot, None, Some(format!("{} GiB on {}", disk.size_gib, disk.storage)), class, why);
                continue;
            };
            let drive = Drive::parse(value);
            if drive.is_media() || Some(slot) == boot.as_deref() {
                self.refuse(slot, slot, Some(value.into()), Some(format!("{} GiB on {}", disk.size_gib, disk.storage)), None, format!("{slot} holds the boot disk, a CD-ROM or the cloud-init drive: choose another slot for the data disk in the inventory"));
                continue;
            }
            let have_size = drive.opts.get("size").cloned().flatten().unwrap_or_default();
            let have =
                drive.size_gib().ok_or_else(|| unreadable(self.want, self.live, slot, "no readable size=".into()))?;
            if !self.storage_change(&format!("{slot} storage"), slot, &drive, &disk.storage) {
                continue;
            }
            self.size_change(&format!("{slot} size"), slot, have, &have_size, u64::from(disk.size_gib));
        }
        let extra: Vec<String> = self
            .live
            .config
            .iter()
            .filter(|(k, v)| {
                pve::is_disk_key(k)
                    && !wanted.contains(k.as_str())
                    && Some(k.as_str()) != boot.as_deref()
                    && !Drive::parse(v).is_media()
            })
            .map(|(k, _)| k.clone())
            .collect();
        for slot in extra {
            let from = self.get(&slot).map(String::from);
            if !self.allow.disk_removal {
                self.refuse(&slot, &slot, from, None, Some("--allow-disk-removal"), format!("{slot} is not in the inventory: pass --allow-disk-removal to detach it (PVE keeps its volume as an unused disk)"));
                continue;
            }
            let ok = self.has("disk") && !slot.starts_with("ide") && !slot.starts_with("sata");
            let class = self.running_class(ok);
            let why = match (self.live.running, class) {
                (false, _) => "the VM is stopped: PVE detaches the disk now and keeps its volume as an unused disk",
                (true, Class::Live) => {
                    "PVE unplugs the disk and keeps its volume as an unused disk (the `disk` hotplug feature)"
                }
                _ => {
                    "detaching the disk needs a cold start: the VM's hotplug setting has no `disk`, or the slot is ide/sata"
                }
            };
            self.delete.push(slot.clone());
            self.push(&slot, &slot, from, None, class, why);
        }
        Ok(())
    }

    fn finish(self) -> VmChanges {
        let config = &self.live.config;
        let mut expect: BTreeMap<String, Option<String>> = BTreeMap::new();
        for (k, v) in &self.set {
            expect.insert(k.clone(), Some(v.clone()));
        }
        for k in &self.delete {
            expect.insert(k.clone(), None);
        }
        let removed: Vec<&str> = self.delete.iter().map(String::as_str).collect();
        if let Some(boot) = pve::boot_without(config.get("boot").map(String::as_str), &removed) {
            expect.insert("boot".into(), (!boot.is_empty()).then_some(boot));
        }
        for m in &self.moves {
            expect.entry(m.disk.clone()).or_insert_with(|| config.get(&m.disk).cloned());
        }
        for r in &self.resize {
            let value = pve::with_size(config.get(&r.disk).map(String::as_str).unwrap_or_default(), &r.to);
            expect.insert(r.disk.clone(), Some(value));
        }
        let before = expect.keys().map(|k| (k.clone(), config.get(k).cloned())).collect();
        let touched: BTreeSet<&str> = expect.keys().map(String::as_str).collect();
        let rest = rest_hash(config, &touched);
        let pending_before: BTreeSet<String> =
            self.live.pending.iter().filter(|p| p.pending.is_some() || p.delete).map(|p| p.key.clone()).collect();
        VmChanges {
            name: self.want.name.clone(),
            vmid: self.want.vmid,
            node: self.want.node.clone(),
            running: self.live.running,
            hotplug: config.get("hotplug").cloned().unwrap_or_else(|| "network,disk,usb".into()),
            digest: self.live.digest.clone(),
            changes: self.changes,
            set: self.set,
            delete: self.delete,
            moves: self.moves,
            resize: self.resize,
            before,
            expect,
            rest,
            pending_before: pending_before.into_iter().collect(),
        }
    }
}

/// What the VM's description asks must be plannable: each slot once and a
/// slot, storages and bridges PVE's ids.
fn check_wanted(want: &Wanted) -> Result<(), DiffError> {
    // The inventory refuses a slot given twice or not a slot
    // (inventory/hardware.rs, net{N} by position), but a workflow script
    // builds the VM map it diffs: two wishes for one slot would plan two
    // resizes of one disk.
    let slots = |what, is_slot: fn(&str) -> bool, names: Vec<&str>| {
        let mut seen = BTreeSet::new();
        for slot in names {
            let message = if !is_slot(slot) {
                format!("names `{slot}` as a {what}, which is not one (scsi1, virtio1, sata1, net1, …)")
            } else if !seen.insert(slot) {
                format!("gives {what} `{slot}` twice: give each slot once")
            } else {
                continue;
            };
            return Err(DiffError::Inventory { vm: want.name.clone(), message });
        }
        Ok(())
    };
    slots("disk slot", pve::is_disk_key, want.disks.iter().map(|d| d.slot.as_str()).collect())?;
    slots("NIC slot", pve::is_net_key, want.nics.iter().map(|n| n.slot.as_str()).collect())?;
    // Names written into property strings: PVE's id rules, or a `,` in one
    // would add drive or NIC options nobody reviewed.
    let storages = std::iter::once(&want.storage).chain(want.disks.iter().map(|d| &d.storage));
    if let Some(bad) = storages.into_iter().find(|s| !crate::inventory::is_storage_id(s)) {
        let message = format!("names `{bad}` as a storage, which is no Proxmox storage id (local-lvm)");
        return Err(DiffError::Inventory { vm: want.name.clone(), message });
    }
    if let Some(bad) = want.nics.iter().find(|n| !crate::inventory::is_bridge_id(&n.bridge)) {
        let message = format!("names `{}` as the bridge of {}, which is no bridge name (vmbr0)", bad.bridge, bad.slot);
        return Err(DiffError::Inventory { vm: want.name.clone(), message });
    }
    Ok(())
}

/// Live drive and NIC values PVE could hold (see the errors).
fn check_live(want: &Wanted, live: &Live) -> Result<(), DiffError> {
    for (key, value) in &live.config {
        let default_key = pve::is_disk_key(key).then_some("file");
        if (pve::is_disk_key(key) || pve::is_net_key(key))
            && let Some(dup) = pve::duplicate_key(value, default_key)
        {
            return Err(unreadable(want, live, key, format!("`{dup}` is given twice, which PVE refuses")));
        }
        // `storage:N` is how a write asks PVE for a new N GiB volume
        // (src/PVE/QemuServer/Drive.pm `$NEW_DISK_RE`), never a volume a
        // config holds: the plan could not tell its own write from it.
        if pve::is_disk_key(key) && Drive::parse(value).allocation().is_some() {
            let reason = "its volume is PVE's syntax for allocating a new disk (`storage:GiB`), not a volume".into();
            return Err(unreadable(want, live, key, reason));
        }
    }
    Ok(())
}

fn unreadable(want: &Wanted, live: &Live, key: &str, reason: String) -> DiffError {
    DiffError::Unreadable {
        vm: want.name.clone(),
        key: key.into(),
        value: live.config.get(key).cloned().unwrap_or_default(),
        reason,
    }
}
