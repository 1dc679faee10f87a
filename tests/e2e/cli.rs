//! The real `cradle` binary, end to end: every kind of bad input gets one
//! paragraph naming the file, the field or the function and what to do — never
//! a panic or a backtrace — and the commands print what the README promises.
//!
//! Needs `target/debug/cradle` and the sample and hostile plugins (`scripts/test`
//! builds them: `cargo build --profile plugin --target wasm32-wasip2
//! -p cradle-plugin-sample -p cradle-plugin-direct -p cradle-plugin-hostile`, then
//! `scripts/build`).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use cradle_tests::{Fixture, Out, VM_SPEC_RHAI, cradle_bin};

const CONFIG: &str = r#"
default_environment = "test"
state_dir = "state"
[workflow.grants.lock]
prefixes = ["*"]
[clusters.sim]
kind = "sim"
[environments.test]
cluster = "sim"
backend = "sample"
[plugins.sample]
path = "@SAMPLE@"
"#;

const HOSTILE: &str = r#"
[plugins.hostile]
path = "@HOSTILE@"
memory_limit_mib = 32
timeout_ms = 300
"#;

const HOSTILE_GRANTS: &str = r#"
[plugins.hostile.grants.proxmox]
nodes = ["pve1"]
vmids = "100-199"
[plugins.hostile.grants.lock]
prefixes = ["vm/"]
[plugins.hostile.grants.ssh]
hosts = ["guests"]
[plugins.hostile.grants.dns]
zones = []
[plugins.hostile.grants.checkpoint]
[plugins.hostile.grants.terraform]
module_root = "terraform"
[plugins.hostile.grants.http]
endpoints = []
"#;

/// The workflow most tests run: `lib/vm` is the spec helper of the fixtures.
const APP: &str = r#"
import "lib/vm" as spec;
fn main(name) { cradle::backend().plan(spec::vm(name)) }
fn say(text) { log::info(text); text }
fn bad_name() {
    cradle::backend().plan(#{ name: 1 })
}
fn bad_vmid() {
    let vm = spec::vm("test-0");
    vm.vmid = "x";
    cradle::backend().plan(vm)
}
fn bad_vlan() {
    let vm = spec::vm("test-0");
    vm.nics[0].vlan = "x";
    cradle::backend().plan(vm)
}
"#;

fn project(config: &str) -> Fixture {
    Fixture::new(config, &[("app.rhai", APP), ("lib/vm.rhai", VM_SPEC_RHAI)])
}

fn command(fx: &Fixture, args: &[&str]) -> Command {
    let mut cmd = Command::new(cradle_bin());
    cmd.arg("--config").arg(fx.config()).arg("--state-dir").arg(fx.state()).args(args).current_dir(fx.dir.path());
    // The defaults: no backtraces asked for, no log filter, no colour preference.
    for var in ["RUST_BACKTRACE", "RUST_LIB_BACKTRACE", "CRADLE_LOG", "CRADLE_CONFIG", "CRADLE_STATE_DIR", "NO_COLOR"] {
        cmd.env_remove(var);
    }
    cmd
}

/// Run `cmd`; every invocation must be free of panics and backtraces.
fn output(mut cmd: Command) -> Out {
    let out = Out::from(cmd.output().expect("run cradle"));
    for bad in ["panicked", "stack backtrace", "RUST_BACKTRACE"] {
        assert!(!out.stderr.contains(bad), "{cmd:?} printed {bad:?}:\n{}", out.stderr);
    }
    out
}

/// Run `cradle --config … --state-dir … ARGS` with extra environment `envs`.
fn cradle_env(fx: &Fixture, args: &[&str], envs: &[(&str, &str)]) -> Out {
    let mut cmd = command(fx, args);
    cmd.envs(envs.iter().copied());
    output(cmd)
}

fn cradle(fx: &Fixture, args: &[&str]) -> Out {
    cradle_env(fx, args, &[])
}

/// The invocation failed with exit code 1 and an `error:` line.
fn fails(out: &Out) -> &str {
    assert_eq!(out.code, 1, "expected exit 1:\n{out:#?}");
    assert!(out.stderr.contains("error: "), "no `error:` line:\n{}", out.stderr);
    &out.stderr
}

fn succeeds(out: &Out) -> &str {
    assert_eq!(out.code, 0, "expected success:\n{out:#?}");
    &out.stdout
}

fn write(fx: &Fixture, rel: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = fx.dir.path().join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, bytes).expect("write");
    path
}

/// `project` with a plugin `name` at `plugins/NAME.wasm` (the file is not written).
fn with_plugin(name: &str) -> Fixture {
    project(&format!("{CONFIG}\n[plugins.{name}]\npath = \"plugins/{name}.wasm\"\n"))
}

