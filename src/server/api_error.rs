//! The one error shape every endpoint returns:
//! `{"error": {"code": "...", "message": "...", "request_id": "..."}}` with a
//! status that says whose fault it is — 4xx for the client's input or
//! credentials, 429 for backpressure, 503 for a storage fault, 500 for a
//! corrupt index or a server bug.
//!
//! A message never shows a store location, a local path or an internal
//! endpoint: such facts go in `detail`, which only the log sees. The
//! `finish` middleware logs every error response here, once, with its
//! request id (the `x-request-id` header, also returned to the client), and
//! gives the framework's own 413 (a declared `Content-Length` over the limit,
//! refused before the body is read) the same JSON shape.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::backend::BackendError;
use super::reload::ReloadError;

/// The request-id header set on every request and response.
pub const REQUEST_ID: &str = "x-request-id";

/// An HTTP error with a stable machine-readable `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    /// What the client is told.
    pub message: String,
    /// What only the log is told (locations, paths, causes).
    pub detail: Option<String>,
    /// `Retry-After` seconds (default 1 for 429 and 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error shown to the client as is.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            detail: None,
            retry_after: None,
        }
    }

    /// A 400 with the given code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// The named index is not served here.
    pub fn unknown_index(name: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_index",
            format!("no index named {name:?} is served here"),
        )
    }

    /// The bounded query queue is full.
    pub fn overloaded(queue: usize) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "overloaded",
            format!("the query queue ({queue} slots) is full; retry later"),
        )
    }

    /// A server-side failure that is not the client's fault; `detail` is logged only.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self {
            detail: Some(detail.into()),
            ..Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal server error; the server log has the details",
            )
        }
    }

    /// A body over `limit` bytes (declared or read).
    pub fn body_too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", message)
    }

    /// The body did not arrive within the body read timeout.
    pub fn body_timeout(timeout: Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the request body did not arrive within {} ms",
                timeout.as_millis()
            ),
        )
    }

    /// No (`wrong = false`) or a wrong (`wrong = true`) bearer token.
    pub fn unauthorized(wrong: bool) -> Self {
        if wrong {
            Self::new(
                StatusCode::UNAUTHORIZED,
                "invalid_token",
                "the bearer token is not the one this server was started with",
            )
        } else {
            Self::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this server requires \"Authorization: Bearer <token>\"",
            )
        }
    }

    /// Reload asked of a server started without a token.
    pub fn reload_disabled() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "reload_disabled",
            "reload, delete, upsert and warm need a bearer token: start the server with \
             --auth-token-file PATH (or PARQIVF_AUTH_TOKEN) and send \"Authorization: Bearer <token>\"",
        )
    }

    fn render(&self, request_id: Option<&str>) -> Response {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(id) = request_id {
            error["request_id"] = json!(id);
        }
        let mut response = (self.status, axum::Json(json!({ "error": error }))).into_response();
        let headers = response.headers_mut();
        let retry = self.retry_after.or_else(|| {
            (self.status == StatusCode::TOO_MANY_REQUESTS
                || self.status == StatusCode::SERVICE_UNAVAILABLE)
                .then_some(1)
        });
        if let Some(seconds) = retry {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            let challenge = if self.code == "invalid_token" {
                "Bearer realm=\"parqivf\", error=\"invalid_token\""
            } else {
                "Bearer realm=\"parqivf\""
            };
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still be on its way: do not reuse the connection.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }

    fn log(&self, request_id: &str) {
        let detail = self.detail.as_deref().unwrap_or("");
        if self.status.is_server_error() {
            tracing::error!(status = self.status.as_u16(), code = self.code, message = %self.message, detail, request_id, "request failed");
        } else {
            tracing::info!(status = self.status.as_u16(), code = self.code, message = %self.message, detail, request_id, "request rejected");
        }
    }
}

