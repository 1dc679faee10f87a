//! VM types built from a baked disk image (issue 15), end to end: the worked
//! example of docs/VM-TYPES.md (`examples/vm-types`: Home Assistant OS from
//! `images/haos.qcow2`, VMID 200 + the host's index in its group) provisioned,
//! rerun and removed through the real workflows, the direct backend and the
//! simulated cluster started in-process, whose nodes take the image over real
//! SSH. What happened is read from the simulator (its VMs, its nodes' files,
//! request counters) and from the state dir.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cradle::provision::{Action, HostResult};
use cradle_tests::cradle_bin;
use cradle_tests::fixture::{
    Cluster, ProjectConfig, SimCluster, SimSession, Workflows, assert_ok, error_of, example_project, held_locks,
    sim_vms, writes,
};
use cradle_tests::remote_sim::RemoteSim;

/// A project holding the example: the repository's workflows plus the type's
/// file, the example inventory, and an image of `image_bytes` bytes (none: no image).
struct Example {
    dir: tempfile::TempDir,
}

/// A qcow2 header (magic, version 3, virtual size at offset 24) followed by
/// filler up to `len` bytes: what the simulator reads an image's virtual size from.
pub(crate) fn qcow2(len: usize, virtual_size: u64) -> Vec<u8> {
    let mut b = vec![0u8; len.max(104)];
    b[..4].copy_from_slice(b"QFI\xfb");
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    b[24..32].copy_from_slice(&virtual_size.to_be_bytes());
    for (i, x) in b.iter_mut().enumerate().skip(104) {
        *x = (i % 251) as u8;
    }
    b
}

impl Example {
    /// The example with an image of `image_bytes` (none: no image file), on
    /// a simulator with the `[clusters.sim.sim]` lines `sim`.
    fn new(image_bytes: Option<usize>, sim: &[&str]) -> Example {
        Example::with_config(image_bytes, sim, "")
    }

    /// [`Example::new`] with `toml` appended to cradle.toml.
    fn with_config(image_bytes: Option<usize>, sim: &[&str], toml: &str) -> Example {
        let ex = Example { dir: example_project("vm-types") };
        if let Some(n) = image_bytes {
            std::fs::create_dir_all(ex.dir.path().join("images")).expect("images dir");
            std::fs::write(ex.dir.path().join("images/haos.qcow2"), qcow2(n, 6 << 30)).expect("image");
        }
        let cluster = SimCluster { extra: sim.iter().map(|l| l.to_string()).collect(), ..SimCluster::three_nodes(0.0) };
        ProjectConfig::new(Cluster::Sim(cluster))
            .workflows(Workflows::Dir("workflows".into()))
            .append(toml)
            .write(ex.dir.path());
        ex
    }

    /// Append `yaml` lines to the type's group variables.
    fn group_vars(&self, yaml: &str) {
        let file = self.inventory().join("group_vars/homeassistant.yml");
        let mut text = std::fs::read_to_string(&file).expect("group vars");
        text.push_str(yaml);
        std::fs::write(file, text).expect("write group vars");
    }

    /// Give `ha-1` and `ha-2` the inventory addresses `a1` and `a2`.
    fn addresses(&self, a1: &str, a2: &str) {
        let file = self.inventory().join("hosts.yml");
        let text = std::fs::read_to_string(&file).expect("hosts");
        let edited = text.replace("10.0.30.11", a1).replace("10.0.30.12", a2);
        assert_ne!(text, edited, "the example's hosts changed shape");
        std::fs::write(file, edited).expect("write hosts");
    }

    /// The image's path as the check names it.
    fn image_path(&self) -> String {
        self.dir.path().join("images/haos.qcow2").display().to_string()
    }

    /// Add `entries` (Rhai map entries) to the type's image source.
    fn image_source(&self, entries: &str) {
        let file = self.dir.path().join("workflows/homeassistant.rhai");
        let text = std::fs::read_to_string(&file).expect("type file");
        let edited = text.replacen(
            "sha256: vm.vars.homeassistant_image_sha256 }",
            &format!("sha256: vm.vars.homeassistant_image_sha256, {entries} }}"),
            1,
        );
        assert_ne!(text, edited, "the example's image source changed shape");
        std::fs::write(file, edited).expect("write type file");
    }

