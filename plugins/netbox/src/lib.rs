//! cradle's NetBox pipeline as a sandboxed integration plugin (world
//! `integration` of wit/pipeline.wit): the pipeline's integration steps over
//! the typed `netbox`, `dhcp`, `dns` and `proxmox` (HA) capabilities and
//! `log`, nothing else. workflows/netbox.rhai keeps the sequencing and calls
//! one export per step (`cradle::plugin("netbox")`); the decisions (what is
//! missing, the MAC of a `net0`, the journal sentences, the HA rule to write)
//! are cradle-netbox-logic's, tested natively.
//!
//! Every export is safe to repeat: the capabilities read before they write
//! (`set-mac` reads back, `dhcp.reserve` leaves a matching reservation, `dns.upsert`
//! changes nothing that matches) and the HA steps here read first. What the
//! plugin may reach is the operator's `[plugins.NAME.grants.*]`: the NetBox
//! endpoint and the statuses it may set, the DHCP networks, the DNS zones,
//! the Proxmox HA calls.

#![allow(unsafe_code, reason = "generated ABI glue")]

mod bindings {
    #![allow(missing_docs, reason = "generated code; the WIT carries the docs")]
    wit_bindgen::generate!({
        path: "../../wit",
        world: "cradle:host/integration",
        generate_all,
    });
    use super::Netbox;
    export!(Netbox);
}

cradle_guest::manifest! {
    name: "netbox",
    version: env!("CARGO_PKG_VERSION"),
    description: "The NetBox pipeline's steps: admit a Staged VM, its MAC, DHCP reservation, HA rule, DNS, Active or Failed",
    needs: ["log", "netbox", "dhcp", "dns", "proxmox"],
}

use bindings::cradle::host::types::{Entry, Error};
use bindings::cradle::host::{dhcp, dns, log, netbox, proxmox};
use bindings::exports::cradle::host::pipeline::{Admission, Build, Event, Guest};
use cradle_netbox_logic::{Kind, Problem, admit, ha, journal, mac, settings};

struct Netbox;

/// A logic refusal as the WIT error of its kind.
fn error(p: Problem) -> Error {
    match p.kind {
        Kind::Invalid => Error::Invalid(p.message),
        Kind::Conflict => Error::Conflict(p.message),
        Kind::Failed => Error::Failed(p.message),
    }
}

fn info(message: &str, fields: &[(&str, String)]) {
    let fields: Vec<Entry> = fields.iter().map(|(k, v)| Entry { key: (*k).to_string(), value: v.clone() }).collect();
    log::event(log::Level::Info, message, &fields);
}

/// The capability's VM as the logic reads it.
fn logic_vm(v: netbox::Vm) -> admit::Vm {
    let cf = v.custom_fields;
    admit::Vm {
        id: v.id,
        name: v.name,
        status: v.status,
        vcpus: v.vcpus,
        memory_mb: v.memory_mb,
        node: cf.proxmox_node,
        template: cf.proxmox_template,
        datastore: cf.proxmox_datastore,
        vmid: cf.proxmox_vmid,
        semaphore_template: cf.semaphore_template,
        primary_ip4: v.primary_ip4.map(|ip| admit::Ip { address: ip.address, vm_interface: ip.vm_interface }),
    }
}

fn wit_build(b: admit::Build) -> Build {
    Build {
        name: b.name,
        netbox_id: b.netbox_id,
        node: b.node,
        template: b.template,
        datastore: b.datastore,
        cores: b.cores,
        memory_mb: b.memory_mb,
        vmid: b.vmid,
        interface: b.interface,
        address: b.address,
        cidr: b.cidr,
        semaphore_template: b.semaphore_template,
    }
}

fn wit_rule(r: ha::Rule) -> proxmox::HaRule {
    proxmox::HaRule {
        rule: r.rule,
        kind: r.kind,
        resources: r.resources,
        nodes: r.nodes,
        strict: r.strict,
        digest: r.digest,
    }
}

fn logic_rule(r: proxmox::HaRule) -> ha::Rule {
    ha::Rule { rule: r.rule, kind: r.kind, resources: r.resources, nodes: r.nodes, strict: r.strict, digest: r.digest }
}

