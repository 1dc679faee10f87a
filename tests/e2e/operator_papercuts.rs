//! Things an operator tripped on in the first hour (issue 30, section 6), each
//! through the real `cradle` binary on a project `cradle init` wrote:
//!
//! - an INI section header without its `]` is refused with file:line and the
//!   fix, not read as a host named `[test`; a value cradle derived (a VM name
//!   from the inventory hostname) says what it was derived from;
//! - a cluster whose API refuses connections is one error naming the cluster
//!   and the URL, saying nothing was sent, not a "may still have acted" per VM;
//! - the cloud-init poll runs on the simulator's clock (its `time_scale`);
//! - the built-in SSH client serves by default, and a fallback to OpenSSH is
//!   said once, with the reason.

use std::path::{Path, PathBuf};
use std::process::Command;

use cradle_tests::{Out, cradle_bin};

/// A starter project (`cradle init`) in a temporary directory.
struct Starter {
    dir: tempfile::TempDir,
}

impl Starter {
    fn new() -> Starter {
        let dir = tempfile::tempdir().expect("tmp");
        let out = Starter::run_in(dir.path(), &["init", "proj"], &[]);
        assert_eq!(out.code, 0, "cradle init: {out:#?}");
        Starter { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("proj")
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    fn edit(&self, rel: &str, f: impl FnOnce(String) -> String) {
        let path = self.path(rel);
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, f(text)).expect("write");
    }

    fn run_in(cwd: &Path, args: &[&str], envs: &[(&str, &str)]) -> Out {
        let mut cmd = Command::new(cradle_bin());
        cmd.args(args).current_dir(cwd).envs(envs.iter().copied());
        for var in ["RUST_BACKTRACE", "CRADLE_LOG", "CRADLE_CONFIG", "CRADLE_STATE_DIR", "NO_COLOR"] {
            cmd.env_remove(var);
        }
        let out = Out::from(cmd.output().expect("run cradle"));
        assert!(!out.stderr.contains("panicked"), "{out:#?}");
        out
    }

    /// `cradle --config proj/cradle.toml --state-dir proj/state ARGS`.
    fn cradle(&self, args: &[&str], envs: &[(&str, &str)]) -> Out {
        let (config, state) = (self.path("cradle.toml"), self.path("state"));
        let mut all = vec!["--config", config.to_str().expect("utf-8"), "--state-dir", state.to_str().expect("utf-8")];
        all.extend_from_slice(args);
        Starter::run_in(self.dir.path(), &all, envs)
    }

    fn provision(&self, extra: &[&str]) -> Out {
        let inventory = self.path("inventory");
        let mut args = vec!["provision", "-i", inventory.to_str().expect("utf-8")];
        args.extend_from_slice(extra);
        self.cradle(&args, &[])
    }
}

#[test]
fn an_ini_section_header_missing_its_bracket_is_refused_naming_file_line_and_fix() {
    let p = Starter::new();
    p.edit("inventory/hosts.ini", |t| t.replace("[test]\n", "[test\n"));
    let out = p.provision(&["--check"]);
    assert_eq!(out.code, 1, "{out:#?}");
    let line = out.stderr.lines().find(|l| l.contains("error:")).unwrap_or_default();
    assert!(
        line.contains("inventory/hosts.ini:4: section header `[test` is missing its closing `]`: write [test]"),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("[test"), "no host named `[test`: {out:#?}");
}

#[test]
fn a_vm_name_derived_from_an_fqdn_hostname_says_so_instead_of_set_in_not_set() {
    let p = Starter::new();
    p.edit("inventory/hosts.ini", |t| t.replace("test-1 ansible_host", "test-1.lab.example ansible_host"));
    let out = p.provision(&["--check"]);
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(
        out.stderr.contains("vms_name = \"test-1.lab.example\" (derived from the inventory hostname; set vms_name"),
        "{out:#?}"
    );
    assert!(!out.stderr.contains("not set)") && !out.stderr.contains("set in not set"), "{out:#?}");
}

/// The starter pointed at a Proxmox API on a loopback port nobody listens on.
fn unreachable_cluster(p: &Starter) -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let endpoint = format!("https://127.0.0.1:{port}");
    let fingerprint = vec!["AB"; 32].join(":");
    p.edit("cradle.toml", |t| {
        let start = t.find("[clusters.sim]").expect("cluster section");
        let end = start + t[start..].find("\n\n").expect("end of the cluster section");
        format!(
            "{}[clusters.sim]\nendpoint = \"{endpoint}\"\ntoken = {{ env = \"CRADLE_E2E_PVE_TOKEN\" }}\nfingerprint = \"{fingerprint}\"{}",
            &t[..start],
            &t[end..]
        )
    });
    endpoint
}

