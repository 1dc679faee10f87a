//! A YAML inventory (groups, `children`, ranges, vars with Jinja templates), then
//! `--limit` and the resolution of every host. A first line `#limit PATTERN` (a
//! YAML comment) is also used as the pattern.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    cradle_fuzz::inventory_checks::exercise(text, true);
});
