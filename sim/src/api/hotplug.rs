//! What a config update does to a RUNNING VM: qemu-server's `vmconfig_hotplug_pending`
//! (e6352be, src/PVE/QemuServer.pm:4617-4944) over the `[PENDING]` section that
//! `update_vm_api` (src/PVE/API2/Qemu.pm:2291-2588) has just written.
//!
//! Contract: [`hotplug_pending`] moves the fast-plug options (`$fast_plug_option`,
//! QemuServer.pm:4594-4611, and every cloud-init option) into the config whatever the
//! selection, then tries each pending delete and change the caller selected (the keys
//! the request named): what PVE can apply to a running guest moves into the config
//! (a drive it unplugs is registered as `unusedN`, its volume kept), what it cannot
//! (`die "skip"`) stays pending until a cold start, and what it tried and failed
//! stays pending with an error `hotplug problem - <why>` in the returned map, which
//! the caller raises as parameter errors AFTER the pending write, as PVE does. The
//! `hotplug` option (QemuServer.pm:253, default `network,disk,usb`; `0` none, `1` the
//! default; `parse_hotplug_features` :1136) decides. No device is really plugged: the
//! simulated guest sees the new config as soon as it is in the config.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Vm, props};

/// The hotplug features of a VM (`parse_hotplug_features`, QemuServer.pm:1136-1150).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// `network`: NIC plug/unplug.
    pub network: bool,
    /// `disk`: drive plug/unplug (not ide/sata/efidisk/tpmstate).
    pub disk: bool,
    /// `cpu`: `vcpus`.
    pub cpu: bool,
    /// `memory`: DIMMs (needs `numa: 1`).
    pub memory: bool,
    /// `usb` (not modelled beyond parsing).
    pub usb: bool,
    /// `cloudinit`: regenerate the cloud-init drive of a running VM.
    pub cloudinit: bool,
}

/// The `hotplug` default (QemuServer.pm:262).
pub const DEFAULT: &str = "network,disk,usb";

/// Parse a `hotplug` value; `None` for an unknown feature (PVE: `invalid hotplug
/// feature 'X'`, reported by the format check as `unable to parse hotplug option`).
pub fn parse(value: &str) -> Option<Features> {
    let mut f = Features::default();
    if value == "0" {
        return Some(f);
    }
    let value = if value == "1" { DEFAULT } else { value };
    for feature in value.split([',', ';', ' ', '\t']).filter(|s| !s.is_empty()) {
        match feature {
            "network" => f.network = true,
            "disk" => f.disk = true,
            "cpu" => f.cpu = true,
            "memory" => f.memory = true,
            "usb" => f.usb = true,
            "cloudinit" => f.cloudinit = true,
            _ => return None,
        }
    }
    Some(f)
}

/// The features of a VM's config (`hotplug` absent = `1`, QemuServer.pm:4713-4714).
pub fn of(config: &BTreeMap<String, String>) -> Features {
    parse(config.get("hotplug").map_or("1", String::as_str)).unwrap_or_default()
}

