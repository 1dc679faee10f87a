//! Simulated guests: boot from the NoCloud seed, an SSH server on the address the
//! network-data gives, cloud-init progress over time, boot IDs, reboots.
//!
//! Contract: a cold start reads the `cicustom` snippets from the snippet directory of
//! the node the VM is on (missing or over 1 MiB ⇒ the start fails); without `cicustom`
//! the seed is generated from `ciuser`/`sshkeys`/`ipconfig0` as PVE does. Each boot has
//! a fresh boot ID; sshd comes up `boot_ssh` after power-on and cloud-init finishes
//! `cloud_init` later on the first boot of an instance (at once on later boots). An
//! in-guest reboot does not re-read snippets nor apply pending changes. A VM booted
//! without a cloud-init drive and never given an identity (an appliance from an image)
//! has no sshd; its host name is the VM's `name`, its guest agent (when the config
//! enables one) answers from `boot_ssh` after power-on until it stops, and its address
//! and web UI are what `SimConfig::appliance` gives it (none by default; [`http`]).
//! An interface network-data configures with DHCP asks the cluster's DHCP server at
//! every boot ([`dhcp`]); the guest's address is its static one, else its lease.
//! One tokio task per guest (the accept loop) plus one per open connection; no threads.

mod cloudinit;
mod commands;
pub mod dhcp;
pub mod http;
pub mod keys;
pub mod lxc;
mod net_cmd;
mod node_cmd;
mod node_fs_cmd;
pub mod qemu;
mod qm_cmd;
mod scp;
mod ssh;
mod upload;
pub mod windows;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

pub use cloudinit::{CiOutcome, CiSeed};
pub use ssh::{fired, spawn_node_sshd};

use crate::faults::FaultKind;
use crate::model::{Vm, ids, props};
use crate::sim::{Sim, lock};

/// The instance-id of cloud-init's DataSourceNone fallback.
pub const DATASOURCE_NONE_IID: &str = "iid-datasource-none";

/// Per-file limit PVE enforces on cicustom snippets.
pub const SNIPPET_LIMIT: u64 = 1024 * 1024;

/// What a running guest is, for its SSH server and the agent.
pub struct GuestRuntime {
    /// Boot generation (bumped on every boot, to ignore stale sessions).
    pub generation: u64,
    /// `/proc/sys/kernel/random/boot_id` of this boot.
    pub boot_id: String,
    /// Unix time of this boot.
    pub boot_unix: u64,
    /// When sshd accepts connections.
    pub ssh_up_at: Instant,
    /// When cloud-init reaches its final status.
    pub ci_done_at: Instant,
    /// Cloud-init's final status of this boot.
    pub ci: CiOutcome,
    /// Down for good (a reboot that hangs).
    pub hung: bool,
    /// Between an in-guest reboot and the next boot.
    pub down: bool,
    /// The address sshd actually bound (port 0 resolves here).
    pub ssh_addr: Option<SocketAddr>,
    /// Hostname.
    pub hostname: String,
    /// Address from network-data (static), else from DHCP.
    pub address: Option<Ipv4Addr>,
    /// This boot's DHCP leases.
    pub leases: Vec<dhcp::GuestLease>,
    /// Windows Setup of this boot has finished (the agent answers from then on).
    pub install_done: bool,
    /// Shared identity for reboots.
    ident: Arc<GuestIdent>,
    /// Ends this boot's sshd and sessions when dropped or set.
    cancel: watch::Sender<bool>,
}

/// Identity that survives in-guest reboots.
pub struct GuestIdent {
    /// Authorized keys per user.
    pub authorized: BTreeMap<String, Vec<russh::keys::PublicKey>>,
    /// sshd config with the host key.
    pub ssh_config: Arc<russh::server::Config>,
    /// Whether a datasource was present at the last cold start.
    pub has_datasource: bool,
    /// User-data invalid (degraded each boot).
    pub invalid_user_data: bool,
    /// An LXC container: no cloud-init, the host's kernel, up as soon as sshd is.
    pub container: bool,
    /// Windows from the disk or Windows Setup from an ISO (`windows.rs`).
    pub windows: windows::WinBoot,
    /// An appliance booted from its image: no sshd; a web UI when
    /// `SimConfig::appliance` gives it an address and a port ([`http`]).
    pub appliance: bool,
}

