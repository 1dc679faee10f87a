//! The `ssh` capability's WIT adapter: every call is checked against the grant
//! (the login — user, host and port — must be one of the call's guests or
//! nodes or a listed host, an upload must land in a granted directory, a
//! plugin may pin or forget only the host keys of guests its run owns),
//! journaled, and only then run through the environment's [`SshClient`]. An
//! upload is also confined on the remote side: the directory must resolve
//! (symlinks followed by the remote `realpath`) inside the granted directory
//! the path is in, else the call is `denied` (see [`SshClient::upload_within`]).
//! Output streams reach the plugin as lossy UTF-8.

use std::sync::Arc;

use super::scope::{SshAction, SshCall, upload_dir_of};
use super::{SshClient, Target};
use crate::caps::Call;
use crate::caps::context::CapCtx;
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::ssh;
use crate::contract::bindings::cradle::host::types::Error as WitError;

impl CapCtx {
    /// The environment's SSH client, or a `failed` error saying there is none.
    fn ssh_client(&self) -> Result<Arc<SshClient>, CapError> {
        self.services.ssh.clone().ok_or_else(|| CapError::failed("ssh: this environment has no SSH client configured"))
    }
}

impl CapCtx {
    /// Stream the local file `local` into `part` on `t` (`cat > PART`, through
    /// `sudo -n` when `sudo`), checked as an upload of `dest` (the name the
    /// caller renames `part` to, in the same directory) and journaled like
    /// `upload`. The file is read by `ssh` itself, never held in memory. Not
    /// atomic on its own: the caller verifies `part` and renames it.
    pub(crate) fn upload_file(
        &self,
        t: &ssh::Target,
        local: &std::path::Path,
        part: &str,
        dest: &str,
        sudo: bool,
        timeout: std::time::Duration,
    ) -> Result<super::ExecOutput, CapError> {
        let same_dir = std::path::Path::new(part).parent() == std::path::Path::new(dest).parent();
        if !same_dir {
            return Err(CapError::invalid(format!("ssh: upload of {part}: it must be in the directory of {dest}")));
        }
        self.guard("upload-file", login(t, SshAction::Upload(dest)), || {
            let client = self.ssh_client()?;
            let file = std::fs::File::open(local)
                .map_err(|e| CapError::failed(format!("ssh: cannot open {} for the upload: {e}", local.display())))?;
            let s = if sudo { "sudo -n " } else { "" };
            // The directory is the caller's, made 0700: the file's own mode
            // (the login's umask) does not expose it.
            let command = format!("{s}tee {} >/dev/null", super::shell_quote(part));
            self.block_on(client.exec_with_file(&target(t), &command, file, timeout))
        })
    }
}

impl CapCtx {
    /// Run the project's playbook `playbook` against `t` with `extra_vars`
    /// (`ssh::playbook`, workflows only), checked as a login to `t` plus the
    /// playbook's path against `ssh.playbooks`, and journaled. The path must
    /// also resolve (symlinks followed) inside a granted directory.
    pub(crate) fn playbook(
        &self,
        t: &ssh::Target,
        playbook: &str,
        extra_vars: &serde_json::Value,
        timeout_ms: u64,
    ) -> Result<super::playbook::Recap, CapError> {
        // A playbook may change anything the run read from the guest.
        self.run.held_reads.forget_changeable();
        self.guard("playbook", login(t, SshAction::Playbook(playbook)), || {
            let client = self.ssh_client()?;
            let ansible = self.services.ansible.clone().ok_or_else(|| {
                CapError::failed("ssh::playbook: this environment has no Ansible configured ([ansible] in cradle.toml)")
            })?;
            let resolved = self.resolve_playbook(playbook)?;
            let name = self
                .scope
                .vms
                .iter()
                .find(|vm| vm.ssh.as_ref().is_some_and(|l| l.host == t.host && l.port == t.port))
                .map_or_else(|| t.host.clone(), |vm| vm.name.clone());
            let run = super::playbook::PlaybookRun {
                playbook: &resolved,
                shown: playbook,
                name: &name,
                target: &target(t),
                extra_vars,
                project_dir: &self.services.project_dir,
                run_id: &self.run.run_id,
                timeout: self.clamp_timeout(timeout_ms, crate::caps::budget::TimeoutArg::Playbook),
            };
            self.block_on(ansible.run(&client, &run))
        })
    }

    /// What `playbook` would check before running, without running anything
    /// (`ssh::check_playbook`, for a workflow's validate step): the grant,
    /// the playbook's real path, and that the `ansible-playbook` exists.
    pub(crate) fn check_playbook(&self, t: &ssh::Target, playbook: &str) -> Result<(), CapError> {
        self.guard("check-playbook", login(t, SshAction::Playbook(playbook)), || {
            let ansible = self.services.ansible.clone().ok_or_else(|| {
                CapError::failed("ssh::playbook: this environment has no Ansible configured ([ansible] in cradle.toml)")
            })?;
            self.resolve_playbook(playbook)?;
            ansible.check_command()
        })
    }

