//! Running the `terraform` binary: which one, with which environment, and how
//! its output is read.
//!
//! Contract:
//! - The binary is `[terraform] binary` or `terraform` on `PATH`; its version
//!   is read once (`terraform version -json`) and must be at least 1.5, else
//!   every call fails saying which binary has which version.
//! - The child gets a clean environment: `PATH`, `HOME`, `TMPDIR`, the proxy
//!   variables, `TF_IN_AUTOMATION`, `TF_INPUT=0`, `CHECKPOINT_DISABLE`,
//!   `TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE` (so a new host's `init`
//!   links the cached provider instead of installing it again), the
//!   CLI configuration and plugin cache, and the cluster's credentials in the
//!   variables each provider flavour reads (docs/TERRAFORM.md). Nothing a
//!   plugin passes reaches the command line but the fixed subcommands and the
//!   host's own plan file paths; no `-var` is ever used.
//! - stdout and stderr are read line by line as they come; each line, with
//!   every registered secret redacted, goes to the caller's sink (the journal
//!   and progress display) unless the command's stdout is JSON for the
//!   plugin. Captured output is capped; past the cap the command fails.
//! - A command that runs past its limit gets SIGINT (terraform then stops
//!   and writes what state it has), and SIGKILL 30 s later.
//!
//! Failure modes: a missing or too old binary, a spawn error, an exit status
//! terraform reserves for errors, the limit, an output cap: each a `failed`
//! `CapError` naming the subcommand and module directory, with the last
//! lines terraform printed (redacted).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use super::config::TerraformConfig;
use crate::contract::CapError;
use crate::secrets::{Secret, redact};

/// The oldest terraform cradle runs (saved-plan JSON with `applyable`,
/// `errored`, `checks`; `-detailed-exitcode` with `-out`).
const MIN_VERSION: (u64, u64) = (1, 5);

/// Most bytes of one command's output kept in memory (a plan's JSON included).
const OUTPUT_CAP: usize = 64 << 20;

/// How long terraform may take to stop after SIGINT before it is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(30);

/// How terraform should verify the cluster's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsTrust {
    /// A CA file (`SSL_CERT_FILE`).
    CaFile(PathBuf),
    /// `insecure_skip_verify` (`PM_TLS_INSECURE`, `PROXMOX_VE_INSECURE`).
    Insecure,
    /// Only a fingerprint is pinned: terraform's providers cannot pin one.
    FingerprintOnly,
}

/// The cluster terraform's provider talks to.
#[derive(Clone)]
pub struct Credentials {
    /// `https://HOST:PORT`.
    pub endpoint: String,
    /// `USER@REALM!TOKENID=SECRET`.
    pub token: Secret,
    /// Certificate verification.
    pub tls: TlsTrust,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("endpoint", &self.endpoint).field("tls", &self.tls).finish_non_exhaustive()
    }
}

/// What a command printed.
#[derive(Debug, Default)]
pub struct Output {
    /// Exit status (`-1`: killed by a signal).
    pub status: i32,
    /// stdout, redacted.
    pub stdout: String,
    /// Both streams, in arrival order, redacted (for errors and the failure log).
    pub transcript: String,
}

/// How a command's output is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Every line to the sink (init, plan, apply).
    Lines,
    /// stdout is JSON for the plugin: kept, not echoed; stderr to the sink.
    Json,
}

/// The environment's terraform.
pub struct Runner {
    binary: PathBuf,
    env: Vec<(String, String)>,
    timeout: Duration,
    version: OnceLock<Result<String, String>>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner").field("binary", &self.binary).finish_non_exhaustive()
    }
}

