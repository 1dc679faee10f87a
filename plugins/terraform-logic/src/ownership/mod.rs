//! State ownership: does an existing (or missing) VM agree with the host's module state?
//!
//! # Contract
//!
//! [`check`] reads `terraform show -json` of the module's state (no plan file) and
//! compares it with what cradle expects ([`Owner`]: the resource address, the VM's
//! name and VMID, the provider [`Flavour`]) and with whether a VM with that VMID
//! exists in Proxmox (`vm_exists`, which the caller looks up).
//!
//! * `state_json`: `Some(text)` is the output of `terraform show -json`; with no state
//!   file Terraform prints `{"format_version":"1.0"}` (no `values`), which means an empty
//!   state. `None` means the caller has established that the module has no state file
//!   at all and is treated exactly like that empty state. A state that exists but
//!   could not be read must **not** be passed as `None`: pass its text (which then fails
//!   to parse) or fail in the caller.
//! * The expected resource is the one at [`Owner::address`] in
//!   `values.root_module.resources[]`: its `type` and `provider_name` must be the
//!   flavour's, `values.name` must equal [`Owner::name`] and the VMID attribute
//!   (`vmid` for telmate, `vm_id` for bpg; a JSON integer) must equal [`Owner::vmid`].
//!
//! | state has the resource | VM exists | result |
//! |---|---|---|
//! | no (empty state) | no | [`Ownership::New`]: a new guest may be created |
//! | yes, matching | yes | [`Ownership::Owned`] |
//! | no | yes | [`OwnershipError::NotInState`] |
//! | yes, matching | no | [`OwnershipError::VmMissing`]: deleted outside Terraform; a plan would create it again |
//! | yes, name/VMID differ | either | [`OwnershipError::Mismatch`] |
//! | yes, other type/provider | either | [`OwnershipError::WrongResource`] |
//!
//! # Failure modes
//!
//! Every error fails closed: cradle must neither create, adopt nor destroy the VM,
//! and each message says what differs and not to delete the state or
//! `terraform import` without review. Besides the table: the text is not JSON, is a
//! plan rather than a state, or has the wrong shape ([`OwnershipError::Unparseable`]);
//! `format_version` is missing or not `1.x` ([`OwnershipError::UnsupportedFormat`]);
//! the state holds anything besides the expected resource — other resources, data
//! sources, child modules, deposed objects ([`OwnershipError::OtherResources`]),
//! checked before the expected resource itself.
//!
//! A tainted resource still counts as owned: ownership is about *which* VM the state
//! means; a replacement that taint would cause is the plan approval's business
//! ([`crate::approve`]).

mod error;

#[cfg(test)]
mod tests;

pub use error::{Difference, OwnershipError};

use serde_json::Value;

use crate::format;
use crate::state::{StateRepr, StateResource};
use crate::{Flavour, ResourceKind};

/// The VM cradle expects a host's module to own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The resource address, e.g. `proxmox_vm_qemu.vm` (see [`Flavour::address`]).
    pub address: String,
    /// The VM's name (`values.name`).
    pub name: String,
    /// The VM's Proxmox VMID (`values.vmid` / `values.vm_id`).
    pub vmid: u32,
    pub flavour: Flavour,
}

impl Owner {
    /// The owner of a host's VM resource of the given flavour, at the flavour's address.
    pub fn for_flavour(flavour: Flavour, name: impl Into<String>, vmid: u32) -> Self {
        Self { address: flavour.address().to_owned(), name: name.into(), vmid, flavour }
    }
}

/// A state that agrees with the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// No VM and nothing in state: the module may create it.
    New,
    /// The state's resource is this VM (name and VMID match) and the VM exists.
    Owned,
}

/// Top-level keys only a plan has: a plan passed by mistake would otherwise read as an empty state.
const PLAN_ONLY_KEYS: [&str; 4] = ["resource_changes", "planned_values", "prior_state", "configuration"];

