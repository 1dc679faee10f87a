//! A NetBox webhook delivery as `cradle serve` takes it: the `X-Hook-Signature`
//! check (the input's first line is the header, the rest the body), then the
//! body's parse, under the secret of the real delivery in host/src/serve/testdata.
//!
//! Invariants: a body signed with the key verifies, and with any other header
//! than its own signature (modulo surrounding whitespace and case) it does not;
//! a staged VM is the body's `data.name` and `data.id`.
#![no_main]

use cradle_fuzz::serve::event::{Delivery, parse};
use cradle_fuzz::serve::signature::WebhookKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = WebhookKey::new(b"probe-webhook-secret-0123456789");
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&[][..], data),
    };
    let signed = key.sign(body);
    assert!(key.verify(body, Some(signed.as_bytes())).is_ok(), "a body signed with the key does not verify");
    let verified = key.verify(body, Some(header)).is_ok();
    if verified {
        assert!(
            header.trim_ascii().eq_ignore_ascii_case(signed.as_bytes()),
            "a header other than the body's signature verified"
        );
    }
    let _ = key.verify(body, None);
    if let Ok(Delivery::Staged(vm)) = parse(body) {
        let json: serde_json::Value = serde_json::from_slice(body).expect("a staged delivery is JSON");
        assert_eq!(json["data"]["name"].as_str(), Some(vm.name.as_str()), "the staged VM is not data.name");
        assert_eq!(json["data"]["id"].as_u64(), Some(vm.vm_id), "the staged VM is not data.id");
    }
    let _ = parse(data);
});
