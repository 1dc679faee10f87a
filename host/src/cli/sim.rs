//! `cradle sim serve`: run the simulated Proxmox VE cluster as a server, for
//! demos and for pointing other clients (proxmoxer, Terraform providers) at it.
//!
//! `--write-config FILE` writes the cluster's `[clusters.NAME]` and `[ssh]`
//! sections for a cradle.toml (0600, the token in an owner-only file next to
//! it, referenced by `{ file = ... }`), so another cradle process can drive
//! this simulator as it would a real cluster: that is how the crash tests kill
//! cradle without killing "Proxmox".
//!
//! `--unifi`, `--technitium` and `--semaphore ADDR` also serve the in-process
//! stand-ins of those services (docs/STAND-INS.md) next to the cluster: their URLs
//! are printed, their credentials (generated) are written to 0600 files under
//! `--stand-in-credentials DIR` (default `<state>/stand-ins`) and never printed, and
//! the UniFi stand-in is the cluster's DHCP server (guests whose network-data asks
//! for DHCP get their NIC's reservation, else a pool address). The UniFi URL
//! printed is the one an endpoint takes (`…/proxy/network` for a UniFi OS
//! controller); with `--write-config` the file also gets each stand-in's
//! `[endpoints.NAME]` (credentials by `{ file = … }`), the `[dhcp.unifi]` and
//! `[dns.technitium]` providers over them, an `[environments.NAME]` (the
//! cluster's name, backend `direct`) whose `dhcp`/`dns` name them, and the
//! `[workflow.grants.dhcp|dns|netbox|http]` the NetBox workflow needs, and
//! the built-in `netbox` integration plugin's `[plugins.netbox.grants.*]`
//! (NetBox, the subnets, the zones, HA), as docs/NETBOX.md sets them up: the
//! file loads as a cradle.toml as it is.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum SimCmd {
    /// Serve the simulated cluster until Ctrl-C; prints the API URL, a token
    /// and the certificate fingerprint.
    Serve(Box<ServeArgs>),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the HTTPS API.
    #[arg(long, default_value = "127.0.0.1:8006")]
    pub listen: SocketAddr,
    /// Node names, comma-separated.
    #[arg(long, default_value = "pve1,pve2,pve3", value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// Multiplier for every simulated duration (0 = instant, 1 = realistic).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Faults to inject (see docs/SIMULATOR.md).
    #[arg(long)]
    pub faults: Option<String>,
    /// Seed for fault draws.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Port of the nodes' SSH servers (0 = any free port, reported in the
    /// banner and the written config; lets several simulators run side by side).
    #[arg(long, default_value_t = 22)]
    pub node_ssh_port: u16,
    /// Write the cradle.toml sections for this cluster to FILE (0600; the
    /// token goes to FILE.token, 0600), then serve.
    #[arg(long, value_name = "FILE")]
    pub write_config: Option<PathBuf>,
    /// The cluster name used in the written config.
    #[arg(long, default_value = "sim")]
    pub cluster_name: String,
    /// Port the guests' SSH servers listen on (a qemu guest's forward).
    #[arg(long, default_value_t = 22)]
    pub guest_ssh_port: u16,
    /// Boot started VMs as real qemu guests from this image directory (what
    /// `scripts/guest-image` prints; see docs/SIMULATOR.md, "Guest mode qemu").
    #[arg(long, value_name = "DIR")]
    pub qemu_image: Option<PathBuf>,
    /// How qemu runs guests: tcg, kvm, or auto (KVM when /dev/kvm opens).
    #[arg(long, default_value = "tcg", requires = "qemu_image")]
    pub qemu_accel: String,
    /// The Proxmox VE version the cluster reports and behaves as (disk-image
    /// uploads through the API need 8.4).
    #[arg(long, default_value = "9.0.3")]
    pub pve_version: String,
    /// Size in bytes of each node's root filesystem (/var/tmp, /var/lib/vz).
    #[arg(long)]
    pub node_root_bytes: Option<u64>,
    /// One more storage on every node besides `local` and `local-lvm`, as
    /// ID=TYPE:CONTENT (TYPE `dir` or `lvmthin`; a dir storage lives under
    /// /mnt/pve/ID), e.g. `fast=lvmthin:images,rootdir` (repeatable).
    #[arg(long = "storage", value_name = "ID=TYPE:CONTENT", value_parser = storage_arg)]
    pub storages: Vec<cradle_sim::StorageSpec>,
    /// Hand out `cradle@pve!cradle`, a privilege-separated token holding exactly
    /// cradle's documented role (docs/CONFIG.md, "Proxmox VE permissions"), checked
    /// as PVE checks it, instead of root@pam's token.
    #[arg(long)]
    pub least_privilege: bool,
    /// Also serve a UniFi Network stand-in on ADDR (e.g. 127.0.0.1:0); it is the
    /// cluster's DHCP server (docs/STAND-INS.md).
    #[arg(long, value_name = "ADDR")]
    pub unifi: Option<SocketAddr>,
    /// The UniFi stand-in's API style: unifi-os (/proxy/network, TOKEN + CSRF, API
    /// key) or classic (/api, unifises).
    #[arg(long, default_value = "unifi-os", value_parser = ["unifi-os", "classic"], requires = "unifi")]
    pub unifi_style: String,
    /// Serve the UniFi stand-in over plain HTTP (controllers speak HTTPS; the
    /// default is a self-signed certificate, its CA written next to the credentials
    /// as unifi-ca.pem).
    #[arg(long, requires = "unifi")]
    pub unifi_http: bool,
    /// Also serve a Technitium DNS stand-in on ADDR (plain HTTP).
    #[arg(long, value_name = "ADDR")]
    pub technitium: Option<SocketAddr>,
    /// A Primary zone the Technitium stand-in has from the start (repeatable).
    #[arg(long = "technitium-zone", value_name = "ZONE", default_value = "lab.example.com", requires = "technitium")]
    pub technitium_zones: Vec<String>,
    /// Also serve a Semaphore UI stand-in on ADDR (plain HTTP; project 1, template 1
    /// `configure-vm`, and template 2 `configure-vm-no-env` without an Environment;
    /// its tasks run on --time-scale).
    #[arg(long, value_name = "ADDR")]
    pub semaphore: Option<SocketAddr>,
    /// Where the stand-ins' credentials are written (0600 files; default
    /// `<state>/stand-ins`).
    #[arg(long, value_name = "DIR")]
    pub stand_in_credentials: Option<PathBuf>,
}

