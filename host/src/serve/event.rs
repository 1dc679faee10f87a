//! What a NetBox webhook delivery asks of `cradle serve`.
//!
//! Contract: [`parse`] takes a body whose signature has already been checked
//! and says whether it asks for the pipeline ([`Delivery::Staged`], with the
//! [`Trigger`]) or is something `cradle serve` acknowledges and leaves alone
//! ([`Delivery::Ignored`], with the reason). The pipeline is asked for by a VM
//! created as `staged`, a VM whose status changed to `staged`, or a VM already
//! `staged` that was given its first primary IPv4 (a VM cannot have one when it
//! is created: the address must be assigned to one of its interfaces, which
//! come after it; so a VM created as Staged in the UI gets its address in a
//! later update of the VM, `primary_ip4` going from null to an id in the
//! snapshots). It accepts the payloads of NetBox 3.7 through 4.7:
//!
//! - the object is named by `object_type` (`virtualization.virtualmachine`,
//!   4.4+) or by `model` (`virtualmachine`, up to 4.4);
//! - the request is `request.id`/`request.user` (4.4+) or
//!   `request_id`/`username` (up to 4.6; removed in 4.7);
//! - the change is read from `snapshots`: `prechange` (null for a created
//!   object) and `postchange`, whose `status` is the raw value (`"staged"`)
//!   and whose `primary_ip4` is the address's id or null.
//!
//! Failure modes: a body that is not a JSON object, or a VM delivery without
//! the fields every version sends (`event`, `data.id`, `data.name`,
//! `snapshots.postchange.status`), is a [`PayloadError`] naming the field.

use serde_json::Value;

/// A delivery that asks for the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedVm {
    /// The VM's NetBox id (`data.id`).
    pub vm_id: u64,
    /// The VM's name in NetBox.
    pub name: String,
    /// When NetBox saw the change (`timestamp`).
    pub timestamp: String,
    /// NetBox's request id, when the change came from an HTTP request.
    pub request_id: Option<String>,
    /// The NetBox user who made the change, when known.
    pub user: Option<String>,
    /// What made the delivery ask for the pipeline.
    pub trigger: Trigger,
}

/// What made a delivery ask for the pipeline; the workflow sees it as
/// `event.trigger`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The VM's status changed to `staged`.
    Staged,
    /// The VM was created as `staged` (it has no primary IPv4 yet, unless it
    /// was given one before the delivery is read).
    Created,
    /// A VM already `staged` was given its first primary IPv4.
    PrimaryIp,
}

impl Trigger {
    /// Its name in `event.trigger`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Staged => "staged",
            Trigger::Created => "created",
            Trigger::PrimaryIp => "primary-ip",
        }
    }
}

/// What to do with a verified delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A VM's status changed to `staged`: run the pipeline.
    Staged(StagedVm),
    /// Acknowledged, nothing to do; the reason is answered to NetBox.
    Ignored(String),
}

/// A verified body that is not a NetBox webhook payload cradle can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Not JSON, or not an object.
    #[error("the body is not a JSON object: {0}")]
    NotJson(String),
    /// A field every NetBox version sends is missing or has the wrong type.
    #[error("the payload has no {0} (is the webhook's body template the default one?)")]
    Missing(&'static str),
}

/// The object type of a virtual machine, as 4.4+ names it.
const VM_OBJECT_TYPE: &str = "virtualization.virtualmachine";
/// The model name of a virtual machine, as up to 4.4 names it.
const VM_MODEL: &str = "virtualmachine";
/// The status that starts the pipeline.
const STAGED: &str = "staged";