    /// The files under `abs` on `node` of the project's simulator.
    fn node_files(&self, s: &SimSession, node: &str, abs: &str) -> Vec<String> {
        let dir = s.project.sims.get("sim").expect("sim").node_path(node, abs);
        let mut out: Vec<String> = match std::fs::read_dir(dir) {
            Ok(rd) => rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => Vec::new(),
        };
        out.sort();
        out
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("cradle.toml")
    }
    fn inventory(&self) -> PathBuf {
        self.dir.path().join("inventory")
    }
    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn run(&self, s: &SimSession, action: Action) -> Vec<HostResult> {
        s.run(&self.inventory(), None, action, 2)
    }
}

/// The names of the simulator's VMs that are not templates.
fn vm_names(state: &Path) -> Vec<String> {
    sim_vms(state)
        .values()
        .filter(|v| v["template"] != true && v["config"]["template"] != "1" && v["config"]["template"] != 1)
        .filter_map(|v| v["config"]["name"].as_str().map(str::to_string))
        .collect()
}

fn by_name<'a>(results: &'a [HostResult], name: &str) -> &'a HostResult {
    results.iter().find(|r| r.name == name).expect("result of the host")
}

/// Nothing was changed: no write to the cluster, no VM, no checkpoint, no
/// image staged, no lock left.
fn assert_no_side_effect(ex: &Example, s: &SimSession) {
    assert!(writes(&s.counts().unwrap_or_default()).is_empty(), "nothing was written to the cluster");
    assert!(vm_names(&ex.state()).is_empty(), "no VM");
    let cps = ex.state().join("checkpoints");
    let left = std::fs::read_dir(&cps).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "no checkpoint written");
    if s.counts().is_some() {
        assert!(ex.node_files(s, "pve1", "/var/lib/vz/import").is_empty(), "no volume uploaded");
        assert!(ex.node_files(s, "pve1", "/var/tmp/cradle-images").is_empty(), "nothing staged over SSH");
    }
    assert!(held_locks(&ex.state()).is_empty(), "no lock left");
}

/// `provision --check` (the verify step) of both hosts: `expected` with
/// VMIDs 200 and 201, each named in the reason too.
fn assert_check(ex: &Example, s: &SimSession, expected: &str) {
    let check = ex.run(s, Action::Check);
    for (name, vmid) in [("ha-1", 200), ("ha-2", 201)] {
        let r = by_name(&check, name);
        assert_ok(r, expected);
        assert_eq!(r.vmid, Some(vmid), "{name}: --check resolves the VMID provision and remove use");
        let why = r.detail.clone().unwrap_or_default();
        assert!(why.contains(&format!("vmid {vmid}")), "{name}: the check's result names its VMID: {why}");
    }
}

#[test]
fn two_hosts_of_one_image_type_on_one_node_get_base_plus_index_vmids_and_provision_rerun_and_remove() {
    let ex = Example::new(Some(3 << 20), &[]);
    let s = SimSession::open(&ex.config());
    assert_check(&ex, &s, "create");
    let first = ex.run(&s, Action::Provision);
    for (name, vmid) in [("ha-1", 200), ("ha-2", 201)] {
        let r = by_name(&first, name);
        assert_ok(r, "created");
        assert_eq!(r.vmid, Some(vmid), "{name}: VMID = homeassistant_vm_id + index in the group");
    }
    let vms = sim_vms(&ex.state());
    for vmid in [200, 201] {
        let config = &vms[&vmid]["config"];
        let disk = config["scsi0"].as_str().expect("scsi0 imported");
        assert!(disk.starts_with(&format!("local-lvm:vm-{vmid}-disk-")), "{disk}");
        assert!(disk.ends_with("size=32G"), "grown to the inventory's disk: {disk}");
        assert_eq!(config["bios"], "ovmf");
        assert_eq!(vms[&vmid]["power"], "running");
        assert!(config.get("ide2").is_none() && config.get("cicustom").is_none(), "no cloud-init scaffolding");
    }
    // PVE 9: one upload through the API into `local`'s import content,
    // under the image's digest; nothing staged over SSH.
    let imported = ex.node_files(&s, "pve1", "/var/lib/vz/import");
    assert_eq!(imported.len(), 1, "{imported:?}");
    assert!(imported[0].ends_with("-haos.qcow2"), "{imported:?}");
    assert!(ex.node_files(&s, "pve1", "/var/tmp/cradle-images").is_empty());
    assert!(
        ex.node_files(&s, "pve1", "/var/tmp").iter().all(|f| !f.starts_with("pveupload-")),
        "PVE removed its temp file"
    );

    // A rerun of the complete VMs changes nothing and uploads nothing.
    let before = writes(&s.counts().expect("counts"));
    let again = ex.run(&s, Action::Provision);
    for name in ["ha-1", "ha-2"] {
        assert_ok(by_name(&again, name), "skipped");
    }
    assert_eq!(writes(&s.counts().expect("counts")), before, "a rerun of complete VMs writes nothing");
    assert_check(&ex, &s, "skip");

    let removed = ex.run(&s, Action::Remove);
    for (name, vmid) in [("ha-1", 200), ("ha-2", 201)] {
        let r = by_name(&removed, name);
        assert_ok(r, "removed");
        assert_eq!(r.vmid, Some(vmid), "remove computes the same VMID");
    }
    assert!(vm_names(&ex.state()).is_empty(), "removed");
}

