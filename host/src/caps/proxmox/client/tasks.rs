//! UPIDs and tasks: parsing, waiting, listing.
//!
//! Contract: [`parse_upid`] accepts exactly PVE's format
//! `UPID:<node>:<pid 8 hex>:<pstart 8-9 hex>:<starttime 8 hex>:<type>:<id>:<user>:`.
//! [`ProxmoxClient::wait_task`] polls the task status until the task stops or the
//! timeout passes; a timeout returns the *running* status (the task may still
//! succeed — never report it as failed). `ok` is true only for `OK` and `WARNINGS: N`.
//! The first poll comes a little before a task of its kind (the UPID's worker
//! type) usually ends; later ones at a tenth of that, doubling, up to 2 s
//! apart, and never closer than four round-trips. A linked clone that takes
//! its usual 4 s costs two status requests, not seven; a task that fails at
//! once is seen at that first poll (a clone's after 3.6 s).

use std::time::Duration;

use reqwest::Method;
use tokio::time::Instant;

use super::answers::{parse_upid, task_list, task_status_from};
use super::decode::UpidError;
use super::{Call, Idempotency, ProxmoxClient, segment};
use crate::caps::proxmox::errors::{self, ProxmoxError};
use crate::contract::bindings::cradle::host::proxmox::{TaskStatus, TaskSummary};

/// The first poll comes a little before a task of its kind usually ends
/// ([`expected`], 90 % of it); later polls come at a tenth of that, doubling,
/// but at least this far apart...
const MIN_POLL: Duration = Duration::from_millis(2);
/// ...and at most this far.
const MAX_POLL: Duration = Duration::from_secs(2);
/// A pause is never shorter than this many round-trips of the first request
/// (a slow link is not flooded).
const POLL_RTTS: u32 = 4;

/// How long a task of `kind` usually takes on PVE (linked clone of a small
/// template, a VM with a small disk): what the poll schedule is fitted to.
/// Unknown kinds poll as a short task.
fn expected(kind: &str) -> Duration {
    let ms = match kind {
        "qmclone" => 4000,
        "qmstart" | "hastart" => 2000,
        "qmreboot" | "qmshutdown" | "hastop" => 5000,
        "qmigrate" | "hamigrate" => 8000,
        "qmstop" | "qmdestroy" | "resize" | "qmresize" => 1000,
        _ => 200,
    };
    Duration::from_millis(ms)
}

/// How long to wait before the first poll of a task of `kind`.
fn first_wait(kind: &str, scale: f64) -> Duration {
    expected(kind).mul_f64(scale) * 9 / 10
}

/// The pause after poll number `polls` (≥ 1) found a task of `kind` still
/// running, with `rtt` the first request's round-trip.
fn next_pause(kind: &str, scale: f64, polls: u32, rtt: Duration) -> Duration {
    let floor = rtt.saturating_mul(POLL_RTTS).max(MIN_POLL);
    (expected(kind).mul_f64(scale) / 10)
        .saturating_mul(1 << polls.saturating_sub(1).min(8))
        .clamp(floor, MAX_POLL.max(floor))
}

impl From<UpidError> for ProxmoxError {
    fn from(e: UpidError) -> Self {
        ProxmoxError::Upid { upid: e.upid, reason: e.reason }
    }
}

impl ProxmoxClient {
    /// One poll of `GET /nodes/{node}/tasks/{upid}/status`.
    pub async fn task_status(&self, node: &str, upid: &str) -> Result<TaskStatus, ProxmoxError> {
        let parsed = parse_upid(upid)?;
        if parsed.node != node {
            return Err(ProxmoxError::InvalidArgument(format!(
                "task {upid} runs on node {}, not on {node}; ask that node",
                parsed.node
            )));
        }
        let path = format!("/nodes/{}/tasks/{}/status", segment("node", node)?, segment("UPID", upid)?);
        self.fetch(Call::new(Method::GET, path, Idempotency::Idempotent), |data| task_status_from(upid, data)).await
    }

