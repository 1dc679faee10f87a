#!/usr/bin/env python3
"""Build fuzz/corpus/<target>/ seeds from the project's real inputs.

Run from the repository root: `python3 fuzz/seeds/build.py`. Seeds are copies of
real files (or those files with their group_vars inlined, so one input reaches
resolution); the fuzzer's own additions are kept beside them.
"""
import glob, json, os, shutil
import yaml

C = "fuzz/corpus"


def put(target, name, data):
    os.makedirs(f"{C}/{target}", exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(f"{C}/{target}/{name}", mode) as f:
        f.write(data)


def group_vars(inv_dir):
    """The inventory dir's group_vars as {group: vars} (a group dir's files merged)."""
    out = {}
    for path in sorted(glob.glob(f"{inv_dir}/group_vars/*")):
        name = os.path.basename(path).rsplit(".", 1)[0]
        files = sorted(glob.glob(f"{path}/*.yml")) if os.path.isdir(path) else [path]
        for f in files:
            doc = yaml.safe_load(open(f)) or {}
            if isinstance(doc, dict) and "$ANSIBLE_VAULT" not in open(f).read():
                out.setdefault(name, {}).update(doc)
    return out


INVENTORIES = ["tests/fixtures/inventory/homelab", "tests/fixtures/inventory/split", "examples/inventory",
               "examples/vm-types/inventory", "examples/lxc/inventory", "examples/windows/inventory"]

for d in INVENTORIES:
    tag = d.replace("tests/fixtures/inventory/", "").replace("/inventory", "").replace("/", "-")
    gv = group_vars(d)
    for ini in sorted(glob.glob(f"{d}/*.ini")):
        text = open(ini).read()
        put("inventory_ini", f"{tag}-{os.path.basename(ini)}", text)
        extra = "".join(f"\n[{g}:vars]\n" + "".join(f"{k}={json.dumps(v)}\n" for k, v in vs.items())
                        for g, vs in gv.items())
        put("inventory_ini", f"{tag}-{os.path.basename(ini)}-with-group-vars", text + extra)
    for yml in sorted(glob.glob(f"{d}/*.yml")):
        text = open(yml).read()
        put("inventory_yaml", f"{tag}-{os.path.basename(yml)}", text)
        doc = yaml.safe_load(text) or {}
        if isinstance(doc, dict):
            for g, vs in gv.items():
                if g == "all":
                    doc.setdefault("all", {}) or doc.__setitem__("all", {})
                    doc["all"].setdefault("vars", {}).update(vs)
                else:
                    doc.setdefault("all", {}) or doc.__setitem__("all", {})
                    kids = doc["all"].setdefault("children", {})
                    if g in kids and isinstance(kids[g], dict):
                        kids[g].setdefault("vars", {}).update(vs)
            put("inventory_yaml", f"{tag}-{os.path.basename(yml)}-with-group-vars", yaml.safe_dump(doc, sort_keys=False))
# A first line `#limit PATTERN` is the targets' --limit.
put("inventory_ini", "limit-ranges.ini",
    "#limit web*:&prod:!web[02:03]\n[web]\nweb[01:04].lab:2222 vms_vmid_base=200\n[db]\ndb-[a:c]\n[prod:children]\nweb\ndb\n"
    "[prod:vars]\nvms_vmid_base=300\nvms_name=\"{{ inventory_hostname_short | replace('.', '-') }}\"\n")
put("inventory_yaml", "limit-ranges.yml",
    "#limit ~^web.*\nall:\n  children:\n    web:\n      hosts:\n        web[01:03]:\n          ansible_host: 10.0.0.1\n"
    "      vars:\n        vms_vmid_base: 500\n        vms_name: \"{{ inventory_hostname }}-vm\"\n")

PLANS = "plugins/terraform-logic/tests/fixtures"
for f in sorted(glob.glob(f"{PLANS}/*.json") + glob.glob(f"{PLANS}/*/*.json")):
    name = os.path.basename(f)
    if "state" in name:
        continue
    put("plan_approve", f"{os.path.basename(os.path.dirname(f))}-{name}", open(f).read())

for f in sorted(glob.glob("target/cradle-demo-tf/modules/*/main.tf.json"))[:1]:
    text = open(f).read()
    put("module_check", "demo-telmate-main.tf.json", text)
    doc = json.loads(text)
    vm = next(iter(doc.get("resource", {}).get("proxmox_vm_qemu", {}).values()), None)
    if isinstance(vm, dict):
        vm["provisioner"] = {"local-exec": {"command": "id"}}
        put("module_check", "demo-telmate-with-provisioner.tf.json", json.dumps(doc, indent=2))
        vm.pop("provisioner")
        vm["name"] = "${file(\"/etc/shadow\")}"
        put("module_check", "demo-telmate-file-function.tf.json", json.dumps(doc, indent=2))
    put("module_check", "demo-telmate-two-files", text + "\0" + text)

T = "host/src/serve/testdata"
body = open(f"{T}/netbox-4.7.3-vm-staged.body", "rb").read()
sig = open(f"{T}/netbox-4.7.3-vm-staged.sig", "rb").read().strip()
put("netbox_webhook", "netbox-4.7.3-vm-staged", sig + b"\n" + body)
put("netbox_webhook", "netbox-4.7.3-vm-staged-unsigned", b"\n" + body)

for f in sorted(glob.glob("tests/fixtures/cloud-init-status/*.txt")):
    code = int(f.split(".exit")[1].split(".")[0])
    put("cloudinit_status", os.path.basename(f), bytes([code]) + open(f, "rb").read())

# A cloned cloud-init VM's config as `qm config` prints it (the keys and property-string
# formats of qemu-server's src/PVE/QemuServer.pm, see fuzz/README.md), then a change.
put("pve_config_scope", "cloud-init-clone.conf", """boot: order=scsi0;net0
cicustom: user=local:snippets/user-150.yml,network=local:snippets/net-150.yml,vendor=snip:snippets/v.yml
cores: 2
efidisk0: local-lvm:vm-150-disk-1,efitype=4m,pre-enrolled-keys=1,size=4M
ide2: local-lvm:vm-150-cloudinit,media=cdrom
ipconfig0: ip=10.0.20.5/24,gw=10.0.20.1
memory: 2048
name: test-0
net0: virtio=BC:24:11:2A:3B:4C,bridge=vmbr0,tag=20,firewall=1
scsi0: local-lvm:base-9000-disk-0/vm-150-disk-0,size=12G,discard=on,iothread=1
scsi1: ceph:10,import-from=local:9000/base-9000-disk-0.raw
sata0: file=nfs:iso/debian-12.iso,media=cdrom
scsihw: virtio-scsi-single
startup: order=10,up=30,down=60
tags: cradle;demo
tpmstate0: local-lvm:vm-150-disk-2,size=4M,version=v2.0
unused0: local-lvm:vm-151-disk-3
vmstatestorage: local-zfs
rootfs: local-lvm:subvol-150-disk-0,size=8G
mp0: /mnt/data,mp=/data
-unused0
-ide2
-delete:scsi1
""")
put("pve_config_scope", "container.conf", "hostname: ct1\nostemplate: local:vztmpl/debian-12.tar.zst\nrootfs: local-lvm:8\nmp0: local-lvm:4,mp=/srv\nnet0: name=eth0,bridge=vmbr0,ip=dhcp\n-mp1\n")

# known_hosts lines written by OpenSSH's ssh-keygen (real keys of each type; plain,
# [host]:port, wildcard, negated, @cert-authority/@revoked, and `ssh-keygen -H` hashed).
for f in sorted(glob.glob("fuzz/seeds/known_hosts/*")):
    put("known_hosts", os.path.basename(f), open(f).read())

# PVE API answer bodies: captured from `cradle sim serve` (a clone of the
# template, its config/pending/status, tasks, storage, HA) and the Perl
# spellings the client's own tests use.
for f in sorted(glob.glob("fuzz/seeds/pve_decode/*")):
    put("pve_decode", os.path.basename(f), open(f).read())

# Journals of real runs of `scripts/demo` (direct and terraform backends, a
# --check run, a refused one), checked to hold no secret.
for f in sorted(glob.glob("fuzz/seeds/journal_reader/*")):
    put("journal_reader", os.path.basename(f), open(f, "rb").read())

# The guest kit reads the same `qm config` lines.
for f in sorted(glob.glob(f"{C}/pve_config_scope/*.conf")):
    put("guest_config", os.path.basename(f), open(f).read())