fn read_snippet(sim: &Sim, node: &str, volid: &str) -> Result<String, String> {
    let (storage, volname) = volid.split_once(':').ok_or_else(|| format!("unable to parse volume ID '{volid}'"))?;
    let spec = sim
        .cfg
        .storages
        .iter()
        .find(|s| s.id == storage)
        .ok_or_else(|| format!("storage '{storage}' does not exist"))?;
    let file = volname
        .strip_prefix("snippets/")
        .filter(|f| !f.contains('/') && !f.is_empty() && *f != "..")
        .ok_or_else(|| format!("{volid} is not in the snippets directory"))?;
    if !spec.content.split(',').any(|c| c == "snippets") {
        return Err(format!("storage '{storage}' does not support content-type 'snippets'"));
    }
    let dir = sim.storage_dir(node, storage).ok_or_else(|| format!("storage '{storage}' has no path"))?;
    let shown = format!("{}/snippets/{file}", spec.path.as_deref().unwrap_or(""));
    let path = dir.join("snippets").join(file);
    let md =
        std::fs::metadata(&path).map_err(|_| format!("unable to open file '{shown}' - No such file or directory"))?;
    if md.len() > SNIPPET_LIMIT {
        return Err(format!("file '{shown}' too long - aborting"));
    }
    std::fs::read_to_string(&path).map_err(|e| format!("unable to read file '{shown}' - {e}"))
}

fn generated_user_data(vm: &Vm) -> String {
    let mut s = format!("#cloud-config\nhostname: {}\nmanage_etc_hosts: true\n", vm.name());
    if let Some(u) = vm.config.get("ciuser") {
        s.push_str(&format!("user: {u}\n"));
    }
    if let Some(k) = vm.config.get("sshkeys") {
        let decoded = percent_encoding::percent_decode_str(k).decode_utf8_lossy().into_owned();
        s.push_str("ssh_authorized_keys:\n");
        for line in decoded.lines().filter(|l| !l.trim().is_empty()) {
            s.push_str(&format!("  - {}\n", line.trim()));
        }
    }
    s
}

/// PVE's `nocloud_network` (version 1): one `physical` entry per NIC with an
/// `ipconfigN`, named `ethN` and matched by its MAC (cloud-init renames the NIC).
fn generated_network(vm: &Vm) -> String {
    let mut s = String::from("version: 1\nconfig:\n");
    for (k, v) in vm.config.iter().filter(|(k, _)| k.starts_with("ipconfig")) {
        let idx = &k["ipconfig".len()..];
        let mac = vm
            .config
            .get(&format!("net{idx}"))
            .and_then(|n| props::split_props(n).into_iter().find(|(m, _)| props::NIC_MODELS.contains(&m.as_str())))
            .map(|(_, mac)| mac.to_lowercase())
            .unwrap_or_default();
        s.push_str(&format!(
            "    - type: physical\n      name: eth{idx}\n      mac_address: '{mac}'\n      subnets:\n"
        ));
        match props::prop(v, "ip") {
            Some(ip) if ip != "dhcp" => {
                s.push_str(&format!("      - type: static\n        address: '{ip}'\n"));
                if let Some(gw) = props::prop(v, "gw") {
                    s.push_str(&format!("        gateway: '{gw}'\n"));
                }
            }
            _ => s.push_str("      - type: dhcp4\n"),
        }
    }
    s
}

/// Build the NoCloud seed for a cold start on the VM's current node.
/// `Ok(None)` = no cloud-init drive; `Err` = the start fails with that text.
pub fn read_seed(sim: &Sim, vm: &Vm) -> Result<Option<CiSeed>, String> {
    let has_drive = vm.config.iter().any(|(k, v)| props::is_drive_key(k) && v.contains("-cloudinit"));
    if !has_drive {
        return Ok(None);
    }
    let custom: BTreeMap<String, String> =
        vm.config.get("cicustom").map(|c| props::split_props(c).into_iter().collect()).unwrap_or_default();
    let mut total = 0usize;
    let mut part = |kind: &str, fallback: &dyn Fn() -> String| -> Result<String, String> {
        match custom.get(kind) {
            Some(volid) => {
                let s = read_snippet(sim, &vm.node, volid)?;
                total += s.len();
                Ok(s)
            }
            None => Ok(fallback()),
        }
    };
    let user = part("user", &|| generated_user_data(vm))?;
    let network = part("network", &|| generated_network(vm))?;
    let vendor = part("vendor", &String::new)?;
    let meta_custom = part("meta", &String::new)?;
    if total as u64 >= 3 * SNIPPET_LIMIT {
        return Err("cloudinit snippets exceed the 3 MiB total limit".into());
    }
    // PVE's `nocloud_gen_metadata`: the instance-id is the SHA-1 of user-data and
    // network-data, and that line is the whole generated meta-data.
    let instance_id = {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
        ctx.update(user.as_bytes());
        ctx.update(network.as_bytes());
        hex::encode(ctx.finish().as_ref())
    };
    let meta = if meta_custom.is_empty() { format!("instance-id: {instance_id}\n") } else { meta_custom };
    Ok(Some(CiSeed { user, network, meta, vendor, instance_id }))
}

