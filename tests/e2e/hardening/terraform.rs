//! Hardening: the `terraform` capability holds against a hostile plugin
//! (issue 32, section 1: the six attacks of an independent hostile plugin).
//!
//! The hostile plugin is granted `terraform` (module root `terraform/`, not
//! destructive) and a proxmox grant of nodes pve1/pve2, VMIDs 100-199,
//! storage `local-lvm`, templates debian-12/13-cloud. It runs the real
//! `terraform` with the test provider (tests/tf-provider, from a filesystem
//! mirror) against the project's in-process simulated cluster, and skips
//! every check of its own: `tf:apply` writes the module it is given, inits,
//! plans, shows and applies the saved plan (see
//! tests/plugins/hostile/src/attacks/tf.rs). What must hold is the host's:
//! the module-content check before any terraform command
//! (host/src/caps/terraform/module_check.rs), the proxmox grant on the
//! module's VM, and the host's own approval of the plan file in `apply`
//! (host/src/caps/terraform/approval.rs). Each test is one attack, asserts
//! the refusal names why, and reads the simulator's VMs to show nothing was
//! created or destroyed.
//!
//! A second copy of the plugin (`replacer`, environment `replacer`) has the
//! destructive terraform grant: with it a replacement still needs the VM's
//! inventory flag (`vms_terraform_allow_replacement`), which the host reads
//! from the run's VM binding, never from the plugin.

use std::path::{Path, PathBuf};

use cradle::caps::policy::ScopedVm;
use cradle::project::{RunReport, RunRequest};
use cradle_tests::fixture::sim_vms;
use cradle_tests::{Harness, PROBE_RHAI, VM_SPEC_RHAI};
use serde_json::{Value, json};

const CONFIG: &str = r#"
default_environment = "test"
state_dir = "state"
[workflow.grants.lock]
prefixes = ["*"]
[workflow.grants.checkpoint]
[clusters.sim]
kind = "sim"
[clusters.sim.sim]
nodes = ["pve1", "pve2"]
time_scale = 0.0
[[clusters.sim.sim.templates]]
vmid = 9000
name = "debian-12-cloud"
node = "pve1"
[[clusters.sim.sim.templates]]
vmid = 9001
name = "debian-13-cloud"
node = "pve1"
[terraform]
provider = "telmate"
cli_config = "@CLI_CONFIG@"
[environments.test]
cluster = "sim"
backend = "hostile"
[environments.replacer]
cluster = "sim"
backend = "replacer"
[plugins.hostile]
path = "@HOSTILE@"
[plugins.hostile.grants.proxmox]
nodes = ["pve1", "pve2"]
vmids = "100-199"
storages = ["local-lvm"]
templates = ["debian-12-cloud", "debian-13-cloud"]
destructive = false
[plugins.hostile.grants.terraform]
module_root = "terraform"
[plugins.hostile.grants.lock]
prefixes = ["vm/"]
[plugins.hostile.grants.ssh]
hosts = []
[plugins.hostile.grants.dns]
zones = []
[plugins.hostile.grants.checkpoint]
[plugins.hostile.grants.http]
endpoints = []
[plugins.replacer]
path = "@HOSTILE@"
[plugins.replacer.grants.proxmox]
nodes = ["pve1", "pve2"]
vmids = "100-199"
storages = ["local-lvm"]
templates = ["debian-12-cloud", "debian-13-cloud"]
destructive = true
[plugins.replacer.grants.terraform]
module_root = "terraform"
destructive = true
[plugins.replacer.grants.lock]
prefixes = ["vm/"]
[plugins.replacer.grants.ssh]
hosts = []
[plugins.replacer.grants.dns]
zones = []
[plugins.replacer.grants.checkpoint]
[plugins.replacer.grants.http]
endpoints = []
"#;

/// The VMID of the probe's VM spec ([`VM_SPEC_RHAI`]), the run's VM binding.
const VMID: u32 = 150;

/// The hostile plugin's module directory (`attacks::tf::MODULE`).
const MODULE: &str = "tf-attack";

struct Lab {
    h: Harness,
    /// The terraform CLI config and its provider mirror (outside the project).
    _tf: tempfile::TempDir,
}

impl Lab {
    fn new() -> Lab {
        let tf = tempfile::tempdir().expect("tempdir");
        let cli = cradle_tests::terraform_cli_config(tf.path());
        let config = CONFIG.replace("@CLI_CONFIG@", &cli.display().to_string());
        let h = Harness::new(&config, &[("hardening.rhai", PROBE_RHAI), ("lib/vm.rhai", VM_SPEC_RHAI)]);
        Lab { h, _tf: tf }
    }

    fn dir(&self) -> &Path {
        self.h.fixture.dir.path()
    }

