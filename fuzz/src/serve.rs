//! `cradle serve`'s NetBox webhook parsers.

#[path = "../../host/src/serve/event.rs"]
pub mod event;

#[path = "../../host/src/serve/signature.rs"]
pub mod signature;
