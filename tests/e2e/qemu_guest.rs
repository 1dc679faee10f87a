//! Guest mode `qemu`: the real `cradle` binary provisions a VM of the simulated
//! cluster that is a real qemu VM booting Debian 12 with real cloud-init 22.4 and
//! OpenSSH (docs/SIMULATOR.md, "Guest mode qemu"). A green run proves that cradle's
//! rendered user-data, network-data and meta-data work on the real tool, and that
//! its verification, reboot and finalization work on a real Linux guest, and
//! that the post-provision stage configures it with the real ansible-core, and
//! that a maintenance change (`cradle plan`, `cradle apply --reboot if-needed`)
//! reaches the real guest: more memory and cores after one API reboot.
//!
//! Needs root (the image is built by `scripts/guest-image` with debootstrap; cached,
//! so only the first run pays), `qemu-system-x86_64`, `genisoimage` and `ssh`
//! (scripts/test installs them). Minutes per test under TCG: scripts/test runs this
//! module after the rest of the suite; the tests marked `ignore` are the longer
//! suite, `scripts/test-qemu`. Each test has its own guest subnet 10.8N.0.0/24,
//! reached at 127.8N.0.10:2322.

use std::path::{Path, PathBuf};
use std::process::Command;

use cradle_tests::fixture::{Cluster, ProjectConfig};
use cradle_tests::remote_sim::RemoteSim;
use cradle_tests::{Out, cradle_bin, workspace};
use serde_json::Value;

