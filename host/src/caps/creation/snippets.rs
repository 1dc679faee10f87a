//! The creation service, snippet side: the guest's first-boot scaffolding,
//! from typed inputs ([`VmCreation`], [`GuestSettings`]) to typed outputs
//! ([`Uploaded`], [`Done`]), failing with [`CapError`].
//!
//! Contract:
//! - [`upload_snippets`] checks that the snippet storage accepts snippets
//!   (`proxmox::storage_info`), looks up the SSH login of the node
//!   (`services.nodes`), begins the VM's creation record (a stored one keeps
//!   its host key, so a rerun renders byte-identical snippets and the pinned
//!   key stays valid), renders user-data / network-data / meta-data
//!   ([`crate::cloudinit::render_all`]) and uploads them 0600 into the
//!   storage's `snippets/` directory (`ssh::upload`, with sudo unless the
//!   node login is root). It returns the `cicustom` volume ids and the PUBLIC
//!   host key; the private key goes only into the user-data snippet.
//! - [`delete_snippets`] removes the three snippets from the node and from the
//!   node the creation record names if that differs (`ssh::exec`, `rm -f`),
//!   then the record, which only then may go (its key was in those files).
//! - [`wait_done`] polls `cloud-init status --format=json` (`ssh::exec`) with
//!   a per-command timeout, at most `attempts` times, `interval` apart (scaled
//!   by the built-in simulator's `time_scale` when the guests are simulated:
//!   [`crate::caps::context::Services::scaled_wait`]), and succeeds only on
//!   `done` — from a cloud-init older than 23.4, whose status has no
//!   `recoverable_errors`, only once its log shows no warning either
//!   ([`crate::cloudinit::status::LOG_CHECK`]); only transport trouble
//!   (`transient`) is retried.
//! - Every remote step goes through the `proxmox` and `ssh` WIT adapters on
//!   [`CapCtx`] (checked against the caller's grants and journaled), every
//!   record access through [`super::service`]'s guard. The user-data a VM
//!   gets is [`GuestSettings::user_data`], which `cradle::check_inputs`
//!   renders too, so the preflight accepts exactly what the upload renders.
//!
//! Failure modes: a storage without `snippets` content or without a path, a
//! node with no SSH login in cradle.toml, or inputs the renderer refuses are
//! `invalid`; a failed `rm` is `failed` with its stderr; a status answer
//! [`crate::cloudinit::status::verdict`] judges failed (errors, degraded,
//! unreadable) is `failed` (the guest was not rebooted), still running or
//! unreachable after the last attempt `transient`; adapter and record errors
//! pass through.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::Serialize;

use super::service::{begin, with_record};
use crate::caps::context::CapCtx;
use crate::cloudinit::status::{LOG_CHECK, Verdict, log_verdict, reports_warnings, verdict};
use crate::cloudinit::{HostKey, Interface, NetworkData, render_all, snippet_names};
use crate::contract::bindings::cradle::host::{proxmox, ssh};
use crate::contract::{CapError, ErrorKind};

pub use super::guest::{DEFAULT_SNIPPET_STORAGE, GuestSettings};

/// One VM's creation inputs: what its record and snippets are made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmCreation {
    /// The canonical VM name (record and snippet file names).
    pub name: String,
    /// The VMID being created.
    pub vmid: u32,
    /// The node that will start the VM (where the snippets go).
    pub node: String,
    /// The storage whose `snippets/` directory takes the files.
    pub snippet_storage: String,
    /// User-data settings.
    pub guest: GuestSettings,
    /// Network-data, one entry per NIC.
    pub interfaces: Vec<Interface>,
}

/// What [`upload_snippets`] returns: the `cicustom` volume ids, the public
/// host key to pin and the node the snippets are on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Uploaded {
    /// `<storage>:snippets/<vm>-user.yaml`.
    pub user: String,
    /// `<storage>:snippets/<vm>-network.yaml`.
    pub network: String,
    /// `<storage>:snippets/<vm>-meta.yaml`.
    pub meta: String,
    /// The guest's public host key line.
    pub host_key: String,
    /// The node the snippets were uploaded to.
    pub node: String,
}

/// How [`wait_done`] polls.
#[derive(Debug, Clone, Copy)]
pub struct WaitBounds {
    /// Timeout of each `cloud-init status` command.
    pub timeout_ms: u64,
    /// How many times to ask.
    pub attempts: NonZeroU32,
    /// The pause between two attempts.
    pub interval: Duration,
}

/// What [`wait_done`] returns once cloud-init is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Done {
    /// Always `done`.
    pub status: &'static str,
    /// The attempt that saw it.
    pub attempts: u32,
}

/// The snippet directory of `storage` on the node, failing closed when the
/// storage does not take snippets.
fn snippet_dir(c: &mut CapCtx, storage: &str) -> Result<String, CapError> {
    let def = proxmox::Host::storage_info(c, storage.to_string()).map_err(CapError::from_wit)?;
    if !def.content.iter().any(|c| c == "snippets") {
        return Err(CapError::invalid(format!(
            "storage `{storage}` does not accept snippets (content: {}); enable `snippets` on it in Datacenter → Storage, or set vms_snippet_storage",
            def.content.join(",")
        )));
    }
    let path = def.path.ok_or_else(|| {
        CapError::invalid(format!("storage `{storage}` has no path; snippets need a directory storage"))
    })?;
    Ok(format!("{}/snippets", path.trim_end_matches('/')))
}

/// The SSH login of `node` from cradle.toml (`services.nodes`).
pub(crate) fn node_target(c: &CapCtx, node: &str) -> Result<ssh::Target, CapError> {
    node_target_of(&c.services, node)
}

