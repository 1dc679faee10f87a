//! An INI inventory (ranges, `host:port`, `:vars`, `:children`), then `--limit`
//! and the resolution of every host, the way `cradle provision -i hosts.ini` reads it.
//! A first line `#limit PATTERN` (an INI comment) is also used as the pattern.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    cradle_fuzz::inventory_checks::exercise(text, false);
});
