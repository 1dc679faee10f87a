//! The plugin kit, end to end through the real `cradle` binary and the real
//! Rust toolchain: `cradle plugin new` writes a crate that `cradle plugin
//! build` turns into a component, which provisions `cradle init`'s example
//! inventory on the simulated cluster; the crate's own tests pass; `cradle
//! plugin test` runs a plugin in-process against the simulator; a generated
//! plugin without its grant, or built with the kit of another WIT version, is
//! refused with the documented message.
//!
//! The generated crates build into `target/kit` (one directory for every
//! test, so wit-bindgen is compiled once per machine, not once per test).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use cradle_tests::{cradle_bin, workspace};

/// The kit builds' target directory.
fn kit_target() -> PathBuf {
    workspace().join("target/kit")
}

/// Run cradle in `dir` with the kit's target directory.
fn cradle(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(cradle_bin())
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", kit_target())
        .env_remove("CRADLE_CONFIG")
        .env("NO_COLOR", "1")
        .output()
        .expect("run cradle")
}

fn text(out: &std::process::Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `cradle plugin new NAME [--backend]` then `cradle plugin build`: the crate's directory and its component.
fn new_and_build(dir: &Path, name: &str, backend: bool) -> (PathBuf, PathBuf) {
    let crate_dir = dir.join(name);
    let mut args = vec!["plugin", "new", name, "--dir", crate_dir.to_str().expect("utf-8")];
    if backend {
        args.push("--backend");
    }
    let out = cradle(dir, &args);
    assert!(out.status.success(), "{}", text(&out));
    let out = cradle(dir, &["--output", "json", "plugin", "build", crate_dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("build prints JSON");
    let wasm = PathBuf::from(doc["wasm"].as_str().expect("wasm path"));
    assert!(wasm.is_file(), "{}", wasm.display());
    (crate_dir, wasm)
}

/// `cradle init` in `dir/project`, its guests moved to `127.<subnet>.0.x`
/// (tests run side by side), the plugin at `wasm` configured with `grants`
/// and an environment `mine` that uses it.
fn project_with(dir: &Path, name: &str, wasm: &Path, grants: &str, subnet: u8) -> PathBuf {
    let project = dir.join("project");
    let out = cradle(dir, &["init", project.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    for file in ["inventory/hosts.ini", "inventory/group_vars/all.yml"] {
        let path = project.join(file);
        let body = std::fs::read_to_string(&path).expect("read inventory");
        std::fs::write(&path, body.replace("127.20.0", &format!("127.{subnet}.0"))).expect("write inventory");
    }
    let config = project.join("cradle.toml");
    let mut toml = std::fs::read_to_string(&config).expect("read cradle.toml");
    toml.push_str(&format!(
        "\n[environments.mine]\ncluster = \"sim\"\nbackend = \"{name}\"\n\n[plugins.{name}]\npath = {}\n{grants}",
        toml_string(wasm)
    ));
    std::fs::write(&config, toml).expect("write cradle.toml");
    project
}

fn toml_string(path: &Path) -> String {
    serde_json::Value::String(path.display().to_string()).to_string()
}

fn provision(project: &Path) -> (std::process::Output, serde_json::Value) {
    let out = cradle(project, &["--output", "json", "provision", "-i", "inventory", "--env", "mine"]);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out, doc)
}

fn results(doc: &serde_json::Value) -> Vec<String> {
    doc["hosts"].as_array().into_iter().flatten().map(|h| h["result"].as_str().unwrap_or("").to_string()).collect()
}

const PROXMOX_GRANT: &str = r#"[plugins.mine.grants.proxmox]
nodes = ["*"]
vmids = "100-999"
storages = ["local-lvm", "local"]
templates = ["debian-12-cloud"]
destructive = true
"#;

#[test]
fn a_new_backend_plugin_builds_and_provisions_the_example_inventory_on_the_simulator() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, wasm) = new_and_build(tmp.path(), "mine", true);
    let project = project_with(tmp.path(), "mine", &wasm, PROXMOX_GRANT, 77);

    let (out, doc) = provision(&project);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(results(&doc), ["created", "created"], "{doc:#}");
    let (out, doc) = provision(&project);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(results(&doc), ["skipped", "skipped"], "a rerun changes nothing: {doc:#}");

    // Requested vs granted, for the component file.
    let out = cradle(&project, &["--output", "json", "plugins", "inspect", wasm.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect JSON");
    assert_eq!(doc["name"], "mine", "the file is found as the configured plugin: {doc:#}");
    assert_eq!(doc["admitted"], true, "{doc:#}");
    let proxmox = doc["capabilities"].as_array().expect("caps").iter().find(|c| c["capability"] == "proxmox").cloned();
    assert_eq!(
        proxmox,
        Some(serde_json::json!({ "capability": "proxmox", "requested": true, "imported": true, "granted": true }))
    );
}

#[test]
fn a_generated_plugin_asking_for_an_ungranted_capability_is_refused_with_the_documented_message() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, wasm) = new_and_build(tmp.path(), "mine", true);
    let project = project_with(tmp.path(), "mine", &wasm, "", 78);
    let (out, _) = provision(&project);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    // docs/PLUGINS.md quotes this message (tutorial, step 6).
    assert!(
        err.contains("plugin `mine` imports `cradle:host/proxmox@0.1.0`, which is not granted: add [plugins.mine.grants.proxmox] to cradle.toml"),
        "{}",
        text(&out)
    );
    let vms = project.join(".cradle/sim/sim/state.json");
    let state = std::fs::read_to_string(vms).unwrap_or_default();
    assert!(!state.contains("\"test-0\""), "nothing was created: {state}");
}

#[test]
fn the_generated_crates_own_tests_pass_and_run_it_through_cradle() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (crate_dir, _) = new_and_build(tmp.path(), "mine", true);
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["test", "--manifest-path"])
        .arg(crate_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", kit_target())
        .env("CRADLE", cradle_bin())
        .output()
        .expect("run cargo test");
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("test tests::a_fresh_clone_gets_the_spec_and_keeps_its_mac ... ok"), "{all}");
    assert!(all.contains("test the_plugin_works_through_cradle_on_the_simulated_cluster ... ok"), "{all}");
    // The generated code is as rustfmt writes it: `cargo fmt` changes nothing.
    let fmt = Command::new("rustfmt")
        .args(["--edition", "2024", "--check"])
        .arg(crate_dir.join("src/lib.rs"))
        .arg(crate_dir.join("tests/simulator.rs"))
        .output()
        .expect("run rustfmt");
    assert!(fmt.status.success(), "{}", text(&fmt));
}

