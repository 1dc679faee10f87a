//! Pure decision logic of cradle's Terraform backend.
//!
//! Both modules read the text Terraform itself prints with `terraform show -json`
//! and decide — without side effects, I/O or clocks, so the same code runs natively
//! and inside the `wasm32-wasip2` plugin:
//!
//! * [`approve`]: may cradle apply this saved plan? It accepts exactly the change
//!   cradle asked for on the one resource a host's module declares and rejects
//!   everything else with a [`approve::Rejection`] that tells the operator what to do.
//! * [`render`]: the module (`main.tf.json`) of one host, per flavour.
//! * [`ownership`]: does the VM (or its absence) agree with the module's state? It
//!   answers [`ownership::Ownership::New`] or [`ownership::Ownership::Owned`], or
//!   fails closed with an [`ownership::OwnershipError`].
//!
//! Both fail closed: input that is not what Terraform documents (see the module
//! docs) is an error, never a pass. Formats follow Terraform's JSON output format
//! (`format_version` major `1`, unknown object keys ignored, as that format's own
//! compatibility rule says).

pub mod approve;
pub mod ownership;
pub mod render;

mod format;
mod state;

/// A resource type together with the provider that implements it, as Terraform
/// reports them (`type`, `provider_name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceKind {
    pub resource_type: String,
    pub provider_name: String,
}

impl ResourceKind {
    pub fn new(resource_type: impl Into<String>, provider_name: impl Into<String>) -> Self {
        Self { resource_type: resource_type.into(), provider_name: provider_name.into() }
    }
}

impl std::fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` of provider {}", self.resource_type, self.provider_name)
    }
}

/// Which Terraform provider renders a host's VM (`[terraform] provider` in the
/// configuration): the resource type, provider source and VMID attribute differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// `telmate/proxmox`: resource `proxmox_vm_qemu.vm`, VMID attribute `vmid`.
    Telmate,
    /// `bpg/proxmox`: resource `proxmox_virtual_environment_vm.vm`, VMID attribute `vm_id`.
    Bpg,
}

impl Flavour {
    /// The resource type cradle renders for this flavour.
    pub const fn resource_type(self) -> &'static str {
        match self {
            Self::Telmate => "proxmox_vm_qemu",
            Self::Bpg => "proxmox_virtual_environment_vm",
        }
    }

    /// The address of the single resource in a host's module.
    pub const fn address(self) -> &'static str {
        match self {
            Self::Telmate => "proxmox_vm_qemu.vm",
            Self::Bpg => "proxmox_virtual_environment_vm.vm",
        }
    }

    /// The provider as Terraform names it in `provider_name` (fully qualified source address).
    pub const fn provider_name(self) -> &'static str {
        match self {
            Self::Telmate => "registry.terraform.io/telmate/proxmox",
            Self::Bpg => "registry.terraform.io/bpg/proxmox",
        }
    }

    /// The resource type and provider as a [`ResourceKind`].
    pub fn kind(self) -> ResourceKind {
        ResourceKind::new(self.resource_type(), self.provider_name())
    }

    /// The resource attribute that holds the Proxmox VMID.
    pub const fn vmid_attribute(self) -> &'static str {
        match self {
            Self::Telmate => "vmid",
            Self::Bpg => "vm_id",
        }
    }
}
