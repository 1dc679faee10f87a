//! The built-in backend plugins' catalogue: each one's name, summary and
//! default `[plugins.NAME]` table, without the components themselves (those
//! are `super::PLUGINS`, embedded at build time).
//!
//! Contract: plain data, no wasm and no I/O, so the `cradle.toml` loader
//! (`crate::config`), which adds the built-ins environments name and refuses
//! names that are neither configured nor built in, depends on nothing but this
//! file (the fuzz crate compiles it as it is). [`PluginKind`] lives here for
//! the same reason: the loader reads `[plugins.NAME] kind` with it. [`CATALOGUE`] and
//! `super::PLUGINS` list the same plugins in the same order (unit-tested).

/// What cradle knows of one built-in backend plugin besides its component.
#[derive(Debug)]
pub struct BuiltinDefaults {
    /// Its name in cradle.toml (`backend = "direct"`).
    pub name: &'static str,
    /// A backend or an integration plugin; an unconfigured built-in is this
    /// kind, and a `[plugins.NAME]` table for it may not say otherwise.
    pub kind: PluginKind,
    /// What it is for (shown by `cradle init` and the docs).
    pub summary: &'static str,
    /// Its default `[plugins.NAME]` body: grants and limits, no `path`.
    /// Never destructive: on a real cluster the operator opts in.
    pub config: &'static str,
    /// Whether the default grants include `proxmox.destructive = true` when
    /// every environment naming the plugin runs on the built-in simulated
    /// cluster (`kind = "sim"`), where nothing real can be destroyed.
    pub destructive_on_sim: bool,
}

/// `[plugins.NAME] kind`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    /// A backend: exports `cradle:host/lifecycle`, named by an environment's `backend`.
    #[default]
    Backend,
    /// An integration plugin: exports other `cradle:host/*` interfaces, named
    /// by an environment's `plugins = { ROLE = "NAME" }` (or by its role).
    Integration,
}

impl PluginKind {
    /// How cradle.toml spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Backend => "backend",
            PluginKind::Integration => "integration",
        }
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The built-in `direct` plugin.
pub static DIRECT: BuiltinDefaults = BuiltinDefaults {
    name: "direct",
    kind: PluginKind::Backend,
    summary: "clones, configures, reconciles and removes VMs through the Proxmox API",
    config: r#"[grants.proxmox]
nodes = ["*"]
vmids = "100-999999"
storages = ["local-lvm", "local"]
templates = ["debian-12-cloud"]
"#,
    destructive_on_sim: true,
};

/// The built-in `sample` plugin.
pub static SAMPLE: BuiltinDefaults = BuiltinDefaults {
    name: "sample",
    kind: PluginKind::Backend,
    summary: "plans only (no capability but log); a starting point for new backends",
    config: r#"memory_limit_mib = 32   # default 64
timeout_ms = 5000       # longest run of plugin code without a host call; default 10000
"#,
    destructive_on_sim: false,
};

/// The built-in `terraform` plugin.
pub static TERRAFORM: BuiltinDefaults = BuiltinDefaults {
    name: "terraform",
    kind: PluginKind::Backend,
    summary: "creates and destroys VMs through Terraform saved plans it approves (docs/TERRAFORM.md)",
    config: r#"[grants.proxmox]
nodes = ["*"]
vmids = "100-999999"
storages = ["local-lvm", "local"]
templates = ["debian-12-cloud"]

[grants.terraform]
module_root = "terraform"   # relative to cradle.toml: one module (and state) per host
"#,
    destructive_on_sim: true,
};

/// The built-in `netbox` integration plugin (plugins/netbox, wit/pipeline.wit):
/// the NetBox pipeline's steps. Its grants name the NetBox endpoint and the
/// statuses it sets, the DHCP networks and DNS zones it writes, and the
/// Proxmox scope of its HA calls (the VMIDs and nodes of the rules); the
/// networks and zones are the operator's, so none is granted by default.
pub static NETBOX: BuiltinDefaults = BuiltinDefaults {
    name: "netbox",
    kind: PluginKind::Integration,
    summary: "the NetBox pipeline's steps: admit a Staged VM, write its MAC, DHCP reservation, HA rule, DNS, Active or Failed (docs/NETBOX.md)",
    config: r#"[grants.netbox]
endpoint = "netbox"
statuses = ["active", "failed"]
[grants.dhcp]
networks = []       # the subnets it may reserve in, e.g. ["10.0.10.0/24"]
[grants.dns]
zones = []          # the zones it may write, e.g. ["lab.example"]
[grants.proxmox]
nodes = ["*"]
vmids = "100-999999"
"#,
    destructive_on_sim: false,
};

/// Every built-in plugin, in `super::PLUGINS` order.
pub static CATALOGUE: &[&BuiltinDefaults] = &[&DIRECT, &SAMPLE, &TERRAFORM, &NETBOX];

/// The built-in plugin `name`'s catalogue entry.
pub fn defaults(name: &str) -> Option<&'static BuiltinDefaults> {
    CATALOGUE.iter().copied().find(|p| p.name == name)
}

/// The built-in plugins' names, for messages.
pub fn names() -> String {
    CATALOGUE.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// The names of the built-in plugins of `kind`, for a message about a field
/// that takes only that kind (a backend error lists no integration plugin).
pub fn names_of(kind: PluginKind) -> String {
    CATALOGUE.iter().filter(|p| p.kind == kind).map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// The built-in plugins' names with their kinds (`direct (backend), …`), for
/// a message about a field that takes either.
pub fn names_with_kinds() -> String {
    CATALOGUE.iter().map(|p| format!("{} ({})", p.name, p.kind)).collect::<Vec<_>>().join(", ")
}
