//! `/cluster/ha/resources` and `/cluster/ha/rules` with Proxmox VE 9 semantics.
//!
//! Contract: resources default to state `started` (the HA manager then starts the VM);
//! a duplicate is `resource ID 'vm:N' already defined`; the old `group` option fails with
//! `ha groups have been migrated to rules`. Rules reference HA-managed resources only
//! (`cannot use unmanaged resource(s)`), a resource sits in at most one node-affinity
//! rule, PUT replaces `resources` and honours `digest`. A rule ID is PVE's `pve-configid`
//! (`[a-z][a-z0-9_-]+`, any case): another is refused as parameter verification does.
//!
//! Texts are pve-ha-manager's (b71218f, src/PVE/API2/HA/Rules.pm, Resources.pm,
//! src/PVE/HA/Config.pm): what dies inside `lock_ha_domain` carries the lock's
//! prefix (`create ha rule failed: `, `update HA rules failed: `, `create resource
//! failed: `, `update resources config failed: `; Config.pm:311-320), a rule that
//! fails the feasibility check is the stringified 400 exception `Rule 'x' is
//! invalid.` with its per-option errors, still answered 500 (Rules.pm:111-137).
//! GET of a missing rule is `no such ha rule 'x'` (Rules.pm:25), PUT `HA rule 'x'
//! does not exist` (Rules.pm:340), DELETE of a missing rule succeeds (Rules.pm:388-403).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{ApiError, ApiResult, Params, Reply};
use crate::faults::FaultKind;
use crate::model::{ClusterState, HaResource, HaRule};
use crate::sim::{Sim, lock};

fn digest_of<T: serde::Serialize>(v: &T) -> String {
    use sha2::Digest;
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    hex::encode(sha2::Sha256::digest(&bytes))[..40].to_string()
}

fn parse_sid(s: &str) -> Result<(String, u32), ApiError> {
    let num = s.strip_prefix("vm:").unwrap_or(s);
    let vmid = super::params::vmid("sid", num)
        .map_err(|_| ApiError::param("sid", format!("invalid format - unable to parse service ID '{s}'")))?;
    Ok((format!("vm:{vmid}"), vmid))
}

fn check_state(s: &str) -> Result<(), ApiError> {
    if ["started", "stopped", "disabled", "ignored", "enabled"].contains(&s) {
        Ok(())
    } else {
        Err(ApiError::param(
            "state",
            format!(
                "value '{s}' does not have a value in the enumeration 'started, stopped, enabled, disabled, ignored'"
            ),
        ))
    }
}

/// `lock_ha_domain`'s prefixes (pve-ha-manager b71218f, src/PVE/API2/HA/Rules.pm:298,
/// :358; Resources.pm:226; src/PVE/HA/Config.pm:185).
const CREATE_RULE: &str = "create ha rule failed";
const UPDATE_RULE: &str = "update HA rules failed";
const CREATE_RESOURCE: &str = "create resource failed";
const UPDATE_RESOURCES: &str = "update resources config failed";

/// A `die` inside `lock_ha_domain($code, $errmsg)`: `"$errmsg: $err"`, a 500.
fn locked_die(prefix: &str, err: impl std::fmt::Display) -> ApiError {
    ApiError::die(format!("{prefix}: {err}"))
}

/// `ha groups have been migrated to rules` as Resources.pm:202 and :260 word it.
fn groups_migrated() -> ApiError {
    ApiError::die("invalid parameter 'group': ha groups have been migrated to rules")
}

/// PVE's `pve-configid` format, which `pve-ha-rule-id` uses: a letter, then at least one
/// letter, digit, `_` or `-` (pve-common's `$CONFIGID_RE`, case-insensitive).
fn check_rule_id(id: &str) -> Result<(), ApiError> {
    let mut chars = id.chars();
    let first = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest: Vec<char> = chars.collect();
    if first && !rest.is_empty() && rest.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')) {
        Ok(())
    } else {
        Err(ApiError::param("rule", format!("invalid format - invalid configuration ID '{id}'")))
    }
}

fn resource_json(r: &HaResource, digest: &str) -> Value {
    let mut o = json!({"sid": r.sid, "state": r.state, "type": "vm", "digest": digest});
    if let Some(m) = o.as_object_mut() {
        for (k, v) in &r.options {
            let val = v.parse::<i64>().map(Value::from).unwrap_or_else(|_| Value::from(v.clone()));
            m.insert(k.clone(), val);
        }
    }
    o
}

