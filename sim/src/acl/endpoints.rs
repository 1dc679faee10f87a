//! What each API request the simulator serves needs from the token's ACL: the
//! endpoint's `permissions` from the PVE 9.1 API schema, then the checks its Perl
//! handler makes that the schema does not list, in the handler's order, so the first
//! missing privilege is the one real PVE names.
//!
//! Contract: [`check_request`] runs before the handler; `Ok` for root's token, for
//! endpoints open to every user (`user: all`) and for paths the simulator does not
//! serve (the handler answers those). [`filter_reply`] drops from list answers the
//! entries the token may not see, as the list handlers do.
//!
//! Sources: pve-docs e5010dcea566a205770572cfbc5fe0af220d5077 `api-viewer/apidata.js`
//! (each endpoint's `permissions`, cited by path below); qemu-server
//! e6352be67f70042a7433a3a3c712b36d02f9f7cb `src/PVE/API2/Qemu.pm`: create
//! (l. 1294-1364), `$check_storage_access` (l. 163-280), `$check_storage_access_clone`
//! (l. 282-323), `$check_storage_access_migrate` (l. 325-333), the option classes and
//! `$check_vm_modify_config_perm` (l. 789-1041), update (l. 2196-2204, drive checks
//! l. 2269-2287, 2405-2413), clone (l. 4491-4494), migrate (l. 5618-5630);
//! `src/PVE/QemuServer.pm` `check_bridge_access` (l. 6417-6430); pve-guest-common
//! 4a8f6cbf78e1b6992ef77facb4ff2ab3372999e7 `src/PVE/GuestHelpers.pm`
//! `assert_tag_permissions` (l. 314-347; the default `user-tag-access` is `free`, so
//! a tag needs only `VM.Config.Options`) and `check_vnet_access` (l. 397-421); pve-storage
//! 0c56bad8b2a7d69e5ce2c243651fe830d6caa936 `src/PVE/Storage.pm` `check_volume_access`
//! (l. 619-656); pve-container 94f558522ef61f9858c39c264d0ac4e697e49268
//! `src/PVE/API2/LXC.pm` create (l. 260-360) and `src/PVE/LXC.pm`
//! `check_ct_modify_config_perm` (l. 1655-1750); pve-manager
//! 14a22df35955d97dfc1af21e117dc894a29df0c9 `PVE/API2/Cluster.pm` resources (l. 588,
//! 647) and `PVE/API2/Tasks.pm` (l. 27-36: a token sees its own tasks).
//!
//! Tasks (pve-manager `PVE/API2/Tasks.pm`, cited below): a token sees its own tasks;
//! another user's (a task the state holds from `root@pam`, an operator) only with
//! Sys.Audit on `/nodes/{node}`.
//!
//! Simplifications (docs/SIMULATOR.md, "Permissions"): Perl iterates a
//! request's options in hash order, the simulator in sorted order, so when several
//! option privileges are missing real PVE may name another of them first.

use serde_json::Value;

use super::{AccessConfig, Denied};
use crate::api::Params;
use crate::model::ClusterState;
use crate::model::props::is_drive_key;

/// The VM-config option classes of Qemu.pm l. 789-862.
const CPU_OPTS: &[&str] = &["cores", "cpu", "runningcpu", "cpulimit", "cpuunits", "numa", "smp", "sockets", "vcpus"];
const MEMORY_OPTS: &[&str] = &["memory", "balloon", "shares", "allow-ksm"];
const HWTYPE_OPTS: &[&str] = &[
    "acpi",
    "hotplug",
    "kvm",
    "machine",
    "runningmachine",
    "scsihw",
    "smbios1",
    "tablet",
    "vga",
    "watchdog",
    "audio0",
    "rng0",
];
const GENERAL_OPTS: &[&str] = &[
    "agent",
    "autostart",
    "bios",
    "description",
    "keyboard",
    "localtime",
    "migrate_downtime",
    "migrate_speed",
    "name",
    "onboot",
    "ostype",
    "protection",
    "reboot",
    "startdate",
    "startup",
    "tdf",
    "template",
];
const DISK_OPTS: &[&str] = &["boot", "bootdisk", "vmstatestorage"];
const CLOUDINIT_OPTS: &[&str] =
    &["cicustom", "cipassword", "citype", "ciuser", "ciupgrade", "nameserver", "searchdomain", "sshkeys"];