impl From<BackendError> for ApiError {
    fn from(err: BackendError) -> Self {
        let detail = Some(err.to_string());
        match err {
            BackendError::BadRequest { code, message } => Self::bad_request(code, message),
            BackendError::InvalidFilter { message } => Self::bad_request("invalid_filter", message),
            BackendError::Storage { .. } => Self {
                detail,
                ..Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_unavailable",
                    "the index storage failed; retry later (the server log has the cause)",
                )
            },
            BackendError::Corrupt { .. } => Self {
                detail,
                ..Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "corrupt_index",
                    "the stored index is inconsistent (the server log names the object)",
                )
            },
            BackendError::Conflict { message, .. } => {
                Self::new(StatusCode::CONFLICT, "conflict", message)
            }
        }
    }
}

impl From<ReloadError> for ApiError {
    fn from(err: ReloadError) -> Self {
        let retry_after = err.retry_after();
        match err {
            ReloadError::Open(backend) => backend.into(),
            limited @ ReloadError::RateLimited { .. } => Self {
                retry_after: retry_after.map(|d| d.as_secs_f64().ceil().max(1.0) as u64),
                ..Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "reload_rate_limited",
                    limited.to_string(),
                )
            },
        }
    }
}

impl IntoResponse for ApiError {
    /// The JSON response without a request id; `finish` replaces it by one
    /// with the id and logs the error (the error rides along as an extension).
    fn into_response(self) -> Response {
        let mut response = self.render(None);
        response.extensions_mut().insert(self);
        response
    }
}

/// Middleware: logs every error response once with its request id and
/// renders it with the id; turns the bare 413 of the body-limit layer into a
/// `body_too_large` error.
pub(super) async fn finish(
    State(max_body_bytes): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    let request_id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut response = next.run(request).await;
    let error = match response.extensions_mut().remove::<ApiError>() {
        Some(error) => error,
        None if response.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::body_too_large(match declared {
                Some(n) => format!(
                    "the request body declares {n} bytes; the limit is {} (--max-body-bytes)",
                    max_body_bytes
                ),
                None => format!(
                    "the request body exceeds the limit of {} bytes (--max-body-bytes)",
                    max_body_bytes
                ),
            })
        }
        None => return response,
    };
    error.log(&request_id);
    let mut rendered = error.render(Some(&request_id));
    if let Some(close) = response.headers().get(header::CONNECTION) {
        rendered
            .headers_mut()
            .insert(header::CONNECTION, close.clone());
    }
    rendered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_and_corrupt_errors_keep_locations_out_of_the_message() {
        let storage: ApiError = BackendError::Storage {
            location: "s3://secret-bucket/idx".into(),
            message: "connect to 10.0.0.7:9000 refused".into(),
        }
        .into();
        assert_eq!(
            (storage.status, storage.code),
            (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable")
        );
        assert!(
            !storage.message.contains("secret-bucket") && !storage.message.contains("10.0.0.7")
        );
        assert!(
            storage
                .detail
                .as_deref()
                .unwrap()
                .contains("s3://secret-bucket/idx")
        );
        let corrupt: ApiError = BackendError::Corrupt {
            location: "/home/me/idx/part-0.parquet".into(),
            message: "cid 9".into(),
        }
        .into();
        assert!(!corrupt.message.contains("/home/me"));
        assert!(corrupt.detail.unwrap().contains("part-0.parquet"));
        let internal = ApiError::internal("task panicked at src/x.rs:1");
        assert!(!internal.message.contains("src/x.rs"));
    }

    #[test]
    fn rate_limited_reload_is_a_429_with_retry_after() {
        let err: ApiError = ReloadError::RateLimited {
            name: "a".into(),
            since_ms: 100,
            interval_ms: 2500,
        }
        .into();
        assert_eq!(
            (err.status, err.code, err.retry_after),
            (
                StatusCode::TOO_MANY_REQUESTS,
                "reload_rate_limited",
                Some(3)
            )
        );
        let response = err.render(Some("id-1"));
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
        let unauthorized = ApiError::unauthorized(false).render(None);
        assert_eq!(
            unauthorized.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"parqivf\""
        );
    }
}
