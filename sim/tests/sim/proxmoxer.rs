//! Interop with a real client: proxmoxer (PyPI) drives clone → config → start → status →
//! task wait → stop → destroy with TLS verification against the simulator's CA.
//!
//! Skips (with the reason printed) only when python3 cannot import proxmoxer; CI
//! installs it (`pip install proxmoxer requests`).

use crate::common;

use std::process::Stdio;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxmoxer_drives_a_full_vm_lifecycle_with_certificate_verification() {
    let probe = std::process::Command::new("python3").args(["-c", "import proxmoxer, requests"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            println!(
                "SKIPPED: python3 cannot import proxmoxer/requests ({}); run `pip install proxmoxer requests`",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            println!("SKIPPED: python3 is not available ({e})");
            return;
        }
    }
    let c = common::start(0.01, |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, c.ca_pem()).unwrap();
    let token = c.token();
    let (id, secret) = token.split_once('=').unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/proxmoxer_flow.py");
    let out = tokio::process::Command::new("python3")
        .arg(script)
        .env("SIM_HOST", c.api_addr().ip().to_string())
        .env("SIM_PORT", c.api_addr().port().to_string())
        .env("SIM_TOKEN_ID", id)
        .env("SIM_TOKEN_SECRET", secret)
        .env("SIM_CA_FILE", &ca)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "proxmoxer flow failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("proxmoxer flow OK"), "{stdout}");
    let counts = c.request_counts();
    assert!(counts.get("GET /nodes/{node}/tasks/{upid}/status").copied().unwrap_or(0) >= 5, "{counts:?}");
}
