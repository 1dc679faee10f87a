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

/// The optional `maintenance` export (wit/maintenance.wit), generated apart
/// from the `backend` world so that only a plugin that calls
/// [`export_maintenance!`](crate::export_maintenance) exports it: the world
/// below exports `maintenance` alone, over the records of [`cradle::host::types`]
/// (the same Rust types as the lifecycle's), and its export macro embeds the
/// component type that requires the export only in that plugin. A plugin
/// exporting both is a component of world `maintainer` (wit/backend.wit).
pub mod maintenance {
    wit_bindgen::generate!({
        path: "wit",
        inline: "package cradle:kit;\nworld maintenance-export { export cradle:host/maintenance@0.1.0; }\n",
        world: "cradle:kit/maintenance-export",
        with: { "cradle:host/types@0.1.0": crate::bindings::cradle::host::types },
        pub_export_macro: true,
        export_macro_name: "export_maintenance",
        default_bindings_module: "cradle_guest::bindings::maintenance",
    });
}
