//! `/nodes`, node status, storage (datacenter and per node, snippet content) and tasks.
//!
//! Contract: task status has no `exitstatus` while running; task logs are `[{n, t}]` with
//! `total`; task lists are newest first, a running task's entry says `status: "RUNNING"`,
//! and they are filterable like PVE's (`vmid`, `typefilter`, `source`, `since`, `until`,
//! `errors`, `statusfilter`, `userfilter`, `start`, `limit`). As on PVE, `vmid` matches
//! the UPID's `id` only: a clone's task is listed under the SOURCE VMID, never under the
//! new VM's. A UPID on another node, or unknown, is 400 `{upid: "no such task"}`
//! (`unable to parse worker upid` when it is not a UPID).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{ApiError, ApiResult, Params, Reply};
use crate::sim::{Sim, lock};

pub fn list(sim: &Arc<Sim>) -> ApiResult {
    let fp = sim.fingerprint.get().cloned().unwrap_or_default();
    let out: Vec<Value> = sim
        .cfg
        .nodes
        .iter()
        .map(|n| {
            json!({
                "node": n, "id": format!("node/{n}"), "type": "node", "status": "online",
                "maxcpu": 16, "cpu": 0.02, "maxmem": 68_719_476_736u64, "mem": 4_294_967_296u64,
                "maxdisk": 100_000_000_000u64, "disk": 10_000_000_000u64, "uptime": 86_400,
                "level": "", "ssl_fingerprint": fp,
            })
        })
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

pub fn index(_node: &str) -> ApiResult {
    let subdirs = ["qemu", "storage", "tasks", "status", "network", "version"];
    Ok(Reply::data(Value::Array(subdirs.iter().map(|s| json!({ "name": s })).collect())))
}

pub fn status(sim: &Arc<Sim>, node: &str) -> ApiResult {
    Ok(Reply::data(json!({
        "uptime": 86_400, "cpu": 0.02, "loadavg": ["0.10", "0.08", "0.05"],
        "memory": {"total": 68_719_476_736u64, "used": 4_294_967_296u64, "free": 64_424_509_440u64},
        "cpuinfo": {"cpus": 16, "sockets": 1, "cores": 8, "model": "Simulated CPU"},
        "pveversion": format!("pve-manager/{}/025864202ebb6109", sim.cfg.pve_version),
        "kversion": "Linux 6.14.8-2-pve #1 SMP PREEMPT_DYNAMIC",
        "node": node,
    })))
}

fn storage_json(s: &crate::config::StorageSpec) -> Value {
    let mut v = json!({
        "storage": s.id, "type": s.kind, "content": s.content, "shared": u8::from(s.shared),
        "digest": "0000000000000000000000000000000000000000",
    });
    if let (Some(p), Some(o)) = (&s.path, v.as_object_mut()) {
        o.insert("path".into(), p.clone().into());
    }
    if s.kind == "lvmthin"
        && let Some(o) = v.as_object_mut()
    {
        o.insert("thinpool".into(), "data".into());
        o.insert("vgname".into(), "pve".into());
    }
    v
}

pub fn storage_list(sim: &Arc<Sim>, p: &Params) -> ApiResult {
    p.only(&["type"])?;
    let out: Vec<Value> =
        sim.cfg.storages.iter().filter(|s| p.get("type").is_none_or(|t| t == s.kind)).map(storage_json).collect();
    Ok(Reply::data(Value::Array(out)))
}

pub fn find_storage<'a>(sim: &'a Sim, id: &str) -> Result<&'a crate::config::StorageSpec, ApiError> {
    sim.cfg.storages.iter().find(|s| s.id == id).ok_or_else(|| ApiError::die(format!("storage '{id}' does not exist")))
}

pub fn storage_get(sim: &Arc<Sim>, id: &str) -> ApiResult {
    Ok(Reply::data(storage_json(find_storage(sim, id)?)))
}

pub fn tasks_list(sim: &Arc<Sim>, node: &str, p: &Params) -> ApiResult {
    p.only(&[
        "vmid",
        "typefilter",
        "source",
        "since",
        "until",
        "errors",
        "start",
        "limit",
        "userfilter",
        "statusfilter",
    ])?;
    let vmid = p.get("vmid").map(|v| super::params::vmid("vmid", v)).transpose()?;
    let source = p.get("source").unwrap_or("archive");
    if !["active", "archive", "all"].contains(&source) {
        return Err(ApiError::param(
            "source",
            format!("value '{source}' does not have a value in the enumeration 'archive, active, all'"),
        ));
    }
    let errors = p.bool("errors", false)?;
    let statuses = status_types(p.get("statusfilter"), errors);
    let since = p.int("since", 0, i64::MAX)?.unwrap_or(0) as u64;
    let until = p.int("until", 0, i64::MAX)?.map(|u| u as u64);
    let start = p.int("start", 0, i64::MAX)?.unwrap_or(0) as usize;
    let limit = p.int("limit", 0, i64::MAX)?.unwrap_or(50) as usize;
    let st = lock(&sim.state);
    let matching: Vec<Value> = st
        .tasks
        .iter()
        .rev()
        .filter(|t| t.node == node)
        .filter(|t| match source {
            "active" => t.running(),
            "archive" => !t.running(),
            _ => true,
        })
        // pve-manager 14a22df3, PVE/API2/Tasks.pm:194: `$task->{id} ne $param->{vmid}`,
        // the UPID's id only (a clone's is its source VMID).
        .filter(|t| vmid.is_none_or(|v| t.id == v.to_string()))
        .filter(|t| p.get("typefilter").is_none_or(|f| t.kind == f))
        .filter(|t| p.get("userfilter").is_none_or(|f| t.user.contains(f)))
        .filter(|t| t.starttime >= since && until.is_none_or(|u| t.starttime <= u))
        .filter(|t| statuses.contains(&status_type(t.exitstatus.as_deref())))
        .map(list_entry)
        .collect();
    let total = matching.len();
    let page: Vec<Value> = matching.into_iter().skip(start).take(limit).collect();
    Ok(Reply::with_total(Value::Array(page), total))
}