/// The stand-ins one `sim serve` runs; dropping them stops them.
#[derive(Default)]
struct StandIns {
    unifi: Option<cradle_sim::services::unifi::Unifi>,
    technitium: Option<cradle_sim::services::technitium::Technitium>,
    semaphore: Option<cradle_sim::services::semaphore::Semaphore>,
}

impl StandIns {
    async fn start(args: &ServeArgs) -> anyhow::Result<StandIns> {
        use cradle_sim::services::{Listen, semaphore, technitium, unifi};
        let mut out = StandIns::default();
        if let Some(addr) = args.unifi {
            let style =
                if args.unifi_style == "classic" { unifi::UnifiStyle::Classic } else { unifi::UnifiStyle::UnifiOs };
            let listen = if args.unifi_http { Listen::http(addr) } else { Listen::https(addr) };
            out.unifi = Some(unifi::start(unifi::UnifiConfig { listen, style, ..Default::default() }).await?);
        }
        if let Some(addr) = args.technitium {
            let cfg = technitium::TechnitiumConfig {
                listen: Listen::http(addr),
                zones: args.technitium_zones.clone(),
                ..Default::default()
            };
            out.technitium = Some(technitium::start(cfg).await?);
        }
        if let Some(addr) = args.semaphore {
            let cfg = semaphore::SemaphoreConfig {
                listen: Listen::http(addr),
                time_scale: args.time_scale,
                ..Default::default()
            };
            out.semaphore = Some(semaphore::start(cfg).await?);
        }
        Ok(out)
    }

    /// Write the credentials into `dir` and say where each stand-in is (never the
    /// secrets themselves).
    fn announce(&self, dir: &std::path::Path) -> anyhow::Result<String> {
        use std::fmt::Write as _;
        let mut out = String::new();
        let files = |paths: Vec<PathBuf>| paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
        if let Some(u) = &self.unifi {
            let style = match u.style() {
                cradle_sim::services::unifi::UnifiStyle::Classic => "classic",
                cradle_sim::services::unifi::UnifiStyle::UnifiOs => "UniFi OS",
            };
            let _ = writeln!(out, "  UniFi:        {} ({style}; the cluster's DHCP server)", unifi_endpoint(u));
            let _ = writeln!(out, "                credentials {}", files(u.write_credentials(dir)?));
        }
        if let Some(t) = &self.technitium {
            let _ = writeln!(out, "  Technitium:   {}", t.url());
            let _ = writeln!(out, "                credentials {}", files(t.write_credentials(dir)?));
        }
        if let Some(s) = &self.semaphore {
            let _ = writeln!(out, "  Semaphore:    {}", s.url());
            let _ = writeln!(out, "                credentials {}", files(s.write_credentials(dir)?));
        }
        Ok(out)
    }
}

