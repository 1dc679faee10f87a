//! Day-two maintenance of a complete VM, pure: the difference between what the
//! inventory asks for and the live PVE config ([`diff`]), each change
//! classified as PVE will take it ([`Class`]), how far an apply has got
//! ([`progress`]), and what is still not in effect after it ([`outstanding`],
//! [`needs_cold_start`]).
//!
//! Contract: no I/O and no Rhai types outside `rhai.rs` (the `maintenance`
//! script module, no capability, no grant: its callers' `proxmox` calls are
//! the checked ones). Every value written is what cradle writes at creation
//! (the direct plugin's `plugins/direct/src/config.rs` over the guest kit's
//! `plugins/guest/src/config.rs`); values are compared as PVE stores them
//! (property strings as parsed maps, tags normalised, `memory` as
//! `current=N` or `N`). The PVE facts each class rests on are cited in
//! `diff.rs` (qemu-server e6352be).

pub mod change;
pub mod diff;
pub mod progress;
pub mod pve;
pub mod rhai;
pub mod verify;

pub use change::{Allow, Change, Class, Live, PendingEntry, Resize, VmChanges, Wanted, WantedDisk, WantedNic};
pub use diff::{DiffError, diff};
pub use progress::{Progress, Step, progress};
pub use verify::{needs_cold_start, outstanding};

#[cfg(test)]
mod diff_tests;
#[cfg(test)]
mod progress_tests;
#[cfg(test)]
mod rhai_tests;
