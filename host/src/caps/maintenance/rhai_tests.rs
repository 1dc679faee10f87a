//! The `maintenance` script module over script values shaped as the
//! workflow passes them (`vm.spec` as `SpecRecord` serializes, `live` from
//! the `proxmox` module's functions).

use rhai::{Dynamic, Engine, Map, Scope};

fn engine() -> Engine {
    let mut e = Engine::new();
    e.register_static_module("maintenance", super::rhai::module().into());
    e
}

const VM: &str = r#"
    let vm = #{ name: "web-1", spec: #{ name: "web-1", vmid: (), node: "pve1", template: "debian-12",
        storage: "local-lvm", cores: 4, memory_mib: 2048, disk_gib: (), startup_order: (), tags: [],
        environment: "test", allow_replacement: false,
        disks: [#{ slot: "scsi1", storage: "local-lvm", size_gib: 20 }],
        nics: [#{ slot: "net0", bridge: "vmbr0", vlan: 20, address: (), gateway: (), guest_interface: "ens18" }] } };
    let config = #{ cores: "2", memory: "2048", digest: "d0", scsi0: "local-lvm:vm-150-disk-0,size=8G",
        scsi1: "local-lvm:vm-150-disk-1,size=10G", net0: "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=20" };
    let live = #{ vmid: 150, config: config, pending: [], status: #{ status: "running", qmpstatus: "running" } };
"#;

#[test]
fn the_script_module_diffs_a_workflow_vm_and_lifts_disk_for_a_resize() {
    let script = format!(
        "{VM}
        let planned = maintenance::diff(vm, live, #{{ disk_removal: false, nic_replacement: false }});
        let p = maintenance::progress(planned, config, ());
        #{{ planned: planned, lift: maintenance::lift(planned), progress: p,
           cold: maintenance::needs_cold_start([#{{ key: \"cores\", value: \"2\", pending: \"4\", delete: false }}]),
           left: maintenance::outstanding(planned, config, []) }}"
    );
    let out: Map = engine().eval_with_scope(&mut Scope::new(), &script).expect("script");
    let planned = out["planned"].clone().cast::<Map>();
    assert_eq!(planned["digest"].to_string(), "d0", "the digest comes from the config map");
    assert_eq!(planned["vmid"].as_int().expect("vmid"), 150, "vmid from live.vmid");
    assert_eq!(planned["changes"].clone().cast::<rhai::Array>().len(), 2, "cores and scsi1 size");
    assert_eq!(out["lift"].to_string(), r#"["disk"]"#);
    assert_eq!(out["progress"].clone().cast::<Map>()["config"].to_string(), "todo");
    assert!(out["cold"].as_bool().expect("bool"));
    assert_eq!(out["left"].clone().cast::<rhai::Array>().len(), 2);
}

#[test]
fn a_bad_live_value_is_thrown_as_kind_and_message_naming_the_vm() {
    let script = format!(
        "{VM}
        live.config.memory = \"lots\";
        let r = (); try {{ maintenance::diff(vm, live, #{{}}); }} catch (e) {{ r = e; }} r"
    );
    let e: Dynamic = engine().eval(&script).expect("script");
    let e = e.cast::<Map>();
    assert_eq!(e["kind"].to_string(), "invalid");
    let message = e["message"].to_string();
    assert!(message.contains("web-1") && message.contains("memory"), "{message}");
}

#[test]
fn a_plan_without_moves_still_gives_scripts_an_empty_moves_list() {
    // The plan file leaves an empty `moves` out; workflows read it anyway.
    let script = format!(
        "{VM}
        let planned = maintenance::diff(vm, live, #{{}});
        [planned.moves.len(), maintenance::progress(planned, config, ()).moves.len()]"
    );
    let out: rhai::Array = engine().eval(&script).expect("script");
    assert_eq!(out.iter().map(|d| d.as_int().expect("int")).collect::<Vec<_>>(), [0, 0]);
}

#[test]
fn with_disk_move_allowed_the_script_module_plans_the_move_and_its_progress() {
    let script = format!(
        "{VM}
        vm.spec.disks[0].storage = \"fast\";
        let planned = maintenance::diff(vm, live, #{{ disk_move: true }});
        let p = maintenance::progress(planned, config, ());
        [planned.moves[0].to, p.moves[0].disk]"
    );
    let out: rhai::Array = engine().eval(&script).expect("script");
    assert_eq!(out[0].to_string(), "fast");
    assert_eq!(out[1].to_string(), "scsi1");
}
