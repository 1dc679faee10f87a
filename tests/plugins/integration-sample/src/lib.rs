//! A test integration plugin (never shipped): exports `sample-pipeline`
//! (its own `wit/sample.wit`, beside links to the host's `types`, `log`,
//! `proxmox` and `http`) instead of a backend's `lifecycle`. The e2e tests
//! (`tests/e2e/integration_plugins.rs`) call it from workflows through
//! `cradle::plugin("ROLE")` and check that its capability calls meet its own
//! grants and its calls its own limits.

#![allow(unsafe_code, reason = "generated ABI glue")]

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "cradle:host/integration-sample",
        generate_all,
    });
    use super::Sample;
    export!(Sample);
}

cradle_guest::manifest! {
    name: "integration-sample",
    version: env!("CARGO_PKG_VERSION"),
    description: "A test integration plugin: admits events, reads a VM, fetches, spins",
    needs: ["log", "proxmox", "http"],
}

use bindings::cradle::host::types::{Entry, Error, VmSpec};
use bindings::cradle::host::{http, log, proxmox};
use bindings::exports::cradle::host::sample_pipeline::{Event, Guest};

struct Sample;

impl Guest for Sample {
    fn admit(event: Event) -> Result<String, Error> {
        if event.vmid == 0 {
            return Err(Error::Invalid(format!("event for {} has no VMID", event.name)));
        }
        let fields = [Entry { key: "vm".into(), value: event.name.clone() }];
        log::event(log::Level::Info, "integration-sample admitted an event", &fields);
        Ok(format!("admitted {} ({})", event.name, event.vmid))
    }

    fn vm_status(vm: VmSpec) -> Result<String, Error> {
        proxmox::vm_status(&vm.node, vm.vmid).map(|s| s.status)
    }

    fn fetch(endpoint: String, path: String) -> Result<u16, Error> {
        let req = http::Request {
            endpoint,
            method: http::Method::Get,
            path,
            query: Vec::new(),
            headers: Vec::new(),
            body: None,
        };
        http::send(&req).map(|r| r.status)
    }

    fn spin() -> u64 {
        // A loop the optimiser cannot remove: only the host's deadline ends it.
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
            if std::hint::black_box(n) == u64::MAX {
                return n;
            }
        }
    }
}
