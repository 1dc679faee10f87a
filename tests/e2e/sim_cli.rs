//! `cradle sim serve`: the simulator as a server prints what a client needs
//! (API URL, token, certificate fingerprint), and that is enough to talk to it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use cradle_tests::cradle_bin;

#[test]
fn sim_serve_prints_the_api_url_token_and_fingerprint_and_answers() {
    let state = tempfile::tempdir().expect("tmp");
    let mut child = Command::new(cradle_bin())
        .args(["sim", "serve", "--listen", "127.0.0.1:0", "--time-scale", "0", "--nodes", "pve1,pve2"])
        .arg("--state-dir")
        .arg(state.path().join("sim"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cradle sim serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = std::collections::BTreeMap::new();
    for line in lines.by_ref() {
        let line = line.expect("line");
        for key in ["API URL:", "API token:", "fingerprint:"] {
            if let Some(v) = line.trim().strip_prefix(key) {
                seen.insert(key, v.trim().to_string());
            }
        }
        if line.contains("Press Ctrl-C") {
            break;
        }
    }
    let url = seen.get("API URL:").expect("API URL printed").clone();
    let token = seen.get("API token:").expect("token printed").clone();
    let fingerprint = seen.get("fingerprint:").expect("fingerprint printed").clone();
    assert!(url.starts_with("https://127.0.0.1:") && url.ends_with("/api2/json"), "{url}");
    assert!(token.starts_with("root@pam!") && token.contains('='), "token form");
    assert_eq!(fingerprint.split(':').count(), 32, "{fingerprint}");
    // Talk to it with the printed values: pinned TLS, the token, a real request.
    let client = cradle::caps::proxmox::client::ProxmoxClient::new(cradle::caps::proxmox::client::ClientSettings {
        endpoint: url.trim_end_matches("/api2/json").to_string(),
        token,
        verify: cradle::caps::proxmox::tls::TlsVerify::Fingerprint(fingerprint),
        timeout: std::time::Duration::from_secs(10),
        retry: Default::default(),
        task_time_scale: 1.0,
    })
    .expect("client");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    let vms = rt.block_on(client.list_vms()).expect("list vms");
    assert!(vms.iter().any(|v| v.template && v.name.as_deref() == Some("debian-12-cloud")), "seeded template");
    let _ = child.kill();
    let _ = child.wait();
}
