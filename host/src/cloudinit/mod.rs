//! The NoCloud snippets cradle uploads for a VM: user-data, network-data, meta-data.
//!
//! Proxmox reads them through `cicustom` (`user=<storage>:snippets/<vm>-user.yaml,...`)
//! from the snippet directory of the node a VM starts on and builds the NoCloud ISO
//! from them. This module only renders and names them; uploading is the ssh
//! capability's job.
//!
//! Contract:
//! - [`render_user_data`] → `#cloud-config` with `hostname`, `fqdn`,
//!   `manage_etc_hosts: true`, one management user (keys, `sudo`, `shell`,
//!   `lock_passwd: true`; cloud-init's `default` user only when asked),
//!   `disable_root: true`, `ssh_pwauth: false`, `ssh_deletekeys: true` (a template's
//!   baked host keys are shared by every clone), `package_update`, `packages`,
//!   `timezone`, and `ssh_keys: {ed25519_private, ed25519_public}` when the control
//!   node generated the guest's host key (Trust: pin it before the first connection).
//!   [`render_all`] adds `write_files: [/etc/resolv.conf]` with the NICs'
//!   nameservers and search domains ([`resolv_conf`] says why the network-data
//!   alone does not make them take effect on a minimal image).
//!   With `ssh_keys` present cloud-init generates no other host keys (`cc_ssh` only
//!   generates in the no-`ssh_keys` branch), so `ssh_genkeytypes` is not written:
//!   `ssh_genkeytypes: []` is rejected by cloud-init 22.4's schema (`minItems: 1`).
//! - [`render_network_data`] → network config version 2 with `version: 2` at the top
//!   level (no `network:` wrapper), the form the NoCloud docs show for a
//!   `network-config` file and the one every cloud-init release reads. Static
//!   addresses keep the inventory's prefix; the default route is `gateway4` /
//!   `gateway6`. Not `routes: [{to: 0.0.0.0/0, via: <gw>}]`: cloud-init's ifupdown
//!   (ENI) renderer, 22.4 through 24.x, turns every route into `post-up route add
//!   ... || true`, and `route` (net-tools) is not in minimal images, so the guest
//!   boots with no default route while cloud-init reports `done`. `gateway4/6`
//!   become the subnet's gateway: ENI writes a `gateway` line (ifupdown applies it
//!   with `ip`), and netplan (a passthrough of v2) installs it too (netplan calls
//!   the key deprecated and warns, but honours it; a `gateway4` plus a default
//!   route would be a conflicting-default-route error, so only one form is
//!   written). Not `to: default` either: 22.4 fails to parse it. No address = DHCPv4.
//!   What the guest really configured is checked after boot ([`verify`]).
//!   An interface with a MAC is matched by it (`match: {macaddress}` + `set-name`).
//! - VLANs: Proxmox tags the NIC on the bridge (`net0: virtio=..,bridge=vmbr0,tag=20`),
//!   so the guest sees an untagged interface and needs no VLAN config at all: leave
//!   `vlan_in_guest` unset. Set it only for a trunk NIC where the guest itself tags:
//!   the ethernet is then brought up bare and a `vlans: {<if>.<id>: {id, link}}`
//!   entry carries the address, routes and DNS. Checked with cloud-init 22.4's ENI
//!   (Debian) renderer; its networkd renderer drops VLANs, so a guest rendering to
//!   systemd-networkd with 22.4 gets no VLAN interface.
//! - [`render_meta_data`] → `instance-id` + `local-hostname`; [`instance_id`] is the
//!   SHA-1 hex of user-data followed by network-data, as PVE computes it when it
//!   writes meta-data itself, so the id changes exactly when the inputs change.
//! - [`snippet_names`] and [`cicustom`]: the canonical VM name is the only identity
//!   in the file names (invariant 6); it must be a DNS name, so it can never break
//!   out of the snippet directory or the `cicustom` property string.
//!
//! Encoding: the documents are written in JSON syntax, which is YAML. cloud-init
//! reads them with PyYAML, a YAML 1.1 loader, under which plain `no`, `on`,
//! `2024-01-01` or `0755` stop being strings; serde_yaml_ng quotes only by YAML 1.2
//! rules and would emit `hostname: no`. JSON double-quotes every string, so no
//! inventory value can change type or break the document. Characters PyYAML
//! refuses or folds (control characters, U+2028/U+2029, U+FEFF) are rejected.
//!
//! Failure modes: every input is validated before anything is rendered; an error
//! names the VM, the field, the offending value (never a secret's) and what to fix.
//! Nothing panics. The rendered user-data carries the guest's private host key:
//! [`SnippetContent`] Debug-prints as `[redacted: N bytes]`, and the caller must
//! write the files 0600 (invariant 7) and delete them from the node after
//! finalization.
//!
//! Tests: `cloudinit::tests` checks structure and validation; `cloudinit::schema_tests`
//! runs the real `cloud-init schema --config-file` on user-data, and PyYAML on both
//! documents. cloud-init 22.4 (Debian 12) has no network-config schema
//! (`--schema-type` arrived later; the test runs it when `cloud-init schema --help`
//! offers it), so network-data goes through cloud-init's own parser instead:
//! `cloud-init devel net-convert --kind yaml --output-kind eni` must succeed and
//! produce the expected addresses, routes, DNS, MAC rule and VLAN (the netplan
//! output is also produced, but it is a passthrough of v2 and proves little). They
//! need the Debian package `cloud-init` and fail without it unless
//! `CRADLE_SKIP_CLOUDINIT_SCHEMA=1` is set.

