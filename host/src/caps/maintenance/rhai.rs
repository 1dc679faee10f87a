//! The `maintenance` script module (skeleton).

use rhai::Module;

/// The module.
pub fn module() -> Module {
    Module::new()
}
