//! The query API: `Index::open` and `Index::search`.
//! SKELETON: owned by the probe helper (issue 4). The signatures below are the
//! contract the CLI, the HTTP server and the quick start call.
//!
//! ```text
//! Index::open(store: Arc<dyn ObjectStore>, location: &Path) -> Result<Index>   (async)
//! Index::search(&self, query: &[f32], params: &SearchParams) -> Result<SearchResult>   (async)
//! Index::search_batch(&self, queries: &[f32], params: &SearchParams) -> Result<Vec<SearchResult>>   (async)
//! SearchParams { k, nprobe, include_payload, .. } : Default
//! SearchResult { hits: Vec<Hit>, stats: SearchStats }
//! Hit { rowid: i64, distance: f32, payload: Option<serde_json::Map<..>> }
//! ```
