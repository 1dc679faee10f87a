//! Windows installed from ISO: what a VM without a cloud-init drive boots, decided at
//! every cold start from its CD-ROMs and its first disk.
//!
//! Contract: the boot disk is the first non-CD disk (by `boot: order=`, else ide,
//! scsi, virtio, sata by index). If that disk is marked as holding Windows
//! (`GuestDisk::windows_on`, persisted), Windows boots and the guest agent (when the
//! config enables it) answers `timings.boot_ssh` after power-on. Otherwise, if a CD-ROM
//! drive (`media=cdrom`) holds an ISO volume (`STORAGE:iso/F`), the disk is taken as
//! blank and the VM boots the ISO: with an `autounattend.xml` (case-insensitive) in the
//! root directory of an attached ISO (`crate::iso9660`) Windows Setup runs unattended
//! and, `timings.windows_install` after power-on (scaled), marks the disk and its agent
//! answers; without one (or without a disk) Setup waits for a user forever and the
//! agent never answers. A stop, a reset or a reboot during Setup loses the install
//! (a new boot starts Setup again). Without an ISO the VM is what it was before: an
//! appliance booting its disk (`guest/mod.rs`).
//!
//! OpenSSH for Windows ([`openssh`]): an answer file with a `<CommandLine>` naming
//! `OpenSSH.Server` (`Add-WindowsCapability -Online -Name OpenSSH.Server~~~~0.0.1.0`;
//! `<!-- … -->` comments are not read) installs it, so the installed Windows runs sshd — from the end of
//! Setup on, never during Setup — on its static address (the first
//! `<IpAddress …>A.B.C.D/N</IpAddress>`, `Microsoft-Windows-TCPIP`'s
//! `UnicastIpAddresses`), port `guest_ssh_port`. Its ed25519 host key is the OpenSSH
//! private key file whose base64 a `<CommandLine>` naming `ssh_host_ed25519_key`
//! decodes (`[Convert]::FromBase64String('…')`), else one sshd generates at the end of
//! Setup. Both are written to the disk (later boots keep them). No login is simulated:
//! the server presents its key (what `ssh-keyscan` reads) and accepts no user. Windows'
//! DHCP is not simulated: without a static address sshd is unreachable.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use base64::Engine as _;

use crate::model::{Vm, props};
use crate::sim::Sim;

/// How a VM's firmware boots it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WinBoot {
    /// Not a Windows boot: the disk's (Linux) appliance or cloud-init guest.
    No,
    /// Windows from the disk.
    Installed,
    /// Windows Setup from an ISO; `disk` is marked when it finishes (`None` = it never
    /// finishes: no answer file, or no disk to install to).
    Setup {
        /// The volid of the disk Setup installs to.
        disk: Option<String>,
        /// OpenSSH for Windows as the answer file installs it (`None`: not installed).
        ssh: Option<WinSsh>,
    },
}

/// OpenSSH for Windows as an answer file sets it up (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WinSsh {
    /// The static IPv4 address the answer file gives the NIC.
    pub address: Option<Ipv4Addr>,
    /// The ed25519 host key (OpenSSH private key text) the answer file installs.
    pub host_key: Option<String>,
}

/// The largest answer file read (Windows Setup's own limit is far above what one needs).
const ANSWER_LIMIT: u32 = 1 << 20;

/// `&lt;` and friends in element text, back to the characters.
fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

/// The first IPv4 address of an `<IpAddress …>A.B.C.D/N</IpAddress>` element.
fn static_ipv4(answer: &str) -> Option<Ipv4Addr> {
    let mut rest = answer;
    while let Some(i) = rest.find("<IpAddress") {
        let open = &rest[i..];
        let body = &open[open.find('>')? + 1..];
        let end = body.find("</IpAddress>")?;
        if let Ok(ip) = body[..end].trim().split('/').next().unwrap_or("").parse() {
            return Some(ip);
        }
        rest = &body[end..];
    }
    None
}

/// The host key a `<CommandLine>` naming `ssh_host_ed25519_key` writes from base64.
fn answer_host_key(answer: &str) -> Option<String> {
    const CALL: &str = "FromBase64String('";
    for part in answer.split("<CommandLine>").skip(1) {
        let cmd = xml_unescape(part.split("</CommandLine>").next().unwrap_or(""));
        if !cmd.contains("ssh_host_ed25519_key") {
            continue;
        }
        let Some(at) = cmd.find(CALL) else { continue };
        let b64 = &cmd[at + CALL.len()..];
        let b64 = &b64[..b64.find('\'').unwrap_or(b64.len())];
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else { continue };
        let Ok(text) = String::from_utf8(bytes) else { continue };
        if russh::keys::PrivateKey::from_openssh(&text).is_ok() {
            return Some(text);
        }
    }
    None
}

/// The answer file without its `<!-- … -->` comments.
fn without_comments(answer: &str) -> String {
    let mut out = String::with_capacity(answer.len());
    let mut rest = answer;
    while let Some(i) = rest.find("<!--") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("-->").map_or("", |end| &rest[i + end + 3..]);
    }
    out.push_str(rest);
    out
}

