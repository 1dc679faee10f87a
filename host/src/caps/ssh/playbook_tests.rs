//! `ssh::playbook` with the real ansible-core (`scripts/ansible`) against a
//! real OpenSSH server: the run, its recap and log, and each way it fails.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::playbook::{Ansible, PlaybookRun, Recap, Seen, lines_into, outcome, parse_recap, passed, result_message};
use super::sshd_fixture::{Sshd, available};
use crate::caps::Grants;
use crate::caps::context::{CapCtx, Services};
use crate::caps::policy::{RunScope, ScopedVm, SshLogin};
use crate::contract::bindings::cradle::host::ssh::{Host, Target};
use crate::contract::{CapError, ErrorKind};

struct World {
    rt: tokio::runtime::Runtime,
    sshd: Sshd,
    project: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let sshd = rt.block_on(Sshd::start());
        let project = tempfile::tempdir().expect("project dir");
        std::fs::create_dir(project.path().join("playbooks")).expect("playbooks dir");
        World { rt, sshd, project }
    }

    fn playbook(&self, name: &str, text: &str) {
        std::fs::write(self.project.path().join("playbooks").join(name), text).expect("write playbook");
    }

    fn log_dir(&self) -> PathBuf {
        self.project.path().join("state/ansible")
    }

    /// The operator's workflow context for guest `web-1` (this sshd), with
    /// `command` as ansible-playbook.
    fn ctx(&self, command: PathBuf) -> CapCtx {
        let port = self.sshd.port;
        let grants: Grants =
            toml::from_str("[ssh]\nhosts = [\"guests\"]\nplaybooks = [\"playbooks\"]\n").expect("grants");
        let login = SshLogin { host: "127.0.0.1".into(), port, user: self.sshd.user.clone() };
        let scope = RunScope {
            vms: vec![ScopedVm {
                name: "web-1".into(),
                vmid: 150,
                ssh: Some(login),
                owned: true,
                allow_replacement: false,
            }],
            operator: true,
            ..RunScope::default()
        };
        let services = Services {
            ssh: Some(Arc::new(self.sshd.client("kh"))),
            ansible: Some(Arc::new(Ansible { command, log_dir: self.log_dir() })),
            ..Services::for_tests(self.project.path(), &self.rt)
        };
        CapCtx::for_tests(grants, scope, services, "run-7")
    }

    fn target(&self) -> Target {
        Target { host: "127.0.0.1".into(), port: self.sshd.port, user: self.sshd.user.clone() }
    }

    fn pinned(&self) -> CapCtx {
        let mut c = self.ctx(cradle_testkit::ansible::playbook_command());
        c.trust_host_key("127.0.0.1".into(), self.sshd.port, self.sshd.host_key.public.clone()).expect("pin");
        c
    }

    /// Runs `playbook` with `vars`; the "guest" is this machine, whose `PATH`
    /// may hold interpreters a login shell cannot run (pyenv shims), so the
    /// system Python is named as an operator would.
    fn run(&self, c: &CapCtx, playbook: &str, mut vars: serde_json::Value, timeout_ms: u64) -> Result<Recap, CapError> {
        if let Some(m) = vars.as_object_mut() {
            m.insert("ansible_python_interpreter".into(), "/usr/bin/python3".into());
        }
        c.playbook(&self.target(), playbook, &vars, timeout_ms)
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

const WRITE_MARKER: &str = r#"
- hosts: all
  gather_facts: true
  tasks:
    - name: Write the marker
      ansible.builtin.copy:
        dest: "{{ marker }}"
        content: "{{ greeting }} {{ inventory_hostname }} {{ ansible_facts['system'] }}\n"
        mode: "0600"
    - name: Say the token
      ansible.builtin.debug:
        msg: "token {{ token }}"
"#;

#[test]
fn a_playbook_runs_with_real_ansible_over_cradles_pinned_ssh_and_a_second_run_changes_nothing() {
    if !available("playbook") {
        return;
    }
    let w = World::new();
    w.playbook("site.yml", WRITE_MARKER);
    let canary = "canary-ansible-secret-4f1d";
    crate::secrets::register(canary);
    let marker = w.project.path().join("marker");
    let vars = serde_json::json!({ "marker": marker, "greeting": "hello", "token": canary });
    let c = w.pinned();

    let first = w.run(&c, "playbooks/site.yml", vars.clone(), 300_000).expect("first run");
    assert_eq!((first.changed, first.failed, first.unreachable), (1, 0, 0), "{first:?}");
    assert!(first.ok >= 3, "facts, copy, debug: {first:?}");
    assert_eq!(std::fs::read_to_string(&marker).expect("marker"), "hello web-1 Linux\n");

    let log = PathBuf::from(&first.log);
    assert_eq!(log, w.log_dir().join("web-1-run-7.log"));
    assert_eq!((mode(&w.log_dir()), mode(&log)), (0o700, 0o600));
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("TASK [Write the marker]"), "{text}");
    assert!(!text.contains(canary) && text.contains("token [redacted]"), "the secret is redacted: {text}");
    let left: Vec<_> = std::fs::read_dir(w.log_dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 1, "the work directory (inventory, vars) is gone: {left:?}");

    let second = w.run(&c, "playbooks/site.yml", vars, 300_000).expect("second run");
    assert_eq!((second.changed, second.failed), (0, 0), "idempotent: {second:?}");
}

