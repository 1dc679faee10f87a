//! DHCP in the simulated cluster from the UniFi stand-in: a guest whose network-config
//! says `dhcp4: true` boots with its NIC's reservation (made before the first boot),
//! else a pool address, and answers SSH there; every exchange is recorded and stamped.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use cradle_sim::services::unifi::{self, DhcpOffer, UnifiConfig};
use cradle_sim::services::{Listen, Secret};
use cradle_sim::{Cluster, RunningCluster, SimConfig};
use serde_json::{Value, json};

use crate::client;

/// The PVE API of a cluster (token auth, its CA trusted).
struct Pve {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Pve {
    fn new(c: &RunningCluster) -> Self {
        Pve { http: client(Some(c.ca_pem())), base: c.api_url(), token: c.token() }
    }

    async fn call(&self, method: reqwest::Method, path: &str, form: &[(&str, &str)]) -> Value {
        let req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("authorization", format!("PVEAPIToken={}", self.token));
        let resp = req.form(form).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        resp.json::<Value>().await.unwrap()["data"].clone()
    }

    /// The MAC of a VM's net0.
    async fn mac(&self, vmid: u32) -> String {
        let cfg = self.call(reqwest::Method::GET, &format!("/nodes/pve1/qemu/{vmid}/config"), &[]).await;
        let net0 = cfg["net0"].as_str().unwrap().to_string();
        net0.split(',').next().unwrap().split_once('=').unwrap().1.to_string()
    }

    /// Clone the template into `vmid` with DHCP network-data and `pubkey` for `ops`.
    async fn create(&self, c: &RunningCluster, vmid: u32, network: &str, pubkey: &str) {
        let post = reqwest::Method::POST;
        self.call(
            post.clone(),
            "/nodes/pve1/qemu/9000/clone",
            &[("newid", &vmid.to_string()), ("name", &format!("vm{vmid}"))],
        )
        .await;
        let dir = c.snippet_dir("pve1", "local").unwrap();
        let user = format!(
            "#cloud-config\nhostname: vm{vmid}\nusers:\n  - name: ops\n    ssh_authorized_keys: [\"{pubkey}\"]\n"
        );
        std::fs::write(dir.join(format!("{vmid}-user.yaml")), user).unwrap();
        std::fs::write(dir.join(format!("{vmid}-net.yaml")), network).unwrap();
        let cicustom = format!("user=local:snippets/{vmid}-user.yaml,network=local:snippets/{vmid}-net.yaml");
        self.call(post, &format!("/nodes/pve1/qemu/{vmid}/config"), &[("cicustom", &cicustom)]).await;
    }