/// The URL a `[endpoints.NAME]` of this UniFi takes: the API prefix without
/// its `/api` (the host appends the controller's paths), so `…/proxy/network`
/// for a UniFi OS controller.
fn unifi_endpoint(u: &cradle_sim::services::unifi::Unifi) -> String {
    let api = u.api_url();
    api.strip_suffix("/api").unwrap_or(&api).to_string()
}

impl StandIns {
    /// The sections a cradle.toml needs to use the stand-ins as docs/NETBOX.md
    /// sets the real services up (empty without stand-ins): each stand-in's
    /// `[endpoints.*]` (credentials by file, in `dir` as [`StandIns::announce`]
    /// wrote them); the `[dhcp.unifi]`, `[dns.technitium]` and
    /// `[post.semaphore]` providers over them and an `[environments.ENV]` on
    /// cluster `env` naming them; and the NetBox workflow's grants of these
    /// services: `dhcp` (the UniFi site's subnets), `dns` (the Technitium
    /// zones), `post` (the Semaphore stand-in's projects and templates) and
    /// `netbox` (NetBox is not simulated: its `[endpoints.netbox]` is the
    /// operator's).
    fn config(&self, dir: &std::path::Path, env: &str) -> String {
        use std::fmt::Write as _;
        if self.unifi.is_none() && self.technitium.is_none() && self.semaphore.is_none() {
            return String::new();
        }
        let q = |s: &str| toml::Value::String(s.to_string()).to_string();
        let list = |items: &[String]| items.iter().map(|s| q(s)).collect::<Vec<_>>().join(", ");
        let abs = |name: &str| {
            let p = dir.join(name);
            q(&std::path::absolute(&p).unwrap_or(p).display().to_string())
        };
        let mut out = String::new();
        let mut grants = String::new();
        // The NetBox pipeline's integration steps are the built-in `netbox`
        // plugin's (docs/NETBOX.md): its own grants of the same services.
        let mut plugin = String::from(
            "\n# The NetBox pipeline's integration plugin (built in): NetBox, DHCP, DNS and HA are its grants.\n\
             [plugins.netbox.grants.netbox]\nendpoint = \"netbox\"\nstatuses = [\"active\", \"failed\"]\n\
             [plugins.netbox.grants.proxmox]\nnodes = [\"*\"]\nvmids = \"100-999999\"\n",
        );
        let _ = writeln!(out, "\n[environments.{env}]\ncluster = {}\nbackend = \"direct\"", q(env));
        if self.unifi.is_some() {
            let _ = writeln!(out, "dhcp = \"unifi\"");
        }
        if self.technitium.is_some() {
            let _ = writeln!(out, "dns = \"technitium\"");
        }
        if self.semaphore.is_some() {
            let _ = writeln!(out, "post = \"semaphore\"");
        }
        if let Some(u) = &self.unifi {
            let _ = writeln!(out, "\n[endpoints.unifi]\nurl = {}", q(&unifi_endpoint(u)));
            if u.api_key().is_some() {
                let _ = writeln!(out, "token = {{ file = {} }}\nauth = \"api-key\"", abs("unifi.api-key"));
            } else {
                let _ = writeln!(out, "token = {{ file = {} }}", abs("unifi.password"));
                let _ = writeln!(out, "auth = \"unifi-login\"\nusername = {}", q(u.username()));
            }
            if u.ca_pem().is_some() {
                let _ = writeln!(out, "ca_file = {}", abs("unifi-ca.pem"));
            }
            let _ = writeln!(out, "\n[dhcp.unifi]\nkind = \"unifi\"\nendpoint = \"unifi\"\nsite = \"{UNIFI_SITE}\"");
            let _ = writeln!(out, "\n[workflow.grants.dhcp]\nnetworks = [{}]", list(&unifi_subnets(u)));
            let _ = writeln!(plugin, "[plugins.netbox.grants.dhcp]\nnetworks = [{}]", list(&unifi_subnets(u)));
        } else {
            // The plugin imports `dhcp` whether or not a controller is served:
            // a table without the section is refused when the project loads.
            let _ = writeln!(plugin, "[plugins.netbox.grants.dhcp]\nnetworks = []   # no UniFi stand-in served");
        }
        if let Some(t) = &self.technitium {
            let _ = writeln!(out, "\n[endpoints.technitium]\nurl = {}", q(&t.url()));
            let _ = writeln!(out, "token = {{ file = {} }}\nauth = \"bearer\"", abs("technitium.token"));
            let zones = list(&t.zones());
            let _ = writeln!(
                out,
                "\n[dns.technitium]\nkind = \"technitium\"\nendpoint = \"technitium\"\nzones = [{zones}]\nttl = 300\nptr = true"
            );
            let _ = writeln!(out, "\n[workflow.grants.dns]\nzones = [{zones}]");
            let _ = writeln!(plugin, "[plugins.netbox.grants.dns]\nzones = [{zones}]");
        } else {
            let _ = writeln!(plugin, "[plugins.netbox.grants.dns]\nzones = []      # no Technitium stand-in served");
        }
        if let Some(s) = &self.semaphore {
            let _ = writeln!(out, "\n[endpoints.semaphore]\nurl = {}", q(&s.url()));
            let _ = writeln!(out, "token = {{ file = {} }}\nauth = \"bearer\"", abs("semaphore.token"));
            let _ = writeln!(out, "\n[post.semaphore]\nkind = \"semaphore\"\nendpoint = \"semaphore\"");
            // The stand-in runs with its default projects (see `start`).
            let projects = cradle_sim::services::semaphore::SemaphoreConfig::default().projects;
            let ids = |ids: Vec<u32>| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            let templates = ids(projects.iter().flat_map(|p| p.templates.iter().map(|t| t.id)).collect());
            let _ = writeln!(
                grants,
                "\n# The OS configuration's Semaphore templates, run by the host's [post.semaphore].\n\
                 [workflow.grants.post]\nprojects = [{}]\ntemplates = [{templates}]",
                ids(projects.iter().map(|p| p.id).collect())
            );
        }
        let _ = writeln!(
            out,
            "\n# NetBox is not simulated: add [endpoints.netbox] (url, token) for a real one (docs/NETBOX.md).\n\
             [workflow.grants.netbox]\nendpoint = \"netbox\"\nstatuses = [\"active\", \"failed\"]{grants}"
        );
        out.push_str(&plugin);
        out
    }
}