/// The guest image directory, built (or found cached) by the project's script.
fn guest_image() -> PathBuf {
    let out = Command::new(workspace().join("scripts/guest-image")).output().expect("run scripts/guest-image");
    assert!(
        out.status.success(),
        "scripts/guest-image failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().expect("the image directory").trim())
}

/// `tcg` unless `CRADLE_QEMU_ACCEL` says otherwise (KVM where it works).
fn accel() -> String {
    std::env::var("CRADLE_QEMU_ACCEL").unwrap_or_else(|_| "tcg".into())
}

/// One project: a one-node simulator in qemu mode in its own process (the guests
/// outlive each `cradle` command, as VMs outlive a run on PVE) and a one-VM
/// inventory on 10.`n`.0.0/24.
struct QemuLab {
    dir: tempfile::TempDir,
    sim: RemoteSim,
    config: PathBuf,
    inventory: PathBuf,
    n: u8,
}

impl QemuLab {
    fn new(n: u8, vmid: u32) -> QemuLab {
        QemuLab::with_hosts(n, vmid, 1)
    }

    /// `count` hosts `qemu-<i>`: VMID `vmid + i`, address 10.`n`.0.(10 + i),
    /// reached at 127.`n`.0.(10 + i):2322.
    fn with_hosts(n: u8, vmid: u32, count: u8) -> QemuLab {
        let dir = tempfile::tempdir().expect("tmp");
        let image = guest_image();
        let accel = accel();
        let sim = RemoteSim::start_with(
            dir.path(),
            "0",
            &["--nodes", "pve1", "--guest-ssh-port", "2322", "--qemu-image", s(&image), "--qemu-accel", &accel],
        );
        let config = ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone())).write(dir.path());
        let inv = dir.path().join("inventory");
        std::fs::create_dir_all(inv.join("group_vars")).expect("mkdir");
        let mut hosts = String::from("[lab]\n");
        for i in 0..count {
            hosts.push_str(&format!(
                "qemu-{i} ansible_host=127.{n}.0.{a} ansible_port=2322 guest_ip=10.{n}.0.{a}\n",
                a = 10 + i
            ));
        }
        hosts.push_str(&format!("\n[lab:vars]\nvms_vmid_base={vmid}\ntarget_node=pve1\nansible_user=cradle\n"));
        std::fs::write(inv.join("hosts.ini"), hosts).expect("hosts.ini");
        // Waits sized for TCG: a first boot with cloud-init takes about a minute on
        // two cores, a reboot about as long.
        std::fs::write(
            inv.join("group_vars/all.yml"),
            format!(
                r#"---
global_os:
  debian12:
    template: debian-12-cloud
    interface: ens18
    storage: local-lvm
    cores: 2
    memory: 1024
vms_os: debian12
vms_config:
  disk: 3
  network:
    nic0:
      bridge: vmbr0
      ip: "{{{{ guest_ip }}}}/24"
      gateway: 10.{n}.0.1
      nameservers: [10.{n}.0.2]
vms_wait:
  task_ms: 900000
  ssh_ms: 600000
  command_ms: 60000
  cloudinit_attempts: 300
  cloudinit_interval_ms: 2000
  reboot_attempts: 200
  reboot_interval_s: 3.0
"#
            ),
        )
        .expect("all.yml");
        QemuLab { dir, sim, config, inventory: inv, n }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Give guest 0 a post-provision stage: the real `ansible-playbook`
    /// (`scripts/ansible`) runs `playbooks/site.yml` against it over cradle's
    /// pinned SSH once it is finalized (workflows/lib/post.rhai).
    fn with_post_provision(self) -> QemuLab {
        let playbooks = self.dir.path().join("playbooks");
        std::fs::create_dir_all(&playbooks).expect("mkdir playbooks");
        std::fs::write(playbooks.join("site.yml"), SITE_PLAYBOOK).expect("site.yml");
        let host_vars = self.inventory.join("host_vars");
        std::fs::create_dir_all(&host_vars).expect("mkdir host_vars");
        std::fs::write(
            host_vars.join("qemu-0.yml"),
            "post_provision:\n  ansible: playbooks/site.yml\n  extra_vars: { site: lab-81 }\n  timeout_s: 900\n",
        )
        .expect("host_vars");
        let mut toml = std::fs::read_to_string(&self.config).expect("cradle.toml");
        toml.push_str(&format!(
            "\n[ansible]\ncommand = \"{}\"\n",
            cradle_testkit::ansible::playbook_command().display()
        ));
        std::fs::write(&self.config, toml).expect("cradle.toml");
        self
    }

    /// Replace `from` by `to` in the inventory's `group_vars/all.yml`.
    fn edit_inventory(&self, from: &str, to: &str) {
        let path = self.inventory.join("group_vars/all.yml");
        let text = std::fs::read_to_string(&path).expect("all.yml");
        assert!(text.contains(from), "all.yml has no `{from}`:\n{text}");
        std::fs::write(&path, text.replace(from, to)).expect("write all.yml");
    }

    /// The `PLAY RECAP` lines in cradle's Ansible logs (one per run).
    fn playbook_runs(&self) -> usize {
        let Ok(dir) = std::fs::read_dir(self.state().join("ansible")) else { return 0 };
        dir.flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default().matches("PLAY RECAP").count())
            .sum()
    }

    fn cradle(&self, args: &[&str]) -> Out {
        self.cradle_env(args, &[])
    }

    /// Run cradle on this project (JSON output) with extra environment variables.
    fn cradle_env(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        let state = self.state();
        let out = Command::new(cradle_bin())
            .args(["--config", s(&self.config), "--output", "json", "--state-dir", s(&state)])
            .args(args)
            .env_remove("CRADLE_CONFIG")
            .env_remove("CRADLE_STATE_DIR")
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .output()
            .expect("run cradle");
        Out::from(out)
    }

    fn provision(&self) -> Vec<String> {
        self.provision_env(&[])
    }

    /// Provision with these extra environment variables (a crash point).
    fn provision_env(&self, env: &[(&str, &str)]) -> Vec<String> {
        let out = self.cradle_env(&["provision", "-i", s(&self.inventory), "--forks", "8"], env);
        if !env.is_empty() && out.stdout.trim().is_empty() {
            return Vec::new();
        }
        let doc = out.json();
        // A failed host carries its error, so an assertion shows why.
        doc["hosts"]
            .as_array()
            .unwrap_or_else(|| panic!("no hosts in {out:#?}"))
            .iter()
            .map(|h| match h["result"].as_str().unwrap_or("") {
                "failed" => format!("failed: {h}"),
                r => r.to_string(),
            })
            .collect()
    }

    /// Run `command` on guest 0 (see [`QemuLab::ssh_to`]).
    fn ssh(&self, command: &str) -> Out {
        self.ssh_to(0, command)
    }

    /// Run `command` on guest `i` as `cradle` with cradle's key, trusting only the
    /// host key cradle pinned in its known_hosts.
    fn ssh_to(&self, i: u8, command: &str) -> Out {
        let state = self.state();
        let out = Command::new("ssh")
            .args(["-F", "/dev/null", "-p", "2322", "-i"])
            .arg(self.sim.state.join("node_id_ed25519"))
            .args(["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", state.join("known_hosts").display()))
            .args(["-o", "ConnectTimeout=30", "-o", "LogLevel=ERROR"])
            .arg(format!("cradle@127.{}.0.{}", self.n, 10 + i))
            .arg(command)
            .output()
            .expect("run ssh");
        Out::from(out)
    }

    /// The console log of VM `vmid` (for a failure's message).
    fn console(&self, vmid: u32) -> String {
        let path = self.sim.state.join(format!("qemu/{vmid}/console.log"));
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

/// Guest 0's size as it sees it: `MemTotal` of /proc/meminfo (kB) and `nproc`.
fn guest_size(lab: &QemuLab) -> (u64, u32) {
    let out = lab.ssh("awk '/^MemTotal:/ {print $2}' /proc/meminfo; nproc");
    assert_eq!(out.code, 0, "{out:#?}");
    match out.stdout.split_whitespace().collect::<Vec<_>>().as_slice() {
        [kib, cpus] => (kib.parse().expect("MemTotal"), cpus.parse().expect("nproc")),
        _ => panic!("{out:#?}"),
    }
}

/// The post-provision playbook of the CI test: facts from the real guest,
/// a file written with sudo (become), a group.
const SITE_PLAYBOOK: &str = r#"- hosts: all
  become: true
  tasks:
    - name: Record the configuration
      ansible.builtin.copy:
        dest: /etc/cradle-configured
        content: "{{ vm_name }} {{ vmid }} {{ site }} {{ ansible_facts['distribution'] }} {{ ansible_facts['distribution_major_version'] }}\n"
        mode: "0644"
    - name: Add the operators group
      ansible.builtin.group:
        name: operators
"#;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn json(out: &Out) -> Value {
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out:#?}"))
}