/// A node task list's entry: an active task gets `status: "RUNNING"` (pve-manager
/// 14a22df3, PVE/API2/Tasks.pm:233, "otherwise it would be archived").
fn list_entry(t: &crate::model::Task) -> Value {
    let mut v = t.to_json(false);
    if t.running()
        && let Some(map) = v.as_object_mut()
    {
        map.insert("status".into(), "RUNNING".into());
    }
    v
}

/// PVE's `normalize_status_type` (pve-common f665029e, src/PVE/UPID.pm): a running
/// task (no status) and `unexpected status` are `unknown`.
fn status_type(exitstatus: Option<&str>) -> &'static str {
    match exitstatus {
        None | Some("" | "unexpected status") => "unknown",
        Some("OK") => "ok",
        Some(s) if crate::model::tasks::is_warnings(s) => "warning",
        Some(_) => "error",
    }
}

/// The status types a list keeps (pve-manager 14a22df3, PVE/API2/Tasks.pm:160-179):
/// all by default; `statusfilter` keeps those it names unless `errors` is set, which
/// drops only `ok` (running tasks and warnings stay).
fn status_types(statusfilter: Option<&str>, errors: bool) -> Vec<&'static str> {
    let all = ["ok", "warning", "error", "unknown"];
    match statusfilter {
        Some(f) if !errors => {
            let named: Vec<String> =
                f.split(|c: char| c == ',' || c == ';' || c.is_whitespace()).map(str::to_lowercase).collect();
            all.into_iter().filter(|s| named.iter().any(|n| n == s)).collect()
        }
        _ if errors => all.into_iter().filter(|s| *s != "ok").collect(),
        _ => all.to_vec(),
    }
}

pub fn cluster_tasks(sim: &Arc<Sim>) -> ApiResult {
    let st = lock(&sim.state);
    let out: Vec<Value> = st.tasks.iter().rev().take(1000).map(|t| t.to_json(false)).collect();
    Ok(Reply::data(Value::Array(out)))
}

/// pve-manager 14a22df3, PVE/API2/Tasks.pm:516-517 (and :404, :321): a UPID that does
/// not parse, or whose task file the node does not have, fails parameter verification.
fn no_such_task(upid: &str) -> ApiError {
    if !upid_parses(upid) {
        return ApiError::param("upid", "unable to parse worker upid");
    }
    ApiError::param("upid", "no such task")
}

/// pve-common f665029, src/PVE/UPID.pm:36: `UPID:node:pid(8 hex):pstart(8-9 hex):
/// starttime(8 hex):type:id:user:`, no `:`, whitespace or `/` inside a field.
fn upid_parses(upid: &str) -> bool {
    let Some(rest) = upid.strip_prefix("UPID:").and_then(|r| r.strip_suffix(':')) else {
        return false;
    };
    let f: Vec<&str> = rest.split(':').collect();
    let hex = |s: &str, lens: &[usize]| lens.contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit());
    let plain = |s: &str| !s.chars().any(|c| c.is_whitespace() || c == '/');
    f.len() == 7
        && crate::model::props::valid_dns_name(f[0])
        && !f[0].contains('.')
        && hex(f[1], &[8])
        && hex(f[2], &[8, 9])
        && hex(f[3], &[8])
        && !f[4].is_empty()
        && plain(f[4])
        && plain(f[5])
        && !f[6].is_empty()
        && plain(f[6])
}

pub fn task_index(sim: &Arc<Sim>, node: &str, upid: &str) -> ApiResult {
    let st = lock(&sim.state);
    st.task(upid).filter(|t| t.node == node).ok_or_else(|| no_such_task(upid))?;
    Ok(Reply::data(json!([{"name": "log"}, {"name": "status"}])))
}

pub fn task_status(sim: &Arc<Sim>, node: &str, upid: &str) -> ApiResult {
    let st = lock(&sim.state);
    let t = st.task(upid).filter(|t| t.node == node).ok_or_else(|| no_such_task(upid))?;
    Ok(Reply::data(t.to_json(true)))
}

pub fn task_log(sim: &Arc<Sim>, node: &str, upid: &str, p: &Params) -> ApiResult {
    p.only(&["start", "limit", "download"])?;
    let start = p.int("start", 0, i64::MAX)?.unwrap_or(0) as usize;
    let limit = p.int("limit", 0, i64::MAX)?.unwrap_or(50) as usize;
    let st = lock(&sim.state);
    let t = st.task(upid).filter(|t| t.node == node).ok_or_else(|| no_such_task(upid))?;
    let lines: Vec<Value> =
        t.log.iter().enumerate().skip(start).take(limit).map(|(i, l)| json!({"n": i + 1, "t": l})).collect();
    Ok(Reply::with_total(Value::Array(lines), t.log.len()))
}
