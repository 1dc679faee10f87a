//! `cloudinit::*` for workflow scripts: the guest's first-boot scaffolding.
//!
//! - `cloudinit::upload_snippets(vm, node)` checks that the snippet storage
//!   accepts snippets, generates the guest's SSH host key on the control node,
//!   renders user-data / network-data / meta-data, and uploads them over SSH to
//!   the snippet directory of `node` (the node that will start the VM). It
//!   returns `#{user, network, meta, host_key}`: volume ids for `cicustom` and
//!   the PUBLIC host key to pin. The private key never enters the script.
//!   Before the first upload it writes the VM's creation record
//!   ([`crate::caps::creation`]); while that record exists a rerun reuses its
//!   key, so the snippets are byte-identical and the pinned key stays valid
//!   The same record reserves the VMID of a host whose VMID was probed
//!   (`cloudinit::reserve(vm, node)`, `cloudinit::reserved_vmids()`): PVE's
//!   nextid reserves nothing, so allocators on this control node skip VMIDs
//!   that a record holds until the clone has taken them;
//!   `cloudinit::release(vm)` drops a reservation no VM has taken (a
//!   creation that failed its preflight).
//! - `cloudinit::creation(vm)` is that record without the private key
//!   (`#{vmid, node, host_key, written}`), or `()`: "the creation stage of this
//!   VM started and did not finish".
//! - `cloudinit::delete_snippets(vm, node)` removes the snippets from the node,
//!   then the creation record (end of finalization).
//! - `cloudinit::wait_done(target, timeout_ms, attempts, interval_ms)` polls
//!   `cloud-init status --format=json` with a per-command timeout and a bounded
//!   number of attempts (separate bounds) and throws unless it ends `done`.
//!
//! Every remote step goes through the `proxmox` and `ssh` adapters, so it is
//! checked against `[workflow.grants.*]` and journaled. Every creation-record
//! access goes through the same guard as the `checkpoint` capability (the
//! record lives with the checkpoints and holds the guest's private key): a
//! VM's record only for a VM of the run (`creation-read`, `-begin`,
//! `-clear`), the reserved VMIDs of all records as `creation-reservations`.

use std::net::IpAddr;
use std::time::Duration;

use rhai::serde::to_dynamic;
use rhai::{Dynamic, FuncRegistration, ImmutableString, Map, Module, NativeCallContext};
use serde::Serialize;

use crate::caps::Call;
use crate::caps::checkpoint::scope::CheckpointCall;
use crate::caps::context::CapCtx;
use crate::caps::creation::{Creation, CreationError, CreationStore};
use crate::caps::script::{Res, caps, throw, to_map, wit_throw, with_run};
use crate::caps::ssh::rhai::target;
use crate::cloudinit::status::{Verdict, verdict};
use crate::cloudinit::{Cidr, HostKey, Interface, ManagementUser, NetworkData, UserData, render_all, snippet_names};
use crate::contract::bindings::cradle::host::{proxmox, ssh};
use crate::contract::{CapError, ErrorKind};

pub(crate) const DEFAULT_SNIPPET_STORAGE: &str = "local";

fn invalid(msg: String) -> Box<rhai::EvalAltResult> {
    throw(CapError::invalid(msg))
}

pub(crate) fn str_of(map: &Map, key: &str, what: &str) -> Res<String> {
    map.get(key)
        .ok_or_else(|| invalid(format!("{what}: missing `{key}`")))?
        .clone()
        .into_string()
        .map_err(|t| invalid(format!("{what}: `{key}` must be a string, got {t}")))
}

pub(crate) fn opt_str(map: &Map, key: &str) -> Option<String> {
    map.get(key).and_then(|v| v.clone().into_string().ok())
}

fn strings(map: &Map, key: &str) -> Vec<String> {
    map.get(key)
        .and_then(|v| v.clone().into_array().ok())
        .map(|a| a.into_iter().filter_map(|v| v.into_string().ok()).collect())
        .unwrap_or_default()
}

