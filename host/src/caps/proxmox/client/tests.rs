//! Client behaviour against canned HTTP answers on 127.0.0.1: what is retried,
//! what is sent, how errors read, and that the token never leaks.

use std::time::Duration;

use serde_json::json;

use super::test_server::{Canned, CannedServer};
use super::*;
use crate::contract::ErrorKind;
use crate::contract::bindings::cradle::host::proxmox::{CloneRequest, PowerAction};
use crate::contract::bindings::cradle::host::types::Entry;

const SECRET: &str = "c4n4ry-5ecret-0f-the-t0ken";
const LOCK_TIMEOUT: &str = "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout";
const UPID: &str = "UPID:pve1:000A1B2C:0042F1E3:6745A0B1:qmclone:9000:root@pam!cradle:";

fn settings(endpoint: String) -> ClientSettings {
    ClientSettings {
        endpoint,
        token: format!("root@pam!cradle={SECRET}"),
        verify: TlsVerify::Insecure,
        timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
        },
        // Canned answers come at once: poll as a cluster a hundred times as fast.
        task_time_scale: 0.01,
    }
}

async fn serve(responses: Vec<Canned>) -> (CannedServer, ProxmoxClient) {
    let server = CannedServer::start(responses).await;
    let client = ProxmoxClient::new_plain_http_for_tests(settings(server.endpoint())).expect("client");
    (server, client)
}

fn clone_request() -> CloneRequest {
    CloneRequest {
        node: "pve1".into(),
        template_vmid: 9000,
        newid: 123,
        name: "test-0".into(),
        full: true,
        storage: Some("local-lvm".into()),
        target: None,
        description: Some("a b&c=d".into()),
    }
}