/// Parameters of `PUT/POST config` that are not config options (extracted first, l. 2075-2100).
const UPDATE_CONTROL: &[&str] = &[
    "node",
    "vmid",
    "digest",
    "background_delay",
    "skip_cloud_init",
    "import-working-storage",
    "skiplock",
    "delete",
    "revert",
    "force",
];
/// Parameters of `POST qemu` that are not config options (l. 1230-1285).
const CREATE_CONTROL: &[&str] = &[
    "node",
    "vmid",
    "archive",
    "bwlimit",
    "force",
    "pool",
    "start",
    "ha-managed",
    "storage",
    "unique",
    "live-restore",
    "import-working-storage",
];

/// The checks one request runs, in order; the first failure is the 403.
struct Ctx<'a> {
    acl: &'a AccessConfig,
    who: &'a str,
}

impl Ctx<'_> {
    fn check(&self, path: &str, privs: &[&str]) -> Result<(), Denied> {
        self.acl.check(self.who, path, privs)
    }
    fn any(&self, path: &str, privs: &[&str]) -> Result<(), Denied> {
        self.acl.check_any(self.who, path, privs)
    }
    fn has(&self, path: &str, privilege: &str) -> bool {
        self.acl.has(self.who, path, privilege)
    }
}

/// PVE's 403 for `method segs` with `params`, or `Ok` when the token may make it.
pub fn check_request(
    acl: &AccessConfig,
    state: &ClusterState,
    method: &str,
    segs: &[String],
    p: &Params,
) -> Result<(), Denied> {
    if acl.is_root() {
        return Ok(());
    }
    let cx = Ctx { acl, who: &acl.api_token };
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match (method, s.as_slice()) {
        // apidata.js /cluster/status, /cluster/ha/*: Sys.Audit on / to read, Sys.Console to write.
        ("GET", ["cluster", "status"]) | ("GET", ["cluster", "ha", ..]) => cx.check("/", &["Sys.Audit"]),
        (_, ["cluster", "ha", ..]) => cx.check("/", &["Sys.Console"]),
        // apidata.js GET /storage/{storage}: Datastore.Allocate.
        ("GET", ["storage", id]) => cx.check(&format!("/storage/{id}"), &["Datastore.Allocate"]),
        ("GET", ["nodes", node, "status"]) => cx.check(&format!("/nodes/{node}"), &["Sys.Audit"]),
        ("GET", ["nodes", _, "storage", id, ..]) => {
            cx.any(&format!("/storage/{id}"), &["Datastore.Audit", "Datastore.AllocateSpace"])
        }
        ("POST", ["nodes", _, "storage", id, "upload"]) => {
            cx.check(&format!("/storage/{id}"), &["Datastore.AllocateTemplate"])
        }
        // Tasks.pm read_task_log (l. 395-407), read_task_status (l. 515-529), stop_task
        // (l. 319-326): another user's task needs Sys.Audit (stop: Sys.Modify) on the node.
        (m, ["nodes", node, "tasks", upid, rest @ ..]) => {
            let Some(owner) = upid.split(':').nth(7) else { return Ok(()) };
            let known = state.task(upid).is_some();
            if task_is_users(owner, &acl.api_token) || (rest == ["status"] && !known) {
                return Ok(());
            }
            let privilege = if m == "DELETE" { "Sys.Modify" } else { "Sys.Audit" };
            cx.check(&format!("/nodes/{node}"), &[privilege])
        }
        ("POST", ["nodes", _, "qemu"]) => qemu_create(&cx, p),
        ("POST", ["nodes", _, "lxc"]) => lxc_create(&cx, p),
        (m, ["nodes", _, "qemu", vmid, rest @ ..]) => qemu_vm(&cx, state, m, vmid, rest, p),
        (m, ["nodes", _, "lxc", vmid, rest @ ..]) => lxc_ct(&cx, state, m, vmid, rest, p),
        _ => Ok(()),
    }
}

