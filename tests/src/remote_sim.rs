//! The simulator in its own process (`cradle sim serve --write-config`), for
//! tests where "Proxmox" must outlive a `cradle` process (kill -9) or be
//! shared by several of them (two control nodes). Stopped when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::cradle_bin;

/// A running `cradle sim serve` with nodes pve1..pve3.
pub struct RemoteSim {
    child: Child,
    /// Its state directory (`state.json`, the nodes' files, its CA).
    pub state: PathBuf,
    /// The `[clusters.sim]` and `[ssh]` sections it wrote for a client.
    pub cluster_toml: String,
}

impl std::fmt::Debug for RemoteSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSim").field("state", &self.state).finish_non_exhaustive()
    }
}

impl Drop for RemoteSim {
    fn drop(&mut self) {
        // Ctrl-C first: the simulator stops its guests (qemu ones too) and
        // writes its state; SIGKILL if it has not ended within 10 s.
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RemoteSim {
    /// Start it under `dir` (`dir/pve`, `dir/cluster.toml`) at time scale `scale`.
    pub fn start(dir: &Path, scale: &str) -> RemoteSim {
        RemoteSim::start_with(dir, scale, &["--nodes", "pve1,pve2,pve3"])
    }

    /// Start it with these `cradle sim serve` arguments besides the listen
    /// address, time scale, node SSH port, written config and state dir.
    pub fn start_with(dir: &Path, scale: &str, args: &[&str]) -> RemoteSim {
        let state = dir.join("pve");
        let written = dir.join("cluster.toml");
        let mut child = Command::new(cradle_bin())
            .args(["sim", "serve", "--listen", "127.0.0.1:0", "--time-scale", scale])
            .args(args)
            // The documented least-privilege role, as the in-process fixture gives.
            .args(["--least-privilege", "--node-ssh-port", "0", "--write-config"])
            .arg(&written)
            .arg("--state-dir")
            .arg(&state)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cradle sim serve");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = lines.by_ref().map_while(Result::ok).any(|l| l.contains("Press Ctrl-C"));
        assert!(ready, "cradle sim serve did not start");
        // Keep draining so the simulator never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let cluster_toml = std::fs::read_to_string(&written).expect("the written cluster config");
        RemoteSim { child, state, cluster_toml }
    }

    /// [`RemoteSim::start`], with the written client config verifying the
    /// simulator's certificate against its CA (`ca_file` = `<state
    /// dir>/pve-root-ca.pem`) instead of pinning its fingerprint: terraform's
    /// providers cannot pin a fingerprint, so the terraform tests need this.
    pub fn start_trusting_ca(dir: &Path, scale: &str) -> RemoteSim {
        let mut sim = RemoteSim::start(dir, scale);
        let ca = sim.state.join("pve-root-ca.pem");
        assert!(ca.is_file(), "the simulator keeps its CA at {}", ca.display());
        let mut replaced = 0;
        let cluster_toml: String = sim
            .cluster_toml
            .lines()
            .map(|l| {
                if l.starts_with("fingerprint = ") {
                    replaced += 1;
                    format!("ca_file = \"{}\"", ca.display())
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(replaced, 1, "the written config pins one fingerprint:\n{}", sim.cluster_toml);
        sim.cluster_toml = cluster_toml;
        sim
    }

    /// The simulator's persisted VMs (saved on every change), templates included.
    pub fn vms(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.state.join("state.json")).expect("state.json");
        let doc: Value = serde_json::from_str(&text).expect("state.json parses");
        doc["vms"].as_object().map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// Every snippet on the nodes, as `node:file`.
    pub fn snippet_files(&self) -> Vec<String> {
        let mut out = Vec::new();
        for node in ["pve1", "pve2", "pve3"] {
            let dir = self.state.join("nodes").join(node).join("var/lib/vz/snippets");
            if let Ok(rd) = std::fs::read_dir(dir) {
                out.extend(rd.filter_map(Result::ok).map(|e| format!("{node}:{}", e.file_name().to_string_lossy())));
            }
        }
        out
    }
}
