//! `proxmox_vm_qemu`: the Telmate flavour's resource logic.
//!
//! Contract: create finds the template by name (`clone`) in `/cluster/resources`,
//! clones it (`full_clone`, default full) onto `target_node` with `vmid` (or the next
//! free id), waits, writes cores/sockets/memory/netN/cicustom/tags and new disks in one
//! `POST …/config` task, grows an existing disk with `PUT …/resize`, and starts the VM
//! unless `power_state = "stopped"` (the real provider starts it when neither
//! `power_state` nor `vm_state` is set). Read finds the VM wherever it is now and
//! refreshes it (`current_node`, `target_node`, `id` follow the node; a VM that is gone
//! leaves the state); update changes memory, cpu, network, tags, name, disks and power
//! in place (and migrates on a `target_node` change); delete stops and purges it.
//! Plans suppress the diffs the real provider suppresses (tags as sets, `cicustom` by
//! its parsed snippets, disk sizes by their parsed value) and replace on
//! [`schema::FORCE_NEW`].

pub mod schema;

use async_trait::async_trait;
use tf_provider::value::Value;
use tf_provider::{AttributePath, Diagnostics};

use crate::api::Pve;
use crate::common::{error, known, known_str, refresh, refresh_same};
use crate::creds::Flavour;
use crate::resource::VmFlavour;
use crate::vm::{self, Changes, Config, ConfigCall, Guest};
use schema::{Disk, Network, VmQemu};

/// The Telmate flavour.
#[derive(Debug, Default, Clone, Copy)]
pub struct Telmate;

fn vmid_of(s: &VmQemu) -> Option<u64> {
    if let Some(v) = known(&s.vmid) {
        return u64::try_from(*v).ok();
    }
    known_str(&s.id).and_then(|id| id.rsplit('/').next()).and_then(|v| v.parse().ok())
}

fn same_tags(a: &str, b: &str) -> bool {
    vm::tag_set(&vm::split_tags(a)) == vm::tag_set(&vm::split_tags(b))
}

fn same_cicustom(a: &str, b: &str) -> bool {
    vm::parse_cicustom(a) == vm::parse_cicustom(b)
}

fn same_size(a: &str, b: &str) -> bool {
    vm::parse_size(a).is_some() && vm::parse_size(a) == vm::parse_size(b)
}

