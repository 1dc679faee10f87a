//! The PVE response decoders: one function per answer the client reads, from
//! the envelope's `data` (a `serde_json::Value`) to the WIT record the
//! capability returns.
//!
//! Contract: pure and self-contained. This file names only std, serde_json,
//! its sibling [`decode`] (the lenient readers and [`DecodeError`]) and the WIT
//! records, so `fuzz/` compiles it on its own (target `pve_decode`) without the
//! client, reqwest or wasmtime: the code fuzzed is the code the client runs.
//! An answer that is not the documented shape is a [`DecodeError`] naming the
//! field, never a panic; lists the capability returns sorted are sorted here.

use serde_json::Value;

use super::decode::{self, DecodeError, UpidError};
use crate::contract::bindings::cradle::host::proxmox::{
    HaResource, HaRule, PendingEntry, StorageDefinition, StorageUsage, TaskStatus, TaskSummary, VmResource, VmRuntime,
    Volume,
};
use crate::contract::bindings::cradle::host::types::Entry;

pub fn vm_resources(data: &Value) -> Result<Vec<VmResource>, DecodeError> {
    // Mirrors `type=vm` as PVE answers it (qemu and lxc share one VMID space).
    decode::objects(data, "the resource list")?
        .into_iter()
        .map(|o| {
            Ok(VmResource {
                vmid: decode::vmid(o, "vmid")?,
                name: decode::opt_string(o, "name"),
                node: decode::string(o, "node")?,
                status: decode::string(o, "status")?,
                template: decode::flag(o, "template")?,
                lock: decode::opt_string(o, "lock"),
                hastate: decode::opt_string(o, "hastate"),
                tags: decode::opt_string(o, "tags"),
            })
        })
        .collect()
}

pub fn vmid_value(data: &Value) -> Result<u32, DecodeError> {
    let text = decode::render(data).ok_or(DecodeError::NextidNull)?;
    text.trim().parse().map_err(|_| DecodeError::NextidNotVmid { text })
}

pub fn storage_definition(storage: &str, data: &Value) -> Result<StorageDefinition, DecodeError> {
    let o = decode::object(data, "the storage definition")?;
    let content = decode::opt_string(o, "content").unwrap_or_default();
    Ok(StorageDefinition {
        storage: decode::opt_string(o, "storage").unwrap_or_else(|| storage.to_string()),
        kind: decode::string(o, "type")?,
        content: content.split(',').map(str::trim).filter(|c| !c.is_empty()).map(str::to_string).collect(),
        path: decode::opt_string(o, "path"),
        shared: decode::flag(o, "shared")?,
    })
}

/// The entry of `storage` in the storage index (`GET /storage`), if listed.
pub fn storage_in_index(storage: &str, data: &Value) -> Result<Option<StorageDefinition>, DecodeError> {
    let listed = decode::objects(data, "the storage list")?
        .into_iter()
        .find(|o| decode::opt_string(o, "storage").as_deref() == Some(storage));
    listed.map(|o| storage_definition(storage, &Value::Object(o.clone()))).transpose()
}

pub fn ha_resources(data: &Value) -> Result<Vec<HaResource>, DecodeError> {
    decode::objects(data, "the HA resource list")?
        .into_iter()
        .map(|o| {
            Ok(HaResource {
                sid: decode::string(o, "sid")?,
                // `started` is PVE's default and the config omits defaults.
                state: decode::opt_string(o, "state").unwrap_or_else(|| "started".to_string()),
                comment: decode::opt_string(o, "comment"),
            })
        })
        .collect()
}

/// A list field that may come as `"a,b"` or `["a","b"]`.
fn joined_list(o: &decode::Object, key: &str) -> Option<String> {
    match o.get(key) {
        Some(Value::Array(items)) => Some(items.iter().filter_map(decode::render).collect::<Vec<_>>().join(",")),
        _ => decode::opt_string(o, key),
    }
}

pub fn ha_rules(data: &Value) -> Result<Vec<HaRule>, DecodeError> {
    decode::objects(data, "the HA rule list")?
        .into_iter()
        .map(|o| {
            Ok(HaRule {
                rule: decode::string(o, "rule")?,
                kind: decode::string(o, "type")?,
                resources: joined_list(o, "resources").ok_or_else(|| decode::missing("resources"))?,
                nodes: joined_list(o, "nodes"),
                strict: decode::flag(o, "strict")?,
                digest: decode::opt_string(o, "digest"),
            })
        })
        .collect()
}

/// The UPID a task-starting call returns.
pub fn upid_from(data: &Value) -> Result<String, DecodeError> {
    let upid = data.as_str().ok_or_else(|| DecodeError::NotAUpid { value: data.clone() })?;
    parse_upid(upid)?;
    Ok(upid.to_string())
}