/// Power the guest on (cold start): apply the seed, pick the outcome, start sshd — or,
/// in guest mode `qemu`, boot the VM's qemu. `Err` = the start fails with that text.
pub fn power_on(sim: &Arc<Sim>, vmid: u32, seed: Option<CiSeed>) -> Result<(), String> {
    let prepared = {
        let mut st = lock(&sim.state);
        let Some(vm) = st.vms.get_mut(&vmid) else { return Ok(()) };
        let mut first_boot = false;
        if let Some(seed) = &seed {
            let mut id = cloudinit::parse_identity(seed);
            if let Some(k) = &id.host_key
                && russh::keys::PrivateKey::from_openssh(k).is_err()
            {
                // cloud-init's ssh module fails on a bad key: a fresh key, a degraded boot.
                id.host_key = None;
                id.invalid_user_data = true;
            }
            if vm.disk.instance_id.as_deref() != Some(seed.instance_id.as_str()) {
                first_boot = true;
                vm.disk.instance_id = Some(seed.instance_id.clone());
                // A new instance regenerates host keys unless user-data supplies one.
                vm.disk.host_key = id.host_key.clone();
            }
            vm.disk.authorized = id.authorized;
            vm.disk.hostname = id.hostname.or_else(|| Some(vm.name()));
            vm.disk.address = id.address;
            vm.disk.invalid_user_data = id.invalid_user_data;
            vm.disk.net = id.net;
            vm.disk.dhcp = dhcp::interfaces(&seed.network);
        }
        // No seed, and an image with `datasource_list: [NoCloud, None]` (fault
        // `datasource-none`): cloud-init falls back to DataSourceNone, which is a new
        // instance (`iid-datasource-none`), so it regenerates the host keys.
        let fallback = seed.is_none() && sim.faults.fire(FaultKind::DatasourceNone);
        if fallback && vm.disk.instance_id.as_deref() != Some(DATASOURCE_NONE_IID) {
            first_boot = true;
            vm.disk.instance_id = Some(DATASOURCE_NONE_IID.to_string());
            vm.disk.host_key = None;
        }
        if vm.disk.host_key.is_none() {
            vm.disk.host_key = keys::generate_ed25519_openssh().ok();
        }
        let win = if seed.is_none() { windows::plan(sim, vm) } else { windows::WinBoot::No };
        // Never named by cloud-init (no seed now or before, no DataSourceNone) and not
        // Windows: an appliance from an image.
        let appliance = seed.is_none() && vm.disk.instance_id.is_none() && matches!(win, windows::WinBoot::No);
        let disk = vm.disk.clone();
        let qemu_vm = qemu::settings(sim, vmid).map(|_| vm.clone());
        let name = vm.config.get("name").cloned();
        let dhcp_nics = dhcp::nics(vm);
        sim.changed();
        (disk, first_boot, fallback, qemu_vm, name, win, dhcp_nics, appliance)
    };
    let (disk, first_boot, fallback, qemu_vm, name, win, dhcp_nics, appliance) = prepared;
    if let Some(vm) = qemu_vm {
        // The real guest keeps its own disk; the model above only remembers what
        // its cloud-init was given (the network the forward is planned from).
        return qemu::power_on(sim, &vm, &disk, seed.as_ref());
    }
    // An appliance booted from an image (no cloud-init ever named it) calls itself by
    // the VM's name; it has no sshd, only its guest agent and, when the simulator's
    // config gives it an address and a port, its web UI answer.
    let hostname = disk.hostname.clone().or(name).unwrap_or_else(|| format!("vm{vmid}"));
    let leases = dhcp::acquire(sim, vmid, &dhcp_nics, &hostname, true);
    let Some(mut ident) = build_ident(&disk, seed.is_some() || fallback) else {
        tracing::warn!(vmid, "guest host key unusable; guest will not answer SSH");
        return Ok(());
    };
    ident.windows = win;
    ident.appliance = appliance;
    let address = if appliance { appliance_address(sim, &hostname) } else { disk.address };
    boot(sim, vmid, Arc::new(ident), hostname, BootNet::new(address, leases), first_boot, Duration::ZERO);
    Ok(())
}

