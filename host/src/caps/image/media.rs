//! Install media on Proxmox storage: ISO volumes (an installer, drivers) and
//! the answer-file ISO cradle builds for an unattended install.
//!
//! Contract:
//! - [`check_iso`]: a volume (`local:iso/x.iso`) must be listed by its storage
//!   on the node; a control-node file must exist. Nothing is changed.
//! - [`stage_iso`]: a volume is its own result; a control-node file is
//!   uploaded through the API as `iso` content named `<digest>-<name>`
//!   (reused when a volume of that name and size is listed), after a
//!   free-space check, PVE's `imgcopy` task verifying the SHA-256.
//! - [`answer_iso`]: the answer file (a control-node template) with its
//!   `{{ name }}` placeholders replaced by the given values (XML-escaped; a
//!   placeholder without a value is refused before anything is built), in an
//!   ISO ([`super::iso`]) as `autounattend.xml`, uploaded as
//!   `<vm>-answer-<digest>.iso`. The ISO is written owner-only to a private
//!   temporary directory and removed after the upload.
//!
//! Failure modes: a missing volume is `not-found` with the fix; a bad answer
//! template `invalid` naming the placeholder; upload failures as the API
//! reports them.

use std::collections::BTreeMap;
use std::path::Path;

use super::local::{ImageFile, check_file, sha256_file};
use crate::caps::context::CapCtx;
use crate::contract::bindings::cradle::host::proxmox::Host as _;
use crate::contract::{CapError, ErrorKind};

/// An ISO the type names: already on storage, or a control-node file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsoSource {
    /// `local:iso/x.iso`.
    Volume(String),
    /// A control-node file (relative to the project directory), uploaded to `storage`.
    File {
        /// The path as written.
        path: String,
        /// The storage it is uploaded to.
        storage: String,
    },
}

/// Check `source` on `node` before any side effect.
pub fn check_iso(c: &mut CapCtx, node: &str, source: &IsoSource, what: &str) -> Result<(), CapError> {
    match source {
        IsoSource::Volume(volid) => {
            let (storage, _) = volid.split_once(':').ok_or_else(|| {
                CapError::invalid(format!("{what}: `{volid}` is not an ISO volume (STORAGE:iso/FILE)"))
            })?;
            let listed = c
                .storage_content(node.to_string(), storage.to_string(), Some("iso".into()))
                .map_err(CapError::from_wit)?;
            if listed.iter().any(|v| &v.volid == volid) {
                return Ok(());
            }
            Err(CapError::new(
                ErrorKind::NotFound,
                format!(
                    "{what}: the ISO {volid} is not on storage {storage} of node {node}: upload it there (the web UI, \
                     or name the file on the control node as `path`); nothing was changed"
                ),
            ))
        }
        IsoSource::File { path, .. } => check_file(&c.services.project_dir.clone(), path, None, what).map(drop),
    }
}

/// Upload `file` to `storage` on `node` as the ISO volume `filename`, unless a
/// volume of that name and size is there. Returns the volume id.
fn upload_iso(
    c: &mut CapCtx,
    node: &str,
    storage: &str,
    file: &Path,
    size: u64,
    filename: &str,
    what: &str,
) -> Result<String, CapError> {
    let volid = format!("{storage}:iso/{filename}");
    let listed =
        c.storage_content(node.to_string(), storage.to_string(), Some("iso".into())).map_err(CapError::from_wit)?;
    if listed.iter().any(|v| v.volid == volid && v.size == size) {
        return Ok(volid);
    }
    let status = c.storage_status(node.to_string(), storage.to_string()).map_err(CapError::from_wit)?;
    if status.avail < size {
        return Err(CapError::failed(format!(
            "{what}: storage {storage} on node {node} has {} bytes free, the ISO {filename} needs {size}; nothing was \
             uploaded",
            status.avail
        )));
    }
    let digest = sha256_file(file)?;
    let timeout = super::long_timeout(size);
    let upid = c.upload_volume(node, storage, "iso", file, filename, &digest, timeout).map_err(CapError::from_wit)?;
    let task = c.wait_task(node.to_string(), upid.clone(), timeout.as_millis() as u64).map_err(CapError::from_wit)?;
    if !task.ok {
        let why = task.exitstatus.unwrap_or_else(|| "still running".into());
        return Err(CapError::failed(format!("{what}: PVE did not take the ISO {filename} on {node} ({upid}): {why}")));
    }
    Ok(volid)
}

