//! [`SshClient::upload`]: writes a remote file atomically through stdin.
//!
//! The content goes to the stdin of `install -m MODE /dev/stdin PATH.tmp.<random>
//! && mv -fT PATH.tmp.<random> PATH` (each through `sudo -n` when asked):
//! `install` creates the temp file with its final mode, `mv -T` replaces `PATH`
//! in one rename and refuses a directory. If the upload fails, cradle removes
//! the temp file with a separate `rm -f` (best effort). Readers on the remote
//! see the old file or the new one, never a partial one. The path travels single-quoted; paths that are not
//! absolute, contain NUL/newline/`.`/`..` components, or name a directory are
//! refused. Nothing is ever passed on the command line but the path and mode.
//!
//! Confinement ([`SshClient::upload_within`]): the grant names directories,
//! but a path's text says nothing about symlinks on the remote side. When the
//! file's directory is below the granted one, the remote `realpath -e` of both
//! is read first and the upload goes ahead only if the directory resolves to
//! the granted directory or inside it — then into the resolved directory, so
//! no symlink is followed afterwards; otherwise it is `denied` naming the
//! grant key. What follows symlinks and what does not: `install` unlinks a
//! symlink at its destination (the temp name) instead of writing through it,
//! and `mv -T` (rename) replaces a symlink at the final name, so a symlink
//! planted at the file's own name is replaced, never followed; a symlink
//! among the directories is the one case the check exists for. The granted
//! directory itself is the operator's to place (it may be a symlink).
//! Residual race: something already writing inside the granted directory on
//! the node could swap a checked subdirectory between the check and the write.

use std::path::{Component, Path};
use std::time::Duration;

use super::keys::random_hex;
use super::stream::excerpt;
use super::{Confine, SshClient, Target, check_target, shell_quote};
use crate::contract::{CapError, ErrorKind};

/// How long one upload may take.
pub const UPLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// Checks a remote path for [`SshClient::upload`].
pub(crate) fn check_remote_path(t: &Target, path: &str) -> Result<(), CapError> {
    let p = Path::new(path);
    let ok = p.is_absolute()
        && path.len() <= 4096
        && !path.ends_with('/')
        && !path.chars().any(|c| c == '\0' || c == '\n' || c == '\r')
        && p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && p.components().count() > 1;
    if !ok {
        return Err(CapError::invalid(format!(
            "ssh {t}: upload path `{}` must be an absolute file path without `.`/`..` components, newlines or NULs",
            path.escape_debug()
        )));
    }
    Ok(())
}

/// The remote command that installs stdin at `path` with `mode` (temp suffix `suffix`).
/// The remote command: `install` creates the temporary file with its final
/// mode from the first byte (no window where a secret is world-readable),
/// then `mv -T` replaces the target atomically and refuses a directory. Plain
/// `&&`-chained commands, so any POSIX shell (or a node that only speaks that
/// subset) runs it; with `sudo` each command goes through `sudo -n`.
pub(crate) fn upload_command(path: &str, mode: u32, sudo: bool, suffix: &str) -> String {
    let q = shell_quote(path);
    let t = shell_quote(&temp_path(path, suffix));
    let s = if sudo { "sudo -n " } else { "" };
    format!("{s}install -m {mode:o} /dev/stdin {t} && {s}mv -fT {t} {q}")
}

/// Where the upload is written before it is moved into place.
pub(crate) fn temp_path(path: &str, suffix: &str) -> String {
    format!("{path}.tmp.{suffix}")
}

/// Why an upload's directory is not confined to its grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unconfined {
    /// `realpath` did not print the two paths asked for.
    #[error("realpath printed {printed:?}, not two paths")]
    Unreadable { printed: String },
    /// The directory resolves outside the granted one.
    #[error(
        "{dir} resolves to {real} on the remote host, outside the granted directory {granted_dir} ({granted}) of \
         {key}; a symlink inside it points elsewhere: remove it"
    )]
    Outside {
        /// The file's directory, as given.
        dir: String,
        /// Where it resolves.
        real: String,
        /// The granted directory, as written in the grant.
        granted_dir: String,
        /// Where that resolves.
        granted: String,
        /// The grant's config key.
        key: String,
    },
}

/// Checks the remote `realpath -e` output of (granted dir, file dir): the
/// file dir must be the granted dir or inside it. Returns the resolved file dir.
pub(crate) fn check_resolved<'o>(stdout: &'o str, dir: &str, c: &Confine) -> Result<&'o str, Unconfined> {
    let mut lines = stdout.lines();
    let (Some(granted), Some(real), None) = (lines.next(), lines.next(), lines.next()) else {
        return Err(Unconfined::Unreadable { printed: excerpt(stdout) });
    };
    let inside = Path::new(real).starts_with(granted) && real.starts_with('/');
    if !inside {
        return Err(Unconfined::Outside {
            dir: dir.to_string(),
            real: real.to_string(),
            granted_dir: c.dir.clone(),
            granted: granted.to_string(),
            key: c.key.clone(),
        });
    }
    Ok(real)
}