/// A component from `wat` with a `cradle-manifest` custom section appended.
fn component_with_manifest(wat: &str, manifest: &str) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut wasm = wat::parse_str(wat).expect("wat");
    let name = b"cradle-manifest";
    let mut payload = Vec::new();
    leb128(name.len(), &mut payload);
    payload.extend_from_slice(name);
    payload.extend_from_slice(manifest.as_bytes());
    wasm.push(0);
    leb128(payload.len(), &mut wasm);
    wasm.extend_from_slice(&payload);
    wasm
}

// ---------------------------------------------------------------- cradle.toml

#[test]
fn malformed_toml_names_cradle_toml_and_the_line() {
    let fx = project(CONFIG);
    std::fs::write(fx.config(), "default_environment = \"test\"\n[clusters.sim]\nkind = \"sim\"\n[environments.test\n")
        .expect("write");
    for args in [&["plugins", "list"][..], &["run", "app", "test-0"], &["workflows", "check"]] {
        let out = cradle(&fx, args);
        let err = fails(&out);
        assert!(err.contains("cradle.toml") && err.contains("line 4"), "{err}");
        assert!(err.contains("expected `]`"), "says what is missing: {err}");
    }
}

#[test]
fn an_unknown_key_in_a_grant_is_named_with_the_keys_that_exist() {
    let fx = project(&format!("{CONFIG}[plugins.sample.grants.proxmux]\nnodes = [\"pve1\"]\n"));
    let out = cradle(&fx, &["plugins", "inspect", "sample"]);
    let err = fails(&out);
    assert!(err.contains("cradle.toml") && err.contains("unknown field `proxmux`"), "{err}");
    assert!(err.contains("`proxmox`"), "offers the right spelling: {err}");

    let fx = project(&format!("{CONFIG}[plugins.sample.grants.lock]\nprefixs = [\"vm/\"]\n"));
    let err = cradle(&fx, &["run", "app", "test-0"]);
    let err = fails(&err);
    assert!(err.contains("unknown field `prefixs`, expected `prefixes`"), "{err}");
}

#[test]
fn a_bad_plugin_limit_is_reported_at_its_line_with_the_keys_that_exist() {
    // CONFIG's `[plugins.sample]` is on line 11, its `path` on line 12.
    let fx = project(&format!("{CONFIG}memory_limit_mib = \"big\"\n"));
    let out = cradle(&fx, &["plugins", "list"]);
    let err = fails(&out);
    assert!(err.contains("line 13") && err.contains("memory_limit_mib = \"big\""), "{err}");
    assert!(err.contains("expected u64"), "{err}");

    let fx = project(&format!("{CONFIG}memory_limit = 32\n"));
    let out = cradle(&fx, &["plugins", "list"]);
    let err = fails(&out);
    assert!(err.contains("line 13") && err.contains("unknown field `memory_limit`"), "{err}");
    assert!(err.contains("`memory_limit_mib`") && err.contains("`timeout_ms`"), "offers the right keys: {err}");
}

#[test]
fn an_environment_naming_a_missing_plugin_is_refused_naming_the_field() {
    let fx = project(&CONFIG.replace("backend = \"sample\"", "backend = \"ghost\""));
    let out = cradle(&fx, &["run", "app", "test-0"]);
    let err = fails(&out);
    assert!(err.contains("cradle.toml"), "{err}");
    assert!(
        err.contains("environments.test.backend = \"ghost\" is neither defined in [plugins] (known: sample) nor built in (built-in: direct, sample, terraform)"),
        "{err}"
    );
}

#[test]
fn a_missing_config_file_says_to_create_it_or_pass_config() {
    let fx = project(CONFIG);
    std::fs::remove_file(fx.config()).expect("rm");
    let out = cradle(&fx, &["plugins", "list"]);
    let err = fails(&out);
    assert!(err.contains(&fx.config().display().to_string()), "{err}");
    assert!(err.contains("--config"), "{err}");
}

// -------------------------------------------------------------------- plugins

#[test]
fn a_missing_plugin_file_names_the_path_and_says_to_build_the_plugins() {
    let fx = with_plugin("ghost");
    let expected = fx.dir.path().join("plugins/ghost.wasm").display().to_string();
    for args in [&["plugins", "inspect", "ghost"][..], &["run", "app", "test-0"]] {
        let out = cradle(&fx, args);
        let err = fails(&out);
        assert!(err.contains(&expected), "names the path: {err}");
        assert!(err.contains("build the plugins") && err.contains("plugins.ghost.path"), "{err}");
        assert_eq!(err.matches("No such file").count(), 1, "the cause is stated once: {err}");
    }
    // `list` reports it in its row and still lists the good plugin.
    let out = cradle(&fx, &["plugins", "list"]);
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(
        out.stdout.lines().any(|l| l.starts_with("ghost") && l.contains("ERROR") && l.contains(&expected)),
        "{out:#?}"
    );
    assert!(out.stdout.lines().any(|l| l.starts_with("sample") && !l.contains("ERROR")), "{out:#?}");
}

