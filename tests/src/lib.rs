//! Fixtures for cradle's end-to-end tests: a throw-away project directory
//! (cradle.toml, workflows, an owner-only state dir) wired to the plugin
//! components that `scripts/test` builds before the tests run, and what one
//! run of the binary did ([`Out`]). The provisioning tests build their
//! projects and inventories with [`fixture`]; the DNS tests start BIND with
//! [`bind`].

use std::path::{Path, PathBuf};

pub mod bind;
pub mod fixture;
pub mod remote_sim;
pub mod serve_process;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The component of plugin crate `cradle-plugin-<name>`, built by `scripts/test`.
pub fn plugin_wasm(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    let path = target.join("wasm32-wasip2/plugin").join(format!("cradle_plugin_{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: build the plugins first (scripts/test does: cargo build --profile plugin --target wasm32-wasip2 -p cradle-plugin-{name})",
        path.display()
    );
    path
}

/// The path of the cradle binary under test (`target/debug/cradle`, or under
/// `$CARGO_TARGET_DIR`). Panics, saying how to build it, when it is missing.
pub fn cradle_bin() -> PathBuf {
    let path = built_bin("cradle");
    assert!(path.is_file(), "{} is missing: build it first with scripts/build", path.display());
    path
}

/// A binary of the workspace's build for this test's profile.
fn built_bin(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    target.join(profile).join(name)
}

/// Runs the cradle binary in `cwd` with `args`, as an operator's shell would
/// with no cradle variables set: `CRADLE_CONFIG` and `CRADLE_STATE_DIR`
/// removed (so only what `args` and `cwd` say counts), `NO_COLOR` set.
pub fn cradle_in(cwd: &Path, args: &[&str]) -> Out {
    let out = std::process::Command::new(cradle_bin())
        .current_dir(cwd)
        .args(args)
        .env_remove("CRADLE_CONFIG")
        .env_remove("CRADLE_STATE_DIR")
        .env("NO_COLOR", "1")
        .output()
        .expect("run cradle");
    Out::from(out)
}

/// The test provider (`tests/tf-provider`), built by `scripts/build`.
pub fn tf_provider_bin() -> PathBuf {
    let path = built_bin("terraform-provider-proxmox");
    assert!(path.is_file(), "{} is missing: build it first with scripts/build", path.display());
    path
}

/// A terraform CLI configuration in `dir` whose provider installation is a
/// filesystem mirror holding the test provider under both real source
/// addresses (`telmate/proxmox`, `bpg/proxmox`, version 3.0.2), so
/// `terraform init` installs it offline as it would a downloaded one. Fails
/// the test when `terraform` is not on PATH: these tests never skip.
pub fn terraform_cli_config(dir: &Path) -> PathBuf {
    let found = std::process::Command::new("terraform").arg("version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "the terraform tests run the real `terraform` (>= 1.5) and it is not on PATH: install Terraform 1.11.4"
    );
    let provider = tf_provider_bin();
    let mirror = dir.join("tf-mirror");
    for source in ["telmate/proxmox", "bpg/proxmox"] {
        let platform = mirror.join("registry.terraform.io").join(source).join("3.0.2/linux_amd64");
        std::fs::create_dir_all(&platform).expect("mirror dir");
        let exe = platform.join("terraform-provider-proxmox_v3.0.2");
        if !exe.exists() {
            std::os::unix::fs::symlink(&provider, &exe).expect("link the provider into the mirror");
        }
    }
    let cli = dir.join("terraformrc");
    let text = format!(
        "provider_installation {{\n  filesystem_mirror {{\n    path    = \"{}\"\n    include = [\"telmate/proxmox\", \"bpg/proxmox\"]\n  }}\n}}\n",
        mirror.display()
    );
    std::fs::write(&cli, text).expect("write the CLI config");
    cli
}

/// Wait until `child` is stopped (SIGSTOP: `CRADLE_CRASH_SIGNAL=STOP` at its
/// `CRADLE_CRASH_AT` point, holding whatever it held there); panics after 60 s.
pub fn wait_stopped(child: &std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
        if stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("process {} never stopped at its crash point", child.id());
}

/// What one invocation of the cradle binary did.
#[derive(Debug)]
pub struct Out {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<std::process::Output> for Out {
    fn from(out: std::process::Output) -> Out {
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Out {
    /// stdout, after checking the exit code is 0.
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "{self:#?}");
        &self.stdout
    }

    /// stdout parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{self:#?}"))
    }
}

/// A project in a temporary directory.
#[derive(Debug)]
pub struct Fixture {
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
}

impl Fixture {
    /// A project whose cradle.toml is `config` (with `@SAMPLE@` and `@HOSTILE@`
    /// replaced by the plugin paths) and whose workflows are `scripts`
    /// (relative path, source).
    pub fn new(config: &str, scripts: &[(&str, &str)]) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = config
            .replace("@SAMPLE@", &plugin_wasm("sample").display().to_string())
            .replace("@HOSTILE@", &plugin_wasm("hostile").display().to_string());
        std::fs::write(dir.path().join("cradle.toml"), config).expect("write cradle.toml");
        for (rel, src) in scripts {
            let path = dir.path().join("workflows").join(rel);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, src).expect("write script");
        }
        Fixture { dir }
    }

    /// The cradle.toml path.
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("cradle.toml")
    }

    /// The state directory (created by cradle, owner-only).
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Overwrite a workflow file.
    pub fn write_script(&self, rel: &str, src: &str) {
        std::fs::write(self.dir.path().join("workflows").join(rel), src).expect("write script");
    }
}

