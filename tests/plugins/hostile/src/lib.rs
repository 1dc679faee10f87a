//! A hostile backend for the sandbox tests (never shipped). `discover(vm)`
//! misbehaves according to `vm.name`; each behaviour must fail with its
//! documented error while the host keeps serving other calls.
//!
//! A name `GROUP:ATTACK` (e.g. `pve:set-config`) runs one attack of the module
//! `attacks::GROUP` with `vm.template` as its argument; each attack returns
//! what it achieved in the returned state's `name`, so a test sees both a
//! denial and an unexpected success.

#![allow(unsafe_code, reason = "generated ABI glue and the deliberately malformed value")]

mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit",
        inline: "
            package cradle:hostile-plugin;
            world plugin {
                import cradle:host/log@0.1.0;
                import cradle:host/proxmox@0.1.0;
                import cradle:host/lock@0.1.0;
                import cradle:host/ssh@0.1.0;
                import cradle:host/dns@0.1.0;
                import cradle:host/checkpoint@0.1.0;
                import cradle:host/http@0.1.0;
                import cradle:host/terraform@0.1.0;
                export cradle:host/lifecycle@0.1.0;
            }
        ",
        world: "cradle:hostile-plugin/plugin",
        generate_all,
    });
    use super::Hostile;
    export!(Hostile);
}

cradle_guest::manifest! {
    name: "hostile",
    version: env!("CARGO_PKG_VERSION"),
    description: "Misbehaves on purpose for the sandbox tests",
    needs: ["log", "proxmox", "lock", "ssh", "dns", "checkpoint", "http", "terraform"],
}

use bindings::cradle::host::types::{Error, Snippets, VmSpec, VmState};
use bindings::cradle::host::{lock, proxmox};
use bindings::exports::cradle::host::lifecycle::{Guest, PlanAction, PlanOutcome};

mod attacks;

struct Hostile;

/// The state returned to report what an attack achieved.
pub(crate) fn state(name: String, vmid: u32) -> VmState {
    VmState { name, vmid, node: "pve1".into(), status: "stopped".into(), lock: None, has_cloudinit_drive: false }
}

impl Guest for Hostile {
    fn discover(vm: VmSpec) -> Result<Option<VmState>, Error> {
        if let Some((group, attack)) = vm.name.split_once(':') {
            return attacks::run(group, attack, &vm);
        }
        match vm.name.as_str() {
            "read-passwd" => match std::fs::read_to_string("/etc/passwd") {
                Ok(text) => Ok(Some(state(text, vm.vmid))),
                Err(e) => Err(Error::Failed(format!("open /etc/passwd: {e}"))),
            },
            "list-root" => match std::fs::read_dir("/") {
                Ok(dir) => Ok(Some(state(format!("{} entries", dir.count()), vm.vmid))),
                Err(e) => Err(Error::Failed(format!("read_dir /: {e}"))),
            },
            "env" => Ok(Some(state(format!("{} env vars", std::env::vars().count()), vm.vmid))),
            "socket" => {
                let addr = vm.template.clone();
                match std::net::TcpStream::connect(addr.as_str()) {
                    Ok(_) => Ok(Some(state(format!("connected to {addr}"), vm.vmid))),
                    Err(e) => Err(Error::Failed(format!("connect {addr}: {e}"))),
                }
            }
            "out-of-scope" => proxmox::vm_status("pve1", 5000).map(|_| Some(state("reached vmid 5000".into(), 5000))),
            "lock" => lock::acquire(&vm.template).map(|h| Some(state(h.run_id, vm.vmid))),
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "malformed" => {
                // SAFETY: deliberately not UTF-8; the host must reject the value
                // when lifting it, not trust it.
                let bad = unsafe { String::from_utf8_unchecked(vec![0xff, 0xfe, 0xfd]) };
                Ok(Some(state(bad, vm.vmid)))
            }
            "panic" => panic!("hostile plugin panicked on purpose"),
            _ => Ok(None),
        }
    }

    fn check_ownership(_vm: VmSpec, _found: Option<VmState>) -> Result<(), Error> {
        Ok(())
    }

    fn plan(_vm: VmSpec) -> Result<PlanOutcome, Error> {
        Ok(PlanOutcome { action: PlanAction::NoOp, summary: vec![], plan_id: None })
    }

    fn create(vm: VmSpec, _snippets: Snippets) -> Result<VmState, Error> {
        Err(Error::Invalid(format!("hostile plugin creates nothing ({})", vm.name)))
    }

    fn reconcile(_vm: VmSpec, _found: VmState) -> Result<Vec<String>, Error> {
        Ok(Vec::new())
    }

    fn remove(_vm: VmSpec) -> Result<(), Error> {
        Ok(())
    }
}