#[tokio::test]
async fn idempotent_get_is_retried_after_a_lock_timeout() {
    let (server, client) =
        serve(vec![Canned::error(500, LOCK_TIMEOUT), Canned::data(json!({"cores": 2, "digest": "d"}))]).await;
    let config = client.get_config("pve1", 100).await.expect("second attempt succeeds");
    assert_eq!(config.len(), 2);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn clone_is_never_retried_after_a_transient_error() {
    let (server, client) = serve(vec![Canned::error(500, LOCK_TIMEOUT), Canned::data(json!(UPID))]).await;
    let e = client.clone_vm(&clone_request()).await.expect_err("first answer is the result");
    assert_eq!(e.kind(), ErrorKind::Transient);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn idempotent_retries_stop_at_max_attempts() {
    let (server, client) = serve(vec![Canned::error(596, "Broken pipe")]).await;
    let e = client.list_vms().await.expect_err("always failing");
    assert_eq!(e.kind(), ErrorKind::Transient);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn non_transient_errors_are_not_retried_even_for_reads() {
    let (server, client) =
        serve(vec![Canned::error(500, "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist")]).await;
    let e = client.vm_status("pve1", 100).await.expect_err("missing VM");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("/nodes/pve1/qemu/100/status/current"), "{e}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn dropped_connection_retries_a_read_but_not_a_power_action() {
    let (server, client) = serve(vec![Canned::Drop, Canned::data(json!([]))]).await;
    assert!(client.list_vms().await.expect("retried").is_empty());
    assert_eq!(server.requests().len(), 2);

    let (server, client) = serve(vec![Canned::Drop, Canned::data(json!(UPID))]).await;
    let e = client.power("pve1", 100, PowerAction::Start).await.expect_err("ambiguous");
    assert!(matches!(e, ProxmoxError::Transport { .. }), "{e:?}");
    assert!(e.to_string().contains("re-discover"), "{e}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_refused_connection_is_unreachable_and_says_nothing_was_sent() {
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let client = ProxmoxClient::new_plain_http_for_tests(settings(endpoint.clone())).expect("client");
    let e = client.power("pve1", 100, PowerAction::Start).await.expect_err("refused");
    assert!(matches!(e, ProxmoxError::Unreachable { .. }), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Transient);
    let text = e.to_string();
    assert!(text.contains(&format!("cannot reach the Proxmox API at {endpoint}")), "{text}");
    assert!(text.contains("nothing was sent") && text.contains("/nodes/pve1/qemu/100/status/start"), "{text}");
    assert!(!text.contains("re-discover") && !text.contains("may still have acted"), "{text}");
}

#[tokio::test]
async fn clone_posts_form_encoded_parameters_with_the_token_header() {
    let (server, client) = serve(vec![Canned::data(json!(UPID))]).await;
    assert_eq!(client.clone_vm(&clone_request()).await.expect("clone"), UPID);
    let seen = server.requests();
    let r = &seen[0];
    assert_eq!(r.line, "POST /api2/json/nodes/pve1/qemu/9000/clone HTTP/1.1");
    assert_eq!(r.header("content-type"), Some("application/x-www-form-urlencoded"));
    assert_eq!(r.header("authorization"), Some(format!("PVEAPIToken=root@pam!cradle={SECRET}").as_str()));
    assert_eq!(r.body, "newid=123&name=test-0&full=1&storage=local-lvm&description=a%20b%26c%3Dd");
}

#[tokio::test]
async fn set_config_puts_values_deletions_and_digest() {
    let (server, client) = serve(vec![Canned::data(serde_json::Value::Null)]).await;
    let set = [Entry {
        key: "cicustom".into(),
        value: "user=local:snippets/test-0-user.yaml,network=local:snippets/test-0-net.yaml".into(),
    }];
    client.set_config("pve1", 100, &set, &["ide2".into(), "sata1".into()], Some("abc123")).await.expect("set");
    let r = &server.requests()[0];
    assert_eq!(r.line, "PUT /api2/json/nodes/pve1/qemu/100/config HTTP/1.1");
    assert_eq!(
        r.body,
        "cicustom=user%3Dlocal%3Asnippets%2Ftest-0-user.yaml%2Cnetwork%3Dlocal%3Asnippets%2Ftest-0-net.yaml&delete=ide2%2Csata1&digest=abc123"
    );
}

#[tokio::test]
async fn set_config_refuses_skiplock_and_duplicate_keys_without_sending() {
    let (server, client) = serve(vec![Canned::data(serde_json::Value::Null)]).await;
    let skip = [Entry { key: "skiplock".into(), value: "1".into() }];
    assert_eq!(
        client.set_config("pve1", 100, &skip, &[], None).await.expect_err("reserved").kind(),
        ErrorKind::Invalid
    );
    // `force` would make a permitted detach free the volume for good.
    for reserved in ["force", "background_delay"] {
        let set = [Entry { key: reserved.into(), value: "1".into() }];
        assert_eq!(
            client.set_config("pve1", 100, &set, &[], None).await.expect_err(reserved).kind(),
            ErrorKind::Invalid
        );
    }
    let twice = [Entry { key: "ide2".into(), value: "none".into() }];
    assert_eq!(
        client.set_config("pve1", 100, &twice, &["ide2".into()], None).await.expect_err("dup").kind(),
        ErrorKind::Invalid
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn destroy_with_purge_sends_parameters_in_the_query() {
    let (server, client) = serve(vec![Canned::data(json!(UPID))]).await;
    client.destroy("pve1", 100, true).await.expect("destroy");
    let r = &server.requests()[0];
    assert_eq!(r.line, "DELETE /api2/json/nodes/pve1/qemu/100?purge=1&destroy-unreferenced-disks=1 HTTP/1.1");
}

#[tokio::test]
async fn a_taken_nextid_hint_is_a_conflict_naming_the_vmid() {
    let body = json!({"data": null, "message": "Parameter verification failed.\n", "errors": {"vmid": "VM 100 already exists\n"}}).to_string();
    let (server, client) = serve(vec![Canned::Reply(400, "Parameter verification failed.".into(), body)]).await;
    let e = client.next_id(Some(100)).await.expect_err("taken");
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert!(e.to_string().contains("VMID 100") && e.to_string().contains("VM 100 already exists"), "{e}");
    assert_eq!(server.requests()[0].line, "GET /api2/json/cluster/nextid?vmid=100 HTTP/1.1");
}

#[tokio::test]
async fn parameter_errors_keep_the_errors_map() {
    let body = json!({"data": null, "message": "Parameter verification failed.\n", "errors": {"size": "unable to parse size"}}).to_string();
    let (_server, client) = serve(vec![Canned::Reply(400, "Parameter verification failed.".into(), body)]).await;
    match client.resize_disk("pve1", 100, "scsi0", "ten", None).await.expect_err("bad size") {
        ProxmoxError::Api { status: 400, errors, kind: ErrorKind::Invalid, .. } => {
            assert_eq!(errors.get("size").map(String::as_str), Some("unable to parse size"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn the_token_secret_never_appears_in_errors_or_debug_output() {
    let (server, client) = serve(vec![Canned::EchoAuthorization]).await;
    let e = client.clone_vm(&clone_request()).await.expect_err("echoing server");
    assert!(
        server.requests()[0].header("authorization").is_some_and(|a| a.contains(SECRET)),
        "the canary was really sent"
    );
    for text in [e.to_string(), format!("{e:?}"), format!("{client:?}"), format!("{:?}", settings(server.endpoint()))] {
        assert!(!text.contains(SECRET), "secret leaked: {text}");
    }
    assert!(format!("{client:?}").contains("root@pam!cradle="));
}

#[tokio::test]
async fn wait_task_polls_until_stopped_and_reports_success() {
    let running = Canned::data(json!({"status": "running", "upid": UPID}));
    let (server, client) = serve(vec![
        running.clone(),
        running,
        Canned::data(json!({"status": "stopped", "exitstatus": "OK", "upid": UPID})),
    ])
    .await;
    let status = client.wait_task("pve1", UPID, Duration::from_secs(60)).await.expect("waited");
    assert!(status.ok);
    assert_eq!(status.exitstatus.as_deref(), Some("OK"));
    let seen = server.requests();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].line, format!("GET /api2/json/nodes/pve1/tasks/{UPID}/status HTTP/1.1"));
}

#[tokio::test]
async fn wait_task_timeout_returns_the_running_status_not_an_error() {
    let (server, client) = serve(vec![Canned::data(json!({"status": "running"}))]).await;
    let status = client.wait_task("pve1", UPID, Duration::ZERO).await.expect("no error on timeout");
    assert_eq!((status.status.as_str(), status.ok, status.exitstatus), ("running", false, None));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn wait_task_reports_a_failed_task_with_its_exit_text() {
    let (_server, client) = serve(vec![Canned::data(
        json!({"status": "stopped", "exitstatus": "unable to create VM 123: config file already exists"}),
    )])
    .await;
    let status = client.wait_task("pve1", UPID, Duration::from_secs(5)).await.expect("task ended");
    assert!(!status.ok);
    assert!(status.exitstatus.is_some_and(|t| t.contains("config file already exists")));
}

#[tokio::test]
async fn wait_task_refuses_a_upid_of_another_node() {
    let (server, client) = serve(vec![Canned::data(json!({"status": "running"}))]).await;
    let e = client.wait_task("pve2", UPID, Duration::ZERO).await.expect_err("wrong node");
    assert!(e.to_string().contains("pve1") && e.to_string().contains("pve2"), "{e}");
    assert!(server.requests().is_empty());
}

#[test]
fn endpoint_must_be_an_https_base_url() {
    for (endpoint, why) in [
        ("http://pve1:8006", "https://"),
        ("https://pve1:8006/api2/json", "base URL"),
        ("https://root:pw@pve1:8006", "credentials"),
        ("pve1:8006", "https://"),
    ] {
        let e = ProxmoxClient::new(settings(endpoint.into())).expect_err(endpoint);
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert!(e.to_string().contains(why), "{endpoint}: {e}");
    }
    assert!(ProxmoxClient::new(settings("https://pve1:8006/".into())).is_ok());
}

#[test]
fn malformed_tokens_are_refused_without_quoting_them() {
    for token in [
        format!("root@pam{SECRET}"),
        format!("root@pam!cradle{SECRET}"),
        format!("rootpam!cradle={SECRET}"),
        format!("root@pam!cradle= {SECRET}"),
    ] {
        let e = ProxmoxClient::new(ClientSettings { token, ..settings("https://pve1:8006".into()) })
            .expect_err("malformed");
        assert!(matches!(e, ProxmoxError::Token { .. }));
        assert!(!e.to_string().contains(SECRET) && !format!("{e:?}").contains(SECRET), "{e}");
    }
}

#[test]
fn form_encoding_escapes_everything_but_unreserved_characters() {
    let pairs = [
        ("sshkeys".to_string(), "ssh-ed25519 AAAA+/= me@host\n".to_string()),
        ("name".to_string(), "test-0_x.y~".to_string()),
    ];
    assert_eq!(encode_form(&pairs), "sshkeys=ssh-ed25519%20AAAA%2B%2F%3D%20me%40host%0A&name=test-0_x.y~");
    assert_eq!(encode_form(&[]), "");
}

#[test]
fn path_segments_keep_upids_readable_and_cannot_escape_the_path() {
    assert_eq!(segment("UPID", UPID).expect("upid"), UPID);
    assert_eq!(segment("node", "a/b?c#d e").expect("escaped"), "a%2Fb%3Fc%23d%20e");
    assert!(segment("node", "..").is_err());
    assert!(segment("node", "").is_err());
}

#[test]
fn backoff_doubles_up_to_the_cap() {
    let p = RetryPolicy {
        max_attempts: 10,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(500),
    };
    let pauses: Vec<u128> = (1..=5).map(|n| p.backoff(n).as_millis()).collect();
    assert_eq!(pauses, [100, 200, 400, 500, 500]);
    assert_eq!(p.backoff(64), Duration::from_millis(500));
}

/// Collects formatted tracing output.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn every_insecure_client_creation_warns() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..2 {
            ProxmoxClient::new(settings("https://pve1:8006".into())).expect("insecure client");
        }
        let pinned =
            ClientSettings { verify: TlsVerify::Fingerprint("00".repeat(32)), ..settings("https://pve1:8006".into()) };
        ProxmoxClient::new(pinned).expect("pinned client");
    });
    let text = String::from_utf8(captured.0.lock().expect("not poisoned").clone()).expect("utf-8 log");
    assert_eq!(text.matches("TLS verification is DISABLED").count(), 2, "{text}");
    assert!(text.contains("WARN"), "{text}");
    assert!(!text.contains(SECRET));
}