use std::fmt;

use serde::Serialize;
use sha1::Digest as _;

mod network_data;
pub mod status;
mod user_data;
pub mod verify;

#[cfg(test)]
mod schema_tests;
#[cfg(test)]
mod tests;

pub use network_data::{
    Cidr, CidrParseError, DEFAULT_INTERFACE, Interface, MAX_NAMESERVERS, NetworkData, render_network_data, resolv_conf,
};
pub use user_data::{HostKey, ManagementUser, SudoPolicy, UserData, render_user_data};

/// Why a snippet could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum CloudInitError {
    /// An input value is unusable; `problem` says what is expected.
    #[error("VM {vm}: {field} {value:?} is invalid: {problem}")]
    Invalid { vm: String, field: String, value: String, problem: String },
    /// A secret input is unusable; its value is never shown.
    #[error("VM {vm}: {field} is invalid: {problem} (value not shown: it is secret)")]
    InvalidSecret { vm: String, field: String, problem: String },
    /// The gateway does not lie in the interface's subnet.
    #[error(
        "VM {vm}: gateway {gateway} of interface {interface} is outside its subnet {address}; \
         fix the gateway or the address prefix in the inventory"
    )]
    GatewayOutsideSubnet { vm: String, interface: String, gateway: std::net::IpAddr, address: Cidr },
    /// Serializing the document failed (a bug, not an input problem).
    #[error("VM {vm}: could not serialize {document}: {source}")]
    Serialize { vm: String, document: &'static str, source: serde_json::Error },
}

pub(crate) fn invalid(vm: &str, field: impl Into<String>, value: &str, problem: impl Into<String>) -> CloudInitError {
    CloudInitError::Invalid {
        vm: vm.to_string(),
        field: field.into(),
        value: value.to_string(),
        problem: problem.into(),
    }
}

/// Rendered file content. Debug prints `[redacted: N bytes]`: user-data carries a
/// private host key. Read it with [`SnippetContent::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct SnippetContent(String);

impl SnippetContent {
    /// The full text; pass it only to the upload.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The full text as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for SnippetContent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[redacted: {} bytes]", self.0.len())
    }
}

/// One rendered snippet: its file name in `<storage>/snippets/`, its content and
/// the SHA-256 hex of the content (to verify an upload without printing it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    pub file_name: String,
    pub content: SnippetContent,
    pub sha256: String,
}

impl Snippet {
    fn new(file_name: String, content: String) -> Snippet {
        let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(content.as_bytes()));
        Snippet { file_name, content: SnippetContent(content), sha256 }
    }
}

/// The snippet file names of one VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnippetNames {
    pub vm: String,
    pub user: String,
    pub network: String,
    pub meta: String,
}

/// `<vm>-user.yaml`, `<vm>-network.yaml`, `<vm>-meta.yaml`; `vm_name` must be a DNS name.
pub fn snippet_names(vm_name: &str) -> Result<SnippetNames, CloudInitError> {
    check_dns_name(vm_name, "VM name (vms_name)", vm_name, false)?;
    Ok(SnippetNames {
        vm: vm_name.to_string(),
        user: format!("{vm_name}-user.yaml"),
        network: format!("{vm_name}-network.yaml"),
        meta: format!("{vm_name}-meta.yaml"),
    })
}