#[test]
fn a_text_file_as_plugin_is_refused_as_not_a_webassembly_component() {
    let fx = with_plugin("text");
    let path = write(&fx, "plugins/text.wasm", b"#!/bin/sh\necho this is not wasm\n");
    let out = cradle(&fx, &["plugins", "inspect", "text"]);
    let err = fails(&out);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("is not a WebAssembly component") && err.contains("wasm32-wasip2"), "{err}");
    assert_eq!(err.matches("is not a WebAssembly component").count(), 1, "stated once: {err}");
}

/// The refusal should be one line; today wasmparser's `bad magic number`
/// reason is a multi-line debug dump (host/src/plugin/manifest.rs, NotWasm).
#[test]
fn a_text_file_as_plugin_is_refused_in_one_line() {
    let fx = with_plugin("text");
    write(&fx, "plugins/text.wasm", b"#!/bin/sh\necho this is not wasm\n");
    let out = cradle(&fx, &["plugins", "inspect", "text"]);
    let err = fails(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_core_module_is_refused_saying_to_build_for_wasm32_wasip2() {
    let fx = with_plugin("core");
    let path = write(&fx, "plugins/core.wasm", &wat::parse_str("(module)").expect("wat"));
    let out = cradle(&fx, &["plugins", "inspect", "core"]);
    let err = fails(&out);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("is a core WebAssembly module, not a component"), "{err}");
    assert!(err.contains("build the plugin for the wasm32-wasip2 target"), "{err}");
}

#[test]
fn a_component_without_a_manifest_is_refused_saying_how_to_declare_one() {
    let fx = with_plugin("bare");
    let path = write(&fx, "plugins/bare.wasm", &wat::parse_str("(component)").expect("wat"));
    let out = cradle(&fx, &["plugins", "inspect", "bare"]);
    let err = fails(&out);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("no `cradle-manifest` section") && err.contains("cradle_guest::manifest!"), "{err}");
}

#[test]
fn a_plugin_built_against_another_wit_version_names_both_versions_and_says_rebuild() {
    let fx = with_plugin("old");
    let wasm = component_with_manifest(
        r#"(component (import "cradle:host/log@0.0.9" (instance)))"#,
        "name = \"old\"\nversion = \"0.0.9\"\nneeds = [\"log\"]\n",
    );
    write(&fx, "plugins/old.wasm", &wasm);
    for args in [&["plugins", "inspect", "old"][..], &["run", "app", "test-0"]] {
        let out = cradle(&fx, args);
        let err = fails(&out);
        assert!(err.contains("plugin `old`"), "{err}");
        assert!(err.contains("cradle:host/log@0.0.9"), "names what it found: {err}");
        assert!(err.contains("cradle:host@0.1.0"), "names what this cradle speaks: {err}");
        assert!(err.contains("rebuild the plugin"), "{err}");
    }
}

#[test]
fn a_component_without_the_lifecycle_export_is_refused_naming_it() {
    let fx = with_plugin("nolife");
    write(&fx, "plugins/nolife.wasm", &component_with_manifest("(component)", "name = \"nolife\"\nversion = \"1\"\n"));
    let out = cradle(&fx, &["plugins", "inspect", "nolife"]);
    let err = fails(&out);
    assert!(err.contains("does not export `cradle:host/lifecycle@0.1.0`") && err.contains("backend.wit"), "{err}");
}

#[test]
fn a_component_whose_lifecycle_differs_from_the_wit_is_refused_at_load_naming_it() {
    // The right interface name and version, but its only function is not the
    // lifecycle's: `plan` returning a u32, and no `discover`, `create`, ...
    let wat = r#"(component
        (core module $m (func (export "f") (result i32) i32.const 0))
        (core instance $i (instantiate $m))
        (func $plan (result u32) (canon lift (core func $i "f")))
        (instance $life (export "plan" (func $plan)))
        (export "cradle:host/lifecycle@0.1.0" (instance $life))
    )"#;
    let fx = with_plugin("skew");
    write(&fx, "plugins/skew.wasm", &component_with_manifest(wat, "name = \"skew\"\nversion = \"1\"\n"));
    let out = cradle(&fx, &["run", "app", "test-0"]);
    let err = fails(&out);
    assert!(err.contains("plugin `skew` exports the lifecycle interface, but not as wit/backend.wit"), "{err}");
    assert!(err.contains("rebuild the plugin against this cradle's wit/"), "{err}");
}

