//! `pve:` attacks on the proxmox capability's scope.
//!
//! - `pve:setup` (run by a widely granted copy of this plugin, not an
//!   attack): clones template 9000 to each VMID of the argument
//!   (`150,5000`), makes them HA-managed and writes rule `prod-rule` holding
//!   the last one, so the attacks below have something real to hit.
//! - `pve:set-config`: one `set-config` on VM 150 on pve1; the argument is
//!   lines `key=value` (set) and `-key` (delete).
//! - `pve:rewrite-ha-rule`: rewrites rule `prod-rule` to hold `vm:150`.
//! - `pve:rewrite-ha-rule-at`: rewrites rule `prod-rule` (keeping its
//!   members) with the argument as the digest it claims to have read.
//! - `pve:ha-rules-digest` (not an attack): the digest the rules list has now.
//! - `pve:clone`: clones template 9000 to VMID 150 (a template-name lookup).

use super::achieved;
use crate::bindings::cradle::host::proxmox::{self, CloneRequest, HaRule};
use crate::bindings::cradle::host::types::{Entry, Error, VmSpec, VmState};

/// Run `attack`, or `None` when this module has no such attack.
pub fn run(attack: &str, vm: &VmSpec) -> Option<Result<Option<VmState>, Error>> {
    Some(match attack {
        "setup" => setup(&vm.template).and_then(|()| achieved("set up", vm)),
        "set-config" => set_config(&vm.template).and_then(|()| achieved("set-config accepted", vm)),
        "rewrite-ha-rule" => proxmox::put_ha_rule(&HaRule {
            rule: "prod-rule".into(),
            kind: "node-affinity".into(),
            resources: "vm:150".into(),
            nodes: Some("pve1".into()),
            strict: false,
            digest: None,
        })
        .and_then(|()| achieved("prod-rule now holds vm:150", vm)),
        "ha-rules-digest" => rules_digest().and_then(|d| achieved(format!("digest={d}"), vm)),
        "rewrite-ha-rule-at" => rewrite_at(&vm.template).and_then(|()| achieved("prod-rule rewritten", vm)),
        "clone" => clone(150, "hostile-clone").and_then(|()| achieved("cloned", vm)),
        _ => return None,
    })
}

fn rules_digest() -> Result<String, Error> {
    let rules = proxmox::list_ha_rules()?;
    Ok(rules.into_iter().find_map(|r| r.digest).unwrap_or_default())
}

fn rewrite_at(digest: &str) -> Result<(), Error> {
    let rule = proxmox::list_ha_rules()?
        .into_iter()
        .find(|r| r.rule == "prod-rule")
        .ok_or_else(|| Error::NotFound("HA rule prod-rule".into()))?;
    proxmox::put_ha_rule(&HaRule { digest: Some(digest.to_string()), ..rule })
}

fn clone(newid: u32, name: &str) -> Result<(), Error> {
    let upid = proxmox::clone_vm(&CloneRequest {
        node: "pve1".into(),
        template_vmid: 9000,
        newid,
        name: name.into(),
        full: false,
        storage: None,
        target: None,
        description: None,
    })?;
    let done = proxmox::wait_task("pve1", &upid, 60_000)?;
    if done.ok { Ok(()) } else { Err(Error::Failed(format!("clone to {newid}: {:?}", done.exitstatus))) }
}

fn setup(vmids: &str) -> Result<(), Error> {
    let mut last = None;
    for vmid in vmids.split(',').filter_map(|v| v.trim().parse::<u32>().ok()) {
        clone(vmid, &format!("vm-{vmid}"))?;
        proxmox::add_ha_resource(vmid, Some("stopped"), None)?;
        last = Some(vmid);
    }
    let Some(member) = last else { return Err(Error::Invalid(format!("pve:setup: no VMIDs in `{vmids}`"))) };
    proxmox::put_ha_rule(&HaRule {
        rule: "prod-rule".into(),
        kind: "node-affinity".into(),
        resources: format!("vm:{member}"),
        nodes: Some("pve1".into()),
        strict: false,
        digest: None,
    })
}

fn set_config(spec: &str) -> Result<(), Error> {
    let mut set = Vec::new();
    let mut delete = Vec::new();
    for line in spec.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match line.strip_prefix('-') {
            Some(key) => delete.push(key.to_string()),
            None => {
                let (key, value) = line.split_once('=').unwrap_or((line, ""));
                set.push(Entry { key: key.into(), value: value.into() });
            }
        }
    }
    proxmox::set_config("pve1", 150, &set, &delete, None)
}