    fn module_dir(&self) -> PathBuf {
        self.dir().join("terraform").join(MODULE)
    }

    /// `tf:ATTACK` of the plugin of `env` with `arg`, the run bound to `vms`.
    fn attack_as(&self, env: &str, attack: &str, arg: &str, vms: Vec<ScopedVm>) -> RunReport {
        self.h.run(RunRequest {
            env: Some(env.into()),
            script: "hardening".into(),
            func: "probe".into(),
            args: vec![format!("tf:{attack}").into(), arg.into()],
            vms,
            ..Default::default()
        })
    }

    /// `tf:apply` of `module` by the (non-destructive) hostile plugin.
    fn apply(&self, module: &Value) -> RunReport {
        self.attack_as("test", "apply", &module.to_string(), Vec::new())
    }

    /// The simulator's guests (templates left out), by VMID.
    fn guests(&self) -> Vec<u32> {
        sim_vms(&self.dir().join("state"))
            .into_iter()
            .filter(|(_, v)| v["config"]["template"] != "1")
            .map(|(k, _)| k)
            .collect()
    }
}

/// A module as cradle's renderer writes it for telmate: VM 150 on pve1,
/// cloned from debian-12-cloud, its disks on local-lvm.
fn vm_module() -> Value {
    json!({
        "terraform": { "required_providers": { "proxmox": { "source": "telmate/proxmox" } } },
        "provider": { "proxmox": {} },
        "resource": { "proxmox_vm_qemu": { "vm": {
            "name": "tf-vm",
            "vmid": VMID,
            "target_node": "pve1",
            "clone": "debian-12-cloud",
            "full_clone": true,
            "os_type": "cloud-init",
            "memory": 2048,
            "cpu": [{ "cores": 2, "sockets": 1 }],
            "power_state": "stopped",
            "disk": [
                { "slot": "ide2", "type": "cloudinit", "storage": "local-lvm" },
                { "slot": "scsi0", "type": "disk", "storage": "local-lvm", "size": "12G" }
            ],
            "network": [{ "id": 0, "model": "virtio", "bridge": "vmbr0" }],
            "lifecycle": { "ignore_changes": ["target_node", "power_state", "disk", "cicustom"] }
        } } }
    })
}

/// The error of a refused attack (a test failure if it got through).
fn refusal(report: &RunReport) -> String {
    match &report.result {
        Ok(v) => panic!("the attack must be refused; the plugin got: {v}"),
        Err(e) => e.to_string(),
    }
}

/// The run's journal as text.
fn journal_text(report: &RunReport) -> String {
    std::fs::read_to_string(&report.journal).expect("journal")
}

