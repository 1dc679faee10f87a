//! What a `set-config` call touches, read from its values the way PVE reads
//! them (property strings, volume ids), so the policy can compare every
//! storage, volume owner, snippet and node-side key with the grant.
//!
//! Contract:
//! - [`describe`] turns the keys a call sets and deletes into a list of
//!   [`Touch`]es; it performs no I/O and decides nothing. The `proxmox`
//!   capability's rules ([`super::scope`]) compare the list with the grant.
//! - Every value is described, not only the first disk: each drive key
//!   (`scsiN`, `virtioN`, `sataN`, `ideN`, `efidisk0`, `tpmstate0`, `unusedN`,
//!   the `cdrom` alias of `ide2`), its `file=` and `import-from=` options
//!   (an import from a path on the node is an [`Touch::ImportPath`], one from
//!   a storage's `import` content a storage touch),
//!   `vmstate`/`vmstatestorage`, every part of `cicustom`, `hookscript`, and the
//!   keys that run code on the node or hand the guest a host resource
//!   ([`NODE_KEYS`]).
//! - A value that cannot be attributed (a host path, a volume whose owning
//!   VMID its name does not tell) is described as such, so the policy fails
//!   closed on it instead of passing it.
//! - Deleting a drive is described from the VM's current config (the caller
//!   reads it): a drive holding a disk image is a [`Touch::DeletesDisk`]; an
//!   empty CD drive, an ISO or the cloud-init drive is not (finalization
//!   deletes the cloud-init drive without a destructive grant). `unusedN`
//!   always holds a disk, and deleting it destroys the image; so does
//!   `vmstate` (qemu-server frees the saved-state volume it names).
//!
//! Volume names follow pve-storage: `vm-N-disk-M`, `base-N-disk-M` (a
//! template's disk), `base-N-disk-M/vm-K-disk-J` (VM K's linked clone of it),
//! the directory forms `N/vm-N-disk-M.qcow2` and `N/base-N-disk-M.qcow2/K/vm-K-disk-J.qcow2`,
//! `subvol-`/`basevol-` alike, `vm-N-cloudinit`; `STORAGE:SIZE` allocates a
//! new disk and `STORAGE:cloudinit` a new cloud-init drive.

use crate::contract::bindings::cradle::host::types::Entry;

/// Keys (or key prefixes before the digits) that run code on the node or pass
/// a host resource through to the guest. Refused unless the grant lists them.
pub const NODE_KEYS: &[&str] =
    &["hookscript", "args", "hostpci", "usb", "parallel", "virtiofs", "ivshmem", "serial", "privileged", "features"];

/// Drive key prefixes (followed by digits).
const DRIVE_PREFIXES: &[&str] = &["scsi", "virtio", "sata", "ide", "efidisk", "tpmstate"];

/// One thing a `set-config` call touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touch {
    /// A storage is named (a new disk `local-lvm:10`, `vmstatestorage`, an ISO).
    Storage {
        /// The config key.
        key: String,
        /// The storage id.
        storage: String,
    },
    /// An existing volume owned by a VMID is attached.
    Volume {
        /// The config key.
        key: String,
        /// The whole volume id, for messages.
        volid: String,
        /// The storage id.
        storage: String,
        /// The VMID the volume belongs to.
        owner: u32,
        /// A template's disk on its own (`base-N-…`), not as a linked-clone base.
        bare_base: bool,
    },
    /// A `cicustom` part names a snippet.
    Snippet {
        /// `cicustom`.
        key: String,
        /// `user`, `network`, `meta` or `vendor`.
        part: String,
        /// The whole volume id, for messages.
        volid: String,
        /// The storage id.
        storage: String,
        /// The file name under `snippets/`.
        file: String,
    },
    /// A disk is imported from a file on the node (`import-from=/var/tmp/x.qcow2`).
    ImportPath {
        /// The config key, with the option.
        key: String,
        /// The path on the node.
        path: String,
    },
    /// A key that runs code on the node or hands the guest a host resource.
    NodeKey {
        /// The config key.
        key: String,
    },
    /// A value that is not a storage volume: a host path, or a volume whose
    /// owner cannot be read from its name.
    Unattributable {
        /// The config key.
        key: String,
        /// The offending value.
        value: String,
        /// Why it cannot be checked.
        why: &'static str,
    },
    /// Deleting `key` detaches or destroys a disk image.
    DeletesDisk {
        /// The config key.
        key: String,
        /// What it holds now (the volume id), or a note that it is unknown.
        holds: String,
    },
}

