//! The ACL model against pve-access-control 5ccd07d9302562b73374d331b63d25b04b86766c
//! (`src/PVE/AccessControl.pm`, `src/PVE/RPCEnvironment.pm`) and pve-common
//! f665029eac78022e81810ab2e44eace57ade13fb (`src/PVE/Exception.pm`).

use std::collections::BTreeSet;

use super::*;

fn cfg(role_privs: &[&str]) -> AccessConfig {
    AccessConfig::single_role("cradle@pve", "Cradle", role_privs)
}

fn entry(path: &str, subject: Subject, role: &str, propagate: bool) -> AclEntry {
    AclEntry { path: path.into(), subject, role: role.into(), propagate }
}

// RPCEnvironment.pm l. 291-305 (`check`) and Exception.pm l. 53-69 (`raise_perm_exc`):
// the text names the path and the first missing privilege.
#[test]
fn a_missing_privilege_is_reported_with_pves_text() {
    let c = cfg(&["VM.Audit"]);
    assert_eq!(c.check("cradle@pve!cradle", "/vms/100", &["VM.Audit"]), Ok(()));
    let e = c.check("cradle@pve!cradle", "/vms/100", &["VM.Audit", "VM.Allocate"]).unwrap_err();
    assert_eq!(e.to_string(), "Permission check failed (/vms/100, VM.Allocate)");
    // check_any (l. 307-326): the privileges joined by `|`.
    let e = c.check_any("cradle@pve!cradle", "/vms/100", &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"]);
    assert_eq!(
        e.unwrap_err().to_string(),
        "Permission check failed (/vms/100, VM.GuestAgent.Audit|VM.GuestAgent.Unrestricted)"
    );
    assert_eq!(Denied(None).to_string(), "Permission check failed");
}

// RPCEnvironment.pm l. 136-176: a privilege-separated token has the intersection of
// its own and its user's privileges.
#[test]
fn a_privsep_token_has_only_what_both_it_and_its_user_have() {
    let mut c = cfg(&["VM.Audit", "VM.Allocate"]);
    c.roles.insert("Small".into(), BTreeSet::from(["VM.Audit".into(), "Sys.Audit".into()]));
    c.acl.retain(|e| e.subject == Subject::User("cradle@pve".into()));
    c.acl.push(entry("/", Subject::Token("cradle@pve!cradle".into()), "Small", true));
    let got = c.permissions("cradle@pve!cradle", "/vms/100");
    assert_eq!(got, BTreeSet::from(["VM.Audit".to_string()]));
    // Without privilege separation the token has exactly its user's privileges.
    c.tokens[0].privsep = false;
    let got = c.permissions("cradle@pve!cradle", "/vms/100");
    assert_eq!(got, BTreeSet::from(["VM.Audit".to_string(), "VM.Allocate".to_string()]));
}

// AccessControl.pm `roles` l. 1827-1889: an entry applies below its path only when it
// propagates; a deeper entry replaces the inherited roles; NoAccess wins.
#[test]
fn acl_entries_propagate_and_deeper_entries_replace_inherited_roles() {
    let user = Subject::User("cradle@pve".into());
    let mut c = cfg(&[]);
    c.tokens[0].privsep = false;
    c.acl = vec![entry("/vms", user.clone(), "PVEVMUser", false), entry("/storage", user.clone(), "PVEAuditor", true)];
    let who = "cradle@pve!cradle";
    assert!(c.has(who, "/vms", "VM.PowerMgmt"));
    assert!(!c.has(who, "/vms/100", "VM.PowerMgmt"), "not propagated");
    assert!(c.has(who, "/storage/local-lvm", "Datastore.Audit"));
    c.acl.push(entry("/storage/local-lvm", user.clone(), "PVEDatastoreUser", true));
    assert!(c.has(who, "/storage/local-lvm", "Datastore.AllocateSpace"));
    c.acl.push(entry("/storage/local", user.clone(), "NoAccess", true));
    assert!(c.permissions(who, "/storage/local").is_empty());
    assert!(c.permissions(who, "/").is_empty(), "nothing on / itself");
}

// RPCEnvironment.pm l. 139-142: root@pam can do anything; its token without
// privilege separation too (the default).
#[test]
fn the_default_is_roots_token_with_every_privilege() {
    let c = AccessConfig::default();
    assert!(c.is_root());
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(c.permissions("root@pam!cradle", "/sdn/zones/localnetwork/vmbr0").len(), valid_privileges().len());
    assert!(c.permissions("nobody@pve", "/").is_empty());
}

// AccessControl.pm l. 1057-1204: the built-in roles from the privilege groups.
#[test]
fn builtin_roles_follow_the_privilege_groups() {
    let roles = builtin_roles();
    assert!(roles["PVEVMUser"].contains("VM.PowerMgmt") && !roles["PVEVMUser"].contains("VM.Allocate"));
    assert!(roles["PVEVMAdmin"].contains("VM.Allocate") && roles["PVEVMAdmin"].contains("VM.GuestAgent.Audit"));
    assert!(!roles["PVEAdmin"].contains("Sys.Modify"), "Sys.Modify is root-only");
    assert!(!roles["PVEAdmin"].contains("Mapping.Modify"));
    assert_eq!(roles["PVETemplateUser"], BTreeSet::from(["VM.Clone".to_string(), "VM.Audit".to_string()]));
    assert_eq!(valid_privileges().len(), 47, "46 in the groups plus Permissions.Modify");
}

#[test]
fn invalid_configurations_are_refused_naming_the_fault() {
    let c = cfg(&["VM.Alocate"]);
    assert_eq!(c.validate(), Err("role 'Cradle': invalid privilege 'VM.Alocate'".into()));
    let mut c = cfg(&[]);
    c.api_token = "cradle@pve!other".into();
    assert!(c.validate().unwrap_err().contains("not one of the configured tokens"));
    let mut c = cfg(&[]);
    c.acl[0].path = "/vms/".into();
    assert!(c.validate().unwrap_err().contains("not a normalized path"));
    assert_eq!(normalize_path("//vms//100/").as_deref(), Some("/vms/100"));
}

// pve-manager 14a22df35955d97dfc1af21e117dc894a29df0c9 `PVE/API2/Tasks.pm` l. 27-36
// (`$check_task_user`), l. 184-190 (the list: all tasks with Sys.Audit on the node, else
// the caller's own), l. 524-529 (a task's status: another user's needs Sys.Audit).
// qemu-server's `qm cleanup` (src/PVE/CLI/qm.pm l. 1170-1175), run by qmeventd as
// root@pam, starts a VM again after a reboot: a token without Sys.Audit does not see it.
#[test]
fn a_token_sees_other_users_tasks_only_with_sys_audit_on_the_node() {
    use crate::model::{ClusterState, Task};
    let mut st = ClusterState::default();
    let root = Task::new("pve1", 1, "qmstart", "300", "root@pam", Some(300));
    let own = Task::new("pve1", 2, "qmreboot", "300", "cradle@pve!cradle", Some(300));
    let (root_upid, own_upid) = (root.upid.clone(), own.upid.clone());
    st.tasks.push(root);
    st.tasks.push(own);
    let list = || {
        serde_json::json!([
            {"upid": root_upid, "user": "root@pam"},
            {"upid": own_upid, "user": "cradle@pve", "tokenid": "cradle"},
        ])
    };
    let segs = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let status = |upid: &str| segs(&["nodes", "pve1", "tasks", upid, "status"]);
    let p = crate::api::Params::default();

    let without = cfg(&["VM.Audit"]);
    let mut seen = list();
    endpoints::filter_reply(&without, "GET", &segs(&["nodes", "pve1", "tasks"]), &mut seen);
    assert_eq!(seen.as_array().map(Vec::len), Some(1), "{seen}");
    assert_eq!(seen[0]["upid"], own_upid.as_str());
    assert_eq!(endpoints::check_request(&without, &st, "GET", &status(&own_upid), &p), Ok(()));
    let e = endpoints::check_request(&without, &st, "GET", &status(&root_upid), &p).unwrap_err();
    assert_eq!(e.to_string(), "Permission check failed (/nodes/pve1, Sys.Audit)");

    let with = cfg(&["VM.Audit", "Sys.Audit"]);
    let mut seen = list();
    endpoints::filter_reply(&with, "GET", &segs(&["nodes", "pve1", "tasks"]), &mut seen);
    assert_eq!(seen.as_array().map(Vec::len), Some(2), "{seen}");
    assert_eq!(endpoints::check_request(&with, &st, "GET", &status(&root_upid), &p), Ok(()));
}