/// Read a verified delivery.
pub fn parse(body: &[u8]) -> Result<Delivery, PayloadError> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| PayloadError::NotJson(e.to_string()))?;
    let doc = doc.as_object().ok_or_else(|| PayloadError::NotJson("a JSON value, not an object".into()))?;
    let object_type = match (doc.get("object_type"), doc.get("model")) {
        (Some(Value::String(t)), _) => t.clone(),
        (_, Some(Value::String(m))) => m.clone(),
        _ => return Err(PayloadError::Missing("object_type (4.4+) or model")),
    };
    if object_type != VM_OBJECT_TYPE && object_type != VM_MODEL {
        return Ok(Delivery::Ignored(format!("not a virtual machine ({object_type})")));
    }
    let event = doc.get("event").and_then(Value::as_str).ok_or(PayloadError::Missing("event"))?;
    if event != "created" && event != "updated" {
        return Ok(Delivery::Ignored(format!("event `{event}` starts nothing")));
    }
    let data = doc.get("data").and_then(Value::as_object).ok_or(PayloadError::Missing("data"))?;
    let vm_id = data.get("id").and_then(Value::as_u64).ok_or(PayloadError::Missing("data.id"))?;
    let name = data.get("name").and_then(Value::as_str).ok_or(PayloadError::Missing("data.name"))?;
    let snapshots = doc.get("snapshots").and_then(Value::as_object).ok_or(PayloadError::Missing("snapshots"))?;
    let after = snapshots
        .get("postchange")
        .and_then(|s| s.get("status"))
        .and_then(Value::as_str)
        .ok_or(PayloadError::Missing("snapshots.postchange.status"))?;
    let prechange = snapshots.get("prechange").filter(|s| !s.is_null());
    let before = prechange.and_then(|s| s.get("status")).and_then(Value::as_str);
    if after != STAGED {
        return Ok(Delivery::Ignored(format!("VM `{name}` (id {vm_id}) is `{after}`, not staged")));
    }
    let trigger = if event == "created" {
        Trigger::Created
    } else if before != Some(STAGED) {
        Trigger::Staged
    } else if first_primary_ip4(prechange, snapshots.get("postchange")) {
        Trigger::PrimaryIp
    } else {
        return Ok(Delivery::Ignored(format!(
            "VM `{name}` (id {vm_id}) was already staged; its status did not change and it was not given its first primary IPv4"
        )));
    };
    let request = doc.get("request");
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    Ok(Delivery::Staged(StagedVm {
        vm_id,
        name: name.to_string(),
        timestamp: text(doc.get("timestamp")).unwrap_or_default(),
        request_id: text(request.and_then(|r| r.get("id"))).or_else(|| text(doc.get("request_id"))),
        user: text(request.and_then(|r| r.get("user"))).or_else(|| text(doc.get("username"))),
        trigger,
    }))
}