#[test]
fn a_missing_image_fails_before_any_side_effect_with_the_path_and_the_fix() {
    let ex = Example::new(None, &[]);
    let s = SimSession::open(&ex.config());
    let results = ex.run(&s, Action::Provision);
    for name in ["ha-1", "ha-2"] {
        let e = error_of(by_name(&results, name));
        assert!(e.contains("images/haos.qcow2"), "{e}");
        assert!(e.contains("put the image there or fix the path in the inventory"), "{e}");
    }
    assert_no_side_effect(&ex, &s);
}

/// The SHA-256 of `file`, as `sha256sum` prints it.
fn sha256sum(file: &str) -> String {
    let out = Command::new("sha256sum").arg(file).output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().expect("digest").to_string()
}

#[test]
fn a_wrong_sha256_fails_before_any_side_effect_and_in_check_naming_the_file_both_digests_and_the_fix() {
    let ex = Example::new(Some(1 << 20), &[]);
    let wrong = "ab".repeat(32);
    ex.group_vars(&format!("homeassistant_image_sha256: \"{wrong}\"\n"));
    let actual = sha256sum(&ex.image_path());
    assert_image_check_fails(&ex, &[&wrong, &actual, "correct the sha256 in the inventory"]);
}

/// `--check` and `provision` both fail at the image check for both hosts,
/// naming the image file and each of `says`, and nothing changed.
fn assert_image_check_fails(ex: &Example, says: &[&str]) {
    let s = SimSession::open(&ex.config());
    for action in [Action::Check, Action::Provision] {
        let results = ex.run(&s, action);
        for name in ["ha-1", "ha-2"] {
            let e = error_of(by_name(&results, name));
            assert!(e.contains("step 'image'"), "{action:?} {name}: fails at the image check: {e}");
            assert!(e.contains(&ex.image_path()), "{action:?} {name}: names the file: {e}");
            for part in says {
                assert!(e.contains(part), "{action:?} {name}: says `{part}`: {e}");
            }
        }
    }
    assert_no_side_effect(ex, &s);
}

#[test]
fn a_wrong_size_fails_before_any_side_effect_and_in_check_naming_the_file_both_sizes_and_the_fix() {
    let ex = Example::new(Some(1 << 20), &[]);
    ex.group_vars("homeassistant_image_size: 1000000\n");
    let both = format!("is {} bytes, the inventory says 1000000", 1 << 20);
    assert_image_check_fails(&ex, &[&both, "correct the size in the inventory"]);
}

