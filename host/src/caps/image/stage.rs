//! Staging a control-node image on a node (see the module docs of [`super`]):
//! the choice between the API (`api.rs`) and SSH, and the SSH way: directory
//! checks, free space, `.part` upload, verification on the node, rename.
//!
//! Every remote step is one `ssh` call through the adapter (`exec` for the
//! checks, `upload-file` for the stream), as the node login of cradle.toml,
//! with `sudo -n` when that login is not root.

use std::time::Duration;

use super::local::{ImageFile, check_digest, sha256_cached};
use super::{Staged, long_timeout};
use crate::caps::context::CapCtx;
use crate::caps::creation::snippets::node_target;
use crate::caps::ssh::shell_quote;
use crate::contract::bindings::cradle::host::proxmox::Host as _;
use crate::contract::bindings::cradle::host::ssh;
use crate::contract::{CapError, ErrorKind};

/// The node directory images are staged in: on the node's disk, never /tmp.
pub const DEFAULT_NODE_DIR: &str = "/var/tmp/cradle-images";

/// How long a quick remote check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// Refuse a staging directory under `/tmp` by its text (no I/O).
fn check_dir_text(dir: &str, what: &str) -> Result<(), CapError> {
    let p = std::path::Path::new(dir);
    let plain = p.is_absolute()
        && p.components().all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)));
    if !plain || p == std::path::Path::new("/") {
        return Err(CapError::invalid(format!(
            "{what}: the image directory `{dir}` on the node must be an absolute directory without `.`/`..`"
        )));
    }
    if p.starts_with("/tmp") || p.starts_with("/dev/shm") || p.starts_with("/run") {
        return Err(CapError::invalid(format!(
            "{what}: the image directory `{dir}` is on a tmpfs on most nodes (small, and cleared at boot): images \
             go to {DEFAULT_NODE_DIR} (or another directory on the node's disk)"
        )));
    }
    Ok(())
}

/// One remote command that must exit 0; returns its stdout.
fn run(c: &mut CapCtx, t: &ssh::Target, command: String, what: &str) -> Result<String, CapError> {
    let out = ssh::Host::exec(c, t.clone(), command.clone(), None, CHECK_TIMEOUT.as_millis() as u64)
        .map_err(CapError::from_wit)?;
    if out.exit_code != Some(0) {
        return Err(CapError::failed(format!(
            "{what}: `{command}` on {}@{}:{} failed (exit {}): {}",
            t.user,
            t.host,
            t.port,
            out.exit_code.map_or_else(|| "by signal".into(), |c| c.to_string()),
            out.stderr.trim()
        )));
    }
    Ok(out.stdout)
}

/// `command` (which ends in a path argument) run on `dir`, else on its
/// parent, and so on up to `/`: a shell `||` chain, so what a directory that
/// does not exist yet would be on is read from its nearest existing ancestor
/// without creating it (`findmnt --target` and `df` fail on a missing path).
fn on_nearest_existing(command: &str, dir: &str) -> String {
    let mut alternatives = Vec::new();
    let mut p = Some(std::path::Path::new(dir));
    while let Some(d) = p {
        alternatives.push(format!("{command} {}", shell_quote(&d.display().to_string())));
        p = d.parent();
    }
    alternatives.join(" || ")
}

/// The hex digest `sha256sum` printed for one file, if it printed one.
fn parse_sha256sum(stdout: &str) -> Option<String> {
    let word = stdout.split_whitespace().next()?.to_ascii_lowercase();
    (word.len() == 64 && word.bytes().all(|b| b.is_ascii_hexdigit())).then_some(word)
}

/// The last line of `df -B1 --output=avail` as a number.
fn parse_df_avail(stdout: &str) -> Option<u64> {
    stdout.lines().rev().map(str::trim).find(|l| !l.is_empty())?.parse().ok()
}

/// How an image reaches the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// The API where the cluster takes disk images as `import` content
    /// (PVE 8.4 and later, the storage has `import`), else SSH.
    Auto,
    /// Always the API.
    Api,
    /// Always SSH.
    Ssh,
}

