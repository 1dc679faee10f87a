//! user-data (`#cloud-config`), rendered by [`render_user_data`] as the parent
//! module's contract says: identity (hostname, fqdn, timezone), the management
//! user, the host key generated on the control node, packages, and (through
//! [`super::render_all`]) the `/etc/resolv.conf` `write_files` entry.
//!
//! Failures name the VM and the field: a bad hostname, fqdn, user name (`root`
//! included), shell, group, package, timezone or public host key, or a user
//! without valid authorized keys, is [`CloudInitError::Invalid`] with the value;
//! a bad private host key is [`CloudInitError::InvalidSecret`], which never
//! shows it.

use serde::Serialize;

use super::{CloudInitError, Snippet, check_dns_name, check_text, invalid, snippet_names, to_document};
use crate::secrets::Secret;

/// What the management user may do with sudo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SudoPolicy {
    /// `ALL=(ALL) NOPASSWD:ALL` (the password is locked, so this is the usable form).
    #[default]
    NoPassword,
    /// No sudo rule is written.
    None,
}

/// The account cradle (and the operator) log in with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagementUser {
    /// Login name (`ansible_user`), e.g. `ops`.
    pub name: String,
    /// One OpenSSH public key per entry; at least one is required.
    pub ssh_authorized_keys: Vec<String>,
    pub sudo: SudoPolicy,
    /// Login shell; [`ManagementUser::new`] sets `/bin/bash`.
    pub shell: String,
    /// Supplementary groups (must exist in the image).
    pub groups: Vec<String>,
}

impl ManagementUser {
    /// A user with passwordless sudo, `/bin/bash` and no extra groups.
    pub fn new(name: impl Into<String>, ssh_authorized_keys: Vec<String>) -> ManagementUser {
        ManagementUser {
            name: name.into(),
            ssh_authorized_keys,
            sudo: SudoPolicy::NoPassword,
            shell: "/bin/bash".to_string(),
            groups: Vec::new(),
        }
    }
}

/// The guest's SSH host key, generated on the control node and pinned in known_hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKey {
    /// The OpenSSH private key file (`-----BEGIN OPENSSH PRIVATE KEY-----` ...).
    pub ed25519_private: Secret,
    /// `ssh-ed25519 AAAA... [comment]`.
    pub ed25519_public: String,
}

/// Inputs of one VM's user-data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserData {
    /// Canonical VM name (`vms_name`): names the snippet file and every error.
    pub vm_name: String,
    /// Short hostname (one DNS label).
    pub hostname: String,
    /// Fully qualified name; must start with `<hostname>.`.
    pub fqdn: Option<String>,
    pub user: ManagementUser,
    /// Keep the image's `default` user (first entry of `users:`); off by default.
    pub keep_default_user: bool,
    pub packages: Vec<String>,
    pub package_update: bool,
    /// IANA zone, e.g. `Europe/Berlin`.
    pub timezone: Option<String>,
    pub host_key: Option<HostKey>,
}

const SUDO_NOPASSWD: &str = "ALL=(ALL) NOPASSWD:ALL";

#[derive(Serialize)]
#[serde(untagged)]
enum UserEntry<'a> {
    Default(&'static str),
    Managed(Box<ManagedUser<'a>>),
}

#[derive(Serialize)]
struct ManagedUser<'a> {
    name: &'a str,
    ssh_authorized_keys: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    sudo: Option<&'static str>,
    shell: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    groups: &'a [String],
    lock_passwd: bool,
}

#[derive(Serialize)]
struct SshKeys<'a> {
    ed25519_private: &'a str,
    ed25519_public: &'a str,
}

#[derive(Serialize)]
struct CloudConfig<'a> {
    hostname: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    fqdn: Option<&'a str>,
    manage_etc_hosts: bool,
    users: Vec<UserEntry<'a>>,
    disable_root: bool,
    ssh_pwauth: bool,
    ssh_deletekeys: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    ssh_keys: Option<SshKeys<'a>>,
    package_update: bool,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    packages: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    timezone: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    write_files: Vec<WriteFile<'a>>,
}

/// One `write_files` entry (plain text content).
#[derive(Serialize)]
struct WriteFile<'a> {
    path: &'static str,
    content: &'a str,
    owner: &'static str,
    permissions: &'static str,
}

/// Renders `<vm>-user.yaml`. See the module docs for the keys written.
pub fn render_user_data(d: &UserData) -> Result<Snippet, CloudInitError> {
    render_user_data_with(d, None)
}

