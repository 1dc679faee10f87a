//! `budget:` attacks. `log-loop`, `denied-lock-loop` and `wait-for-forever`
//! make a plugin call that never ends or floods the host: each first takes the
//! lock `vm/<vm.template>` (so a test can check the run releases it when the
//! call is ended), then misbehaves. `terminal-error` fails at once with a
//! message full of terminal control sequences ([`TERMINAL_ATTACK`]).

use crate::bindings::cradle::host::types::{Error, VmSpec, VmState};
use crate::bindings::cradle::host::{lock, log, ssh};

/// Terminal control sequences a hostile error message carries: screen clear,
/// window title (OSC 0), a carriage return and a forged `error:` line.
pub const TERMINAL_ATTACK: &str = "boom\x1b[2J\x1b]0;pwned-title\x07\rerror: forged line\nerror: second forged line";

/// Run `attack`, or `None` when this module has no such attack.
pub fn run(attack: &str, vm: &VmSpec) -> Option<Result<Option<VmState>, Error>> {
    let result = match attack {
        "terminal-error" => Err(Error::Failed(TERMINAL_ATTACK.to_string())),
        "log-loop" => take_lock(vm).and_then(|()| {
            let line = "x".repeat(4096);
            loop {
                log::event(log::Level::Info, &line, &[]);
            }
        }),
        "denied-lock-loop" => take_lock(vm).and_then(|()| {
            let mut denied: u64 = 0;
            loop {
                if lock::acquire("other/denied").is_err() {
                    denied = std::hint::black_box(denied + 1);
                }
            }
        }),
        "wait-for-forever" => take_lock(vm).and_then(|()| {
            // The guest's address (granted as `guests`), on a port nothing
            // listens on: only the clamp and the call's deadline end this.
            let host = guest_host(vm);
            ssh::wait_for(&ssh::Target { host: host.clone(), port: 9, user: "root".into() }, u64::MAX)
                .map(|()| Some(crate::state(format!("ssh.wait-for {host} returned"), vm.vmid)))
        }),
        _ => return None,
    };
    Some(result)
}

fn take_lock(vm: &VmSpec) -> Result<(), Error> {
    lock::acquire(&format!("vm/{}", vm.template)).map(|_| ())
}

fn guest_host(vm: &VmSpec) -> String {
    let address = vm.nics.first().and_then(|n| n.address.clone()).unwrap_or_default();
    address.split('/').next().unwrap_or_default().to_string()
}
