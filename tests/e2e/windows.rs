//! Windows from an ISO with an answer file (issue 15), end to end: the
//! example `examples/windows` (type `windows`, VMID 400) against the simulated
//! cluster started in-process, whose "Windows setup" runs when an attached ISO
//! carries `autounattend.xml` and reports through the QEMU guest agent — or,
//! when the answer file installs OpenSSH for Windows, through that server's
//! host key at the answer file's static address (loopback subnet
//! 127.54.0.0/16, owned by this file: one address per test, as they run in
//! parallel). The answer ISO is cradle's own (an ISO 9660 + Joliet image it
//! builds).

use std::path::{Path, PathBuf};
use std::process::Command;

use cradle::provision::{Action, HostResult};
use cradle_tests::fixture::{
    Cluster, ProjectConfig, SimCluster, SimSession, Workflows, assert_ok, error_of, example_project, sim_vms, writes,
};

const INSTALLER: &str = "windows-server-2022.iso";
const DRIVERS: &str = "virtio-win.iso";

struct Example {
    dir: tempfile::TempDir,
}

impl Example {
    fn new() -> Example {
        let ex = Example { dir: example_project("windows") };
        ProjectConfig::new(Cluster::Sim(SimCluster::three_nodes(0.0)))
            .workflows(Workflows::Dir("workflows".into()))
            .write(ex.dir.path());
        ex
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("cradle.toml")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn run(&self, s: &SimSession, action: Action) -> Vec<HostResult> {
        s.run(&self.dir.path().join("inventory"), None, action, 1)
    }

    fn iso_dir(&self, s: &SimSession) -> PathBuf {
        s.project.sims.get("sim").expect("sim").node_path("pve1", "/var/lib/vz/template/iso")
    }

    fn isos(&self, s: &SimSession) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(self.iso_dir(s))
            .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Put these ISOs on pve1's `local` storage (an operator's upload). The
    /// simulator starts at a project's first run: a check, which changes nothing.
    fn upload(&self, s: &SimSession, isos: &[&str]) {
        if s.counts().is_none() {
            self.run(s, Action::Check);
        }
        std::fs::create_dir_all(self.iso_dir(s)).expect("iso dir");
        for iso in isos {
            std::fs::write(self.iso_dir(s).join(iso), vec![0u8; 32 << 10]).expect("iso");
        }
    }

    /// Replace `anchor` (which must be there) in the project's file `rel`.
    fn edit(&self, rel: &str, anchor: &str, with: &str) {
        let file = self.dir.path().join(rel);
        let text = std::fs::read_to_string(&file).expect("read");
        assert!(text.contains(anchor), "{rel} changed shape: no {anchor:?}");
        std::fs::write(file, text.replacen(anchor, with, 1)).expect("write");
    }

    /// Add YAML lines to the group's variables.
    fn group_vars(&self, lines: &str) {
        self.edit("inventory/group_vars/windows.yml", "vms_config:", &format!("{lines}\nvms_config:"));
    }

    fn checkpoints(&self) -> usize {
        std::fs::read_dir(self.state().join("checkpoints")).map(|d| d.count()).unwrap_or(0)
    }

    fn known_hosts(&self) -> String {
        std::fs::read_to_string(self.state().join("known_hosts")).unwrap_or_default()
    }

    /// The example's answer file also installs OpenSSH for Windows with the host
    /// key `private` (OpenSSH private key file) and gives the NIC the static
    /// `address`; the inventory reaches win-1 there.
    fn answer_installs_openssh(&self, private: &Path, address: &str) {
        let b64 = run(Command::new("base64").arg("-w0").arg(private));
        self.edit(
            "windows/autounattend.xml",
            "  <settings pass=\"specialize\">\n",
            &format!(
                r#"  <settings pass="specialize">
    <component name="Microsoft-Windows-TCPIP" processorArchitecture="amd64" publicKeyToken="31bf3856ad364e35" language="neutral" versionScope="nonSxS">
      <Interfaces>
        <Interface wcm:action="add" xmlns:wcm="http://schemas.microsoft.com/WMIConfig/2002/State">
          <Identifier>Ethernet</Identifier>
          <Ipv4Settings><DhcpEnabled>false</DhcpEnabled></Ipv4Settings>
          <UnicastIpAddresses><IpAddress wcm:action="add" wcm:keyValue="1">{address}/24</IpAddress></UnicastIpAddresses>
        </Interface>
      </Interfaces>
    </component>
"#
            ),
        );
        let command = |order: u32, line: &str| {
            format!(
                r#"        <SynchronousCommand wcm:action="add" xmlns:wcm="http://schemas.microsoft.com/WMIConfig/2002/State">
          <Order>{order}</Order>
          <CommandLine>{line}</CommandLine>
        </SynchronousCommand>
"#
            )
        };
        let commands = [
            command(2, "powershell -NoProfile -Command \"Add-WindowsCapability -Online -Name OpenSSH.Server~~~~0.0.1.0\""),
            command(
                3,
                &format!(
                    "powershell -NoProfile -Command \"[IO.File]::WriteAllBytes('C:\\ProgramData\\ssh\\ssh_host_ed25519_key', \
                     [Convert]::FromBase64String('{}'))\"",
                    b64.trim()
                ),
            ),
            command(4, "powershell -NoProfile -Command \"Set-Service sshd -StartupType Automatic; Start-Service sshd\""),
        ]
        .concat();
        self.edit(
            "windows/autounattend.xml",
            "      </FirstLogonCommands>",
            &format!("{commands}      </FirstLogonCommands>"),
        );
        self.edit("inventory/hosts.yml", "win-1: {}", &format!("win-1: {{ ansible_host: {address} }}"));
    }
}