    /// Polls the task until it stops or `timeout` passes; on timeout returns the
    /// last (running) status rather than an error.
    pub async fn wait_task(&self, node: &str, upid: &str, timeout: Duration) -> Result<TaskStatus, ProxmoxError> {
        // A workflow may pass any timeout (plugin timeouts are clamped); one past
        // what an `Instant` can hold means "no deadline", never a panic.
        let now = Instant::now();
        let deadline = now.checked_add(timeout).unwrap_or_else(|| now + Duration::from_secs(10 * 365 * 24 * 3600));
        // The UPID's worker type picks the schedule; one that does not parse is
        // refused by the status request with the reason.
        let kind = parse_upid(upid).map(|u| u.kind).unwrap_or_default();
        let (mut polls, mut rtt) = (0u32, None);
        let scale = self.inner.task_time_scale;
        tokio::time::sleep(first_wait(&kind, scale).min(deadline.saturating_duration_since(Instant::now()))).await;
        loop {
            let asked = Instant::now();
            let status = self.task_status(node, upid).await?;
            polls += 1;
            let rtt = *rtt.get_or_insert(asked.elapsed());
            if status.status != "running" {
                return Ok(status);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(status);
            }
            let pause = next_pause(&kind, scale, polls, rtt);
            tokio::time::sleep(pause.min(deadline - now)).await;
        }
    }

    /// The error task `upid` on `node`, stopped with `exitstatus`, stands for
    /// ([`errors::task_failure`]): its log is read for the lines that say why.
    /// A log that cannot be read leaves the exit status alone to decide.
    pub async fn task_failure(&self, node: &str, upid: &str, exitstatus: &str) -> ProxmoxError {
        let log = self.task_log(node, upid).await.unwrap_or_default();
        errors::task_failure(node, upid, exitstatus, log_causes(&log))
    }

    /// `GET /nodes/{node}/tasks?source=all[&vmid=N][&typefilter=kind]`: active and
    /// archived tasks, how a restarted run finds what it started. A running
    /// task's `status` is none (PVE says `RUNNING`, see [`summary_status`]).
    /// `vmid` matches the UPID's id only: a clone's task is listed under the
    /// SOURCE VMID (the template), never under the new VM's.
    pub async fn list_tasks(
        &self,
        node: &str,
        vmid: Option<u32>,
        kind: Option<&str>,
    ) -> Result<Vec<TaskSummary>, ProxmoxError> {
        let path = format!("/nodes/{}/tasks", segment("node", node)?);
        let call = Call::new(Method::GET, path, Idempotency::Idempotent)
            .opt_param("vmid", vmid.map(|v| v.to_string()))
            .opt_param("typefilter", kind)
            .param("source", "all");
        self.fetch(call, task_list).await
    }
}

