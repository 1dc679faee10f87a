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

# cradle.toml: the example project's, the one `cradle init` writes (captured in
# seeds/cradle_toml/, `cradle init DIR`), and every ```toml block of docs/CONFIG.md
# and the other docs (sections the operator copies), each alone and appended to
# the init file.
import re
init = open("fuzz/seeds/cradle_toml/init.toml").read()
put("cradle_toml", "init.toml", init)
put("cradle_toml", "examples-cradle.toml", open("examples/cradle.toml").read())
for doc in sorted(glob.glob("docs/*.md")):
    tag = os.path.basename(doc)[:-3].lower()
    blocks = re.findall(r"```toml\n(.*?)```", open(doc).read(), re.S)
    for i, block in enumerate(blocks):
        put("cradle_toml", f"{tag}-md-{i:02}.toml", block)
        put("cradle_toml", f"{tag}-md-{i:02}-with-init.toml", init + "\n" + block)

# rhai_bridge: the real lifecycle types, read from wit/types.wit and
# wit/backend.wit (records, variants, enums; `list<>`, `option<>`, `result<>`),
# with values as the workflows pass them (provision's `vm.spec`, a discovered
# VM, snippets, a plan) and the bridge's other kinds.
import json
wit_src = open("wit/types.wit").read() + open("wit/backend.wit").read()
wit_src = re.sub(r"//.*", "", wit_src)
wit_defs = {}
for kind, name, body in re.findall(r"\b(record|variant|enum|flags)\s+([a-z][a-z0-9-]*)\s*\{(.*?)\}", wit_src, re.S):
    items = [i.strip() for i in body.split(",") if i.strip()]
    wit_defs[name] = (kind, items)

def wit_type(t):
    t = t.strip()
    m = re.fullmatch(r"(list|option)<(.*)>", t)
    if m:
        return {m.group(1): wit_type(m.group(2))}
    m = re.fullmatch(r"result<(.*)>", t)
    if m:
        ok, err = (m.group(1).split(",", 1) + ["_"])[:2]
        side = lambda s: None if s.strip() == "_" else wit_type(s)
        return {"result": [side(ok), side(err)]}
    if t in wit_defs:
        kind, items = wit_defs[t]
        if kind == "record":
            return {"record": [[f.split(":")[0].strip(), wit_type(f.split(":", 1)[1])] for f in items]}
        if kind == "variant":
            cases = []
            for c in items:
                m = re.fullmatch(r"([a-z0-9-]+)(?:\((.*)\))?", c)
                cases.append([m.group(1), wit_type(m.group(2)) if m.group(2) else None])
            return {"variant": cases}
        return {kind: items}
    return t

spec = {"name": "test-0", "vmid": 100, "node": "pve1", "template": "debian-12", "storage": "local-lvm",
        "cores": 2, "memory_mib": 2048, "disk_gib": 20,
        "disks": [{"slot": "scsi1", "storage": "local-lvm", "size_gib": 10}],
        "nics": [{"slot": "net0", "bridge": "vmbr0", "vlan": 20, "address": "10.0.20.5/24",
                  "gateway": "10.0.20.1", "guest_interface": "ens18"}],
        "startup_order": 3, "tags": ["cradle", "test"], "environment": "test", "allow_replacement": False}
spec_short = {"name": "test-1", "vmid": 101, "node": "pve2", "template": "t", "storage": "s", "cores": 1,
              "memory-mib": 512, "disks": [], "nics": [{"slot": "net0", "bridge": "vmbr0", "guest-interface": "ens18"}],
              "tags": [], "environment": "prod", "allow-replacement": True}
state = {"name": "test-0", "vmid": 100, "node": "pve1", "status": "stopped", "lock": "clone",
         "has_cloudinit_drive": True}
bridge_seeds = {
    "vm-spec": ("vm-spec", spec),
    "vm-spec-kebab-defaults": ("vm-spec", spec_short),
    "vm-state": ("vm-state", state),
    "vm-state-unlocked": ("vm-state", dict(state, lock=None, status="running", has_cloudinit_drive=False)),
    "discover-found": ("option<vm-state>", state),
    "discover-none": ("option<vm-state>", None),
    "snippets": ("snippets", {"user": "local:snippets/test-0-user.yaml", "network": "local:snippets/test-0-net.yaml"}),
    "plan-outcome": ("plan-outcome", {"action": "no-op", "summary": ["memory 1024 -> 2048"], "plan_id": "p-1"}),
    "plan-outcome-snake": ("plan-outcome", {"action": "no_op", "summary": []}),
    "error-conflict": ("error", {"kind": "conflict", "value": "vm 100 is locked (clone)"}),
    "result-plan": ("result<plan-outcome, error>", {"ok": {"action": "create", "summary": ["clone"], "plan_id": None}}),
    "result-unit-err": ("result<_, error>", {"err": {"kind": "not-found", "value": "vm 100"}}),
    "reconcile-lines": ("list<string>", ["onboot: 0 -> 1", "startup: order=3"]),
    "entries": ("list<entry>", [{"key": "net0", "value": "virtio=BC:24:11:00:00:01,bridge=vmbr0"}]),
}
for name, (t, value) in bridge_seeds.items():
    put("rhai_bridge", name + ".json", json.dumps({"type": wit_type(t), "value": value}, separators=(",", ":")))
