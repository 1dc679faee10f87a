//! Proxmox VE's access control as the API applies it: privileges, roles, users, API
//! tokens with privilege separation, and ACL entries on paths with propagation.
//!
//! Contract: [`AccessConfig`] is what `user.cfg` holds for the simulated cluster (the
//! users, tokens, custom roles and ACL entries) plus which token the simulator's one
//! API secret authenticates ([`AccessConfig::api_token`]). The default is
//! `root@pam!cradle` without privilege separation: every check passes, as for
//! root's own token on PVE. [`AccessConfig::permissions`] computes the privileges of a
//! user or token on a path exactly as pve-access-control does (sources below), and
//! [`AccessConfig::check`] / [`AccessConfig::check_any`] fail with PVE's 403 text,
//! `Permission check failed (/vms/100, VM.Allocate)` (`check_any`: the privileges
//! joined by `|`). What each API request needs is [`endpoints`]; the check runs once
//! per request, before the handler, in `api::answer`.
//!
//! Sources (pve-access-control 5ccd07d9302562b73374d331b63d25b04b86766c, "bump
//! version to 9.1.1"): `src/PVE/AccessControl.pm` `$privgroups` (l. 1057-1166) and
//! `create_roles` (l. 1175-1204) for the privileges and built-in roles, `roles`
//! (l. 1788-1895) for the walk down the path (an entry on a path applies there, and
//! below only when it propagates; a deeper entry replaces what was inherited; token
//! entries before user entries; `NoAccess` wins); `src/PVE/RPCEnvironment.pm`
//! `permissions` (l. 136-176: root@pam has everything; a token without privilege
//! separation has its user's privileges; with it, the intersection of its own and its
//! user's) and `check`/`check_any` (l. 291-326); pve-common
//! f665029eac78022e81810ab2e44eace57ade13fb `src/PVE/Exception.pm` `raise_perm_exc`
//! (l. 53-69) for the message.
//!
//! Not modelled: groups, pools (and pool-derived roles), realms other than as part
//! of a user id, disabled or expired users and tokens; cradle's token uses none of them.

pub mod endpoints;

use std::collections::{BTreeMap, BTreeSet};