pub fn resources_list(sim: &Arc<Sim>, p: &Params) -> ApiResult {
    p.only(&["type"])?;
    let st = lock(&sim.state);
    let d = digest_of(&st.ha_resources);
    Ok(Reply::data(Value::Array(st.ha_resources.values().map(|r| resource_json(r, &d)).collect())))
}

const RES_OPTS: &[&str] = &["failback", "max_restart", "max_relocate", "comment"];

pub fn resources_create(sim: &Arc<Sim>, p: &Params) -> ApiResult {
    p.only(&["sid", "state", "failback", "max_restart", "max_relocate", "comment", "group", "type"])?;
    if p.get("group").is_some() {
        return Err(groups_migrated());
    }
    let (sid, vmid) = parse_sid(p.required("sid")?)?;
    let state = p.get("state").unwrap_or("started").to_string();
    check_state(&state)?;
    p.int("max_restart", 0, 10)?;
    p.int("max_relocate", 0, 10)?;
    p.bool("failback", true)?;
    {
        let mut st = lock(&sim.state);
        if st.vms.get(&vmid).is_none_or(|v| v.is_ct()) {
            return Err(ApiError::die(format!("unable to find VM '{vmid}' - no such resource")));
        }
        if st.ha_resources.contains_key(&sid) {
            return Err(locked_die(CREATE_RESOURCE, format!("resource ID '{sid}' already defined")));
        }
        let options = RES_OPTS.iter().filter_map(|k| p.get(k).map(|v| (k.to_string(), v.to_string()))).collect();
        st.ha_resources.insert(sid.clone(), HaResource { sid, state, options });
        sim.changed();
    }
    crate::ha_manager::schedule(sim, vmid);
    Ok(Reply::data(Value::Null))
}

/// pve-common's `assert_if_modified` (src/PVE/Tools.pm), also for the HA files.
const MODIFIED: &str = "detected modified configuration - file changed by other user? Try again.";

fn no_resource_text(sid: &str) -> String {
    format!("no such resource '{sid}'")
}

fn no_resource(sid: &str) -> ApiError {
    ApiError::die(no_resource_text(sid))
}

pub fn resource_get(sim: &Arc<Sim>, sid: &str) -> ApiResult {
    let (sid, _) = parse_sid(sid)?;
    let st = lock(&sim.state);
    let d = digest_of(&st.ha_resources);
    let r = st.ha_resources.get(&sid).ok_or_else(|| no_resource(&sid))?;
    Ok(Reply::data(resource_json(r, &d)))
}

pub fn resource_update(sim: &Arc<Sim>, sid: &str, p: &Params) -> ApiResult {
    p.only(&["state", "failback", "max_restart", "max_relocate", "comment", "group", "delete", "digest"])?;
    if p.get("group").is_some() {
        return Err(groups_migrated());
    }
    let (sid, vmid) = parse_sid(sid)?;
    if let Some(s) = p.get("state") {
        check_state(s)?;
    }
    {
        let mut st = lock(&sim.state);
        if let Some(d) = p.get("digest")
            && d != digest_of(&st.ha_resources)
        {
            return Err(locked_die(UPDATE_RESOURCES, MODIFIED));
        }
        let r = st.ha_resources.get_mut(&sid).ok_or_else(|| locked_die(UPDATE_RESOURCES, no_resource_text(&sid)))?;
        if let Some(s) = p.get("state") {
            r.state = if s == "enabled" { "started".into() } else { s.to_string() };
        }
        for k in RES_OPTS {
            if let Some(v) = p.get(k) {
                r.options.insert(k.to_string(), v.to_string());
            }
        }
        for k in p.get("delete").unwrap_or("").split(',').filter(|s| !s.is_empty()) {
            r.options.remove(k);
        }
        sim.changed();
    }
    crate::ha_manager::schedule(sim, vmid);
    Ok(Reply::data(Value::Null))
}

pub fn resource_delete(sim: &Arc<Sim>, sid: &str, p: &Params) -> ApiResult {
    p.only(&["purge"])?;
    let purge = p.bool("purge", true)?;
    let (sid, _) = parse_sid(sid)?;
    let mut st = lock(&sim.state);
    // Resources.pm:313-315.
    st.ha_resources
        .remove(&sid)
        .ok_or_else(|| ApiError::die(format!("cannot delete service '{sid}', not HA managed!")))?;
    if purge {
        for r in st.ha_rules.values_mut() {
            r.resources.retain(|s| *s != sid);
        }
        st.ha_rules.retain(|_, r| !r.resources.is_empty());
    }
    sim.changed();
    Ok(Reply::data(Value::Null))
}

