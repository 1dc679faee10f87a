//! The `terraform` capability: its WIT interface, grants and scope checks
//! ([`scope`]) are complete, its provider is not built yet. The adapter
//! (`host.rs`) checks every call like any other and then fails it with
//! `failed`, saying the provider is missing; it never returns a made-up result.

mod host;
pub mod scope;