    /// `playbook` inside the project, with symlinks followed, when it lies in
    /// one of the granted directories (also resolved); else `denied`.
    fn resolve_playbook(&self, playbook: &str) -> Result<std::path::PathBuf, CapError> {
        let project = &self.services.project_dir;
        let path = project.join(playbook);
        let real = std::fs::canonicalize(&path).map_err(|e| {
            CapError::not_found(format!(
                "ssh::playbook: playbook `{playbook}` cannot be read ({}: {e}); write it there or fix the path",
                path.display()
            ))
        })?;
        let dirs = self.grants.ssh.as_ref().map(|g| g.playbooks.as_slice()).unwrap_or_default();
        let inside =
            dirs.iter().filter_map(|d| std::fs::canonicalize(project.join(d)).ok()).any(|d| real.starts_with(d));
        if !inside || !real.is_file() {
            return Err(CapError::new(
                crate::contract::ErrorKind::Denied,
                format!(
                    "ssh: playbook `{playbook}` resolves to {}, which is not a file inside {}.ssh.playbooks (a \
                     symlink may not lead out of the granted directory)",
                    real.display(),
                    self.origin
                ),
            ));
        }
        Ok(real)
    }
}

fn target(t: &ssh::Target) -> Target {
    Target { host: t.host.clone(), port: t.port, user: t.user.clone() }
}

fn login<'a>(t: &'a ssh::Target, action: SshAction<'a>) -> Call<'a> {
    Call::Ssh(SshCall { host: &t.host, port: t.port, user: Some(&t.user), action })
}

impl ssh::Host for CapCtx {
    fn exec(
        &mut self,
        t: ssh::Target,
        command: String,
        stdin: Option<Vec<u8>>,
        timeout_ms: u64,
    ) -> Result<ssh::ExecOutput, WitError> {
        // A command may change what the run read from the cluster (a guest
        // that powers off, `qm` on a node).
        self.run.held_reads.forget_changeable();
        self.guard("exec", login(&t, SshAction::Connect), || {
            let client = self.ssh_client()?;
            let timeout = self.clamp_timeout(timeout_ms, crate::caps::budget::TimeoutArg::SshExec);
            let out = self.block_on(client.exec(&target(&t), &command, stdin.as_deref(), timeout))?;
            Ok(ssh::ExecOutput {
                exit_code: out.exit_code,
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        })
        .map_err(Into::into)
    }

    fn upload(
        &mut self,
        t: ssh::Target,
        remote_path: String,
        content: Vec<u8>,
        mode: u32,
        sudo: bool,
    ) -> Result<(), WitError> {
        self.guard("upload", login(&t, SshAction::Upload(&remote_path)), || {
            let client = self.ssh_client()?;
            // The policy passed, so the path is inside a granted directory.
            let dirs = self.grants.ssh.as_ref().map(|g| g.upload_dirs.as_slice()).unwrap_or_default();
            let within = upload_dir_of(&remote_path, dirs).map(|d| super::Confine {
                dir: d.display().to_string(),
                key: format!("{}.ssh.upload_dirs", self.origin),
            });
            self.block_on(client.upload_within(&target(&t), &remote_path, &content, mode, sudo, within.as_ref()))
        })
        .map_err(Into::into)
    }

    fn wait_for(&mut self, t: ssh::Target, timeout_ms: u64) -> Result<(), WitError> {
        self.guard("wait-for", login(&t, SshAction::Connect), || {
            let client = self.ssh_client()?;
            let timeout = self.clamp_timeout(timeout_ms, crate::caps::budget::TimeoutArg::SshWaitFor);
            self.block_on(client.wait_for(&target(&t), timeout))
        })
        .map_err(Into::into)
    }

    fn trust_host_key(&mut self, host: String, port: u16, public_key: String) -> Result<(), WitError> {
        let call = Call::Ssh(SshCall { host: &host, port, user: None, action: SshAction::HostKey });
        self.guard("trust-host-key", call, || self.ssh_client()?.trust_host_key(&host, port, &public_key).map(|_| ()))
            .map_err(Into::into)
    }

    fn trust_host_key_fingerprint(
        &mut self,
        host: String,
        port: u16,
        kind: String,
        fingerprint: String,
        timeout_ms: u64,
    ) -> Result<String, WitError> {
        let call = Call::Ssh(SshCall { host: &host, port, user: None, action: SshAction::HostKey });
        self.guard("trust-host-key-fingerprint", call, || {
            let client = self.ssh_client()?;
            let timeout = self.clamp_timeout(timeout_ms, crate::caps::budget::TimeoutArg::SshWaitFor);
            self.block_on(client.trust_by_fingerprint(&host, port, &kind, &fingerprint, timeout))
        })
        .map_err(Into::into)
    }

    fn forget_host_key(&mut self, host: String, port: u16) -> Result<(), WitError> {
        let call = Call::Ssh(SshCall { host: &host, port, user: None, action: SshAction::HostKey });
        self.guard("forget-host-key", call, || self.ssh_client()?.forget_host_key(&host, port).map(|_| ()))
            .map_err(Into::into)
    }
}
