//! Runs {{name}} against cradle's simulated Proxmox VE cluster, through the
//! `cradle` binary: `cradle plugin test` builds the component, provisions an
//! example inventory with it on a throwaway simulated cluster, provisions
//! again (nothing may change), removes the VMs, and fails on any error.
//!
//! Needs the `cradle` binary: on PATH, or named by the CRADLE variable
//! (`CRADLE=/path/to/cradle cargo test`).

use std::process::Command;

#[test]
fn the_plugin_works_through_cradle_on_the_simulated_cluster() {
    let cradle = std::env::var_os("CRADLE").unwrap_or_else(|| "cradle".into());
    let out = Command::new(&cradle)
        .args(["plugin", "test", env!("CARGO_MANIFEST_DIR"){{test_args}}])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {cradle:?} (install cradle or set CRADLE to its path): {e}")
        });
    assert!(
        out.status.success(),
        "cradle plugin test failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
