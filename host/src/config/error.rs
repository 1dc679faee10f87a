//! Why a `cradle.toml` cannot be used: [`ConfigError`] (unreadable, malformed,
//! or values that do not fit together), the [`ConfigProblem`] of the last case
//! naming the key to change, [`ClusterProblem`] for one `[clusters.NAME]`, and
//! [`EnvironmentError`] for an environment a command asks for.

use std::path::PathBuf;

use crate::caps::dns::DnsConfigError;
use crate::caps::policy::GrantError;
use crate::caps::ssh::NodeSshError;
use crate::caps::terraform::TerraformConfigError;
use crate::plugin::limits::LimitsError;

/// Why `cradle.toml` could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source} (create it, or pass --config PATH)")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML is malformed or a field has the wrong type or name.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// toml's message, which names the line, column and field.
        message: String,
    },
    /// The values are individually fine but do not fit together.
    #[error("{path}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to change (boxed: it is large, and rare).
        problem: Box<ConfigProblem>,
    },
}

/// Values of a parsed `cradle.toml` that do not fit together; each names the
/// key to change. `known` lists what is defined (`none` when nothing is).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigProblem {
    /// `default_environment` names no environment.
    #[error("default_environment = \"{env}\" is not defined in [environments] (known: {known})")]
    DefaultEnvironment { env: String, known: String },
    /// An environment's cluster is not defined.
    #[error("environments.{env}.cluster = \"{cluster}\" is not defined in [clusters] (known: {known})")]
    Cluster { env: String, cluster: String, known: String },
    /// An environment's backend is neither configured nor built in.
    #[error(
        "environments.{env}.backend = \"{backend}\" is neither defined in [plugins] (known: {known}) nor built in (built-in: {builtin})"
    )]
    Backend { env: String, backend: String, known: String, builtin: String },
    /// An environment's backend is an integration plugin.
    #[error(
        "environments.{env}.backend = \"{backend}\": [plugins.{backend}] is an integration plugin (kind = \"integration\"), not a backend; name a backend here, and reach `{backend}` from a workflow with cradle::plugin(\"ROLE\") (environments.{env}.plugins)"
    )]
    BackendKind { env: String, backend: String },
    /// An environment maps a role to a plugin that is not defined.
    #[error(
        "environments.{env}.plugins.{role} = \"{plugin}\" is neither defined in [plugins] (known: {known}) nor a built-in integration plugin"
    )]
    RolePlugin { env: String, role: String, plugin: String, known: String },
    /// An environment maps a role to a backend.
    #[error(
        "environments.{env}.plugins.{role} = \"{plugin}\": [plugins.{plugin}] is a backend (kind = \"backend\", the default); a role needs an integration plugin: set kind = \"integration\" in [plugins.{plugin}] if it is one"
    )]
    RoleKind { env: String, role: String, plugin: String },
    /// A built-in's table declares it of the other kind.
    #[error(
        "plugins.{name}.kind = \"{kind}\": the built-in `{name}` is a {builtin}; remove kind, or set path to a component of that kind"
    )]
    BuiltinKind {
        name: String,
        kind: crate::builtin::catalogue::PluginKind,
        builtin: crate::builtin::catalogue::PluginKind,
    },
    /// An environment's DNS provider is not defined.
    #[error("environments.{env}.dns = \"{dns}\" is not defined in [dns] (known: {known})")]
    Dns { env: String, dns: String, known: String },
    /// A `technitium` provider's endpoint is not defined.
    #[error("dns.{name}.endpoint = \"{endpoint}\" is not defined in [endpoints] (known: {known})")]
    DnsEndpoint { name: String, endpoint: String, known: String },
    /// Two DNS providers of one environment serve the same zone.
    #[error(
        "environments.{env}.dns: zone `{zone}` is in the zones of both [dns.{first}] and [dns.{second}]; each zone goes to one provider"
    )]
    DnsZoneTwice { env: String, zone: String, first: String, second: String },
    /// An environment's DHCP provider is not defined.
    #[error("environments.{env}.dhcp = \"{dhcp}\" is not defined in [dhcp] (known: {known})")]
    Dhcp { env: String, dhcp: String, known: String },
    /// A `[dhcp.NAME]` value.
    #[error("dhcp.{name}: {problem}")]
    DhcpProvider { name: String, problem: String },
    /// An environment's post-provision task provider is not defined.
    #[error("environments.{env}.post = \"{post}\" is not defined in [post] (known: {known})")]
    Post { env: String, post: String, known: String },
    /// A `[post.NAME]` value.
    #[error("post.{name}: {problem}")]
    PostProvider { name: String, problem: String },
    /// A `[dns.NAME]` value.
    #[error("dns.{name}: {problem}")]
    DnsProvider { name: String, problem: DnsConfigError },
    /// A `[terraform]` value.
    #[error("terraform.{0}")]
    Terraform(TerraformConfigError),
    /// `[coordination]` is inconsistent.
    #[error("{0}")]
    Coordination(String),
    /// `[serve]` has a value that cannot work.
    #[error("{0}")]
    Serve(String),
    /// A `[clusters.NAME]` value.
    #[error("clusters.{name}: {problem}")]
    ClusterValue { name: String, problem: ClusterProblem },
    /// A plugin that is not built in has no `path`.
    #[error(
        "plugins.{name}: path is required (e.g. path = \"plugins/{name}.wasm\"); only a built-in plugin ({builtin}) may leave it out"
    )]
    PluginPath { name: String, builtin: String },
    /// A plugin's grants.
    #[error("plugins.{name}.grants: {problem}")]
    PluginGrants { name: String, problem: GrantError },
    /// A plugin's limits.
    #[error("plugins.{name}: {problem}")]
    PluginLimits { name: String, problem: LimitsError },
    /// A plugin's HTTP grant names an endpoint that is not defined.
    #[error(
        "plugins.{name}.grants.http.endpoints names `{alias}`, which is not defined in [endpoints] (known: {known})"
    )]
    HttpEndpoint { name: String, alias: String, known: String },
    /// The workflow grants.
    #[error("workflow.grants: {problem}")]
    WorkflowGrants { problem: GrantError },
    /// `workflow.max_operations = 0`.
    #[error("workflow.max_operations must be at least 1")]
    MaxOperations,
    /// An endpoint URL that is not HTTP(S).
    #[error("endpoints.{name}.url = \"{url}\" must start with https:// or http://")]
    EndpointUrl { name: String, url: String },
    /// An endpoint's login settings do not fit its `auth`.
    #[error("endpoints.{name}: {problem}")]
    EndpointLogin { name: String, problem: &'static str },
}

