//! Errors of the Proxmox VE API client and their mapping onto the WIT `error` cases.
//!
//! Contract: every failure of [`super::client::ProxmoxClient`] is a [`ProxmoxError`]
//! whose message names what was asked (method, path with node/VMID, URL) and what
//! to do about it, and whose [`ProxmoxError::kind`] is one of the WIT cases:
//!
//! | kind | when |
//! |---|---|
//! | not-found | HTTP 404, `Configuration file 'nodes/<n>/qemu-server/<vmid>.conf' does not exist`, `no such ha rule` (GET), `HA rule '<id>' does not exist` (PUT), a 400 `{upid: "no such task"}` |
//! | conflict | `VM is locked (...)`, `CT is locked (...)`, `failed: File exists` (pmxcfs: the VMID is taken on another node), `already running`, `config file already exists`, `already defined`, `already used in another node affinity rule`, `cannot use unmanaged resource(s)`, a stale digest (qemu-server's `checksum mismatch (file change by other user?)` for VMs, pve-common's `detected modified configuration` for containers and HA), a taken `nextid` hint |
//! | invalid | HTTP 400 parameter errors (with the `errors` map), the 500s `can't migrate running VM without --online`, `(VM uses local storage)`, `not allowed for linked clones`, `no such cluster node`, `cannot use non-existent node(s)` and `ha groups have been migrated to rules`, a migration's `can't live migrate attached local disks without with-local-disks option` and `can't migrate '<volid>' as it's a clone of '<base>'`, bad arguments, bad configuration |
//! | transient | HTTP 5xx not matched above (incl. `can't lock file ... got timeout`, `got no worker upid`), 596, connect/reset/timeout |
//!
//! A connection that could not be made is [`ProxmoxError::Unreachable`]
//! (nothing was sent: the message says so and names the endpoint); only a
//! failure after the request may have been sent (reset, timeout) is the
//! ambiguous [`ProxmoxError::Transport`], whose message asks to re-discover.
//! | denied | HTTP 401/403: Proxmox refused the API token (not a cradle grant denial) |
//! | failed | `No QEMU guest agent configured`, TLS trust failures, undecodable answers, anything else |
//!
//! The classification is one ordered table (`MESSAGE_RULES`, applied by
//! [`classify`]) of substrings of the texts PVE really sends, so review happens
//! in one place. Many refusals happen inside a task's worker on PVE (resize,
//! the lock of a destroy, a migration's disks): the request answers a UPID and
//! the task fails. Such a failure ([`ProxmoxError::Task`], built by
//! [`task_failure`]) goes through the same rules, on its exit status and then
//! its log's error lines (a migration ends `migration aborted` and says why only
//! in its log), so a cause is classed the same whichever shape it came in. A
//! cause no rule knows is `failed`: the task ran and ended, nothing about its
//! outcome is unknown.
//!
//! Secrets: no variant holds the API token. Messages that come from the server are
//! scrubbed of the token by the client before they are stored here.

use std::collections::BTreeMap;

use crate::contract::{CapError, ErrorKind};