#[test]
fn inspecting_an_unknown_plugin_names_the_config() {
    let fx = project(CONFIG);
    let out = cradle(&fx, &["plugins", "inspect", "nope"]);
    let err = fails(&out);
    assert!(err.contains("no plugin `nope` in [plugins]") && err.contains("cradle.toml"), "{err}");
}

/// The rows of the capability table of `plugins inspect`: name → [requested, imported, granted].
fn capability_rows(stdout: &str) -> Vec<(String, Vec<String>)> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("capabilities"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let mut cols = l.split_whitespace().map(str::to_string);
            (cols.next().unwrap_or_default(), cols.collect())
        })
        .collect()
}

#[test]
fn inspect_of_an_ungranted_plugin_shows_requested_vs_granted_and_is_not_admitted() {
    let fx = project(&format!("{CONFIG}{HOSTILE}"));
    let out = cradle(&fx, &["plugins", "inspect", "hostile"]);
    assert_eq!(out.code, 1, "{out:#?}");
    let rows = capability_rows(&out.stdout);
    let row = |cap: &str| rows.iter().find(|(c, _)| c == cap).map(|(_, v)| v.join(" ")).unwrap_or_default();
    assert_eq!(row("proxmox"), "yes yes -", "{}", out.stdout);
    assert_eq!(row("lock"), "yes yes -", "{}", out.stdout);
    // Requested, imported (the budget attacks log), and always granted.
    assert_eq!(row("log"), "yes yes yes", "log is always granted: {}", out.stdout);
    assert!(out.stdout.contains("cradle:host/proxmox@0.1.0"), "lists its imports: {}", out.stdout);
    assert!(out.stdout.contains("discover(vm: record)"), "lists its exports: {}", out.stdout);
    let verdict = out.stdout.lines().find(|l| l.starts_with("admitted")).unwrap_or_default();
    assert!(verdict.contains("NO") && verdict.contains("add [plugins.hostile.grants.proxmox]"), "{}", out.stdout);
}