    async fn power(&self, vmid: u32, action: &str) {
        self.call(reqwest::Method::POST, &format!("/nodes/pve1/qemu/{vmid}/status/{action}"), &[]).await;
    }
}

const DHCP_V2: &str = "version: 2\nethernets:\n  ens18:\n    dhcp4: true\n";

async fn cluster(dhcp: Option<unifi::UnifiDhcp>) -> RunningCluster {
    let mut cfg = SimConfig::with_nodes(1);
    cfg.time_scale = 0.0;
    cfg.node_ssh_port = 0;
    cfg.guest_ssh_port = 0;
    cfg.dhcp = dhcp;
    Cluster::start(cfg).await.unwrap()
}

async fn unifi() -> unifi::Unifi {
    let cfg = UnifiConfig { listen: Listen::loopback(), api_key: Some(Secret::new("key")), ..UnifiConfig::default() };
    unifi::start(cfg).await.unwrap()
}

/// The address a guest's sshd bound, once it has.
async fn guest_addr(c: &RunningCluster, vmid: u32) -> SocketAddr {
    for _ in 0..3000 {
        if let Some(a) = c.guest_ssh_addr(vmid) {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("guest {vmid} never bound sshd");
}

struct Accept;

impl russh::client::Handler for Accept {
    type Error = russh::Error;
    async fn check_server_key(&mut self, _key: &russh::keys::PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

/// Run `cmd` on a guest as `ops`; returns stdout.
async fn ssh(addr: SocketAddr, key: &russh::keys::PrivateKey, cmd: &str) -> String {
    ssh_as(addr, "ops", key, cmd).await
}

fn key() -> (russh::keys::PrivateKey, String) {
    let seed: [u8; 32] = std::array::from_fn(|i| u8::try_from(i).unwrap().wrapping_mul(7).wrapping_add(3));
    let key = russh::keys::PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed));
    let public = key.public_key().to_openssh().unwrap();
    (key, public)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_made_before_the_first_boot_is_the_guests_address_and_ssh_answers_there() {
    let u = unifi().await;
    let c = cluster(Some(u.dhcp("default"))).await;
    let pve = Pve::new(&c);
    let (key, public) = key();
    pve.create(&c, 101, DHCP_V2, &public).await;
    let mac = pve.mac(101).await;

    // The reservation, over the controller's API, while the VM is still stopped.
    let http = client(u.ca_pem());
    let users = format!("{}/s/default/rest/user", u.api_url());
    let body = json!({"mac": mac, "name": "vm101", "use_fixedip": true, "fixed_ip": "127.77.0.50",
        "network_id": u.networks()[0].id, "note": "cradle"});
    let resp = http.post(&users).header("X-API-KEY", "key").json(&body).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(c.dhcp_leases().is_empty(), "no boot yet");

    pve.power(101, "start").await;
    let leases = c.dhcp_leases_of(101);
    assert_eq!(leases.len(), 1);
    let first = &leases[0];
    assert!(first.cold_boot && first.is_reserved(), "{first:?}");
    assert_eq!(
        (first.nic.as_str(), first.interface.as_str(), first.mac.as_str()),
        ("net0", "ens18", mac.to_lowercase().as_str())
    );
    assert_eq!(first.ip(), Some(Ipv4Addr::new(127, 77, 0, 50)));
    let reservation = u.reservations().into_iter().find(|r| r.mac == first.mac).unwrap();
    assert!(reservation.reserved_at.unwrap().before(&first.at), "the reservation existed before the first boot");
    assert!(
        matches!(&first.offer, DhcpOffer::Reserved { reserved_at, .. } if Some(*reserved_at) == reservation.reserved_at)
    );

    let addr = guest_addr(&c, 101).await;
    assert_eq!(addr.ip(), std::net::IpAddr::from([127, 77, 0, 50]));
    let out = ssh(addr, &key, "hostname && ip -4 -j addr show dev ens18 && ip -j route show default").await;
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("vm101"));
    let addrs: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        (addrs[0]["addr_info"][0]["local"].as_str(), addrs[0]["addr_info"][0]["prefixlen"].as_u64()),
        (Some("127.77.0.50"), Some(24))
    );
    let routes: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(routes[0]["gateway"], "127.77.0.1", "the network's gateway is the DHCP router");

    // The controller saw the client at that address.
    let resp =
        http.get(format!("{}/s/default/stat/user/{mac}", u.api_url())).header("X-API-KEY", "key").send().await.unwrap();
    let stat: Value = resp.json().await.unwrap();
    assert_eq!(
        (stat["data"][0]["ip"].as_str(), stat["data"][0]["hostname"].as_str()),
        (Some("127.77.0.50"), Some("vm101"))
    );

    // An in-guest reboot asks again (not a cold start) and gets the same address.
    let _ = ssh(addr, &key, "sudo reboot").await;
    let mut renewed = Vec::new();
    for _ in 0..3000 {
        renewed = c.dhcp_leases_of(101);
        if renewed.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(renewed.len(), 2, "the reboot's DHCP exchange");
    assert!(!renewed[1].cold_boot && renewed[1].is_reserved() && renewed[1].ip() == first.ip());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_reservation_the_pool_answers_and_the_mac_is_then_known_to_the_controller() {
    let u = unifi().await;
    let c = cluster(Some(u.dhcp("default"))).await;
    let pve = Pve::new(&c);
    let (key, public) = key();
    let mac = {
        pve.create(
            &c,
            102,
            "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    subnets:\n      - type: dhcp\n",
            &public,
        )
        .await;
        pve.mac(102).await
    };
    pve.power(102, "start").await;
    let lease = c.dhcp_leases_of(102).pop().unwrap();
    let pool_ip = lease.ip().unwrap();
    assert!(!lease.is_reserved());
    assert!((Ipv4Addr::new(127, 77, 0, 6)..=Ipv4Addr::new(127, 77, 0, 254)).contains(&pool_ip), "{pool_ip}");
    assert_eq!(guest_addr(&c, 102).await.ip(), std::net::IpAddr::V4(pool_ip));

    // The controller now knows that MAC: a reservation POST is MacUsed, as on a real
    // controller (Terraform's allow_existing: stat/user, then PUT rest/user/{id}).
    let http = client(u.ca_pem());
    let api = u.api_url();
    let nid = u.networks()[0].id.clone();
    let body = json!({"mac": mac, "use_fixedip": true, "fixed_ip": "127.77.0.60", "network_id": nid});
    let resp =
        http.post(format!("{api}/s/default/rest/user")).header("X-API-KEY", "key").json(&body).send().await.unwrap();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["meta"]["msg"], "api.err.MacUsed");
    let stat: Value = http
        .get(format!("{api}/s/default/stat/user/{mac}"))
        .header("X-API-KEY", "key")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = stat["data"][0]["_id"].as_str().unwrap();
    let resp = http
        .put(format!("{api}/s/default/rest/user/{id}"))
        .header("X-API-KEY", "key")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);

    // The next cold start takes the reservation; sshd moves with it.
    pve.power(102, "stop").await;
    pve.power(102, "start").await;
    let leases = c.dhcp_leases_of(102);
    assert_eq!(leases.len(), 2);
    assert!(leases[1].is_reserved() && leases[0].at.before(&leases[1].at));
    let addr = guest_addr(&c, 102).await;
    assert_eq!(addr.ip(), std::net::IpAddr::from([127, 77, 0, 60]));
    assert_eq!(ssh(addr, &key, "hostname").await, "vm102\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dhcp_guest_without_a_dhcp_server_gets_no_address_and_static_guests_are_untouched() {
    let c = cluster(None).await;
    let pve = Pve::new(&c);
    let (_, public) = key();
    pve.create(&c, 103, DHCP_V2, &public).await;
    pve.create(&c, 104, "version: 2\nethernets:\n  ens18:\n    addresses: [127.0.9.4/8]\n", &public).await;
    pve.power(103, "start").await;
    pve.power(104, "start").await;
    let leases = c.dhcp_leases();
    assert_eq!(leases.len(), 1, "only the DHCP guest asked");
    assert!(matches!(&leases[0].offer, DhcpOffer::NoOffer { reason } if reason.contains("SimConfig::dhcp")));
    assert_eq!(guest_addr(&c, 104).await.ip(), std::net::IpAddr::from([127, 0, 9, 4]));
    assert_eq!(c.guest_ssh_addr(103), None, "no address, no sshd");
}

/// Run `cmd` on a guest as `user`; returns stdout (or panics naming the failure).
async fn ssh_as(addr: SocketAddr, user: &str, key: &russh::keys::PrivateKey, cmd: &str) -> String {
    let config = Arc::new(russh::client::Config::default());
    let mut session = russh::client::connect(config, addr, Accept).await.unwrap();
    let key = russh::keys::PrivateKeyWithHashAlg::new(Arc::new(key.clone()), None);
    assert!(session.authenticate_publickey(user, key).await.unwrap().success(), "{user}'s key is accepted");
    let mut ch = session.channel_open_session().await.unwrap();
    ch.exec(true, cmd).await.unwrap();
    let mut out = String::new();
    while let Some(msg) = ch.wait().await {
        if let russh::ChannelMsg::Data { data } = msg {
            out.push_str(&String::from_utf8_lossy(&data));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_with_ip_dhcp_gets_its_reservation_by_hwaddr() {
    let u = unifi().await;
    let c = cluster(Some(u.dhcp("default"))).await;
    let pve = Pve::new(&c);
    let tmpl = c.node_path("pve1", "/var/lib/vz/template/cache/debian-12-standard_12.7-1_amd64.tar.zst");
    std::fs::write(tmpl, b"not really a tarball").unwrap();
    let (key, public) = key();
    let form = [
        ("vmid", "300"),
        ("ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"),
        ("rootfs", "local-lvm:8"),
        ("net0", "name=eth0,bridge=vmbr0,ip=dhcp"),
        ("ssh-public-keys", public.as_str()),
    ];
    pve.call(reqwest::Method::POST, "/nodes/pve1/lxc", &form).await;
    let cfg = pve.call(reqwest::Method::GET, "/nodes/pve1/lxc/300/config", &[]).await;
    let net0 = cfg["net0"].as_str().unwrap().to_string();
    let mac = net0.split(',').find_map(|p| p.strip_prefix("hwaddr=")).unwrap().to_lowercase();
    let u_http = client(u.ca_pem());
    let body = json!({"mac": mac, "use_fixedip": true, "fixed_ip": "127.77.0.70", "network_id": u.networks()[0].id});
    let resp = u_http
        .post(format!("{}/s/default/rest/user", u.api_url()))
        .header("X-API-KEY", "key")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);

    pve.call(reqwest::Method::POST, "/nodes/pve1/lxc/300/status/start", &[]).await;
    let lease = c.dhcp_leases_of(300).pop().unwrap();
    assert!(lease.is_reserved() && lease.mac == mac && lease.interface == "eth0", "{lease:?}");
    let addr = guest_addr(&c, 300).await;
    assert_eq!(addr.ip(), std::net::IpAddr::from([127, 77, 0, 70]));
    assert!(ssh_as(addr, "root", &key, "ip -4 -j addr show dev eth0").await.contains("127.77.0.70"));
}