/// A failed Proxmox API call or client setup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxmoxError {
    /// The configured endpoint URL is unusable.
    #[error(
        "Proxmox endpoint {endpoint:?} is not usable: {reason}; configure the base URL, e.g. https://pve1.example.net:8006"
    )]
    Endpoint {
        /// The endpoint as configured.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The API token does not have the `USER@REALM!TOKENID=SECRET` shape.
    #[error(
        "the Proxmox API token for {endpoint} is malformed: {reason}; it must look like USER@REALM!TOKENID=SECRET (the value is not shown)"
    )]
    Token {
        /// The endpoint the token is for.
        endpoint: String,
        /// What is missing (never a part of the token).
        reason: &'static str,
    },
    /// The TLS trust configuration cannot be built (unreadable CA file, bad fingerprint).
    #[error("TLS setup for {endpoint} failed: {reason}")]
    TlsSetup {
        /// The endpoint being configured.
        endpoint: String,
        /// What is wrong and where.
        reason: String,
    },
    /// The server's certificate is not the pinned one.
    #[error(
        "the TLS certificate of {endpoint} does not match the pinned fingerprint: the server presented SHA-256 {presented}, \
         the configuration pins {expected}. If the node's certificate was renewed on purpose, read the new fingerprint on the node \
         (`pvenode cert info`, or `openssl x509 -noout -fingerprint -sha256 -in /etc/pve/local/pve-ssl.pem`) and update the cluster's \
         fingerprint in cradle.toml; otherwise treat the connection as intercepted"
    )]
    FingerprintMismatch {
        /// The endpoint connected to.
        endpoint: String,
        /// The SHA-256 fingerprint of the certificate the server presented (`AA:BB:...`).
        presented: String,
        /// The configured fingerprint (`AA:BB:...`).
        expected: String,
    },
    /// The server's certificate failed verification against the configured CA.
    #[error(
        "TLS verification of {endpoint} failed: {detail}; check the CA configured for this cluster and that the endpoint's host name is in the certificate"
    )]
    TlsRejected {
        /// The endpoint connected to.
        endpoint: String,
        /// The verifier's reason.
        detail: String,
    },
    /// No connection could be made (refused, no route, name not resolved,
    /// connect timeout): the request was never sent, so nothing happened on the
    /// cluster and it may be sent again once the endpoint answers.
    #[error(
        "cannot reach the Proxmox API at {endpoint}: {detail}; nothing was sent ({method} {path}). Check the cluster's \
         endpoint in cradle.toml and that the Proxmox API (pveproxy, port 8006) is up and reachable from here"
    )]
    Unreachable {
        /// The endpoint (`https://host:8006`).
        endpoint: String,
        /// The HTTP method.
        method: &'static str,
        /// The request path below `/api2/json`.
        path: String,
        /// The transport's reason (`Connection refused`).
        detail: String,
    },
    /// The request may have reached the server, but no complete HTTP response
    /// arrived (reset after sending, timeout): its outcome is unknown.
    #[error(
        "{method} {url} got no complete response: {detail}; the cluster may still have acted on the request, \
         so re-discover (list-vms, list-tasks) before repeating anything that is not idempotent"
    )]
    Transport {
        /// The HTTP method.
        method: &'static str,
        /// The URL (it never holds the token).
        url: String,
        /// The transport's reason.
        detail: String,
        /// Whether the request timed out.
        timed_out: bool,
    },
    /// The API answered with an error status.
    #[error("{}", api_display(.method, .path, .status, .reason, .message, .errors, .kind))]
    Api {
        /// The HTTP method.
        method: &'static str,
        /// The request path below `/api2/json`, e.g. `/nodes/pve1/qemu/100/config`.
        path: String,
        /// The HTTP status.
        status: u16,
        /// The reason phrase (the first line of the message, as PVE sends it).
        reason: String,
        /// The `message` of the body, trimmed.
        message: String,
        /// The per-parameter `errors` map of a 400.
        errors: BTreeMap<String, String>,
        /// The WIT case, from [`classify`].
        kind: ErrorKind,
    },
    /// `GET /cluster/nextid?vmid=N` refused the hint.
    #[error(
        "VMID {vmid} is already in use in the cluster ({detail}); pick another VMID in the inventory or let cradle probe nextid"
    )]
    VmidTaken {
        /// The VMID asked for.
        vmid: u32,
        /// What Proxmox said.
        detail: String,
    },
    /// A 2xx answer that does not have the documented shape.
    #[error("unexpected answer to {method} {path}: {detail}; is {endpoint} a Proxmox VE 9 API?")]
    Decode {
        /// The endpoint.
        endpoint: String,
        /// The HTTP method.
        method: &'static str,
        /// The request path.
        path: String,
        /// What was wrong.
        detail: String,
    },
    /// A string that is not a UPID.
    #[error("invalid UPID {upid:?}: {reason}; expected UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:")]
    Upid {
        /// The text given.
        upid: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A task that stopped with an error: classified by the rules of an HTTP
    /// error of the same text ([`task_failure`]).
    #[error("{}", task_display(.node, .upid, .exitstatus, .causes, .kind))]
    Task {
        /// The node the task ran on.
        node: String,
        /// The task's UPID.
        upid: String,
        /// Its exit status.
        exitstatus: String,
        /// The error lines of its log that say why (may be empty).
        causes: Vec<String>,
        /// The WIT case.
        kind: ErrorKind,
    },
    /// An argument the client refuses before sending anything.
    #[error("invalid Proxmox request: {0}")]
    InvalidArgument(String),
}

