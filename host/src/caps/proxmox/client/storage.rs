//! Node-side storage reads and the API version: a storage's free space on
//! one node, its volumes, and `GET /version`.
//!
//! Contract: every call here is a read, idempotent, and may be repeated after
//! transient errors. Sizes are bytes as PVE reports them; a storage PVE marks
//! inactive on the node is returned with `active = false`, never as an error,
//! so the caller can say which node lacks it.

use reqwest::Method;

use super::answers::{storage_status, version, volumes};
use super::{Call, Idempotency, ProxmoxClient, segment};
use crate::caps::proxmox::errors::ProxmoxError;
use crate::contract::bindings::cradle::host::proxmox::{StorageUsage, Volume};

impl ProxmoxClient {
    fn node_storage_path(&self, node: &str, storage: &str, tail: &str) -> Result<String, ProxmoxError> {
        Ok(format!("/nodes/{}/storage/{}{tail}", segment("node", node)?, segment("storage", storage)?))
    }

    /// `GET /nodes/{node}/storage/{storage}/status`.
    pub async fn storage_status(&self, node: &str, storage: &str) -> Result<StorageUsage, ProxmoxError> {
        let call = Call::new(Method::GET, self.node_storage_path(node, storage, "/status")?, Idempotency::Idempotent);
        self.fetch(call, |data| storage_status(storage, data)).await
    }

    /// `GET /nodes/{node}/storage/{storage}/content[?content=C]`, sorted by volume id.
    pub async fn storage_content(
        &self,
        node: &str,
        storage: &str,
        content: Option<&str>,
    ) -> Result<Vec<Volume>, ProxmoxError> {
        let call = Call::new(Method::GET, self.node_storage_path(node, storage, "/content")?, Idempotency::Idempotent)
            .opt_param("content", content);
        self.fetch(call, volumes).await
    }

    /// `POST /nodes/{node}/storage/{storage}/upload` of the local file `file`
    /// as `filename` with content type `content` (`import`, `iso`,
    /// `vztmpl`), its SHA-256 for PVE to verify; returns the UPID of the
    /// `imgcopy` task that verifies and moves it into place. Never retried.
    #[allow(clippy::too_many_arguments, reason = "one upload's facts, each used once")]
    pub async fn upload_volume(
        &self,
        node: &str,
        storage: &str,
        content: &str,
        file: &std::path::Path,
        filename: &str,
        sha256: &str,
        timeout: std::time::Duration,
    ) -> Result<String, ProxmoxError> {
        let path = self.node_storage_path(node, storage, "/upload")?;
        let fields = vec![
            ("content", content.to_string()),
            ("checksum-algorithm", "sha256".into()),
            ("checksum", sha256.into()),
        ];
        let upload = super::request::Upload { path, fields, file, filename: filename.to_string(), timeout };
        let call = Call::new(Method::POST, upload.path.clone(), Idempotency::NotIdempotent);
        let data = self.send_upload(upload).await?;
        super::answers::upid_from(&data).map_err(|e| self.decode_error(&call, &e.to_string()))
    }

    /// `GET /version`: the `version` field (`9.0.3`).
    pub async fn pve_version(&self) -> Result<String, ProxmoxError> {
        let call = Call::new(Method::GET, "/version".into(), Idempotency::Idempotent);
        self.fetch(call, version).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn storage_status_reads_free_space_and_content() {
        let s = storage_status(
            "local",
            &json!({"type": "dir", "content": "iso,import,snippets", "active": 1, "enabled": 1,
                    "total": 100, "used": 40, "avail": 60, "shared": 0}),
        )
        .expect("status");
        assert_eq!((s.total, s.used, s.avail, s.active), (100, 40, 60, true));
        assert_eq!(s.content, ["iso", "import", "snippets"]);
        let s = storage_status("nfs", &json!({"type": "nfs", "active": 0})).expect("inactive");
        assert!(!s.active);
        assert_eq!(s.avail, 0);
    }

    #[test]
    fn volumes_are_sorted_and_need_a_volid() {
        let v = volumes(&json!([
            {"volid": "local:iso/b.iso", "content": "iso", "format": "iso", "size": 5},
            {"volid": "local:import/a.qcow2", "content": "import", "format": "qcow2", "size": 7}
        ]))
        .expect("volumes");
        assert_eq!(v[0].volid, "local:import/a.qcow2");
        assert!(volumes(&json!([{"content": "iso"}])).is_err());
    }

    #[test]
    fn the_version_is_the_version_field() {
        assert_eq!(version(&json!({"version": "9.0.3", "release": "9.0"})).expect("v"), "9.0.3");
    }
}
