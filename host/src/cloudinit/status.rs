//! Reading `cloud-init status --format=json` (invariant 8: verified, not
//! guessed). Success is exit status 0 AND `status: done` AND no `errors` AND
//! an extended status that is not degraded. Exit 2 means recoverable errors:
//! a failure for cradle. Anything cradle cannot parse is a failure too, never
//! "probably fine". `running` (or not yet started) means poll again.
//!
//! The real tool may print warnings before the JSON (e.g. when systemd is not
//! PID 1); the document is read from the first `{`.
//!
//! cloud-init before 23.4 (Debian 12 has 22.4.2) has no `recoverable_errors`
//! in its status: a run that logged warnings says `done`, exit 0. For such a
//! guest [`reports_warnings`] is false and the caller reads the log itself
//! ([`LOG_CHECK`], judged by [`log_verdict`]): a `[WARNING]`, `[CRITICAL]` or
//! `Traceback` line in `/var/log/cloud-init.log` is a failure, as exit 2 is on
//! a newer cloud-init.

use serde::Deserialize;

/// What one status answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Finished cleanly.
    Done,
    /// Still running (or not started yet): poll again.
    Running,
    /// Finished with errors, degraded, or unreadable; the text says which.
    Failed(String),
}

#[derive(Deserialize)]
struct Status {
    status: String,
    #[serde(default)]
    extended_status: Option<String>,
    #[serde(default)]
    errors: Vec<String>,
    #[serde(default)]
    recoverable_errors: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    detail: Option<String>,
}

/// Judge one answer: the command's exit code (none when killed) and stdout.
pub fn verdict(exit_code: Option<i32>, stdout: &str) -> Verdict {
    let Some(start) = stdout.find('{') else {
        return Verdict::Failed(format!(
            "`cloud-init status --format=json` printed no JSON (exit {})",
            show(exit_code)
        ));
    };
    let parsed: Status = match serde_json::from_str(&stdout[start..]) {
        Ok(s) => s,
        Err(e) => return Verdict::Failed(format!("`cloud-init status --format=json` printed unreadable JSON ({e})")),
    };
    let extended = parsed.extended_status.clone().unwrap_or_default();
    if parsed.status == "running" || parsed.status == "not started" || parsed.status == "not run" {
        return if exit_code == Some(0) {
            Verdict::Running
        } else {
            Verdict::Failed(format!("cloud-init is {} but exited {}", parsed.status, show(exit_code)))
        };
    }
    let mut problems = Vec::new();
    if exit_code != Some(0) {
        problems.push(match exit_code {
            Some(2) => "exit 2 (recoverable errors)".to_string(),
            other => format!("exit {}", show(other)),
        });
    }
    if parsed.status != "done" {
        problems.push(format!("status `{}`", parsed.status));
    }
    if extended.contains("degraded") || extended.contains("error") {
        problems.push(format!("extended status `{extended}`"));
    }
    if !parsed.errors.is_empty() {
        problems.push(format!("errors: {}", parsed.errors.join("; ")));
    }
    if !parsed.recoverable_errors.is_empty() {
        let kinds: Vec<&str> = parsed.recoverable_errors.keys().map(String::as_str).collect();
        problems.push(format!("recoverable errors ({})", kinds.join(", ")));
    }
    if problems.is_empty() {
        Verdict::Done
    } else {
        let detail = parsed.detail.map(|d| format!(" [{d}]")).unwrap_or_default();
        Verdict::Failed(format!("cloud-init did not finish cleanly: {}{detail}", problems.join(", ")))
    }
}

/// Whether this status answer carries `recoverable_errors` (cloud-init ≥ 23.4);
/// without it, warnings show only in the log (see [`LOG_CHECK`]).
pub fn reports_warnings(stdout: &str) -> bool {
    let Some(start) = stdout.find('{') else { return true };
    serde_json::from_str::<serde_json::Value>(&stdout[start..])
        .map(|v| v.get("recoverable_errors").is_some())
        .unwrap_or(true)
}

/// The command that lists what cloud-init logged as warnings or crashes
/// (fixed strings: what every version writes as `util.py[WARNING]: ...`).
pub const LOG_CHECK: &str = "grep -F -e '[WARNING]' -e '[CRITICAL]' -e 'Traceback' /var/log/cloud-init.log";

