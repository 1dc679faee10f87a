//! The web UI of a simulated appliance (a VM booted from its image, never named by
//! cloud-init; [`crate::config::ApplianceSpec`]): what a health check of an appliance
//! without SSH (Home Assistant OS on port 8123) reaches.
//!
//! Contract: when the appliance has an address (`appliance.addresses`) and
//! `appliance.http_port` is set, each boot binds `<address>:<http_port>` at the moment
//! its guest agent starts answering (`timings.boot_ssh` after power-on, scaled): until
//! then the port refuses connections, as a booting appliance's does. It answers every
//! request with `200 OK` and a small HTML page (`HEAD` without the body), over HTTP/1.1
//! without TLS, and records each as a [`GuestHttpRequest`] (`RunningCluster::
//! guest_http_requests`). A stop, a reboot or the simulator's shutdown closes it.
//! Simulator assumptions: the real appliance's web UI comes up later than its agent
//! and may answer other statuses while starting (Home Assistant's onboarding page is a
//! `302` to `/onboarding.html`); the simulator answers `200` at once.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use tokio::time::Instant;

use super::ssh::{fired, listen_when_up};
use crate::sim::{Sim, lock};

/// One HTTP request an appliance's web UI answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestHttpRequest {
    /// The appliance.
    pub vmid: u32,
    /// The address and port it was reached at.
    pub addr: SocketAddr,
    /// `GET`, `HEAD`, ...
    pub method: String,
    /// The request target's path.
    pub path: String,
    /// The status answered.
    pub status: u16,
}

const PAGE: &str =
    "<!DOCTYPE html><html><head><title>Home Assistant</title></head><body>simulated appliance</body></html>\n";

/// Serve the appliance's web UI on `addr` for boot `generation` of `vmid`, from
/// `up_at` until `cancel` fires (the boot ends) or the simulator shuts down.
pub fn spawn_appliance_http(
    sim: Arc<Sim>,
    vmid: u32,
    generation: u64,
    addr: SocketAddr,
    up_at: Instant,
    mut cancel: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut down = sim.shutdown.subscribe();
        let Some(listener) = listen_when_up(vmid, addr, up_at, &mut cancel, &mut down, "appliance web UI").await else {
            return;
        };
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = fired(&mut cancel) => return,
                _ = fired(&mut down) => return,
            };
            let Ok((tcp, _)) = accepted else { continue };
            let same_boot = lock(&sim.guests).get(&vmid).is_some_and(|g| g.generation == generation && !g.down);
            if !same_boot {
                continue;
            }
            let sim = sim.clone();
            let mut c = cancel.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let sim = sim.clone();
                    async move {
                        let head = req.method() == hyper::Method::HEAD;
                        lock(&sim.guest_http).push(GuestHttpRequest {
                            vmid,
                            addr,
                            method: req.method().to_string(),
                            path: req.uri().path().to_string(),
                            status: 200,
                        });
                        let body = if head { Bytes::new() } else { Bytes::from_static(PAGE.as_bytes()) };
                        hyper::Response::builder()
                            .status(200)
                            .header("content-type", "text/html; charset=utf-8")
                            .body(Full::new(body))
                    }
                });
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), svc);
                tokio::select! {
                    _ = conn => {}
                    _ = fired(&mut c) => {}
                }
            });
        }
    });
}