/// The UniFi site the written `[dhcp.unifi]` names: the one the stand-in's
/// DHCP serves the cluster from.
const UNIFI_SITE: &str = "default";

/// The subnets (`10.0.10.0/24`) of the stand-in's networks in [`UNIFI_SITE`],
/// for `[workflow.grants.dhcp] networks`.
fn unifi_subnets(u: &cradle_sim::services::unifi::Unifi) -> Vec<String> {
    u.networks()
        .iter()
        .filter(|n| n.site == UNIFI_SITE)
        .map(|n| {
            let mask = u32::MAX.checked_shl(32 - u32::from(n.prefix.min(32))).unwrap_or(0);
            format!("{}/{}", std::net::Ipv4Addr::from(u32::from(n.gateway) & mask), n.prefix)
        })
        .collect()
}

/// `--storage ID=TYPE:CONTENT`: a storage PVE would accept (its id rule,
/// `pve-storage-id`), of a type the simulator models.
fn storage_arg(arg: &str) -> Result<cradle_sim::StorageSpec, String> {
    let form = "give ID=TYPE:CONTENT, e.g. fast=lvmthin:images,rootdir";
    let (id, rest) = arg.split_once('=').ok_or_else(|| format!("`{arg}`: {form}"))?;
    let (kind, content) = rest.split_once(':').ok_or_else(|| format!("`{arg}`: {form}"))?;
    if !crate::inventory::is_storage_id(id) {
        return Err(format!(
            "`{id}` is no Proxmox storage id (a letter, then letters, digits or `-_.`, e.g. fast-lvm)"
        ));
    }
    if kind != "dir" && kind != "lvmthin" {
        return Err(format!("`{kind}`: the simulator models storages of type dir or lvmthin"));
    }
    if content.split(',').any(|c| c.trim().is_empty()) {
        return Err(format!("`{content}`: content is a comma-separated list of types, e.g. images,rootdir"));
    }
    Ok(cradle_sim::StorageSpec {
        id: id.into(),
        kind: kind.into(),
        content: content.into(),
        path: (kind == "dir").then(|| format!("/mnt/pve/{id}")),
        shared: false,
        size_bytes: None,
    })
}

