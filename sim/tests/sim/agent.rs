//! The QEMU guest agent of appliances booted from an image (no cloud-init drive).

use crate::common;

use common::{Api, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe() {
    let c = start(0.0, |_| {}).await;
    let api = Api::new(&c);
    let form = [("vmid", "200"), ("name", "haos"), ("scsi0", "local-lvm:4"), ("agent", "1")];
    let st = api.wait_task(api.post("/nodes/pve1/qemu", &form).await.as_str().unwrap()).await;
    assert_eq!(st["exitstatus"], "OK");
    assert_eq!(api.run("/nodes/pve1/qemu/200/status/start", &[]).await, "OK");
    let r = api.call("POST", "/nodes/pve1/qemu/200/agent/ping", &[]).await;
    panic!("{r:?}");
}