/// [`node_target`] from the services alone.
pub(crate) fn node_target_of(services: &crate::caps::context::Services, node: &str) -> Result<ssh::Target, CapError> {
    let n = services.nodes.get(node).ok_or_else(|| {
        CapError::invalid(format!(
            "no SSH address for node `{node}`: set it under [clusters.NAME.node_ssh] in cradle.toml"
        ))
    })?;
    Ok(ssh::Target { host: n.host.clone(), port: n.port, user: n.user.clone() })
}

/// Render `vm`'s snippets with its recorded host key and upload them to its node.
pub fn upload_snippets(c: &mut CapCtx, vm: &VmCreation) -> Result<Uploaded, CapError> {
    let dir = snippet_dir(c, &vm.snippet_storage)?;
    let node_ssh = node_target(c, &vm.node)?;
    let record = begin(c, &vm.name, vm.vmid, &vm.node)?;
    let host_key = HostKey { ed25519_private: record.private_key(), ed25519_public: record.host_key_public.clone() };
    let user = vm.guest.user_data(&vm.name, &c.services.guest_keys, Some(host_key));
    let network = NetworkData { vm_name: vm.name.clone(), interfaces: vm.interfaces.clone() };
    let rendered = render_all(&user, &network).map_err(|e| CapError::invalid(e.to_string()))?;
    let sudo = node_ssh.user != "root";
    for snippet in [&rendered.user, &rendered.network, &rendered.meta] {
        let path = format!("{dir}/{}", snippet.file_name);
        ssh::Host::upload(c, node_ssh.clone(), path, snippet.content.as_bytes().to_vec(), 0o600, sudo)
            .map_err(CapError::from_wit)?;
    }
    let volid = |f: &str| format!("{}:snippets/{f}", vm.snippet_storage);
    Ok(Uploaded {
        user: volid(&rendered.user.file_name),
        network: volid(&rendered.network.file_name),
        meta: volid(&rendered.meta.file_name),
        host_key: record.host_key_public,
        node: vm.node.clone(),
    })
}

/// Remove `vm_name`'s snippets (in `storage`) from `node`, and from the node
/// its creation record names if that differs; then the record.
pub fn delete_snippets(c: &mut CapCtx, vm_name: &str, storage: &str, node: &str) -> Result<(), CapError> {
    let dir = snippet_dir(c, storage)?;
    let names = snippet_names(vm_name).map_err(|e| CapError::invalid(e.to_string()))?;
    let files: Vec<String> = [names.user, names.network, names.meta].iter().map(|f| format!("'{dir}/{f}'")).collect();
    // The snippets went to the node the creation record names; if the
    // inventory's node changed since, both are cleaned.
    let mut nodes = vec![node.to_string()];
    if let Some(rec) = with_record(c, "read", vm_name, |s| s.read(vm_name))?
        && rec.node != node
    {
        nodes.push(rec.node);
    }
    for node in &nodes {
        let node_ssh = node_target(c, node)?;
        let sudo = if node_ssh.user == "root" { "" } else { "sudo -n " };
        let command = format!("{sudo}rm -f {}", files.join(" "));
        let out = ssh::Host::exec(c, node_ssh, command, None, 30_000).map_err(CapError::from_wit)?;
        if out.exit_code != Some(0) {
            return Err(CapError::failed(format!(
                "removing the snippets of {vm_name} from node {node} failed: {}",
                out.stderr.trim()
            )));
        }
    }
    // Only now: the record's private key was in those files.
    with_record(c, "clear", vm_name, |s| s.clear(vm_name))
}

/// Poll cloud-init on `target` until it is done, within `bounds`.
pub fn wait_done(c: &mut CapCtx, target: &ssh::Target, bounds: WaitBounds) -> Result<Done, CapError> {
    let attempts = bounds.attempts.get();
    let mut last = String::from("no answer yet");
    for attempt in 1..=attempts {
        let command = "cloud-init status --format=json".to_string();
        match ssh::Host::exec(c, target.clone(), command, None, bounds.timeout_ms) {
            Ok(out) => match verdict(out.exit_code, &out.stdout) {
                Verdict::Done if reports_warnings(&out.stdout) => {
                    return Ok(Done { status: "done", attempts: attempt });
                }
                Verdict::Done => {
                    // cloud-init < 23.4: warnings are only in the log.
                    let log = ssh::Host::exec(c, target.clone(), LOG_CHECK.into(), None, bounds.timeout_ms)
                        .map_err(CapError::from_wit)?;
                    if let Verdict::Failed(why) = log_verdict(log.exit_code, &log.stdout, &log.stderr) {
                        return Err(CapError::failed(format!(
                            "{why}; the guest was NOT rebooted or marked complete: inspect /var/log/cloud-init.log on {}",
                            target.host
                        )));
                    }
                    return Ok(Done { status: "done", attempts: attempt });
                }
                Verdict::Running => last = "still running".into(),
                Verdict::Failed(why) => {
                    return Err(CapError::failed(format!(
                        "{why}; the guest was NOT rebooted or marked complete: inspect `cloud-init status --long` on {}",
                        target.host
                    )));
                }
            },
            // The guest may not answer yet; only transport trouble is retried.
            Err(e) => match CapError::from_wit(e) {
                err if err.kind == ErrorKind::Transient => last = err.message,
                err => return Err(err),
            },
        }
        if attempt < attempts {
            // The interval is a real guest's; a simulated one runs on the
            // simulator's clock (`Services::wait_scale`).
            std::thread::sleep(c.services.scaled_wait(bounds.interval));
        }
    }
    Err(CapError::new(
        ErrorKind::Transient,
        format!(
            "cloud-init on {} did not finish after {attempts} checks ({last}); rerun to continue, or inspect `cloud-init status --long`",
            target.host
        ),
    ))
}
