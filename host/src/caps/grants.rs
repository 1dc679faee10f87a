//! What the operator grants a plugin (or the workflows), as written in
//! `cradle.toml` under `[plugins.NAME.grants]` / `[workflow.grants]`.
//!
//! A missing section means the capability is not granted at all: a plugin that
//! imports it is refused before instantiation. Inside a section, an empty list
//! denies everything and `"*"` allows everything, so widening a grant is always
//! an explicit edit. Values are parsed once here; [`super::policy`] only compares.

use std::path::PathBuf;

use serde::Deserialize;

use super::Capability;

/// All grants of one plugin or of the workflows.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// The Proxmox API.
    #[serde(default)]
    pub proxmox: Option<ProxmoxGrant>,
    /// SSH.
    #[serde(default)]
    pub ssh: Option<SshGrant>,
    /// DNS.
    #[serde(default)]
    pub dns: Option<DnsGrant>,
    /// Workflow locks.
    #[serde(default)]
    pub lock: Option<LockGrant>,
    /// Finalization checkpoints of the run's VMs.
    #[serde(default)]
    pub checkpoint: Option<CheckpointGrant>,
    /// Terraform.
    #[serde(default)]
    pub terraform: Option<TerraformGrant>,
    /// Outbound HTTP.
    #[serde(default)]
    pub http: Option<HttpGrant>,
    /// `true` for a built-in plugin's default grants (no `[plugins.NAME]` in
    /// cradle.toml), so a denial can say that a section must be written.
    #[serde(skip)]
    pub builtin_defaults: bool,
}

/// `[...grants.proxmox]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxmoxGrant {
    /// Nodes calls may name (`["*"]` for any).
    #[serde(default)]
    pub nodes: Vec<String>,
    /// The VMIDs calls may touch, `"100-199"`.
    pub vmids: VmidRange,
    /// Storages calls may name (`["*"]` for any).
    #[serde(default)]
    pub storages: Vec<String>,
    /// Templates that may be cloned, by name or VMID (`["*"]` for any).
    #[serde(default)]
    pub templates: Vec<TemplateRef>,
    /// Whether destroy, hard stop/reset, HA removal and deleting a disk
    /// through `set-config` are allowed.
    #[serde(default)]
    pub destructive: bool,
    /// Config keys that run code on the node or hand the guest a host
    /// resource (`hookscript`, `args`, `hostpci`, `usb`, `serial`, `parallel`,
    /// `virtiofs`, `ivshmem`; a name covers its numbered keys): `set-config`
    /// may set them only when listed here. Empty by default.
    #[serde(default)]
    pub node_keys: Vec<String>,
}

/// An inclusive VMID range, written `"100-199"` or `"150"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmidRange {
    /// First VMID.
    pub first: u32,
    /// Last VMID (inclusive).
    pub last: u32,
}

impl VmidRange {
    /// Whether `vmid` is inside the range.
    pub fn contains(&self, vmid: u32) -> bool {
        (self.first..=self.last).contains(&vmid)
    }

    /// Parse `"100-199"` or `"150"`.
    pub fn parse(s: &str) -> Result<VmidRange, String> {
        let num = |t: &str| {
            t.trim().parse::<u32>().map_err(|_| format!("vmids = \"{s}\": `{t}` is not a VMID; write \"100-199\""))
        };
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let v = num(s)?;
                (v, v)
            }
        };
        if first < 100 || last > 999_999_999 {
            return Err(format!("vmids = \"{s}\": Proxmox VMIDs are 100..999999999"));
        }
        if first > last {
            return Err(format!("vmids = \"{s}\": the first VMID is above the last"));
        }
        Ok(VmidRange { first, last })
    }
}

impl std::fmt::Display for VmidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl<'de> Deserialize<'de> for VmidRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        VmidRange::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A template, by VMID or by name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TemplateRef {
    /// By VMID.
    Vmid(u32),
    /// By name (or `"*"`).
    Name(String),
}

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
}

/// `[...grants.dns]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsGrant {
    /// Zones records may be changed in (`lab.example.`); names must be inside one.
    #[serde(default)]
    pub zones: Vec<String>,
}

/// `[...grants.lock]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockGrant {
    /// Key prefixes that may be locked (`["*"]` for any key).
    #[serde(default)]
    pub prefixes: Vec<String>,
}

/// `[...grants.checkpoint]`: checkpoints of the VMs the call is bound to.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointGrant {}

/// `[...grants.terraform]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerraformGrant {
    /// The directory holding the module directories the plugin may use.
    pub module_root: PathBuf,
}

/// `[...grants.http]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpGrant {
    /// Endpoint aliases from `[endpoints]`.
    #[serde(default)]
    pub endpoints: Vec<String>,
}

impl Grants {
    /// Whether the capability is granted at all (`log` always is).
    pub fn allows(&self, cap: Capability) -> bool {
        match cap {
            Capability::Log => true,
            Capability::Proxmox => self.proxmox.is_some(),
            Capability::Ssh => self.ssh.is_some(),
            Capability::Dns => self.dns.is_some(),
            Capability::Lock => self.lock.is_some(),
            Capability::Checkpoint => self.checkpoint.is_some(),
            Capability::Terraform => self.terraform.is_some(),
            Capability::Http => self.http.is_some(),
        }
    }

    /// The granted capabilities, for `cradle plugins inspect`.
    pub fn granted(&self) -> Vec<Capability> {
        Capability::ALL.into_iter().filter(|c| self.allows(*c)).collect()
    }

    /// Check values that serde cannot (absolute paths, zone spelling).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(pve) = &self.proxmox {
            for key in &pve.node_keys {
                if !crate::caps::proxmox::config_scope::NODE_KEYS.contains(&key.as_str()) {
                    return Err(format!(
                        "proxmox.node_keys: `{key}` is not a node key (known: {})",
                        crate::caps::proxmox::config_scope::NODE_KEYS.join(", ")
                    ));
                }
            }
        }
        if let Some(ssh) = &self.ssh {
            for dir in &ssh.upload_dirs {
                if !dir.is_absolute() {
                    return Err(format!("ssh.upload_dirs: `{}` must be an absolute remote path", dir.display()));
                }
            }
        }
        if let Some(dns) = &self.dns {
            for zone in &dns.zones {
                if zone.is_empty() || zone.contains(char::is_whitespace) {
                    return Err(format!("dns.zones: `{zone}` is not a zone name"));
                }
            }
        }
        Ok(())
    }
}

/// Whether `list` allows `value`: `"*"` allows anything, an empty list nothing.
pub fn list_allows(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}
