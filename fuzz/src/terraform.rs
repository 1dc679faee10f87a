//! The host's terraform module-content check and the `Flavour` it is written for.

pub use config::Flavour;

#[path = "../../host/src/caps/terraform/config.rs"]
mod config;

#[path = "../../host/src/caps/terraform/module_check.rs"]
pub mod module_check;