/// The lines of a failed task's log that say why: its `ERROR:` lines
/// (pve-guest-common 4a8f6cb, src/PVE/AbstractMigrate.pm:15-27 writes a
/// migration's errors as `<time> ERROR: <text>`), and the per-disk refusals a
/// migration logs as warnings before its `can't migrate VM - check log`
/// (qemu-server e6352be, src/PVE/QemuMigrate.pm:557-562), without their time
/// stamps. The final `TASK ERROR:` line repeats the exit status and is left out.
fn log_causes(log: &[String]) -> Vec<String> {
    log.iter()
        .filter(|l| !l.starts_with("TASK ERROR:"))
        .filter_map(|l| {
            if let Some((_, text)) = l.split_once("ERROR: ") {
                return Some(text.trim().to_string());
            }
            l.find("can't migrate local disk '").map(|at| l[at..].trim().to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::answers::{Upid, exit_ok, task_summary};
    use super::super::decode;
    use super::*;
    use serde_json::json;

    const CLONE: &str = "UPID:pve1:000A1B2C:0042F1E3:6745A0B1:qmclone:9000:root@pam!cradle:";

    #[test]
    fn polls_fit_the_task_kind_a_usual_clone_costs_two_status_requests() {
        let rtt = Duration::from_millis(1);
        // The first poll just before a clone usually ends; then a tenth of it, doubling.
        assert_eq!(first_wait("qmclone", 1.0), Duration::from_millis(3600));
        assert_eq!(next_pause("qmclone", 1.0, 1, rtt), Duration::from_millis(400));
        assert_eq!(next_pause("qmclone", 1.0, 2, rtt), Duration::from_millis(800));
        assert_eq!(next_pause("qmclone", 1.0, 9, rtt), MAX_POLL, "a long full clone: every 2 s");
        assert_eq!(first_wait("qmstart", 1.0), Duration::from_millis(1800));
        assert_eq!(first_wait("qmreboot", 1.0), Duration::from_millis(4500));
        // Never closer than four round-trips of a slow link, never a zero pause.
        assert_eq!(next_pause("qmstart", 1.0, 1, Duration::from_millis(100)), Duration::from_millis(400));
        assert_eq!(next_pause("whatever", 1.0, 1, Duration::ZERO), Duration::from_millis(20));
        assert_eq!(next_pause("whatever", 0.0, 1, Duration::ZERO), MIN_POLL);
        // A simulated cluster ten times as fast is polled ten times as soon; one
        // that finishes tasks at once is polled at once.
        assert_eq!(first_wait("qmclone", 0.1), Duration::from_millis(360));
        assert_eq!(first_wait("qmclone", 0.0), Duration::ZERO);
        assert_eq!(next_pause("qmclone", 0.0, 1, rtt), Duration::from_millis(4), "four round-trips");
    }

    #[test]
    fn upid_of_a_token_started_clone_parses_into_its_fields() {
        let u = parse_upid(CLONE).expect("valid UPID");
        assert_eq!(
            u,
            Upid {
                node: "pve1".into(),
                pid: 0x000A_1B2C,
                pstart: 0x0042_F1E3,
                starttime: 0x6745_A0B1,
                kind: "qmclone".into(),
                id: "9000".into(),
                user: "root@pam!cradle".into(),
            }
        );
    }

    #[test]
    fn upid_with_nine_digit_pstart_and_empty_id_parses() {
        let u = parse_upid("UPID:node-2:00001234:1A2B3C4D5:6745A0B1:vzdump::root@pam:").expect("valid UPID");
        assert_eq!(u.pstart, 0x1_A2B3_C4D5);
        assert_eq!(u.id, "");
        assert_eq!(u.node, "node-2");
    }

    #[test]
    fn malformed_upids_are_refused_with_the_reason() {
        for (bad, why) in [
            ("UPID:pve1:000A1B2C:0042F1E3:6745A0B1:qmclone:9000:root@pam!cradle", "trailing"),
            ("TASK:pve1:000A1B2C:0042F1E3:6745A0B1:qmclone:9000:root@pam:", "UPID:"),
            ("UPID:pve1:0A1B2C:0042F1E3:6745A0B1:qmclone:9000:root@pam:", "pid"),
            ("UPID:pve1:000A1B2C:0042F1E3:6745A0BZ:qmclone:9000:root@pam:", "starttime"),
            ("UPID:pve_1:000A1B2C:0042F1E3:6745A0B1:qmclone:9000:root@pam:", "node"),
            ("UPID:pve1:000A1B2C:0042F1E3:6745A0B1::9000:root@pam:", "worker type"),
            ("UPID:pve1:000A1B2C:0042F1E3:6745A0B1:qmclone:9000::", "user"),
            ("", "fields"),
        ] {
            let e = parse_upid(bad).expect_err(bad);
            assert_eq!(ProxmoxError::from(e.clone()).kind(), crate::contract::ErrorKind::Invalid);
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn only_ok_and_warnings_count_as_success() {
        assert!(exit_ok("OK"));
        assert!(exit_ok("WARNINGS: 2"));
        assert!(!exit_ok("WARNINGS: "));
        assert!(!exit_ok("unable to create VM 100: config file already exists"));
        assert!(!exit_ok("ok"));
    }

    #[test]
    fn running_tasks_have_no_exitstatus_and_are_not_ok() {
        let s = task_status_from(CLONE, &json!({"status": "running", "upid": CLONE})).expect("running");
        assert_eq!((s.status.as_str(), s.exitstatus, s.ok), ("running", None, false));
        let s = task_status_from(CLONE, &json!({"status": "stopped", "exitstatus": "WARNINGS: 1"})).expect("stopped");
        assert!(s.ok);
        let s = task_status_from(CLONE, &json!({"status": "stopped", "exitstatus": "VM is locked (clone)"}))
            .expect("stopped");
        assert!(!s.ok);
        assert!(task_status_from(CLONE, &json!({"status": "paused"})).is_err());
    }

    /// One cause, two shapes: the HTTP error the simulator used to answer and the
    /// failed task real PVE gives (qemu-server e6352be: resize and destroy check
    /// the lock in their worker, Qemu.pm:6008 and QemuServer.pm:1848; a
    /// migration's disks are checked in QemuMigrate.pm). Both are the same kind.
    #[test]
    fn a_failed_task_is_classed_as_the_http_error_of_the_same_cause() {
        use crate::contract::ErrorKind;
        let task = |exit: &str, log: &[&str]| {
            let log: Vec<String> = log.iter().map(|l| l.to_string()).collect();
            errors::task_failure("pve1", CLONE, exit, log_causes(&log))
        };
        for (text, kind) in [
            ("VM is locked (clone)", ErrorKind::Conflict),
            ("checksum mismatch (file change by other user?)", ErrorKind::Conflict),
            ("detected modified configuration - file changed by other user? Try again.", ErrorKind::Conflict),
            ("Configuration file 'nodes/pve1/qemu-server/101.conf' does not exist", ErrorKind::NotFound),
            ("can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout", ErrorKind::Transient),
        ] {
            assert_eq!(errors::classify(500, text), kind, "HTTP 500 {text}");
            let e = task(text, &[&format!("TASK ERROR: {text}")]);
            assert_eq!(e.kind(), kind, "task {text}: {e}");
            assert!(e.to_string().contains(text) && e.to_string().contains("on node pve1"), "{e}");
        }
        // A migration says why only in its log.
        let local = "can't live migrate attached local disks without with-local-disks option";
        assert_eq!(errors::classify(500, local), ErrorKind::Invalid);
        let e = task(
            "migration aborted",
            &[
                "2025-01-01 10:00:00 starting migration of VM 101 to node 'pve2' (10.0.0.2)",
                &format!("2025-01-01 10:00:00 can't migrate local disk 'local-lvm:vm-101-disk-0': {local}"),
                "2025-01-01 10:00:00 ERROR: Problem found while scanning volumes - can't migrate VM - check log",
                "TASK ERROR: migration aborted",
            ],
        );
        assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
        assert!(e.to_string().contains("local-lvm:vm-101-disk-0"), "{e}");
        let clone = "Problem found while scanning volumes - can't migrate 'local-lvm:base-9000-disk-0/vm-102-disk-0' \
                     as it's a clone of 'base-9000-disk-0' at /usr/share/perl5/PVE/QemuMigrate.pm line 586.";
        assert_eq!(errors::classify(500, clone), ErrorKind::Invalid);
        let e = task(
            "migration aborted",
            &[&format!("2025-01-01 10:00:00 ERROR: migration aborted (duration 00:00:00): {clone}")],
        );
        assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
        assert!(e.to_string().contains("clone it full"), "says what to do: {e}");
        // A cause no rule knows: the task ran and ended, so not transient (an
        // HTTP 5xx of unknown text is, as the answer may be a proxy's).
        assert_eq!(task("unexpected status", &[]).kind(), ErrorKind::Failed);
    }

    #[test]
    fn a_task_pve_lists_as_running_is_running_and_a_finished_one_keeps_its_status() {
        // pve-manager 14a22df3, PVE/API2/Tasks.pm:233: `$task->{status} = 'RUNNING'`.
        let entry = |status: serde_json::Value| {
            let mut v = json!({"upid": CLONE, "type": "qmclone", "id": "9000", "starttime": 1732616369});
            if !status.is_null() {
                v["status"] = status;
            }
            task_summary(decode::object(&v, "t").expect("object")).expect("summary").status
        };
        assert_eq!(entry(json!("RUNNING")), None, "RUNNING is a running task");
        assert_eq!(entry(serde_json::Value::Null), None, "no status: ask the task itself");
        assert_eq!(entry(json!("OK")).as_deref(), Some("OK"));
        assert_eq!(entry(json!("VM is locked (clone)")).as_deref(), Some("VM is locked (clone)"));
        assert_eq!(entry(json!("unexpected status")).as_deref(), Some("unexpected status"));
    }

    #[test]
    fn task_list_entries_keep_type_id_and_status() {
        let s = task_summary(
            decode::object(
                &json!({"upid": CLONE, "type": "qmclone", "id": "9000", "starttime": 1732616369, "status": "OK"}),
                "t",
            )
            .expect("object"),
        )
        .expect("summary");
        assert_eq!(
            (s.kind.as_str(), s.id.as_str(), s.starttime, s.status.as_deref()),
            ("qmclone", "9000", 1732616369, Some("OK"))
        );
        let s = task_summary(decode::object(&json!({"upid": CLONE}), "t").expect("object")).expect("summary from upid");
        assert_eq!((s.kind.as_str(), s.id.as_str(), s.starttime, s.status), ("qmclone", "9000", 0x6745_A0B1, None));
    }
}
