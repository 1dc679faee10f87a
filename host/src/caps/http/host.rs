//! The `http` WIT adapter: one guard per request (the endpoint is the scope),
//! the timeout clamped to the plugin call's time, the work done by
//! [`super::Endpoints`].

use super::scope::HttpCall;
use crate::caps::Call;
use crate::caps::budget::TimeoutArg;
use crate::caps::context::CapCtx;
use crate::contract::bindings::cradle::host::http::{Host, Request, Response};
use crate::contract::bindings::cradle::host::types::Error as WitError;

impl Host for CapCtx {
    fn send(&mut self, req: Request) -> Result<Response, WitError> {
        let endpoint = req.endpoint.clone();
        let http = self.services.http.clone();
        let limit = TimeoutArg::Http.max().as_millis() as u64;
        self.guard("send", Call::Http(HttpCall { endpoint: &endpoint }), || {
            let timeout = self.clamp_timeout(limit, TimeoutArg::Http);
            self.block_on(http.send(req, timeout))
        })
        .map_err(Into::into)
    }
}
