//! VMIDs and canonical names from the inventory (the uniqueness check of
//! invariant 6 over them is `resolve::check_unique`, beside the plans it checks).
//!
//! A host's VMID is, in this order:
//! 1. `vms_vmid` (or its alias `vmid`; if both are set they must agree);
//! 2. `vms_vmid_base` + index, where the group is the one whose variables supplied
//!    the winning `vms_vmid_base` (by precedence), and the index is the host's
//!    0-based position among that group's hosts (its own, then its children's) in
//!    the whole inventory, so `--limit` never changes it; a base set on the host
//!    itself is refused (there is no group to count in: set `vms_vmid`);
//! 3. nothing: the workflow probes `nextid` under the VM's lock.
//!
//! VMIDs must lie in Proxmox's range 100..=999999999.
//!
//! Cost: a host's index is looked up in its group's position table, built once
//! per group and inventory, and the uniqueness check is one pass over the hosts,
//! so resolving (even one host under `--limit`, which still checks every host's
//! identity) stays linear in the inventory's size.

use serde::Serialize;
use serde_json::Value;

use super::template::Renderer;
use super::values::Ctx;
use super::{InventoryError, Scope};

const VMID_MIN: u64 = 100;
const VMID_MAX: u64 = 999_999_999;
const VMID_FORM: &str = "a VMID, a whole number 100..999999999";

/// Where a plan's VMID came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum VmidSource {
    /// Set on the host or a group: `vms_vmid` or `vmid`.
    Explicit {
        /// The variable that set it.
        variable: String,
    },
    /// `vms_vmid_base` of `group` plus the host's `index` in that group.
    BaseIndex {
        /// The group whose `vms_vmid_base` applied.
        group: String,
        /// The base.
        base: u32,
        /// The host's 0-based position in the group (whole inventory).
        index: u32,
    },
    /// Not in the inventory: probe `nextid` under the VM's lock.
    Nextid,
}

pub(crate) fn vmid(ctx: &Ctx<'_>, r: &mut Renderer<'_>) -> Result<(Option<u32>, VmidSource), InventoryError> {
    let mut explicit: Option<(u64, &str)> = None;
    for name in ["vms_vmid", "vmid"] {
        let Some(v) = ctx.var(r, name)? else { continue };
        let id = ctx.int(name, &v, VMID_MIN, VMID_MAX, VMID_FORM)?;
        match explicit {
            Some((first, first_name)) if first != id => {
                return Err(ctx.invalid(
                    name,
                    &v,
                    &format!("the same value as {first_name} ({first}), or remove one of the two"),
                ));
            }
            Some(_) => {}
            None => explicit = Some((id, name)),
        }
    }
    if let Some((id, name)) = explicit {
        return Ok((u32::try_from(id).ok(), VmidSource::Explicit { variable: name.to_string() }));
    }
    let Some(v) = ctx.var(r, "vms_vmid_base")? else { return Ok((None, VmidSource::Nextid)) };
    let base = ctx.int("vms_vmid_base", &v, VMID_MIN, VMID_MAX, VMID_FORM)?;
    let group = match ctx.inv.var_scope(ctx.h, "vms_vmid_base") {
        Some((Scope::Group(g), _)) => g,
        _ => {
            return Err(ctx.invalid(
                "vms_vmid_base",
                &v,
                "a base set on a group (group_vars/<group>.yml or [group:vars]); for one host set vms_vmid instead",
            ));
        }
    };
    let index = ctx.inv.position_in_group(group, ctx.h).unwrap_or(0) as u64;
    let id = base + index;
    if id > VMID_MAX {
        let origin = ctx.inv.var_scope(ctx.h, "vms_vmid_base").map(|(_, o)| o).unwrap_or_default();
        return Err(ctx.invalid_value(
            "vms_vmid",
            &Value::from(id),
            format!(
                "derived from vms_vmid_base + index: {base} (set in {origin}) + {index}, the host's position in group `{}`",
                ctx.inv.groups[group].name
            ),
            &format!("{VMID_FORM}: lower vms_vmid_base so that every host of the group fits, or set vms_vmid"),
        ));
    }
    let source = VmidSource::BaseIndex {
        group: ctx.inv.groups[group].name.clone(),
        base: u32::try_from(base).unwrap_or(u32::MAX),
        index: u32::try_from(index).unwrap_or(u32::MAX),
    };
    Ok((u32::try_from(id).ok(), source))
}

/// The canonical name a host would get (`vms_name` or the inventory hostname).
pub(crate) fn canonical_name(ctx: &Ctx<'_>, r: &mut Renderer<'_>) -> Result<String, InventoryError> {
    match ctx.var(r, "vms_name")? {
        Some(v) => ctx.string("vms_name", &v),
        None => Ok(ctx.host().to_string()),
    }
}