fn qemu_vm(cx: &Ctx, state: &ClusterState, m: &str, vmid: &str, rest: &[&str], p: &Params) -> Result<(), Denied> {
    let vm_path = format!("/vms/{vmid}");
    let conf = vmid.parse::<u32>().ok().and_then(|id| state.vms.get(&id)).map(|vm| &vm.config);
    match (m, rest) {
        ("DELETE", []) => cx.check(&vm_path, &["VM.Allocate"]),
        ("GET", ["config"] | ["pending"] | ["status", "current"]) => cx.check(&vm_path, &["VM.Audit"]),
        ("POST" | "PUT", ["config"]) => {
            cx.any(
                &vm_path,
                &[
                    "VM.Config.Disk",
                    "VM.Config.CDROM",
                    "VM.Config.CPU",
                    "VM.Config.Memory",
                    "VM.Config.Network",
                    "VM.Config.HWType",
                    "VM.Config.Options",
                    "VM.Config.Cloudinit",
                ],
            )?;
            qemu_update(cx, &vm_path, conf, p)
        }
        ("PUT", ["unlink"] | ["resize"]) => cx.check(&vm_path, &["VM.Config.Disk"]),
        // apidata.js: perm /vms/{vmid} VM.Config.Disk; then Qemu.pm l. 5173-5174 (the
        // reassign form: VM.Config.Disk on the target VM) or l. 5191 (Datastore.AllocateSpace
        // on the target storage). Both given is the handler's parameter error (l. 5169-5171).
        ("POST", ["move_disk"]) => {
            cx.check(&vm_path, &["VM.Config.Disk"])?;
            match (p.get("target-vmid"), p.get("storage")) {
                (Some(t), None) => cx.check(&format!("/vms/{t}"), &["VM.Config.Disk"]),
                (None, Some(s)) => cx.check(&format!("/storage/{s}"), &["Datastore.AllocateSpace"]),
                _ => Ok(()),
            }
        }
        ("POST", ["clone"]) => {
            // apidata.js: ['and', perm /vms/{vmid} VM.Clone, ['or', perm /vms/{newid}
            // VM.Allocate, perm /pool/{pool} VM.Allocate require_param pool]]; a failed
            // 'or' raises the bare "Permission check failed".
            cx.check(&vm_path, &["VM.Clone"])?;
            let newid = p.get("newid").unwrap_or_default();
            if !cx.has(&format!("/vms/{newid}"), "VM.Allocate") {
                let pool_ok = p.get("pool").is_some_and(|pool| cx.has(&format!("/pool/{pool}"), "VM.Allocate"));
                if !pool_ok {
                    return Err(Denied(None));
                }
            }
            let Some(conf) = conf else { return Ok(()) };
            // $check_storage_access_clone: every non-CD-ROM volume's storage (or the
            // target `storage`) needs Datastore.AllocateSpace.
            for (k, v) in conf.iter().filter(|(k, _)| is_drive_key(k) && !k.starts_with("unused")) {
                let Some(volid) = drive_file(v) else { continue };
                if volid == "none" || is_cdrom(v) {
                    continue;
                }
                let _ = k;
                let sid = p.get("storage").map(str::to_string).or_else(|| storage_of(volid));
                if let Some(sid) = sid {
                    cx.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
                }
            }
            bridge_access(cx, conf.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        }
        ("GET" | "POST", ["migrate"]) => {
            cx.check(&vm_path, &["VM.Migrate"])?;
            match p.get("targetstorage") {
                Some(ts) if m == "POST" && !ts.contains(':') && ts != "1" => {
                    cx.check(&format!("/storage/{ts}"), &["Datastore.AllocateSpace"])
                }
                _ => Ok(()),
            }
        }
        ("POST", ["status", _]) => cx.check(&vm_path, &["VM.PowerMgmt"]),
        ("GET" | "POST", ["agent", _]) => cx.any(&vm_path, &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"]),
        _ => Ok(()),
    }
}

/// `POST /nodes/{node}/qemu` (Qemu.pm l. 1294-1364).
fn qemu_create(cx: &Ctx, p: &Params) -> Result<(), Denied> {
    let vmid = p.get("vmid").unwrap_or_default();
    let vm_path = format!("/vms/{vmid}");
    if let Some(storage) = p.get("storage") {
        cx.check(&format!("/storage/{storage}"), &["Datastore.AllocateSpace"])?;
    }
    if p.get("ha-managed").is_some_and(truthy) {
        cx.check("/", &["Sys.Console"])?;
    }
    if p.get("start").is_some_and(truthy) {
        cx.check(&vm_path, &["VM.PowerMgmt"])?;
    }
    let pool_ok = p.get("pool").is_some_and(|pool| cx.has(&format!("/pool/{pool}"), "VM.Allocate"));
    if !cx.has(&vm_path, "VM.Allocate") && !pool_ok {
        return Err(Denied(None));
    }
    let opts: Vec<(&str, &str)> = p
        .map
        .iter()
        .filter(|(k, _)| !CREATE_CONTROL.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    storage_access(cx, vmid, &opts, p.get("storage"))?;
    modify_config_perm(cx, &vm_path, opts.iter().map(|(k, _)| *k))?;
    bridge_access(cx, opts.iter().copied())
}

/// `PUT/POST /nodes/{node}/qemu/{vmid}/config` (Qemu.pm l. 2196-2204, then the
/// per-drive checks of the update, l. 2269-2287 and 2405-2413).
fn qemu_update(
    cx: &Ctx,
    vm_path: &str,
    conf: Option<&std::collections::BTreeMap<String, String>>,
    p: &Params,
) -> Result<(), Denied> {
    let vmid = vm_path.trim_start_matches("/vms/");
    let delete: Vec<&str> =
        p.get("delete").map(|d| d.split([',', ';', ' ']).filter(|s| !s.is_empty()).collect()).unwrap_or_default();
    let opts: Vec<(&str, &str)> = p
        .map
        .iter()
        .filter(|(k, _)| !UPDATE_CONTROL.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    modify_config_perm(cx, vm_path, delete.iter().copied())?;
    modify_config_perm(cx, vm_path, opts.iter().map(|(k, _)| *k))?;
    storage_access(cx, vmid, &opts, None)?;
    bridge_access(cx, opts.iter().copied())?;
    let drive_perms = |value: &str| -> Result<(), Denied> {
        if is_cloudinit(value) {
            cx.check(vm_path, &["VM.Config.Cloudinit", "VM.Config.CDROM"])
        } else if is_cdrom(value) {
            cx.check(vm_path, &["VM.Config.CDROM"])
        } else {
            cx.check(vm_path, &["VM.Config.Disk"])
        }
    };
    for key in &delete {
        let old = conf.and_then(|c| c.get(*key));
        match old {
            Some(v) if key.starts_with("unused") => {
                let _ = v;
                cx.check(vm_path, &["VM.Config.Disk"])?;
            }
            Some(v) if is_drive_key(key) => drive_perms(v)?,
            Some(v) if key.starts_with("net") => bridge_access(cx, [(*key, v.as_str())])?,
            _ => {}
        }
    }
    for (key, value) in &opts {
        if is_drive_key(key) && !key.starts_with("unused") {
            if let Some(old) = conf.and_then(|c| c.get(*key)) {
                drive_perms(old)?;
            }
            drive_perms(value)?;
        }
    }
    Ok(())
}

/// `$check_vm_modify_config_perm` (Qemu.pm l. 995-1041), in sorted key order.
fn modify_config_perm<'a>(cx: &Ctx, vm_path: &str, keys: impl Iterator<Item = &'a str>) -> Result<(), Denied> {
    let mut keys: Vec<&str> = keys.collect();
    keys.sort_unstable();
    for opt in keys {
        let indexed = |prefix: &str| {
            opt.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        if is_drive_key(opt) || opt == "cdrom" || opt == "tags" {
            // Drives are checked by value later; tags with user-tag-access 'free'
            // (the default) need VM.Config.Options, checked in assert_tag_permissions.
            if opt == "tags" {
                cx.check(vm_path, &["VM.Config.Options"])?;
            }
            continue;
        }
        if ["serial", "usb", "hostpci", "virtiofs"].iter().any(|p| indexed(p)) {
            continue;
        }
        if CPU_OPTS.contains(&opt) || indexed("numa") {
            cx.check(vm_path, &["VM.Config.CPU"])?;
        } else if MEMORY_OPTS.contains(&opt) {
            cx.check(vm_path, &["VM.Config.Memory"])?;
        } else if HWTYPE_OPTS.contains(&opt) {
            cx.check(vm_path, &["VM.Config.HWType"])?;
        } else if GENERAL_OPTS.contains(&opt) {
            cx.check(vm_path, &["VM.Config.Options"])?;
            // "special case for startup since it changes host behaviour" (l. 1016-1019).
            if opt == "startup" {
                cx.check("/", &["Sys.Modify"])?;
            }
        } else if opt == "freeze" {
            cx.check(vm_path, &["VM.PowerMgmt"])?;
        } else if DISK_OPTS.contains(&opt) {
            cx.check(vm_path, &["VM.Config.Disk"])?;
        } else if indexed("net") || opt == "running-nets-host-mtu" {
            cx.check(vm_path, &["VM.Config.Network"])?;
        } else if CLOUDINIT_OPTS.contains(&opt) || indexed("ipconfig") {
            cx.any(vm_path, &["VM.Config.Cloudinit", "VM.Config.Network"])?;
        } else if opt == "vmstate" {
            cx.check(vm_path, &["VM.Config.Disk", "VM.PowerMgmt"])?;
        }
        // Anything else ("only root can set '$opt' config") is a 500 the handler's
        // parameter checks give for the keys the simulator does not know.
    }
    Ok(())
}

/// `$check_storage_access` (Qemu.pm l. 163-280) over the drives of `opts`.
fn storage_access(cx: &Ctx, vmid: &str, opts: &[(&str, &str)], default_storage: Option<&str>) -> Result<(), Denied> {
    for (key, value) in opts {
        if !is_drive_key(key) || key.starts_with("unused") {
            continue;
        }
        let Some(volid) = drive_file(value) else { continue };
        let cdrom = is_cdrom(value);
        if volid == "none" || volid == "cloudinit" || volid.ends_with(":cloudinit") || is_cloudinit(value) {
        } else if cdrom && volid == "cdrom" {
            cx.check("/", &["Sys.Console"])?;
        } else if let (false, Some(sid)) = (cdrom, new_disk_storage(volid, default_storage)) {
            cx.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
        } else {
            volume_access(cx, vmid, volid)?;
        }
        if let Some(src) = drive_opt(value, "import-from") {
            match owner_vmid(src) {
                Some(owner) => cx.check(&format!("/vms/{owner}"), &["VM.Clone"])?,
                None => volume_access(cx, vmid, src)?,
            }
        }
    }
    Ok(())
}

/// pve-storage `check_volume_access` (Storage.pm l. 619-656) for a `STORAGE:VOLUME` id.
fn volume_access(cx: &Ctx, vmid: &str, volid: &str) -> Result<(), Denied> {
    let Some(sid) = storage_of(volid) else { return Ok(()) };
    let sp = format!("/storage/{sid}");
    if cx.has(&sp, "Datastore.Allocate") {
        return Ok(());
    }
    let volname = volid.split_once(':').map(|(_, v)| v).unwrap_or_default();
    let vtype_template = ["iso/", "vztmpl/", "import/"].iter().any(|d| volname.starts_with(d));
    if vtype_template {
        return cx.any(&sp, &["Datastore.AllocateSpace", "Datastore.Audit"]);
    }
    match owner_vmid(volid) {
        Some(owner) if owner == vmid => Ok(()),
        Some(owner) => {
            cx.check(&sp, &["Datastore.Audit"])?;
            cx.check(&format!("/vms/{owner}"), &["VM.Config.Disk"])
        }
        None => Ok(()),
    }
}

/// `check_bridge_access` / `check_vnet_access` for every `netN` of `conf`: SDN.Use on
/// the bridge's VLAN when tagged, else on the bridge (zone `localnetwork`, no SDN).
fn bridge_access<'a>(cx: &Ctx, conf: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<(), Denied> {
    let mut nets: Vec<(&str, &str)> = conf
        .into_iter()
        .filter(|(k, _)| k.strip_prefix("net").is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty()))
        .collect();
    nets.sort_unstable();
    for (_, value) in nets {
        let Some(bridge) = drive_opt(value, "bridge") else { continue };
        let base = format!("/sdn/zones/localnetwork/{bridge}");
        let mut tagged = false;
        if let Some(tag) = drive_opt(value, "tag") {
            tagged = true;
            cx.check(&format!("{base}/{tag}"), &["SDN.Use"])?;
        }
        if let Some(trunks) = drive_opt(value, "trunks") {
            tagged = true;
            for t in trunks.split(';').filter(|t| !t.is_empty() && !t.contains('-')) {
                cx.check(&format!("{base}/{t}"), &["SDN.Use"])?;
            }
        }
        if !tagged {
            cx.check(&base, &["SDN.Use"])?;
        }
    }
    Ok(())
}

fn lxc_ct(cx: &Ctx, state: &ClusterState, m: &str, vmid: &str, rest: &[&str], p: &Params) -> Result<(), Denied> {
    let vm_path = format!("/vms/{vmid}");
    match (m, rest) {
        ("DELETE", []) => cx.check(&vm_path, &["VM.Allocate"]),
        ("GET", ["config"] | ["status", "current"]) => cx.check(&vm_path, &["VM.Audit"]),
        ("PUT", ["config"]) => {
            cx.any(
                &vm_path,
                &["VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options"],
            )?;
            let old = vmid.parse::<u32>().ok().and_then(|id| state.vms.get(&id)).map(|vm| &vm.config);
            let mut opts: Vec<(&str, &str)> = p
                .map
                .iter()
                .filter(|(k, _)| !["node", "vmid", "digest", "delete", "revert"].contains(&k.as_str()))
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let deleted: Vec<&str> = p
                .get("delete")
                .map(|d| d.split([',', ';', ' ']).filter(|s| !s.is_empty()).collect())
                .unwrap_or_default();
            opts.extend(deleted.iter().map(|k| (*k, "")));
            ct_modify_perm(cx, &vm_path, old, &opts)
        }
        ("POST", ["status", _]) => cx.check(&vm_path, &["VM.PowerMgmt"]),
        _ => Ok(()),
    }
}

/// `POST /nodes/{node}/lxc` (LXC.pm l. 260-360).
fn lxc_create(cx: &Ctx, p: &Params) -> Result<(), Denied> {
    let vmid = p.get("vmid").unwrap_or_default();
    let vm_path = format!("/vms/{vmid}");
    if !p.get("unprivileged").is_none_or(truthy) {
        cx.check("/", &["Sys.Modify"])?;
    }
    if p.get("ha-managed").is_some_and(truthy) {
        cx.check("/", &["Sys.Console"])?;
    }
    let pool_ok = p.get("pool").is_some_and(|pool| cx.has(&format!("/pool/{pool}"), "VM.Allocate"));
    if !cx.has(&vm_path, "VM.Allocate") && !pool_ok {
        return Err(Denied(None));
    }
    let control = [
        "node",
        "vmid",
        "ostemplate",
        "storage",
        "pool",
        "password",
        "ssh-public-keys",
        "force",
        "restore",
        "unique",
        "start",
        "ha-managed",
    ];
    let opts: Vec<(&str, &str)> =
        p.map.iter().filter(|(k, _)| !control.contains(&k.as_str())).map(|(k, v)| (k.as_str(), v.as_str())).collect();
    ct_modify_perm(cx, &vm_path, None, &opts)?;
    if let Some(t) = p.get("ostemplate") {
        volume_access(cx, vmid, t)?;
    }
    Ok(())
}

/// `check_ct_modify_config_perm` (LXC.pm l. 1655-1750), in sorted key order; a
/// deleted key has the value `""`.
fn ct_modify_perm(
    cx: &Ctx,
    vm_path: &str,
    old: Option<&std::collections::BTreeMap<String, String>>,
    opts: &[(&str, &str)],
) -> Result<(), Denied> {
    let mut opts = opts.to_vec();
    opts.sort_unstable();
    for (opt, value) in opts {
        if matches!(opt, "cores" | "cpuunits" | "cpulimit") {
            cx.check(vm_path, &["VM.Config.CPU"])?;
        } else if opt == "rootfs"
            || opt.strip_prefix("mp").is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty())
        {
            cx.check(vm_path, &["VM.Config.Disk"])?;
            if let Some(volid) = drive_file(value)
                && let Some(sid) = new_disk_storage(volid, None)
            {
                cx.check(&format!("/storage/{sid}"), &["Datastore.AllocateSpace"])?;
            }
        } else if matches!(opt, "memory" | "swap") {
            cx.check(vm_path, &["VM.Config.Memory"])?;
        } else if opt.strip_prefix("net").is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty()) {
            cx.check(vm_path, &["VM.Config.Network"])?;
            if let Some(o) = old.and_then(|c| c.get(opt)) {
                bridge_access(cx, [("net0", o.as_str())])?;
            }
            if !value.is_empty() {
                bridge_access(cx, [("net0", value)])?;
            }
        } else if matches!(opt, "nameserver" | "searchdomain" | "hostname") {
            cx.check(vm_path, &["VM.Config.Network"])?;
        } else if opt == "features" {
            cx.check(vm_path, &["VM.Allocate"])?;
        } else {
            // tags (assert_tag_permissions) and every other option.
            cx.check(vm_path, &["VM.Config.Options"])?;
        }
    }
    Ok(())
}