/// The address `SimConfig::appliance` gives the appliance named `name`, if any.
fn appliance_address(sim: &Sim, name: &str) -> Option<Ipv4Addr> {
    sim.cfg.appliance.addresses.get(name).copied()
}

fn build_ident(disk: &crate::model::GuestDisk, has_datasource: bool) -> Option<GuestIdent> {
    let key = russh::keys::PrivateKey::from_openssh(disk.host_key.as_deref()?).ok()?;
    let authorized = disk
        .authorized
        .iter()
        .map(|(u, ks)| (u.clone(), ks.iter().filter_map(|k| russh::keys::PublicKey::from_openssh(k).ok()).collect()))
        .collect();
    Some(GuestIdent {
        authorized,
        ssh_config: Arc::new(ssh::server_config(key)),
        has_datasource,
        invalid_user_data: disk.invalid_user_data,
        container: false,
        windows: windows::WinBoot::No,
        appliance: false,
    })
}

/// A boot's network: the address sshd binds and the DHCP leases behind it.
pub(super) struct BootNet {
    address: Option<Ipv4Addr>,
    leases: Vec<dhcp::GuestLease>,
}

impl BootNet {
    /// The static address when there is one, else the first leased one.
    pub(super) fn new(static_address: Option<Ipv4Addr>, leases: Vec<dhcp::GuestLease>) -> Self {
        BootNet { address: static_address.or_else(|| leases.first().map(|l| l.ip)), leases }
    }
}

#[allow(clippy::too_many_arguments, reason = "one guest's boot facts, each used once; a struct would only be unpacked")]
fn boot(
    sim: &Arc<Sim>,
    vmid: u32,
    ident: Arc<GuestIdent>,
    hostname: String,
    net: BootNet,
    first_boot: bool,
    extra_delay: Duration,
) {
    let BootNet { address, leases } = net;
    let now = Instant::now();
    let ssh_up_at = now + extra_delay + sim.scaled(sim.cfg.timings.boot_ssh);
    let ci_time = match (first_boot, ident.has_datasource) {
        _ if ident.container => Duration::ZERO,
        (true, _) => sim.cfg.timings.cloud_init,
        // Later boots: cloud-init runs again (quickly); without a datasource the
        // generator disables it before sshd is up.
        (false, true) => sim.cfg.timings.cloud_init_later,
        (false, false) => Duration::ZERO,
    };
    let ci_done_at = ssh_up_at + sim.scaled(ci_time);
    let ci = if ident.container {
        CiOutcome::Done
    } else if !ident.has_datasource {
        CiOutcome::Disabled
    } else if first_boot && sim.faults.fire(FaultKind::CloudInitError) {
        CiOutcome::Error
    } else if ident.invalid_user_data || (first_boot && sim.faults.fire(FaultKind::CloudInitDegraded)) {
        CiOutcome::Degraded
    } else {
        CiOutcome::Done
    };
    let silent = sim.faults.fire(FaultKind::SshSilent);
    let hung = lock(&sim.hang_next_boot).remove(&vmid);
    let (cancel, cancel_rx) = watch::channel(false);
    let generation = {
        let mut guests = lock(&sim.guests);
        let generation = guests.get(&vmid).map(|g| g.generation + 1).unwrap_or(1);
        guests.insert(
            vmid,
            GuestRuntime {
                generation,
                boot_id: ids::random_uuid(),
                boot_unix: ids::now_unix() + extra_delay.as_secs(),
                ssh_up_at,
                ci_done_at,
                ci,
                hung,
                down: hung,
                ssh_addr: None,
                install_done: false,
                hostname,
                address,
                leases,
                ident: ident.clone(),
                cancel,
            },
        );
        generation
    };
    if hung {
        tracing::warn!(vmid, "guest boot hangs (fault reboot-hang); it will not answer");
        return;
    }
    if let windows::WinBoot::Setup { disk, ssh } = &ident.windows {
        // Setup runs no sshd; the installed system's OpenSSH starts when Setup is done.
        if let Some(disk) = disk.clone() {
            let openssh = ssh.clone();
            sim.after(sim.scaled(sim.cfg.timings.windows_install), move |sim| {
                windows_installed(sim, vmid, generation, disk, openssh);
            });
        }
        return;
    }
    let Some(ip) = address.filter(|a| sim.cfg.guest_subnet.contains(*a) && a.is_loopback()) else {
        tracing::warn!(vmid, ?address, "guest has no address inside the guest subnet; it is unreachable");
        return;
    };
    if ident.appliance {
        if let Some(port) = sim.cfg.appliance.http_port {
            http::spawn_appliance_http(
                sim.clone(),
                vmid,
                generation,
                SocketAddr::from((ip, port)),
                ssh_up_at,
                cancel_rx,
            );
        }
        return;
    }
    ssh::spawn_guest_sshd(
        sim.clone(),
        vmid,
        generation,
        SocketAddr::from((ip, sim.cfg.guest_ssh_port)),
        ident,
        ssh_up_at,
        cancel_rx,
        silent,
    );
}

