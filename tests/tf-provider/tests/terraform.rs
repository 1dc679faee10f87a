//! The test provider under the real Terraform CLI, against the simulated cluster, for
//! both flavours: each behaviour is a module with a `telmate` and a `bpg` test.
//!
//! Every test starts its own cluster and module directory; the module is the one
//! docs/TERRAFORM.md renders (VM 120 `web-1` from template 9000 on pve1, 2 GiB, 2
//! cores, a 20 GiB boot disk, a 50 GiB extra disk, one NIC on VLAN 20, two tags).

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Flavour, Harness, VmSpec, describe};

macro_rules! both_flavours {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn telmate() {
                super::$name(super::Flavour::Telmate).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bpg() {
                super::$name(super::Flavour::Bpg).await;
            }
        }
    )*};
}

both_flavours!(
    fresh_apply_creates_one_stopped_vm_with_the_rendered_config,
    second_plan_is_a_noop_and_writes_nothing,
    plan_stays_a_noop_after_the_vm_migrated_and_updates_find_it,
    changed_template_plans_delete_then_create,
    changed_memory_plans_an_update_and_apply_changes_the_config,
    plan_destroy_then_apply_destroys_the_vm,
    vm_deleted_outside_terraform_leaves_the_state_and_is_planned_again,
    missing_credential_variable_is_a_diagnostic_naming_it,
    rejected_token_is_a_diagnostic_naming_the_call_without_the_secret,
    failed_clone_task_is_a_diagnostic_naming_the_call,
    failed_delete_keeps_the_vm_in_the_state,
    tls_is_verified_against_ssl_cert_file_unless_insecure,
    module_without_boot_disk_tags_or_vlan_applies_and_plans_noop,
);

/// A string or number config value as text.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

async fn applied(flavour: Flavour) -> (Harness, VmSpec) {
    let h = Harness::start(flavour, |_| {}).await;
    let spec = VmSpec::default();
    h.write_module(&spec);
    h.apply().await;
    (h, spec)
}

async fn fresh_apply_creates_one_stopped_vm_with_the_rendered_config(flavour: Flavour) {
    let (h, spec) = applied(flavour).await;
    assert_eq!(h.vms().await, vec![(120, "pve1".to_string(), "stopped".to_string())]);
    let cfg = h.config("pve1", 120).await;
    assert_eq!(cfg["name"], "web-1");
    assert_eq!(text(&cfg["memory"]), "2048");
    assert_eq!(text(&cfg["cores"]), "2");
    let net0 = text(&cfg["net0"]);
    assert!(net0.starts_with("virtio=") && net0.ends_with(",bridge=vmbr0,tag=20"), "net0 = {net0}");
    assert_eq!(text(&cfg["cicustom"]), spec.cicustom());
    assert_eq!(text(&cfg["tags"]), "env-test;web");
    assert!(text(&cfg["scsi0"]).ends_with(",size=20G"), "scsi0 = {}", cfg["scsi0"]);
    assert_eq!(text(&cfg["scsi1"]), "local-lvm:vm-120-disk-1,size=50G");
    assert!(text(&cfg["ide2"]).starts_with("local-lvm:vm-120-cloudinit"), "ide2 = {}", cfg["ide2"]);
    let state = h.state_values().await;
    match flavour {
        Flavour::Telmate => {
            assert_eq!(text(&cfg["sockets"]), "1");
            assert_eq!(state["id"], "pve1/qemu/120");
            assert_eq!(state["current_node"], "pve1");
            assert_eq!(state["vmid"], 120);
        }
        Flavour::Bpg => {
            assert_eq!(state["id"], "120");
            assert_eq!(state["vm_id"], 120);
            assert_eq!(state["clone"], serde_json::json!([{"vm_id": 9000, "full": true}]));
        }
    }
}

async fn second_plan_is_a_noop_and_writes_nothing(flavour: Flavour) {
    let (h, _) = applied(flavour).await;
    let before = h.writes();
    assert_eq!(h.plan(&[], "noop.tfplan").await, 0, "the second plan has changes");
    assert_eq!(h.writes(), before, "planning wrote to the cluster");
    assert_eq!(h.planned_actions("noop.tfplan").await, ["no-op"]);
    let plan = h.show(Some("noop.tfplan")).await;
    assert!(plan.get("resource_drift").is_none_or(|d| d.as_array().is_some_and(Vec::is_empty)), "drift: {plan}");
}

