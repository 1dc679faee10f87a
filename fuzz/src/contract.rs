//! The host's `contract::CapError` (its own file) and stand-ins for the WIT
//! binding types the included files name: plain types with the generated
//! types' fields and cases, so the host's code compiles unchanged without
//! wit-bindgen/wasmtime.

#[path = "../../host/src/contract/error.rs"]
mod error;

pub use error::{CapError, ErrorKind};

pub mod bindings {
    /// `cradle:host/types.error`, as the host's bindings name it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum WitError {
        Denied(String),
        NotFound(String),
        Conflict(String),
        Invalid(String),
        Transient(String),
        Failed(String),
    }

    pub mod cradle {
        pub mod host {
            pub mod types {
                /// `cradle:host/types.entry`: one config key and its value.
                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct Entry {
                    pub key: String,
                    pub value: String,
                }
            }

            /// `cradle:host/ssh.target`, with the bindings' serde derive.
            pub mod ssh {
                #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
                pub struct Target {
                    pub host: String,
                    pub port: u16,
                    pub user: String,
                }
            }

            /// `cradle:host/dns`'s record and kind, with the bindings' serde derive.
            pub mod dns {
                #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
                pub enum RecordKind {
                    A,
                    Aaaa,
                    Ptr,
                }

                #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
                pub struct DnsRecord {
                    pub zone: String,
                    pub name: String,
                    pub kind: RecordKind,
                    pub value: String,
                    pub ttl: u32,
                }
            }

            /// `cradle:host/proxmox`'s records the PVE response decoders
            /// (`client/answers.rs`) build, with the WIT's fields.
            pub mod proxmox {
                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct VmResource {
                    pub vmid: u32,
                    pub name: Option<String>,
                    pub node: String,
                    pub status: String,
                    pub template: bool,
                    pub lock: Option<String>,
                    pub hastate: Option<String>,
                    pub tags: Option<String>,
                }

                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct PendingEntry {
                    pub key: String,
                    pub value: Option<String>,
                    pub pending: Option<String>,
                    pub delete: bool,
                }

                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct VmRuntime {
                    pub status: String,
                    pub qmpstatus: Option<String>,
                    pub lock: Option<String>,
                    pub uptime: u64,
                    pub ha_managed: bool,
                }

                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct TaskStatus {
                    pub upid: String,
                    pub status: String,
                    pub exitstatus: Option<String>,
                    pub ok: bool,
                }

                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct TaskSummary {
                    pub upid: String,
                    pub kind: String,
                    pub id: String,
                    pub starttime: u64,
                    pub status: Option<String>,
                }

                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct StorageDefinition {
                    pub storage: String,
                    pub kind: String,
                    pub content: Vec<String>,
                    pub path: Option<String>,
                    pub shared: bool,
                }

                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct StorageUsage {
                    pub storage: String,
                    pub kind: String,
                    pub content: Vec<String>,
                    pub active: bool,
                    pub total: u64,
                    pub used: u64,
                    pub avail: u64,
                }

                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct Volume {
                    pub volid: String,
                    pub content: String,
                    pub format: String,
                    pub size: u64,
                }

                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct HaResource {
                    pub sid: String,
                    pub state: String,
                    pub comment: Option<String>,
                }

                #[derive(Debug, Clone, PartialEq, Eq)]
                pub struct HaRule {
                    pub rule: String,
                    pub kind: String,
                    pub resources: String,
                    pub nodes: Option<String>,
                    pub strict: bool,
                    pub digest: Option<String>,
                }
            }
        }
    }
}