/// The volume id of `source` on `node`, uploading a control-node file.
pub fn stage_iso(c: &mut CapCtx, node: &str, source: &IsoSource, what: &str) -> Result<String, CapError> {
    match source {
        IsoSource::Volume(volid) => {
            check_iso(c, node, source, what)?;
            Ok(volid.clone())
        }
        IsoSource::File { path, storage } => {
            let f: ImageFile = check_file(&c.services.project_dir.clone(), path, None, what)?;
            let digest = sha256_file(&f.path)?;
            let filename = format!("{}-{}", &digest[..16], f.name);
            upload_iso(c, node, storage, &f.path, f.size, &filename, what)
        }
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

/// `template` with every `{{ name }}` replaced by `vars[name]`, XML-escaped.
pub fn render_answer(template: &str, vars: &BTreeMap<String, String>, what: &str) -> Result<String, CapError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or_else(|| CapError::invalid(format!("{what}: the answer file has a `{{{{` without its `}}}}`")))?;
        let name = after[..close].trim();
        let value = vars.get(name).ok_or_else(|| {
            CapError::invalid(format!(
                "{what}: the answer file names `{{{{ {name} }}}}`, which the type gives no value (it gives: {})",
                vars.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
        out.push_str(&xml_escape(value));
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The answer file rendered from the template at `path` (relative to the
/// project) with `vars`: what `answer_iso` puts on the ISO, and what
/// `disk_image::check_answer` checks before any side effect (the file
/// exists, is UTF-8, every placeholder has a value).
pub fn answer_file(
    project: &std::path::Path,
    path: &str,
    vars: &BTreeMap<String, String>,
    what: &str,
) -> Result<String, CapError> {
    let f = check_file(project, path, None, what)?;
    let template = std::fs::read_to_string(&f.path).map_err(|e| {
        CapError::invalid(format!("{what}: the answer file {} is not UTF-8 text: {e}", f.path.display()))
    })?;
    render_answer(&template, vars, what)
}

/// Build the answer ISO of `vm_name` from the template at `path` and upload
/// it to `storage` on `node`; its volume id.
pub fn answer_iso(
    c: &mut CapCtx,
    node: &str,
    storage: &str,
    vm_name: &str,
    path: &str,
    vars: &BTreeMap<String, String>,
    what: &str,
) -> Result<String, CapError> {
    let answer = answer_file(&c.services.project_dir, path, vars, what)?;
    let iso = super::iso::build("cradle_answer", &[("autounattend.xml".into(), answer.into_bytes())])
        .map_err(|e| CapError::invalid(format!("{what}: {e}")))?;
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&iso));
    let filename = format!("{vm_name}-answer-{}.iso", &digest[..16]);
    let dir = std::env::temp_dir().join(format!("cradle-answer-{}-{}", std::process::id(), &digest[..16]));
    crate::state::create_private_dir(&dir).map_err(|e| CapError::failed(format!("{what}: {e}")))?;
    let file = dir.join(&filename);
    let result = crate::state::write_private_file_atomic(&file, &iso)
        .map_err(|e| CapError::failed(format!("{what}: {e}")))
        .and_then(|()| upload_iso(c, node, storage, &file, iso.len() as u64, &filename, what));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_escaped_and_a_missing_one_is_refused() {
        let vars = BTreeMap::from([("hostname".to_string(), "win-1".to_string()), ("org".into(), "A&B <lab>".into())]);
        let out =
            render_answer("<ComputerName>{{ hostname }}</ComputerName><Org>{{org}}</Org>", &vars, "w").expect("ok");
        assert_eq!(out, "<ComputerName>win-1</ComputerName><Org>A&amp;B &lt;lab&gt;</Org>");
        let e = render_answer("{{ password }}", &vars, "win-1: answer").expect_err("missing");
        assert!(e.message.contains("`{{ password }}`") && e.message.contains("hostname, org"), "{}", e.message);
        assert!(render_answer("{{ hostname", &vars, "w").is_err());
    }
}