impl ProxmoxError {
    /// The WIT error case this error maps onto.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ProxmoxError::Endpoint { .. }
            | ProxmoxError::Token { .. }
            | ProxmoxError::TlsSetup { .. }
            | ProxmoxError::Upid { .. }
            | ProxmoxError::InvalidArgument(_) => ErrorKind::Invalid,
            ProxmoxError::FingerprintMismatch { .. }
            | ProxmoxError::TlsRejected { .. }
            | ProxmoxError::Decode { .. } => ErrorKind::Failed,
            ProxmoxError::Transport { .. } | ProxmoxError::Unreachable { .. } => ErrorKind::Transient,
            ProxmoxError::Api { kind, .. } | ProxmoxError::Task { kind, .. } => *kind,
            ProxmoxError::VmidTaken { .. } => ErrorKind::Conflict,
        }
    }

    /// Whether an idempotent call may be repeated after this error.
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }
}

impl From<ProxmoxError> for CapError {
    fn from(e: ProxmoxError) -> CapError {
        CapError::new(e.kind(), e.to_string())
    }
}

/// How a message text maps onto a kind, checked in order before the status fallbacks.
/// Substrings are taken verbatim from what PVE sends.
const MESSAGE_RULES: &[(&str, ErrorKind)] = &[
    // PVE::API2::HA::Rules answers a missing rule with a 500 `no such ha rule '<id>'`.
    ("no such ha rule", ErrorKind::NotFound),
    ("VM is locked (", ErrorKind::Conflict),
    // pve-guest-common AbstractConfig::check_lock: `guest_type() . " is locked (...)"`.
    ("CT is locked (", ErrorKind::Conflict),
    // pmxcfs refuses a config whose VMID exists on another node (EEXIST), e.g.
    // a clone's `newid`: the task fails `close (rename) atomic file '...' failed:
    // File exists`. The VMID is taken: a state problem.
    ("failed: File exists", ErrorKind::Conflict),
    ("already running", ErrorKind::Conflict),
    ("config file already exists", ErrorKind::Conflict),
    ("already defined", ErrorKind::Conflict),
    ("already used in another node affinity rule", ErrorKind::Conflict),
    // The resource must be made HA-managed first: a state problem, not a passing one.
    ("cannot use unmanaged resource", ErrorKind::Conflict),
    // PVE::Tools::assert_if_modified: the `digest` of a config write no longer
    // matches (someone changed the VM since it was read). Re-read, then decide;
    // a blind retry would overwrite the other change.
    ("detected modified configuration", ErrorKind::Conflict),
    // qemu-server's own text for a stale VM digest (e6352be, src/PVE/API2/Qemu.pm:2211
    // in a config write, :6006 inside the resize worker).
    ("checksum mismatch (file change by other user?)", ErrorKind::Conflict),
    // 500s that no retry can fix: the arguments do not fit the VM.
    ("can't migrate running VM without --online", ErrorKind::Invalid),
    ("(VM uses local storage)", ErrorKind::Invalid),
    // Inside a migration's worker (qemu-server e6352be, src/PVE/QemuMigrate.pm:540-543,
    // logged per disk): a running VM's local disks need `with-local-disks`.
    ("can't live migrate attached local disks", ErrorKind::Invalid),
    // QemuMigrate.pm:584-586: a linked clone on local storage cannot leave its
    // template's node; clone it full, or keep it on that node.
    ("as it's a clone of '", ErrorKind::Invalid),
    ("ha groups have been migrated to rules", ErrorKind::Invalid),
    // qemu-server's clone: `parameter 'storage' (or 'format') not allowed for linked clones`.
    ("not allowed for linked clones", ErrorKind::Invalid),
    // pve-cluster check_node_exists (clone/migrate `target`), and an HA rule's `nodes`.
    ("no such cluster node", ErrorKind::Invalid),
    ("cannot use non-existent node(s)", ErrorKind::Invalid),
    ("No QEMU guest agent configured", ErrorKind::Failed),
    // Node-local flock contention and daemon hiccups: they pass.
    ("got timeout", ErrorKind::Transient),
    ("got no worker upid", ErrorKind::Transient),
];