/// The variables passed through from cradle's own environment, when set.
const PASSED_THROUGH: [&str; 9] =
    ["PATH", "HOME", "TMPDIR", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"];

impl Runner {
    /// The runner for `cfg` (paths already resolved against cradle.toml),
    /// talking to the cluster of `creds`, with the plugin cache `cache_dir`.
    pub fn new(cfg: &TerraformConfig, creds: &Credentials, cache_dir: &Path) -> Runner {
        let mut env: Vec<(String, String)> =
            PASSED_THROUGH.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))).collect();
        // The cache may serve a module whose lock file does not list the
        // provider yet: otherwise every new host's `init` installs it into the
        // cache again, replacing the entry the other hosts' plans are reading.
        let fixed = [
            ("TF_IN_AUTOMATION", "1"),
            ("TF_INPUT", "0"),
            ("CHECKPOINT_DISABLE", "1"),
            ("TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE", "true"),
        ];
        env.extend(fixed.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        if let Some(cli) = &cfg.cli_config {
            env.push(("TF_CLI_CONFIG_FILE".into(), cli.display().to_string()));
        }
        env.push(("TF_PLUGIN_CACHE_DIR".into(), cache_dir.display().to_string()));
        env.extend(credential_env(creds));
        Runner {
            binary: cfg.binary.clone().unwrap_or_else(|| PathBuf::from("terraform")),
            env,
            timeout: cfg.timeout(),
            version: OnceLock::new(),
        }
    }

    /// The per-command limit.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// terraform's version, checked once.
    pub async fn version(&self) -> Result<String, CapError> {
        if let Some(v) = self.version.get() {
            return v.clone().map_err(CapError::failed);
        }
        let found = self.read_version().await;
        let _ = self.version.set(found.clone());
        found.map_err(CapError::failed)
    }

    async fn read_version(&self) -> Result<String, String> {
        let bin = self.binary.display();
        let out = self
            .spawn_and_read(Path::new("."), &["version", "-json"], Stream::Json, Duration::from_secs(60), &|_| {})
            .await
            .map_err(|e| {
                format!("terraform: cannot run `{bin} version`: {}; install Terraform >= 1.5 or set [terraform] binary in cradle.toml", e.message)
            })?;
        let v: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|e| format!("terraform: `{bin} version -json` printed no JSON ({e}); is it terraform?"))?;
        let version = v["terraform_version"].as_str().unwrap_or_default().to_string();
        let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if (major, minor) < MIN_VERSION {
            return Err(format!(
                "terraform: {bin} is version `{version}`; cradle needs Terraform >= {}.{} (set [terraform] binary to a newer one)",
                MIN_VERSION.0, MIN_VERSION.1
            ));
        }
        Ok(version)
    }

    /// Run `terraform ARGS` in `dir` (after the version check), with the limit
    /// `limit`; lines go to `sink` as `stream` says.
    pub async fn run(
        &self,
        dir: &Path,
        args: &[&str],
        stream: Stream,
        limit: Duration,
        sink: &(dyn Fn(&str) + Sync),
    ) -> Result<Output, CapError> {
        self.version().await?;
        self.spawn_and_read(dir, args, stream, limit, sink).await
    }

    async fn spawn_and_read(
        &self,
        dir: &Path,
        args: &[&str],
        stream: Stream,
        limit: Duration,
        sink: &(dyn Fn(&str) + Sync),
    ) -> Result<Output, CapError> {
        let what = format!("terraform {} in {}", args.first().copied().unwrap_or(""), dir.display());
        let mut child = tokio::process::Command::new(&self.binary)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| CapError::failed(format!("{what}: cannot start {}: {e}", self.binary.display())))?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(CapError::failed(format!("{what}: no pipes to read")));
        };
        let transcript = std::sync::Mutex::new(String::new());
        // A line for the transcript and the sink (stderr, and stdout unless it is JSON).
        let keep = |line: &str| -> Result<(), CapError> {
            let line = redact(line);
            push_capped(&mut transcript.lock().unwrap_or_else(|e| e.into_inner()), &line, &what)?;
            sink(&line);
            Ok(())
        };
        let mut stdout_text = String::new();
        let read_both = async {
            let out = read_lines(stdout, |l| {
                if stream == Stream::Json { push_capped(&mut stdout_text, l, &what) } else { keep(l) }
            });
            let err = read_lines(stderr, keep);
            let (a, b) = tokio::join!(out, err);
            a.and(b)
        };
        let finished = tokio::time::timeout(limit, async {
            read_both.await?;
            child.wait().await.map_err(|e| CapError::failed(format!("{what}: {e}")))
        })
        .await;
        let status = match finished {
            Ok(status) => status?,
            Err(_) => {
                interrupt(&mut child).await;
                return Err(CapError::failed(format!(
                    "{what}: still running after {} s ([terraform] timeout_s or the plugin call's limit); it was interrupted. Inspect the module's state and the VM in Proxmox before retrying",
                    limit.as_secs()
                )));
            }
        };
        let transcript = transcript.into_inner().unwrap_or_else(|e| e.into_inner());
        let stdout = if stream == Stream::Json { redact(&stdout_text).into_owned() } else { String::new() };
        Ok(Output { status: status.code().unwrap_or(-1), stdout, transcript })
    }
}

