//! Proxmox VE 9 HA for a VM: a member of its node's node-affinity rule.
//! PVE facts: a resource can be in
//! one node-affinity rule only (proxmox/pve-ha-manager
//! b71218f279d57417dbcdd957128499695fe55171 src/PVE/HA/Rules/NodeAffinity.pm:245,
//! "resource '$sid' is already used in another node affinity rule"), and a
//! rule's `resources` is replaced as a whole, so the rule is read, extended and written back with its digest (or
//! created when missing). The HA resource itself is added `stopped` (a
//! `started` one is started by HA at once); that needs no decision here.

use crate::{Kind, Problem};

/// An HA rule as `GET /cluster/ha/rules` lists it (wit/proxmox.wit `ha-rule`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub rule: String,
    /// `node-affinity` or `resource-affinity`.
    pub kind: String,
    /// `vm:100,vm:101`.
    pub resources: String,
    pub nodes: Option<String>,
    pub strict: bool,
    pub digest: Option<String>,
}

/// What to do for the VM's rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The VM is in the rule already.
    Done,
    /// Write this rule (a new one without a digest, or the existing one
    /// extended, with its digest).
    Write(Rule),
}

/// The HA service id of VM `vmid`.
pub fn sid(vmid: u32) -> String {
    format!("vm:{vmid}")
}

/// What to write so that VM `vmid` is in node-affinity rule `rule_id` for
/// `node`, given the cluster's `rules`. A VM in another node-affinity rule
/// is a `conflict` naming it.
pub fn plan(rules: &[Rule], vmid: u32, node: &str, rule_id: &str) -> Result<Step, Problem> {
    let sid = sid(vmid);
    let mut mine = None;
    for r in rules.iter().filter(|r| r.kind == "node-affinity") {
        if r.resources.split(',').any(|s| s == sid) {
            if r.rule == rule_id {
                return Ok(Step::Done);
            }
            return Err(Problem {
                kind: Kind::Conflict,
                message: format!(
                    "{sid} is already in node-affinity rule {}; a resource can be in one node-affinity rule only: take it out there, or name that rule",
                    r.rule
                ),
            });
        }
        if r.rule == rule_id {
            mine = Some(r);
        }
    }
    Ok(Step::Write(match mine {
        None => Rule {
            rule: rule_id.to_string(),
            kind: "node-affinity".into(),
            resources: sid,
            nodes: Some(node.to_string()),
            strict: false,
            digest: None,
        },
        Some(r) => Rule { resources: format!("{},{sid}", r.resources), ..r.clone() },
    }))
}

/// How often a rule write that met another run's is read and tried again.
pub const TRIES: u32 = 5;

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, kind: &str, resources: &str) -> Rule {
        Rule {
            rule: id.into(),
            kind: kind.into(),
            resources: resources.into(),
            nodes: Some("pve1".into()),
            strict: false,
            digest: Some("d1".into()),
        }
    }

    #[test]
    fn a_missing_rule_is_created_for_the_node_without_a_digest() {
        let got = plan(&[], 140, "pve2", "cradle-pve2").expect("plan");
        assert_eq!(
            got,
            Step::Write(Rule {
                rule: "cradle-pve2".into(),
                kind: "node-affinity".into(),
                resources: "vm:140".into(),
                nodes: Some("pve2".into()),
                strict: false,
                digest: None,
            })
        );
    }

    #[test]
    fn the_nodes_rule_is_extended_keeping_its_digest_and_settings() {
        let rules = [rule("cradle-pve1", "node-affinity", "vm:100,vm:101")];
        let Step::Write(r) = plan(&rules, 140, "pve1", "cradle-pve1").expect("plan") else { panic!("write") };
        assert_eq!(r.resources, "vm:100,vm:101,vm:140");
        assert_eq!((r.digest.as_deref(), r.nodes.as_deref()), (Some("d1"), Some("pve1")));
    }

    #[test]
    fn a_vm_already_in_its_rule_is_left_as_it_is() {
        let rules = [rule("cradle-pve1", "node-affinity", "vm:100,vm:140")];
        assert_eq!(plan(&rules, 140, "pve1", "cradle-pve1"), Ok(Step::Done));
    }

    #[test]
    fn a_vm_in_another_node_affinity_rule_is_a_conflict_naming_it() {
        let rules = [rule("pinned", "node-affinity", "vm:140"), rule("cradle-pve1", "node-affinity", "vm:100")];
        let p = plan(&rules, 140, "pve1", "cradle-pve1").expect_err("conflict");
        assert_eq!(p.kind, Kind::Conflict);
        assert!(p.message.starts_with("vm:140 is already in node-affinity rule pinned;"), "{p}");
    }

    #[test]
    fn resource_affinity_rules_and_prefix_matches_are_not_memberships() {
        let rules =
            [rule("together", "resource-affinity", "vm:140,vm:141"), rule("cradle-pve1", "node-affinity", "vm:1400")];
        let Step::Write(r) = plan(&rules, 140, "pve1", "cradle-pve1").expect("plan") else { panic!("write") };
        assert_eq!(r.resources, "vm:1400,vm:140");
    }
}
