//! The typed parsers of script values (`host/src/caps/{ssh,dns,creation}/script_args.rs`)
//! on a workflow's `vm` map: the input is JSON, converted to a Rhai value with
//! `rhai::serde::to_dynamic` as the workflow's `vm` is (provision/vm.rs), and
//! each parser reads the field `cradle::check_inputs` hands it (`ssh`, `dns`,
//! the guest settings, `nics`, `spec.vmid`, `snippet_storage`). The parsed
//! guest settings and interfaces are then rendered as cloud-init does.
//!
//! Invariants: no panic; an accepted SSH target has a port in 1..=65535 and
//! re-parses from its own map form (`to_map`, as `cradle::node_login` returns
//! it) to itself; an accepted DNS record re-parses from its own map form to
//! itself; an accepted interface address prints as a CIDR that re-parses to
//! itself.
#![no_main]

use cradle_fuzz::caps::creation::script_args::{guest_settings, interfaces, snippet_storage, str_of, vmid_of};
use cradle_fuzz::caps::dns::script_args::record;
use cradle_fuzz::caps::script_glue::to_map;
use cradle_fuzz::caps::ssh::script_args::target;
use cradle_fuzz::cloudinit::{Cidr, NetworkData, render_all, render_network_data};
use libfuzzer_sys::fuzz_target;
use rhai::Map;

fuzz_target!(|data: &[u8]| {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let Ok(value) = rhai::serde::to_dynamic(&json) else { return };
    let Some(vm) = value.try_cast::<Map>() else { return };

    if let Some(login) = vm.get("ssh").and_then(|s| s.clone().try_cast::<Map>())
        && let Ok(t) = target(&login, "ssh")
    {
        assert_ne!(t.port, 0, "an accepted target has a port");
        let again = target(&to_map(&t).expect("a target's map form"), "ssh").expect("a target re-parses");
        assert_eq!(again, t);
    }

    let records = match vm.get("dns") {
        Some(v) if v.is_array() => v.clone().into_array().unwrap_or_default(),
        Some(v) => vec![v.clone()],
        None => Vec::new(),
    };
    for r in records {
        let Some(map) = r.try_cast::<Map>() else { continue };
        if let Ok(rec) = record(&map) {
            let again = record(&to_map(&rec).expect("a record's map form")).expect("a record re-parses");
            assert_eq!(again, rec);
        }
    }

    let name = str_of(&vm, "name", "fuzz").unwrap_or_else(|_| "web-1".into());
    let _ = vmid_of(&vm, &name);
    let _ = snippet_storage(&vm);
    let nics = interfaces(&vm, &name);
    if let Ok(nics) = &nics {
        for a in nics.iter().filter_map(|n| n.address) {
            assert_eq!(a.to_string().parse::<Cidr>().expect("a printed CIDR re-parses"), a);
        }
    }
    if let (Ok(guest), Ok(nics)) = (guest_settings(&vm, &name), nics) {
        let user = guest.user_data(&name, &["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIRUN run".into()], None);
        let network = NetworkData { vm_name: name.clone(), interfaces: nics };
        let _ = render_network_data(&network);
        let _ = render_all(&user, &network);
    }
});
