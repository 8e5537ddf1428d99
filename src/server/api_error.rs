//! The one error shape every endpoint returns:
//! `{"error": {"code": "...", "message": "..."}}` with a status that says
//! whose fault it is — 4xx for the client's input, 429 for backpressure,
//! 503 for a storage fault, 500 for a corrupt index or a server bug. Every
//! error response is logged here, once, with its code.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::backend::BackendError;

/// An HTTP error with a stable machine-readable `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    /// A 400 with the given code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code,
            message: message.into(),
        }
    }

    /// The named index is not served here.
    pub fn unknown_index(name: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            code: "unknown_index",
            message: format!("no index named {name:?} is served here"),
        }
    }

    /// The bounded query queue is full.
    pub fn overloaded(queue: usize) -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "overloaded",
            message: format!("the query queue ({queue} slots) is full; retry later"),
        }
    }

    /// A server-side failure that is not the client's fault.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: message.into(),
        }
    }
}

impl From<BackendError> for ApiError {
    fn from(err: BackendError) -> Self {
        let (status, code) = match &err {
            BackendError::BadRequest { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            BackendError::Storage { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable")
            }
            BackendError::Corrupt { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "corrupt_index"),
        };
        Self {
            status,
            code,
            message: err.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = self.status.as_u16(), code = self.code, message = %self.message, "request failed");
        } else {
            tracing::info!(status = self.status.as_u16(), code = self.code, message = %self.message, "request rejected");
        }
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::SERVICE_UNAVAILABLE
        {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
