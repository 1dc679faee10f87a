//! `http:` attacks on the endpoint `api`: `get` requests the path in
//! `vm.template` (a redirect to another origin, `/%2e%2e/` escapes);
//! `header` sends the header `NAME: VALUE` from `vm.template` to `/`.
//! Each reports the status and body it got back.

use crate::bindings::cradle::host::http::{self, Method, Request};
use crate::bindings::cradle::host::types::{Entry, Error, VmSpec, VmState};

/// Run `attack`, or `None` when this module has no such attack.
pub fn run(attack: &str, vm: &VmSpec) -> Option<Result<Option<VmState>, Error>> {
    let (path, headers) = match attack {
        "get" => (vm.template.clone(), Vec::new()),
        "header" => {
            let (key, value) = vm.template.split_once(": ").unwrap_or((vm.template.as_str(), ""));
            ("/".to_string(), vec![Entry { key: key.into(), value: value.into() }])
        }
        _ => return None,
    };
    let req = Request { endpoint: "api".into(), method: Method::Get, path, query: Vec::new(), headers, body: None };
    Some(http::send(&req).and_then(|resp| {
        super::achieved(format!("status {} body {}", resp.status, String::from_utf8_lossy(&resp.body)), vm)
    }))
}