/// What one `set-config` call touches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigScope {
    /// Everything named, in key order of the call.
    pub touches: Vec<Touch>,
}

/// `cdrom` is PVE's alias of `ide2`.
fn canonical_key(key: &str) -> &str {
    if key == "cdrom" { "ide2" } else { key }
}

fn numbered(key: &str, prefix: &str) -> bool {
    key.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `key` is a drive (`scsi0`, `ide2`, `efidisk0`, ...).
pub fn is_drive_key(key: &str) -> bool {
    let key = canonical_key(key);
    DRIVE_PREFIXES.iter().any(|p| numbered(key, p))
}

fn is_unused_key(key: &str) -> bool {
    numbered(key, "unused")
}

/// The [`NODE_KEYS`] entry `key` falls under, if any (`hostpci0` → `hostpci`).
pub fn node_key(key: &str) -> Option<&'static str> {
    NODE_KEYS.iter().copied().find(|p| key == *p || numbered(key, p))
}

/// Describe a container create or config write (pve-container's keys): the
/// root and mount-point volumes (`rootfs`, `mpN`: `STORAGE:SIZE` allocates, a
/// volume is described as any volume, a bind mount of a node path is
/// unattributable), the template (`ostemplate`, `STORAGE:vztmpl/FILE`), a
/// hookscript, and what gives the container power on the node: a privileged
/// container (`unprivileged` 0: the `privileged` node key) and `features`
/// (nesting, mounts, device nodes: the `features` node key). Deleting `mpN`
/// detaches a volume: destructive, as deleting a VM disk is.
pub fn describe_container(set: &[Entry], delete: &[String]) -> ConfigScope {
    let mut touches = Vec::new();
    for e in set {
        let key = e.key.as_str();
        if key == "rootfs" || numbered(key, "mp") {
            let file = e.value.split(',').next().unwrap_or("");
            let file = file.strip_prefix("volume=").unwrap_or(file);
            describe_volume(key, file, true, &mut touches);
        } else if key == "ostemplate" {
            match e.value.split_once(':') {
                Some((storage, file)) if !storage.is_empty() && file.starts_with("vztmpl/") => {
                    touches.push(Touch::Storage { key: key.into(), storage: storage.into() });
                }
                _ => touches.push(Touch::Unattributable {
                    key: key.into(),
                    value: e.value.clone(),
                    why: "not a STORAGE:vztmpl/FILE template volume",
                }),
            }
        } else if key == "unprivileged" {
            if matches!(e.value.trim(), "0" | "false" | "no" | "off") {
                touches.push(Touch::NodeKey { key: "privileged".into() });
            }
        } else if key == "features" || key == "hookscript" {
            describe_value(key, &e.value, &mut touches);
        }
    }
    for key in delete {
        if numbered(key, "mp") || key == "rootfs" {
            touches.push(Touch::DeletesDisk { key: key.clone(), holds: "a container volume".into() });
        }
    }
    ConfigScope { touches }
}

/// Whether deleting `delete` needs the VM's current config to be described.
pub fn deletion_needs_config(delete: &[String]) -> bool {
    // Unused disks and vmstate only to name the volume in a refusal.
    delete.iter().any(|k| is_drive_key(k) || is_unused_key(k) || k == "vmstate")
}

/// Describe a call that sets `set` and deletes `delete`; `current` is the
/// VM's config when [`deletion_needs_config`] said it is needed.
pub fn describe(set: &[Entry], delete: &[String], current: Option<&[Entry]>) -> ConfigScope {
    let mut touches = Vec::new();
    for e in set {
        describe_value(&e.key, &e.value, &mut touches);
    }
    for key in delete {
        describe_deletion(key, current, &mut touches);
    }
    ConfigScope { touches }
}