/// The privilege groups of `$privgroups` (AccessControl.pm l. 1057-1166):
/// (category, root-only, admin, user, audit).
type PrivGroup =
    (&'static str, &'static [&'static str], &'static [&'static str], &'static [&'static str], &'static [&'static str]);

const PRIV_GROUPS: &[PrivGroup] = &[
    (
        "VM",
        &[],
        &[
            "VM.Config.Disk",
            "VM.Config.CPU",
            "VM.Config.Memory",
            "VM.Config.Network",
            "VM.Config.HWType",
            "VM.Config.Options",
            "VM.Allocate",
            "VM.Clone",
            "VM.GuestAgent.Unrestricted",
            "VM.Migrate",
            "VM.Replicate",
            "VM.Snapshot",
            "VM.Snapshot.Rollback",
        ],
        &[
            "VM.Config.CDROM",
            "VM.Config.Cloudinit",
            "VM.Console",
            "VM.Backup",
            "VM.GuestAgent.FileRead",
            "VM.GuestAgent.FileSystemMgmt",
            "VM.GuestAgent.FileWrite",
            "VM.PowerMgmt",
        ],
        &["VM.Audit", "VM.GuestAgent.Audit"],
    ),
    (
        "Sys",
        &["Sys.PowerMgmt", "Sys.Modify", "Sys.Incoming", "Sys.AccessNetwork"],
        &["Sys.Console", "Sys.Syslog"],
        &[],
        &["Sys.Audit"],
    ),
    (
        "Datastore",
        &[],
        &["Datastore.Allocate", "Datastore.AllocateTemplate"],
        &["Datastore.AllocateSpace"],
        &["Datastore.Audit"],
    ),
    ("SDN", &[], &["SDN.Allocate", "SDN.Audit"], &["SDN.Use"], &["SDN.Audit"]),
    ("User", &["Realm.Allocate"], &["User.Modify", "Group.Allocate", "Realm.AllocateUser"], &[], &[]),
    ("Pool", &[], &["Pool.Allocate"], &["Pool.Audit"], &["Pool.Audit"]),
    ("Mapping", &[], &["Mapping.Modify"], &["Mapping.Use"], &["Mapping.Audit"]),
];

/// Every privilege PVE 9.1 knows (`$valid_privs`: the groups plus `Permissions.Modify`).
pub fn valid_privileges() -> BTreeSet<&'static str> {
    let mut all: BTreeSet<&'static str> = BTreeSet::from(["Permissions.Modify"]);
    for (_, root, admin, user, audit) in PRIV_GROUPS {
        for list in [root, admin, user, audit] {
            all.extend(list.iter().copied());
        }
    }
    all
}

/// The built-in roles (`create_roles`): `Administrator` (everything), `NoAccess`,
/// `PVEAdmin`, `PVE<cat>Admin`, `PVE<cat>User`, `PVEAuditor`, `PVETemplateUser`.
pub fn builtin_roles() -> BTreeMap<String, BTreeSet<String>> {
    let mut roles: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    roles.insert("NoAccess".into(), BTreeSet::new());
    roles.insert("Administrator".into(), valid_privileges().into_iter().map(String::from).collect());
    for (cat, _, admin, user, audit) in PRIV_GROUPS {
        for p in admin.iter().chain(user.iter()).chain(audit.iter()) {
            roles.entry(format!("PVE{cat}Admin")).or_default().insert((*p).into());
            roles.entry("PVEAdmin".into()).or_default().insert((*p).into());
        }
        if !user.is_empty() {
            for p in user.iter().chain(audit.iter()) {
                roles.entry(format!("PVE{cat}User")).or_default().insert((*p).into());
            }
        }
        for p in audit.iter() {
            roles.entry("PVEAuditor".into()).or_default().insert((*p).into());
        }
    }
    if let Some(admin) = roles.get_mut("PVEAdmin") {
        admin.remove("Mapping.Modify");
    }
    roles.insert("PVETemplateUser".into(), BTreeSet::from(["VM.Clone".into(), "VM.Audit".into()]));
    roles
}

/// Who an ACL entry is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A user, `name@realm`.
    User(String),
    /// An API token, `name@realm!tokenid`.
    Token(String),
}

/// One line of `user.cfg`'s ACL: `role` on `path` for `subject`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclEntry {
    /// An ACL path (`/`, `/vms/100`, `/storage/local-lvm`, `/sdn/zones/localnetwork/vmbr0`).
    pub path: String,
    /// The user or token it is for.
    pub subject: Subject,
    /// A built-in or custom role.
    pub role: String,
    /// Whether it applies below `path` too (`pveum acl modify --propagate`, default 1).
    pub propagate: bool,
}

/// An API token (`pveum user token add USER TOKENID --privsep 1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    /// `user@realm!tokenid`.
    pub id: String,
    /// Privilege separation: the token has only what its own ACL entries give it
    /// (and its user has); without, it has all its user's privileges.
    pub privsep: bool,
}

/// The access control configuration of the simulated cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessConfig {
    /// Users (`root@pam` always exists).
    pub users: Vec<String>,
    /// API tokens.
    pub tokens: Vec<TokenSpec>,
    /// Custom roles: name → privileges.
    pub roles: BTreeMap<String, BTreeSet<String>>,
    /// ACL entries.
    pub acl: Vec<AclEntry>,
    /// The token the simulator's API secret authenticates (one of `tokens`).
    pub api_token: String,
}

/// The token `cradle sim serve` and the simulator hand out by default.
pub const ROOT_TOKEN: &str = "root@pam!cradle";

