//! Store tuning that belongs to the runtime, never to a definition: retries
//! with exponential backoff, request and connect timeouts for the cloud
//! stores, the explicit opt-in to publish on a store that lacks
//! conditional put, and an emulated latency for tests and benches
//! ([`super::latency`]).
//!
//! Unset fields keep object_store's defaults (10 retries within 3 min,
//! backoff 100 ms doubling to 15 s, request timeout 30 s, connect timeout
//! 5 s) or what the standard environment sets (`AWS_TIMEOUT`,
//! `AWS_CONNECT_TIMEOUT`, …): options are merged into the environment's
//! configuration, not substituted for it. The CLI exposes every field as a
//! flag with a `PARQIVF_*` environment variable (`docs/cli.md`).
//!
//! The library and Python take the same settings as a map
//! ([`StoreOptions::from_map`], Python's `storage_options`, the convention of
//! deltalake and lance): the `PARQIVF_*` names set the fields above, and the
//! cloud stores' own names (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT`, …, as
//! object_store reads them from the environment) are passed to the store's
//! builder after the environment, so a map entry wins over a variable.

use object_store::{BackoffConfig, RetryConfig};
use std::time::Duration;
use thiserror::Error;

/// A storage option that is not understood. Values are never shown: they
/// may be credentials.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum OptionsError {
    #[error(
        "unknown storage option {key:?}: expected a PARQIVF_* store setting ({parqivf}) or an \
         object store key (AWS_*, GOOGLE_*, AZURE_*)",
        parqivf = PARQIVF_KEYS.join(", ")
    )]
    UnknownKey { key: String },
    #[error("storage option {key}: {reason}")]
    BadValue { key: String, reason: String },
}

/// The `PARQIVF_*` store settings, as the CLI's environment variables name them.
pub const PARQIVF_KEYS: [&str; 10] = [
    "PARQIVF_MAX_RETRIES",
    "PARQIVF_RETRY_TIMEOUT",
    "PARQIVF_BACKOFF_INITIAL",
    "PARQIVF_BACKOFF_MAX",
    "PARQIVF_REQUEST_TIMEOUT",
    "PARQIVF_CONNECT_TIMEOUT",
    "PARQIVF_ALLOW_UNCONDITIONAL_PUBLISH",
    "PARQIVF_STORE_LATENCY",
    "PARQIVF_MAX_IN_FLIGHT",
    "PARQIVF_HEDGE_AFTER",
];

/// Runtime options applied when a location is opened.
#[derive(Clone, Default, PartialEq)]
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
    /// Every request waits as drawn from this before its answer
    /// ([`super::latency::LatencyStore`]): S3's latency in front of a local
    /// or memory store, for tests and benches.
    pub latency: Option<super::latency::Latency>,
    /// Requests in flight at once to a remote store (S3, or one with
    /// `latency`); default [`super::hedge::DEFAULT_MAX_IN_FLIGHT`].
    pub max_in_flight: Option<usize>,
    /// When a remote store's slow get is sent a second time
    /// ([`super::hedge::HedgedStore`]); default `auto` (the observed p95).
    pub hedge_after: Option<super::hedge::HedgeAfter>,
    /// Object store keys and values (lower case, e.g. `aws_endpoint`)
    /// applied after the environment's. Shown redacted by `Debug`.
    pub config: Vec<(String, String)>,
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("max_retries", &self.max_retries)
            .field("retry_timeout", &self.retry_timeout)
            .field("backoff_initial", &self.backoff_initial)
            .field("backoff_max", &self.backoff_max)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("unconditional_publish", &self.unconditional_publish)
            .field("latency", &self.latency)
            .field("max_in_flight", &self.max_in_flight)
            .field("hedge_after", &self.hedge_after)
            .field(
                "config",
                &self
                    .config
                    .iter()
                    .map(|(k, _)| format!("{k}=<redacted>"))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl StoreOptions {
    /// Options from `KEY → value` pairs, keys case-insensitive: the
    /// `PARQIVF_*` settings ([`PARQIVF_KEYS`]; durations in humantime,
    /// booleans `true/false/1/0`), and the object store keys (`AWS_*`,
    /// `GOOGLE_*`, `AZURE_*`), each checked against the store's known keys.
    ///
    /// # Errors
    /// [`OptionsError::UnknownKey`] for any other key, [`OptionsError::BadValue`]
    /// for a setting that does not parse (the value is not shown).
    pub fn from_map<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<StoreOptions, OptionsError> {
        let mut o = StoreOptions::default();
        for (key, value) in pairs {
            let (key, value) = (key.as_ref().to_ascii_uppercase(), value.as_ref());
            let bad = |reason: String| OptionsError::BadValue {
                key: key.clone(),
                reason,
            };
            let duration = || {
                humantime::parse_duration(value)
                    .map(Some)
                    .map_err(|e| bad(format!("not a duration (e.g. 500ms, 30s): {e}")))
            };
            match key.as_str() {
                "PARQIVF_MAX_RETRIES" => {
                    o.max_retries = Some(
                        value
                            .parse()
                            .map_err(|_| bad("not a non-negative integer".into()))?,
                    );
                }
                "PARQIVF_RETRY_TIMEOUT" => o.retry_timeout = duration()?,
                "PARQIVF_BACKOFF_INITIAL" => o.backoff_initial = duration()?,
                "PARQIVF_BACKOFF_MAX" => o.backoff_max = duration()?,
                "PARQIVF_REQUEST_TIMEOUT" => o.request_timeout = duration()?,
                "PARQIVF_CONNECT_TIMEOUT" => o.connect_timeout = duration()?,
                "PARQIVF_ALLOW_UNCONDITIONAL_PUBLISH" => {
                    o.unconditional_publish = match value.to_ascii_lowercase().as_str() {
                        "true" | "1" | "yes" => true,
                        "false" | "0" | "no" => false,
                        _ => return Err(bad("not a boolean (true or false)".into())),
                    };
                }
                "PARQIVF_STORE_LATENCY" => {
                    o.latency = Some(value.parse().map_err(|e| bad(format!("{e}")))?);
                }
                "PARQIVF_MAX_IN_FLIGHT" => {
                    o.max_in_flight = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|&n: &usize| n > 0)
                            .ok_or_else(|| bad("not a positive integer".into()))?,
                    );
                }
                "PARQIVF_HEDGE_AFTER" => {
                    o.hedge_after = Some(value.parse().map_err(|e| bad(format!("{e}")))?);
                }
                _ if is_store_key(&key) => {
                    o.config.push((key.to_ascii_lowercase(), value.to_string()));
                }
                _ => return Err(OptionsError::UnknownKey { key }),
            }
        }
        Ok(o)
    }

    /// The [`Self::config`] entries that `parse` accepts (one store's keys).
    pub fn config_for<K>(&self, parse: impl Fn(&str) -> Option<K>) -> Vec<(K, String)> {
        self.config
            .iter()
            .filter_map(|(k, v)| parse(k).map(|k| (k, v.clone())))
            .collect()
    }

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