/// Drop from a list answer what the token may not see: `/cluster/resources` (VMs need
/// VM.Audit, storages Datastore.Audit: Cluster.pm l. 588, 647), `/nodes/{node}/qemu`
/// and `/lxc` (VM.Audit), `/storage` and `/nodes/{node}/storage` (Datastore.Audit or
/// Datastore.AllocateSpace: Storage/Status.pm l. 244-245).
pub fn filter_reply(acl: &AccessConfig, method: &str, segs: &[String], data: &mut Value) {
    if acl.is_root() || method != "GET" {
        return;
    }
    let who = acl.api_token.as_str();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let Some(items) = data.as_array_mut() else { return };
    let vm_ok = |item: &Value| {
        let vmid = item
            .get("vmid")
            .map(|v| v.as_u64().map(|n| n.to_string()).unwrap_or_else(|| v.as_str().unwrap_or("").to_string()));
        vmid.is_none_or(|id| acl.has(who, &format!("/vms/{id}"), "VM.Audit"))
    };
    let storage_ok = |item: &Value, privs: &[&str]| {
        let id = item.get("storage").and_then(Value::as_str).unwrap_or_default();
        let have = acl.permissions(who, &format!("/storage/{id}"));
        privs.iter().any(|p| have.contains(*p))
    };
    match s.as_slice() {
        ["cluster", "resources"] => items.retain(|item| match item.get("type").and_then(Value::as_str) {
            Some("qemu" | "lxc") => vm_ok(item),
            Some("storage") => storage_ok(item, &["Datastore.Audit"]),
            _ => true,
        }),
        ["nodes", _, "qemu" | "lxc"] => items.retain(vm_ok),
        // Tasks.pm node_tasks (l. 184-190): all of the node's tasks with Sys.Audit on
        // it, else only the token's own.
        ["nodes", node, "tasks"] if !acl.has(who, &format!("/nodes/{node}"), "Sys.Audit") => items.retain(|t| {
            let user = t.get("user").and_then(Value::as_str).unwrap_or_default();
            match t.get("tokenid").and_then(Value::as_str) {
                Some(tokenid) => task_is_users(&format!("{user}!{tokenid}"), who),
                None => task_is_users(user, who),
            }
        }),
        ["storage"] | ["nodes", _, "storage"] => {
            items.retain(|item| storage_ok(item, &["Datastore.Audit", "Datastore.AllocateSpace"]))
        }
        _ => {}
    }
}

