//! {{name}}: a cradle backend plugin, written by `cradle plugin new --backend`.
//!
//! It clones the VM from its template and configures it through the
//! `proxmox` capability, the way cradle's built-in `direct` backend does, with
//! the kit's helpers doing the careful parts:
//!
//! - `discover` finds the VM by name *and* VMID (`proxmox::discover`): either
//!   one alone on another VM is a `conflict`, never a silent match;
//! - `create` clones with `proxmox::clone_once`, which after an ambiguous
//!   failure (a timeout, a reset connection) re-reads the cluster before it
//!   tries again, so a retry never makes a second VM; a VM left half-done by
//!   an interrupted run is finished, not cloned again;
//! - `reconcile` brings `onboot`/`startup` back to the spec on every run;
//! - `remove` stops and destroys the VM it discovered, nothing else.
//!
//! The workflow (cradle's built-in `provision.rhai`) does the rest: the lock,
//! the snippets, start, verification over SSH and finalization.
//! Build: `cradle plugin build`; try it: `cradle plugin test`.

use cradle_guest::config::{self, entry, startup_changes};
use cradle_guest::lifecycle::{PlanAction, PlanOutcome};
use cradle_guest::log::{self, Level};
use cradle_guest::proxmox::{self, PowerAction, TASK_TIMEOUT_MS};
use cradle_guest::types::{Entry, Snippets, VmSpec, VmState};
use cradle_guest::{Backend, Error, Result};

cradle_guest::manifest! {
    name: "{{name}}",
    version: env!("CARGO_PKG_VERSION"),
    description: "Clones and configures VMs through the Proxmox API",
    // Every capability the plugin imports must be listed here, and granted
    // in cradle.toml ([plugins.{{name}}.grants.proxmox]); cradle refuses it otherwise.
    needs: ["log", "proxmox"],
}

struct Plugin;

cradle_guest::export_backend!(Plugin);

/// Everything `create` sets on the clone, given its current config.
fn settings(vm: &VmSpec, snippets: &Snippets, current: &[Entry]) -> Vec<Entry> {
    let mut set = vec![
        entry("cores", vm.cores.to_string()),
        entry("memory", vm.memory_mib.to_string()),
    ];
    for nic in &vm.nics {
        set.push(entry(
            &nic.slot,
            config::net_value(config::get(current, &nic.slot), nic),
        ));
    }
    let mut cicustom = format!("user={},network={}", snippets.user, snippets.network);
    if let Some(meta) = &snippets.meta {
        cicustom.push_str(&format!(",meta={meta}"));
    }
    set.push(entry("cicustom", cicustom));
    if config::cloudinit_slot(current).is_none() {
        set.push(entry("ide2", format!("{}:cloudinit", vm.storage)));
    }
    if !vm.tags.is_empty() {
        set.push(entry("tags", config::tags_value(&vm.tags)));
    }
    set.extend(startup_changes(vm, current));
    set
}

/// The boot disk to grow, when the spec wants it larger than it is.
fn resize(vm: &VmSpec, current: &[Entry]) -> Result<Option<(String, String)>> {
    let Some(want) = vm.disk_gib else {
        return Ok(None);
    };
    let disk = config::boot_disk(current).ok_or_else(|| {
        Error::Invalid(format!(
            "{}: the template has no boot disk to resize",
            vm.name
        ))
    })?;
    let have = config::get(current, &disk)
        .and_then(config::disk_size_gib)
        .unwrap_or(0);
    match u64::from(want) {
        w if w > have => Ok(Some((disk, format!("{want}G")))),
        w if w == have => Ok(None),
        _ => Err(Error::Invalid(format!(
            "{}: disk_gib {want} is smaller than the template's {disk} ({have} GiB); Proxmox cannot shrink disks",
            vm.name
        ))),
    }
}

impl Backend for Plugin {
    fn discover(vm: VmSpec) -> Result<Option<VmState>> {
        proxmox::discover(&vm)
    }

    fn check_ownership(_vm: VmSpec, _found: Option<VmState>) -> Result<()> {
        // This backend keeps no state of its own: `discover` already proved
        // the VM's identity (name and VMID agree).
        Ok(())
    }

    fn plan(vm: VmSpec) -> Result<PlanOutcome> {
        let vms = proxmox::list_vms()?;
        match proxmox::discover_in(&vms, &vm)? {
            None => {
                let template = proxmox::template_in(&vms, &vm)?;
                Ok(PlanOutcome {
                    action: PlanAction::Create,
                    summary: vec![format!(
                        "clone {} ({}) on {} to {} (vmid {}), {} cores, {} MiB",
                        vm.template,
                        template.vmid,
                        template.node,
                        vm.name,
                        vm.vmid,
                        vm.cores,
                        vm.memory_mib
                    )],
                    plan_id: None,
                })
            }
            Some(found) => {
                let changes = startup_changes(&vm, &proxmox::get_config(&found.node, found.vmid)?);
                let action = if changes.is_empty() {
                    PlanAction::NoOp
                } else {
                    PlanAction::Update
                };
                let summary = changes
                    .iter()
                    .map(|e| format!("set {} = {}", e.key, e.value))
                    .collect();
                Ok(PlanOutcome {
                    action,
                    summary,
                    plan_id: None,
                })
            }
        }
    }

