//! Path routing: `/api2/json/<segments>` → handler, the endpoint pattern used by the
//! request counters, and the classification fault injection uses.
//!
//! Failure modes: an unknown path or method is 501 `Method '<M> /api2/json/<p>' not
//! implemented`, as pve-http-server answers.

use std::sync::Arc;

use super::{
    ApiError, ApiResult, Params, agent, cluster, create, ha, lifecycle, lxc, lxc_status, migrate, move_disk, nodes,
    qemu, storage,
};
use crate::sim::Sim;

/// What a request does, for fault injection.
#[derive(Debug, Default, Clone, Copy)]
pub struct Class {
    /// Changes a VM (subject to lock faults).
    pub vm_write: bool,
    /// Starts a worker task (subject to no-worker / 596 / drop faults).
    pub starts_task: bool,
}

/// The counter pattern: parameter segments replaced by `{name}`.
pub fn pattern(segs: &[String]) -> String {
    let mut out = String::new();
    for (i, s) in segs.iter().enumerate() {
        out.push('/');
        let param = match (segs.first().map(String::as_str), i) {
            (Some("nodes"), 1) => Some("{node}"),
            (Some("nodes"), 3) => match segs.get(2).map(String::as_str) {
                Some("qemu" | "lxc") => Some("{vmid}"),
                Some("storage") => Some("{storage}"),
                Some("tasks") => Some("{upid}"),
                _ => None,
            },
            (Some("storage"), 1) => Some("{storage}"),
            (Some("cluster"), 3) if segs.get(1).map(String::as_str) == Some("ha") => {
                match segs.get(2).map(String::as_str) {
                    Some("resources") => Some("{sid}"),
                    Some("rules") => Some("{rule}"),
                    _ => None,
                }
            }
            _ => None,
        };
        out.push_str(param.unwrap_or(s));
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Classify a request for fault injection.
pub fn classify(method: &str, segs: &[String]) -> Class {
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    if s.len() >= 4 && s[0] == "nodes" && s[2] == "lxc" && method != "GET" {
        // Containers: the worker faults only (the lock faults' texts are qemu-server's).
        let starts_task = matches!((method, &s[4..]), ("POST", ["status", _]) | ("DELETE", []));
        return Class { vm_write: false, starts_task };
    }
    let is_vm = s.len() >= 4 && s[0] == "nodes" && s[2] == "qemu";
    if !is_vm || method == "GET" {
        return Class::default();
    }
    let tail = &s[4..];
    let starts_task = matches!(
        (method, tail),
        ("POST", ["clone"])
            | ("POST", ["status", _])
            | ("POST", ["migrate"])
            | ("PUT", ["resize"])
            | ("POST", ["move_disk"])
            | ("POST", ["config"])
            | ("DELETE", [])
    );
    Class { vm_write: !matches!(tail, ["agent", ..]), starts_task }
}

fn not_implemented(method: &str, segs: &[String]) -> ApiError {
    ApiError::status(501, format!("Method '{method} /api2/json/{}' not implemented", segs.join("/")))
}

/// Route a request to its handler.
pub fn dispatch(sim: &Arc<Sim>, method: &str, segs: &[String], p: &Params) -> ApiResult {
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match (method, s.as_slice()) {
        ("GET", ["version"]) => cluster::version(sim, p),
        ("GET", ["cluster", "resources"]) => cluster::resources(sim, p),
        ("GET", ["cluster", "nextid"]) => cluster::nextid(sim, p),
        ("GET", ["cluster", "status"]) => cluster::status(sim),
        ("GET", ["cluster", "tasks"]) => nodes::cluster_tasks(sim),
        ("GET", ["storage"]) => nodes::storage_list(sim, p),
        ("GET", ["storage", id]) => nodes::storage_get(sim, id),
        // PVE 9 keeps the group endpoints (with the schema's methods) only to refuse them.
        ("GET" | "POST", ["cluster", "ha", "groups"]) | ("GET" | "PUT" | "DELETE", ["cluster", "ha", "groups", _]) => {
            Err(ApiError::die("ha groups have been migrated to rules"))
        }
        ("GET", ["cluster", "ha", "resources"]) => ha::resources_list(sim, p),
        ("POST", ["cluster", "ha", "resources"]) => ha::resources_create(sim, p),
        ("GET", ["cluster", "ha", "resources", sid]) => ha::resource_get(sim, sid),
        ("PUT", ["cluster", "ha", "resources", sid]) => ha::resource_update(sim, sid, p),
        ("DELETE", ["cluster", "ha", "resources", sid]) => ha::resource_delete(sim, sid, p),
        ("GET", ["cluster", "ha", "rules"]) => ha::rules_list(sim, p),
        ("POST", ["cluster", "ha", "rules"]) => ha::rules_create(sim, p),
        ("GET", ["cluster", "ha", "rules", id]) => ha::rule_get(sim, id),
        ("PUT", ["cluster", "ha", "rules", id]) => ha::rule_update(sim, id, p),
        ("DELETE", ["cluster", "ha", "rules", id]) => ha::rule_delete(sim, id),
        ("GET", ["nodes"]) => nodes::list(sim),
        ("GET", ["nodes", node, rest @ ..]) if !sim.has_node(node) && !rest.is_empty() => Err(unknown_node(node)),
        (_, ["nodes", node, _, ..]) if !sim.has_node(node) => Err(unknown_node(node)),
        ("GET", ["nodes", node]) => nodes::index(node),
        ("GET", ["nodes", node, "status"]) => nodes::status(sim, node),
        ("GET", ["nodes", node, "storage"]) => storage::node_storage_list(sim, node, p),
        ("GET", ["nodes", node, "storage", id]) | ("GET", ["nodes", node, "storage", id, "status"]) => {
            storage::node_storage_status(sim, node, id)
        }
        ("GET", ["nodes", node, "storage", id, "content"]) => storage::storage_content(sim, node, id, p),
        ("GET", ["nodes", node, "tasks"]) => nodes::tasks_list(sim, node, p),
        ("GET", ["nodes", node, "tasks", upid]) => nodes::task_index(sim, node, upid),
        ("GET", ["nodes", node, "tasks", upid, "status"]) => nodes::task_status(sim, node, upid),
        ("GET", ["nodes", node, "tasks", upid, "log"]) => nodes::task_log(sim, node, upid, p),
        ("GET", ["nodes", node, "qemu"]) => qemu::list(sim, node, p),
        ("POST", ["nodes", node, "qemu"]) => create::create(sim, node, p),
        ("GET", ["nodes", node, "lxc"]) => lxc::list(sim, node),
        ("POST", ["nodes", node, "lxc"]) => lxc::create(sim, node, p),
        (m, ["nodes", node, "lxc", vmid, rest @ ..]) => {
            let vmid = super::params::vmid("vmid", vmid)?;
            lxc_ct(sim, m, node, vmid, rest, p).unwrap_or_else(|| Err(not_implemented(method, segs)))
        }
        (m, ["nodes", node, "qemu", vmid, rest @ ..]) => {
            let vmid = super::params::vmid("vmid", vmid)?;
            qemu_vm(sim, m, node, vmid, rest, p).unwrap_or_else(|| Err(not_implemented(method, segs)))
        }
        _ => Err(not_implemented(method, segs)),
    }
}

fn unknown_node(node: &str) -> ApiError {
    ApiError::die(format!(
        "hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"
    ))
}

fn lxc_ct(sim: &Arc<Sim>, m: &str, node: &str, vmid: u32, rest: &[&str], p: &Params) -> Option<ApiResult> {
    Some(match (m, rest) {
        ("GET", []) => lxc::index(sim, node, vmid),
        ("DELETE", []) => lxc_status::destroy(sim, node, vmid, p),
        ("GET", ["config"]) => lxc::config_get(sim, node, vmid, p),
        ("PUT", ["config"]) => lxc::config_set(sim, node, vmid, p),
        ("GET", ["status"]) => lxc_status::status_index(),
        ("GET", ["status", "current"]) => lxc_status::status_current(sim, node, vmid),
        ("POST", ["status", action @ ("start" | "stop" | "shutdown" | "reboot")]) => {
            lxc_status::power(sim, node, vmid, action, p)
        }
        _ => return None,
    })
}

fn qemu_vm(sim: &Arc<Sim>, m: &str, node: &str, vmid: u32, rest: &[&str], p: &Params) -> Option<ApiResult> {
    Some(match (m, rest) {
        ("GET", []) => qemu::vm_index(sim, node, vmid),
        ("DELETE", []) => lifecycle::destroy(sim, node, vmid, p),
        ("GET", ["config"]) => qemu::config_get(sim, node, vmid, p),
        ("POST", ["config"]) => qemu::config_set(sim, node, vmid, p, true),
        ("PUT", ["config"]) => qemu::config_set(sim, node, vmid, p, false),
        ("PUT", ["unlink"]) => qemu::unlink(sim, node, vmid, p),
        ("GET", ["pending"]) => qemu::pending(sim, node, vmid),
        ("POST", ["clone"]) => lifecycle::clone(sim, node, vmid, p),
        ("PUT", ["resize"]) => migrate::resize(sim, node, vmid, p),
        ("POST", ["move_disk"]) => move_disk::move_disk(sim, node, vmid, p),
        ("GET", ["migrate"]) => migrate::migrate_precheck(sim, node, vmid, p),
        ("POST", ["migrate"]) => migrate::migrate(sim, node, vmid, p),
        ("GET", ["status"]) => qemu::status_index(),
        ("GET", ["status", "current"]) => qemu::status_current(sim, node, vmid),
        ("POST", ["status", action @ ("start" | "stop" | "shutdown" | "reboot" | "reset")]) => {
            lifecycle::power(sim, node, vmid, action, p)
        }
        ("GET", ["agent"]) => agent::agent_index(),
        // The methods of PVE 9.1's schema: `ping` is POST, the read-only commands are GET
        // (qemu-server e6352be `src/PVE/API2/Qemu/Agent.pm`:26 `ping` POST, :107 `get-osinfo` GET).
        ("POST", ["agent", "ping"]) => agent::agent(sim, node, vmid, "ping"),
        ("GET", ["agent", cmd @ ("get-host-name" | "info" | "network-get-interfaces" | "get-osinfo")]) => {
            agent::agent(sim, node, vmid, cmd)
        }
        _ => return None,
    })
}