# The kinds lifecycle does not use, with the bridge's extra spellings.
for name, t, value in [
    ("flags", {"flags": ["read", "write", "exec-it"]}, ["read", "exec_it"]),
    ("tuple", {"tuple": ["u8", "string", "char"]}, [7, "x", "y"]),
    ("fixed-list", {"fixed": ["s16", 3]}, [-1, 0, 300]),
    ("bytes-string", {"list": "u8"}, "AB"),
    ("u64-max", "u64", "18446744073709551615"),
    ("floats", {"tuple": ["f32", "f64", "f64"]}, [1.5, 2, -0.25]),
    ("map-string", {"map": ["string", {"option": "u32"}]}, {"a": 1, "b": None}),
    ("map-pairs", {"map": ["u32", "string"]}, [[1, "a"], [2, "b"]]),
    # Round trips that failed (regression tests in host/src/workflow/bridge/core_tests.rs).
    ("map-pairs-empty", {"map": ["u32", "string"]}, []),
    ("map-pairs-duplicate-key", {"map": ["string", "u32"]}, [["a", 1], ["a", 2]]),
    ("map-pairs-string-keys-unsorted", {"map": ["string", "u32"]}, [["namea", 1], ["a", 2]]),
    ("variant-unit", {"variant": [["gone", None], ["denied", "string"]]}, "gone"),
    ("nested-option", {"option": {"option": "u32"}}, 5),
    ("resource", {"record": [["handle", "resource"]]}, {"handle": 1}),
]:
    put("rhai_bridge", name + ".json", json.dumps({"type": t, "value": value}, separators=(",", ":")))

# script_args: each VM of the INI inventories as the workflow's `vm` map (the
# fields of host/src/provision/vm.rs's WorkflowVm the typed parsers read:
# name, ssh, spec.vmid/node, nics, dns, the guest settings of
# inventory/guest.rs), as JSON; nic0's address is the host's ansible_host with
# the inventories' prefixes, its nameservers and search domain the lab's.
for d in INVENTORIES:
    tag = d.replace("tests/fixtures/inventory/", "").replace("/inventory", "").replace("/", "-")
    for ini in sorted(glob.glob(f"{d}/*.ini")):
        for line in open(ini):
            parts = line.split()
            if not parts or parts[0].startswith(("[", "#", ";")) or "=" in parts[0]:
                continue
            hv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
            if "ansible_host" not in hv:
                continue
            name, addr = parts[0], hv["ansible_host"]
            vm = {
                "name": name, "hostname": name, "node": hv.get("target_node", "pve1"),
                "ssh": {"host": addr, "port": int(hv.get("ansible_port", 22)), "user": hv.get("ansible_user", "cradle")},
                "spec": {"vmid": int(hv.get("vms_vmid", 9000)), "node": hv.get("target_node", "pve1"),
                         "storage": "local-lvm"},
                "nics": [{"address": f"{addr}/24", "gateway": addr.rsplit(".", 1)[0] + ".1",
                          "nameservers": ["10.0.10.1", "10.0.10.2"], "search": ["lab.example"],
                          "guest_interface": "ens18"}],
                "authorized_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOps ops@lab"],
                "packages": ["qemu-guest-agent"], "timezone": "Europe/Berlin", "fqdn": f"{name}.lab.example",
                "snippet_storage": None,
                "dns": [{"zone": "lab.example.", "name": f"{name}.lab.example.", "kind": "a", "value": addr},
                        {"zone": "10.in-addr.arpa.", "name": ".".join(reversed(addr.split("."))) + ".in-addr.arpa.",
                         "kind": "ptr", "value": f"{name}.lab.example.", "ttl": 300}],
            }
            put("script_args", f"{tag}-{name}.json", json.dumps(vm, indent=1))
