//! `cradle sim serve`: run the simulated Proxmox VE cluster as a server, for
//! demos and for pointing other clients (proxmoxer, Terraform providers) at it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum SimCmd {
    /// Serve the simulated cluster until Ctrl-C; prints the API URL, a token
    /// and the certificate fingerprint.
    Serve(ServeArgs),
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
        ..cradle_sim::SimConfig::default()
    };
    if let Some(spec) = &args.faults {
        config.faults = cradle_sim::FaultSpec::parse(spec)?;
    }
    cradle_sim::serve(config).await?;
    Ok(ExitCode::SUCCESS)
}
