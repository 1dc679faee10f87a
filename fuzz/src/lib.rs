//! The parsers cargo-fuzz exercises, compiled from the host's own source files.
//!
//! Contract: every module here is a `#[path]` include of a self-contained host
//! file (no `crate::` imports of wasmtime-dependent modules), so the fuzz
//! targets run exactly the code `cradle` runs, without building the `cradle`
//! crate (and wasmtime) a second time. Where a host file names a type of the
//! host's WIT bindings, [`contract`] provides a plain stand-in with the same
//! fields: the parser is the host's, only its input type is rebuilt here.

#![allow(dead_code, reason = "the host files carry items only the host uses")]
#![allow(unused_imports, reason = "the host files carry imports only the host's cfgs use")]

/// Ansible INI/YAML inventories, `--limit` patterns, templates, resolution.
#[path = "../../host/src/inventory/mod.rs"]
pub mod inventory;

/// The assertions the inventory targets share.
pub mod inventory_checks;

/// The terraform capability's module-content check.
pub mod terraform;

/// `cloud-init status --format=json`.
#[path = "../../host/src/cloudinit/status.rs"]
pub mod cloudinit_status;

/// `cradle serve`: the NetBox webhook body and its `X-Hook-Signature`.
pub mod serve;

/// PVE config property strings as the proxmox capability scopes them.
#[path = "../../host/src/caps/proxmox/config_scope.rs"]
pub mod config_scope;

/// The PVE response decoders of the proxmox client (`client/answers.rs`) and
/// their lenient readers (`client/decode.rs`), siblings as in the host.
pub mod pve;

/// A run journal's lines and summary, as `cradle runs` reads them.
pub mod journal;

/// The host's secret registry and redaction (`host/src/secrets`), which the
/// journal's events use when they are written.
#[path = "../../host/src/secrets/mod.rs"]
pub mod secrets;

/// The host's capability error, with stand-ins for the WIT binding types the
/// included files name.
pub mod contract;

/// cradle's known_hosts (`caps/ssh/known_hosts.rs`) and what it takes from its
/// parent module.
pub mod ssh;

/// The workflow engine's Rhai ↔ WIT value bridge (`host/src/workflow/bridge`),
/// its pure core over the bridge's own type and value.
pub mod bridge;

/// What the included files take from `host/src/state`.
pub mod state;

/// The guest kit's config values and property strings (plugins/guest/src/config.rs),
/// as the direct and terraform backends compare and write them.
#[path = "../../plugins/guest/src/config.rs"]
pub mod guest_config;

/// Stand-ins for the guest kit's WIT types (`crate::types` there) with the fields
/// `guest_config` reads.
pub mod types {
    pub use crate::contract::bindings::cradle::host::types::Entry;

    /// `cradle:host/types.nic` (the fields the config code reads).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Nic {
        pub bridge: String,
        pub vlan: Option<u16>,
    }

    /// `cradle:host/types.vm-spec` (the fields the config code reads).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct VmSpec {
        pub startup_order: Option<u32>,
    }
}

/// `cradle.toml`: the loader (`host/src/config`) and the closure of what it
/// parses into and validates with, each from its host file: the grant
/// sections and their registry (`caps/registry.rs`, `caps/*/scope.rs`), the
/// capability sections (`caps/{dns,dhcp,post,http,coordination,terraform}`'s
/// config files), `node_ssh` entries, plugin limits and the call budget,
/// cloud-init snippet names (the proxmox grant's rules use them), the PVE
/// role table and the built-in plugins' catalogue (their default tables).
/// `config/mod.rs` declares its section files itself (`maintenance.rs`, ...).
#[path = "../../host/src/config/mod.rs"]
pub mod config;

/// The built-in plugins' catalogue (`host/src/builtin/catalogue.rs`: names and
/// default `[plugins.NAME]` tables); the components themselves are not here.
#[path = "../../host/src/builtin"]
pub mod builtin {
    pub mod catalogue;
    pub use catalogue::BuiltinDefaults;
}

