//! The `ssh` capability's scope: its grant section (`[...grants.ssh]`:
//! [`SshGrant`], the hosts and upload directories), what of a call the grant
//! looks at ([`SshCall`]: the login and what the call does), and the rules
//! that compare the two: the login (user, host and port) must be one of the
//! call's guests or nodes or a listed host, an upload must land in a granted
//! directory, only the operator may trust or forget a host key that is
//! not of a guest its run owns, and only the operator's workflow may run an
//! Ansible playbook against a login, from a granted playbook directory.
//! Checked through [`crate::caps::policy::check`]
//! like every call.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, GrantError, OutOfScope, SshLogin};

/// `[...grants.ssh]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshGrant {
    /// Hosts: `"guests"` (the run's VMs), `"nodes"` (the cluster's nodes), or
    /// literal host names/addresses.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Absolute remote directories `upload` may write into.
    #[serde(default)]
    pub upload_dirs: Vec<PathBuf>,
    /// Project-relative directories `ssh::playbook` may run playbooks from
    /// (workflows only: a playbook runs code on the control node too).
    #[serde(default)]
    pub playbooks: Vec<PathBuf>,
}

/// The scope-relevant arguments of an SSH call.
#[derive(Debug, Clone, Copy)]
pub struct SshCall<'a> {
    /// The host connected to.
    pub host: &'a str,
    /// The port.
    pub port: u16,
    /// The login user; `None` for host-key calls, which log in as nobody.
    pub user: Option<&'a str>,
    /// What the call does.
    pub action: SshAction<'a>,
}

/// What an SSH call does, as far as the grant is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SshAction<'a> {
    /// Connect and run a command (`exec`, `wait-for`).
    Connect,
    /// Write the remote file at this path.
    Upload(&'a str),
    /// Pin or forget the host key of `host:port` in cradle's known_hosts.
    HostKey,
    /// Run the playbook at this project-relative path against the login
    /// (`ansible-playbook` on the control node, connecting as the login).
    Playbook(&'a str),
}

impl Grant for SshGrant {
    type Call<'a> = SshCall<'a>;

    fn validate(&self) -> Result<(), GrantError> {
        for dir in &self.upload_dirs {
            if !dir.is_absolute() {
                return Err(GrantError {
                    key: "ssh.upload_dirs",
                    value: dir.display().to_string(),
                    problem: "must be an absolute remote path".into(),
                });
            }
        }
        for dir in &self.playbooks {
            if !plain_relative(dir) {
                return Err(GrantError {
                    key: "ssh.playbooks",
                    value: dir.display().to_string(),
                    problem: "must be a directory relative to the project (no `..`, not absolute)".into(),
                });
            }
        }
        Ok(())
    }

    fn check(&self, caller: &Caller<'_>, call: &SshCall<'_>) -> Result<(), OutOfScope> {
        check_ssh(self, caller, call)
    }
}

/// A `[user@]host[:port]` entry of `ssh.hosts`: a missing port is 22, a
/// missing user matches any user.
fn literal_allows(entry: &str, host: &str, port: u16, user: Option<&str>) -> bool {
    let (want_user, rest) = match entry.split_once('@') {
        Some((u, r)) => (Some(u), r),
        None => (None, entry),
    };
    // `host:port`, unless the host is an IPv6 address (several colons; write
    // `[addr]:port` for one with a port).
    let (want_host, want_port) = if let Some(inner) = rest.strip_prefix('[') {
        match inner.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()).unwrap_or(22)),
            None => return false,
        }
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => match p.parse::<u16>() {
                Ok(p) => (h, p),
                Err(_) => return false,
            },
            _ => (rest, 22),
        }
    };
    want_host == host && want_port == port && (want_user.is_none() || user.is_none() || want_user == user)
}

/// Whether `login` is `host:port` (and `user`, when the call logs in).
fn login_matches(login: &SshLogin, host: &str, port: u16, user: Option<&str>) -> bool {
    login.host == host && login.port == port && user.is_none_or(|u| u == login.user)
}