/// Judge [`LOG_CHECK`]'s answer: no line found (exit 1) is clean; lines found
/// (exit 0) are a failure naming the first few; anything else (no log, no
/// permission) is a failure too, never "probably fine".
pub fn log_verdict(exit_code: Option<i32>, stdout: &str, stderr: &str) -> Verdict {
    match exit_code {
        Some(1) => Verdict::Done,
        Some(0) => {
            let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
            let shown: Vec<&str> = lines.iter().take(3).copied().collect();
            let more = if lines.len() > 3 { format!(" (and {} more)", lines.len() - 3) } else { String::new() };
            Verdict::Failed(format!(
                "cloud-init reported `done` but logged {} warning line(s) in /var/log/cloud-init.log: {}{more}",
                lines.len(),
                shown.join(" | ")
            ))
        }
        other => Verdict::Failed(format!(
            "cannot read /var/log/cloud-init.log to check for warnings (exit {}): {}",
            show(other),
            stderr.trim()
        )),
    }
}

fn show(code: Option<i32>) -> String {
    code.map(|c| c.to_string()).unwrap_or_else(|| "none (killed)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> (Option<i32>, String) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cloud-init-status");
        let file = std::fs::read_dir(&dir)
            .expect("fixtures")
            .filter_map(Result::ok)
            .find(|e| e.file_name().to_string_lossy().starts_with(name))
            .unwrap_or_else(|| panic!("fixture {name}"));
        let fname = file.file_name().to_string_lossy().into_owned();
        let code = fname.split(".exit").nth(1).and_then(|s| s.trim_end_matches(".txt").parse().ok());
        (code, std::fs::read_to_string(file.path()).expect("read"))
    }

    #[test]
    fn the_real_tools_outputs_are_judged_as_cloud_init_means_them() {
        for version in ["23.4.4", "24.4.1"] {
            let (c, out) = fixture(&format!("{version}-done"));
            assert_eq!(verdict(c, &out), Verdict::Done, "{version} done");
            let (c, out) = fixture(&format!("{version}-running"));
            assert_eq!(verdict(c, &out), Verdict::Running, "{version} running");
            let (c, out) = fixture(&format!("{version}-error"));
            assert!(matches!(verdict(c, &out), Verdict::Failed(m) if m.contains("status `error`")), "{version} error");
            let (c, out) = fixture(&format!("{version}-degraded"));
            assert!(
                matches!(verdict(c, &out), Verdict::Failed(m) if m.contains("degraded") && m.contains("exit 2")),
                "{version} degraded"
            );
        }
    }

    #[test]
    fn cloud_init_22_4_is_read_and_its_warnings_are_looked_for_in_the_log() {
        let (c, out) = fixture("22.4.2-done");
        assert_eq!(verdict(c, &out), Verdict::Done);
        assert!(!reports_warnings(&out), "22.4 has no recoverable_errors: the log must be read");
        let (c, out) = fixture("22.4.2-running");
        assert_eq!(verdict(c, &out), Verdict::Running);
        let (_, out) = fixture("24.4.1-done");
        assert!(reports_warnings(&out), "24.4 reports warnings itself");
        assert_eq!(log_verdict(Some(1), "", ""), Verdict::Done);
        let warned = "2026-12-03 13:22:55,120 - util.py[WARNING]: Failed to set the hostname\n";
        assert!(
            matches!(log_verdict(Some(0), warned, ""), Verdict::Failed(m) if m.contains("Failed to set the hostname"))
        );
        assert!(matches!(
            log_verdict(Some(2), "", "grep: /var/log/cloud-init.log: Permission denied"),
            Verdict::Failed(m) if m.contains("Permission denied")
        ));
    }

    #[test]
    fn done_with_a_nonzero_exit_or_errors_is_not_success() {
        assert!(matches!(
            verdict(Some(1), r#"{"status":"done","extended_status":"done","errors":[]}"#),
            Verdict::Failed(_)
        ));
        assert!(
            matches!(verdict(Some(0), r#"{"status":"done","errors":["boom"]}"#), Verdict::Failed(m) if m.contains("boom"))
        );
        assert_eq!(verdict(Some(0), r#"{"status":"done","extended_status":"done","errors":[]}"#), Verdict::Done);
    }

    #[test]
    fn garbage_or_a_killed_command_is_a_failure_not_a_guess() {
        assert!(matches!(verdict(Some(0), "command not found"), Verdict::Failed(_)));
        assert!(matches!(verdict(None, "{\"status\": \"done\""), Verdict::Failed(_)));
        assert!(matches!(verdict(Some(127), "{\"status\":\"running\"}"), Verdict::Failed(_)));
    }
}