impl SshClient {
    /// The path to write `remote_path` at: itself when its directory is the
    /// granted one, else the file name inside the directory's remote
    /// `realpath`, after checking it resolves inside the granted directory.
    async fn confined_path(&self, t: &Target, remote_path: &str, sudo: bool, c: &Confine) -> Result<String, CapError> {
        let path = Path::new(remote_path);
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(CapError::invalid(format!("ssh {t}: upload path `{remote_path}` names no file")));
        };
        if dir == Path::new(&c.dir) {
            return Ok(remote_path.to_string());
        }
        let dir = dir.display().to_string();
        let s = if sudo { "sudo -n " } else { "" };
        let command = format!("{s}realpath -e -- {} {}", shell_quote(&c.dir), shell_quote(&dir));
        let out = self.exec(t, &command, None, UPLOAD_TIMEOUT).await?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.exit_code != Some(0) {
            return Err(CapError::failed(format!(
                "ssh {t}: upload to {remote_path}: cannot resolve {dir} inside {} on the remote host (realpath exit \
                 {}): check that the directory exists ({})",
                c.dir,
                out.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "by signal".into()),
                excerpt(&String::from_utf8_lossy(&out.stderr))
            )));
        }
        match check_resolved(&stdout, &dir, c) {
            Ok(real) => Ok(format!("{}/{}", real.trim_end_matches('/'), name.to_string_lossy())),
            Err(why) => Err(CapError::new(ErrorKind::Denied, format!("ssh: upload to `{remote_path}` on {t}: {why}"))),
        }
    }

    /// Writes `content` to `remote_path` on `t` with permission bits `mode`
    /// (≤ 0o7777), as the login user or through `sudo -n`, with no
    /// confinement (see [`SshClient::upload_within`]).
    pub async fn upload(
        &self,
        t: &Target,
        remote_path: &str,
        content: &[u8],
        mode: u32,
        sudo: bool,
    ) -> Result<(), CapError> {
        self.upload_within(t, remote_path, content, mode, sudo, None).await
    }

    /// [`SshClient::upload`], confined to `within` on the remote side (module
    /// docs): a directory that resolves outside it is `denied`.
    pub async fn upload_within(
        &self,
        t: &Target,
        remote_path: &str,
        content: &[u8],
        mode: u32,
        sudo: bool,
        within: Option<&Confine>,
    ) -> Result<(), CapError> {
        check_target(t)?;
        check_remote_path(t, remote_path)?;
        if mode > 0o7777 {
            return Err(CapError::invalid(format!("ssh {t}: mode {mode:o} is not a permission mode (at most 7777)")));
        }
        let resolved;
        let remote_path = match within {
            Some(c) => {
                resolved = self.confined_path(t, remote_path, sudo, c).await?;
                resolved.as_str()
            }
            None => remote_path,
        };
        let suffix = random_hex();
        let command = upload_command(remote_path, mode, sudo, &suffix);
        let out = self.exec(t, &command, Some(content), UPLOAD_TIMEOUT).await?;
        if out.exit_code == Some(0) {
            return Ok(());
        }
        // Best effort: do not leave the temporary file behind.
        let s = if sudo { "sudo -n " } else { "" };
        let cleanup = format!("{s}rm -f {}", shell_quote(&temp_path(remote_path, &suffix)));
        let _ = self.exec(t, &cleanup, None, UPLOAD_TIMEOUT).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let how = if sudo { "through `sudo -n`" } else { "as the login user" };
        let hint = if sudo && (stderr.contains("password is required") || stderr.contains("terminal is required")) {
            format!("`{}` needs passwordless sudo (NOPASSWD) on {} for uploads with sudo", t.user, t.host)
        } else if sudo && out.exit_code == Some(127) && stderr.contains("sudo") {
            format!("sudo is not installed on {}; install it or upload without sudo", t.host)
        } else if stderr.contains("directory") && (stderr.contains("overwrite") || stderr.contains("Is a directory")) {
            "the path is a directory; name the file to write".to_string()
        } else {
            let dir = Path::new(remote_path).parent().map(|d| d.display().to_string()).unwrap_or_default();
            format!("check that {dir} exists and is writable {how}")
        };
        Err(CapError::failed(format!(
            "ssh {t}: upload of {} bytes to {remote_path} (mode {mode:o}) {how} failed with exit {}: {hint} ({})",
            content.len(),
            out.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "by signal".into()),
            excerpt(&stderr)
        )))
    }
}