fn describe_value(key: &str, value: &str, out: &mut Vec<Touch>) {
    if let Some(node) = node_key(key) {
        // A serial port on a socket is the console, not a host device.
        if !(node == "serial" && value == "socket") {
            out.push(Touch::NodeKey { key: key.to_string() });
        }
        if node == "hookscript" {
            // The script is a snippet volume; its storage must be granted too.
            if let Some((storage, _)) = value.split_once(':') {
                out.push(Touch::Storage { key: key.to_string(), storage: storage.to_string() });
            }
        }
        return;
    }
    if is_drive_key(key) {
        for (option, file) in drive_files(value) {
            let label = if option == "file" { key.to_string() } else { format!("{key} ({option})") };
            if option == "import-from" {
                describe_import(&label, file, out);
            } else {
                describe_volume(&label, file, true, out);
            }
        }
    } else if is_unused_key(key) || key == "vmstate" {
        describe_volume(key, value, false, out);
    } else if key == "vmstatestorage" {
        out.push(Touch::Storage { key: key.to_string(), storage: value.to_string() });
    } else if key == "cicustom" {
        describe_cicustom(key, value, out);
    }
}

/// The values of a drive's property string that name a volume or a path:
/// the default (`file`) part, `file=` and `import-from=`. A part whose key
/// is not a plain option name is taken as a file too (PVE would refuse it;
/// the policy must not pass it unread).
fn drive_files(value: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    for part in value.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some((k, v)) if k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') => {
                if k == "file" || k == "import-from" {
                    out.push((k, v));
                }
            }
            _ => out.push(("file", part)),
        }
    }
    out
}

/// One volume id, path or allocation named by `key`.
fn describe_volume(key: &str, value: &str, drive: bool, out: &mut Vec<Touch>) {
    let key_s = key.to_string();
    if drive && (value == "none" || value == "cdrom") {
        return;
    }
    if value.starts_with('/') {
        out.push(Touch::Unattributable { key: key_s, value: value.into(), why: "a path on the node, not a volume" });
        return;
    }
    let Some((storage, volname)) = value.split_once(':').filter(|(s, v)| !s.is_empty() && !v.is_empty()) else {
        out.push(Touch::Unattributable { key: key_s, value: value.into(), why: "not a STORAGE:VOLUME id" });
        return;
    };
    let storage_touch = Touch::Storage { key: key_s.clone(), storage: storage.into() };
    // `local-lvm:10` (a new disk of 10 GiB) and `local-lvm:cloudinit` allocate on the storage.
    let is_size = volname.bytes().all(|b| b.is_ascii_digit() || b == b'.') && volname.bytes().any(|b| b != b'.');
    if drive && (is_size || volname == "cloudinit" || volname.starts_with("iso/")) {
        out.push(storage_touch);
        return;
    }
    match volume_owner(volname) {
        Some((owner, bare_base)) => {
            out.push(storage_touch);
            out.push(Touch::Volume { key: key_s, volid: value.into(), storage: storage.into(), owner, bare_base });
        }
        None => out.push(Touch::Unattributable {
            key: key_s,
            value: value.into(),
            why: "a volume whose name does not say which VM owns it (vm-N-disk-M, base-N-disk-M/vm-N-disk-M)",
        }),
    }
}

/// The source of an `import-from`: a file on the node (a path), an image of a
/// storage's `import` content (`local:import/haos.qcow2`, which no VM owns),
/// or another VM's disk (described as any volume).
fn describe_import(key: &str, value: &str, out: &mut Vec<Touch>) {
    if value.starts_with('/') {
        out.push(Touch::ImportPath { key: key.to_string(), path: value.to_string() });
        return;
    }
    match value.split_once(':') {
        Some((storage, file))
            if !storage.is_empty()
                && file.strip_prefix("import/").is_some_and(|f| !f.is_empty() && !f.contains('/')) =>
        {
            out.push(Touch::Storage { key: key.to_string(), storage: storage.to_string() });
        }
        _ => describe_volume(key, value, true, out),
    }
}