impl Default for AccessConfig {
    /// root@pam's token `cradle` without privilege separation: everything allowed.
    fn default() -> Self {
        AccessConfig {
            users: vec!["root@pam".into()],
            tokens: vec![TokenSpec { id: ROOT_TOKEN.into(), privsep: false }],
            roles: BTreeMap::new(),
            acl: Vec::new(),
            api_token: ROOT_TOKEN.into(),
        }
    }
}

impl AccessConfig {
    /// User `user`, its privilege-separated token `user!cradle` as the API token, a
    /// custom role `role` holding `privileges`, and that role on `/` (propagated) for
    /// both the user and the token — what docs/CONFIG.md's `pveum` commands create.
    pub fn single_role(user: &str, role: &str, privileges: &[&str]) -> AccessConfig {
        let token = format!("{user}!cradle");
        let entry = |subject| AclEntry { path: "/".into(), subject, role: role.to_string(), propagate: true };
        AccessConfig {
            users: vec!["root@pam".into(), user.to_string()],
            tokens: vec![TokenSpec { id: token.clone(), privsep: true }],
            roles: BTreeMap::from([(role.to_string(), privileges.iter().map(|p| p.to_string()).collect())]),
            acl: vec![entry(Subject::User(user.to_string())), entry(Subject::Token(token.clone()))],
            api_token: token,
        }
    }

    /// Whether the API token is root's without privilege separation (nothing can fail).
    pub fn is_root(&self) -> bool {
        self.api_token.split_once('!').is_some_and(|(u, _)| u == "root@pam")
            && self.tokens.iter().any(|t| t.id == self.api_token && !t.privsep)
    }

    /// Reject what PVE would not accept in `user.cfg` (unknown privilege, role, user or
    /// token; a malformed path).
    pub fn validate(&self) -> Result<(), String> {
        let valid = valid_privileges();
        let builtin = builtin_roles();
        for (role, privs) in &self.roles {
            if builtin.contains_key(role) {
                return Err(format!("role '{role}' is built in and cannot be redefined"));
            }
            if let Some(bad) = privs.iter().find(|p| !valid.contains(p.as_str())) {
                return Err(format!("role '{role}': invalid privilege '{bad}'"));
            }
        }
        for t in &self.tokens {
            let Some((user, name)) = t.id.split_once('!') else {
                return Err(format!("token '{}' is not USER@REALM!TOKENID", t.id));
            };
            if name.is_empty() || !self.users.iter().any(|u| u == user) {
                return Err(format!("token '{}': user '{user}' does not exist", t.id));
            }
        }
        if !self.tokens.iter().any(|t| t.id == self.api_token) {
            return Err(format!("api token '{}' is not one of the configured tokens", self.api_token));
        }
        for e in &self.acl {
            if normalize_path(&e.path).as_deref() != Some(e.path.as_str()) {
                return Err(format!("ACL path '{}' is not a normalized path such as /vms/100", e.path));
            }
            if !builtin.contains_key(&e.role) && !self.roles.contains_key(&e.role) {
                return Err(format!("ACL entry on {}: role '{}' does not exist", e.path, e.role));
            }
            let known = match &e.subject {
                Subject::User(u) => self.users.contains(u),
                Subject::Token(t) => self.tokens.iter().any(|x| &x.id == t),
            };
            if !known {
                return Err(format!("ACL entry on {}: {:?} does not exist", e.path, e.subject));
            }
        }
        Ok(())
    }

    fn role_privs(&self, role: &str) -> BTreeSet<String> {
        self.roles.get(role).cloned().or_else(|| builtin_roles().remove(role)).unwrap_or_default()
    }