pub fn config_entries(data: &Value) -> Result<Vec<Entry>, DecodeError> {
    let o = decode::object(data, "the VM config")?;
    // serde_json's map is ordered by key (no preserve_order feature); sort anyway
    // so the contract does not hang on a feature flag.
    let mut entries: Vec<Entry> =
        o.iter().filter_map(|(k, v)| decode::render(v).map(|value| Entry { key: k.clone(), value })).collect();
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(entries)
}

pub fn pending_entries(data: &Value) -> Result<Vec<PendingEntry>, DecodeError> {
    let mut out = Vec::new();
    for o in decode::objects(data, "the pending list")? {
        // `delete` is 1 (delete) or 2 (forced delete); both mean the key goes away.
        let delete = decode::opt_u64(o, "delete")?.is_some_and(|d| d > 0);
        out.push(PendingEntry {
            key: decode::string(o, "key")?,
            value: decode::opt_string(o, "value"),
            pending: decode::opt_string(o, "pending"),
            delete,
        });
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

pub fn vm_runtime(data: &Value) -> Result<VmRuntime, DecodeError> {
    let o = decode::object(data, "the VM status")?;
    let ha_managed = match o.get("ha") {
        Some(ha) => decode::flag(decode::object(ha, "field \"ha\"")?, "managed")?,
        None => false,
    };
    Ok(VmRuntime {
        status: decode::string(o, "status")?,
        qmpstatus: decode::opt_string(o, "qmpstatus"),
        lock: decode::opt_string(o, "lock"),
        uptime: decode::opt_u64(o, "uptime")?.unwrap_or(0),
        ha_managed,
    })
}

fn content_list(o: &decode::Object, key: &str) -> Vec<String> {
    decode::opt_string(o, key)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

pub fn storage_status(storage: &str, data: &Value) -> Result<StorageUsage, DecodeError> {
    let o = decode::object(data, "the storage status")?;
    Ok(StorageUsage {
        storage: decode::opt_string(o, "storage").unwrap_or_else(|| storage.to_string()),
        kind: decode::string(o, "type")?,
        content: content_list(o, "content"),
        active: o.contains_key("active").then(|| decode::flag(o, "active")).transpose()?.unwrap_or(true),
        total: decode::opt_u64(o, "total")?.unwrap_or(0),
        used: decode::opt_u64(o, "used")?.unwrap_or(0),
        avail: decode::opt_u64(o, "avail")?.unwrap_or(0),
    })
}

pub fn volumes(data: &Value) -> Result<Vec<Volume>, DecodeError> {
    let mut out = decode::objects(data, "the storage content")?
        .into_iter()
        .map(|o| {
            Ok(Volume {
                volid: decode::string(o, "volid")?,
                content: decode::string(o, "content")?,
                format: decode::opt_string(o, "format").unwrap_or_default(),
                size: decode::opt_u64(o, "size")?.unwrap_or(0),
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    out.sort_by(|a, b| a.volid.cmp(&b.volid));
    Ok(out)
}

pub fn version(data: &Value) -> Result<String, DecodeError> {
    let o = decode::object(data, "the version")?;
    decode::string(o, "version")
}

/// A parsed task id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upid {
    /// The node the task runs on.
    pub node: String,
    /// The worker's process id.
    pub pid: u32,
    /// The worker's process start time (clock ticks).
    pub pstart: u64,
    /// The task's start time, seconds since the epoch.
    pub starttime: u64,
    /// The worker type (`qmclone`, `qmstart`, ...).
    pub kind: String,
    /// The worker id (for `qmclone` the SOURCE VMID); may be empty.
    pub id: String,
    /// Who started it (`root@pam!cradle` for a token).
    pub user: String,
}

/// Parses a UPID string.
pub fn parse_upid(text: &str) -> Result<Upid, UpidError> {
    let fail = |reason: &str| UpidError { upid: text.to_string(), reason: reason.to_string() };
    let parts: Vec<&str> = text.split(':').collect();
    let [prefix, node, pid, pstart, starttime, kind, id, user, tail] = parts[..] else {
        return Err(fail(&format!(
            "it has {} ':'-separated fields, a UPID has 8 and a trailing ':'",
            parts.len().saturating_sub(1)
        )));
    };
    if prefix != "UPID" {
        return Err(fail("it does not start with UPID:"));
    }
    if !tail.is_empty() {
        return Err(fail("it does not end with ':'"));
    }
    let node_ok = !node.is_empty()
        && node.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !node.starts_with('-')
        && !node.ends_with('-');
    if !node_ok {
        return Err(fail("the node is not a host name"));
    }
    let hex = |field: &str, value: &str, lens: &[usize]| -> Result<u64, UpidError> {
        if !lens.contains(&value.len()) || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(fail(&format!(
                "the {field} {value:?} is not {} hex digits",
                lens.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(" or ")
            )));
        }
        u64::from_str_radix(value, 16).map_err(|_| fail(&format!("the {field} is not hex")))
    };
    let pid = u32::try_from(hex("pid", pid, &[8])?).map_err(|_| fail("the pid does not fit 32 bits"))?;
    let pstart = hex("pstart", pstart, &[8, 9])?;
    let starttime = hex("starttime", starttime, &[8])?;
    let plain = |s: &str| !s.chars().any(char::is_whitespace);
    if kind.is_empty() || !plain(kind) {
        return Err(fail("the worker type is empty or has whitespace"));
    }
    if !plain(id) {
        return Err(fail("the worker id has whitespace"));
    }
    if user.is_empty() || !plain(user) {
        return Err(fail("the user is empty or has whitespace"));
    }
    Ok(Upid {
        node: node.to_string(),
        pid,
        pstart,
        starttime,
        kind: kind.to_string(),
        id: id.to_string(),
        user: user.to_string(),
    })
}

/// `ok` per PVE: `OK` or `WARNINGS: <n>`; anything else is the error text.
pub fn exit_ok(exitstatus: &str) -> bool {
    exitstatus == "OK"
        || exitstatus.strip_prefix("WARNINGS: ").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

pub fn task_status_from(upid: &str, data: &Value) -> Result<TaskStatus, DecodeError> {
    let o = decode::object(data, "the task status")?;
    let status = decode::string(o, "status")?;
    let exitstatus = decode::opt_string(o, "exitstatus");
    match status.as_str() {
        "running" => Ok(TaskStatus { upid: upid.to_string(), status, exitstatus: None, ok: false }),
        "stopped" => {
            let ok = exitstatus.as_deref().is_some_and(exit_ok);
            Ok(TaskStatus { upid: upid.to_string(), status, exitstatus, ok })
        }
        other => Err(DecodeError::TaskStatus { status: other.to_string() }),
    }
}

/// A task list's `status` as the WIT's `task-summary` holds it: none while the
/// task runs, else its final status.
///
/// PVE lists an active task with `status: "RUNNING"` (pve-manager 14a22df3,
/// PVE/API2/Tasks.pm:233) and an archived one with the status its log ended
/// with (pve-common f665029e, src/PVE/RESTEnvironment.pm:350-359 writes every
/// archived task's status, `unexpected status` when its log has none). A
/// missing status is not something PVE writes (only a damaged index line,
/// Tasks.pm:209's optional field, would give one), so it is kept as none: the
/// caller then asks the task's own status (`wait-task`), which is
/// authoritative (Tasks.pm:532 checks the worker process) and answers at once
/// for a task that has ended. So does a `RUNNING` that is stale (the active
/// list is only refreshed when a worker starts or the list is rewritten).
fn summary_status(status: Option<String>) -> Option<String> {
    status.filter(|s| s != "RUNNING")
}

pub fn task_summary(o: &decode::Object) -> Result<TaskSummary, DecodeError> {
    let upid = decode::string(o, "upid")?;
    // `type`, `id` and `starttime` are in every entry PVE lists; the UPID carries
    // the same facts, so it fills them should a server omit them.
    let parsed = parse_upid(&upid)?;
    Ok(TaskSummary {
        kind: decode::opt_string(o, "type").unwrap_or(parsed.kind),
        id: decode::opt_string(o, "id").unwrap_or(parsed.id),
        starttime: decode::opt_u64(o, "starttime")?.unwrap_or(parsed.starttime),
        status: summary_status(decode::opt_string(o, "status")),
        upid,
    })
}

pub fn log_lines(data: &Value) -> Result<Vec<String>, DecodeError> {
    let mut lines: Vec<(u64, String)> = decode::objects(data, "the task log")?
        .into_iter()
        .map(|o| Ok((decode::opt_u64(o, "n")?.unwrap_or(0), decode::opt_string(o, "t").unwrap_or_default())))
        .collect::<Result<_, DecodeError>>()?;
    lines.sort_by_key(|(n, _)| *n);
    Ok(lines.into_iter().map(|(_, t)| t).collect())
}

/// `GET /nodes/{node}/tasks`: every entry a [`TaskSummary`].
pub fn task_list(data: &Value) -> Result<Vec<TaskSummary>, DecodeError> {
    decode::objects(data, "the task list")?.into_iter().map(task_summary).collect()
}