fn check_ssh(g: &SshGrant, caller: &Caller<'_>, call: &SshCall<'_>) -> Result<(), OutOfScope> {
    let Caller { origin, scope, .. } = *caller;
    let SshCall { host, port, user, action } = *call;
    let shown = match user {
        Some(u) => format!("{u}@{host}:{port}"),
        None => format!("{host}:{port}"),
    };
    if action == SshAction::HostKey && !scope.operator {
        // Node keys are what every run of every environment trusts: only the
        // operator (cradle.toml, the workflows) may change them. A plugin may
        // pin only the key of a guest its run owns.
        if scope.nodes.iter().any(|n| n.host == host) {
            return Err(format!(
                "host-key trust of `{host}` is operator-only: it is a cluster node (a plugin may pin only the keys \
                 of guests its run owns)"
            )
            .into());
        }
        let guest = scope.vms.iter().find(|vm| vm.ssh.as_ref().is_some_and(|l| login_matches(l, host, port, None)));
        match guest {
            Some(vm) if !vm.owned => {
                return Err(format!(
                    "host-key trust of `{shown}` (guest {}) is denied: this run does not hold the VM's lock, so it \
                     does not own the guest",
                    vm.name
                )
                .into());
            }
            Some(_) if g.hosts.iter().any(|h| h == "guests" || h == "*") => return Ok(()),
            _ => {
                return Err(format!(
                    "host-key trust of `{shown}` is operator-only: it is not a guest of this call in \
                     {origin}.ssh.hosts (a plugin may pin only the keys of guests its run owns)"
                )
                .into());
            }
        }
    }
    if let SshAction::Playbook(_) = action
        && !scope.operator
    {
        // ansible-playbook runs on the control node, where a playbook's
        // `delegate_to: localhost` or lookup plugins run code as cradle.
        return Err(format!(
            "running a playbook against `{shown}` is operator-only: a playbook runs code on the control node, so \
             only the operator's workflows may start one"
        )
        .into());
    }
    let allowed = g.hosts.iter().any(|h| match h.as_str() {
        "*" => true,
        "guests" => scope.vms.iter().any(|vm| vm.ssh.as_ref().is_some_and(|l| login_matches(l, host, port, user))),
        "nodes" => scope.nodes.iter().any(|n| login_matches(n, host, port, user)),
        literal => literal_allows(literal, host, port, user),
    });
    if !allowed {
        // Name what the grant does allow for this address, if anything.
        let same_host: Vec<String> = g
            .hosts
            .iter()
            .flat_map(|h| match h.as_str() {
                "guests" => scope
                    .vms
                    .iter()
                    .filter_map(|vm| {
                        vm.ssh.as_ref().filter(|l| l.host == host).map(|l| format!("guest {} as {l}", vm.name))
                    })
                    .collect::<Vec<_>>(),
                "nodes" => scope.nodes.iter().filter(|n| n.host == host).map(|n| format!("node as {n}")).collect(),
                _ => Vec::new(),
            })
            .collect();
        if !same_host.is_empty() {
            return Err(format!(
                "`{shown}` is not a granted login: {origin}.ssh.hosts allows {host} only as the {} (user and port \
                 come from the inventory for guests and from the cluster's node_ssh for nodes)",
                same_host.join(", ")
            )
            .into());
        }
        return Err(format!(
            "host `{shown}` is not one of this call's guests or nodes, nor listed in {origin}.ssh.hosts"
        )
        .into());
    }
    if let SshAction::Upload(path) = action
        && !plain_absolute(path)
    {
        return Err(format!(
            "upload to `{path}` is outside {origin}.ssh.upload_dirs: only a plain absolute path is allowed \
             (no `.` or `..` segment, no `//`, no trailing `/`)"
        )
        .into());
    }
    if let SshAction::Upload(path) = action
        && !inside_any(path, &g.upload_dirs)
    {
        return Err(format!(
            "upload to `{path}` is outside {origin}.ssh.upload_dirs ({})",
            g.upload_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        )
        .into());
    }
    if let SshAction::Playbook(path) = action
        && !(plain_relative(Path::new(path))
            && g.playbooks.iter().any(|d| Path::new(path).starts_with(d) && Path::new(path) != d))
    {
        return Err(format!(
            "playbook `{path}` is not in {origin}.ssh.playbooks ({}): it must be a project-relative path without `..`",
            g.playbooks.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        )
        .into());
    }
    Ok(())
}

/// Whether `p` is relative, non-empty and has only normal components.
fn plain_relative(p: &Path) -> bool {
    p.components().next().is_some() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// The granted upload directory `path` lies in (the deepest, if several
/// nest), for the on-node check that the directory really resolves there.
pub fn upload_dir_of<'d>(path: &str, dirs: &'d [PathBuf]) -> Option<&'d Path> {
    let p = Path::new(path);
    dirs.iter()
        .filter(|d| p.starts_with(d) && p != d.as_path())
        .max_by_key(|d| d.components().count())
        .map(|d| d.as_path())
}