async fn plan_stays_a_noop_after_the_vm_migrated_and_updates_find_it(flavour: Flavour) {
    let (h, mut spec) = applied(flavour).await;
    h.migrate(120, "pve1", "pve2").await;
    assert_eq!(h.plan(&[], "migrated.tfplan").await, 0, "a migrated VM plans changes");
    let out = h.tf(&["apply", "-refresh-only", "-auto-approve", "-no-color"]).await;
    assert!(out.status.success(), "refresh-only apply: {}", describe(&out));
    let state = h.state_values().await;
    match flavour {
        Flavour::Telmate => {
            assert_eq!(state["current_node"], "pve2");
            assert_eq!(state["id"], "pve2/qemu/120");
        }
        Flavour::Bpg => assert_eq!(state["node_name"], "pve2"),
    }
    spec.memory = 3072;
    h.write_module(&spec);
    h.apply().await;
    assert_eq!(text(&h.config("pve2", 120).await["memory"]), "3072");
    assert_eq!(h.vms().await, vec![(120, "pve2".to_string(), "stopped".to_string())]);
}

async fn changed_template_plans_delete_then_create(flavour: Flavour) {
    let (h, mut spec) = applied(flavour).await;
    spec.template_name = "debian-13-cloud".into();
    spec.template_vmid = 9001;
    h.write_module(&spec);
    assert_eq!(h.plan(&[], "replace.tfplan").await, 2);
    let plan = h.show(Some("replace.tfplan")).await;
    let change = plan["resource_changes"].as_array().unwrap().iter().find(|c| c["address"] == flavour.address());
    let change = change.expect("a change for the VM");
    assert_eq!(change["change"]["actions"], serde_json::json!(["delete", "create"]));
    assert_eq!(change["action_reason"], "replace_because_cannot_update");
    let path = match flavour {
        Flavour::Telmate => serde_json::json!([["clone"]]),
        Flavour::Bpg => serde_json::json!([["clone", 0, "vm_id"]]),
    };
    assert_eq!(change["change"]["replace_paths"], path);
    let out = h.tf(&["apply", "-auto-approve", "-no-color", "replace.tfplan"]).await;
    assert!(out.status.success(), "apply of the replacement: {}", describe(&out));
    assert_eq!(h.vms().await, vec![(120, "pve1".to_string(), "stopped".to_string())]);
}

async fn changed_memory_plans_an_update_and_apply_changes_the_config(flavour: Flavour) {
    let (h, mut spec) = applied(flavour).await;
    spec.memory = 4096;
    h.write_module(&spec);
    assert_eq!(h.plan(&[], "memory.tfplan").await, 2);
    assert_eq!(h.planned_actions("memory.tfplan").await, ["update"]);
    let out = h.tf(&["apply", "-auto-approve", "-no-color", "memory.tfplan"]).await;
    assert!(out.status.success(), "apply of the update: {}", describe(&out));
    assert_eq!(text(&h.config("pve1", 120).await["memory"]), "4096");
    assert_eq!(h.plan(&[], "after.tfplan").await, 0, "the plan after the update has changes");
}

async fn plan_destroy_then_apply_destroys_the_vm(flavour: Flavour) {
    let (h, _) = applied(flavour).await;
    assert_eq!(h.plan(&["-destroy"], "destroy.tfplan").await, 2);
    assert_eq!(h.planned_actions("destroy.tfplan").await, ["delete"]);
    let out = h.tf(&["apply", "-auto-approve", "-no-color", "destroy.tfplan"]).await;
    assert!(out.status.success(), "apply of the destroy plan: {}", describe(&out));
    assert_eq!(h.vms().await, vec![], "the VM is still there");
    assert_eq!(h.state_values().await, Value::Null);
}

