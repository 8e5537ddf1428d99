//! Bearer-token authentication.
//!
//! With a token configured (`--auth-token-file` or `PARQIVF_AUTH_TOKEN`),
//! every endpoint but `/healthz` needs `Authorization: Bearer <token>`; a
//! missing or wrong token is a 401 with `WWW-Authenticate: Bearer`. Without a
//! token the server only starts on a loopback address (see `Server::bind`),
//! answers queries, and refuses `reload` with a 403 that says how to enable
//! it. Handlers learn whether the request carried the token from the
//! [`Authenticated`] extension (the index listing shows locations only then).
//!
//! Tokens are compared in constant time: both sides are hashed with SHA-256
//! and the digests compared with `subtle`, so neither the token's content nor
//! its length leaks through timing.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

use super::api_error::ApiError;

/// Shortest accepted token, in bytes.
pub const MIN_TOKEN_BYTES: usize = 16;
/// Longest accepted token, in bytes.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// Why a configured token is unusable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuthTokenError {
    #[error(
        "the auth token has {len} bytes; use at least {MIN_TOKEN_BYTES} (e.g. `openssl rand -hex 32`)"
    )]
    TooShort { len: usize },
    #[error("the auth token has {len} bytes; the limit is {MAX_TOKEN_BYTES}")]
    TooLong { len: usize },
    #[error(
        "the auth token has a space, control or non-ASCII character at byte {position}; use printable ASCII only"
    )]
    BadCharacter { position: usize },
}

/// The secret clients must present. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthToken(<redacted>)")
    }
}

impl AuthToken {
    /// Checks `token` (16 to 4096 printable ASCII bytes, no spaces).
    ///
    /// # Errors
    /// [`AuthTokenError`] naming the problem.
    pub fn new(token: &str) -> Result<Self, AuthTokenError> {
        let len = token.len();
        if len < MIN_TOKEN_BYTES {
            return Err(AuthTokenError::TooShort { len });
        }
        if len > MAX_TOKEN_BYTES {
            return Err(AuthTokenError::TooLong { len });
        }
        if let Some(position) = token.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(AuthTokenError::BadCharacter { position });
        }
        Ok(Self {
            digest: Sha256::digest(token.as_bytes()).into(),
        })
    }

    /// Whether `presented` is this token, in time independent of both.
    pub fn matches(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.digest.ct_eq(&digest).into()
    }
}

/// Request extension: whether the request carried the configured token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authenticated(pub bool);

/// The credentials of an `Authorization: Bearer <token>` header, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_matches(' '))
}

/// Middleware of the query and listing routes: with a token configured,
/// the request must carry it (401 otherwise); without one, every request
/// passes unauthenticated. Handlers see the outcome as [`Authenticated`].
pub(super) async fn require(
    State(token): State<Option<AuthToken>>,
    mut request: Request,
    next: Next,
) -> Response {
    let authenticated = match &token {
        None => false,
        Some(token) => match bearer(request.headers()) {
            Some(presented) if token.matches(presented) => true,
            Some(_) => return ApiError::unauthorized(true).into_response(),
            None => return ApiError::unauthorized(false).into_response(),
        },
    };
    request
        .extensions_mut()
        .insert(Authenticated(authenticated));
    next.run(request).await
}

/// Middleware of the administrative routes (`reload`): disabled (403,
/// saying how to enable it) without a configured token, else [`require`].
pub(super) async fn require_token(
    State(token): State<Option<AuthToken>>,
    request: Request,
    next: Next,
) -> Response {
    if token.is_none() {
        return ApiError::reload_disabled().into_response();
    }
    require(State(token), request, next).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn tokens_are_checked_and_compared_whole() {
        assert_eq!(
            AuthToken::new("short"),
            Err(AuthTokenError::TooShort { len: 5 })
        );
        assert_eq!(
            AuthToken::new("0123456789abcdef 01"),
            Err(AuthTokenError::BadCharacter { position: 16 })
        );
        assert!(matches!(
            AuthToken::new(&"x".repeat(MAX_TOKEN_BYTES + 1)),
            Err(AuthTokenError::TooLong { .. })
        ));
        let token = AuthToken::new("0123456789abcdef").unwrap();
        assert!(token.matches("0123456789abcdef"));
        assert!(!token.matches("0123456789abcdeF"));
        assert!(!token.matches("0123456789abcdef0"));
        assert!(!token.matches(""));
        assert_eq!(format!("{token:?}"), "AuthToken(<redacted>)");
    }

    #[test]
    fn only_bearer_credentials_are_read() {
        let with = |value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            h
        };
        assert_eq!(bearer(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&with("bearer  abc")), Some("abc"));
        assert_eq!(bearer(&with("Basic abc")), None);
        assert_eq!(bearer(&with("Bearer")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
