//! The state every handler shares ([`AppState`]): the registry of served
//! indexes, the limits, the query pool, the metrics, the recall sampler and
//! the auth token.

use std::time::Duration;

use super::auth::AuthToken;
use super::limits::{ConnectionLimits, Limits, QueryPool};
use super::metrics::Metrics;
use super::reload::Registry;

/// State shared by every handler.
pub(super) struct AppState {
    pub(super) registry: Registry,
    pub(super) limits: Limits,
    pub(super) connections: ConnectionLimits,
    pub(super) pool: QueryPool,
    pub(super) metrics: std::sync::Arc<Metrics>,
    /// `--recall-sample`: re-runs a share of queries exhaustively.
    pub(super) recall: Option<super::recall_sample::RecallSampler>,
    pub(super) auth: Option<AuthToken>,
    pub(super) reload_min_interval: Duration,
}