/// The snippet directory of `storage` on the node, failing closed when the
/// storage does not take snippets.
fn snippet_dir(caps: &mut CapCtx, storage: &str) -> Res<String> {
    let def = proxmox::Host::storage_info(caps, storage.to_string()).map_err(wit_throw)?;
    if !def.content.iter().any(|c| c == "snippets") {
        return Err(invalid(format!(
            "storage `{storage}` does not accept snippets (content: {}); enable `snippets` on it in Datacenter → Storage, or set vms_snippet_storage",
            def.content.join(",")
        )));
    }
    let path = def
        .path
        .ok_or_else(|| invalid(format!("storage `{storage}` has no path; snippets need a directory storage")))?;
    Ok(format!("{}/snippets", path.trim_end_matches('/')))
}

fn node_target(ctx: &NativeCallContext, node: &str) -> Res<ssh::Target> {
    let access = with_run(ctx, |d| d.services.nodes.get(node).cloned())?;
    let n = access.ok_or_else(|| {
        invalid(format!("no SSH address for node `{node}`: set it under [clusters.NAME.node_ssh] in cradle.toml"))
    })?;
    Ok(ssh::Target { host: n.host, port: n.port, user: n.user })
}

fn creations(ctx: &NativeCallContext) -> Res<CreationStore> {
    with_run(ctx, |d| CreationStore::for_checkpoints(&d.services.checkpoints))
}

fn record_err(e: CreationError) -> CapError {
    let kind = if matches!(e, CreationError::Mismatch { .. }) { ErrorKind::Conflict } else { ErrorKind::Failed };
    CapError::new(kind, e.to_string())
}

/// One access to `vm_name`'s creation record (it holds the guest's private
/// host key) through the one guard: checked as the `checkpoint` capability
/// for that VM, journaled as `creation-<function>`.
fn with_record<T>(
    ctx: &NativeCallContext,
    c: &CapCtx,
    function: &str,
    vm_name: &str,
    work: impl FnOnce(&CreationStore) -> Result<T, CreationError>,
) -> Res<T> {
    let store = creations(ctx)?;
    c.guard(&format!("creation-{function}"), Call::Checkpoint(CheckpointCall::Vm { vm_name }), || {
        work(&store).map_err(record_err)
    })
    .map_err(throw)
}

fn vmid_of(vm: &Map, name: &str) -> Res<u32> {
    vm.get("spec")
        .and_then(|s| s.clone().try_cast::<Map>())
        .and_then(|s| s.get("vmid").and_then(|v| v.as_int().ok()))
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            invalid(format!("{name}: `spec.vmid` must be a VMID (the inventory's vms_vmid or base + index)"))
        })
}

/// `cloudinit::creation(vm)`: the creation record without its private key.
#[derive(Serialize)]
struct CreationView {
    vmid: u32,
    node: String,
    host_key: String,
    written: String,
}

fn creation(ctx: &NativeCallContext, vm: &Map) -> Res<Dynamic> {
    let name = str_of(vm, "name", "cloudinit::creation")?;
    let Some(rec) = with_record(ctx, &caps(ctx)?, "read", &name, |s| s.read(&name))? else {
        return Ok(Dynamic::UNIT);
    };
    to_dynamic(CreationView { vmid: rec.vmid, node: rec.node, host_key: rec.host_key_public, written: rec.written })
}

/// The VM's creation record: the stored one, or a new one with a host key
/// generated now, written durably before anything else happens (a rerun must
/// find the same key).
fn begin(ctx: &NativeCallContext, c: &mut CapCtx, vm: &Map, name: &str, node: &str) -> Res<Creation> {
    let vmid = vmid_of(vm, name)?;
    let fresh = match with_record(ctx, c, "read", name, |s| s.read(name))? {
        Some(rec) => rec,
        None => {
            let key = c.block_on(crate::caps::ssh::generate_host_key(&format!("cradle-{name}"))).map_err(throw)?;
            Creation {
                vm_name: name.to_string(),
                vmid,
                node: node.to_string(),
                host_key_public: key.public,
                host_key_private: key.private_openssh.expose().to_string(),
                written: String::new(),
            }
        }
    };
    with_record(ctx, c, "begin", name, |s| s.begin(Creation { vmid, ..fresh }))
}