impl Transfer {
    /// `auto`, `api` or `ssh`.
    pub fn parse(s: &str) -> Option<Transfer> {
        match s {
            "auto" => Some(Transfer::Auto),
            "api" => Some(Transfer::Api),
            "ssh" => Some(Transfer::Ssh),
            _ => None,
        }
    }
}

/// Where and how [`stage`] puts an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageOptions {
    /// API or SSH.
    pub transfer: Transfer,
    /// The storage an API upload goes to (`import` content).
    pub storage: String,
    /// The node directory an SSH upload goes to.
    pub dir: String,
}

impl Default for StageOptions {
    fn default() -> Self {
        StageOptions { transfer: Transfer::Auto, storage: "local".into(), dir: DEFAULT_NODE_DIR.into() }
    }
}

/// Stage `image` on `node` (see the module docs of [`super`]); `sha256` is
/// the inventory's digest, checked on the control node first.
pub fn stage(
    c: &mut CapCtx,
    node: &str,
    image: &ImageFile,
    sha256: Option<&str>,
    opts: &StageOptions,
    what: &str,
) -> Result<Staged, CapError> {
    if opts.transfer != Transfer::Api {
        check_dir_text(&opts.dir, what)?;
    }
    // Hashed at the check already (the same process, the file unchanged):
    // that digest is reused, else the file is read now.
    let digest = sha256_cached(&image.path)?;
    if let Some(want) = sha256 {
        check_digest(image, want, &digest, what)?;
    }
    let api = match opts.transfer {
        Transfer::Api => true,
        Transfer::Ssh => false,
        Transfer::Auto => {
            let version = c.pve_version().map_err(CapError::from_wit)?;
            super::api::supports_import_upload(&version) && {
                let st = c.storage_status(node.to_string(), opts.storage.clone()).map_err(CapError::from_wit)?;
                st.content.iter().any(|x| x == "import")
            }
        }
    };
    if api {
        return super::api::stage_api(c, node, &opts.storage, image, &digest, what);
    }
    stage_ssh(c, node, image, &digest, &opts.dir, what)
}

