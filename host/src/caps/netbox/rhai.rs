//! `netbox_api::*` for workflow scripts, through the same adapter as a
//! plugin's call (checked against `[workflow.grants.netbox]`, journaled).
//! The module is not called `netbox` because workflows import
//! `lib/netbox.rhai` under that name, and a script's import shadows a host
//! module of the same name (also inside the library's own functions).
//!
//! - `read_vm(id)` → `#{id, name, status, cluster, vcpus, memory_mb,
//!   custom_fields: #{proxmox_node, proxmox_template, proxmox_datastore,
//!   proxmox_vmid, semaphore_template}, primary_ip4}` (`()` for what is not set);
//! - `read_ip(id)` → `#{id, address, dns_name, vm_interface}`;
//! - `interfaces(vm)` → `[#{id, name, mac}]`;
//! - `list_vms(status, filters, limit)` → `[#{id, name}]`;
//! - `set_mac(iface, mac, how)` (`how`: `"auto"`, `"field"`, `"objects"`);
//! - `set_status(vm, status)`; `journal(vm, kind, comments)` (`kind`: `"info"`,
//!   `"success"`, `"warning"`, `"danger"`).
//!
//! Arguments are read by [`super::script_args`]; failures throw
//! `#{kind, message}` like every host module.

use rhai::{Array, Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use super::script_args::{filters, journal_kind, mac_write, object_id};
use crate::caps::script_glue::{Res, to_map};
use crate::caps::script_run::{caps, wit_throw};
use crate::contract::bindings::cradle::host::netbox::Host;

fn maps<T: serde::Serialize>(items: &[T]) -> Res<Array> {
    items.iter().map(|i| to_map(i).map(Dynamic::from)).collect()
}

/// The `netbox_api` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("read_vm").set_into_module(&mut m, |ctx: NativeCallContext, id: i64| -> Res<Map> {
        let id = object_id("read_vm", "VM", id)?;
        to_map(&Host::read_vm(&mut caps(&ctx)?, id).map_err(wit_throw)?)
    });
    FuncRegistration::new("read_ip").set_into_module(&mut m, |ctx: NativeCallContext, id: i64| -> Res<Map> {
        let id = object_id("read_ip", "IP address", id)?;
        to_map(&Host::read_ip(&mut caps(&ctx)?, id).map_err(wit_throw)?)
    });
    FuncRegistration::new("interfaces").set_into_module(&mut m, |ctx: NativeCallContext, vm: i64| -> Res<Array> {
        let vm = object_id("interfaces", "VM", vm)?;
        maps(&Host::interfaces(&mut caps(&ctx)?, vm).map_err(wit_throw)?)
    });
    FuncRegistration::new("list_vms").set_into_module(
        &mut m,
        |ctx: NativeCallContext, status: ImmutableString, filter: Map, limit: i64| -> Res<Array> {
            let limit = u32::try_from(limit).unwrap_or(u32::MAX);
            let found = Host::list_vms(&mut caps(&ctx)?, status.to_string(), filters(&filter)?, limit);
            maps(&found.map_err(wit_throw)?)
        },
    );
    FuncRegistration::new("set_mac").set_into_module(
        &mut m,
        |ctx: NativeCallContext, iface: i64, mac: ImmutableString, how: ImmutableString| -> Res<()> {
            let iface = object_id("set_mac", "interface", iface)?;
            Host::set_mac(&mut caps(&ctx)?, iface, mac.to_string(), mac_write(&how)?).map_err(wit_throw)
        },
    );
    FuncRegistration::new("set_status").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: i64, status: ImmutableString| -> Res<()> {
            let vm = object_id("set_status", "VM", vm)?;
            Host::set_status(&mut caps(&ctx)?, vm, status.to_string()).map_err(wit_throw)
        },
    );
    FuncRegistration::new("journal").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: i64, kind: ImmutableString, comments: ImmutableString| -> Res<()> {
            let vm = object_id("journal", "VM", vm)?;
            Host::journal(&mut caps(&ctx)?, vm, journal_kind(&kind)?, comments.to_string()).map_err(wit_throw)
        },
    );
    m
}
