//! `cradle::check_inputs(vm)`: every inventory value of `vm` that a later step
//! hands to SSH, cloud-init, the snippet store or DNS, checked by the same
//! code those steps use, before the run has any side effect (invariant 9).
//!
//! Contract: no cluster call, no file written, no lock taken; it throws
//! `#{kind: "invalid", message}` whose message names the host and the
//! inventory variable (`ansible_host`, `ansible_user`, `vms_config.nic0`,
//! `vms_fqdn`, ...) and says what is wrong. The workflow calls it as its first
//! step, so a bad value never leaves a clone, a snippet, a creation record or
//! a DNS record behind.
//!
//! What is checked, and by whom:
//! - SSH target: read by `caps::ssh::script_args::target`, then
//!   `caps::ssh::check_target` (the host must not look like an
//!   option: `-oProxyCommand=...`; the user name; the port);
//! - user-data and meta-data: rendered in memory (`cloudinit::render_all`)
//!   from what `cloudinit::upload_snippets` renders: the same parsers
//!   (`caps::creation::script_args`: `guest_settings`, `interfaces`,
//!   `snippet_storage`), the same builder
//!   (`caps::creation::snippets::GuestSettings::user_data`, with the run's
//!   guest keys), without a host key. This covers the VM name used in the
//!   snippet names, hostname, FQDN, the management user (`ansible_user`) and
//!   its keys, packages, timezone;
//! - network-data: each NIC rendered alone (so an error names its `nicN`),
//!   then all together (names used twice): addresses, gateway inside the
//!   subnet, nameservers, search domains, interface names;
//! - the snippet storage ID (`vms_snippet_storage`) as `cicustom` takes it;
//! - `vms_dns_record`: each record's shape, as `dns::upsert` reads it
//!   (`caps::dns::script_args::record`).

use rhai::Map;

use crate::caps::creation::script_args::{guest_settings, interfaces, snippet_storage, str_of};
use crate::caps::dns::script_args::record;
use crate::caps::script_glue::{Res, throw, thrown_message as message};
use crate::caps::ssh::script_args::target;
use crate::cloudinit::{CloudInitError, NetworkData, cicustom, render_all, render_network_data, snippet_names};
use crate::contract::CapError;

fn bad(name: &str, variable: &str, problem: impl std::fmt::Display) -> Box<rhai::EvalAltResult> {
    throw(CapError::invalid(format!("host {name}: inventory value {variable} is not usable: {problem}")))
}

/// The inventory variable a user-data field comes from (field names of
/// `cloudinit::user_data`).
fn user_variable(e: &CloudInitError) -> &'static str {
    let field = match e {
        CloudInitError::Invalid { field, .. } | CloudInitError::InvalidSecret { field, .. } => field.as_str(),
        _ => "",
    };
    match field {
        "fqdn" => "vms_fqdn",
        "package" => "vms_packages",
        "timezone" => "vms_timezone",
        "management user name" | "management user shell" | "management user group" => "ansible_user",
        "management user" | "ssh_authorized_keys entry" => "vms_ssh_authorized_keys (or [ssh] authorized_keys)",
        _ => "vms_name",
    }
}

/// `vm`'s inventory values as the later steps will read them; `guest_keys`
/// are the run's (`services.guest_keys`).
pub(super) fn check_inputs(vm: &Map, guest_keys: &[String]) -> Res<()> {
    let name = str_of(vm, "name", "cradle::check_inputs")?;
    snippet_names(&name).map_err(|e| bad(&name, "vms_name", e))?;

    let login = vm.get("ssh").and_then(|s| s.clone().try_cast::<Map>()).unwrap_or_default();
    let wit = target(&login, "ssh").map_err(|e| bad(&name, "ansible_host/ansible_user", message(&e)))?;
    let target = crate::caps::ssh::Target { host: wit.host, port: wit.port, user: wit.user };
    crate::caps::ssh::check_host(&target.host).map_err(|e| bad(&name, "ansible_host", e.message))?;
    crate::caps::ssh::check_target(&target).map_err(|e| bad(&name, "ansible_user/ansible_port", e.message))?;

    let guest = guest_settings(vm, &name)?;
    let user = guest.user_data(&name, guest_keys, None);
    let nics = interfaces(vm, &name).map_err(|e| bad(&name, "vms_config.nicN", message(&e)))?;
    for (i, nic) in nics.iter().enumerate() {
        let one = NetworkData { vm_name: name.clone(), interfaces: vec![nic.clone()] };
        render_network_data(&one).map_err(|e| bad(&name, &format!("vms_config.nic{i}"), e))?;
    }
    let network = NetworkData { vm_name: name.clone(), interfaces: nics };
    render_network_data(&network).map_err(|e| bad(&name, "vms_config (NICs)", e))?;
    render_all(&user, &network).map_err(|e| bad(&name, user_variable(&e), e))?;

    let storage = snippet_storage(vm);
    let names = snippet_names(&name).map_err(|e| bad(&name, "vms_name", e))?;
    cicustom(&storage, &names).map_err(|e| bad(&name, "vms_snippet_storage", e))?;

    let records = match vm.get("dns") {
        None => Vec::new(),
        Some(v) if v.is_unit() => Vec::new(),
        Some(v) if v.is_array() => v.clone().into_array().unwrap_or_default(),
        Some(v) => vec![v.clone()],
    };
    for (i, r) in records.into_iter().enumerate() {
        let map = r
            .try_cast::<Map>()
            .ok_or_else(|| bad(&name, &format!("vms_dns_record[{i}]"), "must be a map {zone, name, kind, value}"))?;
        record(&map).map_err(|e| bad(&name, &format!("vms_dns_record[{i}]"), message(&e)))?;
    }
    Ok(())
}