#[test]
fn an_unreachable_cluster_is_one_error_naming_cluster_and_url_not_a_failure_per_vm() {
    let p = Starter::new();
    let endpoint = unreachable_cluster(&p);
    let inventory = p.path("inventory");
    let out = p.cradle(
        &["provision", "-i", inventory.to_str().expect("utf-8")],
        &[("CRADLE_E2E_PVE_TOKEN", "root@pam!cradle=0123456789abcdef")],
    );
    assert_eq!(out.code, 1, "{out:#?}");
    let text = format!("{}{}", out.stdout, out.stderr);
    assert_eq!(text.matches("is unreachable").count(), 1, "said once, not per VM: {out:#?}");
    assert!(
        out.stderr.contains(&format!("cluster `sim` is unreachable: cannot connect to its Proxmox API at {endpoint}")),
        "{out:#?}"
    );
    assert!(out.stderr.contains("Nothing was sent") && out.stderr.contains("clusters.sim.endpoint"), "{out:#?}");
    assert!(!text.contains("re-discover") && !text.contains("may still have acted"), "{out:#?}");
    assert!(!out.stdout.contains("test-0") && !out.stdout.contains("test-1"), "no VM was worked on: {out:#?}");
}

#[test]
fn an_identity_the_builtin_client_cannot_use_falls_back_to_openssh_saying_why_once() {
    let p = Starter::new();
    unreachable_cluster(&p);
    let key = p.path("operator_key");
    std::fs::write(&key, "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n-----END OPENSSH PRIVATE KEY-----\n")
        .expect("key");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    p.edit("cradle.toml", |t| format!("{t}\n[ssh]\nidentity = \"operator_key\"\n"));
    let inventory = p.path("inventory");
    let out = p.cradle(
        &["provision", "-i", inventory.to_str().expect("utf-8")],
        &[("CRADLE_E2E_PVE_TOKEN", "root@pam!cradle=0123456789abcdef")],
    );
    assert_eq!(out.stderr.matches("not its built-in SSH client").count(), 1, "said once: {out:#?}");
    assert!(
        out.stderr.contains(&format!("because the identity {} cannot be read by the built-in client", key.display()))
            && out.stderr.contains("client = \"openssh\""),
        "{out:#?}"
    );
}

/// The `cloud-init status` polls of the one run journaled in `state`: the
/// `ssh exec` calls of its `cloud-init` step, less the one log check a
/// cloud-init older than 23.4 (the simulated guests' 22.4.2) gets after `done`.
fn cloud_init_polls(state: &Path) -> usize {
    let runs: Vec<PathBuf> =
        std::fs::read_dir(state.join("runs")).expect("runs").filter_map(Result::ok).map(|e| e.path()).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let text = std::fs::read_to_string(&runs[0]).expect("journal");
    let mut inside = false;
    let mut execs = 0usize;
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        match (event["event"].as_str(), event["step"].as_str()) {
            (Some("step_started"), Some("cloud-init")) => inside = true,
            (Some("step_finished"), Some("cloud-init")) => inside = false,
            (Some("capability_call"), _) if inside && event["capability"] == "ssh" && event["function"] == "exec" => {
                execs += 1;
            }
            _ => {}
        }
    }
    execs.saturating_sub(1)
}

/// At time scale 0.2 the simulated cloud-init runs 4 s after sshd is up; its
/// status is asked every 5 s × 0.2 = 1 s, so several times before it is done
/// (on the wall clock, the second poll would come 5 s later, when it is long
/// done). The default run uses the built-in SSH client: no OpenSSH master
/// sockets (`<state>/mux`), which `client = "openssh"` makes.
#[test]
fn the_cloud_init_poll_runs_on_the_simulators_clock_through_the_default_builtin_ssh_client() {
    let p = Starter::new();
    p.edit("cradle.toml", |t| t.replace("time_scale = 0.02", "time_scale = 0.2"));
    let out = p.provision(&["--limit", "test-0"]);
    assert_eq!(out.code, 0, "{out:#?}");
    let polls = cloud_init_polls(&p.path("state"));
    assert!(polls >= 3, "{polls} cloud-init polls in 4 simulated seconds: the interval was not scaled");
    assert!(!p.path("state/mux").exists(), "the default client is the built-in one: {out:#?}");
    assert!(!out.stderr.contains("not its built-in SSH client"), "no fallback on the simulator: {out:#?}");

    p.edit("cradle.toml", |t| t.replace("time_scale = 0.2", "time_scale = 0") + "\n[ssh]\nclient = \"openssh\"\n");
    let out = p.provision(&["--limit", "test-1"]);
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(p.path("state/mux").is_dir(), "`client = \"openssh\"` still selects OpenSSH: {out:#?}");
}
