//! A maintenance diff over an arbitrary live config: the first line holds the
//! run's settings (`running`, `allow-disks`, `allow-nics`, `allow-moves`, and what the
//! inventory wants: `cores=N memory=N disk=N data=SLOT:STORAGE:GIB
//! nic=SLOT:BRIDGE[:VLAN] tags=a;b order=N`), every other line is a config
//! entry (`key: value`) or a pending entry (`pending key: value`, `pending
//! -key` for a pending delete).
//!
//! Invariants: the diff never panics; a refused change is no operation; and
//! the config PVE would hold once the plan is applied (every `expect` value
//! written, a new disk allocated, a new NIC given a MAC, a moved disk given
//! a new volume on its target storage) is `Done` for `progress` under a new
//! digest, with no move or resize left, nothing changed and nothing
//! outstanding.
#![no_main]

use std::collections::BTreeMap;

use cradle_fuzz::caps::maintenance::change::{Allow, Class, Live, PendingEntry, Wanted, WantedDisk, WantedNic};
use cradle_fuzz::caps::maintenance::diff::diff;
use cradle_fuzz::caps::maintenance::progress::{Step, progress};
use cradle_fuzz::caps::maintenance::pve::{Drive, is_disk_key, is_net_key, moved, nic_model, props};
use cradle_fuzz::caps::maintenance::verify::outstanding;
use libfuzzer_sys::fuzz_target;

fn wanted(line: &str) -> (Wanted, Allow, bool) {
    let mut w = Wanted {
        name: "fuzz-1".into(),
        vmid: 150,
        node: "pve1".into(),
        storage: "local-lvm".into(),
        cores: 2,
        memory_mib: 2048,
        disk_gib: None,
        disks: vec![],
        nics: vec![],
        startup_order: None,
        tags: vec![],
    };
    let (mut allow, mut running) = (Allow::default(), false);
    for word in line.split_whitespace() {
        let (k, v) = word.split_once('=').unwrap_or((word, ""));
        match k {
            "running" => running = true,
            "allow-disks" => allow.disk_removal = true,
            "allow-nics" => allow.nic_replacement = true,
            "allow-moves" => allow.disk_move = true,
            "cores" => w.cores = v.parse().unwrap_or(1),
            "memory" => w.memory_mib = v.parse().unwrap_or(1024),
            "disk" => w.disk_gib = v.parse().ok(),
            "order" => w.startup_order = v.parse().ok(),
            "tags" => w.tags = v.split(';').map(String::from).collect(),
            "data" => {
                let mut p = v.split(':');
                if let (Some(slot), Some(storage), Some(gib)) = (p.next(), p.next(), p.next())
                    && let Ok(size_gib) = gib.parse()
                {
                    w.disks.push(WantedDisk { slot: slot.into(), storage: storage.into(), size_gib });
                }
            }
            "nic" => {
                let mut p = v.split(':');
                if let (Some(slot), Some(bridge)) = (p.next(), p.next()) {
                    let vlan = p.next().and_then(|t| t.parse().ok());
                    w.nics.push(WantedNic { slot: slot.into(), bridge: bridge.into(), vlan });
                }
            }
            _ => {}
        }
    }
    (w, allow, running)
}

/// What PVE makes of an applied value: a new disk's allocation becomes a
/// volume with its size, a new NIC's bare model gets a MAC.
fn as_pve_stores(key: &str, value: &str) -> String {
    if is_disk_key(key)
        && let Some((storage, gib)) = Drive::parse(value).allocation()
    {
        let rest: Vec<&str> = value.split(',').skip(1).collect();
        let mut out = format!("{storage}:vm-150-disk-9,size={gib}G");
        for r in rest {
            out.push(',');
            out.push_str(r);
        }
        return out;
    }
    if is_net_key(key)
        && let Some((model, None)) = nic_model(&props(value))
    {
        let model = model.to_string();
        return value
            .split(',')
            .map(|p| if p == model { format!("{model}=BC:24:11:00:00:99") } else { p.to_string() })
            .collect::<Vec<_>>()
            .join(",");
    }
    value.to_string()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.lines();
    let (want, allow, running) = wanted(lines.next().unwrap_or(""));
    let mut config = BTreeMap::new();
    let mut pending = vec![];
    for line in lines {
        if let Some(p) = line.strip_prefix("pending ") {
            match p.strip_prefix('-') {
                Some(key) => pending.push(PendingEntry { key: key.into(), value: None, pending: None, delete: true }),
                None => {
                    if let Some((k, v)) = p.split_once(':') {
                        let v = v.trim_start().to_string();
                        pending.push(PendingEntry {
                            key: k.trim().into(),
                            value: None,
                            pending: Some(v),
                            delete: false,
                        });
                    }
                }
            }
        } else if let Some((k, v)) = line.split_once(':') {
            config.insert(k.trim().to_string(), v.trim_start().to_string());
        }
    }
    let live = Live { config: config.clone(), pending, running, digest: "d0".into() };
    let Ok(planned) = diff(&want, &live, &allow) else { return };
    for c in planned.changes.iter().filter(|c| c.class == Class::Refused) {
        assert!(
            !planned.expect.contains_key(&c.key)
                || planned.changes.iter().any(|o| o.key == c.key && o.class != Class::Refused),
            "refused {c:?} is in the operations"
        );
    }
    let mut applied = config.clone();
    applied.remove("digest");
    for (k, v) in &planned.expect {
        match v {
            // Only a written value is turned into what PVE stores (a resize's
            // expected value keeps the volume, whatever its name looks like).
            Some(v) if planned.set.contains_key(k) => applied.insert(k.clone(), as_pve_stores(k, v)),
            // A move: PVE's new volume on the target storage.
            Some(v) => match planned.moves.iter().find(|m| &m.disk == k) {
                Some(m) => applied.insert(k.clone(), moved(v, &format!("{}:vm-150-disk-8", m.to))),
                None => applied.insert(k.clone(), v.clone()),
            },
            None => applied.remove(k),
        };
    }
    if !planned.delete.is_empty() {
        applied.insert("unused7".into(), "local-lvm:vm-150-disk-7".into());
    }
    if let Some(m) = planned.moves.first() {
        applied.insert("unused8".into(), m.volume.clone());
    }
    let p = progress(&planned, &applied, "d1");
    assert_eq!(p.changed, None, "an applied plan is no conflict: {planned:?} on {applied:?}");
    assert_eq!(p.config, Step::Done, "{planned:?} on {applied:?}");
    assert!(p.resize.is_empty(), "resizes left: {:?}", p.resize);
    assert!(p.moves.is_empty(), "moves left: {:?}", p.moves);
    assert!(outstanding(&planned, &applied, &[]).is_empty(), "{planned:?} on {applied:?}");
    let fresh = progress(&planned, &config, "d0");
    assert_eq!(fresh.changed, None);
});
