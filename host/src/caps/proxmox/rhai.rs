//! `proxmox::*` for workflow scripts: the Proxmox calls the shared steps need
//! (`list_vms`, `next_id`, status, power, tasks and a VM's task list, config
//! and pending changes, migration, storage (definition, free space on a node,
//! volumes, `move_disk(node, vmid, disk, storage, digest)`), the PVE version,
//! `create_vm`, containers (create, config,
//! status, power, destroy), a task's log, `agent_ping`, HA resources and
//! PVE 9 HA rules (`ha_resources`, `add_ha_resource(vmid, state, comment)`,
//! `ha_rules`, `put_ha_rule(#{rule, kind, resources, nodes, strict, digest})`).
//! Each goes through the same adapter as a plugin's call, so it is checked
//! against `[workflow.grants.proxmox]` and journaled. Results are the WIT
//! records converted by serde (`()` for a none), except where scripts see a
//! different shape (the view structs below).
//!
//! `set_config` and `resize_disk` also take a last `digest` argument (a string,
//! or `()` for none): PVE refuses the write when the VM's config no longer has
//! that digest (`checksum mismatch (file change by other user?)`); the same
//! guard and `Call::Proxmox` as the WIT functions, whose signatures stay.

use rhai::serde::to_dynamic;
use rhai::{Array, Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};
use serde::Serialize;

use crate::caps::script_glue::{Res, int_arg, to_map};
use crate::caps::script_run::{caps, wit_throw};
use crate::contract::bindings::cradle::host::proxmox::{HaRule, Host, PowerAction, TaskSummary, VmRuntime};
use crate::contract::bindings::cradle::host::types::Entry;

/// A `task-summary` as scripts see it: `starttime` as an INT (clamped, where
/// the WIT `u64` would serialize above `i64::MAX` as a FLOAT), `status` `()`
/// while the task runs: that is what a caller waiting for it tests.
#[derive(Serialize)]
struct TaskSummaryView {
    upid: String,
    kind: String,
    id: String,
    starttime: i64,
    status: Option<String>,
}

impl From<TaskSummary> for TaskSummaryView {
    fn from(t: TaskSummary) -> Self {
        let starttime = i64::try_from(t.starttime).unwrap_or(i64::MAX);
        TaskSummaryView { upid: t.upid, kind: t.kind, id: t.id, starttime, status: t.status }
    }
}

/// A `vm-runtime` as scripts see it: `uptime` as an INT, clamped like
/// [`TaskSummaryView::starttime`].
#[derive(Serialize)]
struct VmRuntimeView {
    status: String,
    qmpstatus: Option<String>,
    lock: Option<String>,
    uptime: i64,
    ha_managed: bool,
}

impl From<VmRuntime> for VmRuntimeView {
    fn from(s: VmRuntime) -> Self {
        let uptime = i64::try_from(s.uptime).unwrap_or(i64::MAX);
        VmRuntimeView { status: s.status, qmpstatus: s.qmpstatus, lock: s.lock, uptime, ha_managed: s.ha_managed }
    }
}

/// Each of `items` as a script value.
fn array<T: Serialize>(items: Vec<T>) -> Res<Array> {
    items.iter().map(to_dynamic).collect()
}

fn power_action(name: &str) -> Res<PowerAction> {
    Ok(match name {
        "start" => PowerAction::Start,
        "stop" => PowerAction::Stop,
        "shutdown" => PowerAction::Shutdown,
        "reboot" => PowerAction::Reboot,
        "reset" => PowerAction::Reset,
        other => {
            return Err(
                format!("proxmox::power: unknown action `{other}` (start, stop, shutdown, reboot, reset)").into()
            );
        }
    })
}

/// A config digest argument: a string, or `()` for none (the write is then
/// not fenced).
fn digest_arg(digest: &Dynamic, function: &str) -> Res<Option<String>> {
    if digest.is_unit() {
        return Ok(None);
    }
    match digest.clone().into_immutable_string() {
        Ok(d) if !d.is_empty() => Ok(Some(d.to_string())),
        Ok(_) => Err(format!("proxmox::{function}: the digest is empty; pass the config's `digest` or ()").into()),
        Err(t) => Err(format!("proxmox::{function}: the digest must be a string or (), not {t}").into()),
    }
}

