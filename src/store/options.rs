//! Store tuning that belongs to the runtime, never to a definition: retries
//! with exponential backoff, request and connect timeouts for the cloud
//! stores, and the explicit opt-in to publish on a store that lacks
//! conditional put.
//!
//! Unset fields keep object_store's defaults (10 retries within 3 min,
//! backoff 100 ms doubling to 15 s, request timeout 30 s, connect timeout
//! 5 s) or what the standard environment sets (`AWS_TIMEOUT`,
//! `AWS_CONNECT_TIMEOUT`, …): options are merged into the environment's
//! configuration, not substituted for it. The CLI exposes every field as a
//! flag with a `PARQIVF_*` environment variable (`docs/cli.md`).

use object_store::{BackoffConfig, RetryConfig};
use std::time::Duration;

/// Runtime options applied when a location is opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// Retries of a failed request (0 disables retries).
    pub max_retries: Option<usize>,
    /// No retry starts later than this after the first attempt.
    pub retry_timeout: Option<Duration>,
    /// First backoff delay; it doubles (with jitter) up to `backoff_max`.
    pub backoff_initial: Option<Duration>,
    /// Longest backoff delay.
    pub backoff_max: Option<Duration>,
    /// Timeout of one whole request (connect, send, receive).
    pub request_timeout: Option<Duration>,
    /// Timeout of the connect phase.
    pub connect_timeout: Option<Duration>,
    /// Publish on a store without conditional put by HEAD-then-PUT. Two
    /// publishers racing between the HEAD and the PUT can overwrite each
    /// other, so this is off unless the user accepts that risk; without it
    /// such a store refuses to publish ([`super::StoreError::NoConditionalPut`]).
    pub unconditional_publish: bool,
}

impl StoreOptions {
    /// The retry policy: object_store's defaults with the set fields replaced.
    pub fn retry_config(&self) -> RetryConfig {
        let mut retry = RetryConfig::default();
        let backoff: &mut BackoffConfig = &mut retry.backoff;
        if let Some(d) = self.backoff_initial {
            backoff.init_backoff = d;
        }
        if let Some(d) = self.backoff_max {
            backoff.max_backoff = d;
        }
        if let Some(n) = self.max_retries {
            retry.max_retries = n;
        }
        if let Some(d) = self.retry_timeout {
            retry.retry_timeout = d;
        }
        retry
    }

    /// Whether any retry field is set (otherwise the builder keeps its own).
    pub fn sets_retry(&self) -> bool {
        self.max_retries.is_some()
            || self.retry_timeout.is_some()
            || self.backoff_initial.is_some()
            || self.backoff_max.is_some()
    }

    /// The set client timeouts as object_store configuration pairs
    /// (`"timeout"`, `"connect_timeout"` with humantime values), ready to be
    /// merged into a builder that already read the environment.
    pub fn client_config(&self) -> Vec<(object_store::ClientConfigKey, String)> {
        use object_store::ClientConfigKey as K;
        [
            (K::Timeout, self.request_timeout),
            (K::ConnectTimeout, self.connect_timeout),
        ]
        .into_iter()
        .filter_map(|(k, d)| d.map(|d| (k, humantime::format_duration(d).to_string())))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_fields_keep_object_store_defaults() {
        let defaults = RetryConfig::default();
        let got = StoreOptions::default().retry_config();
        assert_eq!(got.max_retries, defaults.max_retries);
        assert_eq!(got.retry_timeout, defaults.retry_timeout);
        assert!(!StoreOptions::default().sets_retry());
        assert!(StoreOptions::default().client_config().is_empty());
    }

    #[test]
    fn set_fields_replace_the_defaults() {
        let o = StoreOptions {
            max_retries: Some(2),
            retry_timeout: Some(Duration::from_secs(7)),
            backoff_initial: Some(Duration::from_millis(20)),
            backoff_max: Some(Duration::from_secs(1)),
            request_timeout: Some(Duration::from_millis(1500)),
            connect_timeout: Some(Duration::from_secs(2)),
            unconditional_publish: false,
        };
        let r = o.retry_config();
        assert_eq!(r.max_retries, 2);
        assert_eq!(r.retry_timeout, Duration::from_secs(7));
        assert_eq!(r.backoff.init_backoff, Duration::from_millis(20));
        assert_eq!(r.backoff.max_backoff, Duration::from_secs(1));
        let cfg = o.client_config();
        assert_eq!(cfg.len(), 2);
        assert_eq!(cfg[0].1, "1s 500ms");
        assert_eq!(cfg[1].1, "2s");
    }
}