async fn vm_deleted_outside_terraform_leaves_the_state_and_is_planned_again(flavour: Flavour) {
    let (h, _) = applied(flavour).await;
    h.api("DELETE", "/nodes/pve1/qemu/120", &[]).await;
    for _ in 0..200 {
        if h.vms().await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(h.plan(&[], "gone.tfplan").await, 2);
    assert_eq!(h.planned_actions("gone.tfplan").await, ["create"]);
}

async fn missing_credential_variable_is_a_diagnostic_naming_it(flavour: Flavour) {
    let mut h = Harness::start(flavour, |_| {}).await;
    let var = match flavour {
        Flavour::Telmate => "PM_API_TOKEN_SECRET",
        Flavour::Bpg => "PROXMOX_VE_API_TOKEN",
    };
    h.env.insert(var.into(), None);
    h.write_module(&VmSpec::default());
    let out = h.tf(&["apply", "-auto-approve", "-no-color"]).await;
    assert!(!out.status.success(), "apply without {var} succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("environment variable {var} is not set")), "{}", describe(&out));
    assert_eq!(h.vms().await, vec![]);
}

async fn rejected_token_is_a_diagnostic_naming_the_call_without_the_secret(flavour: Flavour) {
    let mut h = Harness::start(flavour, |_| {}).await;
    let secret = "wrong-s3cret-0123456789";
    let id = h.sim.token().split_once('=').map(|(id, _)| id.to_string()).unwrap();
    match flavour {
        Flavour::Telmate => h.env.insert("PM_API_TOKEN_SECRET".into(), Some(secret.into())),
        Flavour::Bpg => h.env.insert("PROXMOX_VE_API_TOKEN".into(), Some(format!("{id}={secret}"))),
    };
    h.write_module(&VmSpec::default());
    let out = h.tf(&["apply", "-auto-approve", "-no-color"]).await;
    assert!(!out.status.success(), "apply with a wrong token succeeded");
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(all.contains("GET /cluster/resources: HTTP 401"), "{}", describe(&out));
    assert!(!all.contains(secret), "the secret leaked: {}", describe(&out));
}

async fn failed_clone_task_is_a_diagnostic_naming_the_call(flavour: Flavour) {
    let h = Harness::start(flavour, |c| {
        c.faults = cradle_sim::FaultSpec::parse("clone-fail=1").expect("fault spec");
    })
    .await;
    h.write_module(&VmSpec::default());
    let out = h.tf(&["apply", "-auto-approve", "-no-color"]).await;
    assert!(!out.status.success(), "apply with a failing clone succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("POST /nodes/pve1/qemu/9000/clone"), "{}", describe(&out));
    assert!(stderr.contains("clone failed"), "{}", describe(&out));
    assert_eq!(h.vms().await, vec![]);
    assert_eq!(h.state_values().await, Value::Null);
}

async fn failed_delete_keeps_the_vm_in_the_state(flavour: Flavour) {
    let (mut h, _) = applied(flavour).await;
    let before = h.state_values().await;
    let secret = "wrong-s3cret-0123456789";
    let id = h.sim.token().split_once('=').map(|(id, _)| id.to_string()).unwrap();
    match flavour {
        Flavour::Telmate => h.env.insert("PM_API_TOKEN_SECRET".into(), Some(secret.into())),
        Flavour::Bpg => h.env.insert("PROXMOX_VE_API_TOKEN".into(), Some(format!("{id}={secret}"))),
    };
    // tf-provider appends a backtrace to diagnostics it builds when this is set.
    h.env.insert("RUST_BACKTRACE".into(), Some("1".into()));
    let out = h.tf(&["destroy", "-auto-approve", "-refresh=false", "-no-color"]).await;
    assert!(!out.status.success(), "destroy with a rejected token succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot delete the VM"), "{}", describe(&out));
    assert!(stderr.contains("GET /cluster/resources: HTTP 401"), "{}", describe(&out));
    assert!(!stderr.contains("tf_provider::"), "a backtrace in the diagnostic: {}", describe(&out));
    assert_eq!(h.state_values().await, before, "the state lost the VM");
    assert_eq!(h.vms().await.len(), 1);
}

async fn tls_is_verified_against_ssl_cert_file_unless_insecure(flavour: Flavour) {
    let mut h = Harness::start(flavour, |_| {}).await;
    h.write_module(&VmSpec::default());
    // Without the simulator's CA the system roots do not trust its certificate.
    h.env.insert("SSL_CERT_FILE".into(), None);
    let out = h.tf(&["apply", "-auto-approve", "-no-color"]).await;
    assert!(!out.status.success(), "apply against an untrusted certificate succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("GET /cluster/resources: request failed") || stderr.contains("no CA bundle"),
        "{}",
        describe(&out)
    );
    assert_eq!(h.vms().await, vec![]);
    let (var, value) = match flavour {
        Flavour::Telmate => ("PM_TLS_INSECURE", "true"),
        Flavour::Bpg => ("PROXMOX_VE_INSECURE", "1"),
    };
    h.env.insert(var.into(), Some(value.into()));
    h.apply().await;
    assert_eq!(h.vms().await.len(), 1);
}

async fn module_without_boot_disk_tags_or_vlan_applies_and_plans_noop(flavour: Flavour) {
    let h = Harness::start(flavour, |_| {}).await;
    let spec = VmSpec { disk_gib: None, tags: vec![], nics: vec![("vmbr0".into(), None)], ..VmSpec::default() };
    h.write_module(&spec);
    h.apply().await;
    let cfg = h.config("pve1", 120).await;
    assert!(text(&cfg["scsi0"]).ends_with(",size=3G"), "the template's boot disk changed: {}", cfg["scsi0"]);
    assert!(text(&cfg["net0"]).ends_with(",bridge=vmbr0"), "net0 = {}", cfg["net0"]);
    assert!(cfg.get("tags").is_none(), "tags = {}", cfg["tags"]);
    assert_eq!(h.plan(&[], "noop.tfplan").await, 0, "the second plan has changes");
}
