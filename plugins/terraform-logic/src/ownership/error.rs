//! Why a state does not prove ownership. Every variant fails closed.

use std::fmt;

use crate::ResourceKind;

/// Repeated in every message: the two tempting "fixes" that lose or steal a VM.
const REVIEW: &str = "do not delete the state or `terraform import` anything without reviewing which VM the state \
                      and the inventory mean";

/// One attribute where the state's resource differs from the expected VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    /// `values.name`; `in_state` is the JSON found (or `(absent)`).
    Name { in_state: String, expected: String },
    /// `values.vmid` (telmate) / `values.vm_id` (bpg); `in_state` is the JSON found (or `(absent)`).
    Vmid { attribute: &'static str, in_state: String, expected: u32 },
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name { in_state, expected } => write!(f, "name is {in_state} in state, expected {expected:?}"),
            Self::Vmid { attribute, in_state, expected } => {
                write!(f, "{attribute} is {in_state} in state, expected {expected}")
            }
        }
    }
}

/// The state does not show that the module owns the VM (or that it may create it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnershipError {
    #[error(
        "cannot decide whether {address} belongs to this module: its state is unreadable ({reason}); \
         refusing to touch the VM — inspect the module's terraform.tfstate; {REVIEW}"
    )]
    Unparseable { address: String, reason: String },

    #[error(
        "cannot decide whether {address} belongs to this module: state format_version {} is not supported \
         (only 1.x is); refusing to touch the VM — use a Terraform release that prints format 1.x; {REVIEW}",
        .format_version.as_deref().map_or_else(|| "(missing)".to_owned(), |v| format!("{v:?}"))
    )]
    UnsupportedFormat { address: String, format_version: Option<String> },

    #[error(
        "the module's state holds more than {address}: {}; cradle's module has only that one resource, \
         so this directory's state is not (only) cradle's — refusing to touch the VM; {REVIEW}",
        .found.join(", ")
    )]
    OtherResources { address: String, found: Vec<String> },

    #[error(
        "{address} in the module's state is {found}, expected {expected}; the provider flavour changed or the state \
         is not cradle's — refusing to touch the VM; {REVIEW}"
    )]
    WrongResource { address: String, found: Box<ResourceKind>, expected: Box<ResourceKind> },

    #[error(
        "{address} in the module's state is a different VM: {}; refusing to touch either VM; {REVIEW}",
        .differences.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    Mismatch { address: String, differences: Vec<Difference> },

    #[error(
        "VM {name:?} (VMID {vmid}) exists in Proxmox but the module's state has no {address}: this module did not \
         create it (or its state was lost); refusing to adopt, change or destroy it; {REVIEW}"
    )]
    NotInState { address: String, name: String, vmid: u32 },

    #[error(
        "the module's state has {address} (VM {name:?}, VMID {vmid}) but no such VM exists in Proxmox: it was deleted \
         outside Terraform, and a plan would now create it again; refusing — find out what removed it, then review \
         the state; {REVIEW}"
    )]
    VmMissing { address: String, name: String, vmid: u32 },
}
