//! `qm disk import <vmid> <source> <storage> [--target-disk <key>] [--format <fmt>]` and
//! its alias `qm importdisk` on a node (qemu-server `PVE/CLI/qm.pm` `importdisk`,
//! `PVE/QemuServer/ImportDisk.pm` `do_import`, `PVE/QemuServer/QemuImage.pm` `convert`).
//!
//! Contract, in PVE's order: the VM's config must be on this node (`Configuration file
//! 'nodes/<node>/qemu-server/<vmid>.conf' does not exist`), unlocked (`VM is locked
//! (<lock>)`); the source a regular file of the node (node paths as the other node
//! commands resolve them; else `<source>: non-existent or non-regular file`); the
//! storage must exist and hold `images` (`storage <id> does not support vm images`).
//! Then it prints `importing disk '<source>' to VM <vmid> ...`, reads the image
//! (auto-detected: qcow2 / sparse vmdk by magic, else raw; see `crate::image`),
//! allocates the next free `vm-<vmid>-disk-N`, "copies" for `timings.import_per_gib`
//! per GiB of data (scaled; `transferred X of Y (P%)` lines as `convert` prints them)
//! and attaches the volid: at `--target-disk` (a taken key fails after the copy with
//! `cowardly refusing to overwrite existing entry: <key>`, the volume freed) or at the
//! lowest free `unusedN`. It ends `<key>: successfully imported disk '<value>'` (PVE
//! 8.3+) or `Successfully imported disk as '<key>:<volid>'` (before 8.3, which has no
//! `--target-disk`). Errors go to stderr with exit 255 (a Perl `die`); parameter
//! errors are `400 ...` with the usage line. Simulator limits: only storages without a
//! path (lvmthin: always raw, `--format` other than raw warns as PVE does) are modelled
//! targets; a target ide/sata key of a running VM stays pending (not hot-pluggable),
//! others attach at once. Never panics.

use std::sync::Arc;

use super::commands::Outcome;
use super::node_cmd::place;
use crate::model::{Power, Vm};
use crate::sim::{Sim, lock};

/// Exit code of a Perl `die` in a PVE CLI.
const DIE: u32 = 255;

fn die(msg: impl Into<String>) -> Outcome {
    let mut m = msg.into();
    if !m.ends_with('\n') {
        m.push('\n');
    }
    Outcome::fail(DIE, m)
}

struct Args<'a> {
    vmid: &'a str,
    source: &'a str,
    storage: &'a str,
    format: Option<&'a str>,
    target: Option<&'a str>,
}

/// Drive names `is_valid_drivename` accepts (Drive.pm: ide0-3, sata0-5, scsi0-30,
/// virtio0-15, efidisk0, tpmstate0).
fn valid_drive(key: &str) -> bool {
    let idx = |p: &str, max: u32| {
        key.strip_prefix(p)
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) && (n.len() == 1 || !n.starts_with('0')))
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n <= max)
    };
    idx("ide", 3) || idx("sata", 5) || idx("scsi", 30) || idx("virtio", 15) || key == "efidisk0" || key == "tpmstate0"
}

fn valid_target(key: &str) -> bool {
    let unused = key
        .strip_prefix("unused")
        .filter(|n| !n.is_empty() && (n.len() == 1 || !n.starts_with('0')))
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| n <= 255);
    valid_drive(key) || unused
}

fn param_err(usage: &str, errors: &[(&str, String)]) -> Outcome {
    let mut m = String::from("400 Parameter verification failed.\n");
    for (k, e) in errors {
        m.push_str(&format!("{k}: {e}\n"));
    }
    m.push_str(usage);
    m.push('\n');
    Outcome::fail(DIE, m)
}

