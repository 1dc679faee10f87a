//! The `http` capability's scope: its grant section (`[...grants.http]`:
//! [`HttpGrant`], the endpoint aliases and the guest ports), what of a call
//! the grant looks at ([`HttpCall`]: a named endpoint, or a guest's address
//! and port), and the rules: the endpoint must be listed; a guest probe must
//! go to the address of one of the call's VMs (the inventory's
//! `ansible_host`) on a listed port. An endpoint may be narrowed by
//! `[...grants.http.limit.NAME]`: `methods` (the request's method must be
//! listed) and `paths` (prefixes: the request's path, percent-decoded, must
//! start with one of them at a segment boundary). With `paths`, a path that
//! could read two ways is refused before it is compared: a `.` or `..`
//! segment, an empty segment (`//`), an encoded `/` or `\`, a control
//! character, invalid percent-encoding. No limit: any method, any path below
//! the endpoint. Checked through [`crate::caps::policy::check`] like every
//! call; what any request may do at a granted endpoint (headers, redirects,
//! the path's own rules) is the provider's confinement ([`super`]).

use std::collections::BTreeMap;

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
    /// Per endpoint (a name of `endpoints`): the methods and path prefixes
    /// allowed there. An endpoint without one allows any method and path.
    #[serde(default)]
    pub limit: BTreeMap<String, EndpointLimit>,
}

/// `[...grants.http.limit.NAME]`: what requests to one endpoint may be.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointLimit {
    /// Methods allowed (`GET`, `POST`, `PUT`, `PATCH`, `DELETE`); absent: any.
    pub methods: Option<Vec<String>>,
    /// Path prefixes allowed (`/api/ipam/`); absent: any path.
    pub paths: Option<Vec<String>>,
}

/// The methods a request can have (the WIT `method` enum).
const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// `path` as the server reads it, segment by segment percent-decoded, or why
/// it could be read two ways (so no prefix comparison is trusted with it).
fn normalised(path: &str) -> Result<String, &'static str> {
    let Some(rest) = path.strip_prefix('/') else { return Err("does not start with `/`") };
    if path.contains(['?', '#']) {
        return Err("holds `?` or `#`");
    }
    let mut out = String::with_capacity(path.len());
    let segments: Vec<&str> = rest.split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        // A trailing `/` is an empty last segment; any other empty one is `//`.
        if segment.is_empty() && i + 1 != segments.len() {
            return Err("has an empty segment (`//`)");
        }
        let decoded = percent_decoded(segment)?;
        if decoded == "." || decoded == ".." {
            return Err("has a `.` or `..` segment (encoded or not)");
        }
        if decoded.contains(['/', '\\']) || decoded.chars().any(char::is_control) {
            return Err("has an encoded `/`, a `\\` or a control character");
        }
        out.push('/');
        out.push_str(&decoded);
    }
    Ok(out)
}

/// `segment` percent-decoded: every `%` starts two hex digits, and the bytes
/// are UTF-8. (By hand: the fuzz crate compiles this file without the host's
/// dependencies.)
fn percent_decoded(segment: &str) -> Result<String, &'static str> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let byte = hex
                .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("has a `%` that is not a percent-encoded byte")?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "is not valid UTF-8 once percent-decoded")
}

/// `path` (normalised) lies under `prefix`: equal, or `prefix` ends with `/`
/// and starts it, or the next character of `path` is `/` (so `/api/dcim`
/// does not cover `/api/dcimx`).
fn under(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
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
    /// Its method (`GET`), for an endpoint's `methods`.
    pub method: &'a str,
    /// Its path below the endpoint, as the plugin gave it, for `paths`.
    pub path: &'a str,
}

impl Grant for HttpGrant {
    type Call<'a> = HttpCall<'a>;