#[test]
fn an_appliance_verified_by_its_health_url_is_provisioned_once_the_url_answers() {
    let ex = Example::with_config(
        Some(1 << 20),
        &[r#"appliance = { http_port = 8123, addresses = { ha-1 = "127.0.86.11", ha-2 = "127.0.86.12" } }"#],
        "\n[workflow.grants.http]\nguest_ports = [8123]\n",
    );
    ex.addresses("127.0.86.11", "127.0.86.12");
    ex.group_vars("homeassistant_verify: http\n");
    let s = SimSession::open(&ex.config());
    let first = ex.run(&s, Action::Provision);
    assert_ok(by_name(&first, "ha-1"), "created");
    assert_ok(by_name(&first, "ha-2"), "created");
    let asked = s.project.sims.get("sim").expect("sim").guest_http_requests();
    for (vmid, addr) in [(200, "127.0.86.11:8123"), (201, "127.0.86.12:8123")] {
        assert!(
            asked.iter().any(|r| r.vmid == vmid && r.addr.to_string() == addr && r.method == "GET" && r.path == "/"),
            "the verify step asked http://{addr}/ of VM {vmid}: {asked:?}"
        );
    }
    assert!(asked.iter().all(|r| r.method == "GET"), "a probe only reads: {asked:?}");
    let again = ex.run(&s, Action::Provision);
    assert_ok(by_name(&again, "ha-1"), "skipped");
    let removed = ex.run(&s, Action::Remove);
    assert_ok(by_name(&removed, "ha-1"), "removed");
}

#[test]
fn an_appliance_whose_health_url_never_answers_fails_at_the_verify_step_naming_the_url() {
    // The web UI listens on 8123, but the simulated network gives ha-1 no
    // address: http://127.0.87.11:8123/ refuses every connection.
    let ex = Example::with_config(
        Some(1 << 20),
        &["appliance = { http_port = 8123 }"],
        "\n[workflow.grants.http]\nguest_ports = [8123]\n",
    );
    ex.addresses("127.0.87.11", "127.0.87.12");
    ex.group_vars("homeassistant_verify: http\nhomeassistant_verify_ms: 3000\n");
    let s = SimSession::open(&ex.config());
    let results = s.run(&ex.inventory(), Some("ha-1"), Action::Provision, 1);
    let e = error_of(by_name(&results, "ha-1"));
    assert!(e.contains("step 'verify'"), "{e}");
    assert!(e.contains("the health URL http://127.0.87.11:8123/ did not answer"), "{e}");
    assert!(e.contains("within 3000 ms"), "{e}");
    assert!(s.project.sims.get("sim").expect("sim").guest_http_requests().is_empty());
    assert!(vm_names(&ex.state()).contains(&"ha-1".to_string()), "the VM stays for the rerun to finish");
}

#[test]
fn before_pve_8_4_the_image_goes_over_ssh_to_var_tmp_and_is_attached_by_qm_disk_import() {
    let ex = Example::new(Some(2 << 20), &["pve_version = \"8.3.5\""]);
    let s = SimSession::open(&ex.config());
    let first = ex.run(&s, Action::Provision);
    assert_ok(by_name(&first, "ha-1"), "created");
    assert_ok(by_name(&first, "ha-2"), "created");
    let staged = ex.node_files(&s, "pve1", "/var/tmp/cradle-images");
    assert_eq!(staged.len(), 1, "one verified copy, no .part left: {staged:?}");
    assert!(staged[0].ends_with("-haos.qcow2") && !staged[0].starts_with('.'), "{staged:?}");
    assert!(ex.node_files(&s, "pve1", "/tmp").is_empty(), "nothing ever goes to /tmp");
    let vms = sim_vms(&ex.state());
    for vmid in [200, 201] {
        let disk = vms[&vmid]["config"]["scsi0"].as_str().expect("scsi0 attached");
        assert!(disk.contains(&format!("vm-{vmid}-disk-")) && disk.ends_with("size=32G"), "{disk}");
    }
    let again = ex.run(&s, Action::Provision);
    assert_ok(by_name(&again, "ha-1"), "skipped");
    assert_ok(by_name(&again, "ha-2"), "skipped");
}

#[test]
fn a_staging_directory_under_tmp_is_refused_before_any_side_effect() {
    let ex = Example::new(Some(1 << 20), &["pve_version = \"8.3.5\""]);
    ex.image_source("transfer: \"ssh\", dir: \"/tmp/images\"");
    let s = SimSession::open(&ex.config());
    let results = ex.run(&s, Action::Provision);
    let e = error_of(by_name(&results, "ha-1"));
    assert!(e.contains("/tmp/images") && e.contains("tmpfs"), "{e}");
    assert!(vm_names(&ex.state()).is_empty(), "no VM was created");
    assert!(ex.node_files(&s, "pve1", "/tmp").is_empty(), "nothing was written to /tmp");
}

#[test]
fn a_node_without_the_free_space_fails_before_uploading() {
    for version in ["8.3.5", "9.0.3"] {
        let ex = Example::new(Some(4 << 20), &["node_root_bytes = 3145728", &format!("pve_version = \"{version}\"")]);
        let s = SimSession::open(&ex.config());
        let results = ex.run(&s, Action::Provision);
        let e = error_of(by_name(&results, "ha-1"));
        assert!(e.contains("bytes free") && e.contains("nothing was uploaded"), "{version}: {e}");
        assert!(ex.node_files(&s, "pve1", "/var/tmp/cradle-images").is_empty(), "{version}: no partial upload");
        assert!(ex.node_files(&s, "pve1", "/var/lib/vz/import").is_empty(), "{version}: no volume");
        assert!(vm_names(&ex.state()).is_empty(), "{version}: no VM");
    }
}

/// The files of `abs` on `node` of a simulator in its own process.
fn remote_node_files(sim: &RemoteSim, node: &str, abs: &str) -> Vec<(String, u64)> {
    let dir = sim.state.join("nodes").join(node).join(abs.trim_start_matches('/'));
    let mut out: Vec<(String, u64)> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().map(|m| m.len()).unwrap_or(0)))
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

