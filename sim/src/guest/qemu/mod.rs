//! Guest mode `qemu`: a started VM is a real qemu virtual machine booting the Debian 12
//! image of `scripts/guest-image` with real cloud-init and OpenSSH.
//!
//! Contract:
//! - A cold start (start task, API reboot, a restart of the simulator with the VM
//!   running) builds the NoCloud ISO from the seed PVE would build (`seed.rs`) when the
//!   VM has a cloud-init drive, creates the VM's disk on first use (a qcow2 overlay on
//!   the image, kept across stops and starts, removed with the VM) and starts qemu with
//!   the VM's `cores`, `memory`, `net0` MAC and `smbios1` uuid (`args.rs`). Without the
//!   drive there is no CD: the ISO is gone from the guest after the next API reboot or
//!   stop/start, never after an in-guest reboot (qemu resets in place then).
//! - The guest reaches nothing outside its own user-mode network; port 22 is forwarded
//!   from `127.B.C.D:<guest_ssh_port>` (`net.rs`).
//! - Stop kills qemu; shutdown and API reboot press the ACPI power button over QMP and
//!   wait for qemu to exit (`shutdown_timeout`, then `got timeout`); `reset` is QMP's
//!   `system_reset`. A guest that powers itself off ends its qemu, and the VM is
//!   stopped, as PVE's qmeventd reports it.
//! - Each qemu is named `cradle-sim-vm<vmid>` and records its pid in the VM's
//!   directory; qemu processes die with the cluster (shutdown, drop), and a simulator
//!   started on a state dir first kills the ones a killed predecessor left behind.
//!
//! Failure modes: what cannot boot (no address for the forward, `genisoimage` or
//! `qemu-img` failing) fails the start task with the reason; qemu failing to start is
//! logged with the tail of its log, and the VM is stopped.

mod args;
mod net;
mod qmp;
mod seed;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use crate::config::{GuestMode, QemuSettings};
use crate::guest::CiSeed;
use crate::model::{GuestDisk, Vm, props};
use crate::sim::{Sim, lock};

/// The interface network-data must configure: net0 in PCI slot 18.
pub const GUEST_IFACE: &str = "ens18";

/// The qemu processes of one cluster, by VMID.
#[derive(Default)]
pub struct QemuGuests {
    vms: std::sync::Mutex<HashMap<u32, QemuVm>>,
    /// Processes told to die and not yet reaped: the next boot of the VM waits for
    /// them (qemu holds a lock on the disk until it is gone).
    dying: std::sync::Mutex<HashMap<u32, watch::Receiver<bool>>>,
    /// Boot generations, never reused, so a late exit of an old process cannot
    /// stop a newer boot.
    generations: std::sync::atomic::AtomicU64,
}

struct QemuVm {
    generation: u64,
    dir: PathBuf,
    forward: SocketAddr,
    kill: Option<oneshot::Sender<()>>,
    exited: watch::Receiver<bool>,
}

/// The qemu settings, when this VM boots qemu.
pub fn settings(sim: &Sim, vmid: u32) -> Option<&QemuSettings> {
    match &sim.cfg.guest_mode {
        GuestMode::Qemu(q) if q.vmids.as_ref().is_none_or(|v| v.contains(&vmid)) => Some(q),
        _ => None,
    }
}

fn vm_dir(sim: &Sim, vmid: u32) -> PathBuf {
    sim.root().join("qemu").join(vmid.to_string())
}

fn net0_mac(vm: &Vm) -> Result<String, String> {
    let net0 = vm.config.get("net0").ok_or_else(|| format!("VM {} has no net0", vm.vmid))?;
    props::split_props(net0)
        .into_iter()
        .find(|(k, _)| props::NIC_MODELS.contains(&k.as_str()))
        .map(|(_, mac)| mac)
        .ok_or_else(|| format!("net0 of VM {} has no MAC address", vm.vmid))
}