/// What a provisioned, finalized guest `i` must show from the inside: the pinned
/// host key, real cloud-init finished without warnings (now disabled, its drive
/// gone), sudo without a resolver warning, network-data's address and route on
/// ens18, and a boot that began after cloud-init finished (the API reboot).
fn assert_finalized_guest(lab: &QemuLab, i: u8) {
    // The guest presents exactly the host key cradle pre-seeded and pinned:
    // StrictHostKeyChecking against cradle's own known_hosts and nothing else.
    let id = lab.ssh_to(i, "id -un");
    assert_eq!(id.code, 0, "the pinned key is the guest's: {id:#?}");
    assert_eq!(id.stdout.trim(), "cradle");

    // Real cloud-init finished cleanly, without recoverable errors or warnings.
    let status = lab.ssh_to(i, "cloud-init status --format=json");
    let doc = json(&status);
    assert_eq!((status.code, doc["status"].as_str()), (0, Some("disabled")), "after finalization: {status:#?}");
    let log = lab.ssh_to(i, "grep -E 'WARNING|Traceback' /var/log/cloud-init.log; echo \"exit $?\"");
    assert_eq!(log.stdout.trim(), "exit 1", "cloud-init.log is readable and has no warning: {log:#?}");

    // sudo resolves the host name (manage_etc_hosts) and asks for no password.
    let sudo = lab.ssh_to(i, "sudo -n true");
    assert_eq!((sudo.code, sudo.stderr.trim()), (0, ""), "{sudo:#?}");

    // network-data's address and default route are on ens18.
    let addr = json(&lab.ssh_to(i, "ip -j -4 addr show dev ens18"));
    let local: Vec<String> = addr[0]["addr_info"]
        .as_array()
        .expect("addr_info")
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect();
    assert_eq!(local, [format!("10.{}.0.{}/24", lab.n, 10 + i)], "{addr}");
    let routes = json(&lab.ssh_to(i, "ip -j -4 route show default"));
    assert_eq!(
        (routes[0]["gateway"].as_str(), routes[0]["dev"].as_str()),
        (Some(format!("10.{}.0.1", lab.n).as_str()), Some("ens18"))
    );

    // Finalization rebooted the guest after cloud-init's first boot (this boot began
    // after cloud-init finished), and the cloud-init CD is gone.
    let probe = "stat -c %Y /var/lib/cloud/instance/boot-finished; awk '/^btime/ {print $2}' /proc/stat; \
                 ls /dev/disk/by-label/";
    let boots = lab.ssh_to(i, probe);
    let lines: Vec<&str> = boots.stdout.lines().collect();
    let (finished, booted): (u64, u64) = match lines.as_slice() {
        [f, b, ..] => (f.trim().parse().expect("mtime"), b.trim().parse().expect("btime")),
        _ => panic!("{boots:#?}"),
    };
    assert!(booted >= finished, "the guest rebooted after cloud-init finished: {boots:#?}");
    assert!(!boots.stdout.contains("cidata"), "the cloud-init drive is gone: {boots:#?}");
}

