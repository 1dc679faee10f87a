//! The `http` capability's scope: its grant section (`[...grants.http]`:
//! [`HttpGrant`], the endpoint aliases and the guest ports), what of a call
//! the grant looks at ([`HttpCall`]: a named endpoint, or a guest's address
//! and port), and the rules: the endpoint must be listed; a guest probe must
//! go to the address of one of the call's VMs (the inventory's
//! `ansible_host`) on a listed port. Checked through
//! [`crate::caps::policy::check`] like every call; what a request may do at a
//! granted endpoint (path, headers, redirects) is the provider's confinement
//! ([`super`]).

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, GrantError, OutOfScope};

/// `[...grants.http]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpGrant {
    /// Endpoint aliases from `[endpoints]`.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// Ports a health probe (a plain `GET` without credentials, only its
    /// status read: `http::probe`) may reach on the call's own guests, at
    /// their inventory address: an appliance's web UI (Home Assistant: 8123).
    #[serde(default)]
    pub guest_ports: Vec<u16>,
}

/// What an outbound HTTP request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpTarget<'a> {
    /// A named endpoint of `[endpoints]`.
    Endpoint(&'a str),
    /// A health probe of `host:port` (the URL's host and port).
    Guest {
        /// The URL's host.
        host: &'a str,
        /// The URL's port (80/443 when it names none).
        port: u16,
    },
}

/// The scope-relevant arguments of an outbound HTTP request.
#[derive(Debug, Clone, Copy)]
pub struct HttpCall<'a> {
    /// Where it goes.
    pub target: HttpTarget<'a>,
}

impl Grant for HttpGrant {
    type Call<'a> = HttpCall<'a>;

    fn validate(&self) -> Result<(), GrantError> {
        if self.guest_ports.contains(&0) {
            return Err(GrantError {
                key: "http.guest_ports",
                value: "0".into(),
                problem: "is not a port (1-65535)".into(),
            });
        }
        Ok(())
    }

    fn check(&self, caller: &Caller<'_>, call: &HttpCall<'_>) -> Result<(), OutOfScope> {
        let origin = caller.origin;
        match call.target {
            HttpTarget::Endpoint(endpoint) => {
                if !self.endpoints.iter().any(|e| e == endpoint) {
                    return Err(format!("endpoint `{endpoint}` is not in {origin}.http.endpoints").into());
                }
            }
            HttpTarget::Guest { host, port } => {
                let guest = caller
                    .scope
                    .vms
                    .iter()
                    .find(|vm| vm.ssh.as_ref().is_some_and(|l| l.host.eq_ignore_ascii_case(host)));
                let Some(vm) = guest else {
                    return Err(format!(
                        "a probe of `{host}:{port}`: `{host}` is not the address of a VM of this call (a probe \
                         reaches only the run's own guests, at their inventory address)"
                    )
                    .into());
                };
                if !self.guest_ports.contains(&port) {
                    return Err(format!(
                        "a probe of guest {} at `{host}:{port}`: port {port} is not in {origin}.http.guest_ports",
                        vm.name
                    )
                    .into());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Call;
    use crate::caps::policy::fixture::{allowed, denied, scope};
    use crate::caps::policy::{RunScope, check};

    fn endpoint(name: &str) -> Call<'_> {
        Call::Http(HttpCall { target: HttpTarget::Endpoint(name) })
    }

    fn probe(host: &str, port: u16) -> Call<'_> {
        Call::Http(HttpCall { target: HttpTarget::Guest { host, port } })
    }

    /// The fixture's grants with `guest_ports = [8123]`.
    fn grants_with_guest_port() -> crate::caps::Grants {
        let mut g = crate::caps::policy::fixture::grants();
        g.http.as_mut().expect("http").guest_ports = vec![8123];
        g
    }

    #[test]
    fn http_to_an_unlisted_endpoint_is_denied() {
        assert!(denied(endpoint("unifi")).contains("endpoint `unifi`"));
        allowed(endpoint("netbox"));
    }

    #[test]
    fn a_probe_of_a_guest_port_not_granted_is_denied() {
        // The fixture grants no guest port.
        let m = denied(probe("127.0.10.5", 8123));
        assert!(m.contains("port 8123 is not in plugins.direct.grants.http.guest_ports"), "{m}");
        let g = grants_with_guest_port();
        check(&g, "workflow.grants", &scope(), &probe("127.0.10.5", 8123)).expect("the guest's address, granted port");
        let m = check(&g, "workflow.grants", &scope(), &probe("127.0.10.5", 8124)).expect_err("another port");
        assert!(m.to_string().contains("port 8124 is not in workflow.grants.http.guest_ports"), "{m}");
    }

    #[test]
    fn a_probe_of_an_address_that_is_no_guest_of_the_call_is_denied() {
        let g = grants_with_guest_port();
        let operator = RunScope { operator: true, ..scope() };
        for host in ["127.0.1.1", "10.0.0.1", "netbox.lab"] {
            let m = check(&g, "workflow.grants", &operator, &probe(host, 8123)).expect_err(host).to_string();
            assert!(m.contains("is not the address of a VM of this call"), "{m}");
        }
    }

    #[test]
    fn a_guest_port_of_zero_is_refused_when_the_config_is_read() {
        let g: HttpGrant = toml::from_str("guest_ports = [8123, 0]").expect("parse");
        assert_eq!(g.validate().expect_err("zero").key, "http.guest_ports");
        let g: HttpGrant = toml::from_str("guest_ports = [8123]").expect("parse");
        g.validate().expect("a port");
    }
}
