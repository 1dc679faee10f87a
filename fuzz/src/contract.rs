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
        }
    }
}