/// Decide whether the module's state (`terraform show -json`, or `None` for no state
/// file) owns the VM described by `expected`, given whether that VM exists.
pub fn check(state_json: Option<&str>, expected: &Owner, vm_exists: bool) -> Result<Ownership, OwnershipError> {
    let state = match state_json {
        Some(text) => parse(text, expected)?,
        None => StateRepr { values: None },
    };

    let resources = state.resources();
    let (own, others): (Vec<_>, Vec<_>) = resources.iter().partition(|located| {
        let r = located.resource;
        !located.in_child_module && r.address == expected.address && r.mode == "managed" && r.deposed_key.is_none()
    });
    if !others.is_empty() {
        let found = others.iter().map(|located| describe(located.resource)).collect();
        return Err(OwnershipError::OtherResources { address: expected.address.clone(), found });
    }

    let Some(own) = own.first().map(|located| located.resource) else {
        return if vm_exists { Err(not_in_state(expected)) } else { Ok(Ownership::New) };
    };
    let flavour = expected.flavour;
    if own.resource_type != flavour.resource_type() || own.provider_name != flavour.provider_name() {
        return Err(OwnershipError::WrongResource {
            address: expected.address.clone(),
            found: Box::new(ResourceKind::new(&own.resource_type, &own.provider_name)),
            expected: Box::new(flavour.kind()),
        });
    }
    let differences = differences(own, expected);
    if !differences.is_empty() {
        return Err(OwnershipError::Mismatch { address: expected.address.clone(), differences });
    }
    if vm_exists {
        Ok(Ownership::Owned)
    } else {
        Err(OwnershipError::VmMissing {
            address: expected.address.clone(),
            name: expected.name.clone(),
            vmid: expected.vmid,
        })
    }
}

fn parse(text: &str, expected: &Owner) -> Result<StateRepr, OwnershipError> {
    let unparseable = |reason: String| OwnershipError::Unparseable { address: expected.address.clone(), reason };
    let value: Value = serde_json::from_str(text).map_err(|e| unparseable(e.to_string()))?;
    let Some(object) = value.as_object() else { return Err(unparseable("not a JSON object".to_owned())) };
    match object.get("format_version") {
        Some(Value::String(version)) if format::is_supported(version) => {}
        other => {
            return Err(OwnershipError::UnsupportedFormat {
                address: expected.address.clone(),
                format_version: other.map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)),
            });
        }
    }
    if let Some(key) = PLAN_ONLY_KEYS.iter().find(|key| object.contains_key(**key)) {
        return Err(unparseable(format!("this is a plan (it has `{key}`), not `terraform show -json` of a state")));
    }
    serde_json::from_value(value).map_err(|e| unparseable(e.to_string()))
}

fn not_in_state(expected: &Owner) -> OwnershipError {
    OwnershipError::NotInState { address: expected.address.clone(), name: expected.name.clone(), vmid: expected.vmid }
}

fn describe(r: &StateResource) -> String {
    let mut text = r.address.clone();
    if r.mode != "managed" {
        text.push_str(&format!(" ({} resource)", r.mode));
    }
    if let Some(key) = &r.deposed_key {
        text.push_str(&format!(" (deposed object {key})"));
    }
    text
}

fn differences(own: &StateResource, expected: &Owner) -> Vec<Difference> {
    let mut out = Vec::new();
    let name = own.values.get("name");
    if name.and_then(Value::as_str) != Some(expected.name.as_str()) {
        out.push(Difference::Name { in_state: render(name), expected: expected.name.clone() });
    }
    let attribute = expected.flavour.vmid_attribute();
    let vmid = own.values.get(attribute);
    if vmid.and_then(Value::as_u64) != Some(u64::from(expected.vmid)) {
        out.push(Difference::Vmid { attribute, in_state: render(vmid), expected: expected.vmid });
    }
    out
}

fn render(value: Option<&Value>) -> String {
    value.map_or_else(|| "(absent)".to_owned(), Value::to_string)
}