/// Read the VM back into `prior` (`None`: it is gone).
async fn refresh_vm(pve: &Pve, prior: VmQemu) -> Result<Option<VmQemu>, String> {
    let vmid = vmid_of(&prior).ok_or("the state has neither vmid nor a parsable id")?;
    let Some(guest) = vm::locate(pve, vmid).await.map_err(|e| e.to_string())? else { return Ok(None) };
    let cfg = match vm::config(pve, &guest.node, vmid).await {
        Ok(c) => c,
        Err(e) if e.is_missing_vm() => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut s = prior;
    s.id = Value::Value(format!("{}/qemu/{vmid}", guest.node));
    s.vmid = Value::Value(vmid as i64);
    s.current_node = Value::Value(guest.node.clone());
    if !s.target_node.is_null() {
        s.target_node = Value::Value(guest.node.clone());
    }
    s.name = refresh(&s.name, cfg.get("name").cloned());
    s.memory = refresh(&s.memory, Some(vm::int(&cfg, "memory").unwrap_or(512)));
    for c in &mut s.cpu {
        c.cores = refresh(&c.cores, Some(vm::int(&cfg, "cores").unwrap_or(1)));
        c.sockets = refresh(&c.sockets, Some(vm::int(&cfg, "sockets").unwrap_or(1)));
    }
    let power = if guest.running { "running" } else { "stopped" };
    s.power_state = refresh(&s.power_state, Some(power.to_string()));
    s.disk = s.disk.into_iter().filter_map(|d| refresh_disk(d, &cfg)).collect();
    s.network = s.network.into_iter().filter_map(|n| refresh_nic(n, &cfg)).collect();
    s.cicustom = refresh_same(&s.cicustom, cfg.get("cicustom").cloned(), |a, b| same_cicustom(a, b));
    s.tags = refresh_same(&s.tags, cfg.get("tags").cloned(), |a, b| same_tags(a, b));
    Ok(Some(s))
}

fn refresh_disk(mut d: Disk, cfg: &Config) -> Option<Disk> {
    let drive = vm::parse_drive(cfg.get(known_str(&d.slot)?)?);
    d.kind = refresh(&d.kind, Some(drive.kind.to_string()));
    d.storage = refresh(&d.storage, Some(drive.storage.clone()));
    if drive.kind == "disk" {
        d.size = refresh_same(&d.size, drive.bytes.map(vm::format_size), |a, b| same_size(a, b));
    }
    Some(d)
}

fn refresh_nic(mut n: Network, cfg: &Config) -> Option<Network> {
    let nic = vm::parse_nic(cfg.get(&format!("net{}", known(&n.id)?))?);
    n.model = refresh(&n.model, Some(nic.model));
    n.bridge = refresh(&n.bridge, nic.bridge);
    n.tag = match (&n.tag, nic.tag) {
        (Value::Null, _) => Value::Null,
        (_, Some(t)) => Value::Value(t),
        (Value::Value(0), None) => Value::Value(0),
        _ => Value::Null,
    };
    Some(n)
}

/// `netN` for a `network {}` entry, keeping the MAC the VM already has there.
fn nic_value(n: &Network, cfg: &Config) -> Option<(String, String)> {
    let id = known(&n.id)?;
    let key = format!("net{id}");
    let current = cfg.get(&key).map(|v| vm::parse_nic(v));
    let model = known_str(&n.model).unwrap_or("virtio");
    let bridge = known_str(&n.bridge)
        .map(str::to_string)
        .or_else(|| current.as_ref().and_then(|c| c.bridge.clone()))
        .unwrap_or_else(|| "vmbr0".into());
    let mac = current.as_ref().map(|c| c.mac.clone());
    Some((key, vm::render_nic(model, mac.as_deref(), &bridge, known(&n.tag).copied())))
}

/// Add the config writes and resizes that make the VM's drives match `disks`.
fn disk_changes(disks: &[Disk], cfg: &Config, ch: &mut Changes) -> Result<(), String> {
    for d in disks {
        let Some(slot) = known_str(&d.slot) else { continue };
        let kind = known_str(&d.kind).unwrap_or("disk");
        match kind {
            "cloudinit" => {
                let storage = known_str(&d.storage).ok_or(format!("disk {slot}: a cloudinit disk needs storage"))?;
                match vm::cloudinit_slot(cfg) {
                    Some((s, drive)) if s == slot && drive.storage == storage => {}
                    other => {
                        if let Some((s, _)) = other.filter(|(s, _)| s != slot) {
                            ch.deletes.push(s);
                        }
                        ch.set(slot, format!("{storage}:cloudinit"));
                    }
                }
            }
            "disk" => {
                let want = known_str(&d.size).and_then(vm::parse_size);
                match cfg.get(slot).map(|v| vm::parse_drive(v)) {
                    Some(cur) if cur.kind == "disk" => {
                        if let (Some(w), Some(c)) = (want, cur.bytes)
                            && w > c
                        {
                            ch.resizes.push((slot.to_string(), w));
                        }
                    }
                    Some(cur) => return Err(format!("disk {slot}: the slot holds a {} drive", cur.kind)),
                    None => {
                        let storage = known_str(&d.storage).ok_or(format!("disk {slot}: a new disk needs storage"))?;
                        let size = want.ok_or(format!("disk {slot}: a new disk needs size"))?;
                        ch.set(slot, format!("{storage}:{}", vm::gib_ceil(size)));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Write `ch` as one `POST …/config` task, then the resizes.
async fn apply_config(pve: &Pve, g: &Guest, ch: &Changes, warnings: &mut Vec<String>) -> Result<(), String> {
    warnings.extend(vm::apply(pve, &g.node, g.vmid, ch, ConfigCall::Task).await.map_err(|e| e.to_string())?);
    Ok(())
}

async fn set_power(pve: &Pve, g: &Guest, want: Option<&str>, warnings: &mut Vec<String>) -> Result<(), String> {
    let start = match want {
        Some("running") | None => true,
        Some("stopped") => false,
        Some(_) => return Ok(()),
    };
    if start != g.running {
        warnings.extend(vm::power(pve, &g.node, g.vmid, start).await.map_err(|e| e.to_string())?);
    }
    Ok(())
}

/// Clone and configure. `Err((Some(state), e))`: the VM exists but is not complete.
async fn create_vm(
    pve: &Pve,
    planned: &VmQemu,
    warnings: &mut Vec<String>,
) -> Result<VmQemu, (Option<VmQemu>, String)> {
    let fail = |e: String| (None, e);
    let template = known_str(&planned.clone).ok_or_else(|| fail("clone is unknown".into()))?;
    let node = known_str(&planned.target_node).ok_or_else(|| fail("target_node is unknown".into()))?;
    let all = vm::guests(pve).await.map_err(|e| fail(e.to_string()))?;
    let sources: Vec<&Guest> = all.iter().filter(|g| g.name == template).collect();
    let source = match sources.as_slice() {
        [one] => *one,
        [] => return Err(fail(format!("GET /cluster/resources: no VM or template is named '{template}'"))),
        _ => return Err(fail(format!("GET /cluster/resources: more than one guest is named '{template}'"))),
    };
    let vmid = match known(&planned.vmid) {
        Some(v) => {
            let v = u64::try_from(*v).map_err(|_| fail(format!("vmid {v} is out of range")))?;
            if all.iter().any(|g| g.vmid == v) {
                return Err(fail(format!("vmid {v} is already in use (GET /cluster/resources)")));
            }
            v
        }
        None => vm::next_id(pve).await.map_err(|e| fail(e.to_string()))?,
    };
    let spec = vm::CloneSpec {
        source,
        newid: vmid,
        name: known_str(&planned.name),
        full: known(&planned.full_clone).copied().unwrap_or(true),
        target: Some(node),
    };
    warnings.extend(vm::clone(pve, &spec).await.map_err(|e| fail(e.to_string()))?);

    let mut state = planned.clone();
    state.vmid = Value::Value(vmid as i64);
    state.id = Value::Value(format!("{node}/qemu/{vmid}"));
    state.current_node = Value::Value(node.to_string());
    let partial = |e: String| (Some(state.clone()), e);
    let guest = Guest { vmid, name: String::new(), node: node.to_string(), running: false };
    let cfg = vm::config(pve, node, vmid).await.map_err(|e| partial(e.to_string()))?;
    let mut ch = Changes::default();
    if let Some(m) = known(&planned.memory) {
        ch.set("memory", m);
    }
    if let Some(c) = planned.cpu.first() {
        if let Some(v) = known(&c.cores) {
            ch.set("cores", v);
        }
        if let Some(v) = known(&c.sockets) {
            ch.set("sockets", v);
        }
    }
    ch.sets.extend(planned.network.iter().filter_map(|n| nic_value(n, &cfg)));
    if let Some(c) = known_str(&planned.cicustom) {
        ch.set("cicustom", c);
    }
    if let Some(t) = known_str(&planned.tags) {
        ch.set("tags", vm::split_tags(t).join(";"));
    }
    disk_changes(&planned.disk, &cfg, &mut ch).map_err(partial)?;
    apply_config(pve, &guest, &ch, warnings).await.map_err(partial)?;
    set_power(pve, &guest, known_str(&planned.power_state), warnings).await.map_err(partial)?;
    Ok(state)
}

async fn update_vm(pve: &Pve, prior: &VmQemu, planned: &VmQemu, warnings: &mut Vec<String>) -> Result<VmQemu, String> {
    let vmid = vmid_of(prior).ok_or("the state has no vmid")?;
    let mut guest = vm::locate(pve, vmid)
        .await
        .map_err(|e| e.to_string())?
        .ok_or(format!("GET /cluster/resources: VM {vmid} no longer exists"))?;
    if let Some(target) = known_str(&planned.target_node)
        && planned.target_node != prior.target_node
        && target != guest.node
    {
        warnings.extend(vm::migrate(pve, &guest, target).await.map_err(|e| e.to_string())?);
        guest.node = target.to_string();
    }
    let cfg = vm::config(pve, &guest.node, vmid).await.map_err(|e| e.to_string())?;
    let mut ch = Changes::default();
    if planned.name != prior.name
        && let Some(n) = known_str(&planned.name)
    {
        ch.set("name", n);
    }
    if planned.memory != prior.memory
        && let Some(m) = known(&planned.memory)
    {
        ch.set("memory", m);
    }
    let (pc, nc) = (prior.cpu.first().cloned().unwrap_or_default(), planned.cpu.first().cloned().unwrap_or_default());
    for (key, p, n) in [("cores", &pc.cores, &nc.cores), ("sockets", &pc.sockets, &nc.sockets)] {
        if p != n
            && let Some(v) = known(n)
        {
            ch.set(key, v);
        }
    }
    for n in &planned.network {
        if !prior.network.contains(n)
            && let Some(kv) = nic_value(n, &cfg)
        {
            ch.sets.push(kv);
        }
    }
    for p in &prior.network {
        if let Some(id) = known(&p.id)
            && !planned.network.iter().any(|n| known(&n.id) == Some(id))
        {
            ch.deletes.push(format!("net{id}"));
        }
    }
    if planned.tags != prior.tags {
        match known_str(&planned.tags) {
            Some(t) => ch.set("tags", vm::split_tags(t).join(";")),
            None => ch.deletes.push("tags".into()),
        }
    }
    if planned.disk != prior.disk {
        disk_changes(&planned.disk, &cfg, &mut ch)?;
    }
    apply_config(pve, &guest, &ch, warnings).await?;
    if planned.power_state != prior.power_state && !planned.power_state.is_null() {
        set_power(pve, &guest, known_str(&planned.power_state), warnings).await?;
    }
    let mut state = planned.clone();
    state.vmid = Value::Value(vmid as i64);
    state.id = Value::Value(format!("{}/qemu/{vmid}", guest.node));
    state.current_node = Value::Value(guest.node.clone());
    Ok(state)
}

#[async_trait]
impl VmFlavour for Telmate {
    type State = VmQemu;
    const TYPE_NAME: &'static str = "proxmox_vm_qemu";
    const FLAVOUR: Flavour = Flavour::Telmate;

    fn schema() -> tf_provider::schema::Schema {
        schema::schema()
    }

    fn plan_create(diags: &mut Diagnostics, proposed: VmQemu) -> VmQemu {
        if proposed.clone.is_null() {
            error(
                diags,
                "clone is required",
                "this provider creates VMs only by cloning a template: set clone",
                Some("clone"),
            );
        }
        if proposed.target_node.is_null() {
            error(diags, "target_node is required", "set the node to create the VM on", Some("target_node"));
        }
        let mut s = proposed;
        s.id = Value::Unknown;
        s.current_node = Value::Unknown;
        if s.vmid.is_null() {
            s.vmid = Value::Unknown;
        }
        s
    }

    fn plan_update(prior: &VmQemu, proposed: VmQemu) -> (VmQemu, Vec<AttributePath>) {
        let mut s = proposed;
        if let (Some(p), Some(n)) = (known_str(&prior.tags), known_str(&s.tags))
            && same_tags(p, n)
        {
            s.tags = prior.tags.clone();
        }
        if let (Some(p), Some(n)) = (known_str(&prior.cicustom), known_str(&s.cicustom))
            && same_cicustom(p, n)
        {
            s.cicustom = prior.cicustom.clone();
        }
        for (d, p) in s.disk.iter_mut().zip(prior.disk.iter()) {
            if d.slot == p.slot
                && let (Some(a), Some(b)) = (known_str(&d.size), known_str(&p.size))
                && same_size(a, b)
            {
                d.size = p.size.clone();
            }
        }
        if s.target_node != prior.target_node {
            s.id = Value::Unknown;
            s.current_node = Value::Unknown;
        }
        let changed = |name: &str| match name {
            "vmid" => s.vmid != prior.vmid,
            "clone" => s.clone != prior.clone,
            "full_clone" => s.full_clone != prior.full_clone,
            "cicustom" => s.cicustom != prior.cicustom,
            _ => false,
        };
        let replace = schema::FORCE_NEW.iter().filter(|a| changed(a)).map(|a| AttributePath::new(*a)).collect();
        (s, replace)
    }

    async fn refresh(pve: &Pve, prior: VmQemu) -> Result<Option<VmQemu>, String> {
        refresh_vm(pve, prior).await
    }

    async fn create(
        pve: &Pve,
        planned: &VmQemu,
        warnings: &mut Vec<String>,
    ) -> Result<VmQemu, (Option<VmQemu>, String)> {
        create_vm(pve, planned, warnings).await
    }

    async fn update(pve: &Pve, prior: &VmQemu, planned: &VmQemu, warnings: &mut Vec<String>) -> Result<VmQemu, String> {
        update_vm(pve, prior, planned, warnings).await
    }

    async fn delete(pve: &Pve, prior: &VmQemu) -> Result<Vec<String>, String> {
        let vmid = vmid_of(prior).ok_or("the state has no vmid")?;
        match vm::locate(pve, vmid).await.map_err(|e| e.to_string())? {
            Some(g) => vm::destroy(pve, &g, false).await.map_err(|e| e.to_string()),
            None => Ok(Vec::new()),
        }
    }
}
