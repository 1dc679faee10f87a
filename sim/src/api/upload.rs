//! `POST /nodes/{node}/storage/{storage}/upload` (multipart/form-data): receive.
//!
//! Contract (pve-http-server `src/PVE/APIServer/AnyEvent.pm` `file_upload_multipart`,
//! pve-storage `src/PVE/API2/Storage/Status.pm` `upload`): the body is streamed, never
//! held in memory, to `/var/tmp/pveupload-<hex>` (0600) on `{node}`'s filesystem,
//! counted against its capacity. Parts before the file may be `content`,
//! `checksum-algorithm`, `checksum` (in any order here; PVE expects that one); the file
//! part must be named `filename` and its `filename="..."` is the file name. Then
//! Status.pm's checks run in its order (see [`super::upload_task::validate`]) and an
//! `imgcopy` task (empty id) checks and copies the file. The token's permission
//! (Datastore.AllocateTemplate on the storage) is checked once the body is in, as
//! PVE's REST handler runs after the transfer: a 403 then. Every failure removes the temp
//! file. Failure modes: a non-multipart body is 500 `upload 'Content-Type '<ct>' not
//! implemented`; `tmpfilename` in the query is 500; a full disk is 500 `write to
//! temporary file failed - No space left on device`; a body that ends early is 500
//! `upload failed`; a client that goes away leaves nothing behind. Uploads without a
//! `Content-Length` are refused (501) as not modelled.

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::upload_task::{Form, validate};
use super::{ApiError, ApiResult, DropConnection};
use crate::nodefs::Writer;
use crate::sim::Sim;

/// `(node, storage)` when the request is an upload.
pub fn target(method: &str, segs: &[String]) -> Option<(String, String)> {
    match (method, segs) {
        ("POST", [n, node, s, storage, u]) if n == "nodes" && s == "storage" && u == "upload" => {
            Some((node.clone(), storage.clone()))
        }
        _ => None,
    }
}

/// A temp file that is removed unless kept.
struct Temp {
    sim: Arc<Sim>,
    node: String,
    real: std::path::PathBuf,
    keep: bool,
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.real);
            crate::nodefs::invalidate(&self.sim, &self.node);
        }
    }
}

fn temp_name() -> String {
    format!("/var/tmp/pveupload-{}", hex::encode(crate::model::ids::random_bytes::<16>()))
}

/// Receive the upload and start the task. `Err(DropConnection)` = the client left.
pub async fn handle(
    sim: &Arc<Sim>,
    parts: &hyper::http::request::Parts,
    body: Incoming,
    node: &str,
    storage: &str,
) -> Result<ApiResult, DropConnection> {
    let ctype = parts.headers.get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let boundary = match multer::parse_boundary(ctype) {
        Ok(b) if ctype.trim_start().starts_with("multipart/form-data") => b,
        _ => return Ok(Err(ApiError::die(format!("upload 'Content-Type '{ctype}' not implemented")))),
    };
    if !parts.headers.contains_key(hyper::header::CONTENT_LENGTH) {
        return Ok(Err(ApiError::status(501, "simulator: uploads without Content-Length are not modelled")));
    }
    let query: Vec<(String, String)> =
        parts.uri.query().map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
    if query.iter().any(|(k, _)| k == "tmpfilename") {
        return Ok(Err(ApiError::die("'tmpfilename' query parameter is not allowed for file uploads")));
    }
    if !sim.has_node(node) {
        return Ok(Err(ApiError::die(format!("no such cluster node '{node}'"))));
    }
    let abs = temp_name();
    let real = sim.node_path(node, &abs);
    if let Err(e) = crate::fsutil::ensure_dir(&sim.node_path(node, "/var/tmp")) {
        return Ok(Err(ApiError::die(format!("unable to create temporary upload file '{abs}': {e}"))));
    }
    let mut writer = match Writer::create(sim, node, &abs, &real, false) {
        Ok(w) => w,
        Err(e) => return Ok(Err(ApiError::die(format!("unable to create temporary upload file '{abs}': {e}")))),
    };
    let mut temp = Temp { sim: sim.clone(), node: node.to_string(), real: real.clone(), keep: false };
    let mut form = Form { query, ..Form::default() };
    let stream = body.into_data_stream();
    let mut mp = multer::Multipart::new(stream, boundary);
    let mut got_file = false;
    loop {
        let field = match mp.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => return dropped_or(e),
        };
        let name = field.name().unwrap_or("").to_string();
        if field.file_name().is_none() {
            if got_file {
                continue;
            }
            if !["content", "checksum-algorithm", "checksum"].contains(&name.as_str()) {
                return Ok(Err(wrong_field(&name)));
            }
            match field.text().await {
                Ok(t) => form.fields.push((name, t.trim().to_string())),
                Err(e) => return dropped_or(e),
            }
            continue;
        }
        if got_file {
            continue;
        }
        if name != "filename" {
            return Ok(Err(wrong_field(&name)));
        }
        got_file = true;
        form.filename = field.file_name().unwrap_or("").trim().to_string();
        let mut field = field;
        // A failed write still reads the rest of the body (discarding it) before the
        // answer: closing the connection while the client is still sending gives it a
        // broken pipe instead of the error, so the answer would be lost by a race.
        let mut write_failed = None;
        loop {
            match field.chunk().await {
                Ok(Some(chunk)) if write_failed.is_none() => {
                    if let Err(e) = writer.write(sim, &chunk) {
                        write_failed = Some(e);
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => return dropped_or(e),
            }
        }
        if let Some(e) = write_failed {
            return Ok(Err(ApiError::die(format!("write to temporary file failed - {e}"))));
        }
    }
    if !got_file {
        return Ok(Err(ApiError::die("upload failed")));
    }
    if let Err(e) = writer.finish() {
        return Ok(Err(ApiError::die(format!("write to temporary file failed - {e}"))));
    }
    crate::nodefs::invalidate(sim, node);
    form.tmpfilename = abs;
    // The API server authenticates, receives the whole upload, and only then its REST
    // handler checks the permissions (pve-http-server
    // 5c9e4ea773364bdb7ae0e2faec5750fe58129a47 `src/PVE/APIServer/AnyEvent.pm`
    // l. 1361 `handle_api2_request` once the transfer finished, l. 982 `rest_handler`):
    // a token without Datastore.AllocateTemplate gets its 403 after the body.
    let segs = ["nodes", node, "storage", storage, "upload"].map(String::from);
    let denied = crate::acl::endpoints::check_request(
        &sim.cfg.access,
        &crate::sim::lock(&sim.state),
        "POST",
        &segs,
        &super::Params::default(),
    );
    if let Err(d) = denied {
        return Ok(Err(ApiError::status(403, d.to_string())));
    }
    let checked = match validate(sim, storage, &form) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e)),
    };
    temp.keep = true;
    Ok(super::upload_task::start(sim, node, form, checked).await)
}

fn wrong_field(name: &str) -> ApiError {
    ApiError::die(format!("wrong field name '{name}' for file upload, expected 'filename'"))
}

/// A body that broke off: the client went away (no answer), else a bad body.
fn dropped_or(e: multer::Error) -> Result<ApiResult, DropConnection> {
    match e {
        multer::Error::StreamReadFailed(_) => Err(DropConnection),
        _ => Ok(Err(ApiError::die("upload failed"))),
    }
}