fn reserve(ctx: &NativeCallContext, vm: &Map, node: &str) -> Res<Dynamic> {
    let name = str_of(vm, "name", "cloudinit::reserve")?;
    let mut c = caps(ctx)?;
    begin(ctx, &mut c, vm, &name, node)?;
    creation(ctx, vm)
}

/// Drop the reservation of a VMID this VM has not taken (its creation failed
/// before the clone); refused while a VM of this name holds that VMID.
fn release(ctx: &NativeCallContext, vm: &Map) -> Res<()> {
    let name = str_of(vm, "name", "cloudinit::release")?;
    let mut c = caps(ctx)?;
    let Some(rec) = with_record(ctx, &c, "read", &name, |s| s.read(&name))? else { return Ok(()) };
    let vms = proxmox::Host::list_vms(&mut c).map_err(wit_throw)?;
    if let Some(taken) = vms.iter().find(|v| v.vmid == rec.vmid && v.name.as_deref() == Some(name.as_str())) {
        return Err(throw(CapError::new(
            ErrorKind::Conflict,
            format!(
                "the creation record of {name} is not released: VM {} (VMID {}) exists; finish or remove it",
                taken.name.as_deref().unwrap_or("unnamed"),
                rec.vmid
            ),
        )));
    }
    with_record(ctx, &c, "clear", &name, |s| s.clear(&name))
}

/// The VMIDs every creation record on this control node reserves (only the
/// VMIDs leave the host), through the guard as [`CheckpointCall::Reservations`].
fn reserved_vmids(ctx: &NativeCallContext) -> Res<rhai::Array> {
    let store = creations(ctx)?;
    let vmids = caps(ctx)?
        .guard("creation-reservations", Call::Checkpoint(CheckpointCall::Reservations), || {
            store.list().map(|r| r.into_iter().map(|r| r.vmid).collect::<Vec<u32>>()).map_err(record_err)
        })
        .map_err(throw)?;
    Ok(vmids.into_iter().map(|v| Dynamic::from(i64::from(v))).collect())
}

pub(crate) fn interfaces(vm: &Map, name: &str) -> Res<Vec<Interface>> {
    let nics = vm.get("nics").and_then(|n| n.clone().into_array().ok()).unwrap_or_default();
    let mut out = Vec::new();
    for (i, nic) in nics.into_iter().enumerate() {
        let nic = nic.try_cast::<Map>().ok_or_else(|| invalid(format!("{name}: nics[{i}] must be a map")))?;
        let what = format!("{name}: nics[{i}]");
        let address = match opt_str(&nic, "address") {
            None => None,
            Some(a) => Some(a.parse::<Cidr>().map_err(|e| invalid(format!("{what}.address `{a}`: {e}")))?),
        };
        let ip = |s: String, field: &str| {
            s.parse::<IpAddr>().map_err(|_| invalid(format!("{what}.{field} `{s}` is not an IP address")))
        };
        let gateway = opt_str(&nic, "gateway").map(|g| ip(g, "gateway")).transpose()?;
        let nameservers =
            strings(&nic, "nameservers").into_iter().map(|n| ip(n, "nameservers")).collect::<Res<Vec<_>>>()?;
        out.push(Interface {
            name: opt_str(&nic, "guest_interface").unwrap_or_else(|| crate::cloudinit::DEFAULT_INTERFACE.to_string()),
            address,
            gateway,
            nameservers,
            search: strings(&nic, "search"),
            ..Interface::default()
        });
    }
    Ok(out)
}

