//! `ssh::playbook`: the operator's Ansible playbook run by the real
//! `ansible-playbook` against one login, with cradle's SSH trust: the same
//! known_hosts (`StrictHostKeyChecking=yes`, pinned keys only), the same
//! identity, `-F /dev/null`, so Ansible reaches exactly the guest cradle
//! verified and nothing else.
//!
//! Contract:
//! - The inventory (one host, in group `cradle`) and the extra variables are
//!   written to a private work directory (0700, files 0600) and removed after
//!   the run; nothing is passed on the command line but their paths.
//! - The output (stdout and stderr, in order of arrival, secrets redacted) goes
//!   to `<state>/ansible/<name>-<run>.log` (0600); every `TASK [..]` line is
//!   logged as progress.
//! - Exit 0 gives the [`Recap`] of the host's `PLAY RECAP` line. Exit 4
//!   with an `UNREACHABLE!` result is `transient` (exit 4 alone is also
//!   Ansible's parse error); a failed task (exit 2) is `failed`, naming
//!   the task and Ansible's message; any other exit (syntax error, missing
//!   role) is `failed` with Ansible's `ERROR` line. Every message names the log.
//! - A run past its timeout is interrupted (SIGINT to its process group, so
//!   Ansible stops its workers, which run in sessions of their own), killed
//!   after [`INTERRUPT_GRACE`], and is `transient`: the playbook may have partly run (playbooks are meant to be
//!   idempotent: a rerun runs it again).
//! - A missing `ansible-playbook` is `failed` with how to install it or the
//!   `[ansible] command` to set.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

use super::{SshClient, Target};
use crate::contract::CapError;

/// How cradle runs Ansible (`[ansible]` in cradle.toml).
#[derive(Debug, Clone)]
pub struct Ansible {
    /// The `ansible-playbook` to run (a bare name is looked up on `PATH`).
    pub command: PathBuf,
    /// Where run logs go (`<state>/ansible`, 0700).
    pub log_dir: PathBuf,
}

/// One playbook run.
#[derive(Debug)]
pub struct PlaybookRun<'a> {
    /// The playbook, resolved inside the project.
    pub playbook: &'a Path,
    /// The playbook as the workflow named it (for messages).
    pub shown: &'a str,
    /// The inventory host name (the VM's name).
    pub name: &'a str,
    /// The login Ansible connects as.
    pub target: &'a Target,
    /// `--extra-vars`, as JSON.
    pub extra_vars: &'a serde_json::Value,
    /// The project directory (the working directory, so its `ansible.cfg`,
    /// roles and collections apply).
    pub project_dir: &'a Path,
    /// The run id (names the log).
    pub run_id: &'a str,
    /// Killed after this long.
    pub timeout: Duration,
}

/// The host's `PLAY RECAP` counts, and where the output is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Recap {
    /// Tasks that ran fine.
    pub ok: u32,
    /// Tasks that changed something.
    pub changed: u32,
    /// Unreachable.
    pub unreachable: u32,
    /// Failed tasks.
    pub failed: u32,
    /// Skipped tasks.
    pub skipped: u32,
    /// Rescued failures.
    pub rescued: u32,
    /// Ignored failures.
    pub ignored: u32,
    /// The run's log.
    pub log: String,
}

/// Lines of output kept in memory for the messages (the log has them all).
const TAIL: usize = 200;

/// How long an interrupted run gets to stop its workers before SIGKILL.
const INTERRUPT_GRACE: Duration = Duration::from_secs(15);