    fn create(vm: VmSpec, snippets: Snippets) -> Result<VmState> {
        let vms = proxmox::list_vms()?;
        let (node, status) = match proxmox::discover_in(&vms, &vm)? {
            // An interrupted run left the VM: finish it instead of cloning again.
            Some(found) if found.lock.is_some() => {
                return Err(Error::Transient(format!(
                    "{} (vmid {}) is locked ({}); wait for its task on {} and rerun",
                    vm.name,
                    vm.vmid,
                    found.lock.unwrap_or_default(),
                    found.node
                )));
            }
            Some(found) => (found.node, found.status),
            None => {
                let template = proxmox::template_in(&vms, &vm)?;
                proxmox::clone_once(&vm, &template, &proxmox::clone_request(&vm, &template))?;
                (template.node, "stopped".to_string())
            }
        };
        let current = proxmox::get_config(&node, vm.vmid)?;
        let set = config::differing(settings(&vm, &snippets, &current), &current);
        let grow = resize(&vm, &current)?;
        if (!set.is_empty() || grow.is_some()) && status != "stopped" {
            return Err(Error::Conflict(format!(
                "{} is {status} but not fully configured; stop it (`qm stop {}`) and rerun",
                vm.name, vm.vmid
            )));
        }
        if !set.is_empty() {
            proxmox::set_config(&node, vm.vmid, &set, &[], config::get(&current, "digest"))?;
        }
        if let Some((disk, size)) = grow {
            let upid = proxmox::resize_disk(&node, vm.vmid, &disk, &size)?;
            proxmox::wait(
                &node,
                &upid,
                &format!("resize {disk} of {}", vm.name),
                TASK_TIMEOUT_MS,
            )?;
        }
        log::vm(Level::Info, &vm, "cloned and configured");
        Ok(VmState {
            name: vm.name,
            vmid: vm.vmid,
            node,
            status,
            lock: None,
            has_cloudinit_drive: true,
        })
    }

    fn reconcile(vm: VmSpec, found: VmState) -> Result<Vec<String>> {
        let changes = startup_changes(&vm, &proxmox::get_config(&found.node, found.vmid)?);
        if !changes.is_empty() {
            proxmox::set_config(&found.node, found.vmid, &changes, &[], None)?;
        }
        Ok(changes
            .iter()
            .map(|e| format!("set {} = {}", e.key, e.value))
            .collect())
    }

    fn remove(vm: VmSpec) -> Result<()> {
        let Some(found) = proxmox::discover(&vm)? else {
            return Err(Error::NotFound(format!(
                "{} (vmid {}) does not exist; nothing was removed",
                vm.name, vm.vmid
            )));
        };
        if found.status == "running" {
            let upid = proxmox::power(&found.node, found.vmid, PowerAction::Stop)?;
            proxmox::wait(
                &found.node,
                &upid,
                &format!("stop {}", vm.name),
                TASK_TIMEOUT_MS,
            )?;
        }
        let upid = proxmox::destroy(&found.node, found.vmid, true)?;
        proxmox::wait(
            &found.node,
            &upid,
            &format!("destroy {}", vm.name),
            TASK_TIMEOUT_MS,
        )?;
        log::vm(Level::Info, &vm, "destroyed");
        Ok(())
    }
}

// Pure functions are tested natively: `cargo test` (the host calls are only
// available inside cradle; `tests/simulator.rs` runs the whole plugin there).
#[cfg(test)]
mod tests {
    use super::*;
    use cradle_guest::types::Nic;

    fn spec() -> VmSpec {
        VmSpec {
            name: "web-0".into(),
            vmid: 150,
            node: "pve1".into(),
            template: "debian-12-cloud".into(),
            storage: "local-lvm".into(),
            cores: 2,
            memory_mib: 2048,
            disk_gib: Some(20),
            disks: vec![],
            nics: vec![Nic {
                slot: "net0".into(),
                bridge: "vmbr0".into(),
                vlan: Some(20),
                address: None,
                gateway: None,
                guest_interface: "ens18".into(),
            }],
            startup_order: None,
            tags: vec![],
            environment: "test".into(),
            allow_replacement: false,
        }
    }

    #[test]
    fn a_fresh_clone_gets_the_spec_and_keeps_its_mac() {
        let snippets = Snippets {
            user: "local:snippets/web-0-user.yaml".into(),
            network: "local:snippets/web-0-network.yaml".into(),
            meta: None,
        };
        let clone = vec![
            entry("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr9"),
            entry("scsi0", "local-lvm:vm-150-disk-0,size=8G"),
        ];
        let set = settings(&spec(), &snippets, &clone);
        assert_eq!(
            config::get(&set, "net0"),
            Some("virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=20")
        );
        assert_eq!(config::get(&set, "ide2"), Some("local-lvm:cloudinit"));
        assert_eq!(
            resize(&spec(), &clone).expect("resize"),
            Some(("scsi0".to_string(), "20G".to_string()))
        );
    }
}