/// Messages that need every one of their parts (in any order), checked
/// before [`MESSAGE_RULES`].
const ALL_OF_RULES: &[(&[&str], ErrorKind)] = &[
    // pve-ha-manager Rules.pm update_rule: `update HA rules failed: HA rule 'x' does not exist`.
    (&["HA rule '", "' does not exist"], ErrorKind::NotFound),
];

/// Parameter errors (400, `errors` map entry) that say what is asked for is gone.
const PARAM_RULES: &[(&str, &str, ErrorKind)] = &[
    // pve-manager Tasks.pm: a UPID whose task the node does not have.
    ("upid", "no such task", ErrorKind::NotFound),
];

/// [`classify`] with the answer's `errors` map: a parameter error that names
/// a missing object ([`PARAM_RULES`]) is not-found, not invalid.
pub fn classify_answer(status: u16, message: &str, errors: &BTreeMap<String, String>) -> ErrorKind {
    let gone = PARAM_RULES.iter().find(|(param, text, _)| errors.get(*param).is_some_and(|v| v == text));
    match gone {
        Some((_, _, kind)) if status == 400 => *kind,
        _ => classify(status, message),
    }
}

/// Classifies an API error answer onto a WIT error kind.
///
/// Order: 401/403 → denied; 404 or the missing-VM config message → not-found;
/// `MESSAGE_RULES`; then 400 → invalid, 5xx/596 → transient, anything else → failed.
pub fn classify(status: u16, message: &str) -> ErrorKind {
    if status == 401 || status == 403 {
        return ErrorKind::Denied;
    }
    if status == 404 {
        return ErrorKind::NotFound;
    }
    if let Some(kind) = rule_kind(message) {
        return kind;
    }
    match status {
        400 => ErrorKind::Invalid,
        500..=599 => ErrorKind::Transient,
        _ => ErrorKind::Failed,
    }
}

/// What the text rules say of `message`: the missing-VM config message, then
/// `ALL_OF_RULES`, then `MESSAGE_RULES`; `None` when no rule knows it.
fn rule_kind(message: &str) -> Option<ErrorKind> {
    if message.contains("Configuration file '") && message.contains("does not exist") {
        return Some(ErrorKind::NotFound);
    }
    if let Some((_, kind)) = ALL_OF_RULES.iter().find(|(parts, _)| parts.iter().all(|p| message.contains(p))) {
        return Some(*kind);
    }
    MESSAGE_RULES.iter().find(|(needle, _)| message.contains(needle)).map(|(_, kind)| *kind)
}

/// The error a task that stopped with `exitstatus` stands for: the rules of
/// [`classify`] on the exit status, then on each of `causes` (its log's error
/// lines, see the module docs); `failed` when no rule knows any of them.
pub fn task_failure(node: &str, upid: &str, exitstatus: &str, causes: Vec<String>) -> ProxmoxError {
    let kind = std::iter::once(exitstatus)
        .chain(causes.iter().map(String::as_str))
        .find_map(rule_kind)
        .unwrap_or(ErrorKind::Failed);
    ProxmoxError::Task {
        node: node.to_string(),
        upid: upid.to_string(),
        exitstatus: exitstatus.to_string(),
        causes,
        kind,
    }
}