static WORK_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Ansible {
    /// Runs `run` with `ssh`'s trust settings.
    pub async fn run(&self, ssh: &SshClient, run: &PlaybookRun<'_>) -> Result<Recap, CapError> {
        let io = |what: &str, p: &Path, e: &dyn std::fmt::Display| {
            CapError::failed(format!("ssh::playbook: cannot {what} {}: {e}", p.display()))
        };
        crate::state::create_private_dir(&self.log_dir).map_err(|e| io("create", &self.log_dir, &e))?;
        remove_stale_work_dirs(&self.log_dir);
        let n = WORK_COUNTER.fetch_add(1, Ordering::Relaxed);
        let work = WorkDir(self.log_dir.join(format!(".work-{}-{n}", std::process::id())));
        crate::state::create_private_dir(&work.0).map_err(|e| io("create", &work.0, &e))?;
        self.run_in(ssh, run, &work.0).await
    }

    async fn run_in(&self, ssh: &SshClient, run: &PlaybookRun<'_>, work: &Path) -> Result<Recap, CapError> {
        let inventory = work.join("inventory.yml");
        write_private(&inventory, &inventory_json(ssh, run))?;
        let vars = work.join("vars.json");
        write_private(&vars, run.extra_vars.to_string().as_bytes())?;
        let log_path = self.log_dir.join(format!("{}-{}.log", safe(run.name), safe(run.run_id)));
        let mut log = crate::state::open_private_append(&log_path)
            .map_err(|e| CapError::failed(format!("ssh::playbook: cannot open the log {}: {e}", log_path.display())))?;

        let mut cmd = Command::new(&self.command);
        cmd.arg("-i").arg(&inventory).arg("--extra-vars").arg(at(&vars)).arg(run.playbook);
        cmd.current_dir(run.project_dir)
            .env_clear()
            .envs(passed_env())
            .envs(ansible_env(work, ssh))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // In its own process group, Ansible never sees the terminal's Ctrl-C
        // meant for cradle; so it gets SIGINT (and stops its workers) when
        // the thread that started it, which waits for it, is gone: cradle
        // interrupted or killed.
        // SAFETY: only prctl, async-signal-safe, between fork and exec.
        #[allow(unsafe_code, reason = "pre_exec runs prctl in the child before exec")]
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| self.spawn_error(&e))?;
        let pgid = child.id();
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        if let Some(out) = child.stdout.take() {
            lines_into(out, tx.clone());
        }
        if let Some(err) = child.stderr.take() {
            lines_into(err, tx);
        }
        let mut seen = Seen::default();
        let drain = async {
            while let Some(line) = rx.recv().await {
                let line = crate::secrets::redact(&line).into_owned();
                let _ = writeln!(log, "{line}");
                seen.take(&line, run.name);
            }
        };
        let waited = tokio::time::timeout(run.timeout, async {
            drain.await;
            child.wait().await
        })
        .await;
        let shown_log = log_path.display().to_string();
        let status = match waited {
            Ok(status) => {
                status.map_err(|e| CapError::failed(format!("ssh::playbook: waiting for ansible-playbook: {e}")))?
            }
            Err(_) => {
                // SIGINT first: Ansible then terminates its workers, which
                // run in sessions of their own (setsid) that no group signal
                // reaches; SIGKILL only for what ignores it.
                signal_group(pgid, libc::SIGINT);
                if tokio::time::timeout(INTERRUPT_GRACE, child.wait()).await.is_err() {
                    signal_group(pgid, libc::SIGKILL);
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
                return Err(CapError::new(
                    crate::contract::ErrorKind::Transient,
                    format!(
                        "ansible-playbook {} on {} did not finish within {} s and was stopped (last task: {}); it may have \
                     partly run, and a rerun runs it again; output in {shown_log}",
                        run.shown,
                        run.name,
                        run.timeout.as_secs(),
                        seen.task.as_deref().unwrap_or("none started"),
                    ),
                ));
            }
        };
        let _ = log.flush();
        seen.finish();
        outcome(status.code(), &seen, run, shown_log)
    }

    /// That [`Ansible::command`] names an executable file (a bare name: on
    /// `PATH`), with the same message a failed start gives.
    pub fn check_command(&self) -> Result<(), CapError> {
        use std::os::unix::fs::PermissionsExt;
        let runnable =
            |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        let found = if self.command.components().count() > 1 {
            runnable(&self.command)
        } else {
            std::env::var_os("PATH")
                .is_some_and(|path| std::env::split_paths(&path).any(|d| runnable(&d.join(&self.command))))
        };
        if found { Ok(()) } else { Err(self.spawn_error(&std::io::Error::from(std::io::ErrorKind::NotFound))) }
    }

    fn spawn_error(&self, e: &std::io::Error) -> CapError {
        if e.kind() == std::io::ErrorKind::NotFound {
            CapError::failed(format!(
                "ssh::playbook: `{}` was not found: install ansible-core on the control node (`pip install \
                 ansible-core`) or set `command` in [ansible] of cradle.toml to its path",
                self.command.display()
            ))
        } else {
            CapError::failed(format!("ssh::playbook: cannot start `{}`: {e}", self.command.display()))
        }
    }
}