fn number(vm: &Vm, key: &str, default: u32) -> u32 {
    vm.config.get(key).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Boot the VM's qemu (a cold start). `disk` is what the simulator knows of the
/// guest's disk (its network, as cloud-init installed it); `seed` is the NoCloud seed
/// when the VM has a cloud-init drive.
pub fn power_on(sim: &Arc<Sim>, vm: &Vm, disk: &GuestDisk, seed: Option<&CiSeed>) -> Result<(), String> {
    let q = settings(sim, vm.vmid).ok_or("not a qemu guest")?;
    let [kernel, initrd, image] = q.image_files().map_err(|e| e.to_string())?;
    let vmid = vm.vmid;
    let dir = vm_dir(sim, vmid);
    crate::fsutil::ensure_dir(&dir).map_err(|e| e.to_string())?;
    let net = net::plan(&disk.net, GUEST_IFACE).map_err(|e| format!("qemu guest {vmid}: {e}"))?;
    let disk_path = dir.join("disk.qcow2");
    if !disk_path.exists() {
        overlay(&image, &disk_path)?;
    }
    let iso = seed.map(|s| seed::build(&dir, s)).transpose()?;
    let port = sim.cfg.guest_ssh_port;
    let uuid = vm.config.get("smbios1").and_then(|s| props::prop(s, "uuid"));
    let mac = net0_mac(vm)?;
    let spec = args::BootSpec {
        vmid,
        kernel: &kernel,
        initrd: &initrd,
        disk: &disk_path,
        seed: iso.as_deref(),
        mac: &mac,
        net: &net,
        forward_port: port,
        cores: number(vm, "cores", 1) * number(vm, "sockets", 1),
        memory_mib: number(vm, "memory", 512),
        accel: q.accel.resolve(),
        dir: &dir,
        uuid: uuid.as_deref(),
    };
    let argv = args::build(&spec);
    let binary = q.binary.clone();
    let (kill_tx, kill_rx) = oneshot::channel();
    let (exited_tx, exited_rx) = watch::channel(false);
    let generation = sim.qemu.generations.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    kill(sim, vmid);
    let previous = lock(&sim.qemu.dying).remove(&vmid);
    lock(&sim.qemu.vms).insert(
        vmid,
        QemuVm {
            generation,
            dir: dir.clone(),
            forward: SocketAddr::from((net.forward, port)),
            kill: Some(kill_tx),
            exited: exited_rx,
        },
    );
    let sim = sim.clone();
    tokio::spawn(async move {
        // The disk is locked by qemu until the previous process is gone.
        if let Some(mut old) = previous {
            let _ = old.wait_for(|e| *e).await;
        }
        run(&sim, vmid, generation, &binary, &argv, &dir, kill_rx, exited_tx).await;
    });
    Ok(())
}

fn overlay(image: &Path, disk: &Path) -> Result<(), String> {
    let out = std::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
        .arg(image)
        .arg(disk)
        .output()
        .map_err(|e| format!("cannot run qemu-img ({e}); install Debian's qemu-utils"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("qemu-img create {}: {}", disk.display(), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

#[allow(clippy::too_many_arguments, reason = "one process's inputs, each used once")]
async fn run(
    sim: &Arc<Sim>,
    vmid: u32,
    generation: u64,
    binary: &Path,
    argv: &[String],
    dir: &Path,
    kill: oneshot::Receiver<()>,
    exited: watch::Sender<bool>,
) {
    let log_path = dir.join("qemu.log");
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).ok();
    // `setpriv --pdeathsig KILL` (util-linux): qemu dies with the thread that
    // started it, so a simulator killed with SIGKILL leaves no guest running.
    let mut cmd = match which("setpriv") {
        Some(setpriv) => {
            let mut c = tokio::process::Command::new(setpriv);
            c.args(["--pdeathsig", "KILL", "--"]).arg(binary);
            c
        }
        None => tokio::process::Command::new(binary),
    };
    cmd.args(argv).stdin(Stdio::null()).kill_on_drop(true);
    match log.and_then(|l| l.try_clone().ok().map(|c| (l, c))) {
        Some((out, err)) => cmd.stdout(out).stderr(err),
        None => cmd.stdout(Stdio::null()).stderr(Stdio::null()),
    };
    let _ = std::fs::remove_file(dir.join("qmp.sock"));
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(vmid, "qemu did not start: {e}");
            stopped(sim, vmid, generation);
            let _ = exited.send(true);
            return;
        }
    };
    if let Some(pid) = child.id() {
        let _ = crate::fsutil::write_private(&dir.join("qemu.pid"), pid.to_string().as_bytes());
    }
    let mut down = sim.shutdown.subscribe();
    let natural = tokio::select! {
        status = child.wait() => {
            if !matches!(status, Ok(s) if s.success()) {
                tracing::warn!(vmid, ?status, "qemu ended: {}", tail(&log_path));
            }
            true
        }
        _ = kill => false,
        _ = crate::guest::fired(&mut down) => false,
    };
    if !natural {
        let _ = child.kill().await;
    }
    let _ = std::fs::remove_file(dir.join("qemu.pid"));
    // State first, then the signal: whoever waits for the exit (a reboot) starts the
    // next boot only after this one is recorded as over.
    if natural {
        stopped(sim, vmid, generation);
    }
    let _ = exited.send(true);
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// qemu ended on its own (the guest powered off, or qemu failed): the VM is stopped.
fn stopped(sim: &Sim, vmid: u32, generation: u64) {
    {
        let mut vms = lock(&sim.qemu.vms);
        if vms.get(&vmid).is_none_or(|v| v.generation != generation) {
            return;
        }
        vms.remove(&vmid);
    }
    let mut st = lock(&sim.state);
    if let Some(vm) = st.vms.get_mut(&vmid) {
        vm.set_stopped();
    }
    sim.changed();
}

/// Whether this VM's qemu is running.
pub fn is_running(sim: &Sim, vmid: u32) -> bool {
    lock(&sim.qemu.vms).contains_key(&vmid)
}

/// Kill the VM's qemu (stop, or a forced shutdown); returns at once (the next
/// boot of the VM waits until the process is gone).
pub fn kill(sim: &Sim, vmid: u32) {
    let Some(mut v) = lock(&sim.qemu.vms).remove(&vmid) else { return };
    if let Some(k) = v.kill.take() {
        let _ = k.send(());
    }
    lock(&sim.qemu.dying).insert(vmid, v.exited);
}

/// Press the power button and wait until qemu is gone.
pub async fn powerdown(sim: &Arc<Sim>, vmid: u32, timeout: Duration) -> Result<(), String> {
    let (dir, mut exited) = {
        let vms = lock(&sim.qemu.vms);
        match vms.get(&vmid) {
            Some(v) => (v.dir.clone(), v.exited.clone()),
            None => return Ok(()),
        }
    };
    qmp::execute(&dir.join("qmp.sock"), "system_powerdown").await?;
    match tokio::time::timeout(timeout, exited.wait_for(|e| *e)).await {
        Ok(_) => Ok(()),
        Err(_) => Err("VM quit/powerdown failed - got timeout".into()),
    }
}

/// Reset the VM in place (`qm reset`): the guest reboots with the media it has.
pub async fn reset(sim: &Arc<Sim>, vmid: u32) -> Result<(), String> {
    let dir = lock(&sim.qemu.vms).get(&vmid).map(|v| v.dir.clone());
    match dir {
        Some(d) => qmp::execute(&d.join("qmp.sock"), "system_reset").await,
        None => Ok(()),
    }
}

/// Where cradle reaches the guest's sshd.
pub fn ssh_addr(sim: &Sim, vmid: u32) -> Option<SocketAddr> {
    lock(&sim.qemu.vms).get(&vmid).map(|v| v.forward)
}

/// Remove a destroyed VM's disk, seed and logs.
pub fn destroy(sim: &Sim, vmid: u32) {
    kill(sim, vmid);
    let _ = std::fs::remove_dir_all(vm_dir(sim, vmid));
}

/// Kill every qemu of this cluster (shutdown).
pub fn kill_all(sim: &Sim) {
    for (_, mut v) in lock(&sim.qemu.vms).drain() {
        if let Some(k) = v.kill.take() {
            let _ = k.send(());
        }
    }
}

/// Kill the qemu processes a killed simulator left behind in this state dir: a pid
/// file whose process is a qemu named for that VM.
pub fn reap_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root.join("qemu")) else { return };
    for e in entries.flatten() {
        let Some(vmid) = e.file_name().to_str().map(str::to_string) else { continue };
        let pid_file = e.path().join("qemu.pid");
        let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse::<u32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains(&format!("cradle-sim-vm{vmid},")) && cmdline.contains(&*e.path().to_string_lossy()) {
            tracing::warn!(pid, vmid, "killing the qemu a previous simulator left running");
            let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let _ = std::fs::remove_file(pid_file);
    }
}