#[test]
fn a_failing_task_fails_the_call_naming_the_task_ansibles_message_and_the_log() {
    if !available("playbook") {
        return;
    }
    let w = World::new();
    w.playbook("fail.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Join the domain\n      ansible.builtin.fail:\n        msg: the domain controller said no\n");
    let e = w.run(&w.pinned(), "playbooks/fail.yml", serde_json::json!({}), 300_000).expect_err("fails");
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.message.contains("failed at task `Join the domain`: the domain controller said no"), "{e}");
    assert!(e.message.contains(&w.log_dir().join("web-1-run-7.log").display().to_string()), "{e}");
}

#[test]
fn a_guest_whose_key_is_not_pinned_is_unreachable_and_never_trusted() {
    if !available("playbook") {
        return;
    }
    let w = World::new();
    w.playbook("site.yml", WRITE_MARKER);
    let c = w.ctx(cradle_testkit::ansible::playbook_command());
    let marker = w.project.path().join("marker");
    let vars = serde_json::json!({ "marker": marker, "greeting": "x", "token": "t" });
    let e = w.run(&c, "playbooks/site.yml", vars, 300_000).expect_err("refused");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(
        e.message.contains("could not reach the host") && e.message.contains("Host key verification failed"),
        "{e}"
    );
    assert!(!marker.exists(), "nothing ran on the guest");
}

#[test]
fn a_playbook_symlinked_out_of_the_granted_directory_is_denied_before_ansible_runs() {
    let w = World::new();
    std::fs::write(w.project.path().join("outside.yml"), WRITE_MARKER).unwrap();
    std::os::unix::fs::symlink("../outside.yml", w.project.path().join("playbooks/evil.yml")).unwrap();
    let c = w.ctx(PathBuf::from("/nonexistent/ansible-playbook"));
    let e = w.run(&c, "playbooks/evil.yml", serde_json::json!({}), 10_000).expect_err("denied");
    assert_eq!(e.kind, ErrorKind::Denied, "{e}");
    assert!(e.message.contains("not a file inside workflow.grants.ssh.playbooks"), "{e}");
    let e = w.run(&c, "playbooks/none.yml", serde_json::json!({}), 10_000).expect_err("missing");
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert!(e.message.contains("playbook `playbooks/none.yml` cannot be read"), "{e}");
    assert!(!w.log_dir().exists(), "no run was started");
}

#[test]
fn a_missing_ansible_playbook_says_how_to_install_it() {
    let w = World::new();
    w.playbook("site.yml", WRITE_MARKER);
    let c = w.ctx(PathBuf::from("/nonexistent/ansible-playbook"));
    let e = w.run(&c, "playbooks/site.yml", serde_json::json!({}), 10_000).expect_err("missing");
    assert!(e.message.contains("`/nonexistent/ansible-playbook` was not found: install ansible-core"), "{e}");
    assert!(e.message.contains("[ansible]"), "{e}");
}

#[test]
fn a_playbook_past_its_timeout_is_killed_with_its_process_group_and_is_transient() {
    if !available("playbook") {
        return;
    }
    let w = World::new();
    w.playbook("slow.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Wait a long time\n      ansible.builtin.pause:\n        seconds: 600\n");
    let e = w.run(&w.pinned(), "playbooks/slow.yml", serde_json::json!({}), 20_000).expect_err("stopped");
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    // The task reached depends on how fast Ansible starts on a loaded machine.
    assert!(e.message.contains("did not finish within 20 s and was stopped (last task: "), "{e}");
    let project = w.project.path().display().to_string();
    let alive: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("ansible-playbook") && c.contains(&project))
        .collect();
    assert!(alive.is_empty(), "no ansible process is left: {alive:?}");
}