/// The inventory: one host in group `cradle`, reached as `run.target` with
/// cradle's SSH options. `ansible_python_interpreter` is only a default: the
/// playbook's vars may set another.
fn inventory_json(ssh: &SshClient, run: &PlaybookRun<'_>) -> Vec<u8> {
    let mut common: Vec<String> = vec!["-F".into(), "/dev/null".into()];
    for (k, v) in ssh.trust_options() {
        common.push("-o".into());
        common.push(super::shell_quote(&format!("{k}={}", v.to_string_lossy())));
    }
    let mut host = serde_json::json!({
        "ansible_host": run.target.host,
        "ansible_port": run.target.port,
        "ansible_user": run.target.user,
        "ansible_ssh_common_args": common.join(" "),
        "ansible_python_interpreter": "auto_silent",
    });
    if let Some(id) = &ssh.settings().identity {
        host["ansible_ssh_private_key_file"] = serde_json::Value::String(id.display().to_string());
    }
    let inv = serde_json::json!({ "cradle": { "hosts": { run.name: host } } });
    inv.to_string().into_bytes()
}

/// What of cradle's own environment Ansible gets: the process basics, the
/// SSH agent (used when no identity is configured, as by cradle's own `ssh`),
/// a virtualenv, and the operator's `ANSIBLE_*` settings (vault password file,
/// roles path, ...; [`ansible_env`] overrides the ones cradle fixes). Nothing
/// else: secrets cradle read from its environment stay with cradle.
fn passed_env() -> Vec<(OsString, OsString)> {
    passed(std::env::vars_os())
}

pub(super) fn passed(vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    const KEEP: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "SSH_AUTH_SOCK", "VIRTUAL_ENV"];
    vars.filter(|(k, _)| {
        let k = k.to_string_lossy();
        KEEP.contains(&k.as_ref()) || k.starts_with("LC_") || k.starts_with("ANSIBLE_")
    })
    .collect()
}

/// The environment that makes the run behave the same on every control node:
/// host keys checked (env beats any ansible.cfg), no colours, no retry files,
/// no lingering SSH masters, temp files in the private work directory.
fn ansible_env(work: &Path, ssh: &SshClient) -> Vec<(&'static str, OsString)> {
    let connect = ssh.settings().connect_timeout.as_secs().max(1).to_string();
    vec![
        ("ANSIBLE_HOST_KEY_CHECKING", "True".into()),
        ("ANSIBLE_NOCOLOR", "1".into()),
        ("ANSIBLE_FORCE_COLOR", "0".into()),
        ("ANSIBLE_RETRY_FILES_ENABLED", "False".into()),
        ("ANSIBLE_PIPELINING", "True".into()),
        // Without ControlPersist Ansible adds no ControlPath: no master outlives the run.
        ("ANSIBLE_SSH_ARGS", "-C -o ControlMaster=no -o ControlPath=none".into()),
        ("ANSIBLE_SSH_RETRIES", "0".into()),
        ("ANSIBLE_TIMEOUT", connect.into()),
        ("ANSIBLE_LOCAL_TEMP", work.join("tmp").into_os_string()),
    ]
}