/// [`stage`] over SSH into `dir` on the node.
fn stage_ssh(
    c: &mut CapCtx,
    node: &str,
    image: &ImageFile,
    digest: &str,
    dir: &str,
    what: &str,
) -> Result<Staged, CapError> {
    let digest = digest.to_string();
    let t = node_target(c, node)?;
    let s = if t.user == "root" { "" } else { "sudo -n " };
    let qdir = shell_quote(dir);
    // Refused before anything is created on the node.
    let fstype = run(c, &t, on_nearest_existing(&format!("{s}findmnt -n -o FSTYPE --target"), dir), what)?;
    if fstype.trim() == "tmpfs" {
        return Err(CapError::invalid(format!(
            "{what}: {dir} on node {node} is on a tmpfs (memory, cleared at boot): set the image directory to one on \
             the node's disk, such as {DEFAULT_NODE_DIR}"
        )));
    }
    let final_path = format!("{}/{}-{}", dir.trim_end_matches('/'), &digest[..16], image.name);
    let part = format!("{}/.{}-{}.part", dir.trim_end_matches('/'), &digest[..16], image.name);
    let staged = |uploaded| Staged {
        import_from: final_path.clone(),
        via: "ssh".into(),
        uploaded,
        bytes: image.size,
        sha256: digest.clone(),
    };
    // A complete copy (the final name exists only after verification) is reused.
    let have = ssh::Host::exec(
        c,
        t.clone(),
        format!("{s}sha256sum {}", shell_quote(&final_path)),
        None,
        long_timeout(image.size).as_millis() as u64,
    )
    .map_err(CapError::from_wit)?;
    if have.exit_code == Some(0) && parse_sha256sum(&have.stdout).as_deref() == Some(digest.as_str()) {
        return Ok(staged(false));
    }
    let avail_out = run(c, &t, on_nearest_existing(&format!("{s}df -B1 --output=avail"), dir), what)?;
    let avail = parse_df_avail(&avail_out).ok_or_else(|| {
        CapError::failed(format!("{what}: cannot read the free space of {dir} on node {node} from `df`: {avail_out:?}"))
    })?;
    if avail < image.size {
        return Err(CapError::failed(format!(
            "{what}: node {node} has {avail} bytes free in {dir}, the image {} needs {}: free space on the node (or \
             set another image directory); nothing was uploaded",
            image.name, image.size
        )));
    }
    // A `.part` file is never trusted, and never written to again: it is
    // removed first, so this upload writes a new file. An upload a killed run
    // left going (its `ssh` outlives it) then writes only to the unlinked old
    // one, and never renames it (the rename is this process's next command).
    let qpart = shell_quote(&part);
    run(c, &t, format!("{s}mkdir -p {qdir} && {s}rm -f {qpart}"), what)?;
    let sudo = !s.is_empty();
    let out = c.upload_file(&t, &image.path, &part, &final_path, sudo, long_timeout(image.size))?;
    if out.exit_code != Some(0) {
        return Err(CapError::new(
            ErrorKind::Failed,
            format!(
                "{what}: the upload of {} to {part} on node {node} failed (exit {}): {}; the partial file is never \
                 used, a rerun uploads it again",
                image.path.display(),
                out.exit_code.map_or_else(|| "by signal".into(), |c| c.to_string()),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    let sum = run(c, &t, format!("{s}sha256sum {}", shell_quote(&part)), what)?;
    if parse_sha256sum(&sum).as_deref() != Some(digest.as_str()) {
        let _ = run(c, &t, format!("{s}rm -f {}", shell_quote(&part)), what);
        return Err(CapError::failed(format!(
            "{what}: the copy of {} on node {node} has SHA-256 {:?}, not {digest}: the transfer was damaged and the \
             copy removed; rerun",
            image.name,
            parse_sha256sum(&sum)
        )));
    }
    run(c, &t, format!("{s}mv -fT {} {}", shell_quote(&part), shell_quote(&final_path)), what)?;
    Ok(staged(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_directory_under_tmp_is_refused_before_any_call() {
        for dir in ["/tmp", "/tmp/images", "/dev/shm/x", "/run/x"] {
            let e = check_dir_text(dir, "ha-1").expect_err(dir);
            assert!(e.message.contains("tmpfs"), "{}", e.message);
        }
        for dir in ["tmp", "/var/tmp/../tmp", "/"] {
            assert!(check_dir_text(dir, "ha-1").is_err(), "{dir}");
        }
        check_dir_text(DEFAULT_NODE_DIR, "ha-1").expect("the default");
    }

    #[test]
    fn the_staging_filesystem_is_read_from_the_nearest_existing_directory_without_creating_it() {
        let cmd = on_nearest_existing("sudo -n findmnt -n -o FSTYPE --target", "/var/tmp/cradle images");
        assert_eq!(
            cmd,
            "sudo -n findmnt -n -o FSTYPE --target '/var/tmp/cradle images' || sudo -n findmnt -n -o FSTYPE \
             --target '/var/tmp' || sudo -n findmnt -n -o FSTYPE --target '/var' || sudo -n findmnt -n -o FSTYPE \
             --target '/'"
        );
        assert!(!cmd.contains("mkdir"), "nothing is created before the tmpfs refusal");
    }

    #[test]
    fn remote_outputs_are_parsed_strictly() {
        let d = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(parse_sha256sum(&format!("{d}  /var/tmp/x\n")).as_deref(), Some(d));
        assert_eq!(parse_sha256sum("sha256sum: /x: No such file or directory\n"), None);
        assert_eq!(parse_df_avail("    Avail\n1234567\n"), Some(1_234_567));
        assert_eq!(parse_df_avail("Avail\n"), None);
    }
}
