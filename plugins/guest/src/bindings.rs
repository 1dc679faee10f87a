//! The generated bindings of `cradle:host` (wit/, the `backend` world), made
//! once for every plugin that uses the kit.
//!
//! A plugin that calls only `log` imports only `log`: wit-component keeps the
//! imports the plugin's code uses, so the kit's world naming every capability
//! does not widen what a plugin asks for (the host still compares the imports
//! with the manifest's `needs`).
//!
//! The lifecycle export is wired by [`export_backend!`](crate::export_backend),
//! which this module generates for the plugin crate to call.

#![allow(missing_docs, reason = "generated code; the WIT carries the docs")]

wit_bindgen::generate!({
    path: "wit",
    world: "cradle:host/backend",
    pub_export_macro: true,
    export_macro_name: "export_backend",
    default_bindings_module: "cradle_guest::bindings",
    generate_all,
});
