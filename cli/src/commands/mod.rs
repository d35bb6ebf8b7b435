//! One module per command group.

use crate::output::say;
pub mod api;
pub mod cluster;
pub mod credentials;
pub mod workflow;

/// Prints a value as pretty JSON (for `--json`).
pub fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => say!("{text}"),
        Err(err) => eprintln!("error: could not encode the answer as JSON: {err}"),
    }
}

/// The elements of a JSON array, or none.
pub fn items(value: &serde_json::Value) -> &[serde_json::Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}