fn parse<'a>(sim: &Sim, cmd: &str, args: &[&'a str]) -> Result<Args<'a>, Outcome> {
    let usage = format!("qm {cmd} <vmid> <source> <storage> [OPTIONS]");
    let mut pos = Vec::new();
    let (mut format, mut target) = (None, None);
    let mut it = args.iter().copied();
    while let Some(a) = it.next() {
        let Some(opt) = a.strip_prefix("--").or_else(|| a.strip_prefix('-').filter(|o| !o.is_empty())) else {
            pos.push(a);
            continue;
        };
        let (name, inline) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let known = name == "format" || (name == "target-disk" && sim.cfg.has_import_content());
        if !known {
            return Err(Outcome::fail(DIE, format!("Unknown option: {name}\n400 unable to parse option\n{usage}\n")));
        }
        let Some(value) = inline.or_else(|| it.next()) else {
            return Err(Outcome::fail(
                DIE,
                format!("Option {name} requires an argument\n400 unable to parse option\n{usage}\n"),
            ));
        };
        if name == "format" { format = Some(value) } else { target = Some(value) }
    }
    let [vmid, source, storage] = pos.as_slice() else {
        let what = if pos.len() > 3 { "too many arguments" } else { "not enough arguments" };
        return Err(Outcome::fail(DIE, format!("400 {what}\n{usage}\n")));
    };
    let mut errors = Vec::new();
    match vmid.parse::<i64>() {
        Err(_) => errors.push(("vmid", format!("type check ('integer') failed - got '{vmid}'"))),
        Ok(n) if n < 100 => errors.push(("vmid", "value must have a minimum value of 100".into())),
        Ok(n) if n > 999_999_999 => errors.push(("vmid", "value must have a maximum value of 999999999".into())),
        Ok(_) => {}
    }
    if let Some(f) = format.filter(|f| !["raw", "qcow2", "vmdk"].contains(f)) {
        errors.push(("format", format!("value '{f}' does not have a value in the enumeration 'raw, qcow2, vmdk'")));
    }
    if let Some(t) = target.filter(|t| !valid_target(t)) {
        errors.push(("target-disk", format!("value '{t}' does not have a value in the enumeration of drive names")));
    }
    if !errors.is_empty() {
        return Err(param_err(&usage, &errors));
    }
    Ok(Args { vmid, source, storage, format, target })
}

/// `qm ARGS` on `node`, if it is a modelled `qm` command.
pub fn run(sim: &Arc<Sim>, node: &str, args: &[&str]) -> Outcome {
    let (cmd, rest) = match args {
        ["importdisk", rest @ ..] => ("importdisk", rest),
        ["disk", "import", rest @ ..] => ("disk import", rest),
        ["unlock", vmid] => return unlock(sim, node, vmid),
        _ => {
            return die(format!(
                "simulator: 'qm {}' is not modelled (only 'qm disk import' and 'qm unlock')",
                args.join(" ")
            ));
        }
    };
    match parse(sim, cmd, rest) {
        Ok(a) => import(sim, node, &a),
        Err(out) => out,
    }
}

/// `qm unlock <vmid>` (qemu-server `PVE/CLI/qm.pm` `unlock`): under the config
/// lock, load the VM's config from this node (else `Configuration file ...
/// does not exist`) and write it back without its `lock`; prints nothing. The
/// operator's way out of a lock no task holds any more.
fn unlock(sim: &Arc<Sim>, node: &str, vmid: &str) -> Outcome {
    let Some(id) = vmid.parse::<u32>().ok().filter(|id| (100..=999_999_999).contains(id)) else {
        return param_err("USAGE: qm unlock <vmid>", &[("vmid", "value does not look like a valid VM ID".to_string())]);
    };
    let mut st = lock(&sim.state);
    let Some(vm) = st.vms.get_mut(&id).filter(|v| v.node == node && !v.is_ct()) else {
        return die(format!("Configuration file '{}' does not exist", Vm::conf_path(node, id)));
    };
    vm.config.remove("lock");
    drop(st);
    sim.changed();
    Outcome::ok(String::new())
}

/// `render_bytes($v, 1)` of pve-common `PVE/Format.pm`.
fn render_bytes(v: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = v as f64;
    let mut unit = 0;
    if v > 1023 {
        unit = ((x.ln() / 1024f64.ln()) as usize).min(UNITS.len() - 1);
        x /= 1024f64.powi(unit as i32);
    }
    format!("{x:.1} {}", UNITS[unit])
}

fn progress(size: u64, upto: f64) -> String {
    let mut out = String::new();
    for p in [0.0, 25.0, 50.0, 75.0, 100.0].into_iter().filter(|p| *p <= upto) {
        let done = (size as f64 * p / 100.0) as u64;
        out.push_str(&format!("transferred {} of {} ({p:.2}%)\n", render_bytes(done), render_bytes(size)));
    }
    out
}