/// Whether `key` (upper case) is a key of an object store this build has.
fn is_store_key(key: &str) -> bool {
    use std::str::FromStr;
    let lower = key.to_ascii_lowercase();
    if key.starts_with("AWS_") {
        return object_store::aws::AmazonS3ConfigKey::from_str(&lower).is_ok();
    }
    #[cfg(feature = "gcp")]
    if key.starts_with("GOOGLE_") {
        return object_store::gcp::GoogleConfigKey::from_str(&lower).is_ok();
    }
    #[cfg(feature = "azure")]
    if key.starts_with("AZURE_") {
        return object_store::azure::AzureConfigKey::from_str(&lower).is_ok();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_sets_fields_and_store_keys_and_debug_hides_values() {
        let o = StoreOptions::from_map([
            ("parqivf_max_retries", "3"),
            ("PARQIVF_REQUEST_TIMEOUT", "1500ms"),
            ("PARQIVF_ALLOW_UNCONDITIONAL_PUBLISH", "true"),
            ("AWS_SECRET_ACCESS_KEY", "hunter2"),
            ("aws_endpoint", "http://127.0.0.1:9"),
        ])
        .unwrap();
        assert_eq!(o.max_retries, Some(3));
        assert_eq!(o.request_timeout, Some(Duration::from_millis(1500)));
        assert!(o.unconditional_publish);
        assert_eq!(
            o.config,
            vec![
                ("aws_secret_access_key".to_string(), "hunter2".to_string()),
                ("aws_endpoint".to_string(), "http://127.0.0.1:9".to_string()),
            ]
        );
        let debug = format!("{o:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(
            debug.contains("aws_secret_access_key=<redacted>"),
            "{debug}"
        );
    }

    #[test]
    fn a_map_rejects_unknown_keys_and_bad_values_without_showing_them() {
        let e = StoreOptions::from_map([("AWS_NOT_A_KEY", "x")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown storage option \"AWS_NOT_A_KEY\""),
            "{e}"
        );
        assert!(matches!(
            StoreOptions::from_map([("region", "x")]),
            Err(OptionsError::UnknownKey { .. })
        ));
        let e = StoreOptions::from_map([("PARQIVF_RETRY_TIMEOUT", "s3cr3t")]).unwrap_err();
        assert!(e.to_string().contains("PARQIVF_RETRY_TIMEOUT"), "{e}");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        assert!(StoreOptions::from_map([("PARQIVF_MAX_RETRIES", "-1")]).is_err());
    }

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
            latency: None,
            max_in_flight: None,
            hedge_after: None,
            config: Vec::new(),
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
