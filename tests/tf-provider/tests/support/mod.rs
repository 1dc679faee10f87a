//! Test harness: a simulated cluster, the provider binary behind a `dev_overrides`
//! CLI config, a module directory, and the real `terraform` CLI.
//!
//! Contract: [`Harness::start`] fails the test (never skips) when `terraform` is not on
//! PATH. Terraform runs with `TF_CLI_CONFIG_FILE` pointing at our CLI config, the
//! flavour's credential variables only (every `PM_*` / `PROXMOX_VE_*` variable of the
//! test process is removed first), and `SSL_CERT_FILE` = the simulator's CA. The
//! cluster has two nodes, instant tasks and two templates: 9000 `debian-12-cloud` and
//! 9001 `debian-13-cloud`, both on pve1.

pub mod module;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use cradle_sim::{Cluster, RunningCluster, SimConfig, TemplateSpec};
use serde_json::Value;

pub use module::{Flavour, VmSpec};

/// The provider binary cargo built for these tests.
const PROVIDER: &str = env!("CARGO_BIN_EXE_terraform-provider-proxmox");

/// One test's world.
pub struct Harness {
    pub sim: RunningCluster,
    pub flavour: Flavour,
    dir: tempfile::TempDir,
    http: reqwest::Client,
    /// Extra environment for terraform (overrides), `None` value = removed.
    pub env: BTreeMap<String, Option<String>>,
}

fn terraform_on_path() -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("terraform").is_file()))
}