/// `vm-150-disk-0` → (150, false); `base-9000-disk-0` → (9000, true).
fn owner_of(name: &str) -> Option<(u32, bool)> {
    let (base, rest) = [("vm-", false), ("subvol-", false), ("base-", true), ("basevol-", true)]
        .iter()
        .find_map(|(p, base)| name.strip_prefix(p).map(|r| (*base, r)))?;
    let (num, tail) = rest.split_once('-')?;
    if tail.is_empty() || num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((num.parse().ok()?, base))
}

/// The VMID owning volume `volname` and whether it is a template's disk on
/// its own. A linked clone (`base-N-…/vm-K-…`) belongs to K, the clone.
fn volume_owner(volname: &str) -> Option<(u32, bool)> {
    let seg: Vec<&str> = volname.split('/').collect();
    let digits = |s: &str| -> Option<u32> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
    };
    match *seg.as_slice() {
        [name] => owner_of(name),
        [dir, name] if digits(dir).is_some() => {
            let (owner, base) = owner_of(name)?;
            (Some(owner) == digits(dir)).then_some((owner, base))
        }
        [base, name] => {
            let (_, is_base) = owner_of(base)?;
            let (owner, clone_is_base) = owner_of(name)?;
            (is_base && !clone_is_base).then_some((owner, false))
        }
        [bdir, base, dir, name] => {
            let (b, is_base) = owner_of(base)?;
            let (owner, clone_is_base) = owner_of(name)?;
            let fits = is_base && !clone_is_base && Some(b) == digits(bdir) && Some(owner) == digits(dir);
            fits.then_some((owner, false))
        }
        _ => None,
    }
}

fn describe_cicustom(key: &str, value: &str, out: &mut Vec<Touch>) {
    for part in value.split(',').filter(|p| !p.is_empty()) {
        let Some((name, volid)) = part.split_once('=') else {
            out.push(Touch::Unattributable {
                key: key.into(),
                value: part.into(),
                why: "not PART=STORAGE:snippets/FILE",
            });
            continue;
        };
        match volid.split_once(':').and_then(|(s, v)| v.strip_prefix("snippets/").map(|f| (s, f))) {
            Some((storage, file)) if !storage.is_empty() && !file.is_empty() && !file.contains('/') => {
                out.push(Touch::Snippet {
                    key: key.into(),
                    part: name.into(),
                    volid: volid.into(),
                    storage: storage.into(),
                    file: file.into(),
                });
            }
            _ => out.push(Touch::Unattributable {
                key: key.into(),
                value: part.into(),
                why: "not PART=STORAGE:snippets/FILE",
            }),
        }
    }
}