/// [`render_user_data`] plus a `write_files` entry for `/etc/resolv.conf` with
/// `resolv_conf` (from [`super::network_data::resolv_conf`]; see there for why).
pub(crate) fn render_user_data_with(d: &UserData, resolv_conf: Option<&str>) -> Result<Snippet, CloudInitError> {
    let names = snippet_names(&d.vm_name)?;
    let vm = d.vm_name.as_str();
    check_dns_name(vm, "hostname", &d.hostname, true)?;
    if let Some(fqdn) = &d.fqdn {
        check_dns_name(vm, "fqdn", fqdn, false)?;
        if !fqdn.strip_prefix(d.hostname.as_str()).is_some_and(|rest| rest.starts_with('.')) {
            let problem = format!("must be `{}.<domain>` (start with the hostname)", d.hostname);
            return Err(invalid(vm, "fqdn", fqdn, problem));
        }
    }
    check_user(vm, &d.user)?;
    for p in &d.packages {
        check_text(vm, "package", p, false)?;
        if p.chars().any(char::is_whitespace) || p.starts_with('-') {
            return Err(invalid(vm, "package", p, "must be one package name (optionally `name=version`)"));
        }
    }
    if let Some(tz) = &d.timezone {
        let ok = !tz.is_empty()
            && !tz.starts_with('/')
            && !tz.contains("..")
            && tz.chars().all(|c| c.is_ascii_alphanumeric() || "/_+-".contains(c));
        if !ok {
            return Err(invalid(vm, "timezone", tz, "must be an IANA zone name such as `Europe/Berlin` or `UTC`"));
        }
    }
    let private_key = match &d.host_key {
        Some(k) => Some(check_host_key(vm, k)?),
        None => None,
    };
    let mut users = Vec::new();
    if d.keep_default_user {
        users.push(UserEntry::Default("default"));
    }
    users.push(UserEntry::Managed(Box::new(ManagedUser {
        name: &d.user.name,
        ssh_authorized_keys: &d.user.ssh_authorized_keys,
        sudo: match d.user.sudo {
            SudoPolicy::NoPassword => Some(SUDO_NOPASSWD),
            SudoPolicy::None => None,
        },
        shell: &d.user.shell,
        groups: &d.user.groups,
        lock_passwd: true,
    })));
    let doc = CloudConfig {
        hostname: &d.hostname,
        fqdn: d.fqdn.as_deref(),
        manage_etc_hosts: true,
        users,
        disable_root: true,
        ssh_pwauth: false,
        ssh_deletekeys: true,
        ssh_keys: match (&d.host_key, &private_key) {
            (Some(k), Some(private)) => {
                Some(SshKeys { ed25519_private: private, ed25519_public: k.ed25519_public.trim() })
            }
            _ => None,
        },
        package_update: d.package_update,
        packages: &d.packages,
        timezone: d.timezone.as_deref(),
        write_files: resolv_conf
            .map(|content| WriteFile { path: "/etc/resolv.conf", content, owner: "root:root", permissions: "0644" })
            .into_iter()
            .collect(),
    };
    Ok(Snippet::new(names.user, to_document(vm, "user-data", Some("#cloud-config"), &doc)?))
}

fn check_user(vm: &str, u: &ManagementUser) -> Result<(), CloudInitError> {
    let name_ok = u.name.len() <= 32
        && u.name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && u.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !name_ok {
        let problem = "must be a Linux user name (lower-case letter or `_` first, then letters, digits, `_`, `-`; \
                       at most 32); fix ansible_user in the inventory";
        return Err(invalid(vm, "management user name", &u.name, problem));
    }
    if u.name == "root" {
        return Err(invalid(vm, "management user name", &u.name, "root login is disabled; use an unprivileged user"));
    }
    if u.ssh_authorized_keys.is_empty() {
        let problem = "has no SSH authorized keys; the password is locked, so nobody (cradle included) \
                       could log in: add the operator's public key";
        return Err(invalid(vm, "management user", &u.name, problem));
    }
    for key in &u.ssh_authorized_keys {
        check_text(vm, "ssh_authorized_keys entry", key, false)?;
        check_public_key(vm, "ssh_authorized_keys entry", key)?;
    }
    let shell_ok = u.shell.starts_with('/') && !u.shell.chars().any(|c| c.is_whitespace() || super::bad_char(c));
    if !shell_ok {
        return Err(invalid(vm, "management user shell", &u.shell, "must be an absolute path such as /bin/bash"));
    }
    for g in &u.groups {
        let ok = !g.is_empty() && g.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            return Err(invalid(vm, "management user group", g, "must be a group name (letters, digits, `_`, `-`)"));
        }
    }
    Ok(())
}

/// `<type> <base64> [comment]` on one line.
fn check_public_key(vm: &str, field: &str, key: &str) -> Result<(), CloudInitError> {
    let mut parts = key.split_whitespace();
    let key_type = parts.next().unwrap_or_default();
    let blob = parts.next().unwrap_or_default();
    let type_ok = key_type.starts_with("ssh-") || key_type.starts_with("ecdsa-") || key_type.starts_with("sk-");
    let blob_ok = !blob.is_empty() && blob.chars().all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c));
    if !type_ok || !blob_ok {
        return Err(invalid(vm, field, key, "must be an OpenSSH public key line (`ssh-ed25519 AAAA... comment`)"));
    }
    Ok(())
}

/// Validates the host key pair; returns the private key with a trailing newline
/// (OpenSSH refuses a key file without one).
fn check_host_key(vm: &str, k: &HostKey) -> Result<String, CloudInitError> {
    check_text(vm, "host key ed25519_public", &k.ed25519_public, false)?;
    check_public_key(vm, "host key ed25519_public", k.ed25519_public.trim())?;
    if !k.ed25519_public.trim_start().starts_with("ssh-ed25519 ") {
        return Err(invalid(vm, "host key ed25519_public", &k.ed25519_public, "must be an `ssh-ed25519 ...` key"));
    }
    let private = k.ed25519_private.expose().trim();
    let secret_err = |problem: &str| CloudInitError::InvalidSecret {
        vm: vm.to_string(),
        field: "host key ed25519_private".to_string(),
        problem: problem.to_string(),
    };
    if private.chars().any(|c| c != '\n' && super::bad_char(c)) {
        return Err(secret_err("contains control characters other than newlines (CRLF line endings?)"));
    }
    let framed = private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        && private.ends_with("\n-----END OPENSSH PRIVATE KEY-----");
    if !framed {
        return Err(secret_err("must be an OpenSSH private key file as written by `ssh-keygen -t ed25519`"));
    }
    Ok(format!("{private}\n"))
}
