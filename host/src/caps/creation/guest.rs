//! The guest settings user-data is built from ([`GuestSettings`]) and the
//! snippet storage of a VM that names none: the creation service's typed
//! input as the inventory gives it.
//!
//! Contract: plain data and the pure user-data builder, on `cloudinit`'s
//! types only (no run, no I/O), so `fuzz/` compiles it with the parser that
//! fills it (`script_args.rs`, target `script_args`).

use crate::cloudinit::{HostKey, ManagementUser, UserData};

/// The snippet storage of a VM that names none (`vms_snippet_storage`).
pub const DEFAULT_SNIPPET_STORAGE: &str = "local";

/// The guest settings user-data is built from, as the inventory gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSettings {
    /// Short hostname (the VM name unless the inventory sets one).
    pub hostname: String,
    /// Fully qualified name.
    pub fqdn: Option<String>,
    /// The management user (the VM's SSH login, `ansible_user`).
    pub login_user: String,
    /// Keys of this VM for the management user, after the run's guest keys.
    pub authorized_keys: Vec<String>,
    /// Packages to install.
    pub packages: Vec<String>,
    /// IANA zone.
    pub timezone: Option<String>,
}

impl GuestSettings {
    /// The user-data of `vm_name`: the management user gets `guest_keys`
    /// (the run's `services.guest_keys`) and then the VM's own keys.
    pub fn user_data(&self, vm_name: &str, guest_keys: &[String], host_key: Option<HostKey>) -> UserData {
        let mut keys = guest_keys.to_vec();
        keys.extend(self.authorized_keys.iter().cloned());
        UserData {
            vm_name: vm_name.to_string(),
            hostname: self.hostname.clone(),
            fqdn: self.fqdn.clone(),
            user: ManagementUser::new(self.login_user.clone(), keys),
            keep_default_user: false,
            packages: self.packages.clone(),
            package_update: false,
            timezone: self.timezone.clone(),
            host_key,
        }
    }
}
