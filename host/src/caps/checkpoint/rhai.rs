//! `checkpoint::read(vm)`, `checkpoint::write(#{vm_name, vmid, node, stage})`,
//! `checkpoint::clear(vm, vmid)` for workflow scripts, through the same adapter
//! as plugins ([`super::host`]). `read` gives the WIT `finalization` record
//! (serde: `#{vm_name, vmid, node, stage, written}`) or `()`.

use rhai::serde::to_dynamic;
use rhai::{Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};

use super::Finalization;
use crate::caps::script_glue::{Res, int_arg, throw};
use crate::caps::script_run::caps;
use crate::contract::CapError;

fn field<'a>(map: &'a Map, key: &str) -> Res<&'a Dynamic> {
    map.get(key).ok_or_else(|| throw(CapError::invalid(format!("checkpoint::write: missing field `{key}`"))))
}

fn string_field(map: &Map, key: &str) -> Res<String> {
    field(map, key)?
        .clone()
        .into_string()
        .map_err(|t| throw(CapError::invalid(format!("checkpoint::write: `{key}` must be a string, got {t}"))))
}

/// The `checkpoint` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("read").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: ImmutableString| -> Res<Dynamic> {
            to_dynamic(caps(&ctx)?.checkpoint_read(&vm).map_err(throw)?)
        },
    );
    FuncRegistration::new("write").set_into_module(&mut m, |ctx: NativeCallContext, cp: Map| -> Res<()> {
        let vmid = field(&cp, "vmid")?
            .as_int()
            .map_err(|t| throw(CapError::invalid(format!("checkpoint::write: `vmid` must be an integer, got {t}"))))?;
        let fin = Finalization {
            vm_name: string_field(&cp, "vm_name")?,
            vmid: int_arg(vmid, "checkpoint::write: vmid")?,
            node: string_field(&cp, "node")?,
            stage: string_field(&cp, "stage")?,
            written: String::new(),
            fence: None,
            // Optional: the guest's host key, for a rerun on another control node.
            host_key: match cp.get("host_key") {
                None => None,
                Some(v) if v.is_unit() => None,
                Some(_) => Some(string_field(&cp, "host_key")?),
            },
        };
        caps(&ctx)?.checkpoint_write(fin).map_err(throw)
    });
    FuncRegistration::new("clear").set_into_module(
        &mut m,
        |ctx: NativeCallContext, vm: ImmutableString, vmid: i64| -> Res<()> {
            caps(&ctx)?.checkpoint_clear(&vm, int_arg(vmid, "checkpoint::clear: vmid")?).map_err(throw)
        },
    );
    m
}
