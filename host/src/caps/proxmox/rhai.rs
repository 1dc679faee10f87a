//! `proxmox::*` for workflow scripts: the Proxmox calls the shared steps need
//! (status, power, tasks and a VM's task list, config and pending changes, migration, storage).
//! Each goes through the same adapter as a plugin's call, so it is checked
//! against `[workflow.grants.proxmox]` and journaled.

use rhai::{Array, Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use crate::caps::script::{Res, caps, int_arg, wit_throw};
use crate::contract::bindings::cradle::host::proxmox::{
    Host, PendingEntry, PowerAction, TaskStatus, TaskSummary, VmResource,
};
use crate::contract::bindings::cradle::host::types::Entry;

fn vm_resource(v: VmResource) -> Dynamic {
    let mut m = Map::new();
    m.insert("vmid".into(), i64::from(v.vmid).into());
    m.insert("name".into(), v.name.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
    m.insert("node".into(), v.node.into());
    m.insert("status".into(), v.status.into());
    m.insert("template".into(), v.template.into());
    m.insert("lock".into(), v.lock.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
    m.insert("hastate".into(), v.hastate.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
    m.insert("tags".into(), v.tags.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
    m.into()
}

fn task_status(t: TaskStatus) -> Dynamic {
    let mut m = Map::new();
    m.insert("upid".into(), t.upid.into());
    m.insert("status".into(), t.status.into());
    m.insert("exitstatus".into(), t.exitstatus.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
    m.insert("ok".into(), t.ok.into());
    m.into()
}

fn task_summary(t: TaskSummary) -> Dynamic {
    let mut m = Map::new();
    m.insert("upid".into(), t.upid.into());
    m.insert("kind".into(), t.kind.into());
    m.insert("id".into(), t.id.into());
    m.insert("starttime".into(), i64::try_from(t.starttime).unwrap_or(i64::MAX).into());
    // `()` while the task runs: that is what a caller waiting for it tests.
    m.insert("status".into(), t.status.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
    m.into()
}

fn pending(p: PendingEntry) -> Dynamic {
    let mut m = Map::new();
    m.insert("key".into(), p.key.into());
    m.insert("value".into(), p.value.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
    m.insert("pending".into(), p.pending.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
    m.insert("delete".into(), p.delete.into());
    m.into()
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

/// The `proxmox` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("list_vms").set_into_module(&mut m, |ctx: NativeCallContext| -> Res<Array> {
        let vms = Host::list_vms(&mut caps(&ctx)?).map_err(wit_throw)?;
        Ok(vms.into_iter().map(vm_resource).collect())
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
            let mut map = Map::new();
            map.insert("status".into(), s.status.into());
            map.insert("qmpstatus".into(), s.qmpstatus.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
            map.insert("lock".into(), s.lock.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
            map.insert("uptime".into(), i64::try_from(s.uptime).unwrap_or(i64::MAX).into());
            map.insert("ha_managed".into(), s.ha_managed.into());
            Ok(map.into())
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
            Ok(task_status(t))
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
            Ok(tasks.into_iter().map(task_summary).collect())
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
            Ok(entries.into_iter().map(pending).collect())
        },
    );
    FuncRegistration::new("set_config").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64, set: Map, delete: Array| -> Res<()> {
            let set = set.into_iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect();
            let delete = delete.into_iter().map(|d| d.to_string()).collect();
            Host::set_config(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?, set, delete, None)
                .map_err(wit_throw)
        },
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
            let s = Host::storage_info(&mut caps(&ctx)?, storage.to_string()).map_err(wit_throw)?;
            let mut map = Map::new();
            map.insert("storage".into(), s.storage.into());
            map.insert("kind".into(), s.kind.into());
            map.insert("content".into(), s.content.into_iter().map(Dynamic::from).collect::<Array>().into());
            map.insert("path".into(), s.path.map(Dynamic::from).unwrap_or(Dynamic::UNIT));
            map.insert("shared".into(), s.shared.into());
            Ok(map)
        },
    );
    FuncRegistration::new("agent_ping").set_into_module(
        &mut m,
        |ctx: NativeCallContext, node: ImmutableString, vmid: i64| -> Res<()> {
            Host::agent_ping(&mut caps(&ctx)?, node.to_string(), int_arg(vmid, "vmid")?).map_err(wit_throw)
        },
    );
    m
}