/// The command line and outcome of a terraform run, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Harness {
    /// Start a cluster and lay out the CLI config and the module directory.
    pub async fn start(flavour: Flavour, tweak: impl FnOnce(&mut SimConfig)) -> Harness {
        assert!(
            terraform_on_path(),
            "terraform is not on PATH: these tests drive the real Terraform CLI (1.11.4); install it first"
        );
        let mut cfg = SimConfig::with_nodes(2);
        cfg.time_scale = 0.0;
        cfg.node_ssh_port = 0;
        cfg.guest_ssh_port = 0;
        cfg.templates.push(TemplateSpec { vmid: 9001, name: "debian-13-cloud".into(), node: "pve1".into() });
        tweak(&mut cfg);
        let sim = Cluster::start(cfg).await.expect("the simulated cluster starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).expect("plugin dir");
        std::os::unix::fs::symlink(PROVIDER, plugins.join("terraform-provider-proxmox")).expect("symlink provider");
        let cli = format!(
            "provider_installation {{\n  dev_overrides {{\n    \"telmate/proxmox\" = \"{p}\"\n    \"bpg/proxmox\" = \"{p}\"\n  }}\n  direct {{}}\n}}\n",
            p = plugins.display()
        );
        std::fs::write(dir.path().join("cli.tfrc"), cli).expect("CLI config");
        std::fs::write(dir.path().join("ca.pem"), sim.ca_pem()).expect("CA file");
        std::fs::create_dir_all(dir.path().join("module")).expect("module dir");
        let ca = reqwest::Certificate::from_pem(sim.ca_pem().as_bytes()).expect("CA parses");
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("HTTP client");
        Harness { sim, flavour, dir, http, env: BTreeMap::new() }
    }

    /// The module directory.
    pub fn module_dir(&self) -> PathBuf {
        self.dir.path().join("module")
    }

    /// Write `main.tf.json` for `spec`.
    pub fn write_module(&self, spec: &VmSpec) {
        let json = module::render(self.flavour, spec);
        std::fs::write(self.module_dir().join("main.tf.json"), serde_json::to_vec_pretty(&json).expect("json"))
            .expect("write module");
    }

    /// The flavour's credential variables for this cluster.
    fn credentials(&self) -> Vec<(String, String)> {
        let token = self.sim.token();
        let (id, secret) = token.split_once('=').expect("token has a secret");
        match self.flavour {
            Flavour::Telmate => vec![
                ("PM_API_URL".into(), self.sim.api_url()),
                ("PM_API_TOKEN_ID".into(), id.to_string()),
                ("PM_API_TOKEN_SECRET".into(), secret.to_string()),
            ],
            Flavour::Bpg => vec![
                ("PROXMOX_VE_ENDPOINT".into(), format!("https://{}/", self.sim.api_addr())),
                ("PROXMOX_VE_API_TOKEN".into(), token.clone()),
            ],
        }
    }

    /// Run `terraform <args>` in the module directory.
    pub async fn tf(&self, args: &[&str]) -> Output {
        let mut cmd = tokio::process::Command::new("terraform");
        cmd.args(args).current_dir(self.module_dir());
        for (k, _) in std::env::vars() {
            if k.starts_with("PM_") || k.starts_with("PROXMOX_VE_") || k.starts_with("TF_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("TF_CLI_CONFIG_FILE", self.dir.path().join("cli.tfrc"))
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("CHECKPOINT_DISABLE", "1")
            .env("SSL_CERT_FILE", self.dir.path().join("ca.pem"));
        for (k, v) in self.credentials() {
            cmd.env(k, v);
        }
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.output().await.expect("terraform runs")
    }

    /// `terraform apply -auto-approve`, which must succeed.
    pub async fn apply(&self) -> Output {
        let out = self.tf(&["apply", "-auto-approve", "-no-color"]).await;
        assert!(out.status.success(), "terraform apply failed: {}", describe(&out));
        out
    }

    /// `terraform plan -detailed-exitcode` (0 no changes, 2 changes) saved to `file`.
    pub async fn plan(&self, extra: &[&str], file: &str) -> i32 {
        let out_arg = format!("-out={file}");
        let mut args = vec!["plan", "-detailed-exitcode", "-no-color", out_arg.as_str()];
        args.extend_from_slice(extra);
        let out = self.tf(&args).await;
        let code = out.status.code().unwrap_or(-1);
        assert!(code == 0 || code == 2, "terraform plan failed: {}", describe(&out));
        code
    }

    /// `terraform show -json [file]`.
    pub async fn show(&self, file: Option<&str>) -> Value {
        let mut args = vec!["show", "-json", "-no-color"];
        args.extend(file);
        let out = self.tf(&args).await;
        assert!(out.status.success(), "terraform show failed: {}", describe(&out));
        serde_json::from_slice(&out.stdout).expect("show -json is JSON")
    }

    /// The actions a saved plan has for the VM resource.
    pub async fn planned_actions(&self, file: &str) -> Vec<String> {
        let plan = self.show(Some(file)).await;
        let change = plan["resource_changes"]
            .as_array()
            .and_then(|rc| rc.iter().find(|c| c["address"] == self.flavour.address()))
            .unwrap_or_else(|| panic!("no change for {} in {plan}", self.flavour.address()));
        change["change"]["actions"].as_array().expect("actions").iter().map(|a| a.as_str().unwrap().into()).collect()
    }

    /// The VM's attributes in the state.
    pub async fn state_values(&self) -> Value {
        let state = self.show(None).await;
        state["values"]["root_module"]["resources"]
            .as_array()
            .and_then(|r| r.iter().find(|x| x["address"] == self.flavour.address()))
            .map(|r| r["values"].clone())
            .unwrap_or(Value::Null)
    }

    /// Number of write requests (anything but GET) the cluster served so far.
    pub fn writes(&self) -> BTreeMap<String, u64> {
        self.sim.request_counts().into_iter().filter(|(k, _)| !k.starts_with("GET ")).collect()
    }

    /// Call the API directly.
    pub async fn api(&self, method: &str, path: &str, form: &[(&str, &str)]) -> Value {
        let url = format!("{}{path}", self.sim.api_url());
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.http.request(m, url).header("Authorization", format!("PVEAPIToken={}", self.sim.token()));
        req = if method == "GET" { req.query(form) } else { req.form(form) };
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "{method} {path}: {status} {body}");
        body["data"].clone()
    }

    /// The non-template VMs: (vmid, node, status).
    pub async fn vms(&self) -> Vec<(u64, String, String)> {
        let list = self.api("GET", "/cluster/resources", &[("type", "vm")]).await;
        list.as_array()
            .expect("list")
            .iter()
            .filter(|g| g["template"] != 1)
            .map(|g| {
                (g["vmid"].as_u64().unwrap(), g["node"].as_str().unwrap().into(), g["status"].as_str().unwrap().into())
            })
            .collect()
    }

    /// A VM's config.
    pub async fn config(&self, node: &str, vmid: u64) -> Value {
        self.api("GET", &format!("/nodes/{node}/qemu/{vmid}/config"), &[]).await
    }

    /// Migrate a stopped VM and wait until it is on `to`.
    pub async fn migrate(&self, vmid: u64, from: &str, to: &str) {
        self.api("POST", &format!("/nodes/{from}/qemu/{vmid}/migrate"), &[("target", to)]).await;
        for _ in 0..200 {
            if self.vms().await.iter().any(|(v, n, _)| *v == vmid && n == to) {
                let cfg = self.config(to, vmid).await;
                if cfg.get("lock").is_none() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("VM {vmid} did not arrive on {to}");
    }
}