/// The change gave the VM a primary IPv4 where it had none: the prechange
/// snapshot holds `primary_ip4: null` (present: an older payload without the
/// key says nothing) and the postchange one an id.
fn first_primary_ip4(prechange: Option<&Value>, postchange: Option<&Value>) -> bool {
    let had = prechange.and_then(|s| s.get("primary_ip4"));
    let has = postchange.and_then(|s| s.get("primary_ip4"));
    matches!(had, Some(Value::Null)) && has.is_some_and(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const REAL_4_7_3: &[u8] = include_bytes!("testdata/netbox-4.7.3-vm-staged.body");

    /// A payload shaped as `version` sends it (integrations facts: 3.7–4.3
    /// `model` + `username`/`request_id`; 4.4 both names; 4.5–4.6 without
    /// `model`; 4.7 without `username`/`request_id`).
    fn payload(version: &str, event: &str, before: Value, after: &str) -> Vec<u8> {
        let mut doc = json!({
            "event": event,
            "timestamp": "2026-03-06T15:11:23.503186+00:00",
            "data": { "id": 7, "name": "web-1", "status": { "value": after, "label": "x" } },
            "snapshots": { "prechange": before, "postchange": { "name": "web-1", "status": after } },
        });
        let m = doc.as_object_mut().expect("object");
        let old = ["3.7", "4.0", "4.3"].contains(&version);
        if old || version == "4.4" {
            m.insert("model".into(), json!("virtualmachine"));
        }
        if !old {
            m.insert("object_type".into(), json!("virtualization.virtualmachine"));
            m.insert("request".into(), json!({ "id": "req-new", "user": "alice", "method": "PATCH" }));
        }
        if version != "4.7" {
            m.insert("username".into(), json!("alice"));
            m.insert("request_id".into(), json!("req-old"));
        }
        serde_json::to_vec(&doc).expect("json")
    }

    #[test]
    fn the_real_4_7_3_delivery_is_a_vm_changed_to_staged() {
        let Delivery::Staged(vm) = parse(REAL_4_7_3).expect("parses") else { panic!("staged") };
        assert_eq!(vm.vm_id, 1);
        assert_eq!(vm.name, "probe-vm");
        assert_eq!(vm.request_id.as_deref(), Some("951c9de5-b5c8-45e5-8b16-5628f1f957df"));
        assert_eq!(vm.user.as_deref(), Some("admin"));
        assert_eq!(vm.timestamp, "2026-12-01T19:13:52.876454+00:00");
    }

    #[test]
    fn every_version_from_3_7_to_4_7_is_read() {
        for v in ["3.7", "4.0", "4.3", "4.4", "4.5", "4.6", "4.7"] {
            let got = parse(&payload(v, "updated", json!({ "status": "planned" }), "staged")).expect(v);
            let Delivery::Staged(vm) = got else { panic!("{v}: staged") };
            assert_eq!((vm.vm_id, vm.name.as_str(), vm.user.as_deref()), (7, "web-1", Some("alice")), "{v}");
            let want = if ["3.7", "4.0", "4.3"].contains(&v) { "req-old" } else { "req-new" };
            assert_eq!(vm.request_id.as_deref(), Some(want), "{v}");
        }
    }

    #[test]
    fn a_vm_created_as_staged_starts_the_pipeline() {
        let got = parse(&payload("4.7", "created", Value::Null, "staged"));
        assert!(matches!(got, Ok(Delivery::Staged(StagedVm { trigger: Trigger::Created, .. }))), "{got:?}");
    }

    /// The real delivery with its snapshots' `primary_ip4` set as a PATCH of
    /// a staged VM's `primary_ip4` sends them (4.7.3 snapshots hold the key,
    /// null or the address's id: testdata/netbox-4.7.3-vm-staged.body).
    fn real_with(pre_status: &str, pre_ip: Value, post_ip: Value) -> Vec<u8> {
        let mut doc: Value = serde_json::from_slice(REAL_4_7_3).expect("json");
        assert!(doc["snapshots"]["postchange"].get("primary_ip4").is_some(), "4.7.3 snapshots hold primary_ip4");
        doc["snapshots"]["prechange"]["status"] = json!(pre_status);
        doc["snapshots"]["prechange"]["primary_ip4"] = pre_ip;
        doc["snapshots"]["postchange"]["primary_ip4"] = post_ip;
        serde_json::to_vec(&doc).expect("json")
    }

    #[test]
    fn a_staged_vm_given_its_first_primary_ipv4_starts_the_pipeline() {
        let got = parse(&real_with("staged", Value::Null, json!(12)));
        let Ok(Delivery::Staged(vm)) = got else { panic!("staged expected, got {got:?}") };
        assert_eq!((vm.vm_id, vm.trigger, vm.trigger.as_str()), (1, Trigger::PrimaryIp, "primary-ip"));
    }

    #[test]
    fn a_change_to_staged_is_the_staged_trigger_whatever_the_address() {
        let got = parse(&real_with("planned", Value::Null, json!(12)));
        assert!(matches!(got, Ok(Delivery::Staged(StagedVm { trigger: Trigger::Staged, .. }))), "{got:?}");
    }

    #[test]
    fn a_staged_vm_whose_primary_ipv4_changes_or_goes_starts_nothing() {
        for (pre, post) in [(json!(11), json!(12)), (json!(11), Value::Null), (Value::Null, Value::Null)] {
            let got = parse(&real_with("staged", pre.clone(), post.clone()));
            let Ok(Delivery::Ignored(why)) = got else { panic!("{pre} -> {post}: ignored expected, got {got:?}") };
            assert!(why.contains("first primary IPv4"), "{why}");
        }
        // A prechange snapshot without the key (an older payload) says nothing.
        let mut doc: Value = serde_json::from_slice(&real_with("staged", Value::Null, json!(12))).expect("json");
        doc["snapshots"]["prechange"].as_object_mut().expect("prechange").remove("primary_ip4");
        assert!(matches!(parse(&serde_json::to_vec(&doc).expect("json")), Ok(Delivery::Ignored(_))));
    }

    #[test]
    fn only_a_change_to_staged_of_a_vm_starts_anything() {
        let ignored = |body: Vec<u8>| match parse(&body) {
            Ok(Delivery::Ignored(why)) => why,
            other => panic!("ignored expected, got {other:?}"),
        };
        assert!(ignored(payload("4.7", "updated", json!({ "status": "staged" }), "staged")).contains("already staged"));
        assert!(ignored(payload("4.7", "updated", json!({ "status": "staged" }), "active")).contains("not staged"));
        assert!(ignored(payload("4.7", "deleted", json!({ "status": "planned" }), "staged")).contains("deleted"));
        let device = String::from_utf8(payload("4.7", "updated", json!({}), "staged"))
            .expect("utf8")
            .replace("virtualization.virtualmachine", "dcim.device");
        assert!(ignored(device.into_bytes()).contains("dcim.device"));
    }

    #[test]
    fn a_body_without_the_fields_every_version_sends_names_the_field() {
        assert!(matches!(parse(b"not json"), Err(PayloadError::NotJson(_))));
        assert!(matches!(parse(b"[1]"), Err(PayloadError::NotJson(_))));
        assert_eq!(parse(b"{}"), Err(PayloadError::Missing("object_type (4.4+) or model")));
        let mut doc: Value = serde_json::from_slice(&payload("4.7", "updated", Value::Null, "staged")).expect("json");
        doc["snapshots"].as_object_mut().expect("snapshots").remove("postchange");
        assert_eq!(
            parse(&serde_json::to_vec(&doc).expect("json")),
            Err(PayloadError::Missing("snapshots.postchange.status"))
        );
        doc["data"].as_object_mut().expect("data").remove("id");
        assert_eq!(parse(&serde_json::to_vec(&doc).expect("json")), Err(PayloadError::Missing("data.id")));
    }
}
