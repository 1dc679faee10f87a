//! The stand-ins' own tests, written from the upstream facts in docs/STAND-INS.md
//! (not from any client of cradle's): UniFi Network, Technitium DNS and Semaphore UI
//! over real HTTP, and DHCP from the UniFi stand-in in the simulated cluster.

mod dhcp;
mod semaphore;
mod semaphore_rules;
mod technitium;
mod unifi;
mod unifi_csrf;
mod unifi_reservations;

/// An HTTP client that follows no redirects and trusts `ca` (when HTTPS).
pub fn client(ca: Option<String>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30));
    if let Some(ca) = ca {
        b = b
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap());
    }
    b.build().unwrap()
}

/// The value of cookie `name` among a response's `Set-Cookie` headers.
pub fn set_cookie(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next()?.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}
