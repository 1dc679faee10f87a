//! Tasks (workers) and their UPIDs, as `pvedaemon` keeps them.
//!
//! Contract: a task is `running` until finished with an exit status; `OK` and
//! `WARNINGS: N` are success, any other text is the error. The UPID has PVE's exact shape
//! `UPID:<node>:<pid 8 hex>:<pstart 8 hex>:<starttime 8 hex>:<type>:<id>:<user>:`.
//! A task's status answer says `running`/`stopped` (with `exitstatus` once stopped); a
//! list entry carries the exit status as `status` once stopped and none while running
//! (a node's task list adds `RUNNING`: `crate::api::nodes`).

use serde::{Deserialize, Serialize};

/// `WARNINGS: N`, PVE's exit status of a task that succeeded with warnings.
pub fn is_warnings(exitstatus: &str) -> bool {
    exitstatus.strip_prefix("WARNINGS: ").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// One task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Task {
    /// The UPID.
    pub upid: String,
    /// Node it runs on.
    pub node: String,
    /// Simulated worker pid.
    pub pid: u32,
    /// Simulated pstart.
    pub pstart: u64,
    /// Unix start time.
    pub starttime: u64,
    /// Worker type (`qmclone`, `qmstart`, ...).
    pub kind: String,
    /// Worker id (usually a VMID; for qmclone the SOURCE VMID).
    pub id: String,
    /// `user@realm!tokenid`.
    pub user: String,
    /// Exit status once stopped.
    pub exitstatus: Option<String>,
    /// Unix end time once stopped.
    pub endtime: Option<u64>,
    /// Log lines.
    pub log: Vec<String>,
    /// The VM the task changes (the target of a clone), for the simulator's own
    /// bookkeeping (`crate::recover`). The API's `?vmid=` filter does not use it:
    /// on PVE it matches the UPID's `id` only (for a clone, the source VMID).
    pub vmid: Option<u32>,
    /// What the worker needs to finish that the UPID does not say (a migration's
    /// `target`, a destroy's `purge`), so a simulator that stopped while the task
    /// ran can finish it when it loads its state (`crate::recover`). Never shown
    /// by the API.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub args: std::collections::BTreeMap<String, String>,
}

impl Task {
    /// Create a running task and its UPID.
    pub fn new(node: &str, pid: u32, kind: &str, id: &str, user: &str, vmid: Option<u32>) -> Self {
        let starttime = super::ids::now_unix();
        let pstart = u64::from(pid) * 7 + 100_000;
        let upid = format!("UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{kind}:{id}:{user}:");
        Task {
            upid,
            node: node.to_string(),
            pid,
            pstart,
            starttime,
            kind: kind.to_string(),
            id: id.to_string(),
            user: user.to_string(),
            exitstatus: None,
            endtime: None,
            log: Vec::new(),
            vmid,
            args: Default::default(),
        }
    }

    /// Whether still running.
    pub fn running(&self) -> bool {
        self.exitstatus.is_none()
    }

    /// Finish with `OK` or an error text (also written as the last log line).
    pub fn finish(&mut self, result: Result<(), String>) {
        if !self.running() {
            return;
        }
        let status = match result {
            Ok(()) => "OK".to_string(),
            Err(e) => {
                let e = e.trim_end().to_string();
                self.log.push(e.clone());
                e
            }
        };
        self.log.push(format!("TASK {}", if status == "OK" { "OK".into() } else { format!("ERROR: {status}") }));
        self.exitstatus = Some(status);
        self.endtime = Some(super::ids::now_unix());
    }

    /// JSON for task status / task lists.
    pub fn to_json(&self, with_running_status: bool) -> serde_json::Value {
        let mut v = serde_json::json!({
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.kind,
            "id": self.id,
            "user": self.user,
        });
        if let Some(map) = v.as_object_mut() {
            // pve-manager 14a22df3, PVE/API2/Tasks.pm:19-25 (`$convert_token_task`): a
            // token's task shows `user: root@pam` and `tokenid: cradle`.
            if let Some((user, tokenid)) = self.user.split_once('!') {
                map.insert("user".into(), user.into());
                map.insert("tokenid".into(), tokenid.into());
            }
            match &self.exitstatus {
                Some(s) => {
                    if with_running_status {
                        map.insert("status".into(), "stopped".into());
                        map.insert("exitstatus".into(), s.clone().into());
                    } else {
                        map.insert("status".into(), s.clone().into());
                    }
                    if let Some(e) = self.endtime {
                        map.insert("endtime".into(), e.into());
                    }
                }
                None if with_running_status => {
                    map.insert("status".into(), "running".into());
                }
                None => {}
            }
        }
        v
    }
}