#[test]
fn inspect_of_a_granted_plugin_is_admitted() {
    let fx = project(&format!("{CONFIG}{HOSTILE}{HOSTILE_GRANTS}"));
    let out = cradle(&fx, &["plugins", "inspect", "hostile"]);
    let stdout = succeeds(&out);
    let rows = capability_rows(stdout);
    assert!(rows.iter().any(|(c, v)| c == "proxmox" && v.join(" ") == "yes yes yes"), "{stdout}");
    assert!(stdout.contains("32 MiB memory, 300 ms"), "shows the limits: {stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("admitted") && l.contains("yes")), "{stdout}");
}

#[test]
fn inspect_json_has_imports_exports_capabilities_and_the_verdict() {
    let fx = project(&format!("{CONFIG}{HOSTILE}"));
    let out = cradle(&fx, &["--output", "json", "plugins", "inspect", "hostile"]);
    assert_eq!(out.code, 1, "{out:#?}");
    let doc = out.json();
    assert_eq!(doc["name"], "hostile");
    assert_eq!(doc["manifest"]["name"], "hostile");
    assert_eq!(doc["manifest"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(doc["hash"].as_str().map(str::len), Some(64), "{doc}");
    assert!(doc["imports"].as_array().expect("imports").iter().any(|i| i == "cradle:host/proxmox@0.1.0"), "{doc}");
    assert!(doc["exports"].as_array().expect("exports").iter().any(|e| e == "plan(vm: record)"), "{doc}");
    let proxmox = doc["capabilities"]
        .as_array()
        .expect("capabilities")
        .iter()
        .find(|c| c["capability"] == "proxmox")
        .unwrap_or_else(|| panic!("no proxmox row: {doc}"));
    assert_eq!(proxmox["requested"], true);
    assert_eq!(proxmox["imported"], true);
    assert_eq!(proxmox["granted"], false);
    assert_eq!(doc["limits"]["memory_limit_mib"], 32);
    assert_eq!(doc["limits"]["timeout_ms"], 300);
    assert_eq!(doc["admitted"], false);
    assert!(doc["refusal"].as_str().expect("refusal").contains("not granted"), "{doc}");
}

#[test]
fn plugins_list_shows_each_plugin_with_its_version() {
    let fx = project(&format!("{CONFIG}{HOSTILE}{HOSTILE_GRANTS}"));
    let out = cradle(&fx, &["plugins", "list"]);
    let stdout = succeeds(&out);
    for name in ["sample", "hostile"] {
        let line = stdout.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name}: {stdout}"));
        let mut words = line.split_whitespace().skip(1);
        assert_eq!((words.next(), words.next()), (Some("backend"), Some(env!("CARGO_PKG_VERSION"))), "{line}");
    }
    let netbox = stdout.lines().find(|l| l.starts_with("netbox")).unwrap_or_else(|| panic!("no netbox: {stdout}"));
    assert_eq!(netbox.split_whitespace().nth(1), Some("integration"), "the built-in's kind: {netbox}");
    let doc = cradle(&fx, &["--output", "json", "plugins", "list"]).json();
    let plugins = doc["plugins"].as_array().expect("plugins");
    assert_eq!(plugins.len(), 3, "the two configured and the implied built-in netbox: {doc}");
    assert!(plugins.iter().all(|p| p["status"] == "ok" && p["version"] == env!("CARGO_PKG_VERSION")), "{doc}");
}

#[test]
fn plugins_inspect_shows_the_built_in_netbox_as_an_integration_plugin_under_its_default_grants() {
    let fx = project(CONFIG);
    let out = cradle(&fx, &["plugins", "inspect", "netbox"]);
    let stdout = succeeds(&out);
    assert!(stdout.lines().any(|l| l.split_whitespace().eq(["kind", "integration"])), "{stdout}");
    assert!(stdout.contains("built-in, grants from default (built-in)"), "{stdout}");
    let doc = cradle(&fx, &["--output", "json", "plugins", "inspect", "sample"]).json();
    assert_eq!(doc["kind"], "backend", "{doc}");
}

#[test]
fn a_second_inspect_reuses_the_compiled_component_from_the_cache() {
    let fx = project(CONFIG);
    let first = cradle(&fx, &["--output", "json", "plugins", "inspect", "sample"]);
    assert_eq!(first.code, 0, "{first:#?}");
    assert_eq!(first.json()["cache"], "Miss", "a fresh state dir compiles");
    let second = cradle(&fx, &["--output", "json", "plugins", "inspect", "sample"]);
    assert_eq!(second.code, 0, "{second:#?}");
    assert_eq!(second.json()["cache"], "Hit", "the second run reuses the compilation");
    assert_eq!(first.json()["hash"], second.json()["hash"]);
}

#[test]
fn output_closed_early_is_not_a_panic() {
    let fx = project(CONFIG);
    for args in [&["--output", "json", "plugins", "inspect", "sample"][..], &["plugins", "inspect", "sample"]] {
        let mut child = command(&fx, args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn cradle");
        // The reader goes away at once, as with `cradle … | head -0`.
        drop(child.stdout.take());
        let mut stderr = String::new();
        child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read stderr");
        let status = child.wait().expect("wait");
        assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{stderr}");
        assert!(status.code().is_some(), "exits, not killed: {status:?}");
    }
}

// ------------------------------------------------------------------ workflows

#[test]
fn workflows_check_lists_every_script_and_exits_0() {
    let fx = project(CONFIG);
    let out = cradle(&fx, &["workflows", "check"]);
    let stdout = succeeds(&out);
    let dir = fx.dir.path().join("workflows");
    for rel in ["app.rhai", "lib/vm.rhai"] {
        let expected = format!("ok  {}", dir.join(rel).display());
        assert!(stdout.lines().any(|l| l == expected), "lists {expected}: {stdout}");
    }
}

#[test]
fn workflows_check_names_file_line_and_column_of_a_syntax_error() {
    let fx = project(CONFIG);
    fx.write_script("broken.rhai", "fn main() {\n    let x = ;\n}\n");
    let out = cradle(&fx, &["workflows", "check"]);
    let err = fails(&out);
    assert!(err.contains("workflows/broken.rhai:2:13"), "{err}");

    // A broken shared module is found as well.
    fx.write_script("broken.rhai", "fn main() { 1 }\n");
    fx.write_script("lib/vm.rhai", &format!("{VM_SPEC_RHAI}\nfn oops() {{\n    1 +\n}}\n"));
    let out = cradle(&fx, &["workflows", "check"]);
    let err = fails(&out);
    assert!(err.contains("workflows/lib/vm.rhai:"), "{err}");
}

#[test]
fn workflows_check_json_says_ok_true_or_false() {
    let fx = project(CONFIG);
    let good = cradle(&fx, &["--output", "json", "workflows", "check"]);
    assert_eq!(good.code, 0, "{good:#?}");
    let doc = good.json();
    assert_eq!(doc["ok"], true, "{doc}");
    assert!(doc["scripts"].as_array().expect("scripts").iter().any(|s| s["name"] == "app"), "{doc}");
    assert!(doc["modules"].as_array().expect("modules").iter().any(|s| s["name"] == "lib/vm"), "{doc}");

    fx.write_script("broken.rhai", "fn main() {\n    let x = ;\n}\n");
    let bad = cradle(&fx, &["--output", "json", "workflows", "check"]);
    assert_eq!(bad.code, 1, "{bad:#?}");
    let doc = bad.json();
    assert_eq!(doc["ok"], false, "{doc}");
    assert!(doc["error"].as_str().expect("error").contains("workflows/broken.rhai:2:13"), "{doc}");
}

// ------------------------------------------------------------------------ run

#[test]
fn run_prints_the_result_and_the_run_id() {
    let fx = project(CONFIG);
    let out = cradle(&fx, &["run", "app", "test-0"]);
    let stdout = succeeds(&out);
    let result: serde_json::Value = serde_json::from_str(stdout).expect("the result is JSON");
    assert_eq!(result["action"], "create", "{result}");
    assert!(out.stderr.contains("(succeeded); `cradle runs show "), "{}", out.stderr);
}

#[test]
fn run_with_a_wrong_argument_type_names_the_field_path() {
    let fx = project(CONFIG);
    for (func, path, expected, line) in [
        ("bad_name", "vm.name", "expected string", "app.rhai:6:"),
        ("bad_vmid", "vm.vmid", "expected u32", "app.rhai:11:"),
        ("bad_vlan", "vm.nics[0].vlan", "expected u16", "app.rhai:16:"),
    ] {
        let out = cradle(&fx, &["run", "app", "--fn", func]);
        let err = fails(&out);
        assert!(err.contains(&format!("plan: {path}: {expected}")), "{func}: {err}");
        assert!(err.contains(line), "{func}: names the script line: {err}");
        assert!(err.contains("backend 'sample'"), "{func}: {err}");
    }
}

#[test]
fn run_of_an_unknown_function_lists_the_available_ones() {
    let fx = project(CONFIG);
    let out = cradle(&fx, &["run", "app", "--fn", "mian", "test-0"]);
    let err = fails(&out);
    assert!(err.contains("workflows/app.rhai") && err.contains("'mian'"), "{err}");
    for f in ["main(name)", "say(text)", "bad_name()"] {
        assert!(err.contains(f), "lists {f}: {err}");
    }
    // The wrong number of arguments is the same error.
    let out = cradle(&fx, &["run", "app"]);
    let err = fails(&out);
    assert!(err.contains("'main' taking 0 argument(s)") && err.contains("main(name)"), "{err}");
}

#[test]
fn run_of_an_unknown_workflow_lists_the_workflows() {
    let fx = project(CONFIG);
    let out = cradle(&fx, &["run", "nope"]);
    let err = fails(&out);
    assert!(err.contains("no workflow named 'nope'") && err.contains("app"), "{err}");
}

#[test]
fn run_of_a_script_that_does_not_compile_names_file_and_line() {
    let fx = project(CONFIG);
    fx.write_script("app.rhai", "fn main(name) {\n    name +\n}\n");
    let out = cradle(&fx, &["run", "app", "test-0"]);
    let err = fails(&out);
    assert!(err.contains("workflows/app.rhai:3:"), "{err}");
}

#[test]
fn run_json_output_has_the_run_id_and_the_result() {
    let fx = project(CONFIG);
    let out = cradle(&fx, &["--output", "json", "run", "app", "test-0"]);
    assert_eq!(out.code, 0, "{out:#?}");
    let doc = out.json();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["result"]["action"], "create", "{doc}");
    assert!(!doc["run_id"].as_str().unwrap_or("").is_empty(), "{doc}");

    let out = cradle(&fx, &["--output", "json", "run", "app", "--fn", "bad_vmid"]);
    assert_eq!(out.code, 1, "{out:#?}");
    let doc = out.json();
    assert_eq!(doc["ok"], false);
    assert!(doc["error"].as_str().unwrap_or("").contains("vm.vmid"), "{doc}");
}

#[test]
fn quiet_prints_no_info_lines() {
    let fx = project(CONFIG);
    let loud = cradle(&fx, &["run", "app", "--fn", "say", "hello-from-the-script"]);
    assert_eq!(loud.code, 0, "{loud:#?}");
    assert!(loud.stderr.contains("INFO") && loud.stderr.contains("hello-from-the-script"), "{}", loud.stderr);
    assert!(!loud.stderr.contains('\u{1b}'), "no colour codes when stderr is not a terminal: {:?}", loud.stderr);

    let quiet = cradle(&fx, &["-q", "run", "app", "--fn", "say", "hello-from-the-script"]);
    assert_eq!(quiet.code, 0, "{quiet:#?}");
    assert!(!quiet.stderr.contains("INFO") && !quiet.stderr.contains("hello-from-the-script"), "{}", quiet.stderr);
    assert_eq!(quiet.stdout.trim(), "\"hello-from-the-script\"", "the result is still printed");
}

#[test]
fn verbose_and_quiet_together_are_a_usage_error() {
    let fx = project(CONFIG);
    let out = cradle(&fx, &["-v", "-q", "plugins", "list"]);
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(out.stderr.contains("cannot be used with"), "{}", out.stderr);
}

#[test]
fn forks_zero_is_a_usage_error_for_provision_and_remove() {
    let fx = project(CONFIG);
    for args in [
        &["provision", "-i", "inventory", "--forks", "0"][..],
        &["remove", "-i", "inventory", "--limit", "x", "--yes", "--forks", "0"][..],
    ] {
        let out = cradle(&fx, args);
        assert_eq!(out.code, 2, "{args:?}: {out:#?}");
        assert!(out.stderr.contains("--forks") && out.stderr.contains("at least 1"), "{args:?}: {}", out.stderr);
    }
}

// ----------------------------------------------------------------------- runs

fn run_id(fx: &Fixture) -> String {
    let out = cradle(fx, &["--output", "json", "run", "app", "test-0"]);
    assert_eq!(out.code, 0, "{out:#?}");
    out.json()["run_id"].as_str().expect("run_id").to_string()
}

#[test]
fn runs_list_and_show_print_the_run_by_id_and_by_unique_prefix() {
    let fx = project(CONFIG);
    let id = run_id(&fx);

    let list = cradle(&fx, &["runs", "list"]);
    let stdout = succeeds(&list);
    let row = stdout.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("{id} not listed: {stdout}"));
    // What the run did: workflow `app`, function `main` (`cradle run`'s default).
    assert!(row.contains("succeeded") && row.ends_with(" app:main"), "{row}");

    let listed = cradle(&fx, &["--output", "json", "runs", "list"]).json();
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed[0]["status"], "succeeded", "{listed}");
    assert_eq!((&listed[0]["workflow"], &listed[0]["function"]), (&"app".into(), &"main".into()), "{listed}");

    let prefix = &id[..id.len() - 2];
    for key in [id.as_str(), prefix] {
        let show = cradle(&fx, &["runs", "show", key]);
        let stdout = succeeds(&show);
        assert!(stdout.contains(&id), "{stdout}");
        assert!(stdout.lines().any(|l| l.starts_with("workflow") && l.contains("app")), "{stdout}");
        assert!(stdout.lines().any(|l| l == "function  main"), "{stdout}");
        assert!(stdout.lines().any(|l| l.starts_with("status") && l.contains("succeeded")), "{stdout}");
        assert!(stdout.contains("planned"), "shows the plugin's log event: {stdout}");
    }
    let doc = cradle(&fx, &["--output", "json", "runs", "show", prefix]).json();
    assert_eq!(doc["summary"]["id"], id.as_str(), "{doc}");
    assert!(doc["events"].as_array().expect("events").iter().any(|e| e["event"] == "run_finished"), "{doc}");
}

