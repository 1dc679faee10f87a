//! Hardening: proxmox.