/// The terraform capability calls the run made, in order, with their outcome.
fn terraform_calls(report: &RunReport) -> Vec<(String, String)> {
    cradle_tests::journal_events(&report.journal)
        .into_iter()
        .filter(|e| e["event"] == "capability_call" && e["capability"] == "terraform")
        .map(|e| {
            let f = e["function"].as_str().unwrap_or_default().to_string();
            (f, e["outcome"]["result"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// The plugin's write was denied and it ran no terraform command after it.
fn assert_refused_at_write(report: &RunReport) {
    let calls = terraform_calls(report);
    assert_eq!(calls, [("write-module".to_string(), "denied".to_string())], "{calls:?}");
}

/// No file under `dir` (recursively) holds `needle`.
fn assert_nowhere_under(dir: &Path, needle: &str) {
    for e in std::fs::read_dir(dir).expect("list").flatten() {
        let p = e.path();
        let kind = e.file_type().expect("type");
        if kind.is_dir() {
            assert_nowhere_under(&p, needle);
        } else if kind.is_file() {
            let bytes = std::fs::read(&p).unwrap_or_default();
            assert!(!String::from_utf8_lossy(&bytes).contains(needle), "{} holds it", p.display());
        }
    }
}

#[test]
fn a_local_exec_provisioner_on_terraform_data_is_refused_before_any_terraform_command() {
    let lab = Lab::new();
    let marker = lab.dir().join("provisioner-ran");
    let mut module = vm_module();
    module["resource"]["terraform_data"] = json!({ "x": { "provisioner": { "local-exec": {
        "command": format!("env > {}", marker.display())
    } } } });
    let r = lab.apply(&module);
    let err = refusal(&r);
    for part in ["main.tf.json at $.resource.terraform_data", "no terraform_data"] {
        assert!(err.contains(part), "the refusal names `{part}`: {err}");
    }
    assert_refused_at_write(&r);
    assert!(!marker.exists(), "the provisioner never ran");
    assert!(!lab.module_dir().join("main.tf.json").exists(), "the module was not written");
    assert!(lab.guests().is_empty(), "nothing was created: {:?}", lab.guests());
}

#[test]
fn a_file_function_in_a_module_output_is_refused_and_the_file_never_reaches_the_plugin() {
    let lab = Lab::new();
    let canary = lab.dir().join("canary-shadow");
    let secret = "root:$6$canary-hash-7f3a9c:19000:0:99999:7:::";
    std::fs::write(&canary, secret).expect("write the canary");
    let mut module = vm_module();
    module["output"] = json!({ "leak": { "value": format!("${{file(\"{}\")}}", canary.display()) } });
    let r = lab.apply(&module);
    let err = refusal(&r);
    for part in ["$.output.leak.value", "is a template expression", "no functions such as file()"] {
        assert!(err.contains(part), "the refusal names `{part}`: {err}");
    }
    assert!(!err.contains("canary-hash"), "{err}");
    assert_refused_at_write(&r);
    assert!(!journal_text(&r).contains("canary-hash"), "the journal never holds the file's content");
    std::fs::remove_file(&canary).expect("remove the canary");
    assert_nowhere_under(lab.dir(), "canary-hash");
    assert!(lab.guests().is_empty(), "nothing was created: {:?}", lab.guests());
}

#[test]
fn a_local_exec_printing_the_token_reversed_is_refused_and_the_reversed_token_appears_nowhere() {
    let lab = Lab::new();
    let marker = lab.dir().join("token-printed");
    let mut module = vm_module();
    // On the VM itself this time: a provisioner in the one allowed resource.
    module["resource"]["proxmox_vm_qemu"]["vm"]["provisioner"] = json!({ "local-exec": {
        "command": format!("printf %s \"$PM_API_TOKEN_SECRET\" | rev | tee {}", marker.display())
    } });
    let r = lab.apply(&module);
    let err = refusal(&r);
    for part in ["$.resource.proxmox_vm_qemu.vm.provisioner", "no provisioner"] {
        assert!(err.contains(part), "the refusal names `{part}`: {err}");
    }
    assert_refused_at_write(&r);
    assert!(!marker.exists(), "no provisioner ran");
    let token = lab.h.project.sims.get("sim").expect("the simulator the run started").token();
    let secret = token.split_once('=').map_or(token.as_str(), |(_, s)| s);
    let reversed: String = secret.chars().rev().collect();
    assert!(!err.contains(&reversed) && !err.contains(secret), "{err}");
    assert!(!journal_text(&r).contains(&reversed), "the journal never holds the reversed token");
    assert_nowhere_under(lab.dir(), &reversed);
    assert!(lab.guests().is_empty(), "nothing was created: {:?}", lab.guests());
}

#[test]
fn a_local_backend_putting_the_state_outside_the_module_root_is_refused() {
    let lab = Lab::new();
    let outside = lab.dir().join("outside");
    let state = outside.join("stolen.tfstate");
    let mut module = vm_module();
    module["terraform"]["backend"] = json!({ "local": { "path": state.display().to_string() } });
    let r = lab.apply(&module);
    let err = refusal(&r);
    for part in ["$.terraform.backend", "no backend or cloud: the state stays in the module directory"] {
        assert!(err.contains(part), "the refusal names `{part}`: {err}");
    }
    assert_refused_at_write(&r);
    assert!(!outside.exists(), "no file outside the module root");
    assert!(lab.guests().is_empty(), "nothing was created: {:?}", lab.guests());
}

#[test]
fn a_module_creating_a_vm_outside_the_proxmox_grant_is_refused_by_the_grant() {
    let lab = Lab::new();
    let mut module = vm_module();
    let vm = &mut module["resource"]["proxmox_vm_qemu"]["vm"];
    vm["vmid"] = json!(5000);
    vm["disk"] = json!([
        { "slot": "ide2", "type": "cloudinit", "storage": "local" },
        { "slot": "scsi0", "type": "disk", "storage": "local", "size": "12G" }
    ]);
    let r = lab.apply(&module);
    let err = refusal(&r);
    for part in [
        "module `tf-attack` creates VM 5000 on pve1, outside the proxmox grant",
        "vmid 5000 is outside plugins.hostile.grants.proxmox.vmids",
    ] {
        assert!(err.contains(part), "the refusal names `{part}`: {err}");
    }
    assert_refused_at_write(&r);
    assert!(!sim_vms(&lab.dir().join("state")).contains_key(&5000), "the simulator has no VM 5000");
    assert!(lab.guests().is_empty(), "nothing was created: {:?}", lab.guests());
}

#[test]
fn a_module_booting_the_vm_with_another_vms_snippets_is_refused_by_the_grant() {
    let lab = Lab::new();
    let mut module = vm_module();
    // On a granted storage, but another VM's user-data: its users and keys.
    module["resource"]["proxmox_vm_qemu"]["vm"]["cicustom"] = json!("user=local-lvm:snippets/prod-db-user.yaml");
    let r = lab.apply(&module);
    let err = refusal(&r);
    for part in ["gives VM", "the snippets `user=local-lvm:snippets/prod-db-user.yaml`", "outside the proxmox grant"] {
        assert!(err.contains(part), "the refusal names `{part}`: {err}");
    }
    assert_refused_at_write(&r);
    assert!(lab.guests().is_empty(), "nothing was created: {:?}", lab.guests());
}

#[test]
fn removing_the_resource_or_replacing_the_vm_without_the_destructive_grant_destroys_nothing() {
    let lab = Lab::new();
    // Legitimately: the VM inside the grant is created through terraform.
    let created = lab.apply(&vm_module());
    let got = created.result.as_ref().map(ToString::to_string).expect("a module inside the grant applies");
    assert!(got.contains("applied: "), "{got}");
    assert_eq!(lab.guests(), [VMID], "terraform created the VM");

    // The module with the resource removed: refused before terraform sees it.
    let mut removed = vm_module();
    removed.as_object_mut().expect("object").remove("resource");
    let r = lab.apply(&removed);
    let err = refusal(&r);
    for part in ["declares no proxmox_vm_qemu.vm", "a removal is a destroy plan", "destructive"] {
        assert!(err.contains(part), "the refusal names `{part}`: {err}");
    }
    assert_refused_at_write(&r);

    // A destroy plan of the module as it is: refused by the grant.
    let r = lab.attack_as("test", "destroy", "", Vec::new());
    let err = refusal(&r);
    assert!(err.contains("plugins.hostile.grants.terraform.destructive is not true"), "{err}");

    // A change that makes terraform replace (destroy, then create) the VM: the
    // plan is made, and the host's approval of the plan file refuses it in apply.
    let mut replaced = vm_module();
    replaced["resource"]["proxmox_vm_qemu"]["vm"]["clone"] = json!("debian-13-cloud");
    let r = lab.apply(&replaced);
    let err = refusal(&r);
    for part in ["the saved plan of module `tf-attack` is refused, nothing was applied", "proxmox_vm_qemu.vm"] {
        assert!(err.contains(part), "the refusal names `{part}`: {err}");
    }
    let calls = terraform_calls(&r);
    assert_eq!(calls.last().map(|(f, o)| (f.as_str(), o.as_str())), Some(("apply", "denied")), "{calls:?}");

    assert_eq!(lab.guests(), [VMID], "the VM still exists");
    let state = std::fs::read_to_string(lab.module_dir().join("terraform.tfstate")).expect("state");
    assert!(state.contains("\"clone\": \"debian-12-cloud\""), "the state still holds the original VM");
}

/// The run's VM binding for the probe's VM spec, with the inventory's
/// `vms_terraform_allow_replacement` = `allows`.
fn run_vm(allows: bool) -> Vec<ScopedVm> {
    vec![ScopedVm { name: "tf:apply".into(), vmid: VMID, ssh: None, owned: false, allow_replacement: allows }]
}

#[test]
fn a_replacement_applies_only_when_the_destructive_grant_and_the_vms_inventory_flag_both_allow_it() {
    let lab = Lab::new();
    let created = lab.attack_as("replacer", "apply", &vm_module().to_string(), run_vm(false));
    created.result.as_ref().expect("a module inside the grant applies");
    assert_eq!(lab.guests(), [VMID]);
    let mut replaced = vm_module();
    replaced["resource"]["proxmox_vm_qemu"]["vm"]["clone"] = json!("debian-13-cloud");

    // The grant is destructive, but the inventory does not allow replacing this VM.
    let r = lab.attack_as("replacer", "apply", &replaced.to_string(), run_vm(false));
    let err = refusal(&r);
    for part in [
        "the saved plan of module `tf-attack` is refused, nothing was applied",
        "plugins.replacer.grants.terraform.destructive is true (it is true)",
        "the inventory's vms_terraform_allow_replacement for tf:apply is false",
    ] {
        assert!(err.contains(part), "the refusal names `{part}`: {err}");
    }
    let state = || std::fs::read_to_string(lab.module_dir().join("terraform.tfstate")).expect("state");
    assert!(state().contains("\"clone\": \"debian-12-cloud\""), "the VM was not replaced");
    assert_eq!(lab.guests(), [VMID], "the VM still exists");

    // The inventory allows it: the host approves the replacement.
    let r = lab.attack_as("replacer", "apply", &replaced.to_string(), run_vm(true));
    let got = r.result.as_ref().map(ToString::to_string).expect("the replacement applies");
    assert!(got.contains("replace proxmox_vm_qemu.vm"), "{got}");
    assert!(state().contains("\"clone\": \"debian-13-cloud\""), "rebuilt from the new template");
    assert_eq!(lab.guests(), [VMID], "the same VMID, rebuilt");
}