#[test]
fn plugin_test_runs_a_plugin_in_process_against_the_simulator() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (crate_dir, wasm) = new_and_build(tmp.path(), "plans", false);
    let before = scratch_dirs("plans");
    // A crate directory (built first) and a component file both work.
    for target in [&crate_dir, &wasm] {
        let out = cradle(tmp.path(), &["plugin", "test", target.to_str().expect("utf-8"), "--check"]);
        let all = text(&out);
        assert!(out.status.success(), "{all}");
        assert!(all.contains("== plans passed: provision --check"), "{all}");
    }
    // The minimal plugin creates nothing: a full test fails, naming the step and the VM.
    let out = cradle(tmp.path(), &["plugin", "test", wasm.to_str().expect("utf-8")]);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("plans failed at `provision`") && all.contains("only plans; it cannot create test-0"),
        "{all}"
    );
    assert_eq!(scratch_dirs("plans"), before, "every throwaway project is removed, also after a failure");
}

/// The throwaway projects of `cradle plugin test` for plugin `name`.
fn scratch_dirs(name: &str) -> Vec<String> {
    let prefix = format!("cradle-plugin-test-{name}-");
    let mut dirs: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .expect("tmp")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn a_plugin_built_with_the_kit_of_another_wit_version_is_refused_naming_both_versions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let crate_dir = tmp.path().join("old");
    let out = cradle(tmp.path(), &["plugin", "new", "old", "--dir", crate_dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    // The kit of a (hypothetical) cradle speaking WIT 0.0.9.
    let lib = crate_dir.join("cradle-guest/src/lib.rs");
    let kit = std::fs::read_to_string(&lib).expect("kit");
    assert!(kit.contains("\"wit = \\\"0.1.0\\\"\\n\""), "the manifest macro names the kit's WIT version");
    std::fs::write(&lib, kit.replace("\"wit = \\\"0.1.0\\\"\\n\"", "\"wit = \\\"0.0.9\\\"\\n\"")).expect("write kit");
    let out = cradle(tmp.path(), &["plugin", "build", crate_dir.to_str().expect("utf-8")]);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains(
            "plugin `old` was built with the plugin kit for cradle:host@0.0.9, but this cradle speaks cradle:host@0.1.0"
        ),
        "{all}"
    );
}

#[test]
fn plugin_build_without_the_wasm_target_says_how_to_install_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let crate_dir = tmp.path().join("mine");
    let out = cradle(tmp.path(), &["plugin", "new", "mine", "--dir", crate_dir.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out));
    // A rustc whose wasm32-wasip2 standard library is not installed.
    let rustc = tmp.path().join("rustc");
    std::fs::write(&rustc, "#!/bin/sh\necho /nonexistent/lib/rustlib/wasm32-wasip2/lib\n").expect("write rustc");
    std::fs::set_permissions(&rustc, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = Command::new(cradle_bin())
        .args(["plugin", "build", crate_dir.to_str().expect("utf-8")])
        .env("RUSTC", &rustc)
        .output()
        .expect("run cradle");
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("the wasm32-wasip2 Rust target is not installed: run `rustup target add wasm32-wasip2`"),
        "{all}"
    );
    assert!(!crate_dir.join("target").exists(), "cargo was not run");
}