/// `set_config(node, vmid, set, delete[, digest])`: both overloads, one
/// write through the WIT function (its guard and journal entry).
fn set_config(
    ctx: &NativeCallContext,
    node: &str,
    vmid: i64,
    set: Map,
    delete: Array,
    digest: Option<String>,
) -> Res<()> {
    let set = set.into_iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect();
    let delete = delete.into_iter().map(|d| d.to_string()).collect();
    Host::set_config(&mut caps(ctx)?, node.to_string(), int_arg(vmid, "vmid")?, set, delete, digest).map_err(wit_throw)
}

/// `resize_disk(node, vmid, disk, size[, digest])` → UPID: both overloads,
/// through the WIT function's call (`resize_disk_at`, `None`: no digest).
fn resize_disk(
    ctx: &NativeCallContext,
    node: &str,
    vmid: i64,
    disk: &str,
    size: &str,
    digest: Option<&str>,
) -> Res<ImmutableString> {
    let upid = caps(ctx)?.resize_disk_at(node, int_arg(vmid, "vmid")?, disk, size, digest).map_err(wit_throw)?;
    Ok(upid.into())
}

/// The `proxmox` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("list_vms").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<Array> {
        let vms = Host::list_vms(&mut caps(&ctx)?).map_err(wit_throw)?;
        array(vms)
    });
    FuncRegistration::new("next_id").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<i64> {
        Ok(i64::from(Host::next_id(&mut caps(&ctx)?, None).map_err(wit_throw)?))
    });
    // `next_id(hint)`: the hint if it is free, else a `conflict`.
    FuncRegistration::new("next_id").set_into_module(&mut m, |ctx: NativeCallContext, hint: i64| -> Res<i64> {
        Ok(i64::from(Host::next_id(&mut caps(&ctx)?, Some(int_arg(hint, "hint")?)).map_err(wit_throw)?))
    });
    FuncRegistration::new("vm_status").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64| -> Res<Dynamic> {
            let s = Host::vm_status(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?).map_err(wit_throw)?;
            to_dynamic(VmRuntimeView::from(s))
        },
    );
    FuncRegistration::new("power").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64, action: ImmutableString| -> Res<ImmutableString> {
            let upid = Host::power(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?, power_action(&action)?)
                .map_err(wit_throw)?;
            Ok(upid.into())
        },
    );
    FuncRegistration::new("wait_task").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, upid: ImmutableString, timeout_ms: i64| -> Res<Dynamic> {
            let timeout = u64::try_from(timeout_ms)
                .map_err(|_| format!("proxmox::wait_task: timeout {timeout_ms} ms is negative"))?;
            let t =
                Host::wait_task(&mut caps(&ctx)?, node.to_string(), upid.to_string(), timeout).map_err(wit_throw)?;
            to_dynamic(t)
        },
    );
    // The VM's tasks on `node` (`GET /nodes/{node}/tasks?vmid=`), so a step can
    // wait for the ones still running (a reboot's own start, a clone) before
    // it decides anything from the VM's status.
    FuncRegistration::new("list_tasks").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64| -> Res<Array> {
            let tasks = Host::list_tasks(&mut caps(&ctx)?, node.to_string(), Some(int_arg(vmid, "vmid")?), None)
                .map_err(wit_throw)?;
            array(tasks.into_iter().map(TaskSummaryView::from).collect())
        },
    );
    FuncRegistration::new("get_config").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64| -> Res<Map> {
            let entries =
                Host::get_config(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?).map_err(wit_throw)?;
            Ok(entries.into_iter().map(|e| (e.key.into(), e.value.into())).collect())
        },
    );
    FuncRegistration::new("get_pending").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64| -> Res<Array> {
            let entries =
                Host::get_pending(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?).map_err(wit_throw)?;
            array(entries)
        },
    );
    FuncRegistration::new("set_config").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64, set: Map, delete: Array| -> Res<()> {
            set_config(&ctx, &node, vmid, set, delete, None)
        },
    );
    // `set_config(node, vmid, set, delete, digest)`: the write PVE refuses
    // (`checksum mismatch (file change by other user?)`, a `conflict`) when the
    // config's digest is no longer `digest` — a maintenance plan's recorded one.
    FuncRegistration::new("set_config").set_into_module(
        &mut m,
        |ctx: NativeCallContext,
         node: ImmutableString,
         vmid: i64,
         set: Map,
         delete: Array,
         digest: Dynamic|
         -> Res<()> { set_config(&ctx, &node, vmid, set, delete, digest_arg(&digest, "set_config")?) },
    );
    FuncRegistration::new("migrate").set_into_module(
        &mut m,
        |ctx: NativeCallContext,
         node: ImmutableString,
         vmid: i64,
         target: ImmutableString,
         online: bool|
         -> Res<ImmutableString> {
            let upid = Host::migrate(
                &mut caps(&ctx)?,
                node.to_string(),
                int_arg(vmid, "vmid")?,
                target.to_string(),
                online,
                true,
            )
            .map_err(wit_throw)?;
            Ok(upid.into())
        },
    );
    FuncRegistration::new("storage_info").set_into_module(
        &mut m,
        |ctx: NativeCallContext, storage: ImmutableString| -> Res<Map> {
            to_map(&Host::storage_info(&mut caps(&ctx)?, storage.to_string()).map_err(wit_throw)?)
        },
    );
    // Free space of one storage on one node: `#{storage, kind, content, active, total, used, avail}`.
    FuncRegistration::new("storage_status").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, storage: ImmutableString| -> Res<Map> {
            to_map(&Host::storage_status(&mut caps(&ctx)?, node.to_string(), storage.to_string()).map_err(wit_throw)?)
        },
    );
    // The volumes of one content type (`import`, `iso`, `vztmpl`, ...) on a node's storage.
    FuncRegistration::new("storage_content").set_into_module(
        &mut m,
        |ctx: NativeCallContext,
         node: ImmutableString,
         storage: ImmutableString,
         content: ImmutableString|
         -> Res<Array> {
            let v =
                Host::storage_content(&mut caps(&ctx)?, node.to_string(), storage.to_string(), Some(content.into()))
                    .map_err(wit_throw)?;
            array(v)
        },
    );
    FuncRegistration::new("pve_version").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<ImmutableString> {
        Ok(Host::pve_version(&mut caps(&ctx)?).map_err(wit_throw)?.into())
    });
    // `resize_disk(node, vmid, disk, size)` → UPID (`size` `+10G` or absolute `32G`).
    FuncRegistration::new("resize_disk").set_into_module(
        &mut m,
        |ctx: NativeCallContext,
         node: ImmutableString,
         vmid: i64,
         disk: ImmutableString,
         size: ImmutableString|
         -> Res<ImmutableString> { resize_disk(&ctx, &node, vmid, &disk, &size, None) },
    );
    // `resize_disk(node, vmid, disk, size, digest)`: PVE checks `digest` in the
    // task's worker, so a stale one is a failed task (`wait_task`'s status).
    FuncRegistration::new("resize_disk").set_into_module(
        &mut m,
        |ctx: NativeCallContext,
         node: ImmutableString,
         vmid: i64,
         disk: ImmutableString,
         size: ImmutableString,
         digest: Dynamic|
         -> Res<ImmutableString> {
            resize_disk(&ctx, &node, vmid, &disk, &size, digest_arg(&digest, "resize_disk")?.as_deref())
        },
    );
    // `move_disk(node, vmid, disk, storage, digest)` → UPID of the `qmmove`
    // task (`digest` `()`: none sent). The source volume stays as `unusedN`.
    FuncRegistration::new("move_disk").set_into_module(
        &mut m,
        |ctx: NativeCallContext,
         node: ImmutableString,
         vmid: i64,
         disk: ImmutableString,
         storage: ImmutableString,
         digest: Dynamic|
         -> Res<ImmutableString> {
            let digest = digest_arg(&digest, "move_disk")?;
            let upid = Host::move_disk(
                &mut caps(&ctx)?,
                node.to_string(),
                int_arg(vmid, "vmid")?,
                disk.to_string(),
                storage.to_string(),
                digest,
            )
            .map_err(wit_throw)?;
            Ok(upid.into())
        },
    );
    // `create_vm(node, vmid, #{key: value})` → UPID of the `qmcreate` task.
    FuncRegistration::new("create_vm").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64, config: Map| -> Res<ImmutableString> {
            let config = config.into_iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect();
            let upid = Host::create_vm(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?, config)
                .map_err(wit_throw)?;
            Ok(upid.into())
        },
    );
    // Containers (pve-container): create, config, status, power, destroy.
    FuncRegistration::new("create_container").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64, config: Map| -> Res<ImmutableString> {
            let config = config.into_iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect();
            let upid = Host::create_container(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?, config)
                .map_err(wit_throw)?;
            Ok(upid.into())
        },
    );
    FuncRegistration::new("container_config").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64| -> Res<Map> {
            let entries = Host::get_container_config(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?)
                .map_err(wit_throw)?;
            Ok(entries.into_iter().map(|e| (e.key.into(), e.value.into())).collect())
        },
    );
    FuncRegistration::new("set_container_config").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64, set: Map, delete: Array| -> Res<()> {
            let set = set.into_iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect();
            let delete = delete.into_iter().map(|d| d.to_string()).collect();
            Host::set_container_config(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?, set, delete, None)
                .map_err(wit_throw)
        },
    );
    FuncRegistration::new("container_status").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64| -> Res<Dynamic> {
            let s = Host::container_status(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?)
                .map_err(wit_throw)?;
            to_dynamic(VmRuntimeView::from(s))
        },
    );
    FuncRegistration::new("container_power").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64, action: ImmutableString| -> Res<ImmutableString> {
            let upid = Host::container_power(
                &mut caps(&ctx)?,
                node.to_string(),
                int_arg(vmid, "vmid")?,
                power_action(&action)?,
            )
            .map_err(wit_throw)?;
            Ok(upid.into())
        },
    );
    FuncRegistration::new("destroy_container").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64, purge: bool| -> Res<ImmutableString> {
            let upid = Host::destroy_container(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?, purge)
                .map_err(wit_throw)?;
            Ok(upid.into())
        },
    );
    // `task_failure(node, upid, exitstatus)`: the error a failed task stands for, as
    // `#{kind, message}` (the host's `task-failure`: classed as an HTTP error of the
    // same cause), for a step to throw with its own words in front.
    FuncRegistration::new("task_failure").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, upid: ImmutableString, exit: ImmutableString| -> Res<Dynamic> {
            let e = Host::task_failure(&mut caps(&ctx)?, node.to_string(), upid.to_string(), exit.to_string());
            let e = crate::contract::CapError::from_wit(e);
            let mut map = rhai::Map::new();
            map.insert("kind".into(), e.kind.as_str().into());
            map.insert("message".into(), e.message.into());
            Ok(map.into())
        },
    );
    // The lines a task printed (a container's create prints its SSH host key fingerprints).
    FuncRegistration::new("task_log").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, upid: ImmutableString| -> Res<Array> {
            let lines = Host::task_log(&mut caps(&ctx)?, node.to_string(), upid.to_string()).map_err(wit_throw)?;
            Ok(lines.into_iter().map(Dynamic::from).collect())
        },
    );
    // `list_tasks(node, vmid, kind)`: only tasks of worker type `kind` (`vzcreate`, ...).
    FuncRegistration::new("list_tasks").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64, kind: ImmutableString| -> Res<Array> {
            let tasks =
                Host::list_tasks(&mut caps(&ctx)?, node.to_string(), Some(int_arg(vmid, "vmid")?), Some(kind.into()))
                    .map_err(wit_throw)?;
            array(tasks.into_iter().map(TaskSummaryView::from).collect())
        },
    );
    FuncRegistration::new("ha_resources").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<Array> {
        let all = Host::list_ha_resources(&mut caps(&ctx)?).map_err(wit_throw)?;
        all.iter().map(|r| to_map(r).map(Dynamic::from)).collect()
    });
    FuncRegistration::new("add_ha_resource").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vmid: i64, state: ImmutableString, comment: Dynamic| -> Res<()> {
            let comment = if comment.is_unit() { None } else { Some(comment.to_string()) };
            Host::add_ha_resource(&mut caps(&ctx)?, int_arg(vmid, "vmid")?, Some(state.to_string()), comment)
                .map_err(wit_throw)
        },
    );
    FuncRegistration::new("ha_rules").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<Array> {
        let all = Host::list_ha_rules(&mut caps(&ctx)?).map_err(wit_throw)?;
        all.iter().map(|r| to_map(r).map(Dynamic::from)).collect()
    });
    FuncRegistration::new("put_ha_rule").set_into_module(&mut m, |ctx: NativeCallContext, rule: Map| -> Res<()> {
        let rule: HaRule = rhai::serde::from_dynamic(&Dynamic::from(rule))?;
        Host::put_ha_rule(&mut caps(&ctx)?, rule).map_err(wit_throw)
    });
    FuncRegistration::new("agent_ping").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64| -> Res<()> {
            Host::agent_ping(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?).map_err(wit_throw)
        },
    );
    m
}
