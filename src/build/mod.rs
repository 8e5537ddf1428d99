//! The batch build job: source → sample → train → assign → group → write → publish.
//! SKELETON (issue 5).

use thiserror::Error;

/// Build errors.
#[derive(Debug, Error)]
pub enum BuildError {
    #[error("{0}")]
    Invalid(String),
}