fn cradle(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(cradle_bin())
        .arg("--config")
        .arg(dir.join("cradle.toml"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run cradle")
}

#[test]
fn an_ssh_upload_killed_mid_transfer_leaves_only_a_part_file_and_the_rerun_completes() {
    const IMAGE: usize = 96 << 20;
    let dir = example_project("vm-types");
    // "Proxmox" outlives the kill: the simulator runs as its own process, as PVE 8.3 (SSH staging).
    let sim = RemoteSim::start_with(dir.path(), "0", &["--nodes", "pve1,pve2,pve3", "--pve-version", "8.3.5"]);
    std::fs::create_dir_all(dir.path().join("images")).expect("images dir");
    std::fs::write(dir.path().join("images/haos.qcow2"), qcow2(IMAGE, 6 << 30)).expect("image");
    ProjectConfig::new(Cluster::Written(sim.cluster_toml.clone()))
        .workflows(Workflows::Dir("workflows".into()))
        .write(dir.path());
    let inv = dir.path().join("inventory").display().to_string();

    let mut child = Command::new(cradle_bin())
        .arg("--config")
        .arg(dir.path().join("cradle.toml"))
        .args(["--output", "json", "provision", "-i", &inv, "--limit", "ha-1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("killed.stderr")).expect("stderr file"))
        .process_group(0)
        .spawn()
        .expect("spawn cradle");
    let pgid = child.id() as i32;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let cut = loop {
        let parts: Vec<(String, u64)> = remote_node_files(&sim, "pve1", "/var/tmp/cradle-images")
            .into_iter()
            .filter(|(n, _)| n.ends_with(".part"))
            .collect();
        if let Some((name, len)) = parts.first().filter(|(_, len)| *len > 0 && *len < IMAGE as u64) {
            // The whole process group: cradle and the `ssh` feeding the upload.
            let killed = Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).status().expect("kill");
            assert!(killed.success(), "kill -KILL -{pgid}");
            break (name.clone(), *len);
        }
        assert!(std::time::Instant::now() < deadline, "the upload never started");
        if child.try_wait().expect("wait").is_some() {
            let err = std::fs::read_to_string(dir.path().join("killed.stderr")).unwrap_or_default();
            panic!("cradle ended before the upload could be cut: {err}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let status = child.wait().expect("wait");
    assert_eq!(status.signal(), Some(9), "cradle was killed (SIGKILL) mid-transfer");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let files = remote_node_files(&sim, "pve1", "/var/tmp/cradle-images");
    assert!(files.iter().all(|(n, _)| n.starts_with('.') && n.ends_with(".part")), "only the partial file: {files:?}");
    assert!(files.iter().any(|(_, len)| *len < IMAGE as u64), "it is partial: {files:?} (cut at {cut:?})");
    assert!(sim.vms().iter().all(|v| v["config"]["name"] != "ha-1"), "no VM was created from it");

    // The run died holding ha-1's lock and the image's staging lock. Their
    // holder is shown gone (this host, that pid no longer running), so the
    // rerun itself takes both back (journaled, and said on stderr): no
    // `cradle unlock`. The `.part` file is removed and written anew.
    let rerun = cradle(dir.path(), &["--output", "json", "provision", "-i", &inv, "--limit", "ha-1"]);
    let rerun_said = format!("{}\n{}", String::from_utf8_lossy(&rerun.stdout), String::from_utf8_lossy(&rerun.stderr));
    assert!(rerun.status.success(), "{rerun_said}");
    assert!(rerun_said.contains("|ha-1` from run"), "the VM's lock was taken back: {rerun_said}");
    assert!(
        rerun_said.contains("|#image:pve1:images/haos.qcow2` from run"),
        "the image's staging lock was taken back: {rerun_said}"
    );
    assert!(held_locks(&dir.path().join("state")).is_empty(), "no lock left");
    let files = remote_node_files(&sim, "pve1", "/var/tmp/cradle-images");
    assert_eq!(files.len(), 1, "the verified copy only: {files:?}");
    assert!(!files[0].0.starts_with('.') && files[0].1 == IMAGE as u64, "{files:?}");
    let vm = sim.vms().into_iter().find(|v| v["config"]["name"] == "ha-1").expect("ha-1 exists");
    assert!(vm["config"]["scsi0"].as_str().is_some_and(|d| d.ends_with("size=32G")), "{vm}");
}
