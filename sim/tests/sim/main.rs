//! The simulator's own tests, one test binary: its API against the Proxmox VE
//! reference, its faults, its guests' SSH (with the real OpenSSH client), the
//! Python client proxmoxer against it, and its state on disk.

mod common;

mod agent;
mod api;
mod conformance;
mod create;
mod faults;
mod hotplug;
mod import_disk;
mod lxc;
mod move_disk;
mod node_disk;
mod openssh;
mod proxmoxer;
mod pve_clone;
mod pve_tasks;
mod pve_texts;
mod pve_workers;
mod ssh;
mod state;
mod upload;
mod windows;