fn import(sim: &Arc<Sim>, node: &str, a: &Args) -> Outcome {
    let vmid: u32 = a.vmid.parse().unwrap_or_default();
    let target = a.target.filter(|t| valid_drive(t));
    {
        let st = lock(&sim.state);
        let Some(vm) = st.vms.get(&vmid).filter(|v| v.node == node && !v.is_ct()) else {
            return die(format!("Configuration file '{}' does not exist", Vm::conf_path(node, vmid)));
        };
        if let Err(e) = crate::api::check_lock(vm) {
            return die(e);
        }
    }
    let real = place(sim, node, a.source, true).map(|(_, r)| r).filter(|r| r.is_file());
    let Some(real) = real else { return die(format!("{}: non-existent or non-regular file", a.source)) };
    let Some(spec) = sim.cfg.storages.iter().find(|s| s.id == a.storage) else {
        return die(format!("storage '{}' does not exist", a.storage));
    };
    if !spec.content.split(',').any(|c| c == "images") {
        return die(format!("storage {} does not support vm images", a.storage));
    }
    if spec.path.is_some() {
        return die(format!("simulator: importing to '{}' storage '{}' is not modelled", spec.kind, a.storage));
    }
    let mut stdout = format!("importing disk '{}' to VM {vmid} ...\n", a.source);
    let mut stderr = String::new();
    let info = match crate::image::detect(&real) {
        Ok(i) => i,
        Err(e) => return Outcome { stdout, ..die(e) },
    };
    if let Some(f) = a.format.filter(|f| *f != "raw") {
        stderr.push_str(&format!("format '{f}' is not supported by the target storage - using 'raw' instead\n"));
    }
    // vdisk_alloc: the volume exists from here on (kept in the VM's volume list).
    let volid = {
        let mut st = lock(&sim.state);
        let Some(vm) = st.vms.get_mut(&vmid) else {
            return Outcome {
                stdout,
                ..die(format!("Configuration file '{}' does not exist", Vm::conf_path(node, vmid)))
            };
        };
        let volid = vm.next_disk_name(a.storage);
        vm.volumes.insert(volid.clone(), info.virtual_size);
        volid
    };
    sim.changed();
    let free = |sim: &Sim| {
        if let Some(vm) = lock(&sim.state).vms.get_mut(&vmid) {
            vm.volumes.remove(&volid);
        }
        sim.changed();
    };
    let avail = crate::api::storage_usage(sim, node, spec).2 + info.virtual_size;
    if info.data > avail {
        free(sim);
        stdout.push_str(&progress(info.virtual_size, 0.0));
        stderr.push_str(&format!(
            "copy failed: qemu-img: error while writing at byte {avail}: No space left on device\n"
        ));
        return Outcome { stdout, ..Outcome::fail(DIE, stderr) };
    }
    let gib = info.data as f64 / (1u64 << 30) as f64;
    let delay = sim.scaled(sim.cfg.timings.import_per_gib.mul_f64(gib));
    if !delay.is_zero() {
        // A blocking thread (node commands run on one): the copy takes its time.
        std::thread::sleep(delay);
    }
    stdout.push_str(&progress(info.virtual_size, 100.0));
    let attached = attach(sim, node, vmid, &volid, target);
    sim.changed();
    match attached {
        Ok((key, value)) => {
            if sim.cfg.has_import_content() {
                stdout.push_str(&format!("{key}: successfully imported disk '{value}'\n"));
            } else {
                stdout.push_str(&format!("Successfully imported disk as '{key}:{volid}'\n"));
            }
            Outcome { stdout, stderr, ..Outcome::ok("") }
        }
        Err(e) => {
            free(sim);
            stderr.push_str(&e);
            stderr.push('\n');
            Outcome { stdout, ..Outcome::fail(DIE, stderr) }
        }
    }
}

/// `$create_drive` of `do_import`: the config as it is now, lock checked again.
fn attach(sim: &Sim, node: &str, vmid: u32, volid: &str, target: Option<&str>) -> Result<(String, String), String> {
    let mut st = lock(&sim.state);
    let Some(vm) = st.vms.get_mut(&vmid).filter(|v| v.node == node && !v.is_ct()) else {
        return Err(format!("Configuration file '{}' does not exist", Vm::conf_path(node, vmid)));
    };
    crate::api::check_lock(vm)?;
    let key = match target {
        Some(t) => {
            if vm.config.contains_key(t) {
                return Err(format!("cowardly refusing to overwrite existing entry: {t}"));
            }
            let pending = vm.power == Power::Running && (t.starts_with("ide") || t.starts_with("sata"));
            if pending {
                vm.pending.insert(t.to_string(), volid.to_string());
            } else {
                vm.config.insert(t.to_string(), volid.to_string());
            }
            t.to_string()
        }
        None => {
            let key = (0..256).map(|i| format!("unused{i}")).find(|k| !vm.config.contains_key(k));
            let key = key.ok_or("Too many unused volumes - please delete them first.")?;
            vm.config.insert(key.clone(), volid.to_string());
            key
        }
    };
    let value = vm.config.get(&key).cloned().unwrap_or_default();
    Ok((key, value))
}
