//! `cloud-init status --format=json` answers (with anything printed before the
//! JSON) and the cloud-init log check, as cradle judges them. The first byte is
//! the exit code (255 = killed), the rest stdout.
//!
//! Invariant: `Done` only with exit 0.
#![no_main]

use cradle_fuzz::cloudinit_status::{Verdict, log_verdict, reports_warnings, verdict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&code, rest)) = data.split_first() else { return };
    let Ok(stdout) = std::str::from_utf8(rest) else { return };
    let exit = if code == 255 { None } else { Some(i32::from(code)) };
    if verdict(exit, stdout) == Verdict::Done {
        assert_eq!(exit, Some(0), "Done with exit {exit:?}");
    }
    let _ = reports_warnings(stdout);
    let _ = log_verdict(exit, stdout, stdout);
});