    /// The roles `subject` has on `path` (AccessControl.pm `roles`, groups and pools aside).
    fn roles(&self, subject: &Subject, path: &str) -> BTreeSet<String> {
        let mut roles: BTreeSet<String> = BTreeSet::new();
        let prefixes = path_prefixes(path);
        for (i, prefix) in prefixes.iter().enumerate() {
            let last = i + 1 == prefixes.len();
            let here: BTreeSet<String> = self
                .acl
                .iter()
                .filter(|e| &e.subject == subject && e.path == *prefix && (last || e.propagate))
                .map(|e| e.role.clone())
                .collect();
            if !here.is_empty() {
                roles = here;
            }
        }
        if roles.contains("NoAccess") { BTreeSet::from(["NoAccess".to_string()]) } else { roles }
    }

    fn privs_of(&self, subject: &Subject, path: &str) -> BTreeSet<String> {
        self.roles(subject, path).iter().flat_map(|r| self.role_privs(r)).collect()
    }

    /// The privileges `authid` (a user or a token) has on `path`
    /// (RPCEnvironment.pm `permissions`).
    pub fn permissions(&self, authid: &str, path: &str) -> BTreeSet<String> {
        if authid == "root@pam" {
            return valid_privileges().into_iter().map(String::from).collect();
        }
        if let Some((user, _)) = authid.split_once('!') {
            let Some(token) = self.tokens.iter().find(|t| t.id == authid) else { return BTreeSet::new() };
            let user_privs = self.permissions(user, path);
            if !token.privsep {
                return user_privs;
            }
            let own = self.privs_of(&Subject::Token(authid.to_string()), path);
            return own.intersection(&user_privs).cloned().collect();
        }
        if !self.users.iter().any(|u| u == authid) {
            return BTreeSet::new();
        }
        self.privs_of(&Subject::User(authid.to_string()), path)
    }

    /// Every privilege of `privs` on `path`, or PVE's 403 naming the first missing one.
    pub fn check(&self, authid: &str, path: &str, privs: &[&str]) -> Result<(), Denied> {
        let have = self.permissions(authid, path);
        match privs.iter().find(|p| !have.contains(**p)) {
            None => Ok(()),
            Some(p) => Err(Denied(Some(format!("{path}, {p}")))),
        }
    }

    /// One of `privs` on `path`, or PVE's 403 naming them all (`A|B`).
    pub fn check_any(&self, authid: &str, path: &str, privs: &[&str]) -> Result<(), Denied> {
        let have = self.permissions(authid, path);
        if privs.iter().any(|p| have.contains(*p)) {
            Ok(())
        } else {
            Err(Denied(Some(format!("{path}, {}", privs.join("|")))))
        }
    }

    /// Whether `authid` has `privilege` on `path` (a check with `$noerr`).
    pub fn has(&self, authid: &str, path: &str, privilege: &str) -> bool {
        self.permissions(authid, path).contains(privilege)
    }
}

/// A failed permission check: PVE's `raise_perm_exc($what)`, HTTP 403.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied(pub Option<String>);

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(what) => write!(f, "Permission check failed ({what})"),
            None => f.write_str("Permission check failed"),
        }
    }
}

/// `/`, `/vms`, `/vms/100` for `/vms/100`: the ACL tree nodes a check walks.
fn path_prefixes(path: &str) -> Vec<String> {
    let mut out = vec!["/".to_string()];
    let mut cur = String::new();
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        cur.push('/');
        cur.push_str(seg);
        out.push(cur.clone());
    }
    out
}

/// AccessControl.pm `normalize_path` (l. 1263-1279): collapse `//`, drop a trailing
/// `/`, prefix `/`; `None` for characters outside `[[:alnum:].-_/]`.
pub fn normalize_path(path: &str) -> Option<String> {
    let mut p = String::new();
    for c in path.chars() {
        if c == '/' && p.ends_with('/') {
            continue;
        }
        p.push(c);
    }
    while p.len() > 1 && p.ends_with('/') {
        p.pop();
    }
    if p.is_empty() {
        p.push('/');
    }
    if !p.starts_with('/') {
        p.insert(0, '/');
    }
    let ok = p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'));
    ok.then_some(p)
}

#[cfg(test)]
mod tests;
