//! LXC containers as guests: the identity pve-container's setup writes at create (an
//! ed25519 SSH host key, root's authorized keys, the host name, the network of the
//! `netN` entries), and the container's sshd when it runs.
//!
//! Contract: [`identity`] generates a real ed25519 host key (OpenSSH text) and the
//! `Creating SSH host key ...` / `done: SHA256:<fp> root@<host>` lines pve-container's
//! `PVE::LXC::Setup::rewrite_ssh_host_keys` prints, for that very key, so the log names
//! the key the container's sshd presents. [`boot`] starts that sshd on the first static
//! IPv4 address of the container's NICs (port `guest_ssh_port`) `timings.boot_ssh` after
//! power-on; root logs in with exactly the keys given at create. No cloud-init. A
//! `netN` with `ip=dhcp` asks the cluster's DHCP server at boot (`super::dhcp`) and,
//! without a static address, sshd binds the lease. A container without a usable
//! address (no lease, outside `guest_subnet`) runs without sshd.

use std::sync::Arc;
use std::time::Duration;

use crate::model::{GuestDisk, GuestLink, GuestNet, GuestRoute, Vm, ct};
use crate::sim::{Sim, lock};

/// What the create task writes into the container's root filesystem.
pub struct CtIdentity {
    /// The disk state (host key, root's keys, host name, address, network).
    pub disk: GuestDisk,
    /// The task log lines of the host key generation.
    pub log: Vec<String>,
}

/// The container's identity from its config and the `ssh-public-keys` given at
/// create. `Err` = a key could not be generated (the create task fails with it).
pub fn identity(
    config: &std::collections::BTreeMap<String, String>,
    keys: &[String],
    vmid: u32,
) -> Result<CtIdentity, String> {
    let hostname = config.get("hostname").cloned().unwrap_or_else(|| format!("CT{vmid}"));
    // `rewrite_ssh_host_keys`: the comment is `root@<hostname without domain>`.
    let short = hostname.split('.').next().unwrap_or(&hostname).to_string();
    let host_key = super::keys::generate_ed25519_openssh()?;
    let private = russh::keys::PrivateKey::from_openssh(&host_key).map_err(|e| e.to_string())?;
    let fp = private.public_key().fingerprint(russh::keys::HashAlg::Sha256);
    let log = vec![
        "Creating SSH host key 'ssh_host_ed25519_key' - this may take some time ...".to_string(),
        format!("done: {fp} root@{short}"),
    ];
    let mut disk = GuestDisk {
        host_key: Some(host_key),
        hostname: Some(hostname),
        instance_id: Some(format!("lxc-{vmid}")),
        ..GuestDisk::default()
    };
    disk.authorized.insert("root".into(), keys.to_vec());
    disk.net = network(config);
    disk.address = ct::first_ipv4(config).map(|(_, ip, _, _)| ip);
    Ok(CtIdentity { disk, log })
}

/// The network the container's `netN` entries configure (what `ip` shows inside).
pub fn network(config: &std::collections::BTreeMap<String, String>) -> GuestNet {
    let mut net = GuestNet::default();
    let mut keys: Vec<(u32, &String)> = config
        .iter()
        .filter(|(k, _)| k.starts_with("net") && ct::is_config_key(k))
        .filter_map(|(k, v)| k[3..].parse().ok().map(|n| (n, v)))
        .collect();
    keys.sort();
    for (_, v) in keys {
        let p: std::collections::BTreeMap<String, String> = crate::model::props::split_props(v).into_iter().collect();
        let name = p.get("name").cloned().unwrap_or_else(|| "eth0".into());
        let mut addresses = Vec::new();
        for k in ["ip", "ip6"] {
            if let Some(a) = p.get(k).filter(|a| a.contains('/')) {
                addresses.push(a.clone());
            }
        }
        for gw in ["gw", "gw6"] {
            if let Some(g) = p.get(gw).and_then(|g| g.parse().ok()) {
                net.routes.push(GuestRoute { gateway: g, dev: name.clone() });
            }
        }
        net.links.push(GuestLink { name, addresses });
    }
    net
}

/// Boot a container's userland (its sshd), from the identity in its state.
pub fn boot(sim: &Arc<Sim>, vmid: u32) -> Result<(), String> {
    let (disk, name, dhcp_nics) = {
        let st = lock(&sim.state);
        let vm: &Vm = st.vms.get(&vmid).ok_or_else(|| format!("CT {vmid} does not exist"))?;
        (vm.disk.clone(), vm.name(), super::dhcp::nics(vm))
    };
    let key = disk
        .host_key
        .as_deref()
        .and_then(|k| russh::keys::PrivateKey::from_openssh(k).ok())
        .ok_or_else(|| format!("CT {vmid} has no usable SSH host key"))?;
    let authorized = disk
        .authorized
        .iter()
        .map(|(u, ks)| (u.clone(), ks.iter().filter_map(|k| russh::keys::PublicKey::from_openssh(k).ok()).collect()))
        .collect();
    let ident = super::GuestIdent {
        authorized,
        ssh_config: Arc::new(super::ssh::server_config(key)),
        has_datasource: false,
        invalid_user_data: false,
        container: true,
        windows: super::windows::WinBoot::No,
        appliance: false,
    };
    let hostname = disk.hostname.clone().unwrap_or(name);
    let leases = super::dhcp::acquire(sim, vmid, &dhcp_nics, &hostname, true);
    let net = super::BootNet::new(disk.address, leases);
    super::boot(sim, vmid, Arc::new(ident), hostname, net, false, Duration::ZERO);
    Ok(())
}

/// The `/etc/os-release` of the simulated guests and containers (Debian 12).
pub const OS_RELEASE: &str = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\n\
VERSION_ID=\"12\"\nVERSION=\"12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n\
HOME_URL=\"https://www.debian.org/\"\nSUPPORT_URL=\"https://www.debian.org/support\"\n\
BUG_REPORT_URL=\"https://bugs.debian.org/\"\n";
