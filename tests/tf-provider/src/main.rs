//! `terraform-provider-proxmox`: a Terraform provider (plugin protocol v6) for tests,
//! imitating `telmate/proxmox` (`proxmox_vm_qemu`) and `bpg/proxmox`
//! (`proxmox_virtual_environment_vm`) against a Proxmox VE API — in practice the
//! simulated cluster of `cradle-sim`.
//!
//! Contract: started by Terraform (through `dev_overrides`), it prints go-plugin's
//! handshake line and serves gRPC until Terraform stops it. Each resource reads its
//! flavour's credentials from the environment ([`creds`]), calls the API as the real
//! provider does ([`api`], [`vm`]), and reports every failure as a diagnostic naming
//! the call and PVE's answer. The token is never logged nor put in a diagnostic.

mod api;
mod bpg;
mod common;
mod creds;
mod provider;
mod resource;
mod telmate;
mod vm;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tf_provider::serve("proxmox", provider::ProxmoxProvider).await
}