/// A run's private work directory (inventory, extra vars: the vars may hold
/// the operator's secrets), removed when the run ends, whichever way.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Work directories of cradle processes that are gone (killed mid-run, so
/// their `WorkDir` never dropped).
fn remove_stale_work_dirs(log_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(log_dir) else { return };
    let host = crate::state::host_name();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(".work-").and_then(|r| r.split('-').next()).and_then(|p| p.parse().ok())
        else {
            continue;
        };
        if crate::state::process::process_liveness(&host, pid, None) == crate::state::process::Liveness::Gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `@PATH`, as `--extra-vars` reads a file.
fn at(path: &Path) -> OsString {
    let mut s = OsString::from("@");
    s.push(path.as_os_str());
    s
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CapError> {
    crate::state::write_private_file_atomic(path, bytes)
        .map_err(|e| CapError::failed(format!("ssh::playbook: cannot write {}: {e}", path.display())))
}

/// `name` with anything but `[A-Za-z0-9._-]` as `_` (a file name part).
fn safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect()
}

/// The longest output line kept whole (the log gets the rest cut, noted).
const MAX_LINE: usize = 64 * 1024;

/// Forwards `r`'s lines: never stops on bytes that are not UTF-8 (lossy) or
/// on a long line (cut), since a reader that stopped would leave Ansible
/// writing into a closed pipe.
pub(super) fn lines_into<R: AsyncRead + Unpin + Send + 'static>(r: R, tx: mpsc::UnboundedSender<String>) {
    tokio::spawn(async move {
        let mut r = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let mut end = buf.len();
            while end > 0 && matches!(buf[end - 1], b'\n' | b'\r') {
                end -= 1;
            }
            let mut line = String::from_utf8_lossy(&buf[..end.min(MAX_LINE)]).into_owned();
            if end > MAX_LINE {
                line.push_str(&format!(" [cradle: {} more bytes of this line cut]", end - MAX_LINE));
            }
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

fn signal_group(pgid: Option<u32>, signal: libc::c_int) {
    if let Some(pid) = pgid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: killpg with a process group this process created; no memory is involved.
        #[allow(unsafe_code, reason = "a libc call without memory arguments")]
        unsafe {
            libc::killpg(pid, signal);
        }
    }
}

/// What the output said, as it streamed by.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// The task running last (`TASK [name]`).
    pub task: Option<String>,
    /// The last failed task that was not ignored, and Ansible's message for it.
    pub fatal: Option<(String, String)>,
    /// A failure just seen; it counts unless the next line is `...ignoring`.
    pending: Option<(String, String)>,
    /// The first `ERROR` line (a syntax error, a missing file or role).
    pub error: Option<String>,
    /// A `fatal: [..]: UNREACHABLE!` line was seen (exit 4 is also a parse error).
    pub unreachable: bool,
    /// The host's recap.
    pub recap: Option<Recap>,
    /// The last lines.
    pub tail: VecDeque<String>,
}

impl Seen {
    /// The output ended: a failure still pending counts.
    pub(super) fn finish(&mut self) {
        if let Some(failure) = self.pending.take() {
            self.fatal = Some(failure);
        }
    }

    pub(super) fn take(&mut self, line: &str, host: &str) {
        if self.tail.len() == TAIL {
            self.tail.pop_front();
        }
        self.tail.push_back(line.to_string());
        let t = line.trim();
        if !t.is_empty()
            && let Some(failure) = self.pending.take()
            && t != "...ignoring"
        {
            self.fatal = Some(failure);
        }
        if let Some(rest) = t.strip_prefix("TASK [") {
            let name = rest.rsplit_once(']').map_or(rest, |(n, _)| n).to_string();
            tracing::info!(host, task = %name, "ansible task");
            self.task = Some(name);
        } else if t.starts_with("fatal: [") || t.starts_with("failed: [") {
            self.unreachable |= t.contains(": UNREACHABLE! =>");
            let msg = t.split_once("=> ").map_or_else(|| t.to_string(), |(_, json)| result_message(json));
            self.pending = Some((self.task.clone().unwrap_or_default(), msg));
        } else if (t.starts_with("ERROR!") || t.starts_with("[ERROR]:")) && self.error.is_none() {
            self.error = Some(t.to_string());
        } else if let Some(counts) = t.strip_prefix(host).and_then(|r| r.trim_start().strip_prefix(':')) {
            self.recap = Some(parse_recap(counts));
        }
    }
}

/// Ansible's message from a task result (`{"msg": ..}`, or the module's
/// stderr when it crashed), one line of at most 500 characters.
pub(super) fn result_message(json: &str) -> String {
    let text = match serde_json::from_str::<serde_json::Value>(json) {
        Ok(v) => {
            // Fact gathering reports its modules' failures one level down.
            let v = match v.get("failed_modules").and_then(|m| m.as_object()).and_then(|m| m.values().next()) {
                Some(inner) => inner.clone(),
                None => v,
            };
            let field = |k: &str| v.get(k).and_then(|s| s.as_str()).filter(|s| !s.trim().is_empty());
            let msg = field("msg").unwrap_or("");
            let detail = field("stderr").or_else(|| field("module_stderr")).unwrap_or("");
            match (msg, detail) {
                ("", "") => json.to_string(),
                (m, "") => m.to_string(),
                ("", d) => d.to_string(),
                (m, d) => format!("{m}: {d}"),
            }
        }
        Err(_) => json.to_string(),
    };
    let one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > 500 { format!("{}…", one.chars().take(500).collect::<String>()) } else { one }
}

/// `ok=2 changed=1 unreachable=0 failed=0 skipped=0 rescued=0 ignored=0`.
pub(super) fn parse_recap(counts: &str) -> Recap {
    let mut r = Recap::default();
    for pair in counts.split_whitespace() {
        let Some((k, v)) = pair.split_once('=') else { continue };
        let v = v.parse().unwrap_or(0);
        match k {
            "ok" => r.ok = v,
            "changed" => r.changed = v,
            "unreachable" => r.unreachable = v,
            "failed" => r.failed = v,
            "skipped" => r.skipped = v,
            "rescued" => r.rescued = v,
            "ignored" => r.ignored = v,
            _ => {}
        }
    }
    r
}

/// The result of a finished run, from its exit code and output.
pub(super) fn outcome(code: Option<i32>, seen: &Seen, run: &PlaybookRun<'_>, log: String) -> Result<Recap, CapError> {
    let what = format!("ansible-playbook {} on {} ({})", run.shown, run.name, run.target);
    match code {
        Some(0) => match &seen.recap {
            Some(r) => Ok(Recap { log, ..r.clone() }),
            None => Err(CapError::failed(format!(
                "{what} exited 0 but printed no PLAY RECAP for {}: does the playbook target `all`, `cradle` or \
                 `{}`? Output in {log}",
                run.name, run.name
            ))),
        },
        Some(4) if seen.unreachable => Err(CapError::new(
            crate::contract::ErrorKind::Transient,
            format!(
                "{what} could not reach the host: {}; output in {log}",
                seen.fatal.as_ref().map_or("no message", |(_, m)| m.as_str())
            ),
        )),
        Some(2) if seen.fatal.is_some() => {
            let (task, msg) = seen.fatal.as_ref().map(|(t, m)| (t.as_str(), m.as_str())).unwrap_or_default();
            Err(CapError::failed(format!("{what} failed at task `{task}`: {msg}; output in {log}")))
        }
        other => {
            let code = other.map_or_else(|| "a signal".to_string(), |c| format!("exit {c}"));
            let said = seen.error.clone().unwrap_or_else(|| {
                seen.tail.iter().rev().find(|l| !l.trim().is_empty()).cloned().unwrap_or_else(|| "nothing".into())
            });
            Err(CapError::failed(format!("{what} ended with {code}: {said}; output in {log}")))
        }
    }
}
