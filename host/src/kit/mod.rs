//! The plugin kit on the host side: what `cradle plugin new`, `cradle plugin
//! build` and `cradle plugin test` do, without the terminal.
//!
//! - [`scaffold`]: write a buildable plugin crate (manifest, lifecycle, a
//!   native unit test, a test that runs it against the simulator through
//!   cradle, a README) with the guest kit (`cradle-guest`, plugins/guest) and
//!   the WIT of *this* cradle vendored into it, so the plugin builds against
//!   exactly the interface the binary that runs it speaks.
//! - [`cargo`]: build a plugin crate for `wasm32-wasip2` and find the
//!   component cargo wrote; a missing target is an error that says how to
//!   install it (or is installed on request).
//!
//! Running a plugin against the simulator is `cli::plugin_test`: it drives
//! the same provision and remove code as the CLI.

pub mod cargo;
pub mod scaffold;