/// Windows Setup of boot `generation` of `vmid` finished: `disk` holds Windows, with the
/// OpenSSH server the answer file installed (`openssh`), whose sshd starts now on the
/// answer file's address. Setup wiped the disk: its address, host key and keys are the
/// answer file's (persisted for later boots).
fn windows_installed(sim: &Arc<Sim>, vmid: u32, generation: u64, disk: String, openssh: Option<windows::WinSsh>) {
    // Only the boot that started Setup finishes it (a stop or reset loses it).
    let same = lock(&sim.guests).get(&vmid).is_some_and(|g| g.generation == generation && !g.down);
    if !same {
        return;
    }
    let address = openssh.as_ref().and_then(|o| o.address);
    let host_key = openssh.and_then(|o| o.host_key.or_else(|| keys::generate_ed25519_openssh().ok()));
    if let Some(vm) = lock(&sim.state).vms.get_mut(&vmid) {
        vm.disk.windows_on = Some(disk);
        vm.disk.address = address;
        vm.disk.authorized.clear();
        if host_key.is_some() {
            vm.disk.host_key = host_key.clone();
        }
    }
    sim.changed();
    let cancel = {
        let mut guests = lock(&sim.guests);
        let Some(g) = guests.get_mut(&vmid).filter(|g| g.generation == generation) else { return };
        g.install_done = true;
        g.address = address;
        g.cancel.subscribe()
    };
    let Some(key) = host_key.and_then(|k| russh::keys::PrivateKey::from_openssh(&k).ok()) else { return };
    let Some(ip) = address.filter(|a| sim.cfg.guest_subnet.contains(*a) && a.is_loopback()) else {
        tracing::warn!(vmid, ?address, "Windows' sshd has no address inside the guest subnet; it is unreachable");
        return;
    };
    let ident = GuestIdent {
        authorized: BTreeMap::new(),
        ssh_config: Arc::new(ssh::server_config(key)),
        has_datasource: false,
        invalid_user_data: false,
        container: false,
        windows: windows::WinBoot::Installed,
        appliance: false,
    };
    let addr = SocketAddr::from((ip, sim.cfg.guest_ssh_port));
    ssh::spawn_guest_sshd(sim.clone(), vmid, generation, addr, Arc::new(ident), Instant::now(), cancel, false);
}

/// Power the guest off (stop, shutdown, destroy): its sshd and sessions end (its
/// qemu is killed).
pub fn power_off(sim: &Sim, vmid: u32) {
    qemu::kill(sim, vmid);
    if let Some(g) = lock(&sim.guests).remove(&vmid) {
        let _ = g.cancel.send(true);
    }
}