/// Append `line` to `buf`, failing once the output passes [`OUTPUT_CAP`].
fn push_capped(buf: &mut String, line: &str, what: &str) -> Result<(), CapError> {
    if buf.len() + line.len() > OUTPUT_CAP {
        return Err(CapError::failed(format!("{what}: printed more than {} MiB", OUTPUT_CAP >> 20)));
    }
    buf.push_str(line);
    buf.push('\n');
    Ok(())
}

/// SIGINT, then SIGKILL after the grace period.
async fn interrupt(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) on our own child's pid, which `child` has not reaped
        // (it still holds the id), with a plain signal; no memory is touched.
        #[allow(unsafe_code, reason = "kill(2) on our own unreaped child: no memory is touched")]
        unsafe {
            libc::kill(pid, libc::SIGINT);
        }
        if tokio::time::timeout(INTERRUPT_GRACE, child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = child.kill().await;
}

async fn read_lines(
    r: impl AsyncRead + Unpin,
    mut each: impl FnMut(&str) -> Result<(), CapError>,
) -> Result<(), CapError> {
    let mut lines = BufReader::new(r).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => each(&line)?,
            Ok(None) => return Ok(()),
            Err(e) => return Err(CapError::failed(format!("terraform: reading its output: {e}"))),
        }
    }
}

/// The credential variables of both provider flavours (docs/TERRAFORM.md).
fn credential_env(creds: &Credentials) -> Vec<(String, String)> {
    let endpoint = creds.endpoint.trim_end_matches('/');
    let token = creds.token.expose();
    let (token_id, secret) = token.split_once('=').unwrap_or((token, ""));
    let insecure = if creds.tls == TlsTrust::Insecure { "true" } else { "false" };
    let mut env = vec![
        ("PM_API_URL".to_string(), format!("{endpoint}/api2/json")),
        ("PM_API_TOKEN_ID".into(), token_id.to_string()),
        ("PM_API_TOKEN_SECRET".into(), secret.to_string()),
        ("PM_TLS_INSECURE".into(), insecure.into()),
        ("PROXMOX_VE_ENDPOINT".into(), format!("{endpoint}/")),
        ("PROXMOX_VE_API_TOKEN".into(), token.to_string()),
        ("PROXMOX_VE_INSECURE".into(), insecure.into()),
    ];
    if let TlsTrust::CaFile(ca) = &creds.tls {
        env.push(("SSL_CERT_FILE".into(), ca.display().to_string()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_reach_terraform_in_each_flavours_own_variables() {
        let creds = Credentials {
            endpoint: "https://pve1.lab:8006/".into(),
            token: Secret::new("root@pam!cradle=canary-5e1f".into()),
            tls: TlsTrust::CaFile("/etc/cradle/ca.pem".into()),
        };
        let env: std::collections::BTreeMap<_, _> = credential_env(&creds).into_iter().collect();
        assert_eq!(env["PM_API_URL"], "https://pve1.lab:8006/api2/json");
        assert_eq!(
            (env["PM_API_TOKEN_ID"].as_str(), env["PM_API_TOKEN_SECRET"].as_str()),
            ("root@pam!cradle", "canary-5e1f")
        );
        assert_eq!(env["PROXMOX_VE_ENDPOINT"], "https://pve1.lab:8006/");
        assert_eq!(env["PROXMOX_VE_API_TOKEN"], "root@pam!cradle=canary-5e1f");
        assert_eq!((env["PM_TLS_INSECURE"].as_str(), env["SSL_CERT_FILE"].as_str()), ("false", "/etc/cradle/ca.pem"));
    }
}