/// Whether `path` is absolute and every segment a name: no `.` or `..`, no
/// empty segment (`//`, a trailing `/`). Checked on the text, because
/// [`Path::components`] silently drops `.` after the first component, repeated
/// separators and a trailing `/`: `/dir/./x`, `/dir//x` and `/dir/x/.` would
/// otherwise pass as `/dir/x`, while the remote side is handed the text.
fn plain_absolute(path: &str) -> bool {
    path.strip_prefix('/').is_some_and(|rest| rest.split('/').all(|seg| !matches!(seg, "" | "." | "..")))
}

/// Whether `path` (a [`plain_absolute`] one) lies inside one of `dirs`.
fn inside_any(path: &str, dirs: &[PathBuf]) -> bool {
    let p = Path::new(path);
    plain_absolute(path) && dirs.iter().any(|d| p.starts_with(d) && p != d.as_path())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::policy::fixture::{allowed, denied, grants, scope};
    use crate::caps::policy::{RunScope, check};
    use crate::caps::{Call, Grants};

    fn ssh<'a>(user: &'a str, host: &'a str, port: u16) -> Call<'a> {
        Call::Ssh(SshCall { host, port, user: Some(user), action: SshAction::Connect })
    }

    fn upload<'a>(host: &'a str, path: &'a str) -> Call<'a> {
        Call::Ssh(SshCall { host, port: 22, user: Some("root"), action: SshAction::Upload(path) })
    }

    fn host_key(host: &str, port: u16) -> Call<'_> {
        Call::Ssh(SshCall { host, port, user: None, action: SshAction::HostKey })
    }

    #[test]
    fn ssh_to_a_host_outside_the_run_is_denied() {
        assert!(denied(ssh("cradle", "10.9.9.9", 22)).contains("host `cradle@10.9.9.9:22`"));
        allowed(ssh("cradle", "127.0.10.5", 22));
        allowed(ssh("root", "127.0.1.1", 22));
    }

    #[test]
    fn ssh_to_a_guest_as_another_user_is_denied_naming_the_granted_login() {
        let m = denied(ssh("root", "127.0.10.5", 22));
        assert!(m.contains("`root@127.0.10.5:22` is not a granted login"), "{m}");
        assert!(
            m.contains(
                "plugins.direct.grants.ssh.hosts allows 127.0.10.5 only as the guest test-0 as cradle@127.0.10.5:22"
            ),
            "{m}"
        );
    }

    #[test]
    fn ssh_to_a_guest_on_another_port_is_denied() {
        let m = denied(ssh("cradle", "127.0.10.5", 33599));
        assert!(m.contains("`cradle@127.0.10.5:33599` is not a granted login"), "{m}");
        assert!(m.contains("plugins.direct.grants.ssh.hosts"), "{m}");
    }

    #[test]
    fn ssh_to_a_node_as_another_user_or_port_is_denied() {
        assert!(denied(ssh("admin", "127.0.1.1", 22)).contains("only as the node as root@127.0.1.1:22"));
        assert!(denied(ssh("root", "127.0.1.1", 2222)).contains("not a granted login"));
    }

    #[test]
    fn ssh_literal_hosts_scope_user_and_port_when_written() {
        let g: Grants = toml::from_str("[ssh]\nhosts = [\"backup@10.0.0.9:2222\", \"10.0.0.8\", \"[fd00::1]:2200\"]")
            .expect("grants");
        let check = |c: Call<'_>| check(&g, "p", &RunScope::default(), &c);
        check(ssh("backup", "10.0.0.9", 2222)).expect("the written login");
        assert!(check(ssh("root", "10.0.0.9", 2222)).is_err(), "another user");
        assert!(check(ssh("backup", "10.0.0.9", 22)).is_err(), "another port");
        check(ssh("anyone", "10.0.0.8", 22)).expect("no user written: any user, port 22");
        assert!(check(ssh("anyone", "10.0.0.8", 2222)).is_err(), "no port written: 22 only");
        check(ssh("u", "fd00::1", 2200)).expect("bracketed IPv6 with a port");
    }

    #[test]
    fn ssh_upload_outside_the_granted_dirs_is_denied_including_traversal() {
        assert!(denied(upload("127.0.1.1", "/etc/passwd")).contains("outside"));
        assert!(denied(upload("127.0.1.1", "/var/lib/vz/snippets/../../../etc/x")).contains("outside"));
        assert!(denied(upload("127.0.1.1", "/var/lib/vz/snippets")).contains("outside"));
        allowed(upload("127.0.1.1", "/var/lib/vz/snippets/test-0-user.yaml"));
    }

    #[test]
    fn ssh_upload_path_with_a_dot_segment_an_empty_segment_or_a_trailing_slash_is_denied() {
        for path in [
            "/var/lib/vz/snippets/./test-0-user.yaml",
            "/var/lib/vz/./snippets/test-0-user.yaml",
            "/var/lib/vz/snippets//test-0-user.yaml",
            "/var/lib/vz/snippets/test-0-user.yaml/.",
            "/var/lib/vz/snippets/test-0-user.yaml/",
            "/var/lib/vz/snippets/.",
            "//var/lib/vz/snippets/test-0-user.yaml",
        ] {
            let m = denied(upload("127.0.1.1", path));
            assert!(m.contains("only a plain absolute path is allowed"), "{path}: {m}");
        }
    }

    #[test]
    fn a_plugin_pinning_a_node_host_key_is_denied() {
        let m = denied(host_key("127.0.1.1", 22));
        assert!(m.contains("host-key trust of `127.0.1.1` is operator-only: it is a cluster node"), "{m}");
    }

    #[test]
    fn a_plugin_pinning_a_host_key_of_a_host_that_is_not_its_guest_is_denied() {
        let m = denied(host_key("10.9.9.9", 22));
        assert!(m.contains("host-key trust of `10.9.9.9:22` is operator-only"), "{m}");
        let m = denied(host_key("127.0.10.5", 2222));
        assert!(m.contains("`127.0.10.5:2222` is operator-only"), "another port of the guest: {m}");
    }

    #[test]
    fn a_plugin_pinning_the_host_key_of_a_guest_its_run_does_not_own_is_denied() {
        let mut s = scope();
        s.vms[0].owned = false;
        let m = check(&grants(), "plugins.direct.grants", &s, &host_key("127.0.10.5", 22)).expect_err("denied");
        assert!(m.to_string().contains("does not hold the VM's lock"), "{m}");
    }

    #[test]
    fn a_plugin_may_pin_the_host_key_of_a_guest_its_run_owns() {
        allowed(host_key("127.0.10.5", 22));
    }

    fn playbook<'a>(host: &'a str, path: &'a str) -> Call<'a> {
        Call::Ssh(SshCall { host, port: 22, user: Some("cradle"), action: SshAction::Playbook(path) })
    }

    fn as_operator(call: Call<'_>) -> Result<(), String> {
        let s = RunScope { operator: true, ..scope() };
        check(&grants(), "workflow.grants", &s, &call).map_err(|e| e.to_string())
    }

    #[test]
    fn a_plugin_running_a_playbook_is_denied_even_against_its_own_guest() {
        let m = denied(playbook("127.0.10.5", "playbooks/site.yml"));
        assert!(m.contains("operator-only: a playbook runs code on the control node"), "{m}");
    }

    #[test]
    fn the_operator_workflow_may_run_a_granted_playbook_against_a_guest_of_its_run() {
        as_operator(playbook("127.0.10.5", "playbooks/site.yml")).expect("granted");
        as_operator(playbook("127.0.10.5", "playbooks/roles/x/tasks.yml")).expect("nested");
    }

    #[test]
    fn a_playbook_outside_the_granted_directories_is_denied_including_traversal_and_absolute_paths() {
        for path in
            ["other/site.yml", "playbooks/../cradle.toml", "/etc/ansible/site.yml", "playbooks", "./playbooks/x.yml"]
        {
            let m = as_operator(playbook("127.0.10.5", path)).expect_err(path);
            assert!(
                m.contains(&format!("playbook `{path}` is not in workflow.grants.ssh.playbooks (playbooks)")),
                "{m}"
            );
        }
    }

    #[test]
    fn a_playbook_against_a_host_outside_the_run_is_denied() {
        let m = as_operator(playbook("10.9.9.9", "playbooks/site.yml")).expect_err("denied");
        assert!(m.contains("host `cradle@10.9.9.9:22` is not one of this call's guests or nodes"), "{m}");
    }

    #[test]
    fn a_playbook_grant_outside_the_project_is_refused_at_load() {
        for dir in ["/etc/ansible", "../shared", ""] {
            let g: Grants = toml::from_str(&format!("[ssh]\nplaybooks = [{dir:?}]")).expect("parses");
            let e = g.ssh.as_ref().expect("ssh").validate().expect_err(dir);
            assert_eq!(e.key, "ssh.playbooks", "{dir}");
        }
    }

    #[test]
    fn the_operator_workflow_may_pin_node_host_keys() {
        let s = RunScope { operator: true, ..scope() };
        check(&grants(), "workflow.grants", &s, &host_key("127.0.1.1", 22)).expect("operator");
        assert!(check(&grants(), "workflow.grants", &s, &host_key("10.9.9.9", 22)).is_err(), "still inside the grant");
    }
}