/// An in-guest reboot (or reset): down for `downtime`, then a new boot without reading
/// snippets or applying pending changes. May hang for good (fault `reboot-hang`).
pub fn guest_reboot(sim: &Arc<Sim>, vmid: u32, downtime: Duration) {
    if qemu::is_running(sim, vmid) {
        let sim = sim.clone();
        tokio::spawn(async move {
            if let Err(e) = qemu::reset(&sim, vmid).await {
                tracing::warn!(vmid, "qemu reset: {e}");
            }
        });
        return;
    }
    let hang = sim.faults.fire(FaultKind::RebootHang);
    let (ident, hostname, generation) = {
        let mut guests = lock(&sim.guests);
        let Some(g) = guests.get_mut(&vmid) else { return };
        let _ = g.cancel.send(true);
        g.down = true;
        g.hung = hang;
        g.ssh_addr = None;
        (g.ident.clone(), g.hostname.clone(), g.generation)
    };
    if hang {
        return;
    }
    sim.after(downtime, move |sim| {
        let same = lock(&sim.guests).get(&vmid).is_some_and(|g| g.generation == generation && g.down);
        if same {
            // The disk's network comes up again: static addresses, and DHCP asks anew.
            let (static_address, nics) = {
                let st = lock(&sim.state);
                st.vms.get(&vmid).map(|vm| (vm.disk.address, dhcp::nics(vm))).unwrap_or_default()
            };
            let static_address = if ident.appliance { appliance_address(sim, &hostname) } else { static_address };
            let leases = dhcp::acquire(sim, vmid, &nics, &hostname, false);
            boot(sim, vmid, ident, hostname, BootNet::new(static_address, leases), false, Duration::ZERO);
        }
    });
}

/// The guest is going down (an in-guest `reboot` just answered): it takes no new
/// SSH session and reports no address, while the answering session closes.
pub fn going_down(sim: &Sim, vmid: u32) {
    if let Some(g) = lock(&sim.guests).get_mut(&vmid) {
        g.down = true;
        g.ssh_addr = None;
    }
}

/// Whether the guest is down for good (a hung reboot).
pub fn is_hung(sim: &Sim, vmid: u32) -> bool {
    lock(&sim.guests).get(&vmid).is_some_and(|g| g.hung)
}

/// What the guest agent reports, when it is up (`None` before `boot_ssh`, while
/// down, and during Windows Setup).
pub fn agent_view(sim: &Sim, vmid: u32) -> Option<AgentView> {
    let guests = lock(&sim.guests);
    let g = guests.get(&vmid)?;
    if g.down || g.hung || Instant::now() < g.ssh_up_at {
        return None;
    }
    let windows = match g.ident.windows {
        windows::WinBoot::No => false,
        windows::WinBoot::Installed => true,
        // Setup has no agent; once it finished, the installed Windows' agent answers.
        windows::WinBoot::Setup { .. } if g.install_done => true,
        windows::WinBoot::Setup { .. } => return None,
    };
    Some(AgentView { hostname: g.hostname.clone(), address: g.address, windows })
}

/// What a guest's agent knows about it.
#[derive(Debug, Clone)]
pub struct AgentView {
    /// Host name.
    pub hostname: String,
    /// Address from network-data.
    pub address: Option<Ipv4Addr>,
    /// Windows (else the Linux image).
    pub windows: bool,
}

/// The network a running guest shows (`ip`): what cloud-init installed on its disk,
/// plus this boot's DHCP leases. The state and guests locks are taken one at a time.
pub fn net_view(sim: &Sim, vmid: u32) -> crate::model::GuestNet {
    let installed = lock(&sim.state).vms.get(&vmid).map(|v| v.disk.net.clone()).unwrap_or_default();
    let leases = lock(&sim.guests).get(&vmid).map(|g| g.leases.clone()).unwrap_or_default();
    dhcp::with_leases(installed, &leases)
}

/// The address a guest's sshd is bound to, once up (a qemu guest's forward, from
/// the start on).
pub fn ssh_addr(sim: &Sim, vmid: u32) -> Option<SocketAddr> {
    qemu::ssh_addr(sim, vmid).or_else(|| lock(&sim.guests).get(&vmid).and_then(|g| g.ssh_addr))
}

/// Boot ID of the current boot (for tests and the library API); `None` for a qemu
/// guest (read it over SSH).
pub fn boot_id(sim: &Sim, vmid: u32) -> Option<String> {
    lock(&sim.guests).get(&vmid).filter(|g| !g.down).map(|g| g.boot_id.clone())
}