#[test]
fn runs_show_of_an_unknown_id_fails_clearly() {
    let fx = project(CONFIG);
    let _ = run_id(&fx);
    let out = cradle(&fx, &["runs", "show", "nonexistent"]);
    let err = fails(&out);
    assert!(err.contains("no run matches `nonexistent`") && err.contains("cradle runs"), "{err}");
}

#[test]
fn runs_show_of_an_ambiguous_prefix_lists_the_candidates() {
    let fx = project(CONFIG);
    let (a, b) = (run_id(&fx), run_id(&fx));
    let common: String = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).map(|(x, _)| x).collect();
    let out = cradle(&fx, &["runs", "show", &common]);
    let err = fails(&out);
    assert!(err.contains("matches several runs") && err.contains(&a) && err.contains(&b), "{err}");
}

/// `cradle runs ARGS` with only `--config`: the state directory comes from
/// cradle.toml (HOME is the fixture's, so a wrong guess shows).
fn runs_without_state_dir(fx: &Fixture, args: &[&str]) -> Out {
    let home = fx.dir.path().join("home");
    let mut cmd = Command::new(cradle_bin());
    cmd.arg("--config").arg(fx.config()).arg("runs").args(args).current_dir(fx.dir.path()).env("HOME", &home);
    for var in
        ["RUST_BACKTRACE", "RUST_LIB_BACKTRACE", "CRADLE_LOG", "CRADLE_CONFIG", "CRADLE_STATE_DIR", "XDG_STATE_HOME"]
    {
        cmd.env_remove(var);
    }
    let out = output(cmd);
    assert!(!home.exists(), "guessed a state directory under HOME:\n{out:#?}");
    out
}

