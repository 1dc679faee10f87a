//! The Proxmox VE role cradle's API token needs ([`privileges`]: the table,
//! the `pveum` privilege list and the hint a 403 carries) and the simulator's
//! least-privilege token holding it ([`sim_access`]).
//!
//! Contract: as `privileges.rs` states; [`sim_access`] grants exactly [`ROLE`]
//! minus what a test takes out, on `/` to `cradle@pve`.

pub mod privileges;

pub use privileges::{Privilege, ROLE, ROLE_NAME, denied_hint, privs_list};

/// The simulator's access configuration for a token holding [`ROLE`] without the
/// privileges in `without` (the tests' one-privilege-removed cases).
pub fn sim_access(without: &[&str]) -> cradle_sim::acl::AccessConfig {
    let privs: Vec<&str> = ROLE.iter().map(|p| p.name).filter(|p| !without.contains(p)).collect();
    cradle_sim::acl::AccessConfig::single_role("cradle@pve", ROLE_NAME, &privs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_privilege_of_the_role_is_one_pve_knows() {
        let valid = cradle_sim::acl::valid_privileges();
        for p in ROLE {
            assert!(valid.contains(p.name), "{} is not a PVE 9.1 privilege", p.name);
        }
        assert_eq!(sim_access(&[]).validate(), Ok(()));
    }
}