#[test]
fn a_vm_provisions_finalizes_is_configured_by_ansible_reruns_and_is_removed_on_a_real_debian_guest() {
    let lab = QemuLab::new(81, 481).with_post_provision();
    let first = lab.provision();
    assert_eq!(first, ["created"], "console:\n{}", lab.console(481));

    assert_finalized_guest(&lab, 0);

    // The post-provision stage: real ansible-core against the real guest,
    // with its facts, sudo and cradle's extra vars.
    let configured = lab.ssh("cat /etc/cradle-configured && getent group operators");
    assert_eq!(configured.code, 0, "{configured:#?}");
    assert!(configured.stdout.starts_with("qemu-0 481 lab-81 Debian 12\noperators:"), "{configured:#?}");
    assert_eq!(lab.playbook_runs(), 1);

    assert_eq!(lab.provision(), ["skipped"], "a rerun skips the finished guest");
    assert_eq!(lab.playbook_runs(), 1, "and does not configure it again");

    // Day two (cradle plan / apply): more memory and cores. PVE keeps both
    // pending on the running VM; `--reboot if-needed` reboots it once through
    // the API, and the real guest's qemu comes back with the new size.
    let (old_kib, old_cpus) = guest_size(&lab);
    assert_eq!(old_cpus, 2, "provisioned with 2 cores");
    assert!(old_kib <= 1024 * 1024, "provisioned with 1024 MiB: MemTotal {old_kib} kB");
    lab.edit_inventory("    cores: 2\n    memory: 1024\n", "    cores: 3\n    memory: 1536\n");
    let plan = lab.dir.path().join("grow.plan");
    let planned = lab.cradle(&["plan", "-i", s(&lab.inventory), "--out", s(&plan)]);
    assert_eq!(planned.code, 0, "{planned:#?}");
    let changes: Vec<(String, String)> = json(&planned)["vms"][0]["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| (c["what"].as_str().unwrap_or("").to_string(), c["class"].as_str().unwrap_or("").to_string()))
        .collect();
    let next_boot = |what: &str| (what.to_string(), "next-boot".to_string());
    assert_eq!(changes, [next_boot("cores"), next_boot("memory")], "{planned:#?}");
    let boot = lab.ssh("cat /proc/sys/kernel/random/boot_id").stdout;
    let applied = lab.cradle(&["apply", s(&plan), "--reboot", "if-needed"]);
    assert_eq!(applied.code, 0, "{applied:#?}\nconsole:\n{}", lab.console(481));
    assert_eq!(json(&applied)["vms"][0]["result"], "applied", "{applied:#?}");
    let rebooted = lab.ssh("cat /proc/sys/kernel/random/boot_id");
    assert_eq!(rebooted.code, 0, "{rebooted:#?}");
    assert_ne!(rebooted.stdout, boot, "the guest booted again");
    let (kib, cpus) = guest_size(&lab);
    assert_eq!(cpus, 3, "the guest sees the new cores");
    assert!(kib > 1024 * 1024 && kib <= 1536 * 1024, "the guest sees about 1536 MiB: MemTotal {kib} kB");
    let again = lab.cradle(&["plan", "-i", s(&lab.inventory)]);
    assert_eq!(json(&again)["summary"]["unchanged"], 1, "the VM is what the inventory says: {again:#?}");

    let removed = lab.cradle(&["remove", "-i", s(&lab.inventory), "--limit", "qemu-0", "--yes"]);
    assert_eq!(removed.code, 0, "{removed:#?}");
    assert!(!lab.sim.state.join("qemu/481").exists(), "destroy removed the VM's disk and files");
    let gone = lab.ssh("true");
    assert_ne!(gone.code, 0, "the guest is gone after remove");
}

/// The longer suite (`scripts/test-qemu`): three real guests at once.
#[test]
#[ignore = "minutes of both cores under TCG: scripts/test-qemu"]
fn several_real_guests_provision_at_once_and_a_rerun_skips_them_all() {
    let lab = QemuLab::with_hosts(82, 482, 3);
    assert_eq!(lab.provision(), ["created", "created", "created"], "console:\n{}", lab.console(482));
    for i in 0..3 {
        assert_finalized_guest(&lab, i);
    }
    assert_eq!(lab.provision(), ["skipped", "skipped", "skipped"]);
}

/// The longer suite: cradle killed (SIGKILL) as the finalization's reboot begins
/// on a real guest; after `cradle unlock` the rerun finishes it from the checkpoint.
#[test]
#[ignore = "minutes of both cores under TCG: scripts/test-qemu"]
fn a_cradle_killed_as_the_real_guest_reboots_is_finished_by_the_rerun() {
    let lab = QemuLab::new(83, 485);
    let killed = lab.provision_env(&[("CRADLE_CRASH_AT", "before:reboot")]);
    assert!(killed.is_empty() || killed[0].starts_with("failed"), "the first run died: {killed:?}");
    // A killed run's lock is never broken silently: the operator unlocks.
    let unlock = lab.cradle(&["unlock", "qemu-0"]);
    assert_eq!(unlock.code, 0, "{unlock:#?}");

    // The cloud-init drive's removal is pending: an in-guest reboot keeps the CD
    // (qemu resets in place); only the API reboot of the rerun takes it away.
    let before = lab.ssh("cat /proc/sys/kernel/random/boot_id").stdout;
    let _ = lab.ssh("sudo reboot");
    let mut after = String::new();
    for _ in 0..200 {
        std::thread::sleep(std::time::Duration::from_secs(3));
        let o = lab.ssh("cat /proc/sys/kernel/random/boot_id");
        if o.code == 0 && o.stdout != before {
            after = o.stdout;
            break;
        }
    }
    assert!(!after.is_empty(), "the guest came back from its own reboot\nconsole:\n{}", lab.console(485));
    let labels = lab.ssh("ls /dev/disk/by-label/");
    assert!(labels.stdout.contains("cidata"), "an in-guest reboot keeps the cloud-init CD: {labels:#?}");

    let again = lab.provision();
    assert_eq!(again.len(), 1);
    assert!(["created", "finalized"].contains(&again[0].as_str()), "{again:?}\nconsole:\n{}", lab.console(485));
    assert_finalized_guest(&lab, 0);
    assert_eq!(lab.provision(), ["skipped"]);
}
