//! The `http` WIT adapter: one guard per request (the endpoint is the scope),
//! the timeout clamped to the plugin call's time, the work done by
//! [`super::Endpoints`]; and the host-only guest probe
//! ([`CapCtx::probe_guest`]: workflows only, since no WIT function names it),
//! checked by the same guard with the guest's address and port as the scope.

use super::scope::{HttpCall, HttpTarget};
use crate::caps::Call;
use crate::caps::budget::TimeoutArg;
use crate::caps::context::CapCtx;
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::http::{Host, Method, Request, Response};
use crate::contract::bindings::cradle::host::types::Error as WitError;

impl Host for CapCtx {
    fn send(&mut self, req: Request) -> Result<Response, WitError> {
        let (endpoint, path) = (req.endpoint.clone(), req.path.clone());
        let method = match req.method {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        };
        let http = self.services.http.clone();
        let limit = TimeoutArg::Http.max().as_millis() as u64;
        let call = HttpCall { target: HttpTarget::Endpoint(&endpoint), method, path: &path };
        self.guard("send", Call::Http(call), || {
            let timeout = self.clamp_timeout(limit, TimeoutArg::Http);
            self.block_on(http.send(req, timeout))
        })
        .map_err(Into::into)
    }
}

impl CapCtx {
    /// `GET url` once and the status it answered ([`super::probe`]): a health
    /// probe of one of the call's guests, allowed by `http.guest_ports`.
    /// `timeout_ms` is clamped to the HTTP limit and the call's time left.
    pub fn probe_guest(&self, url: &str, timeout_ms: u64) -> Result<u16, CapError> {
        let parsed = super::probe_url(url)?;
        let host = parsed.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
        let port = parsed.port_or_known_default().unwrap_or(80);
        let call = HttpCall { target: HttpTarget::Guest { host: &host, port }, method: "GET", path: parsed.path() };
        self.guard("probe", Call::Http(call), || {
            let timeout = self.clamp_timeout(timeout_ms, TimeoutArg::Http);
            self.block_on(super::probe(parsed.clone(), timeout))
        })
    }
}
