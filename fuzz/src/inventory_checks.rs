//! What the inventory targets assert beyond "no panic".

use std::path::Path;

use crate::inventory::{Inventory, ResolveOptions, resolve, resolve_selected};

/// Parse `text`, evaluate the `--limit` patterns and resolve every host.
///
/// Invariants: a selection holds only inventory hosts, in inventory order
/// (whatever the pattern's order); resolving a host gives the same plan whether
/// it is resolved alone or with the selection (its VMID never depends on
/// `--limit`, invariant 6).
pub fn exercise(text: &str, yaml: bool) {
    let path = Path::new(if yaml { "fuzz/hosts.yml" } else { "fuzz/hosts.ini" });
    let inv = if yaml { Inventory::from_yaml(text, path) } else { Inventory::from_ini(text, path) };
    let Ok(inv) = inv else { return };
    let hosts = inv.hosts();
    // Ranges can name many hosts; resolving each is the same code per host.
    let hosts = &hosts[..hosts.len().min(64)];
    for group in inv.groups() {
        let _ = inv.group_hosts(group);
    }
    let opts = ResolveOptions::default();
    for host in hosts {
        let _ = inv.host_groups(host.as_str());
        let _ = inv.host_vars(host.as_str());
        let _ = inv.guest_vars(host.as_str());
    }
    let first = text.lines().next().and_then(|l| l.strip_prefix("#limit "));
    let mut patterns = vec![None, Some("all"), Some("!ungrouped:&all")];
    patterns.extend(first.map(Some));
    for pattern in patterns {
        let Ok(selected) = inv.select(pattern) else { continue };
        let all = inv.hosts();
        let mut at = 0;
        for host in &selected {
            let Some(ix) = all[at..].iter().position(|h| h == host) else {
                panic!("--limit {pattern:?} selected {host:?} out of inventory order or outside the inventory");
            };
            at += ix + 1;
        }
        let selected = &selected[..selected.len().min(64)];
        if let Ok(plans) = resolve_selected(&inv, selected, &opts) {
            for (host, plan) in selected.iter().zip(&plans) {
                let alone = resolve(&inv, host.as_str(), &opts).expect("a host resolved in a selection resolves alone");
                assert_eq!(format!("{alone:?}"), format!("{plan:?}"), "{host:?} resolves differently alone");
            }
        }
    }
    for host in hosts {
        let _ = resolve(&inv, host.as_str(), &opts);
    }
}
