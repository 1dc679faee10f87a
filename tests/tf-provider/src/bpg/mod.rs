//! `proxmox_virtual_environment_vm`: the bpg flavour's resource logic.
//!
//! Contract: create finds the template by `clone[0].vm_id` in `/cluster/resources`,
//! clones it (`clone[0].full`, default full) onto `node_name` with `vm_id` (or the
//! next free id), waits, writes cores, memory, netN, `cicustom` + the cloud-init drive
//! from `initialization`, tags (sorted, `;`) and new disks with one `PUT …/config`
//! (bpg's synchronous `UpdateVM`), grows existing disks with `PUT …/resize`, and
//! starts the VM unless `started = false`. Read finds the VM wherever it is now
//! (`node_name` follows it, as bpg's `GetVMNodeName` does; a VM that is gone leaves
//! the state) and refreshes it; update changes memory, cpu, network devices, tags,
//! name, disks and power in place; delete stops it and destroys it with
//! `purge=1&destroy-unreferenced-disks=1`. Plans suppress order-only diffs of `tags`
//! and `disk` and replace on the real provider's force-new attributes: `vm_id` (when
//! it differs from the current id), `node_name`, every `clone[0].*`, and
//! `initialization[0].*_file_id`.

pub mod schema;

use async_trait::async_trait;
use tf_provider::value::Value;
use tf_provider::{AttributePath, Diagnostics};

use crate::api::Pve;
use crate::common::{error, known, known_str, refresh, refresh_same};
use crate::creds::Flavour;
use crate::resource::VmFlavour;
use crate::vm::{self, Changes, Config, ConfigCall, Guest};
use schema::{Disk, EnvVm, Initialization, NetworkDevice};

/// The bpg flavour.
#[derive(Debug, Default, Clone, Copy)]
pub struct Bpg;

fn vmid_of(s: &EnvVm) -> Option<u64> {
    if let Some(v) = known(&s.vm_id) {
        return u64::try_from(*v).ok();
    }
    known_str(&s.id).and_then(|id| id.parse().ok())
}

fn same_tags(a: &[String], b: &[String]) -> bool {
    vm::tag_set(a) == vm::tag_set(b)
}

fn sorted_disks(d: &[Disk]) -> Vec<Disk> {
    let mut v = d.to_vec();
    v.sort_by(|a, b| known_str(&a.interface).cmp(&known_str(&b.interface)));
    v
}