/// A minimal VM spec map for scripts, as JSON text.
/// The function every hostile-plugin test script starts with (it needs
/// `lib/vm` = [`VM_SPEC_RHAI`]): `probe(name, extra)` calls the backend's
/// `discover` with the spec named `name` and `extra` as its `template`, which
/// the hostile plugin reads as the attack's argument.
pub const PROBE_RHAI: &str = r#"
import "lib/vm" as spec;
fn probe(name, extra) {
    let vm = spec::vm(name);
    vm.template = extra;
    cradle::backend().discover(vm)
}
"#;

/// Every event of the run journal at `path`, parsed (a test failure if it is
/// missing or a line is not JSON).
pub fn journal_events(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("journal {}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("journal line {l:?}: {e}"))).collect()
}

pub const VM_SPEC_RHAI: &str = r#"
fn vm(name) {
    #{ name: name, vmid: 150, node: "pve1", template: "debian-12", storage: "local-lvm",
       cores: 2, memory_mib: 2048, disk_gib: 20, disks: [],
       nics: [#{ slot: "net0", bridge: "vmbr0", vlan: 20, address: "127.0.10.5/24", gateway: "127.0.10.1", guest_interface: "ens18" }],
       startup_order: 10, tags: [], environment: "test", allow_replacement: false }
}
"#;

/// A project opened and loaded, with a runtime to run workflows on: the
/// common ground of the library-level end-to-end tests.
#[derive(Debug)]
pub struct Harness {
    /// The project directory.
    pub fixture: Fixture,
    /// The opened project.
    pub project: std::sync::Arc<cradle::project::Project>,
    /// Its plugins and workflows.
    pub loaded: std::sync::Arc<cradle::project::Loaded>,
    /// The runtime runs are made on (host calls block on it).
    pub rt: tokio::runtime::Runtime,
}

impl Harness {
    /// Write the project (see [`Fixture::new`]), open and load it.
    pub fn new(config: &str, scripts: &[(&str, &str)]) -> Harness {
        let fixture = Fixture::new(config, scripts);
        let project =
            std::sync::Arc::new(cradle::project::Project::open(&fixture.config(), None).expect("open project"));
        let loaded = std::sync::Arc::new(project.load().expect("load plugins and workflows"));
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        Harness { fixture, project, loaded, rt }
    }

    /// Run `req` on a blocking thread of the runtime, as the CLI does.
    pub fn run(&self, req: cradle::project::RunRequest) -> cradle::project::RunReport {
        let (project, loaded) = (self.project.clone(), self.loaded.clone());
        self.rt
            .block_on(
                async move { tokio::task::spawn_blocking(move || project.run(&loaded, req)).await.expect("join") },
            )
            .expect("run")
    }
}
