//! Pure decision logic of cradle's NetBox pipeline (plugins/netbox,
//! wit/pipeline.wit): no I/O, no clocks, so the same code runs natively under
//! `cargo test` and inside the `wasm32-wasip2` plugin.
//!
//! * [`admit`]: is a NetBox VM one the pipeline builds, skips, or refuses
//!   (with a sentence for the NetBox user listing what is missing)?
//! * [`mac`]: the MAC of a Proxmox `net0` value.
//! * [`journal`]: the journal entries' sentences (success, failure).
//! * [`ha`]: what to write for a VM's node-affinity rule, from the rules there are.
//! * [`settings`]: the pipeline's inventory settings the plugin checks
//!   (`netbox_mac_write`, `unifi_site`, `dns_ptr`).
//!
//! Every refusal is a [`Problem`]: its [`Kind`] is the WIT `error` case the
//! plugin returns, its message is what a NetBox user or an operator reads.
//! The behaviour is workflows/netbox.rhai's before the move (its e2e tests,
//! tests/e2e/netbox_pipeline.rs and netbox_real.rs, are the judge).

pub mod admit;
pub mod ha;
pub mod journal;
pub mod mac;
pub mod settings;

/// The WIT `error` case a [`Problem`] is returned as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The input cannot be used as it is; retrying will not help.
    Invalid,
    /// The world is in the way (another HA rule holds the VM).
    Conflict,
    /// Something is not as it must be (a VM with no MAC on `net0`).
    Failed,
}

/// A refusal: its kind and a message naming the VM, the field or the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The WIT error case.
    pub kind: Kind,
    /// The sentence.
    pub message: String,
}

impl Problem {
    pub(crate) fn invalid(message: String) -> Problem {
        Problem { kind: Kind::Invalid, message }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Problem {}

/// `["a", "b", "c"]` as `a, b and c`, for a sentence.
pub fn words(items: &[&str]) -> String {
    let mut text = String::new();
    for (i, item) in items.iter().enumerate() {
        text += if i == 0 {
            ""
        } else if i == items.len() - 1 {
            " and "
        } else {
            ", "
        };
        text += item;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn words_join_a_list_as_a_sentence_does() {
        assert_eq!(words(&[]), "");
        assert_eq!(words(&["a"]), "a");
        assert_eq!(words(&["a", "b"]), "a and b");
        assert_eq!(words(&["a", "b", "c"]), "a, b and c");
    }
}