#[test]
fn runs_list_finds_the_journals_through_state_dir_in_cradle_toml() {
    let fx = project(CONFIG);
    let id = run_id(&fx);
    let out = runs_without_state_dir(&fx, &["list"]);
    assert!(succeeds(&out).lines().any(|l| l.starts_with(&id)), "{out:#?}");
}

#[test]
fn runs_list_with_a_broken_cradle_toml_fails_instead_of_guessing_the_state_dir() {
    let fx = project(CONFIG);
    let _ = run_id(&fx);
    std::fs::write(fx.config(), "state_dir = \"state\"\n[clusters.sim\n").expect("write");
    let out = runs_without_state_dir(&fx, &["list"]);
    let err = fails(&out);
    assert!(err.contains("cradle.toml") && err.contains("line 2") && err.contains("--state-dir"), "{err}");
}

#[test]
fn runs_list_with_no_runs_says_so() {
    let fx = project(CONFIG);
    let out = cradle(&fx, &["runs", "list"]);
    assert!(succeeds(&out).contains("no runs recorded yet"), "{out:#?}");
}

// -------------------------------------------------------------------- secrets

const CANARY: &str = "CANARY-5b1f0c9e";
const FINGERPRINT: &str =
    "AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99";

fn proxmox_cluster(token: &str) -> String {
    CONFIG.replace(
        "[clusters.sim]\nkind = \"sim\"",
        &format!(
            "[clusters.sim]\nendpoint = \"https://127.0.0.1:9\"\ntoken = {token}\nfingerprint = \"{}\"",
            FINGERPRINT
        ),
    )
}

