//! Guest-side helpers for cradle backend plugins.
//!
//! A plugin generates its own bindings with `wit_bindgen::generate!` against the
//! repository's `wit/` folder and an inline world that imports exactly the
//! capabilities it needs (so its component imports nothing more), and declares
//! its manifest with [`manifest!`]. The manifest is embedded as the wasm custom
//! section `cradle-manifest`; the host reads it before compiling the plugin and
//! refuses a component whose imports are not all declared there.

/// The custom section name the host reads the manifest from.
pub const MANIFEST_SECTION: &str = "cradle-manifest";

/// Copy a byte string into a fixed-size array at compile time (used by
/// [`manifest!`], which needs a sized static for `link_section`).
#[doc(hidden)]
pub const fn to_array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// Declare the plugin's manifest: its name, version, a one-line description and
/// the capability interfaces it needs (`log`, `proxmox`, `ssh`, `dns`, `lock`,
/// `checkpoint`, `terraform`, `http`).
///
/// ```ignore
/// cradle_guest::manifest! {
///     name: "direct",
///     version: env!("CARGO_PKG_VERSION"),
///     description: "Clone and configure VMs through the Proxmox API",
///     needs: ["log", "proxmox", "lock"],
/// }
/// ```
#[macro_export]
macro_rules! manifest {
    (name: $name:expr, version: $version:expr, description: $desc:expr, needs: [$($need:expr),* $(,)?] $(,)?) => {
        const _CRADLE_MANIFEST_TEXT: &str = concat!(
            "name = \"", $name, "\"\n",
            "version = \"", $version, "\"\n",
            "description = \"", $desc, "\"\n",
            "needs = [", $("\"", $need, "\", ",)* "]\n",
        );
        #[allow(unsafe_code, reason = "link_section is an unsafe attribute")]
        #[used]
        #[unsafe(link_section = "cradle-manifest")]
        static _CRADLE_MANIFEST: [u8; _CRADLE_MANIFEST_TEXT.len()] =
            $crate::to_array(_CRADLE_MANIFEST_TEXT.as_bytes());
    };
}