#[test]
fn a_parse_error_exits_4_without_being_taken_for_an_unreachable_host() {
    let mut seen = Seen::default();
    seen.take("[ERROR]: YAML parsing failed: While parsing a block collection", "web-1");
    let t = Target { host: "h".into(), port: 22, user: "u".into() };
    let target = super::Target { host: t.host, port: t.port, user: t.user };
    let run = PlaybookRun {
        playbook: Path::new("/p/site.yml"),
        shown: "playbooks/site.yml",
        name: "web-1",
        target: &target,
        extra_vars: &serde_json::Value::Null,
        project_dir: Path::new("/p"),
        run_id: "r",
        timeout: std::time::Duration::from_secs(1),
    };
    let e = outcome(Some(4), &seen, &run, "L".into()).expect_err("failed");
    assert_eq!(e.kind, ErrorKind::Failed);
    assert!(e.message.contains("ended with exit 4: [ERROR]: YAML parsing failed"), "{e}");
}

#[test]
fn the_recap_and_task_results_are_read_as_ansible_prints_them() {
    let r = parse_recap(" ok=3    changed=1    unreachable=0    failed=0    skipped=2    rescued=0    ignored=1   ");
    assert_eq!((r.ok, r.changed, r.skipped, r.ignored), (3, 1, 2, 1));
    assert_eq!(result_message(r#"{"changed": false, "msg": "nope"}"#), "nope");
    assert_eq!(
        result_message(r#"{"msg": "MODULE FAILURE", "module_stderr": "bash: python3: not found\n"}"#),
        "MODULE FAILURE: bash: python3: not found"
    );
    assert_eq!(result_message("not json"), "not json");
    let mut seen = Seen::default();
    for line in ["TASK [Gathering Facts] ****", "web-1 : ok=1 changed=0 unreachable=0 failed=0"] {
        seen.take(line, "web-1");
    }
    assert_eq!(seen.task.as_deref(), Some("Gathering Facts"));
    assert_eq!(seen.recap.map(|r| r.ok), Some(1));
}

#[test]
fn an_ignored_failure_is_not_the_one_reported_and_a_later_unreachable_is_seen() {
    let mut seen = Seen::default();
    for line in [
        "TASK [Probe the old agent] ****",
        r#"fatal: [web-1]: FAILED! => {"changed": false, "msg": "harmless"}"#,
        "...ignoring",
        "TASK [Join the domain] ****",
        r#"fatal: [web-1]: UNREACHABLE! => {"changed": false, "msg": "gone", "unreachable": true}"#,
    ] {
        seen.take(line, "web-1");
    }
    seen.finish();
    assert_eq!(seen.fatal, Some(("Join the domain".into(), "gone".into())));
    assert!(seen.unreachable);

    let mut rescued = Seen::default();
    for line in [
        "TASK [First try]",
        r#"fatal: [web-1]: FAILED! => {"msg": "first"}"#,
        "TASK [Last word]",
        r#"fatal: [web-1]: FAILED! => {"msg": "second"}"#,
    ] {
        rescued.take(line, "web-1");
    }
    rescued.finish();
    assert_eq!(rescued.fatal, Some(("Last word".into(), "second".into())), "the last failure is the one that ended it");
}

#[test]
fn output_that_is_not_utf8_or_too_long_is_forwarded_not_dropped() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut bytes = b"ok line\r\n\xff\xfe not utf-8\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'x', 70 * 1024));
    bytes.extend(b"\nlast without newline");
    let lines = rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        lines_into(std::io::Cursor::new(bytes), tx);
        let mut out = Vec::new();
        while let Some(l) = rx.recv().await {
            out.push(l);
        }
        out
    });
    assert_eq!(lines.len(), 4, "{:?}", lines.iter().map(|l| l.len()).collect::<Vec<_>>());
    assert_eq!(lines[0], "ok line");
    assert_eq!(lines[1], "\u{fffd}\u{fffd} not utf-8");
    assert!(lines[2].starts_with("xxx") && lines[2].ends_with("[cradle: 6144 more bytes of this line cut]"));
    assert_eq!(lines[3], "last without newline");
}

#[test]
fn ansible_gets_the_process_basics_and_ansible_settings_but_not_cradles_secrets() {
    let env = [
        ("PATH", "/usr/bin"),
        ("HOME", "/root"),
        ("LC_ALL", "C.UTF-8"),
        ("ANSIBLE_ROLES_PATH", "roles"),
        ("SSH_AUTH_SOCK", "/run/agent"),
        ("PVE_TOKEN", "root@pam!cradle=secret"),
        ("NETBOX_TOKEN", "nbt"),
        ("AWS_SECRET_ACCESS_KEY", "k"),
    ]
    .map(|(k, v)| (std::ffi::OsString::from(k), std::ffi::OsString::from(v)));
    let kept: Vec<String> =
        passed(env.into_iter()).into_iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
    assert_eq!(kept, ["PATH", "HOME", "LC_ALL", "ANSIBLE_ROLES_PATH", "SSH_AUTH_SOCK"]);
}