/// What the answer file says about OpenSSH for Windows; `None` when no `<CommandLine>`
/// installs it (comments say nothing).
pub fn openssh(answer: &str) -> Option<WinSsh> {
    let answer = without_comments(answer);
    let installs = answer
        .split("<CommandLine>")
        .skip(1)
        .any(|part| part.split("</CommandLine>").next().unwrap_or("").contains("OpenSSH.Server"));
    installs.then(|| WinSsh { address: static_ipv4(&answer), host_key: answer_host_key(&answer) })
}

fn is_cd(v: &str) -> bool {
    props::prop(v, "media").as_deref() == Some("cdrom") || v.contains("cloudinit")
}

/// The first non-CD disk: its volid.
pub fn boot_disk(config: &BTreeMap<String, String>) -> Option<String> {
    let disk = |k: &str| {
        props::is_drive_key(k)
            && !k.starts_with("efidisk")
            && !k.starts_with("tpmstate")
            && !k.starts_with("unused")
            && config.get(k).is_some_and(|v| !is_cd(v) && v.split(',').next().is_some_and(|vol| vol.contains(':')))
    };
    let ordered = config
        .get("boot")
        .and_then(|b| props::prop(b, "order"))
        .and_then(|o| o.split(';').find(|k| disk(k)).map(str::to_string));
    let key = ordered.or_else(|| {
        let rank = |k: &str| {
            let (p, n) = k.split_at(k.find(|c: char| c.is_ascii_digit()).unwrap_or(k.len()));
            let r = ["ide", "scsi", "virtio", "sata"].iter().position(|x| *x == p).unwrap_or(9);
            (r, n.parse::<u32>().unwrap_or(0))
        };
        config.keys().filter(|k| disk(k)).min_by_key(|k| rank(k)).cloned()
    })?;
    config.get(&key).and_then(|v| v.split(',').next()).map(str::to_string)
}

/// The real files of the ISOs in the VM's CD-ROM drives, on the VM's node.
fn attached_isos(sim: &Sim, vm: &Vm) -> Vec<std::path::PathBuf> {
    vm.config
        .iter()
        .filter(|(k, v)| props::is_drive_key(k) && props::prop(v, "media").as_deref() == Some("cdrom"))
        .filter_map(|(_, v)| {
            let vol = v.split(',').next()?;
            let (sid, name) = vol.split_once(':')?;
            let file = name.strip_prefix("iso/").filter(|f| !f.contains('/') && !f.starts_with('.'))?;
            Some(sim.storage_dir(&vm.node, sid)?.join("template/iso").join(file))
        })
        .collect()
}

/// What the VM boots now (its config with pending changes applied).
pub fn plan(sim: &Sim, vm: &Vm) -> WinBoot {
    let disk = boot_disk(&vm.config);
    if disk.is_some() && disk == vm.disk.windows_on {
        return WinBoot::Installed;
    }
    let isos = attached_isos(sim, vm);
    if isos.is_empty() {
        return WinBoot::No;
    }
    // Setup reads the first answer file it finds.
    let answer = isos.iter().find_map(|f| crate::iso9660::read_root_file(f, "autounattend.xml", ANSWER_LIMIT).ok()?);
    let ssh = answer.as_deref().and_then(|a| openssh(&String::from_utf8_lossy(a)));
    WinBoot::Setup { disk: disk.filter(|_| answer.is_some()), ssh }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_file_naming_openssh_server_gives_its_static_address_and_host_key() {
        let key = crate::guest::keys::generate_ed25519_openssh().unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&key);
        let answer = format!(
            "<UnicastIpAddresses><IpAddress wcm:action=\"add\" wcm:keyValue=\"1\">10.0.50.11/24</IpAddress>\
             </UnicastIpAddresses><CommandLine>powershell -Command \"Add-WindowsCapability -Online -Name \
             OpenSSH.Server~~~~0.0.1.0\"</CommandLine><CommandLine>powershell -Command \"[IO.File]::WriteAllBytes(\
             &apos;C:\\ProgramData\\ssh\\ssh_host_ed25519_key&apos;, [Convert]::FromBase64String(&apos;{b64}&apos;))\"\
             </CommandLine>"
        );
        let ssh = openssh(&answer).expect("installs OpenSSH");
        assert_eq!(ssh.address, Some(Ipv4Addr::new(10, 0, 50, 11)));
        assert_eq!(ssh.host_key.as_deref(), Some(key.as_str()));
        // Without a key or an address: sshd generates one, and has no address.
        let bare = openssh("<CommandLine>Add-WindowsCapability -Name OpenSSH.Server</CommandLine>").unwrap();
        assert_eq!(bare, WinSsh { address: None, host_key: None });
        assert_eq!(openssh("<unattend/>"), None, "no OpenSSH without OpenSSH.Server");
        let commented = "<!-- <CommandLine>Add-WindowsCapability -Name OpenSSH.Server</CommandLine> --><x/>";
        assert_eq!(openssh(commented), None, "a comment installs nothing");
    }
}