fn describe_deletion(key: &str, current: Option<&[Entry]>, out: &mut Vec<Touch>) {
    if is_unused_key(key) || key == "vmstate" {
        let fallback = if key == "vmstate" { "a saved VM state" } else { "an unused disk" };
        let holds = current
            .and_then(|c| c.iter().find(|e| e.key == key))
            .map(|e| e.value.clone())
            .unwrap_or_else(|| fallback.into());
        out.push(Touch::DeletesDisk { key: key.into(), holds });
        return;
    }
    if !is_drive_key(key) {
        return;
    }
    let canonical = canonical_key(key);
    let value = current.and_then(|c| c.iter().find(|e| e.key == canonical)).map(|e| e.value.as_str());
    let Some(value) = value else {
        // Not in the current config (or not read): it may be a pending disk.
        out.push(Touch::DeletesDisk { key: key.into(), holds: "a drive not in the current config".into() });
        return;
    };
    let cdrom = value.split(',').any(|p| p == "media=cdrom");
    let harmless = drive_files(value).iter().all(|&(_, f)| {
        let volname = f.split_once(':').map(|(_, v)| v).unwrap_or(f);
        f == "none" || f == "cdrom" || volname.starts_with("iso/") || volname.ends_with("cloudinit")
    });
    if !(cdrom || harmless) {
        let file = drive_files(value).first().map(|(_, f)| f.to_string()).unwrap_or_else(|| value.to_string());
        out.push(Touch::DeletesDisk { key: key.into(), holds: file });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(key: &str, value: &str) -> Entry {
        Entry { key: key.into(), value: value.into() }
    }

    fn set(pairs: &[(&str, &str)]) -> Vec<Touch> {
        let entries: Vec<Entry> = pairs.iter().map(|(k, v)| e(k, v)).collect();
        describe(&entries, &[], None).touches
    }

    fn storage(key: &str, s: &str) -> Touch {
        Touch::Storage { key: key.into(), storage: s.into() }
    }

    #[test]
    fn every_disk_key_names_its_storage_not_only_the_first() {
        let t = set(&[("scsi1", "local-lvm:1"), ("scsi2", "local:1,ssd=1")]);
        assert_eq!(t, [storage("scsi1", "local-lvm"), storage("scsi2", "local")]);
    }

    #[test]
    fn what_the_direct_backend_sends_names_only_storages_and_its_own_snippets() {
        let t = set(&[
            ("cores", "2"),
            ("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=20"),
            ("cicustom", "user=local:snippets/test-0-user.yaml,network=local:snippets/test-0-network.yaml"),
            ("ide2", "local-lvm:cloudinit"),
            ("scsi1", "local-lvm:10"),
            ("onboot", "1"),
        ]);
        assert_eq!(t.len(), 4, "{t:?}");
        assert!(matches!(&t[0], Touch::Snippet { part, file, .. } if part == "user" && file == "test-0-user.yaml"));
        assert_eq!(t[2..], [storage("ide2", "local-lvm"), storage("scsi1", "local-lvm")]);
    }

    #[test]
    fn a_volume_of_another_vm_is_described_with_its_owner() {
        let t = set(&[("scsi3", "local-lvm:vm-5000-disk-0")]);
        assert!(matches!(&t[1], Touch::Volume { owner: 5000, bare_base: false, .. }), "{t:?}");
        let t = set(&[("virtio1", "local:5000/vm-5000-disk-1.qcow2")]);
        assert!(matches!(&t[1], Touch::Volume { owner: 5000, .. }), "{t:?}");
    }

    #[test]
    fn a_linked_clone_belongs_to_the_clone_and_a_bare_base_disk_is_marked() {
        let t = set(&[("scsi0", "local-lvm:base-9000-disk-0/vm-150-disk-0,size=3G")]);
        assert!(matches!(&t[1], Touch::Volume { owner: 150, bare_base: false, .. }), "{t:?}");
        let t = set(&[("scsi0", "local:9000/base-9000-disk-0.qcow2/150/vm-150-disk-0.qcow2")]);
        assert!(matches!(&t[1], Touch::Volume { owner: 150, bare_base: false, .. }), "{t:?}");
        let t = set(&[("scsi1", "local-lvm:base-9000-disk-0")]);
        assert!(matches!(&t[1], Touch::Volume { owner: 9000, bare_base: true, .. }), "{t:?}");
    }

    #[test]
    fn a_volume_given_as_file_or_import_from_is_described_too() {
        let t = set(&[("scsi1", "local-lvm:0,import-from=local-lvm:vm-5000-disk-0")]);
        assert!(t.iter().any(|t| matches!(t, Touch::Volume { owner: 5000, .. })), "{t:?}");
        let t = set(&[("scsi1", "file=local-lvm:vm-5000-disk-0")]);
        assert!(t.iter().any(|t| matches!(t, Touch::Volume { owner: 5000, .. })), "{t:?}");
        // A path on the node is an import path, checked against the grant's import_dirs.
        let t = set(&[("scsi1", "local-lvm:0,import-from=/etc/shadow")]);
        assert!(t.iter().any(|t| matches!(t, Touch::ImportPath { path, .. } if path == "/etc/shadow")), "{t:?}");
        // An image of a storage's `import` content is owned by no VM: the storage is what is checked.
        let t = set(&[("scsi0", "local-lvm:0,import-from=local:import/haos.qcow2")]);
        assert_eq!(t, [storage("scsi0", "local-lvm"), storage("scsi0 (import-from)", "local")]);
        // Anything else under import/ is no import volume.
        let t = set(&[("scsi0", "local-lvm:0,import-from=local:import/a/b.qcow2")]);
        assert!(matches!(&t[1], Touch::Unattributable { .. }), "{t:?}");
    }

    #[test]
    fn host_paths_and_unattributable_volumes_are_marked() {
        assert!(matches!(&set(&[("sata0", "/dev/sda")])[0], Touch::Unattributable { .. }));
        assert!(matches!(&set(&[("scsi1", "local-lvm:mydisk")])[0], Touch::Unattributable { .. }));
        assert!(matches!(&set(&[("unused0", "local:snippets/x")])[0], Touch::Unattributable { .. }));
        assert!(set(&[("ide2", "none,media=cdrom")]).is_empty());
        assert_eq!(set(&[("cdrom", "local:iso/debian.iso")]), [storage("cdrom", "local")]);
    }

    #[test]
    fn node_keys_are_marked_and_a_hookscript_names_its_storage() {
        let t = set(&[("hookscript", "local:snippets/evil.sh")]);
        assert_eq!(t, [Touch::NodeKey { key: "hookscript".into() }, storage("hookscript", "local")]);
        let t = set(&[("args", "-chardev file,id=x,path=/etc/shadow")]);
        assert_eq!(t, [Touch::NodeKey { key: "args".into() }]);
        assert_eq!(set(&[("hostpci0", "0000:01:00.0")]), [Touch::NodeKey { key: "hostpci0".into() }]);
        assert!(set(&[("serial0", "socket")]).is_empty());
        assert_eq!(set(&[("serial0", "/dev/ttyS0")]), [Touch::NodeKey { key: "serial0".into() }]);
        assert!(set(&[("scsihw", "virtio-scsi-pci"), ("usbx", "1")]).is_empty());
    }

    #[test]
    fn every_cicustom_part_is_a_snippet_or_unattributable() {
        let t = set(&[("cicustom", "user=local:snippets/prod-db-user.yaml,vendor=/etc/shadow")]);
        assert!(matches!(&t[0], Touch::Snippet { file, .. } if file == "prod-db-user.yaml"));
        assert!(matches!(&t[1], Touch::Unattributable { .. }), "{t:?}");
        let t = set(&[("cicustom", "user=local:snippets/../x")]);
        assert!(matches!(&t[0], Touch::Unattributable { .. }), "{t:?}");
    }

    #[test]
    fn deleting_a_data_disk_is_a_disk_deletion_but_the_cloud_init_drive_is_not() {
        let cfg = [
            e("scsi0", "local-lvm:vm-150-disk-0,size=20G"),
            e("ide2", "local-lvm:vm-150-cloudinit,media=cdrom"),
            e("ide0", "none,media=cdrom"),
            e("unused0", "local-lvm:vm-150-disk-1"),
        ];
        let del = |keys: &[&str]| {
            let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
            assert!(deletion_needs_config(&keys) || keys.iter().all(|k| k.starts_with("unused") || k == "onboot"));
            describe(&[], &keys, Some(&cfg)).touches
        };
        assert_eq!(
            del(&["scsi0"]),
            [Touch::DeletesDisk { key: "scsi0".into(), holds: "local-lvm:vm-150-disk-0".into() }]
        );
        assert!(del(&["ide2", "ide0", "onboot"]).is_empty());
        assert!(matches!(&del(&["unused0"])[0], Touch::DeletesDisk { .. }));
        assert_eq!(
            del(&["vmstate"]),
            [Touch::DeletesDisk { key: "vmstate".into(), holds: "a saved VM state".into() }],
            "deleting vmstate frees the state volume"
        );
        assert!(matches!(&del(&["sata3"])[0], Touch::DeletesDisk { .. }), "an unknown drive fails closed");
    }
}