/// Tasks.pm `$check_task_user` (l. 27-36): a token's task is the token's and its
/// user's; a user's task only the user's. `owner` is the UPID's `user@realm[!token]`.
fn task_is_users(owner: &str, who: &str) -> bool {
    match owner.split_once('!') {
        Some((user, _)) => who == owner || who == user,
        None => who == owner,
    }
}

fn truthy(v: &str) -> bool {
    !matches!(v, "0" | "" | "false")
}

/// The volume of a drive value (`local-lvm:vm-100-disk-0,size=3G` → `local-lvm:vm-100-disk-0`).
fn drive_file(value: &str) -> Option<&str> {
    let first = value.split(',').next()?;
    if first.contains('=') {
        return first.strip_prefix("file=").or_else(|| drive_opt(value, "file")).or_else(|| drive_opt(value, "volume"));
    }
    Some(first)
}

/// `key=value` of a property string.
fn drive_opt<'a>(value: &'a str, key: &str) -> Option<&'a str> {
    value.split(',').find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
}

fn is_cdrom(value: &str) -> bool {
    drive_opt(value, "media") == Some("cdrom")
}

fn is_cloudinit(value: &str) -> bool {
    drive_file(value).is_some_and(|f| f == "cloudinit" || f.ends_with("-cloudinit") || f.ends_with(":cloudinit"))
}

/// `$NEW_DISK_RE` (Drive.pm l. 159): `[STORAGE:]SIZE` allocates a new disk.
fn new_disk_storage<'a>(volid: &'a str, default: Option<&'a str>) -> Option<&'a str> {
    let (sid, size) = match volid.split_once(':') {
        Some((s, size)) => (Some(s), size),
        None => (None, volid),
    };
    let mut parts = size.splitn(2, '.');
    let int_ok = parts.next().is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()));
    let frac_ok = parts.next().is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()));
    (int_ok && frac_ok).then_some(sid.or(default)).flatten()
}

fn storage_of(volid: &str) -> Option<String> {
    volid.split_once(':').map(|(s, _)| s.to_string()).filter(|s| !s.starts_with('/'))
}

/// The owner VMID of `vm-N-…` / `base-N-…` volumes.
fn owner_vmid(volid: &str) -> Option<&str> {
    let name = volid.split_once(':').map(|(_, v)| v).unwrap_or(volid);
    let name = name.rsplit('/').next().unwrap_or(name);
    let rest = name.strip_prefix("vm-").or_else(|| name.strip_prefix("base-"))?;
    let id = rest.split('-').next()?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then_some(id)
}