/// The user-data inputs of `vm`: one builder for the upload and for the
/// preflight check of the inventory's values (`cradle::check_inputs`), so
/// the check accepts exactly what the upload renders.
pub(crate) fn user_data(ctx: &NativeCallContext, vm: &Map, name: &str, host_key: Option<HostKey>) -> Res<UserData> {
    let login = vm
        .get("ssh")
        .and_then(|s| s.clone().try_cast::<Map>())
        .ok_or_else(|| invalid(format!("{name}: missing `ssh` target")))?;
    let user_name = str_of(&login, "user", &format!("{name}: ssh"))?;
    let mut keys = with_run(ctx, |d| d.services.guest_keys.clone())?;
    keys.extend(strings(vm, "authorized_keys"));
    Ok(UserData {
        vm_name: name.to_string(),
        hostname: opt_str(vm, "hostname").unwrap_or_else(|| name.to_string()),
        fqdn: opt_str(vm, "fqdn"),
        user: ManagementUser::new(user_name, keys),
        keep_default_user: false,
        packages: strings(vm, "packages"),
        package_update: false,
        timezone: opt_str(vm, "timezone"),
        host_key,
    })
}

/// What `cloudinit::upload_snippets` returns: the volume ids for `cicustom`,
/// the public host key to pin and the node the snippets are on.
#[derive(Serialize)]
struct Uploaded<'a> {
    user: String,
    network: String,
    meta: String,
    host_key: String,
    node: &'a str,
}

fn upload_snippets(ctx: &NativeCallContext, vm: &Map, node: &str) -> Res<Map> {
    let name = str_of(vm, "name", "cloudinit::upload_snippets")?;
    let storage = opt_str(vm, "snippet_storage").unwrap_or_else(|| DEFAULT_SNIPPET_STORAGE.into());
    let mut c = caps(ctx)?;
    let dir = snippet_dir(&mut c, &storage)?;
    let node_ssh = node_target(ctx, node)?;
    let mut user = user_data(ctx, vm, &name, None)?;
    let record = begin(ctx, &mut c, vm, &name, node)?;
    user.host_key =
        Some(HostKey { ed25519_private: record.private_key(), ed25519_public: record.host_key_public.clone() });
    let network = NetworkData { vm_name: name.clone(), interfaces: interfaces(vm, &name)? };
    let rendered = render_all(&user, &network).map_err(|e| invalid(e.to_string()))?;
    let sudo = node_ssh.user != "root";
    for snippet in [&rendered.user, &rendered.network, &rendered.meta] {
        let path = format!("{dir}/{}", snippet.file_name);
        ssh::Host::upload(&mut c, node_ssh.clone(), path, snippet.content.as_bytes().to_vec(), 0o600, sudo)
            .map_err(wit_throw)?;
    }
    let volid = |f: &str| format!("{storage}:snippets/{f}");
    to_map(&Uploaded {
        user: volid(&rendered.user.file_name),
        network: volid(&rendered.network.file_name),
        meta: volid(&rendered.meta.file_name),
        host_key: record.host_key_public,
        node,
    })
}

fn delete_snippets(ctx: &NativeCallContext, vm: &Map, node: &str) -> Res<()> {
    let name = str_of(vm, "name", "cloudinit::delete_snippets")?;
    let storage = opt_str(vm, "snippet_storage").unwrap_or_else(|| DEFAULT_SNIPPET_STORAGE.into());
    let mut c = caps(ctx)?;
    let dir = snippet_dir(&mut c, &storage)?;
    let names = snippet_names(&name).map_err(|e| invalid(e.to_string()))?;
    let files: Vec<String> = [names.user, names.network, names.meta].iter().map(|f| format!("'{dir}/{f}'")).collect();
    // The snippets went to the node the creation record names; if the
    // inventory's node changed since, both are cleaned.
    let mut nodes = vec![node.to_string()];
    if let Some(rec) = with_record(ctx, &c, "read", &name, |s| s.read(&name))?
        && rec.node != node
    {
        nodes.push(rec.node);
    }
    for node in &nodes {
        let node_ssh = node_target(ctx, node)?;
        let sudo = if node_ssh.user == "root" { "" } else { "sudo -n " };
        let command = format!("{sudo}rm -f {}", files.join(" "));
        let out = ssh::Host::exec(&mut c, node_ssh, command, None, 30_000).map_err(wit_throw)?;
        if out.exit_code != Some(0) {
            return Err(throw(CapError::failed(format!(
                "removing the snippets of {name} from node {node} failed: {}",
                out.stderr.trim()
            ))));
        }
    }
    // Only now: the record's private key was in those files.
    with_record(ctx, &c, "clear", &name, |s| s.clear(&name))
}

