//! The tests' Ansible: `ansible-playbook` from `scripts/ansible install`
//! (ansible-core from PyPI in `target/ansible/venv`), installed on first use
//! under the script's file lock, so parallel test processes install it once.
//! `CRADLE_ANSIBLE_PLAYBOOK` names another one.
//!
//! Failure mode: a panic naming the fix (python3-venv missing, no access to PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `ansible-playbook` the tests run.
pub fn playbook_command() -> PathBuf {
    if let Some(p) = std::env::var_os("CRADLE_ANSIBLE_PLAYBOOK") {
        return PathBuf::from(p);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ansible");
    let out = Command::new(&script)
        .arg("install")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "`scripts/ansible install` failed (it needs python3-venv and PyPI): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