fn rule_json(r: &HaRule, digest: &str) -> Value {
    let mut o = json!({"rule": r.rule, "type": r.kind, "resources": r.resources.join(","), "digest": digest});
    if let Some(m) = o.as_object_mut() {
        for (k, v) in &r.options {
            let val = if ["strict", "disable"].contains(&k.as_str()) {
                v.parse::<i64>().map(Value::from).unwrap_or_else(|_| Value::from(v.clone()))
            } else {
                Value::from(v.clone())
            };
            m.insert(k.clone(), val);
        }
    }
    o
}

pub fn rules_list(sim: &Arc<Sim>, p: &Params) -> ApiResult {
    p.only(&["type", "resource"])?;
    let st = lock(&sim.state);
    let d = digest_of(&st.ha_rules);
    let out = st
        .ha_rules
        .values()
        .filter(|r| p.get("type").is_none_or(|t| t == r.kind))
        .filter(|r| p.get("resource").is_none_or(|s| r.resources.iter().any(|x| x == s)))
        .map(|r| rule_json(r, &d))
        .collect();
    Ok(Reply::data(Value::Array(out)))
}

const RULE_OPTS: &[&str] = &["nodes", "strict", "disable", "comment", "affinity"];

/// The shape of `nodes` (`pve-ha-group-node-list`: `node[:priority]`), checked by
/// parameter verification before the handler runs.
fn check_nodes_format(nodes: Option<&str>) -> Result<(), ApiError> {
    for n in nodes.unwrap_or("").split(',').filter(|s| !s.is_empty()) {
        let (name, prio) = n.split_once(':').unwrap_or((n, "0"));
        if !crate::model::props::valid_dns_name(name) || prio.parse::<u32>().is_err() {
            return Err(ApiError::param(
                "nodes",
                format!("invalid format - value '{n}' does not look like a valid node name with optional priority"),
            ));
        }
    }
    Ok(())
}