/// A `[clusters.NAME]` value that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClusterProblem {
    /// A negative or non-finite simulator time scale.
    #[error("sim.time_scale = {0} must be a number ≥ 0")]
    TimeScale(f64),
    /// A negative or non-finite task time scale.
    #[error("task_time_scale = {0} must be a number ≥ 0 (1 = PVE's usual task durations)")]
    TaskTimeScale(f64),
    /// A `node_ssh` entry.
    #[error("node_ssh.{node}: {problem}")]
    NodeSsh { node: String, problem: NodeSshError },
    /// A Proxmox cluster without `endpoint`.
    #[error("endpoint is required, e.g. endpoint = \"https://pve1.lab:8006\"")]
    NoEndpoint,
    /// An endpoint that is not HTTPS.
    #[error("endpoint = \"{0}\" must be an https:// URL (the Proxmox API listens on HTTPS, port 8006)")]
    EndpointNotHttps(String),
    /// A Proxmox cluster without `token`.
    #[error("token is required, e.g. token = {{ env = \"PVE_TOKEN\" }}")]
    NoToken,
    /// None of fingerprint, ca_file, insecure_skip_verify.
    #[error(
        "set fingerprint = \"AA:BB:..\" (SHA-256 of the node certificate) or ca_file = \"path.pem\" so the API's certificate can be verified"
    )]
    NoVerifier,
    /// More than one of them.
    #[error("set only one of fingerprint, ca_file and insecure_skip_verify")]
    SeveralVerifiers,
    /// `sim.privileges_without` names something outside the role, or is set without
    /// `privileges = "cradle"`.
    #[error("sim.privileges_without: {0}")]
    PrivilegesWithout(String),
}

/// An environment a command asks for that the configuration does not settle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvironmentError {
    /// No `--env`, no `default_environment`, and not exactly one environment.
    #[error("no environment chosen: pass --env NAME or set default_environment (known: {known})")]
    NotChosen { known: String },
    /// An environment that is not defined.
    #[error("environment `{name}` is not defined in [environments] (known: {known})")]
    Unknown { name: String, known: String },
}