impl Guest for Netbox {
    fn admit(event: Event) -> Result<Admission, Error> {
        let vm = logic_vm(netbox::read_vm(event.vm_id)?);
        Ok(match admit::admit(&vm, &event.trigger).map_err(error)? {
            admit::Admission::Skip(reason) => Admission::Skip(reason),
            admit::Admission::Build(b) => Admission::Build(wit_build(b)),
        })
    }

    fn mac_of(node: String, vmid: u32) -> Result<String, Error> {
        let config = proxmox::get_config(&node, vmid)?;
        let net0 = config.iter().find(|e| e.key == "net0").map(|e| e.value.as_str());
        mac::of_net0(net0, &node, vmid).map_err(error)
    }

    fn write_mac(interface: u64, mac: String, how: String) -> Result<(), Error> {
        let how = match settings::mac_write(&how).map_err(error)? {
            settings::MacWrite::Auto => netbox::MacWrite::Auto,
            settings::MacWrite::Field => netbox::MacWrite::Field,
            settings::MacWrite::Objects => netbox::MacWrite::Objects,
        };
        netbox::set_mac(interface, &mac, how)
    }

    fn reserve(site: Option<String>, mac: String, address: String, name: String) -> Result<(), Error> {
        settings::unifi_site(site.as_deref()).map_err(error)?;
        // "": the network whose subnet holds the address (wit/dhcp.wit).
        let r = dhcp::reserve("", &mac, &address, &name)?;
        info("DHCP reservation", &[("mac", r.mac), ("ip", r.ip), ("network", r.network)]);
        Ok(())
    }

    fn manage_ha(vmid: u32, node: String, rule: String) -> Result<(), Error> {
        let sid = ha::sid(vmid);
        if !proxmox::list_ha_resources()?.iter().any(|r| r.sid == sid) {
            proxmox::add_ha_resource(vmid, Some("stopped"), Some("cradle"))?;
        }
        // The node's rule is shared by every VM on the node and written
        // optimistically (created by its id, replaced with its digest): a run
        // writing it at the same moment makes this write a conflict, and it
        // is read and tried again.
        let mut tries = 0;
        loop {
            let rules: Vec<ha::Rule> = proxmox::list_ha_rules()?.into_iter().map(logic_rule).collect();
            let write = match ha::plan(&rules, vmid, &node, &rule).map_err(error)? {
                ha::Step::Done => return Ok(()),
                ha::Step::Write(r) => wit_rule(r),
            };
            match proxmox::put_ha_rule(&write) {
                Ok(()) => {
                    info("HA node-affinity rule", &[("rule", rule.clone()), ("resources", write.resources)]);
                    return Ok(());
                }
                Err(Error::Conflict(m)) if tries + 1 < ha::TRIES => {
                    tries += 1;
                    info("HA rule changed meanwhile; reading it again", &[("rule", rule.clone()), ("why", m)]);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn set_dns(zone: String, name: String, address: String, ttl: u32, ptr: bool) -> Result<bool, Error> {
        settings::dns_ptr(ptr).map_err(error)?;
        let rec = dns::DnsRecord {
            zone: zone.clone(),
            name: settings::fqdn(&name, &zone),
            kind: dns::RecordKind::A,
            value: address,
            ttl,
        };
        dns::upsert(&rec)
    }

    fn finished(
        netbox_id: u64,
        name: String,
        vmid: u32,
        node: String,
        mac: String,
        run_id: String,
    ) -> Result<(), Error> {
        // The journal entry first: the status is what operators (and
        // scripts) watch, and it says the entry is there.
        let text = journal::success(&name, vmid, &node, &mac, &run_id);
        netbox::journal(netbox_id, netbox::JournalKind::Success, &text)?;
        netbox::set_status(netbox_id, "active")
    }

    fn report_failure(netbox_id: u64, step: String, message: String, run_id: Option<String>) -> Result<bool, Error> {
        if netbox::read_vm(netbox_id)?.status == "failed" {
            return Ok(false);
        }
        let text = journal::failure(&step, &message, run_id.as_deref());
        netbox::journal(netbox_id, netbox::JournalKind::Danger, &text)?;
        netbox::set_status(netbox_id, "failed")?;
        Ok(true)
    }

    fn list_staged(filters: Vec<Entry>, limit: u32) -> Result<Vec<netbox::VmSummary>, Error> {
        netbox::list_vms("staged", &filters, limit)
    }
}
