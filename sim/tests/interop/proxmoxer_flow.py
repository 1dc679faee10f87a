"""Drive the cradle simulator with proxmoxer, as Proxmox automation does.

clone -> config (POST async + PUT sync) -> start -> status -> task wait -> stop ->
destroy, with TLS verification against the simulator's CA file. Connection details come
from the environment (the token secret never appears on a command line).
"""
import os
import sys

from proxmoxer import ProxmoxAPI, ResourceException
from proxmoxer.tools import Tasks

host = os.environ["SIM_HOST"]
port = int(os.environ["SIM_PORT"])
user, token_name = os.environ["SIM_TOKEN_ID"].split("!")
px = ProxmoxAPI(
    host,
    port=port,
    user=user,
    token_name=token_name,
    token_value=os.environ["SIM_TOKEN_SECRET"],
    verify_ssl=os.environ["SIM_CA_FILE"],
    service="PVE",
)


def wait(upid):
    status = Tasks.blocking_status(px, upid, timeout=120, polling_interval=0.05)
    assert status is not None, f"task {upid} did not finish"
    return status


node = px.nodes("pve1")
assert px.version.get()["release"] == "9.0"
newid = int(px.cluster.nextid.get())
upid = node.qemu(9000).clone.post(newid=newid, name="interop-0", full=0)
assert upid.startswith("UPID:pve1:"), upid
assert wait(upid)["exitstatus"] == "OK"

upid = node.qemu(newid).config.post(cores=2, net0="virtio,bridge=vmbr0,tag=20", ipconfig0="ip=127.78.0.5/8")
assert wait(upid)["exitstatus"] == "OK"
node.qemu(newid).config.put(memory=1024)
cfg = node.qemu(newid).config.get()
assert cfg["cores"] == 2 and cfg["memory"] == "1024", cfg
assert cfg["net0"].startswith("virtio=BC:24:11:") and cfg["net0"].endswith(",bridge=vmbr0,tag=20"), cfg

upid = node.qemu(newid).status.start.post()
assert wait(upid)["exitstatus"] == "OK"
assert node.qemu(newid).status.current.get()["status"] == "running"
log = Tasks.decode_upid(upid)
assert log["type"] == "qmstart" and log["user"] == user and log["node"] == "pve1", log

try:
    node.qemu(newid).delete()
    raise SystemExit("destroying a running VM must fail")
except ResourceException as e:
    assert e.status_code == 500, e
    assert f"VM {newid} is running - destroy failed" in str(e), str(e)

assert wait(node.qemu(newid).status.stop.post())["exitstatus"] == "OK"
assert wait(node.qemu(newid).delete(purge=1))["exitstatus"] == "OK"
try:
    node.qemu(newid).config.get()
    raise SystemExit("the VM must be gone")
except ResourceException as e:
    assert f"Configuration file 'nodes/pve1/qemu-server/{newid}.conf' does not exist" in str(e), str(e)

print("proxmoxer flow OK")
sys.exit(0)