/// The `cicustom` value: `user=<storage>:snippets/<vm>-user.yaml,network=...,meta=...`.
/// `storage` must be a Proxmox storage ID (`[a-z][a-z0-9._-]*[a-z0-9]`).
pub fn cicustom(storage: &str, names: &SnippetNames) -> Result<String, CloudInitError> {
    let ok = storage.len() >= 2
        && storage.starts_with(|c: char| c.is_ascii_lowercase())
        && storage.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && storage.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if !ok {
        let problem = "must be a Proxmox storage ID such as `local` (lower-case letters, digits, `.`, `_`, `-`); \
                       fix the snippet storage in cradle.toml";
        return Err(invalid(&names.vm, "snippet storage", storage, problem));
    }
    Ok(format!(
        "user={storage}:snippets/{},network={storage}:snippets/{},meta={storage}:snippets/{}",
        names.user, names.network, names.meta
    ))
}

/// The NoCloud instance id PVE derives: SHA-1 hex of user-data then network-data.
pub fn instance_id(user: &Snippet, network: &Snippet) -> String {
    let mut h = sha1::Sha1::new();
    h.update(user.content.as_bytes());
    h.update(network.content.as_bytes());
    hex::encode(h.finalize())
}

#[derive(Serialize)]
struct MetaData<'a> {
    #[serde(rename = "instance-id")]
    instance_id: &'a str,
    #[serde(rename = "local-hostname")]
    local_hostname: &'a str,
}

/// `<vm>-meta.yaml` with `instance-id` and `local-hostname` (a single DNS label).
pub fn render_meta_data(vm_name: &str, instance_id: &str, local_hostname: &str) -> Result<Snippet, CloudInitError> {
    let names = snippet_names(vm_name)?;
    check_text(vm_name, "instance-id", instance_id, false)?;
    check_dns_name(vm_name, "local-hostname", local_hostname, true)?;
    let doc = MetaData { instance_id, local_hostname };
    Ok(Snippet::new(names.meta, to_document(vm_name, "meta-data", None, &doc)?))
}

/// The three snippets of one VM, meta-data carrying [`instance_id`] of the other two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippets {
    pub user: Snippet,
    pub network: Snippet,
    pub meta: Snippet,
}

/// Renders user-data, network-data and meta-data for one VM (both inputs must name it).
pub fn render_all(user: &UserData, network: &NetworkData) -> Result<Snippets, CloudInitError> {
    if user.vm_name != network.vm_name {
        let problem = format!("user-data is for VM {:?}; render both for the same VM", user.vm_name);
        return Err(invalid(&network.vm_name, "network-data VM name", &network.vm_name, problem));
    }
    let n = render_network_data(network)?;
    let resolv = network_data::resolv_conf(network)?;
    let u = user_data::render_user_data_with(user, resolv.as_deref())?;
    let meta = render_meta_data(&user.vm_name, &instance_id(&u, &n), &user.hostname)?;
    Ok(Snippets { user: u, network: n, meta })
}

/// `header` (e.g. `#cloud-config`) + pretty JSON + newline. See the module docs for why JSON.
pub(crate) fn to_document<T: Serialize>(
    vm: &str,
    document: &'static str,
    header: Option<&str>,
    value: &T,
) -> Result<String, CloudInitError> {
    let body = serde_json::to_string_pretty(value).map_err(|source| CloudInitError::Serialize {
        vm: vm.to_string(),
        document,
        source,
    })?;
    Ok(match header {
        Some(h) => format!("{h}\n{body}\n"),
        None => format!("{body}\n"),
    })
}

/// Non-empty, and free of characters PyYAML refuses or folds (see module docs).
/// `multiline` allows `\n` (private keys only).
pub(crate) fn check_text(vm: &str, field: &str, value: &str, multiline: bool) -> Result<(), CloudInitError> {
    if value.trim().is_empty() {
        return Err(invalid(vm, field, value, "must not be empty"));
    }
    if let Some(c) = value.chars().find(|&c| !(multiline && c == '\n') && bad_char(c)) {
        let problem = format!("contains the character {:?}, which cannot appear in this value", c);
        return Err(invalid(vm, field, value, problem));
    }
    Ok(())
}

pub(crate) fn bad_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}')
}

/// A DNS name (RFC 1123 labels of 1..=63 letters, digits, `-`; ≤ 253 characters);
/// `single_label` requires exactly one label (a hostname).
pub(crate) fn check_dns_name(vm: &str, field: &str, value: &str, single_label: bool) -> Result<(), CloudInitError> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    let ok = !value.is_empty() && value.len() <= 253 && value.split('.').all(label_ok);
    if !ok {
        let problem = "must be a DNS name: labels of letters, digits and `-` separated by `.`, \
                       each 1-63 characters; fix it in the inventory";
        return Err(invalid(vm, field, value, problem));
    }
    if single_label && value.contains('.') {
        return Err(invalid(vm, field, value, "must be a single label (no `.`); put the domain in the FQDN"));
    }
    Ok(())
}
