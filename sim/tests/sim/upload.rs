//! `POST /nodes/{node}/storage/{storage}/upload`: multipart bodies stream to a temp
//! file on the node, an `imgcopy` task checks and copies them into the storage, the
//! temp file never stays, and the checks and messages follow pve-storage per version.

use std::sync::Arc;
use std::time::Duration;

use crate::common;

use common::{Api, start};
use sha2::Digest;

fn qcow2(virtual_size: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len.max(32)];
    b[..4].copy_from_slice(b"QFI\xfb");
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    b[24..32].copy_from_slice(&virtual_size.to_be_bytes());
    b
}

/// POST a multipart upload: `fields` first, then the file part named `part`.
async fn upload(
    api: &Api,
    storage: &str,
    fields: &[(&str, &str)],
    part: &str,
    name: &str,
    data: Vec<u8>,
) -> (u16, serde_json::Value) {
    let mut form = reqwest::multipart::Form::new();
    for (k, v) in fields {
        form = form.text(k.to_string(), v.to_string());
    }
    form = form.part(part.to_string(), reqwest::multipart::Part::bytes(data).file_name(name.to_string()));
    let url = format!("{}/nodes/pve1/storage/{storage}/upload", api.base);
    let resp = api
        .http
        .post(url)
        .header("Authorization", format!("PVEAPIToken={}", api.token))
        .multipart(form)
        .send()
        .await
        .expect("sent");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}