/// `$fast_plug_option` (QemuServer.pm:4594-4611): options with no effect on the running
/// guest, plus every cloud-init option (`$confdesc_cloudinit`, :781-880, :4609-4611).
pub fn is_fast_plug(key: &str) -> bool {
    const FAST: &[&str] = &[
        "description",
        "hookscript",
        "lock",
        "migrate_downtime",
        "migrate_speed",
        "name",
        "onboot",
        "protection",
        "shares",
        "startup",
        "tags",
        "vmstatestorage",
        "citype",
        "ciuser",
        "cipassword",
        "ciupgrade",
        "cicustom",
        "searchdomain",
        "nameserver",
        "sshkeys",
    ];
    FAST.contains(&key)
        || key.strip_prefix("ipconfig").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Outcome of trying one option (`die "skip\n"` or an error, else applied).
enum Try {
    Applied(String),
    Skip,
    Failed(String),
}

/// `vmconfig_hotplug_pending` for a running VM: returns the hotplug errors by key.
pub fn hotplug_pending(vm: &mut Vm, selection: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut errors = BTreeMap::new();
    // :4699-4711: fast-plug options first, always, whatever the selection.
    let fast: Vec<String> = vm.pending.keys().filter(|k| is_fast_plug(k)).cloned().collect();
    for k in fast {
        if let Some(v) = vm.pending.remove(&k) {
            vm.config.insert(k, v);
        }
    }
    let features = of(&vm.config);
    // :4733-4799: pending deletes, in key order.
    let deletes: Vec<String> = vm.pending_delete.iter().filter(|k| selection.contains(*k)).cloned().collect();
    for k in deletes {
        match try_delete(vm, &k, features) {
            Try::Applied(_) => {
                if let Some(old) = vm.config.remove(&k)
                    && props::is_drive_key(&k)
                {
                    vm.register_unused(&old);
                }
                vm.pending_delete.remove(&k);
            }
            Try::Skip => {}
            Try::Failed(e) => {
                errors.insert(k, format!("hotplug problem - {e}"));
            }
        }
    }
    // :4801-4896: pending changes.
    let changes: Vec<(String, String)> =
        vm.pending.iter().filter(|(k, _)| selection.contains(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    for (k, v) in changes {
        let tried = try_change(vm, &k, &v, features);
        // :5242-5249: a drive given another volume with the disk feature is unplugged
        // and its old volume registered unused before the new one is plugged (on
        // ide/sata too, where the plug is then skipped: PVE does the same).
        if features.disk
            && !matches!(tried, Try::Failed(_))
            && props::is_drive_key(&k)
            && !is_indexed(&k, "unused")
            && !matches!(k.as_str(), "efidisk0" | "tpmstate0")
            && let Some(old) = vm.config.get(&k).cloned()
            && !is_cdrom(&old)
            && drive_file(&old) != drive_file(&v)
        {
            vm.register_unused(&old);
        }
        match tried {
            Try::Applied(v) => {
                vm.config.insert(k.clone(), v);
                vm.pending.remove(&k);
            }
            Try::Skip => {}
            Try::Failed(e) => {
                errors.insert(k, format!("hotplug problem - {e}"));
            }
        }
    }
    errors
}

fn is_indexed(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A drive slot PVE never hot(un)plugs (QemuServer.pm:4776-4777, :5334).
fn cold_slot(key: &str) -> bool {
    ["efidisk", "ide", "sata", "tpmstate"].iter().any(|p| is_indexed(key, p))
}

/// The delete branch (QemuServer.pm:4733-4799).
fn try_delete(vm: &Vm, key: &str, f: Features) -> Try {
    match key {
        // :4737-4738: a `hotplug` that has cpu or memory stays until a cold start.
        "hotplug" if vm.config.get("hotplug").is_some_and(|h| h.contains("cpu") || h.contains("memory")) => Try::Skip,
        "hotplug" | "cpuunits" | "cpulimit" => Try::Applied(String::new()),
        "vcpus" if f.cpu => Try::Applied(String::new()),
        // :4758-4760: re-enabling the balloon device is not hotpluggable.
        "balloon" if vm.config.get("balloon").is_some_and(|b| b == "0") => Try::Skip,
        "balloon" => Try::Applied(String::new()),
        k if is_fast_plug(k) => Try::Applied(String::new()),
        // :4766-4767: unplugging a NIC needs the network feature.
        k if is_indexed(k, "net") && f.network => Try::Applied(String::new()),
        // :4775-4779: a drive: unplug + `vmconfig_delete_or_detach_drive` (registered unused).
        k if props::is_drive_key(k) && !is_indexed(k, "unused") && f.disk && !cold_slot(k) => {
            Try::Applied(String::new())
        }
        "memory" if f.memory => match memory_hotplug(vm, "512") {
            Ok(v) => Try::Applied(v),
            Err(e) => Try::Failed(e),
        },
        _ => Try::Skip,
    }
}

/// The change branch (QemuServer.pm:4801-4896).
fn try_change(vm: &Vm, key: &str, value: &str, f: Features) -> Try {
    let applied = || Try::Applied(value.to_string());
    match key {
        // :4805-4809.
        "hotplug" => {
            let cur = vm.config.get("hotplug").map_or("", String::as_str);
            if value.contains("memory") || cur.contains("memory") || value.contains("cpu") || cur.contains("cpu") {
                Try::Skip
            } else {
                applied()
            }
        }
        "vcpus" if !f.cpu => Try::Skip,
        "vcpus" => {
            // `qemu_cpu_hotplug` (QemuServer.pm:4309-4323).
            let n = |k: &str| vm.config.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(1);
            let max = n("sockets") * n("cores");
            if value.parse::<u64>().is_ok_and(|v| v > max) {
                Try::Failed("you can't add more vcpus than maxcpus".into())
            } else {
                applied()
            }
        }
        // :4832-4843: enabling or disabling the balloon device is not hotpluggable.
        "balloon" => {
            let on = |v: Option<&String>| v.is_none_or(|b| b != "0");
            if on(vm.config.get("balloon")) == on(Some(&value.to_string())) { applied() } else { Try::Skip }
        }
        "cpuunits" | "cpulimit" => applied(),
        k if is_indexed(k, "net") => update_net(vm, k, value, f.network),
        "efidisk0" | "tpmstate0" => Try::Skip,
        k if props::is_drive_key(k) && !is_indexed(k, "unused") => update_disk(vm, k, value, f.disk),
        "memory" if f.memory => match memory_hotplug(vm, value) {
            Ok(v) => Try::Applied(v),
            Err(e) => Try::Failed(e),
        },
        _ => Try::Skip,
    }
}

/// `vmconfig_update_net` (QemuServer.pm:5108-5205).
fn update_net(vm: &Vm, key: &str, value: &str, hotplug: bool) -> Try {
    let Some(old) = vm.config.get(key) else {
        // A new NIC: plugged with the network feature, else at the next start.
        return if hotplug { Try::Applied(value.to_string()) } else { Try::Skip };
    };
    let (o, n) = (net_fields(old), net_fields(value));
    let get = |m: &BTreeMap<String, String>, k: &str| m.get(k).cloned();
    // :5113-5122: model, MAC, queues, mtu or a missing bridge need unplug + plug.
    let replug = ["model", "macaddr", "queues", "mtu"].iter().any(|k| get(&o, k) != get(&n, k))
        || !(o.contains_key("bridge") && n.contains_key("bridge"));
    if replug && !hotplug {
        return Try::Skip;
    }
    // Else bridge/tag/trunks/firewall/rate/link_down apply live (`tap_plug`, :5123-5190; a new NIC :5194-5204).
    Try::Applied(value.to_string())
}

/// A NIC's properties with the model and MAC split out (`parse_net`).
fn net_fields(v: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, val) in props::split_props(v) {
        if props::NIC_MODELS.contains(&k.as_str()) {
            out.insert("model".into(), k);
            out.insert("macaddr".into(), val.to_uppercase());
        } else {
            out.insert(k, val);
        }
    }
    out
}

/// The volume of a drive value (`file`, the first item or `file=`).
pub fn drive_file(v: &str) -> String {
    props::split_props(v).into_iter().find(|(k, _)| k.is_empty() || k == "file").map(|(_, f)| f).unwrap_or_default()
}

/// `drive_is_cdrom` after `parse_drive` (`cdrom`/`none` imply `media=cdrom`).
pub fn is_cdrom(v: &str) -> bool {
    let file = drive_file(v);
    props::prop(v, "media").as_deref() == Some("cdrom") || file == "cdrom" || file == "none"
}

/// `vmconfig_update_disk` (QemuServer.pm:5230-5338).
fn update_disk(vm: &Vm, key: &str, value: &str, hotplug: bool) -> Try {
    if let Some(old) = vm.config.get(key) {
        let media = |v: &str| if is_cdrom(v) { "cdrom" } else { "disk" };
        if media(value) != media(old) {
            return Try::Failed("unable to change media type".into());
        }
        if is_cdrom(old) {
            // :5320-5331: `change_medium`, the cloud-init drive included.
            return Try::Applied(value.to_string());
        }
        if drive_file(value) == drive_file(old) {
            // :5253-5264: options QEMU cannot change on a running drive.
            const COLD: &[&str] = &["aio", "discard", "iothread", "queues", "product", "cache", "ssd", "vendor", "ro"];
            if COLD.iter().any(|k| props::prop(value, k) != props::prop(old, k)) {
                return Try::Skip;
            }
            // Throttling and the rest (size, backup, ...) apply at once.
            return Try::Applied(value.to_string());
        }
        // Another volume: the old one is unplugged (registered unused by
        // `hotplug_pending`), the new one plugged below.
    }
    // :5334: new drives are plugged with the disk feature, never on ide/sata.
    if !hotplug || cold_slot(key) { Try::Skip } else { Try::Applied(value.to_string()) }
}

/// PVE's minimum static memory with memory hotplug (`$STATICMEM`, Memory.pm:66).
const STATIC_MEM: u64 = 1024;

/// `get_max_mem` (Memory.pm:96-129) for a host with 40 physical address bits and a
/// CPU type other than host/max: `1 << (40 - 21)` MiB.
const MAX_MEM: u64 = 1 << 19;

/// `qemu_memory_hotplug` (Memory.pm:201-338): the memory the config ends up with
/// (grown to the next DIMM boundary; shrunk by whole DIMMs), or PVE's error.
fn memory_hotplug(vm: &Vm, value: &str) -> Result<String, String> {
    // The VM could not have started without NUMA (Memory.pm:364, `config`); a config
    // that got here anyway (a simulator state) is refused with that message.
    if vm.config.get("numa").is_none_or(|n| n != "1") {
        return Err("NUMA needs to be enabled for memory hotplug".into());
    }
    let parse = |v: &str| v.strip_prefix("current=").unwrap_or(v).parse::<u64>().ok();
    let old = vm.config.get("memory").and_then(|m| parse(m)).unwrap_or(512);
    let new = parse(value).unwrap_or(512);
    if new == old {
        return Ok(value.to_string());
    }
    let hugepages_1g = vm.config.get("hugepages").is_some_and(|h| h == "1024");
    let sockets = vm.config.get("sockets").and_then(|s| s.parse::<u64>().ok()).unwrap_or(1);
    let static_mem = if hugepages_1g { STATIC_MEM * sockets } else { STATIC_MEM };
    if new < static_mem {
        // A `die` without a newline: Perl appends where it died (Memory.pm:219).
        return Err(format!(
            "memory can't be lower than {static_mem} MB at /usr/share/perl5/PVE/QemuServer/Memory.pm line 219."
        ));
    }
    if new > MAX_MEM {
        return Err(format!("you cannot add more memory than max mem {MAX_MEM} MB!"));
    }
    // `foreach_dimm` (Memory.pm:171-199): 32 DIMMs of each size, doubling from 512
    // MiB (1 GiB with 1 GiB hugepages), on top of the static memory.
    let first = if hugepages_1g { 1024 } else { 512 };
    let dimms: Vec<u64> = (0..8).flat_map(|j| std::iter::repeat_n(first << j, 32)).collect();
    if new > old {
        let mut size = static_mem;
        for d in &dimms {
            size += d;
            if size >= new {
                break;
            }
        }
        return Ok(size.to_string());
    }
    // Unplug from the highest DIMM while the memory is above the target (:306-335).
    let mut plugged = Vec::new();
    let mut size = static_mem;
    for d in &dimms {
        if size >= old {
            break;
        }
        size += d;
        plugged.push(*d);
    }
    let mut current = old;
    for d in plugged.iter().rev() {
        if current <= new {
            break;
        }
        current -= d;
    }
    Ok(current.to_string())
}

/// The memory-hotplug start check (Memory.pm:364, `config`): a VM whose `hotplug`
/// has `memory` does not start without `numa: 1`.
pub fn start_check(config: &BTreeMap<String, String>) -> Result<(), String> {
    if of(config).memory && config.get("numa").is_none_or(|n| n != "1") {
        return Err("NUMA needs to be enabled for memory hotplug".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(pairs: &[(&str, &str)]) -> Vm {
        Vm::stopped(100, "pve1".into(), pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    /// QemuServer.pm:1136-1150.
    #[test]
    fn hotplug_values_parse_as_pve_does() {
        assert_eq!(parse("1"), parse(DEFAULT));
        assert_eq!(parse("0"), Some(Features::default()));
        assert!(parse("network,memory").is_some_and(|f| f.memory && f.network && !f.disk));
        assert_eq!(parse("network,bogus"), None);
    }

    /// Memory.pm:171-199, :306-335: growth to the next DIMM boundary, shrink by DIMMs.
    #[test]
    fn memory_hotplug_follows_the_dimm_layout() {
        let v = vm(&[("memory", "2048"), ("numa", "1")]);
        assert_eq!(memory_hotplug(&v, "3000").unwrap(), "3072");
        assert_eq!(memory_hotplug(&v, "4096").unwrap(), "4096");
        let v = vm(&[("memory", "3072"), ("numa", "1")]);
        assert_eq!(memory_hotplug(&v, "2900").unwrap(), "2560");
        assert!(memory_hotplug(&v, "512").unwrap_err().starts_with("memory can't be lower than 1024 MB"));
        let v = vm(&[("memory", "3072")]);
        assert_eq!(memory_hotplug(&v, "4096").unwrap_err(), "NUMA needs to be enabled for memory hotplug");
    }
}
