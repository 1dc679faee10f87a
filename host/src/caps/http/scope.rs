//! The `http` capability's scope: its grant section (`[...grants.http]`:
//! [`HttpGrant`], the endpoint aliases), what of a call the grant looks at
//! ([`HttpCall`]: the endpoint), and the rule: the endpoint must be listed.
//! Checked through [`crate::caps::policy::check`] like every call; what a
//! request may do at a granted endpoint (path, headers, redirects) is the
//! provider's confinement ([`super`]).

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, OutOfScope};

/// `[...grants.http]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpGrant {
    /// Endpoint aliases from `[endpoints]`.
    #[serde(default)]
    pub endpoints: Vec<String>,
}

/// The scope-relevant arguments of an outbound HTTP request.
#[derive(Debug, Clone, Copy)]
pub struct HttpCall<'a> {
    /// The endpoint alias.
    pub endpoint: &'a str,
}

impl Grant for HttpGrant {
    type Call<'a> = HttpCall<'a>;

    fn check(&self, caller: &Caller<'_>, call: &HttpCall<'_>) -> Result<(), OutOfScope> {
        let endpoint = call.endpoint;
        if !self.endpoints.iter().any(|e| e == endpoint) {
            return Err(format!("endpoint `{endpoint}` is not in {}.http.endpoints", caller.origin).into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Call;
    use crate::caps::policy::fixture::{allowed, denied};

    #[test]
    fn http_to_an_unlisted_endpoint_is_denied() {
        assert!(denied(Call::Http(HttpCall { endpoint: "unifi" })).contains("endpoint `unifi`"));
        allowed(Call::Http(HttpCall { endpoint: "netbox" }));
    }
}