    fn validate(&self) -> Result<(), GrantError> {
        for (name, limit) in &self.limit {
            let bad =
                |key: &'static str, value: &str, problem: String| Err(GrantError { key, value: value.into(), problem });
            if !self.endpoints.contains(name) {
                return bad("http.limit", name, format!("limits endpoint `{name}`, which is not in http.endpoints"));
            }
            for m in limit.methods.iter().flatten() {
                if !METHODS.contains(&m.as_str()) {
                    return bad("http.limit.methods", m, format!("is not a method (one of {})", METHODS.join(", ")));
                }
            }
            for p in limit.paths.iter().flatten() {
                if let Err(why) = normalised(p) {
                    return bad(
                        "http.limit.paths",
                        p,
                        format!("{why}; write the prefix as it reads, e.g. \"/api/ipam/\""),
                    );
                }
                if p.contains('%') {
                    return bad("http.limit.paths", p, "is percent-encoded; write it decoded".into());
                }
            }
        }
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
                let Some(limit) = self.limit.get(endpoint) else { return Ok(()) };
                let (method, path) = (call.method, call.path);
                if let Some(methods) = &limit.methods
                    && !methods.iter().any(|m| m.eq_ignore_ascii_case(method))
                {
                    return Err(format!(
                        "{method} {path} at endpoint `{endpoint}`: {method} is not in {origin}.http.limit.{endpoint}.methods"
                    )
                    .into());
                }
                if let Some(paths) = &limit.paths {
                    let read = normalised(path).map_err(|why| {
                        format!(
                            "{method} {path} at endpoint `{endpoint}`: the path {why}, so it cannot be held against \
                             {origin}.http.limit.{endpoint}.paths"
                        )
                    })?;
                    if !paths.iter().any(|p| under(&read, p)) {
                        return Err(format!(
                            "{method} {path} at endpoint `{endpoint}`: `{read}` is under none of \
                             {origin}.http.limit.{endpoint}.paths"
                        )
                        .into());
                    }
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
        request(name, "GET", "/api/status/")
    }

    fn request<'a>(name: &'a str, method: &'a str, path: &'a str) -> Call<'a> {
        Call::Http(HttpCall { target: HttpTarget::Endpoint(name), method, path })
    }

    fn probe(host: &str, port: u16) -> Call<'_> {
        Call::Http(HttpCall { target: HttpTarget::Guest { host, port }, method: "GET", path: "/" })
    }

    /// Workflow grants with `netbox` limited to reads and writes under
    /// `/api/ipam/` and `/api/virtualization/`.
    fn limited() -> crate::caps::Grants {
        let mut g = crate::caps::policy::fixture::grants();
        let http = g.http.as_mut().expect("http");
        http.limit = toml::from_str(
            "[netbox]\nmethods = [\"GET\", \"PATCH\"]\npaths = [\"/api/ipam/\", \"/api/virtualization\"]",
        )
        .expect("limit");
        http.validate().expect("a valid limit");
        g
    }

    fn limited_check(method: &str, path: &str) -> Result<(), String> {
        check(&limited(), "workflow.grants", &scope(), &request("netbox", method, path)).map_err(|e| e.to_string())
    }

    #[test]
    fn a_method_outside_the_endpoints_methods_is_denied() {
        limited_check("GET", "/api/ipam/ip-addresses/7/").expect("GET is listed");
        limited_check("PATCH", "/api/virtualization/virtual-machines/7/").expect("PATCH is listed");
        let m = limited_check("DELETE", "/api/ipam/ip-addresses/7/").expect_err("DELETE is not");
        assert!(m.contains("DELETE is not in workflow.grants.http.limit.netbox.methods"), "{m}");
    }

    #[test]
    fn a_path_outside_the_endpoints_prefixes_is_denied() {
        for path in ["/api/dcim/devices/", "/api/users/tokens/", "/api/virtualizationx/", "/api/ipam", "/"] {
            let m = limited_check("GET", path).expect_err(path);
            assert!(m.contains("is under none of workflow.grants.http.limit.netbox.paths"), "{path}: {m}");
        }
        // A prefix without a trailing `/` covers itself and what lies below it.
        limited_check("GET", "/api/virtualization").expect("the prefix itself");
        // Percent-encoded letters are read as the server reads them.
        limited_check("GET", "/api/%69pam/prefixes/").expect("/api/ipam/ once decoded");
        let m = limited_check("GET", "/api/%64cim/devices/").expect_err("/api/dcim/ once decoded");
        assert!(m.contains("`/api/dcim/devices/` is under none"), "{m}");
    }

    #[test]
    fn a_path_that_climbs_out_of_a_prefix_or_reads_two_ways_is_denied() {
        for path in [
            "/api/ipam/../users/tokens/",
            "/api/ipam/%2e%2e/users/tokens/",
            "/api/ipam/%2E%2E/%2e%2e/admin",
            "/api/ipam/./x",
            "/api/ipam//x",
            "/api/ipam/%2f..%2fusers/",
            "/api/ipam/a%5c..%5cusers/",
            "/api/ipam/%zz/",
            "/api/ipam/%0a/",
            "api/ipam/",
        ] {
            let m = limited_check("GET", path).expect_err(path);
            assert!(m.contains("so it cannot be held against workflow.grants.http.limit.netbox.paths"), "{path}: {m}");
        }
    }

    #[test]
    fn an_endpoint_without_a_limit_allows_any_method_and_path() {
        let g = limited();
        check(&g, "workflow.grants", &scope(), &request("netbox", "GET", "/api/ipam/")).expect("limited, inside");
        let mut open = crate::caps::policy::fixture::grants();
        open.http.as_mut().expect("http").limit.clear();
        check(&open, "workflow.grants", &scope(), &request("netbox", "DELETE", "/api/users/tokens/1/"))
            .expect("no limit");
    }

    #[test]
    fn a_limit_that_cannot_hold_is_refused_when_the_config_is_read() {
        let refused = |text: &str| {
            let g: HttpGrant = toml::from_str(text).expect("parse");
            g.validate().expect_err(text)
        };
        let e = refused("endpoints = [\"netbox\"]\n[limit.unifi]\nmethods = [\"GET\"]");
        assert_eq!((e.key, e.value.as_str()), ("http.limit", "unifi"));
        assert_eq!(refused("endpoints = [\"netbox\"]\n[limit.netbox]\nmethods = [\"get\"]").key, "http.limit.methods");
        for p in ["api/ipam/", "/api/../users/", "/api//ipam/", "/api/%69pam/"] {
            let e = refused(&format!("endpoints = [\"netbox\"]\n[limit.netbox]\npaths = [\"{p}\"]"));
            assert_eq!((e.key, e.value.as_str()), ("http.limit.paths", p));
        }
        let e = toml::from_str::<HttpGrant>("endpoints = [\"netbox\"]\n[limit.netbox]\nverbs = [\"GET\"]");
        assert!(e.is_err(), "an unknown key is refused");
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