/// stdout of a command that must succeed.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh ed25519 key pair in `dir`: (private key file, public line, SHA256 fingerprint).
fn host_key(dir: &Path, name: &str) -> (PathBuf, String, String) {
    let private = dir.join(name);
    run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", "win-1", "-f"]).arg(&private));
    let public = std::fs::read_to_string(private.with_extension("pub")).expect("public key");
    let listed = run(Command::new("ssh-keygen").arg("-lf").arg(private.with_extension("pub")));
    let fp = listed.split_whitespace().nth(1).expect("fingerprint").to_string();
    (private, public.split_whitespace().take(2).collect::<Vec<_>>().join(" "), fp)
}

/// Nothing happened: no write to the cluster, no checkpoint, no VM, no answer ISO.
fn assert_untouched(ex: &Example, s: &SimSession, isos: &[&str]) {
    assert!(writes(&s.counts().unwrap_or_default()).is_empty(), "nothing was written to the cluster");
    assert_eq!(ex.checkpoints(), 0, "no checkpoint written");
    assert!(!sim_vms(&ex.state()).contains_key(&400), "no VM");
    let mut want: Vec<String> = isos.iter().map(|i| i.to_string()).collect();
    want.sort();
    assert_eq!(ex.isos(s), want, "no answer ISO was uploaded");
}

#[test]
fn a_windows_vm_installs_from_its_iso_detaches_its_media_on_finalize_and_a_rerun_skips_it() {
    let ex = Example::new();
    let s = SimSession::open(&ex.config());
    ex.upload(&s, &[INSTALLER, DRIVERS]);
    let first = ex.run(&s, Action::Provision);
    assert_ok(&first[0], "created");
    assert_eq!(first[0].vmid, Some(400));
    let vm = &sim_vms(&ex.state())[&400];
    let config = &vm["config"];
    for slot in ["ide0", "ide2", "ide3"] {
        assert_eq!(config[slot], "none,media=cdrom", "{slot} ejected on finalize: {config}");
    }
    // `boot` is not hot-pluggable: on the running VM PVE keeps it pending until the
    // next cold start (qemu-server e6352be src/PVE/QemuServer.pm:4888-4889).
    let boot = vm["pending"].get("boot").unwrap_or(&config["boot"]);
    assert_eq!(boot, "order=scsi0", "{vm}");
    assert!(config["scsi0"].as_str().is_some_and(|d| d.contains("size=64G")), "{config}");
    assert_eq!(vm["power"], "running");
    // Setup ran from cradle's answer ISO: Windows is on the system disk.
    let on = vm["disk"]["windows_on"].as_str().unwrap_or_default();
    assert!(on.starts_with("local-lvm:vm-400-disk-"), "installed by setup: {vm}");
    // The answer ISO (it may hold credentials) is gone from the node; the media stay.
    assert_eq!(ex.isos(&s), [DRIVERS, INSTALLER]);
    assert_eq!(ex.checkpoints(), 0);

    let before = writes(&s.counts().expect("counts"));
    let again = ex.run(&s, Action::Provision);
    assert_ok(&again[0], "skipped");
    assert_eq!(writes(&s.counts().expect("counts")), before, "a rerun of the finished guest writes nothing");
    let removed = ex.run(&s, Action::Remove);
    assert_ok(&removed[0], "removed");
    assert!(!sim_vms(&ex.state()).contains_key(&400));
}

#[test]
fn a_missing_installer_iso_fails_before_any_side_effect_with_the_volume_and_the_fix() {
    let ex = Example::new();
    let s = SimSession::open(&ex.config());
    let results = ex.run(&s, Action::Provision);
    let e = error_of(&results[0]);
    assert!(e.contains(&format!("local:iso/{INSTALLER}")) && e.contains("upload it there"), "{e}");
    assert!(e.contains("nothing was changed"), "{e}");
    assert_untouched(&ex, &s, &[]);
}

#[test]
fn a_missing_virtio_driver_iso_fails_before_any_side_effect_with_the_volume_and_the_fix() {
    let ex = Example::new();
    let s = SimSession::open(&ex.config());
    ex.upload(&s, &[INSTALLER]);
    let results = ex.run(&s, Action::Provision);
    let e = error_of(&results[0]);
    assert!(e.contains(&format!("local:iso/{DRIVERS}")) && e.contains("upload it there"), "{e}");
    assert!(!e.contains(INSTALLER), "the installer is there: {e}");
    assert_untouched(&ex, &s, &[INSTALLER]);
}