/// The checks Rules.pm makes inside the HA domain lock, in its order
/// (`$assert_valid_resources_param` :46-59, `$assert_valid_nodes_param` :61-79,
/// `$assert_feasibility` :111-137); `prefix` is the lock's error prefix.
fn validate_rule(sim: &Sim, st: &ClusterState, rule: &HaRule, prefix: &str) -> Result<(), ApiError> {
    if rule.resources.is_empty() {
        return Err(ApiError::param("resources", "property is missing and it is not optional"));
    }
    let unmanaged: Vec<&str> =
        rule.resources.iter().filter(|s| !st.ha_resources.contains_key(*s)).map(String::as_str).collect();
    if !unmanaged.is_empty() {
        return Err(locked_die(prefix, format!("cannot use unmanaged resource(s) {}.", unmanaged.join(", "))));
    }
    if rule.kind == "node-affinity" {
        let nodes = rule
            .options
            .get("nodes")
            .ok_or_else(|| ApiError::param("nodes", "property is missing and it is not optional"))?;
        let mut missing: Vec<&str> = nodes
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|n| n.split_once(':').map_or(n, |(name, _)| name))
            .filter(|name| !sim.has_node(name))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            return Err(locked_die(prefix, format!("cannot use non-existent node(s) {}.", missing.join(", "))));
        }
        for s in &rule.resources {
            let clash = st
                .ha_rules
                .values()
                .any(|o| o.rule != rule.rule && o.kind == "node-affinity" && o.resources.contains(s));
            if clash {
                // NodeAffinity.pm:245, raised as a 400 exception and stringified by the lock.
                return Err(locked_die(
                    prefix,
                    format!(
                        "400 Rule '{}' is invalid.\nresources: resource '{s}' is already used in another node affinity rule",
                        rule.rule
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn parse_resources(s: &str) -> Result<Vec<String>, ApiError> {
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| {
            parse_sid(x)
                .map(|(sid, _)| sid)
                .map_err(|_| ApiError::param("resources", format!("invalid format - unable to parse service ID '{x}'")))
        })
        .collect()
}

pub fn rules_create(sim: &Arc<Sim>, p: &Params) -> ApiResult {
    p.only(&["type", "rule", "resources", "nodes", "strict", "disable", "comment", "affinity"])?;
    let kind = p.required("type")?.to_string();
    if !["node-affinity", "resource-affinity"].contains(&kind.as_str()) {
        return Err(ApiError::param(
            "type",
            format!("value '{kind}' does not have a value in the enumeration 'node-affinity, resource-affinity'"),
        ));
    }
    let id = p.required("rule")?.to_string();
    check_rule_id(&id)?;
    let resources = parse_resources(p.required("resources")?)?;
    check_nodes_format(p.get("nodes"))?;
    p.bool("strict", false)?;
    p.bool("disable", false)?;
    let options: BTreeMap<String, String> =
        RULE_OPTS.iter().filter_map(|k| p.get(k).map(|v| (k.to_string(), v.to_string()))).collect();
    let rule = HaRule { rule: id.clone(), kind, resources, options };
    let mut st = lock(&sim.state);
    if !st.ha_rules.contains_key(&id) && sim.faults.fire(FaultKind::HaRace) {
        // Another writer created the same rule a moment earlier.
        validate_rule(sim, &st, &rule, CREATE_RULE)?;
        st.ha_rules.insert(id.clone(), rule.clone());
        sim.changed();
    }
    if st.ha_rules.contains_key(&id) {
        return Err(locked_die(CREATE_RULE, format!("HA rule '{id}' already defined")));
    }
    validate_rule(sim, &st, &rule, CREATE_RULE)?;
    st.ha_rules.insert(id, rule);
    sim.changed();
    Ok(Reply::data(Value::Null))
}

pub fn rule_get(sim: &Arc<Sim>, id: &str) -> ApiResult {
    check_rule_id(id)?;
    let st = lock(&sim.state);
    let d = digest_of(&st.ha_rules);
    let r = st.ha_rules.get(id).ok_or_else(|| ApiError::die(format!("no such ha rule '{id}'")))?;
    Ok(Reply::data(rule_json(r, &d)))
}

pub fn rule_update(sim: &Arc<Sim>, id: &str, p: &Params) -> ApiResult {
    p.only(&["type", "resources", "nodes", "strict", "disable", "comment", "affinity", "delete", "digest"])?;
    check_rule_id(id)?;
    // `type` is the schema's type-property: required on update too (pve-docs apidata.js).
    p.required("type")?;
    check_nodes_format(p.get("nodes"))?;
    let mut st = lock(&sim.state);
    if p.get("digest").is_some()
        && let (Some(r), Some(resources)) = (st.ha_rules.get(id).cloned(), p.get("resources"))
        && sim.faults.fire(FaultKind::HaRace)
    {
        // Another writer made the same change a moment earlier: the file's
        // digest moved on.
        let mut r = r;
        r.resources = parse_resources(resources)?;
        st.ha_rules.insert(id.to_string(), r);
        sim.changed();
    }
    if let Some(d) = p.get("digest")
        && d != digest_of(&st.ha_rules)
    {
        return Err(locked_die(UPDATE_RULE, MODIFIED));
    }
    // Rules.pm:340.
    let mut rule = st
        .ha_rules
        .get(id)
        .cloned()
        .ok_or_else(|| locked_die(UPDATE_RULE, format!("HA rule '{id}' does not exist")))?;
    if let Some(t) = p.get("type")
        && t != rule.kind
    {
        return Err(ApiError::param("type", "rule type cannot be changed"));
    }
    if let Some(r) = p.get("resources") {
        rule.resources = parse_resources(r)?;
    }
    for k in RULE_OPTS {
        if let Some(v) = p.get(k) {
            rule.options.insert(k.to_string(), v.to_string());
        }
    }
    for k in p.get("delete").unwrap_or("").split(',').filter(|s| !s.is_empty()) {
        rule.options.remove(k);
    }
    validate_rule(sim, &st, &rule, UPDATE_RULE)?;
    st.ha_rules.insert(id.to_string(), rule);
    sim.changed();
    Ok(Reply::data(Value::Null))
}

/// Rules.pm:388-403: `delete $rules->{ids}->{$ruleid}` and write, whether it was
/// there or not.
pub fn rule_delete(sim: &Arc<Sim>, id: &str) -> ApiResult {
    check_rule_id(id)?;
    let mut st = lock(&sim.state);
    if st.ha_rules.remove(id).is_some() {
        sim.changed();
    }
    Ok(Reply::data(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_are_pve_configids_and_others_fail_parameter_verification() {
        for ok in ["r1", "cradle-pve1", "prod_rule", "Rule-2"] {
            assert!(check_rule_id(ok).is_ok(), "{ok}");
        }
        for bad in ["r", "1r", "-r1", "lab.cradle-pve1", "a/b", ""] {
            match check_rule_id(bad) {
                Err(ApiError::Params(m)) => {
                    assert_eq!(m.get("rule"), Some(&format!("invalid format - invalid configuration ID '{bad}'")));
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
