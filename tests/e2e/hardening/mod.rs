//! Hardening tests (issue 8): one module per area, one test binary. Each test
//! names the hole it closes and fails if the fix is reverted.

mod budget;
mod integration;
mod lock_ssh;
mod network;
mod proxmox;
mod reliability;
mod terraform;
