//! The upload's parameter checks and its `imgcopy` task (pve-storage
//! `src/PVE/API2/Storage/Status.pm` `upload`).
//!
//! Contract: [`validate`] runs the schema checks (`content` required, its enum — `iso,
//! vztmpl` before PVE 8.3, `iso, vztmpl, import` from 8.3; `checksum` and
//! `checksum-algorithm` require each other; the algorithm enum) and then Status.pm's
//! checks in its order: the storage (`storage 'X' does not exist`), a path (`can't
//! upload to storage type '<type>'`), the normalized filename's extension per content
//! (`wrong file extension`; `invalid filename or wrong extension` for import: `.ova`
//! in 8.3, `.ova|.qcow2|.raw|.vmdk` from 8.4, case-sensitive), the content enabled on
//! the storage (`storage 'X' does not support '<content>' content`). [`start`] returns
//! the UPID of an `imgcopy` task that lasts `timings.upload_per_gib` per GiB (scaled),
//! verifies the checksum (`checksum mismatch: got '..' != expect '..'`), checks qcow2 /
//! raw / vmdk images as untrusted (`crate::image::untrusted`), copies the temp file to
//! `<path>/import/`, `<path>/template/iso/` or `<path>/template/cache/` (overwriting)
//! and always removes the temp file. ISO content and OVA archives are not inspected
//! (a simulator assumption). The copy runs on a blocking thread.

use std::io::Read;
use std::sync::Arc;

use serde_json::json;

use super::{ApiError, ApiResult, Reply};
use crate::sim::{Sim, lock};

/// What the multipart body and the query gave.
#[derive(Debug, Default)]
pub struct Form {
    /// Query parameters.
    pub query: Vec<(String, String)>,
    /// Form fields before the file, in order.
    pub fields: Vec<(String, String)>,
    /// The file part's file name, as sent.
    pub filename: String,
    /// The node path of the temp file.
    pub tmpfilename: String,
}

impl Form {
    fn get(&self, k: &str) -> Option<&str> {
        self.fields.iter().chain(self.query.iter()).find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }
}

/// What the checks established.
#[derive(Debug)]
pub struct Checked {
    /// Destination node path.
    dest: String,
    /// `qcow2|raw|vmdk` for import images.
    image_format: Option<String>,
    checksum: Option<(String, String)>,
}

const ALGORITHMS: [&str; 6] = ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"];

/// `normalize_content_filename`: the path part removed, unsafe characters to `_`.
pub fn normalize(name: &str) -> String {
    let name = name.trim_end_matches('\n');
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    base.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect()
}

fn ends_with_ci(name: &str, exts: &[&str]) -> bool {
    let lower = name.to_ascii_lowercase();
    exts.iter().any(|e| lower.len() > e.len() + 1 && lower.ends_with(&format!(".{e}")))
}

pub fn validate(sim: &Sim, storage: &str, form: &Form) -> Result<Checked, ApiError> {
    let mut errors = std::collections::BTreeMap::new();
    let import = sim.cfg.has_import_content();
    let allowed: &[&str] = if import { &["iso", "vztmpl", "import"] } else { &["iso", "vztmpl"] };
    let content = form.get("content").unwrap_or("");
    if form.get("content").is_none() {
        errors.insert("content".to_string(), "property is missing and it is not optional".to_string());
    } else if !allowed.contains(&content) {
        errors.insert(
            "content".into(),
            format!("value '{content}' does not have a value in the enumeration '{}'", allowed.join(", ")),
        );
    }
    let (sum, algo) = (form.get("checksum"), form.get("checksum-algorithm"));
    match (sum, algo) {
        (Some(_), None) => {
            errors.insert("checksum-algorithm".into(), "missing property required by 'checksum'".into());
        }
        (None, Some(_)) => {
            errors.insert("checksum".into(), "missing property required by 'checksum-algorithm'".into());
        }
        _ => {}
    }
    if let Some(a) = algo.filter(|a| !ALGORITHMS.contains(a)) {
        errors.insert(
            "checksum-algorithm".into(),
            format!("value '{a}' does not have a value in the enumeration '{}'", ALGORITHMS.join(", ")),
        );
    }
    if form.filename.len() > 255 {
        errors.insert("filename".into(), format!("value may only be 255 characters long, got {}", form.filename.len()));
    }
    if !errors.is_empty() {
        return Err(ApiError::Params(errors));
    }
    let spec = super::nodes::find_storage(sim, storage)?;
    let Some(path) = spec.path.as_deref() else {
        return Err(ApiError::die(format!("can't upload to storage type '{}'", spec.kind)));
    };
    let filename = normalize(&form.filename);
    let (sub, image_format) = match content {
        "iso" if ends_with_ci(&filename, &["iso", "img"]) => ("template/iso", None),
        "vztmpl" if ends_with_ci(&filename, &["tar", "tar.gz", "tar.xz", "tar.zst", "tar.bz2"]) => {
            ("template/cache", None)
        }
        "iso" | "vztmpl" => return Err(ApiError::param("filename", "wrong file extension")),
        _ => {
            // From 8.4 (pve-storage 8.3.6) guest images too; 8.3 only OVA. Case-sensitive.
            let exts: &[&str] = if sim.cfg.pve_version_parts().is_some_and(|v| v >= (8, 4)) {
                &["ova", "qcow2", "raw", "vmdk"]
            } else {
                &["ova"]
            };
            let ext = filename.rsplit_once('.').filter(|(stem, _)| !stem.is_empty());
            let Some((_, ext)) = ext.filter(|(_, e)| exts.contains(e)) else {
                return Err(ApiError::param("filename", "invalid filename or wrong extension"));
            };
            ("import", (ext != "ova").then(|| ext.to_string()))
        }
    };
    if !spec.content.split(',').any(|c| c == content) {
        return Err(ApiError::die(format!("storage '{storage}' does not support '{content}' content")));
    }
    let dest = format!("{}/{sub}/{filename}", path.trim_end_matches('/'));
    let checksum = sum.zip(algo).map(|(s, a)| (a.to_string(), s.to_string()));
    Ok(Checked { dest, image_format, checksum })
}