/// `state_dir` is the global `--state-dir`: where the cluster keeps its VMs,
/// certificate and token (in memory and a temp dir when absent).
pub async fn run(cmd: &SimCmd, state_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let SimCmd::Serve(args) = cmd;
    if !(args.time_scale >= 0.0 && args.time_scale.is_finite()) {
        anyhow::bail!("--time-scale {} must be a number ≥ 0", args.time_scale);
    }
    let mut config = cradle_sim::SimConfig {
        nodes: args.nodes.clone(),
        state_dir,
        time_scale: args.time_scale,
        seed: args.seed,
        listen: args.listen,
        node_ssh_port: args.node_ssh_port,
        guest_ssh_port: args.guest_ssh_port,
        pve_version: args.pve_version.clone(),
        ..cradle_sim::SimConfig::default()
    };
    if let Some(b) = args.node_root_bytes {
        config.node_disk.root_bytes = b;
    }
    for extra in &args.storages {
        if config.storages.iter().any(|s| s.id == extra.id) {
            anyhow::bail!("--storage {}: the simulator already has a storage of that id", extra.id);
        }
        config.storages.push(extra.clone());
    }
    if args.least_privilege {
        config.access = crate::caps::proxmox::role::sim_access(&[]);
    }
    if let Some(spec) = &args.faults {
        config.faults = cradle_sim::FaultSpec::parse(spec)?;
    }
    if let Some(image) = &args.qemu_image {
        let mut q = cradle_sim::QemuSettings::new(image);
        q.accel = cradle_sim::Accel::parse(&args.qemu_accel)?;
        config.guest_mode = cradle_sim::GuestMode::Qemu(q);
    }
    let stand_ins = StandIns::start(args).await?;
    config.dhcp = stand_ins.unifi.as_ref().map(|u| u.dhcp(UNIFI_SITE));
    let cluster = cradle_sim::Cluster::start(config).await?;
    print!("{}", cluster.banner());
    let credentials = args.stand_in_credentials.clone().unwrap_or_else(|| cluster.root().join("stand-ins"));
    print!("{}", stand_ins.announce(&credentials)?);
    if let Some(path) = &args.write_config {
        crate::cluster::write_client_config(&cluster, &args.cluster_name, path).map_err(anyhow::Error::msg)?;
        let endpoints = stand_ins.config(&credentials, &args.cluster_name);
        if !endpoints.is_empty() {
            let mut text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read back {}: {e}", path.display()))?;
            text.push_str(&endpoints);
            crate::state::write_private_file_atomic(path, text.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        println!("  config:       {}", path.display());
    }
    println!("Press Ctrl-C to stop.");
    let _ = tokio::signal::ctrl_c().await;
    cluster.shutdown().await;
    drop(stand_ins);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::storage_arg;

    #[test]
    fn a_storage_argument_gives_id_type_and_content() {
        let s = storage_arg("fast=lvmthin:images,rootdir").expect("valid");
        assert_eq!((s.id.as_str(), s.kind.as_str(), s.content.as_str()), ("fast", "lvmthin", "images,rootdir"));
        assert_eq!(s.path, None);
        assert_eq!(storage_arg("nfs-a=dir:images").expect("dir").path.as_deref(), Some("/mnt/pve/nfs-a"));
    }

    #[test]
    fn a_malformed_storage_argument_says_what_to_give() {
        for (arg, says) in [
            ("fast", "ID=TYPE:CONTENT"),
            ("fast=lvmthin", "ID=TYPE:CONTENT"),
            ("1fast=lvmthin:images", "no Proxmox storage id"),
            ("fast,x=lvmthin:images", "no Proxmox storage id"),
            ("fast=zfspool:images", "dir or lvmthin"),
            ("fast=lvmthin:images,", "comma-separated"),
        ] {
            let e = storage_arg(arg).expect_err(arg);
            assert!(e.contains(says), "{arg}: {e}");
        }
    }
}
