//! The one error type for a bad setting: which field, and what is wrong.
//!
//! Every configuration keyhole reads (the filter's JSON, the alias taxonomy,
//! control's TOML file) reports problems as a [`FieldError`], so every tool
//! prints them the same way (`timeout_ms: must be between 1 and 60000, got 0`).

/// A problem with one field of a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Path of the field (`timeout_ms`, `kinds[3].prefix`, `embedder.url`),
    /// or `<root>` / `<file>` for the whole document.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    /// The error for `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}