/// What `cloudinit::wait_done` returns once cloud-init is done.
#[derive(Serialize)]
struct Done {
    status: &'static str,
    attempts: u32,
}

fn wait_done(ctx: &NativeCallContext, t: &Map, timeout_ms: i64, attempts: i64, interval_ms: i64) -> Res<Map> {
    let target = target(t, "cloudinit::wait_done")?;
    let (timeout, attempts, interval) =
        match (u64::try_from(timeout_ms), u32::try_from(attempts), u64::try_from(interval_ms)) {
            (Ok(t), Ok(a), Ok(i)) if a > 0 => (t, a, Duration::from_millis(i)),
            _ => {
                return Err(invalid(
                    "cloudinit::wait_done: timeout, attempts (≥ 1) and interval must be positive".into(),
                ));
            }
        };
    let mut last = String::from("no answer yet");
    for attempt in 1..=attempts {
        let answer =
            ssh::Host::exec(&mut caps(ctx)?, target.clone(), "cloud-init status --format=json".into(), None, timeout);
        match answer {
            Ok(out) => match verdict(out.exit_code, &out.stdout) {
                Verdict::Done => return to_map(&Done { status: "done", attempts: attempt }),
                Verdict::Running => last = "still running".into(),
                Verdict::Failed(why) => {
                    return Err(throw(CapError::failed(format!(
                        "{why}; the guest was NOT rebooted or marked complete: inspect `cloud-init status --long` on {}",
                        target.host
                    ))));
                }
            },
            // The guest may not answer yet; only transport trouble is retried.
            Err(e) => match CapError::from_wit(e) {
                err if err.kind == ErrorKind::Transient => last = err.message,
                err => return Err(throw(err)),
            },
        }
        if attempt < attempts {
            std::thread::sleep(interval);
        }
    }
    Err(throw(CapError::new(
        ErrorKind::Transient,
        format!(
            "cloud-init on {} did not finish after {attempts} checks ({last}); rerun to continue, or inspect `cloud-init status --long`",
            target.host
        ),
    )))
}

/// The `cloudinit` module.
pub fn module() -> Module {
    let mut m = Module::new();
    FuncRegistration::new("upload_snippets")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, node: ImmutableString| -> Res<Map> {
            upload_snippets(&ctx, &vm, &node)
        });
    FuncRegistration::new("reserve")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, node: ImmutableString| -> Res<Dynamic> {
            reserve(&ctx, &vm, &node)
        });
    FuncRegistration::new("release")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map| -> Res<()> { release(&ctx, &vm) });
    FuncRegistration::new("reserved_vmids")
        .set_into_module(&mut m, |ctx: NativeCallContext| -> Res<rhai::Array> { reserved_vmids(&ctx) });
    FuncRegistration::new("creation")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map| -> Res<Dynamic> { creation(&ctx, &vm) });
    FuncRegistration::new("delete_snippets")
        .set_into_module(&mut m, |ctx: NativeCallContext, vm: Map, node: ImmutableString| -> Res<()> {
            delete_snippets(&ctx, &vm, &node)
        });
    FuncRegistration::new("wait_done").set_into_module(
        &mut m,
        |ctx: NativeCallContext, t: Map, timeout_ms: i64, attempts: i64, interval_ms: i64| -> Res<Map> {
            wait_done(&ctx, &t, timeout_ms, attempts, interval_ms)
        },
    );
    m
}
