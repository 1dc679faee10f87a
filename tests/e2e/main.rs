//! cradle's end-to-end tests, one test binary: the real `cradle` binary or its
//! library against the simulated cluster and real services (OpenSSH, BIND,
//! cloud-init's schema check). One module per area; each module's docs say
//! what it proves. One binary links cradle (and wasmtime) once, not once per
//! area; nextest still runs every test in its own process.

mod builtin;
mod cli;
mod completions;
mod coordination;
mod crash;
mod crash_sequence;
mod crash_terraform;
mod grants;
mod hardening;
mod integration_plugins;
mod least_privilege;
mod lxc;
mod maintenance;
mod maintenance_crash;
mod maintenance_lab;
mod maintenance_move;
mod maintenance_terraform;
mod metrics;
mod netbox_pipeline;
mod netbox_real;
mod operator_papercuts;
mod plugin_kit;
mod post_provision;
mod progress_pty;
mod provision;
mod provision_dns;
mod proxmox_client;
mod qemu_guest;
mod reload;
mod runs_timeline;
mod sandbox;
mod scale;
mod serve;
mod serve_systemd;
mod sim_cli;
mod status_page;
mod terraform;
mod vm_types;
mod windows;
mod workflows;