fn temp_files(c: &cradle_sim::RunningCluster) -> Vec<String> {
    std::fs::read_dir(c.node_path("pve1", "/var/tmp"))
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploaded_qcow2_lands_in_import_is_listed_and_creates_a_vm() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let data = qcow2(8 << 30, 3 << 20);
    let sum = hex::encode(sha2::Sha256::digest(&data));
    let fields = [("content", "import"), ("checksum-algorithm", "sha256"), ("checksum", sum.as_str())];
    let (s, b) = upload(&api, "local", &fields, "filename", "C:\\images\\ha os.qcow2", data.clone()).await;
    assert_eq!(s, 200, "{b}");
    let upid = b["data"].as_str().unwrap();
    assert!(upid.contains(":imgcopy::"), "{upid}");
    let st = api.wait_task(upid).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    let log = api.get(&format!("/nodes/pve1/tasks/{}/log", common::urlencode(upid))).await;
    let text: Vec<&str> = log.as_array().unwrap().iter().filter_map(|l| l["t"].as_str()).collect();
    assert!(text.contains(&"calculating checksum...OK, checksum verified"), "{text:?}");
    assert!(text.contains(&"target file: /var/lib/vz/import/ha_os.qcow2"), "{text:?}");
    assert!(text.contains(&"finished file import successfully"), "{text:?}");
    assert_eq!(std::fs::read(c.node_path("pve1", "/var/lib/vz/import/ha_os.qcow2")).unwrap(), data);
    assert!(temp_files(&c).is_empty(), "{:?}", temp_files(&c));

    let listed = api.get("/nodes/pve1/storage/local/content?content=import").await;
    assert_eq!(listed[0]["volid"], "local:import/ha_os.qcow2", "{listed}");
    assert_eq!(listed[0]["size"], 3 << 20);
    let form = [("vmid", "300"), ("scsi0", "local-lvm:0,import-from=local:import/ha_os.qcow2")];
    let st = api.wait_task(api.post("/nodes/pve1/qemu", &form).await.as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK", "{st}");
    assert_eq!(api.get("/nodes/pve1/qemu/300/config").await["scsi0"], "local-lvm:vm-300-disk-0,size=8G");

    // A second upload under the same name overwrites the file, as PVE does.
    let (s, b) = upload(&api, "local", &[("content", "import")], "filename", "ha_os.qcow2", qcow2(1 << 30, 64)).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(api.wait_task(b["data"].as_str().unwrap()).await["exitstatus"], "OK");
    assert_eq!(std::fs::metadata(c.node_path("pve1", "/var/lib/vz/import/ha_os.qcow2")).unwrap().len(), 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksum_mismatch_or_a_bad_image_fails_the_task_and_leaves_no_file() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let fields = [("content", "iso"), ("checksum-algorithm", "md5"), ("checksum", "00")];
    let (s, b) = upload(&api, "local", &fields, "filename", "x.iso", b"iso data".to_vec()).await;
    assert_eq!(s, 200, "{b}");
    let st = api.wait_task(b["data"].as_str().unwrap()).await;
    let got = format!("{:x}", md5::compute(b"iso data"));
    assert_eq!(st["exitstatus"], format!("checksum mismatch: got '{got}' != expect '00'"));
    assert!(!c.node_path("pve1", "/var/lib/vz/template/iso/x.iso").exists());
    let (s, b) = upload(&api, "local", &[("content", "import")], "filename", "raw.qcow2", vec![7u8; 4096]).await;
    assert_eq!(s, 200, "{b}");
    let st = api.wait_task(b["data"].as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "failed to query file information with qemu-img");
    assert!(!c.node_path("pve1", "/var/lib/vz/import/raw.qcow2").exists());
    assert!(temp_files(&c).is_empty(), "{:?}", temp_files(&c));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_checks_fail_as_pve_does_and_remove_the_temp_file() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let d = || b"data".to_vec();
    let (s, b) = upload(&api, "local", &[("content", "iso")], "file", "x.iso", d()).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (500, Some("wrong field name 'file' for file upload, expected 'filename'\n"))
    );
    let (s, b) = upload(&api, "local-lvm", &[("content", "iso")], "filename", "x.iso", d()).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("can't upload to storage type 'lvmthin'\n")));
    let (s, b) = upload(&api, "local", &[("content", "iso")], "filename", "x.txt", d()).await;
    assert_eq!((s, b["errors"]["filename"].as_str()), (400, Some("wrong file extension")));
    let (s, b) = upload(&api, "local", &[("content", "import")], "filename", "HAOS.QCOW2", d()).await;
    assert_eq!((s, b["errors"]["filename"].as_str()), (400, Some("invalid filename or wrong extension")));
    let (s, b) = upload(&api, "local", &[("content", "import")], "filename", "a.qcow2.xz", d()).await;
    assert_eq!((s, b["errors"]["filename"].as_str()), (400, Some("invalid filename or wrong extension")));
    let (s, b) = upload(&api, "local", &[("content", "backup")], "filename", "a.vma", d()).await;
    assert_eq!(s, 400, "{b}");
    let (s, b) = upload(&api, "local", &[("content", "iso"), ("checksum", "ab")], "filename", "a.iso", d()).await;
    assert_eq!((s, b["errors"]["checksum-algorithm"].as_str()), (400, Some("missing property required by 'checksum'")));
    assert!(temp_files(&c).is_empty(), "{:?}", temp_files(&c));

    // A full root filesystem fails the body's write.
    let c2 = start(0.0, |cfg| cfg.node_disk.root_bytes = 1 << 20).await;
    let api2 = Api::new(&c2);
    let (s, b) = upload(&api2, "local", &[("content", "iso")], "filename", "big.iso", vec![0u8; 2 << 20]).await;
    assert_eq!((s, b["message"].as_str()), (500, Some("write to temporary file failed - No space left on device\n")));
    assert!(temp_files(&c2).is_empty(), "{:?}", temp_files(&c2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_uploads_follow_the_pve_version() {
    let c = start(0.0, |cfg| cfg.pve_version = "8.2.7".into()).await;
    let api = Api::new(&c);
    let (s, b) = upload(&api, "local", &[("content", "import")], "filename", "a.qcow2", qcow2(1 << 20, 64)).await;
    assert_eq!(s, 400, "{b}");
    assert_eq!(b["errors"]["content"], "value 'import' does not have a value in the enumeration 'iso, vztmpl'");
    let c = start(0.0, |cfg| cfg.pve_version = "8.3.2".into()).await;
    let api = Api::new(&c);
    let (s, b) = upload(&api, "local", &[("content", "import")], "filename", "a.qcow2", qcow2(1 << 20, 64)).await;
    assert_eq!((s, b["errors"]["filename"].as_str()), (400, Some("invalid filename or wrong extension")));
    let (s, b) = upload(&api, "local", &[("content", "import")], "filename", "a.ova", b"ova".to_vec()).await;
    assert_eq!(s, 200, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_drops_mid_body_leaves_no_temp_file_and_no_volume() {
    use rustls::pki_types::pem::PemObject;
    use tokio::io::AsyncWriteExt;
    let c = start(0.0, |_| {}).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from_pem_slice(c.ca_pem().as_bytes()).unwrap()).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(c.api_addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.unwrap();
    let head = "--XyZ\r\nContent-Disposition: form-data; name=\"content\"\r\n\r\nimport\r\n--XyZ\r\n\
        Content-Disposition: form-data; name=\"filename\"; filename=\"cut.qcow2\"\r\n\
        Content-Type: application/octet-stream\r\n\r\n";
    let req = format!(
        "POST /api2/json/nodes/pve1/storage/local/upload HTTP/1.1\r\nHost: x\r\n\
         Authorization: PVEAPIToken={}\r\nContent-Type: multipart/form-data; boundary=XyZ\r\n\
         Content-Length: {}\r\n\r\n{head}",
        c.token(),
        head.len() + (64 << 20)
    );
    tls.write_all(req.as_bytes()).await.unwrap();
    tls.write_all(&qcow2(1 << 30, 4 << 20)).await.unwrap();
    tls.flush().await.unwrap();
    let mut seen = false;
    for _ in 0..200 {
        if temp_files(&c).iter().any(|f| f.starts_with("pveupload-")) {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "the body streams into /var/tmp/pveupload-*");
    drop(tls);
    for _ in 0..300 {
        if temp_files(&c).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(temp_files(&c).is_empty(), "{:?}", temp_files(&c));
    assert!(!c.node_path("pve1", "/var/lib/vz/import/cut.qcow2").exists());
}

/// pve-storage 0c56bad8b2a7d69e5ce2c243651fe830d6caa936 `src/PVE/API2/Storage/Status.pm`
/// l. 523-524: the upload needs Datastore.AllocateTemplate on the storage; PVE's API
/// server checks it once the whole body is in (pve-http-server
/// 5c9e4ea773364bdb7ae0e2faec5750fe58129a47 `src/PVE/APIServer/AnyEvent.pm` l. 1361,
/// 982): a token without it gets the 403 naming it, and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_without_datastore_allocatetemplate_is_403_naming_it_and_leaves_nothing() {
    let privs = ["Datastore.AllocateSpace", "Datastore.Audit", "VM.Audit"];
    let c =
        start(0.0, |cfg| cfg.access = cradle_sim::acl::AccessConfig::single_role("cradle@pve", "Cradle", &privs)).await;
    let api = Api::new(&c);
    let (s, b) =
        upload(&api, "local", &[("content", "import")], "filename", "haos.qcow2", qcow2(1 << 30, 1 << 20)).await;
    assert_eq!(s, 403, "{b}");
    assert_eq!(b["message"], "Permission check failed (/storage/local, Datastore.AllocateTemplate)\n", "{b}");
    assert!(temp_files(&c).is_empty(), "{:?}", temp_files(&c));
    assert!(std::fs::read_dir(c.node_path("pve1", "/var/lib/vz/import")).map(|d| d.count()).unwrap_or(0) == 0);
}