/// Read the VM back into `prior` (`None`: it is gone).
async fn refresh_vm(pve: &Pve, prior: EnvVm) -> Result<Option<EnvVm>, String> {
    let vmid = vmid_of(&prior).ok_or("the state has neither vm_id nor a parsable id")?;
    let Some(guest) = vm::locate(pve, vmid).await.map_err(|e| e.to_string())? else { return Ok(None) };
    let cfg = match vm::config(pve, &guest.node, vmid).await {
        Ok(c) => c,
        Err(e) if e.is_missing_vm() => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut s = prior;
    s.id = Value::Value(vmid.to_string());
    s.vm_id = Value::Value(vmid as i64);
    s.node_name = Value::Value(guest.node.clone());
    s.started = refresh(&s.started, Some(guest.running));
    s.name = refresh(&s.name, cfg.get("name").cloned());
    for c in &mut s.cpu {
        c.cores = refresh(&c.cores, Some(vm::int(&cfg, "cores").unwrap_or(1)));
    }
    for m in &mut s.memory {
        m.dedicated = refresh(&m.dedicated, Some(vm::int(&cfg, "memory").unwrap_or(512)));
    }
    s.disk = s.disk.into_iter().filter_map(|d| refresh_disk(d, &cfg)).collect();
    s.network_device = s.network_device.into_iter().enumerate().filter_map(|(i, n)| refresh_nic(n, i, &cfg)).collect();
    for init in &mut s.initialization {
        refresh_init(init, &cfg);
    }
    s.tags = refresh_same(&s.tags, cfg.get("tags").map(|t| vm::split_tags(t)), |a, b| same_tags(a, b));
    Ok(Some(s))
}

fn refresh_disk(mut d: Disk, cfg: &Config) -> Option<Disk> {
    let drive = vm::parse_drive(cfg.get(known_str(&d.interface)?)?);
    d.datastore_id = refresh(&d.datastore_id, Some(drive.storage));
    d.size = refresh(&d.size, drive.bytes.map(|b| vm::gib_ceil(b) as i64));
    Some(d)
}

fn refresh_nic(mut n: NetworkDevice, index: usize, cfg: &Config) -> Option<NetworkDevice> {
    let nic = vm::parse_nic(cfg.get(&format!("net{index}"))?);
    n.bridge = refresh(&n.bridge, nic.bridge);
    n.model = refresh(&n.model, Some(nic.model));
    n.vlan_id = match (&n.vlan_id, nic.tag) {
        (Value::Null, _) => Value::Null,
        (_, Some(t)) => Value::Value(t),
        (Value::Value(0), None) => Value::Value(0),
        _ => Value::Null,
    };
    Some(n)
}

fn refresh_init(init: &mut Initialization, cfg: &Config) {
    let drive = vm::cloudinit_slot(cfg);
    init.interface = refresh(&init.interface, drive.as_ref().map(|(slot, _)| slot.clone()));
    init.datastore_id = refresh(&init.datastore_id, drive.map(|(_, d)| d.storage));
    let files = cfg.get("cicustom").map(|c| vm::parse_cicustom(c)).unwrap_or_default();
    init.user_data_file_id = refresh(&init.user_data_file_id, files.get("user").cloned());
    init.network_data_file_id = refresh(&init.network_data_file_id, files.get("network").cloned());
    init.meta_data_file_id = refresh(&init.meta_data_file_id, files.get("meta").cloned());
}

/// `net<index>` for a `network_device {}` entry, keeping the MAC the VM has there.
fn nic_value(index: usize, n: &NetworkDevice, cfg: &Config) -> (String, String) {
    let key = format!("net{index}");
    let mac = cfg.get(&key).map(|v| vm::parse_nic(v).mac);
    let model = known_str(&n.model).unwrap_or("virtio");
    let bridge = known_str(&n.bridge).unwrap_or("vmbr0");
    let value = vm::render_nic(model, mac.as_deref(), bridge, known(&n.vlan_id).copied());
    (key, value)
}

/// Config writes for `initialization`: `cicustom` and the cloud-init drive.
fn init_changes(init: &Initialization, cfg: &Config, ch: &mut Changes) {
    let files: Vec<String> =
        [("user", &init.user_data_file_id), ("network", &init.network_data_file_id), ("meta", &init.meta_data_file_id)]
            .iter()
            .filter_map(|(k, v)| known_str(v).map(|v| format!("{k}={v}")))
            .collect();
    if !files.is_empty() {
        ch.set("cicustom", files.join(","));
    }
    let existing = vm::cloudinit_slot(cfg);
    let slot = known_str(&init.interface)
        .map(str::to_string)
        .or_else(|| existing.as_ref().map(|(s, _)| s.clone()))
        .unwrap_or_else(|| "ide2".into());
    let storage = known_str(&init.datastore_id).unwrap_or("local-lvm");
    match existing {
        Some((s, d)) if s == slot && d.storage == storage => {}
        other => {
            if let Some((s, _)) = other.filter(|(s, _)| *s != slot) {
                ch.deletes.push(s);
            }
            ch.set(slot, format!("{storage}:cloudinit"));
        }
    }
}

/// Add the config writes for new disks and the resizes of existing ones.
fn disk_changes(disks: &[Disk], cfg: &Config, ch: &mut Changes) -> Result<(), String> {
    for d in disks {
        let Some(iface) = known_str(&d.interface) else { continue };
        let gib = known(&d.size).map_or(8, |s| u64::try_from(*s).unwrap_or(0));
        match cfg.get(iface).map(|v| vm::parse_drive(v)) {
            Some(cur) if cur.kind != "disk" => {
                return Err(format!("disk {iface}: the slot holds a {} drive", cur.kind));
            }
            Some(cur) => {
                if cur.bytes.is_some_and(|b| vm::gib(gib) > b) {
                    ch.resizes.push((iface.to_string(), vm::gib(gib)));
                }
            }
            None => {
                let store = known_str(&d.datastore_id).unwrap_or("local-lvm");
                ch.set(iface, format!("{store}:{gib}"));
            }
        }
    }
    Ok(())
}

fn tags_value(t: &[String]) -> String {
    vm::tag_set(t).join(";")
}

/// Write `ch` with one `PUT …/config`, then the resizes.
async fn apply_config(pve: &Pve, g: &Guest, ch: &Changes, warnings: &mut Vec<String>) -> Result<(), String> {
    warnings.extend(vm::apply(pve, &g.node, g.vmid, ch, ConfigCall::Sync).await.map_err(|e| e.to_string())?);
    Ok(())
}

/// Clone and configure. `Err((Some(state), e))`: the VM exists but is not complete.
async fn create_vm(pve: &Pve, planned: &EnvVm, warnings: &mut Vec<String>) -> Result<EnvVm, (Option<EnvVm>, String)> {
    let fail = |e: String| (None, e);
    let node = known_str(&planned.node_name).ok_or_else(|| fail("node_name is unknown".into()))?;
    let clone = planned.clone.first().ok_or_else(|| fail("clone is required".into()))?;
    let template = known(&clone.vm_id).copied().ok_or_else(|| fail("clone.vm_id is unknown".into()))?;
    let all = vm::guests(pve).await.map_err(|e| fail(e.to_string()))?;
    let source = all
        .iter()
        .find(|g| i64::try_from(g.vmid).ok() == Some(template))
        .ok_or_else(|| fail(format!("GET /cluster/resources: no VM or template has VMID {template}")))?;
    let vmid = match known(&planned.vm_id) {
        Some(v) => {
            let v = u64::try_from(*v).map_err(|_| fail(format!("vm_id {v} is out of range")))?;
            if all.iter().any(|g| g.vmid == v) {
                return Err(fail(format!("vm_id {v} is already in use (GET /cluster/resources)")));
            }
            v
        }
        None => vm::next_id(pve).await.map_err(|e| fail(e.to_string()))?,
    };
    let spec = vm::CloneSpec {
        source,
        newid: vmid,
        name: known_str(&planned.name),
        full: known(&clone.full).copied().unwrap_or(true),
        target: Some(node),
    };
    warnings.extend(vm::clone(pve, &spec).await.map_err(|e| fail(e.to_string()))?);

    let mut state = planned.clone();
    state.vm_id = Value::Value(vmid as i64);
    state.id = Value::Value(vmid.to_string());
    let partial = |e: String| (Some(state.clone()), e);
    let guest = Guest { vmid, name: String::new(), node: node.to_string(), running: false };
    let cfg = vm::config(pve, node, vmid).await.map_err(|e| partial(e.to_string()))?;
    let mut ch = Changes::default();
    if let Some(c) = planned.cpu.first().and_then(|c| known(&c.cores)) {
        ch.set("cores", c);
    }
    if let Some(m) = planned.memory.first().and_then(|m| known(&m.dedicated)) {
        ch.set("memory", m);
    }
    ch.sets.extend(planned.network_device.iter().enumerate().map(|(i, n)| nic_value(i, n, &cfg)));
    if let Some(init) = planned.initialization.first() {
        init_changes(init, &cfg, &mut ch);
    }
    if let Some(t) = known(&planned.tags) {
        ch.set("tags", tags_value(t));
    }
    disk_changes(&planned.disk, &cfg, &mut ch).map_err(partial)?;
    apply_config(pve, &guest, &ch, warnings).await.map_err(partial)?;
    if known(&planned.started).copied().unwrap_or(true) {
        warnings.extend(vm::power(pve, node, vmid, true).await.map_err(|e| partial(e.to_string()))?);
    }
    Ok(state)
}

async fn update_vm(pve: &Pve, prior: &EnvVm, planned: &EnvVm, warnings: &mut Vec<String>) -> Result<EnvVm, String> {
    let vmid = vmid_of(prior).ok_or("the state has no vm_id")?;
    let guest = vm::locate(pve, vmid)
        .await
        .map_err(|e| e.to_string())?
        .ok_or(format!("GET /cluster/resources: VM {vmid} no longer exists"))?;
    let cfg = vm::config(pve, &guest.node, vmid).await.map_err(|e| e.to_string())?;
    let mut ch = Changes::default();
    if planned.name != prior.name
        && let Some(n) = known_str(&planned.name)
    {
        ch.set("name", n);
    }
    let cores = |s: &EnvVm| s.cpu.first().map(|c| c.cores).unwrap_or_default();
    if cores(planned) != cores(prior)
        && let Some(c) = known(&cores(planned))
    {
        ch.set("cores", c);
    }
    let mem = |s: &EnvVm| s.memory.first().map(|m| m.dedicated).unwrap_or_default();
    if mem(planned) != mem(prior)
        && let Some(m) = known(&mem(planned))
    {
        ch.set("memory", m);
    }
    for (i, n) in planned.network_device.iter().enumerate() {
        if prior.network_device.get(i) != Some(n) {
            ch.sets.push(nic_value(i, n, &cfg));
        }
    }
    for i in planned.network_device.len()..prior.network_device.len() {
        ch.deletes.push(format!("net{i}"));
    }
    if planned.tags != prior.tags {
        match known(&planned.tags) {
            Some(t) => ch.set("tags", tags_value(t)),
            None => ch.deletes.push("tags".into()),
        }
    }
    if planned.initialization != prior.initialization
        && let Some(init) = planned.initialization.first()
    {
        init_changes(init, &cfg, &mut ch);
    }
    if planned.disk != prior.disk {
        disk_changes(&planned.disk, &cfg, &mut ch)?;
    }
    apply_config(pve, &guest, &ch, warnings).await?;
    if planned.started != prior.started
        && let Some(start) = known(&planned.started).copied()
        && start != guest.running
    {
        warnings.extend(vm::power(pve, &guest.node, vmid, start).await.map_err(|e| e.to_string())?);
    }
    let mut state = planned.clone();
    state.vm_id = Value::Value(vmid as i64);
    state.id = Value::Value(vmid.to_string());
    Ok(state)
}

/// Reads one `*_file_id` of an `initialization` block.
type FileId = fn(&Initialization) -> &crate::common::Str;

/// The paths whose change forces a replacement (bpg's `ForceNew`s and `ForceNewIf`s).
fn replace_paths(prior: &EnvVm, planned: &EnvVm) -> Vec<AttributePath> {
    let mut out = Vec::new();
    let current_id = known_str(&prior.id).and_then(|i| i.parse::<i64>().ok());
    if planned.vm_id != prior.vm_id && known(&planned.vm_id).copied() != current_id {
        out.push(AttributePath::new("vm_id"));
    }
    if planned.node_name != prior.node_name {
        out.push(AttributePath::new("node_name"));
    }
    let (pc, nc) = (prior.clone.first(), planned.clone.first());
    if pc.map(|c| &c.vm_id) != nc.map(|c| &c.vm_id) {
        out.push(AttributePath::new("clone").index(0).attribute("vm_id"));
    }
    if pc.map(|c| &c.full) != nc.map(|c| &c.full) {
        out.push(AttributePath::new("clone").index(0).attribute("full"));
    }
    let (pi, ni) = (prior.initialization.first(), planned.initialization.first());
    let files: [(&str, FileId); 3] = [
        ("user_data_file_id", |i| &i.user_data_file_id),
        ("network_data_file_id", |i| &i.network_data_file_id),
        ("meta_data_file_id", |i| &i.meta_data_file_id),
    ];
    for (name, get) in files {
        if pi.map(get) != ni.map(get) {
            out.push(AttributePath::new("initialization").index(0).attribute(name));
        }
    }
    out
}

#[async_trait]
impl VmFlavour for Bpg {
    type State = EnvVm;
    const TYPE_NAME: &'static str = "proxmox_virtual_environment_vm";
    const FLAVOUR: Flavour = Flavour::Bpg;

    fn schema() -> tf_provider::schema::Schema {
        schema::schema()
    }

    fn plan_create(diags: &mut Diagnostics, proposed: EnvVm) -> EnvVm {
        if proposed.clone.is_empty() {
            error(
                diags,
                "clone is required",
                "this provider creates VMs only by cloning a template: add a clone block",
                Some("clone"),
            );
        }
        let mut s = proposed;
        s.id = Value::Unknown;
        if s.vm_id.is_null() {
            s.vm_id = Value::Unknown;
        }
        s
    }

    fn plan_update(prior: &EnvVm, proposed: EnvVm) -> (EnvVm, Vec<AttributePath>) {
        let mut s = proposed;
        if let (Some(p), Some(n)) = (known(&prior.tags), known(&s.tags))
            && same_tags(p, n)
        {
            s.tags = prior.tags.clone();
        }
        if s.disk != prior.disk && sorted_disks(&s.disk) == sorted_disks(&prior.disk) {
            s.disk = prior.disk.clone();
        }
        let replace = replace_paths(prior, &s);
        (s, replace)
    }

    async fn refresh(pve: &Pve, prior: EnvVm) -> Result<Option<EnvVm>, String> {
        refresh_vm(pve, prior).await
    }

    async fn create(pve: &Pve, planned: &EnvVm, warnings: &mut Vec<String>) -> Result<EnvVm, (Option<EnvVm>, String)> {
        create_vm(pve, planned, warnings).await
    }

    async fn update(pve: &Pve, prior: &EnvVm, planned: &EnvVm, warnings: &mut Vec<String>) -> Result<EnvVm, String> {
        update_vm(pve, prior, planned, warnings).await
    }

    async fn delete(pve: &Pve, prior: &EnvVm) -> Result<Vec<String>, String> {
        let vmid = vmid_of(prior).ok_or("the state has no vm_id")?;
        match vm::locate(pve, vmid).await.map_err(|e| e.to_string())? {
            Some(g) => vm::destroy(pve, &g, true).await.map_err(|e| e.to_string()),
            None => Ok(Vec::new()),
        }
    }
}