fn file_hash(algo: &str, file: &std::path::Path) -> Result<String, String> {
    use sha2::Digest;
    let mut f = std::fs::File::open(file).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1 << 20];
    macro_rules! hash_with {
        ($h:expr, $update:ident, $fin:expr) => {{
            let mut h = $h;
            loop {
                let n = f.read(&mut buf).map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                h.$update(&buf[..n]);
            }
            Ok($fin(h))
        }};
    }
    match algo {
        "md5" => hash_with!(md5::Context::new(), consume, |h: md5::Context| format!("{:x}", h.finalize())),
        "sha1" => hash_with!(
            ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY),
            update,
            |h: ring::digest::Context| hex::encode(h.finish())
        ),
        "sha224" => hash_with!(sha2::Sha224::new(), update, |h: sha2::Sha224| hex::encode(h.finalize())),
        "sha256" => hash_with!(sha2::Sha256::new(), update, |h: sha2::Sha256| hex::encode(h.finalize())),
        "sha384" => hash_with!(sha2::Sha384::new(), update, |h: sha2::Sha384| hex::encode(h.finalize())),
        _ => hash_with!(sha2::Sha512::new(), update, |h: sha2::Sha512| hex::encode(h.finalize())),
    }
}

/// The task's work: `(log lines, result)`. Removes the temp file in every case.
fn work(sim: &Sim, node: &str, form: &Form, c: &Checked) -> (Vec<String>, Result<(), String>) {
    let tmp = sim.node_path(node, &form.tmpfilename);
    let mut log = vec![format!("starting file import from: {}", form.tmpfilename)];
    let checks = (|| {
        if let Some((algo, want)) = &c.checksum {
            let got = file_hash(algo, &tmp)?;
            if !got.eq_ignore_ascii_case(want) {
                log.push("calculating checksum...".into());
                return Err(format!("checksum mismatch: got '{got}' != expect '{want}'"));
            }
            log.push("calculating checksum...OK, checksum verified".into());
        }
        if let Some(fmt) = &c.image_format {
            crate::image::untrusted(&tmp, &form.tmpfilename, fmt)?;
        }
        Ok(())
    })();
    let remove_tmp = || {
        let _ = std::fs::remove_file(&tmp);
        crate::nodefs::invalidate(sim, node);
    };
    if let Err(e) = checks {
        remove_tmp();
        return (log, Err(e));
    }
    let size = std::fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
    log.push(format!("target node: {node}"));
    log.push(format!("target file: {}", c.dest));
    log.push(format!("file size is: {size}"));
    log.push(format!("command: cp -- {} {}", form.tmpfilename, c.dest));
    let real = sim.node_path(node, &c.dest);
    let copied = real
        .parent()
        .map_or(Ok(()), crate::fsutil::ensure_dir)
        .map_err(|e| e.to_string())
        .and_then(|()| copy(sim, node, &c.dest, &tmp, &real));
    remove_tmp();
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&real);
        crate::nodefs::invalidate(sim, node);
        return (log, Err(format!("import failed: {e}")));
    }
    log.push("finished file import successfully".into());
    (log, Ok(()))
}

/// `cp` through a capacity-checked writer (a full root filesystem fails it).
fn copy(sim: &Sim, node: &str, dest: &str, from: &std::path::Path, to: &std::path::Path) -> Result<(), String> {
    let mut src = std::fs::File::open(from).map_err(|e| e.to_string())?;
    let mut w = crate::nodefs::Writer::create(sim, node, dest, to, true).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = src.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        w.write(sim, &buf[..n]).map_err(|e| format!("cp: error writing '{dest}': {e}"))?;
    }
    w.finish().map(|_| ())
}

/// Start the `imgcopy` task; at `time_scale` 0 it is done before this returns.
pub async fn start(sim: &Arc<Sim>, node: &str, form: Form, c: Checked) -> ApiResult {
    let upid = {
        let mut st = lock(&sim.state);
        sim.new_task(&mut st, node, "imgcopy", "", None)
    };
    sim.changed();
    let size = std::fs::metadata(sim.node_path(node, &form.tmpfilename)).map(|m| m.len()).unwrap_or(0);
    let delay = sim.scaled(sim.cfg.timings.upload_per_gib.mul_f64(size as f64 / (1u64 << 30) as f64));
    let (s, u, n) = (sim.clone(), upid.clone(), node.to_string());
    let job = async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let s2 = s.clone();
        let n2 = n.clone();
        let (log, result) = tokio::task::spawn_blocking(move || work(&s2, &n2, &form, &c))
            .await
            .unwrap_or_else(|_| (Vec::new(), Err("import failed: worker died".into())));
        {
            let mut st = lock(&s.state);
            for l in log {
                Sim::task_log(&mut st, &u, l);
            }
        }
        s.finish_task(&u, result);
    };
    if delay.is_zero() {
        job.await;
    } else {
        tokio::spawn(job);
    }
    Ok(Reply::data(json!(upid)))
}