fn task_display(node: &str, upid: &str, exitstatus: &str, causes: &[String], kind: &ErrorKind) -> String {
    let mut out = format!("task {upid} on node {node} failed: {exitstatus}");
    if !causes.is_empty() {
        out.push_str(&format!(" (task log: {})", causes.join("; ")));
    }
    let hint = match kind {
        ErrorKind::Conflict if exitstatus.contains("is locked") => {
            " — another task holds the VM; wait for it (list-tasks) before changing the VM"
        }
        ErrorKind::Conflict => " — the VM changed or is taken; re-read it before deciding",
        ErrorKind::Invalid if causes.iter().any(|c| c.contains("as it's a clone of '")) => {
            " — a linked clone on local storage cannot leave its template's node: clone it full, \
             use shared storage, or keep the VM on the template's node"
        }
        ErrorKind::Failed => " — see the task's log on the node (Tasks) for the details",
        _ => "",
    };
    out.push_str(hint);
    out
}

fn api_display(
    method: &str,
    path: &str,
    status: &u16,
    reason: &str,
    message: &str,
    errors: &BTreeMap<String, String>,
    kind: &ErrorKind,
) -> String {
    let (status, kind) = (*status, *kind);
    let mut out = format!("Proxmox API {method} {path}: HTTP {status} {reason}");
    if !message.is_empty() && message != reason {
        out.push_str(": ");
        out.push_str(message);
    }
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        out.push_str(&format!(" [parameter errors: {}]", list.join("; ")));
    }
    let hint = match (kind, status) {
        (ErrorKind::Denied, 401) => {
            " — Proxmox rejected the API token: check the token id and secret configured for this cluster (and that the token has not expired)"
        }
        (ErrorKind::Denied, _) => {
            // PVE's 403 names the path and privilege: say what to grant (role.rs).
            out.push_str(" — ");
            out.push_str(&super::role::denied_hint(message));
            return out;
        }
        (ErrorKind::Conflict, _) if message.contains("VM is locked") => {
            " — another task holds the VM; wait for it (list-tasks) before changing the VM"
        }
        (ErrorKind::Transient, _) => " — this may pass; only idempotent calls are retried automatically",
        _ => "",
    };
    out.push_str(hint);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_vm_config_message_is_not_found_even_with_status_500() {
        let msg = "Configuration file 'nodes/pve1/qemu-server/123.conf' does not exist";
        assert_eq!(classify(500, msg), ErrorKind::NotFound);
        assert_eq!(classify(404, "no such resource"), ErrorKind::NotFound);
        assert_eq!(classify(500, "no such ha rule 'web'"), ErrorKind::NotFound);
    }

    /// The real texts (pve-ha-manager b71218f src/PVE/API2/HA/Rules.pm:340, :77 under
    /// the lock prefixes of :358/:298; pve-manager 14a22df3 PVE/API2/Tasks.pm:517;
    /// qemu-server e6352be src/PVE/API2/Qemu.pm:4482, :5567, :5571; pve-guest-common
    /// 4a8f6cb src/PVE/AbstractConfig.pm:339; pve-cluster 7091d92 memdb.c:1101).
    #[test]
    fn real_pve_texts_of_gone_rules_tasks_locked_cts_and_bad_targets_are_classed() {
        let gone = "update HA rules failed: HA rule 'cradle-pve1' does not exist";
        assert_eq!(classify(500, gone), ErrorKind::NotFound);
        assert_eq!(classify(500, "create ha rule failed: HA rule 'web' already defined"), ErrorKind::Conflict);
        let upid = BTreeMap::from([("upid".to_string(), "no such task".to_string())]);
        assert_eq!(classify_answer(400, "Parameter verification failed.", &upid), ErrorKind::NotFound);
        let other = BTreeMap::from([("upid".to_string(), "unable to parse worker upid".to_string())]);
        assert_eq!(classify_answer(400, "Parameter verification failed.", &other), ErrorKind::Invalid);
        assert_eq!(classify(500, "CT is locked (backup)"), ErrorKind::Conflict);
        let taken = "close (rename) atomic file '/etc/pve/nodes/pve1/qemu-server/101.conf' failed: File exists";
        assert_eq!(classify(500, taken), ErrorKind::Conflict);
        for msg in [
            "parameter 'storage' not allowed for linked clones",
            "no such cluster node 'pve9'",
            "create ha rule failed: cannot use non-existent node(s) pve9.",
        ] {
            assert_eq!(classify(500, msg), ErrorKind::Invalid, "{msg}");
        }
        assert_eq!(classify(400, "Parameter verification failed."), ErrorKind::Invalid, "target is local node.");
    }

    #[test]
    fn lock_and_duplicate_messages_are_conflicts() {
        for msg in [
            "VM is locked (clone)",
            "VM is locked (migrate)",
            "VM 100 already running",
            "unable to create VM 100: config file already exists",
            "resource ID 'vm:100' already defined",
            "HA rule 'web' already defined",
            "resource 'vm:100' is already used in another node affinity rule",
            "cannot use unmanaged resource(s) 'vm:100'",
            "detected modified configuration - file changed by other user? Try again.",
        ] {
            assert_eq!(classify(500, msg), ErrorKind::Conflict, "{msg}");
        }
    }

    #[test]
    fn lock_timeouts_worker_failures_and_596_are_transient() {
        assert_eq!(
            classify(500, "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"),
            ErrorKind::Transient
        );
        assert_eq!(classify(500, "got no worker upid - start worker failed"), ErrorKind::Transient);
        assert_eq!(classify(596, ""), ErrorKind::Transient);
        assert_eq!(classify(503, "service unavailable"), ErrorKind::Transient);
    }

    #[test]
    fn parameter_errors_are_invalid_and_token_refusals_are_denied() {
        assert_eq!(classify(400, "Parameter verification failed."), ErrorKind::Invalid);
        assert_eq!(classify(500, "can't migrate running VM without --online"), ErrorKind::Invalid);
        assert_eq!(classify(500, "can't clone VM to node 'pve2' (VM uses local storage)"), ErrorKind::Invalid);
        assert_eq!(classify(401, "invalid token value!"), ErrorKind::Denied);
        assert_eq!(classify(403, "Permission check failed (/vms/100, VM.Allocate)"), ErrorKind::Denied);
        assert_eq!(classify(302, "moved"), ErrorKind::Failed);
    }

    #[test]
    fn api_error_message_names_path_status_parameters_and_what_to_do() {
        let mut errors = BTreeMap::new();
        errors.insert("vmid".to_string(), "VM 100 already exists".to_string());
        let e = ProxmoxError::Api {
            method: "GET",
            path: "/cluster/nextid".into(),
            status: 400,
            reason: "Parameter verification failed.".into(),
            message: "Parameter verification failed.".into(),
            errors,
            kind: ErrorKind::Invalid,
        };
        let text = e.to_string();
        assert!(text.contains("GET /cluster/nextid: HTTP 400 Parameter verification failed."), "{text}");
        assert!(text.contains("vmid: VM 100 already exists"), "{text}");
        assert!(!text.contains("failed.: Parameter"), "reason repeated: {text}");

        let denied = ProxmoxError::Api {
            method: "POST",
            path: "/nodes/pve1/qemu/9000/clone".into(),
            status: 403,
            reason: "Permission check failed".into(),
            message: "Permission check failed (/vms/9000, VM.Clone)".into(),
            errors: BTreeMap::new(),
            kind: ErrorKind::Denied,
        };
        assert_eq!(denied.kind(), ErrorKind::Denied);
        assert!(denied.to_string().contains("lacks VM.Clone on /vms/9000"), "{denied}");
    }

    #[test]
    fn errors_convert_to_cap_errors_of_the_same_kind() {
        let e = ProxmoxError::VmidTaken { vmid: 100, detail: "VM 100 already exists".into() };
        let cap: CapError = e.into();
        assert_eq!(cap.kind, ErrorKind::Conflict);
        assert!(cap.message.contains("VMID 100"));
    }
}
