//! The capability registry: one line per capability, and everything that
//! used to be listed by hand generated from it.
//!
//! A line names the [`Capability`] variant, the capability's folder
//! (`caps/<folder>/`, whose name is also the WIT interface name, the grant
//! section key and, where it has one, the Rhai module's name), the grant
//! section type and the call type its `scope.rs` defines, and `rhai NAME`
//! when workflows import its `rhai.rs` module as `NAME`. Its doc comment is
//! the doc of the generated variant and field. From the lines,
//! `capabilities!` (in `registry/expand.rs`) generates:
//!
//! - [`Capability`] (+ [`Capability::ALL`], [`Capability::name`]);
//! - [`Grants`]: one `#[serde(default)] Option<...Grant>` field per granted
//!   capability (`deny_unknown_fields`, plus `builtin_defaults`),
//!   [`Grants::allows`], [`Grants::validate`] (each section's
//!   [`Grant::validate`]) and the dispatch to each capability's own rules
//!   that [`policy::check`] runs after the shared ones;
//! - [`Call`]: one variant per capability, wrapping its call type, and
//!   [`Call::capability`];
//! - [`script_modules`]: the Rhai modules of `script::modules()`.
//!
//! `always` holds the capabilities every caller has (no grant section, no
//! rules: `log`). `scripts` holds the Rhai modules that are no capability:
//! `cloudinit` (the `creation` folder: creation records and snippets, whose
//! calls are checked as `checkpoint`, `proxmox` and `ssh` calls), `disk_image`
//! (a VM type's disk image, staged through `proxmox` and `ssh` calls) and the
//! script glue `cradle` and `guestnet`; a line names the module function.
//!
//! Adding a capability: docs/ARCHITECTURE.md, "Adding a capability".
//!
//! [`Grant`]: super::policy::Grant
//! [`Grant::validate`]: super::policy::Grant::validate
//! [`policy::check`]: super::policy::check

#[macro_use]
mod expand;

capabilities! {
    always {
        /// Structured events and progress; always granted.
        Log = log(LogCall), rhai log;
    }
    granted {
        /// The Proxmox VE API.
        Proxmox = proxmox(ProxmoxGrant, ProxmoxCall<'a>), rhai proxmox;
        /// SSH to guests and nodes.
        Ssh = ssh(SshGrant, SshCall<'a>), rhai ssh;
        /// DNS records.
        Dns = dns(DnsGrant, DnsCall<'a>), rhai dns;
        /// DHCP reservations (a fixed address for a MAC) in granted subnets.
        Dhcp = dhcp(DhcpGrant, DhcpCall<'a>), rhai dhcp;
        /// Post-provision tasks (Semaphore task templates) of granted
        /// projects and templates. Its script module is `post_task`:
        /// workflows import `lib/post` as `post`, which would shadow it.
        Post = post(PostGrant, PostCall), rhai post_task;
        /// Workflow locks.
        Lock = lock(LockGrant, LockCall<'a>), rhai lock;
        /// Finalization checkpoints of the run's VMs (and the creation records'
        /// VMID reservations).
        Checkpoint = checkpoint(CheckpointGrant, CheckpointCall<'a>), rhai checkpoint;
        /// Terraform in host-owned module directories.
        Terraform = terraform(TerraformGrant, TerraformCall<'a>);
        /// Outbound HTTP to named endpoints.
        Http = http(HttpGrant, HttpCall<'a>), rhai http;
        /// NetBox, typed: VMs, interfaces, MACs, statuses, journal entries.
        /// Its script module is `netbox_api`: workflows import `lib/netbox`
        /// as `netbox`, which would shadow it.
        Netbox = netbox(NetboxGrant, NetboxCall<'a>), rhai netbox_api;
    }
    scripts {
        cloudinit = creation::rhai::module;
        disk_image = image::rhai::module;
        cradle = script::cradle::module;
        guestnet = script::guestnet::module;
        maintenance = maintenance::rhai::module;
    }
}
