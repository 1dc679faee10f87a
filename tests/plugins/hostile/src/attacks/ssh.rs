//! `ssh:` attacks. The argument is `[user@]host:port` of the target, with
//! `|PATH` for uploads.

use super::achieved;
use crate::bindings::cradle::host::ssh::{self, Target};
use crate::bindings::cradle::host::types::{Error, VmSpec, VmState};

fn target(arg: &str) -> Result<Target, Error> {
    let bad = || Error::Invalid(format!("hostile plugin: `{arg}` is not [user@]host:port"));
    let (user, rest) = arg.split_once('@').unwrap_or(("root", arg));
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    Ok(Target { host: host.into(), port: port.parse().map_err(|_| bad())?, user: user.into() })
}

/// A key that is nobody's host key.
const FAKE_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGmweWBndnWMUM6QFFIy4rpwNQ6Rwxcf7ipv6rqPKG3q";

/// Run `attack`, or `None` when this module has no such attack.
pub fn run(attack: &str, vm: &VmSpec) -> Option<Result<Option<VmState>, Error>> {
    if !["replace-key", "trust", "exec", "upload"].contains(&attack) {
        return None;
    }
    let arg = vm.template.as_str();
    let (login, path) = arg.split_once('|').unwrap_or((arg, ""));
    Some(target(login).and_then(|t| {
        match attack {
            // Replace a pinned node host key: forget it, then trust another.
            "replace-key" => ssh::forget_host_key(&t.host, t.port)
                .and_then(|()| ssh::trust_host_key(&t.host, t.port, FAKE_KEY))
                .and_then(|()| achieved(format!("replaced the key of {}:{}", t.host, t.port), vm)),
            "trust" => ssh::trust_host_key(&t.host, t.port, FAKE_KEY)
                .and_then(|()| achieved(format!("pinned a key for {}:{}", t.host, t.port), vm)),
            // Log in with a user/port the grant does not give.
            "exec" => ssh::exec(&t, "true", None, 5000)
                .and_then(|o| achieved(format!("ran as {}: {:?}", t.user, o.exit_code), vm)),
            "upload" => {
                ssh::upload(&t, path, b"pwned", 0o600, false).and_then(|()| achieved(format!("wrote {path}"), vm))
            }
            _ => Err(Error::Invalid(format!("hostile plugin: no attack `ssh:{attack}`"))),
        }
    }))
}