fn assert_no_canary(out: &Out, fx: &Fixture) {
    assert!(!out.stderr.contains(CANARY) && !out.stdout.contains(CANARY), "the secret leaked:\n{out:#?}");
    let state = fx.state();
    if state.is_dir() {
        for entry in walk(&state) {
            let text = String::from_utf8_lossy(&std::fs::read(&entry).unwrap_or_default()).into_owned();
            assert!(!text.contains(CANARY), "the secret leaked into {}", entry.display());
        }
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { files.extend(walk(&path)) } else { files.push(path) }
    }
    files
}

#[test]
fn an_inline_token_is_refused_without_echoing_it() {
    let fx = project(&proxmox_cluster(&format!("\"root@pam!cradle={CANARY}\"")));
    let out = cradle(&fx, &["run", "app", "test-0"]);
    let err = fails(&out);
    assert!(err.contains("cradle.toml") && err.contains("line 8"), "{err}");
    assert!(err.contains("{ env = \"PVE_TOKEN\" }"), "says what to write instead: {err}");
    assert_no_canary(&out, &fx);
}

#[test]
fn an_unterminated_inline_token_is_not_echoed() {
    let fx = project(&proxmox_cluster(&format!("\"root@pam!cradle={CANARY}")));
    let out = cradle(&fx, &["plugins", "list"]);
    let err = fails(&out);
    assert!(err.contains("cradle.toml") && err.contains("line 8"), "{err}");
    assert_no_canary(&out, &fx);
}

#[test]
fn a_malformed_token_from_the_environment_is_not_echoed() {
    let fx = project(&proxmox_cluster("{ env = \"CRADLE_TEST_CANARY\" }"));
    let out = cradle_env(&fx, &["run", "app", "test-0"], &[("CRADLE_TEST_CANARY", CANARY)]);
    let err = fails(&out);
    assert!(err.contains("clusters.sim") && err.contains("USER@REALM!TOKENID=SECRET"), "{err}");
    assert_no_canary(&out, &fx);
}

#[test]
fn a_token_from_the_environment_stays_out_of_output_and_journal() {
    let fx = project(&proxmox_cluster("{ env = \"CRADLE_TEST_CANARY\" }"));
    let token = format!("root@pam!cradle={CANARY}");
    let out = cradle_env(&fx, &["run", "app", "test-0"], &[("CRADLE_TEST_CANARY", &token)]);
    assert_eq!(out.code, 0, "{out:#?}");
    assert_no_canary(&out, &fx);
    let show = cradle(&fx, &["--output", "json", "runs", "list"]);
    assert_no_canary(&show, &fx);
}

#[test]
fn an_unset_token_variable_is_named() {
    let fx = project(&proxmox_cluster("{ env = \"CRADLE_TEST_UNSET_TOKEN\" }"));
    let out = cradle(&fx, &["run", "app", "test-0"]);
    let err = fails(&out);
    assert!(err.contains("clusters.sim.token") && err.contains("CRADLE_TEST_UNSET_TOKEN is not set"), "{err}");
}