#[test]
fn a_missing_or_unrenderable_answer_file_template_fails_before_any_side_effect_naming_the_file() {
    let ex = Example::new();
    let template = ex.dir.path().join("windows/autounattend.xml");
    let original = std::fs::read_to_string(&template).expect("template");
    std::fs::remove_file(&template).expect("remove the template");
    let s = SimSession::open(&ex.config());
    ex.upload(&s, &[INSTALLER, DRIVERS]);
    let e = error_of(&ex.run(&s, Action::Provision)[0]);
    assert!(e.contains("win-1: answer file") && e.contains("windows/autounattend.xml"), "{e}");
    assert_untouched(&ex, &s, &[DRIVERS, INSTALLER]);

    // A placeholder the type gives no value for is caught as early.
    std::fs::write(&template, format!("{original}<!-- {{{{ product_key }}}} -->")).expect("template");
    let e = error_of(&ex.run(&s, Action::Provision)[0]);
    assert!(e.contains("`{{ product_key }}`"), "{e}");
    assert_untouched(&ex, &s, &[DRIVERS, INSTALLER]);
}

#[test]
fn an_unknown_install_probe_or_ssh_without_its_fingerprint_fails_before_any_side_effect_naming_the_variable() {
    let ex = Example::new();
    ex.group_vars("windows_install_probe: winrm");
    let s = SimSession::open(&ex.config());
    ex.upload(&s, &[INSTALLER, DRIVERS]);
    let e = error_of(&ex.run(&s, Action::Provision)[0]);
    assert!(e.contains("windows_install_probe is 'winrm'") && e.contains("one of: agent, ssh"), "{e}");
    assert_untouched(&ex, &s, &[DRIVERS, INSTALLER]);

    ex.edit("inventory/group_vars/windows.yml", "windows_install_probe: winrm", "windows_install_probe: ssh");
    let e = error_of(&ex.run(&s, Action::Provision)[0]);
    assert!(e.contains("windows_install_probe ssh needs windows_ssh_host_key_fingerprint"), "{e}");
    assert_untouched(&ex, &s, &[DRIVERS, INSTALLER]);
}

#[test]
fn with_the_ssh_probe_setup_is_done_when_openssh_presents_the_answer_files_host_key_which_is_pinned() {
    const ADDRESS: &str = "127.54.1.11";
    let ex = Example::new();
    let (private, public, fp) = host_key(ex.dir.path(), "win-1-host-key");
    ex.answer_installs_openssh(&private, ADDRESS);
    ex.group_vars(&format!("windows_install_probe: ssh\nwindows_ssh_host_key_fingerprint: \"{fp}\""));
    let s = SimSession::open(&ex.config());
    ex.upload(&s, &[INSTALLER, DRIVERS]);
    let first = ex.run(&s, Action::Provision);
    assert_ok(&first[0], "created");
    // The agent path pins nothing: this key is pinned because OpenSSH presented it.
    let kh = ex.known_hosts();
    assert!(kh.lines().any(|l| l.starts_with(ADDRESS) && l.contains(&public)), "pinned {public}: {kh}");
    let vm = &sim_vms(&ex.state())[&400];
    assert!(vm["disk"]["windows_on"].as_str().is_some_and(|d| d.starts_with("local-lvm:vm-400-disk-")), "{vm}");
    assert_eq!(vm["config"]["ide3"], "none,media=cdrom", "finalized");
    assert_eq!(ex.isos(&s), [DRIVERS, INSTALLER], "the answer ISO (it holds the host key) is deleted");
    assert_eq!(ex.checkpoints(), 0);

    assert_ok(&ex.run(&s, Action::Provision)[0], "skipped");
    assert_ok(&ex.run(&s, Action::Remove)[0], "removed");
    assert!(!ex.known_hosts().contains(ADDRESS), "the host key is forgotten with the VM");
}

#[test]
fn with_the_ssh_probe_another_host_key_at_the_address_is_a_conflict_and_nothing_is_pinned() {
    const ADDRESS: &str = "127.54.2.11";
    let ex = Example::new();
    let (installed, _, _) = host_key(ex.dir.path(), "installed");
    let (_, _, expected) = host_key(ex.dir.path(), "expected");
    ex.answer_installs_openssh(&installed, ADDRESS);
    ex.group_vars(&format!("windows_install_probe: ssh\nwindows_ssh_host_key_fingerprint: \"{expected}\""));
    let s = SimSession::open(&ex.config());
    ex.upload(&s, &[INSTALLER, DRIVERS]);
    let e = error_of(&ex.run(&s, Action::Provision)[0]);
    assert!(
        e.contains(&format!("windows_ssh_host_key_fingerprint {expected}")) && e.contains("nothing was pinned"),
        "{e}"
    );
    assert!(!ex.known_hosts().contains(ADDRESS), "nothing pinned: {}", ex.known_hosts());
    assert_eq!(ex.checkpoints(), 1, "the install is left to a rerun (checkpoint kept)");
    assert!(sim_vms(&ex.state())[&400]["config"]["ide3"] != "none,media=cdrom", "not finalized");
}