/// What `config` takes from `host/src/plugin`: the limits and their checks.
#[path = "../../host/src/plugin"]
pub mod plugin {
    pub mod limits;
}

/// cloud-init rendering (`host/src/cloudinit`), for the snippet names the
/// proxmox grant's rules derive from a VM's name.
#[path = "../../host/src/cloudinit/mod.rs"]
pub mod cloudinit;

/// `host/src/caps` as the loader sees it: each module is the host file of that
/// name (an inline module with `#[path]` on the directory, so the registry's
/// own `registry/expand.rs` resolves as in the host). Stand-ins, only for what
/// lies outside parsing: each capability's Rhai module (the registry lists
/// them for workflows) and `Capability`'s `Display` (caps/mod.rs).
#[path = "../../host/src/caps"]
pub mod caps {
    pub mod budget;
    pub mod policy;
    pub mod registry;
    /// The value glue of the typed script parsers (`script_args` target).
    pub mod script_glue;

    pub use registry::{Call, Capability, Grants};

    /// As `caps/mod.rs` shows a capability: its interface name.
    impl std::fmt::Display for Capability {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.name())
        }
    }

    /// The Rhai modules the registry lists for workflows (not parsing).
    macro_rules! rhai_stand_in {
        () => {
            pub mod rhai {
                pub fn module() -> ::rhai::Module {
                    ::rhai::Module::new()
                }
            }
        };
    }

    pub mod checkpoint {
        pub mod scope;
        rhai_stand_in!();
    }
    pub mod coordination {
        pub mod config;
        pub use config::{CoordinationBackend, CoordinationConfig};
    }
    pub mod creation {
        pub mod guest;
        pub mod script_args;
        rhai_stand_in!();
    }
    pub mod dhcp {
        pub mod cidr;
        pub mod config;
        pub mod scope;
        pub use config::{DhcpProviderConfig, DhcpProviderKind};
        rhai_stand_in!();
    }
    pub mod dns {
        pub mod config;
        pub mod scope;
        pub mod script_args;
        pub use config::{DnsConfigError, DnsProviderConfig, DnsProviderKind, NameError, TsigAlgorithmName};
        rhai_stand_in!();
    }
    pub mod http {
        pub mod config;
        pub mod scope;
        pub use config::{EndpointAuth, EndpointConfig};
        rhai_stand_in!();
    }
    pub mod image {
        rhai_stand_in!();
    }
    pub mod lock {
        pub mod scope;
        pub use crate::caps::coordination::{CoordinationBackend, CoordinationConfig};
        rhai_stand_in!();
    }
    pub mod log {
        pub mod scope;
        rhai_stand_in!();
    }
    /// The maintenance plan's diff, progress and verify (`maintenance_diff`
    /// target); its Rhai module is a stand-in like the others.
    pub mod maintenance {
        pub mod change;
        pub mod diff;
        pub mod progress;
        pub mod pve;
        pub mod verify;
        rhai_stand_in!();
    }
    pub mod netbox {
        pub mod scope;
        rhai_stand_in!();
    }
    pub mod post {
        pub mod config;
        pub mod scope;
        pub use config::{PostProviderConfig, PostProviderKind};
        rhai_stand_in!();
    }
    pub mod proxmox {
        pub mod config_scope;
        pub mod scope;
        pub mod role {
            pub mod privileges;
            pub use privileges::{Privilege, ROLE, ROLE_NAME, denied_hint, privs_list};
        }
        rhai_stand_in!();
    }
    pub mod script {
        pub mod cradle {
            rhai_stand_in!();
            pub use self::rhai::module;
        }
        pub mod guestnet {
            rhai_stand_in!();
            pub use self::rhai::module;
        }
    }
    pub mod ssh {
        pub mod node;
        pub mod scope;
        pub mod script_args;
        pub use node::{NodeSsh, NodeSshError};
        rhai_stand_in!();
    }
    pub mod terraform {
        pub mod config;
        pub mod scope;
        pub use config::{Flavour, TerraformConfig, TerraformConfigError};
    }
}
