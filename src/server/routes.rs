//! The endpoints (documented in `docs/http.md`, described in
//! `manifests/openapi.json`) and the validation of search requests. Bodies
//! are read as bytes and parsed here, so that every rejection — malformed
//! JSON, an oversized body, a bad field — gets the JSON error shape of
//! [`ApiError`] instead of the framework's plain-text one. A search body must
//! arrive whole within the body read timeout (else 408), and may only be sent
//! as JSON: a content type other than `application/json` (what a browser sends
//! cross-origin without a preflight: `text/plain`, forms) is a 415.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, FromRequest, MatchedPath, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::api_error::ApiError;
use super::auth::Authenticated;
use super::backend::{Change, IndexInfo};
use super::body_vector::BodyVector;
use super::limits::Limits;
use super::reload::ReloadError;
use super::state::AppState;
use crate::index::{QueryError, SearchParams};
use crate::probe::offload::on_rayon_above;

/// Route templates (also the `route` label of the request metrics).
pub const HEALTHZ: &str = "/healthz";
pub const METRICS: &str = "/metrics";
pub const INDEXES: &str = "/v1/indexes";
pub const INDEX: &str = "/v1/indexes/{name}";
pub const SEARCH: &str = "/v1/indexes/{name}/search";
pub const RELOAD: &str = "/v1/indexes/{name}/reload";
pub const DELETE: &str = "/v1/indexes/{name}/delete";
pub const UPSERT: &str = "/v1/indexes/{name}/upsert";
pub const WARM: &str = "/v1/indexes/{name}/warm";
/// Largest re-rank factor a request may ask for (k × rerank candidates are
/// kept per query).
pub const MAX_RERANK: u64 = 1000;

/// `POST /v1/indexes/{name}/search` body. Every field of [`SearchParams`] is
/// settable under its own name; `"include": ["payload"]` is the same as
/// `"include_payload": true`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    /// One query vector: numbers, or packed ([`BodyVector`]).
    pub vector: Option<BodyVector>,
    /// A batch of query vectors, each as `vector`.
    pub vectors: Option<Vec<BodyVector>>,
    pub k: Option<u64>,
    pub nprobe: Option<u64>,
    pub root_factor: Option<u64>,
    /// Re-rank factor of an index with codes (0: the codes' estimates;
    /// absent: the index's own, [`SearchParams::rerank`]).
    pub rerank: Option<u64>,
    pub include_payload: Option<bool>,
    #[serde(default)]
    pub include: Vec<Include>,
    /// A SQL `WHERE` expression over the payload columns.
    pub filter: Option<String>,
    /// With a filter: the most lists probed looking for `k` matches.
    pub max_nprobe: Option<u64>,
    /// Probe for this recall instead of `nprobe` (in `(0, 1]`; the index
    /// needs its build calibration).
    #[serde(default)]
    pub target_recall: Option<f64>,
}

/// Optional parts of each answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Include {
    Payload,
    Stats,
}

/// A search request checked against the index and the limits.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidSearch {
    /// Query vectors, row-major, `dim` floats each.
    pub queries: Vec<f32>,
    pub count: usize,
    pub params: SearchParams,
    pub include_stats: bool,
}

/// Checks a parsed search body against the server's limits and shapes it
/// into a batch; the index checks the rest when it plans the query
/// ([`crate::probe::query::QueryPlan::new`]: `non_finite_value` for NaN,
/// infinity or a number beyond the f32 range, `k_zero`,
/// `nprobe_out_of_range`, `root_factor_out_of_range`,
/// `max_nprobe_out_of_range`, `zero_vector`, and the filter's syntax,
/// columns and types as `invalid_filter`), answered as 400s with those codes.
///
/// # Errors
/// A 400 [`ApiError`] naming the problem: `invalid_request` (neither or both
/// of `vector`/`vectors`), `empty_batch`, `too_many_vectors`,
/// `wrong_dimension`, `k_too_large`, `rerank_out_of_range`,
/// `invalid_filter` (too long).
pub fn validate(
    body: SearchBody,
    info: &IndexInfo,
    limits: &Limits,
) -> Result<ValidSearch, ApiError> {
    let vectors = match (body.vector, body.vectors) {
        (Some(v), None) => vec![v],
        (None, Some(vs)) => vs,
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "give either \"vector\" or \"vectors\", not both",
            ));
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "missing \"vector\" or \"vectors\"",
            ));
        }
    };
    if vectors.is_empty() {
        return Err(ApiError::bad_request(
            "empty_batch",
            "\"vectors\" holds no vector",
        ));
    }
    if vectors.len() > limits.max_batch {
        return Err(ApiError::bad_request(
            "too_many_vectors",
            format!(
                "{} vectors in one request; the limit is {}",
                vectors.len(),
                limits.max_batch
            ),
        ));
    }
    let k = body.k.unwrap_or(limits.default_k as u64);
    if k > limits.max_k as u64 {
        return Err(ApiError::bad_request(
            "k_too_large",
            format!("k = {k} exceeds the limit {}", limits.max_k),
        ));
    }
    // A request that names neither takes the server's default, if any.
    let (nprobe, target_recall) = match (body.nprobe, body.target_recall) {
        (None, None) => (
            limits.default_nprobe.map(|n| n.min(info.nlist) as u64),
            limits.default_target_recall,
        ),
        named => named,
    };
    let root_factor = body.root_factor.unwrap_or(0);
    if let Some(rerank) = body.rerank
        && rerank > MAX_RERANK
    {
        return Err(ApiError::bad_request(
            "rerank_out_of_range",
            format!("rerank = {rerank} is outside 0..={MAX_RERANK}"),
        ));
    }
    if let Some(filter) = &body.filter
        && filter.len() > crate::filter::MAX_FILTER_BYTES
    {
        return Err(ApiError::bad_request(
            "invalid_filter",
            format!(
                "the filter has {} bytes; the limit is {}",
                filter.len(),
                crate::filter::MAX_FILTER_BYTES
            ),
        ));
    }
    // The index checks every value (finite, and a direction under cosine)
    // and parameter; the lengths are checked here, as a flat batch no
    // longer shows where one vector ends.
    let mut queries = Vec::with_capacity(vectors.len() * info.dim);
    for (query, BodyVector(vector)) in vectors.iter().enumerate() {
        if vector.len() != info.dim {
            let e = QueryError::DimensionMismatch {
                query,
                expected: info.dim,
                actual: vector.len(),
            };
            return Err(ApiError::bad_request(e.code(), e.to_string()));
        }
        queries.extend_from_slice(vector);
    }
    Ok(ValidSearch {
        queries,
        count: vectors.len(),
        params: SearchParams {
            // k and rerank are bounded by the limits above; the others are
            // the index's to check (a u64 beyond usize is out of range too).
            k: k as usize,
            nprobe: nprobe.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            root_factor: usize::try_from(root_factor).unwrap_or(usize::MAX),
            include_payload: body.include_payload.unwrap_or(false)
                || body.include.contains(&Include::Payload),
            rerank: body.rerank.map(|r| r as usize),
            filter: body.filter,
            max_nprobe: body
                .max_nprobe
                .map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
            target_recall,
        },
        include_stats: body.include.contains(&Include::Stats),
    })
}

/// Maps a body-reading failure (oversized, broken stream) to the JSON error shape.
fn body_rejection(rejection: BytesRejection) -> ApiError {
    let status = rejection.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::body_too_large(rejection.body_text())
    } else {
        ApiError::new(status, "unreadable_body", rejection.body_text())
    }
}

/// Refuses a body declared as anything but JSON (a missing type is accepted).
fn check_content_type(request: &Request) -> Result<(), ApiError> {
    let Some(value) = request.headers().get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let essence = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
    {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("the body must be sent as application/json, not {essence:?}"),
        ))
    }
}

/// Reads the whole body within the body read timeout.
async fn read_body(app: &AppState, request: Request) -> Result<Bytes, ApiError> {
    let timeout = app.connections.body_read_timeout;
    match tokio::time::timeout(timeout, Bytes::from_request(request, &())).await {
        Ok(body) => body.map_err(body_rejection),
        Err(_) => Err(ApiError::body_timeout(timeout)),
    }
}

/// The most bytes of JSON a request's body or its answer may hold and
/// still be parsed or written where it is awaited, on a tokio worker:
/// serde_json takes about 2 µs a KiB of numbers (a batch of 1,000 384-d
/// queries, 4.6 MB, took 9–10 ms), so 16 KiB (a 384-d query in numbers is
/// about 5) is some 35 µs, what the hand-over to rayon and back costs on a
/// small virtual machine. Larger bodies and answers are parsed and written
/// on rayon, as the rule for CPU work asks: that batch held its tokio
/// worker, and every connection on it, for 19 ms.
pub const JSON_IN_PLACE_BYTES: usize = 16 << 10;

/// About the bytes of a hit in a search's JSON answer
/// (`{"rowid":…,"distance":…}`), to size an answer before writing it.
const HIT_JSON_BYTES: usize = 40;

/// About the bytes of a number in JSON (a distance, a payload's number:
/// up to 24 for an `f64` in full), to size an answer before writing it.
const NUMBER_JSON_BYTES: usize = 20;

/// About the bytes of a search's JSON answer, to choose where to write it
/// without writing it: each answer's stats when asked for, then
/// [`HIT_JSON_BYTES`] a hit and its payload's keys and values (their
/// lengths walked, nothing formatted). The count of hits stops once it is
/// past `above`, so that sizing a large answer on a tokio worker costs no
/// more than sizing one of `above` bytes.
fn answer_json_bytes(
    answers: &[crate::index::SearchResult],
    include_stats: bool,
    above: usize,
) -> usize {
    let mut bytes = if include_stats {
        answers.len() * stats_json_bytes()
    } else {
        0
    };
    for hit in answers.iter().flat_map(|answer| &answer.hits) {
        if bytes > above {
            break;
        }
        bytes += HIT_JSON_BYTES + hit.payload.as_ref().map_or(0, object_json_bytes);
    }
    bytes
}

/// The bytes of one answer's stats object: its field names and
/// punctuation, measured once, and a number's worth a field.
fn stats_json_bytes() -> usize {
    static BYTES: std::sync::LazyLock<usize> = std::sync::LazyLock::new(|| {
        match serde_json::to_value(crate::index::SearchStats::default()) {
            Ok(Value::Object(fields)) => object_json_bytes(&fields),
            _ => 0,
        }
    });
    *BYTES
}

fn object_json_bytes(fields: &serde_json::Map<String, Value>) -> usize {
    2 + fields
        .iter()
        .map(|(key, value)| key.len() + 4 + value_json_bytes(value))
        .sum::<usize>()
}

fn value_json_bytes(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => NUMBER_JSON_BYTES,
        Value::String(text) => text.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|v| value_json_bytes(v) + 1).sum::<usize>(),
        Value::Object(fields) => object_json_bytes(fields),
    }
}

/// [`parse_body`] on rayon when the body is larger than
/// [`JSON_IN_PLACE_BYTES`], then `then` on the parsed body there too.
async fn parse_body_then<T, U>(
    body: Bytes,
    then: impl FnOnce(T) -> Result<U, ApiError> + Send + 'static,
) -> Result<U, ApiError>
where
    T: for<'de> Deserialize<'de>,
    U: Send + 'static,
{
    on_rayon_above(body.len(), JSON_IN_PLACE_BYTES, move || {
        parse_body(&body).and_then(then)
    })
    .await
}

/// Parses a JSON body: syntax errors are `malformed_json`, shape errors `invalid_request`.
fn parse_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|err| {
        let code = if err.is_data() {
            "invalid_request"
        } else {
            "malformed_json"
        };
        ApiError::bad_request(code, err.to_string())
    })
}

#[derive(Serialize)]
struct IndexView<'a> {
    name: &'a str,
    /// Where the index is read from: authenticated clients only.
    #[serde(skip_serializing_if = "Option::is_none")]
    location: Option<&'a str>,
    #[serde(flatten)]
    info: IndexInfo,
}

/// What a client may see of one index: the location, and the source table
/// named in the definition, only when it is authenticated.
fn view<'a>(
    app: &'a AppState,
    name: &'a str,
    mut info: IndexInfo,
    auth: Authenticated,
) -> IndexView<'a> {
    if let (false, Some(definition)) = (auth.0, info.definition.as_object_mut()) {
        definition.remove("source");
    }
    IndexView {
        name,
        location: if auth.0 {
            app.registry.location(name)
        } else {
            None
        },
        info,
    }
}

/// `POST /v1/indexes/{name}/search`.
pub async fn search(
    State(app): State<Arc<AppState>>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    check_content_type(&request)?;
    let body = read_body(&app, request).await?;
    let backend = app
        .registry
        .get(&name)
        .ok_or_else(|| ApiError::unknown_index(&name))?;
    let info = backend.info();
    let (snapshot, limits) = (info.snapshot.clone(), app.limits);
    let request = parse_body_then(body, move |body| validate(body, &info, &limits)).await?;
    let count = request.count;
    let params = request.params;
    let queries = request.queries;
    // Kept for the recall sampler only when it is on.
    let sampled = app
        .recall
        .as_ref()
        .map(|_| (queries.clone(), params.clone(), Arc::clone(&backend)));
    let answers = app
        .pool
        .run(async move { backend.search_batch(&queries, &params).await })
        .await??;
    if let (Some(sampler), Some((queries, params, backend))) = (&app.recall, &sampled) {
        sampler.offer(&name, backend, queries, params, &answers, &app.metrics);
    }
    if answers.len() != count {
        return Err(ApiError::internal(format!(
            "index {name:?} answered {} of {count} queries",
            answers.len()
        )));
    }
    app.metrics
        .record_queries(&name, answers.iter().map(|a| &a.stats));
    let include_stats = request.include_stats;
    let bytes = answer_json_bytes(&answers, include_stats, JSON_IN_PLACE_BYTES);
    let json = on_rayon_above(bytes, JSON_IN_PLACE_BYTES, move || {
        let results = answers
            .into_iter()
            .map(|answer| Answer {
                hits: answer.hits,
                stats: include_stats.then_some(answer.stats),
            })
            .collect();
        let response = SearchResponse {
            index: name,
            snapshot,
            results,
        };
        serde_json::to_vec(&response)
    })
    .await
    .map_err(|e| ApiError::internal(format!("writing the answer: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response())
}

/// The body of a search's answer, serialised straight from the hits (no
/// JSON tree built first: for a batch of 1,000 queries that tree cost a
/// few milliseconds of the tokio worker's time).
#[derive(Serialize)]
pub struct SearchResponse {
    index: String,
    snapshot: String,
    results: Vec<Answer>,
}

/// One query's answer in a [`SearchResponse`].
#[derive(Serialize)]
struct Answer {
    hits: Vec<crate::index::Hit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stats: Option<crate::index::SearchStats>,
}

/// `GET /v1/indexes`.
pub async fn list_indexes(
    State(app): State<Arc<AppState>>,
    Extension(auth): Extension<Authenticated>,
) -> Json<Value> {
    let views: Vec<IndexView<'_>> = app
        .registry
        .names()
        .filter_map(|name| {
            let info = app.registry.get(name)?.info();
            Some(view(&app, name, info, auth))
        })
        .collect();
    Json(json!({ "indexes": views }))
}

/// `GET /v1/indexes/{name}`.
pub async fn get_index(
    State(app): State<Arc<AppState>>,
    Extension(auth): Extension<Authenticated>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let backend = app
        .registry
        .get(&name)
        .ok_or_else(|| ApiError::unknown_index(&name))?;
    Ok(Json(json!(view(&app, &name, backend.info(), auth))))
}

/// `POST /v1/indexes/{name}/reload` (the auth layer admits only holders of the token).
pub async fn reload(
    State(app): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let outcome = app
        .registry
        .reload(&name, app.reload_min_interval)
        .await
        .ok_or_else(|| ApiError::unknown_index(&name))?;
    let label = match &outcome {
        Ok(o) if o.coalesced => "coalesced",
        Ok(o) if o.changed => "swapped",
        Ok(_) => "unchanged",
        Err(ReloadError::RateLimited { .. }) => "rate_limited",
        Err(ReloadError::Open(_)) => "failed",
    };
    app.metrics.record_reload(&name, label);
    Ok(Json(json!(outcome?)))
}

/// `POST /v1/indexes/{name}/warm`: fill the index's caches ahead of
/// traffic (every footer; with `--cache-dir`, every postings object into
/// the disk cache); what it read from the store and the disk cache, and the
/// disk cache's figures after.
///
/// # Errors
/// 404 `unknown_index`; a storage fault 503.
pub async fn warm(
    State(app): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let backend = app
        .registry
        .get(&name)
        .ok_or_else(|| ApiError::unknown_index(&name))?;
    let stats = backend.warm().await?;
    Ok(Json(json!({
        "index": name,
        "files": stats.candidate_files,
        "store_requests": stats.requests,
        "store_bytes": stats.bytes,
        "disk_hits": stats.disk_hits,
        "disk_bytes": stats.disk_bytes,
        "disk_cache": backend.info().cache.disk,
    })))
}

/// `POST /v1/indexes/{name}/delete` body: exactly one of `ids` and `filter`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteBody {
    pub ids: Option<Vec<i64>>,
    /// A SQL `WHERE` expression over the payload columns.
    pub filter: Option<String>,
}

/// `POST /v1/indexes/{name}/upsert` body: one vector (and optionally one
/// payload object) per id.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpsertBody {
    pub ids: Vec<i64>,
    pub vectors: Vec<BodyVector>,
    pub payload: Option<Vec<Value>>,
}

/// A checked delete or upsert body as the backend's [`Change`]: the shapes
/// here (the body limit bounds the rows); the values (finite, the payload
/// columns, repeated ids) are the library's to refuse.
///
/// # Errors
/// 400 `invalid_request` (neither or both of `ids`/`filter`, counts that
/// differ), `wrong_dimension`, `invalid_filter` (too long).
fn checked_change(
    delete: Option<DeleteBody>,
    upsert: Option<UpsertBody>,
    info: &IndexInfo,
) -> Result<Change, ApiError> {
    match (delete, upsert) {
        (
            Some(DeleteBody {
                ids: Some(ids),
                filter: None,
            }),
            None,
        ) => Ok(Change::Delete { ids }),
        (
            Some(DeleteBody {
                ids: None,
                filter: Some(filter),
            }),
            None,
        ) => {
            if filter.len() > crate::filter::MAX_FILTER_BYTES {
                return Err(ApiError::bad_request(
                    "invalid_filter",
                    format!(
                        "the filter has {} bytes; the limit is {}",
                        filter.len(),
                        crate::filter::MAX_FILTER_BYTES
                    ),
                ));
            }
            Ok(Change::DeleteWhere { filter })
        }
        (Some(_), _) => Err(ApiError::bad_request(
            "invalid_request",
            "give either \"ids\" or \"filter\"",
        )),
        (None, Some(body)) => {
            let n = body.ids.len();
            if body.vectors.len() != n || body.payload.as_ref().is_some_and(|p| p.len() != n) {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    format!(
                        "{n} ids, {} vectors and {} payload rows: give one of each per id",
                        body.vectors.len(),
                        body.payload.as_ref().map_or(n, Vec::len)
                    ),
                ));
            }
            let mut vectors = Vec::with_capacity(n * info.dim);
            for (i, BodyVector(v)) in body.vectors.iter().enumerate() {
                if v.len() != info.dim {
                    return Err(ApiError::bad_request(
                        "wrong_dimension",
                        format!(
                            "vectors[{i}] has {} values; the index has dimension {}",
                            v.len(),
                            info.dim
                        ),
                    ));
                }
                // Beyond the f32 range is infinity: the index refuses it.
                vectors.extend_from_slice(v);
            }
            Ok(Change::Upsert {
                ids: body.ids,
                vectors,
                payload: body.payload,
            })
        }
        (None, None) => Err(ApiError::internal("a change route without a body")),
    }
}

/// `POST /v1/indexes/{name}/delete` (behind the token).
pub async fn delete(
    State(app): State<Arc<AppState>>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    check_content_type(&request)?;
    let body = read_body(&app, request).await?;
    let body: DeleteBody = parse_body_then(body, Ok).await?;
    change(&app, name, Some(body), None).await
}

/// `POST /v1/indexes/{name}/upsert` (behind the token).
pub async fn upsert(
    State(app): State<Arc<AppState>>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    check_content_type(&request)?;
    let body = read_body(&app, request).await?;
    let body: UpsertBody = parse_body_then(body, Ok).await?;
    change(&app, name, None, Some(body)).await
}

/// Publish a checked change and serve the version it made.
async fn change(
    app: &AppState,
    name: String,
    delete: Option<DeleteBody>,
    upsert: Option<UpsertBody>,
) -> Result<Json<Value>, ApiError> {
    let backend = app
        .registry
        .get(&name)
        .ok_or_else(|| ApiError::unknown_index(&name))?;
    let change = checked_change(delete, upsert, &backend.info())?;
    let (done, reload) = app
        .registry
        .change(&name, change)
        .await
        .ok_or_else(|| ApiError::unknown_index(&name))??;
    app.metrics.record_reload(
        &name,
        if reload.changed {
            "swapped"
        } else {
            "unchanged"
        },
    );
    Ok(Json(
        json!({ "index": name, "change": done, "snapshot": reload.snapshot }),
    ))
}

/// `GET /healthz`.
pub async fn healthz(State(app): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({ "status": "ok", "indexes": app.registry.names().collect::<Vec<_>>() }))
}

/// `GET /metrics`.
pub async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let infos: Vec<(String, IndexInfo)> = app
        .registry
        .all()
        .into_iter()
        .map(|(name, backend)| (name, backend.info()))
        .collect();
    (
        [(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)],
        app.metrics.render(&infos),
    )
        .into_response()
}

/// Any path no route matches.
pub async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no endpoint at {} {}",
            request.method(),
            request.uri().path()
        ),
    )
}

/// A known path with the wrong method.
pub async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}

/// Middleware counting every response by route template and status and
/// timing it into the latency histogram.
pub async fn record(State(app): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    app.metrics
        .record_request(&route, response.status().as_u16(), started.elapsed());
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::backend::CacheState;

    fn info() -> IndexInfo {
        IndexInfo {
            dim: 2,
            metric: "l2".into(),
            nlist: 4,
            ntotal: 10,
            snapshot: "s".into(),
            definition: Value::Null,
            cache: CacheState::default(),
            calibration: None,
            open: Default::default(),
        }
    }

    /// A body over [`JSON_IN_PLACE_BYTES`] is parsed, and its parse
    /// followed up, on a rayon worker; a smaller one where it is awaited.
    #[test]
    fn a_large_body_is_parsed_on_rayon_and_a_small_one_in_place() {
        let parse = |values: usize| {
            let body = format!("[{}]", vec!["0.123456789"; values].join(","));
            let len = body.len();
            let (n, worker) =
                futures::executor::block_on(parse_body_then(Bytes::from(body), |v: Vec<f32>| {
                    Ok((v.len(), rayon::current_thread_index()))
                }))
                .unwrap();
            assert_eq!(n, values);
            (len, worker)
        };
        let (len, worker) = parse(100);
        assert!(len <= JSON_IN_PLACE_BYTES && worker.is_none(), "{len} B");
        let (len, worker) = parse(2_000);
        assert!(len > JSON_IN_PLACE_BYTES && worker.is_some(), "{len} B");
        // Either way a bad body is the same typed error.
        let bad = |body: String| {
            futures::executor::block_on(parse_body_then(Bytes::from(body), |v: Vec<f32>| {
                Ok(v.len())
            }))
            .unwrap_err()
            .code
        };
        assert_eq!(bad("[1,".into()), "malformed_json");
        assert_eq!(
            bad(format!("[{}\"x\"]", "1,".repeat(10_000))),
            "invalid_request"
        );
    }

    /// The size an answer is estimated at, to choose where it is written,
    /// is within a factor of two of the bytes written, with and without
    /// payload and stats; a few hits whose payload is large are over
    /// [`JSON_IN_PLACE_BYTES`] (their rowids and distances alone are not).
    #[test]
    fn an_answer_is_sized_with_its_payload_and_stats_before_it_is_written() {
        use crate::index::{Hit, SearchResult, SearchStats};
        let answers = |queries: usize, hits: usize, payload: Option<Value>, stats: SearchStats| {
            (0..queries)
                .map(|q| SearchResult {
                    hits: (0..hits)
                        .map(|h| Hit {
                            rowid: (q * 1_000_003 + h * 7_919) as i64,
                            distance: 1.0 / (1.0 + h as f32) + q as f32 * 12.345,
                            payload: payload.as_ref().and_then(|p| p.as_object().cloned()),
                        })
                        .collect(),
                    stats,
                    payload: None,
                })
                .collect::<Vec<_>>()
        };
        let written = |answers: &[SearchResult], include_stats: bool| {
            let response = SearchResponse {
                index: "an_index".into(),
                snapshot: "1796618158252-2960325cf8124375".into(),
                results: answers
                    .iter()
                    .map(|a| Answer {
                        hits: a.hits.clone(),
                        stats: include_stats.then_some(a.stats),
                    })
                    .collect(),
            };
            serde_json::to_vec(&response).unwrap().len()
        };
        let busy = SearchStats {
            requests: 35_881,
            bytes: 20_707_469,
            ram_bytes: 91_896_008,
            codes_scored: 25_227_091,
            reranked: 39_975,
            scan_us: 89_777,
            estimated_recall: Some(0.95),
            ..SearchStats::default()
        };
        let payload = json!({
            "title": "a title of some length ".repeat(90),
            "year": 1999,
            "score": 0.123_456_789,
            "tags": ["one", "two", "three"],
            "author": {"name": "someone", "born": null},
        });
        let cases = [
            (answers(1_000, 10, None, busy), false),
            (answers(100, 10, None, busy), true),
            (answers(1, 10, None, SearchStats::default()), true),
            (answers(16, 1, Some(payload.clone()), busy), false),
            (answers(4, 10, Some(payload), busy), true),
        ];
        for (i, (answers, include_stats)) in cases.iter().enumerate() {
            let (estimate, bytes) = (
                answer_json_bytes(answers, *include_stats, usize::MAX),
                written(answers, *include_stats),
            );
            assert!(
                estimate * 2 >= bytes && estimate <= bytes * 2,
                "case {i}: estimated {estimate} bytes, wrote {bytes}"
            );
            // Counted up to the bound only, on the same side of it.
            let bounded = answer_json_bytes(answers, *include_stats, JSON_IN_PLACE_BYTES);
            assert_eq!(
                bounded > JSON_IN_PLACE_BYTES,
                estimate > JSON_IN_PLACE_BYTES
            );
            assert!(bounded <= estimate);
        }
        let (few, _) = &cases[3];
        assert!(few.len() * HIT_JSON_BYTES <= JSON_IN_PLACE_BYTES);
        assert!(answer_json_bytes(few, false, JSON_IN_PLACE_BYTES) > JSON_IN_PLACE_BYTES);
    }

    fn check(body: &str) -> Result<ValidSearch, &'static str> {
        check_with(body, Limits::default())
    }

    fn check_with(body: &str, limits: Limits) -> Result<ValidSearch, &'static str> {
        let limits = Limits {
            max_batch: 2,
            max_k: 5,
            default_k: 3,
            ..limits
        };
        parse_body::<SearchBody>(body.as_bytes())
            .and_then(|b| validate(b, &info(), &limits))
            .map_err(|e| e.code)
    }

    #[test]
    fn accepts_single_and_batch_with_defaults() {
        let one = check(r#"{"vector":[1,2]}"#).unwrap();
        assert_eq!(one.queries, vec![1.0, 2.0]);
        assert_eq!(
            one.params,
            SearchParams {
                k: 3,
                // Neither named: the index's default, resolved when planned.
                nprobe: None,
                root_factor: 0,
                include_payload: false,
                rerank: None,
                filter: None,
                max_nprobe: None,
                target_recall: None,
            }
        );
        let two =
            check(r#"{"vectors":[[1,2],[3,4]],"k":5,"nprobe":1,"include":["payload","stats"]}"#)
                .unwrap();
        assert_eq!(
            (two.count, two.params.k, two.params.nprobe),
            (2, 5, Some(1))
        );
        assert!(two.params.include_payload && two.include_stats);
        let named = check(r#"{"vector":[1,2],"root_factor":4,"include_payload":true}"#).unwrap();
        assert_eq!(
            (named.params.root_factor, named.params.include_payload),
            (4, true)
        );
    }

    #[test]
    fn a_request_naming_neither_takes_the_servers_default() {
        let probe = |body: &str, limits: Limits| {
            let p = check_with(body, limits).unwrap().params;
            (p.nprobe, p.target_recall)
        };
        let lists = Limits {
            default_nprobe: Some(16),
            ..Limits::default()
        };
        let target = Limits {
            default_target_recall: Some(0.9),
            ..Limits::default()
        };
        // Clamped to the index's nlist (4).
        assert_eq!(probe(r#"{"vector":[1,2]}"#, lists), (Some(4), None));
        assert_eq!(probe(r#"{"vector":[1,2]}"#, target), (None, Some(0.9)));
        // A request naming either keeps it, whatever the server's default.
        assert_eq!(
            probe(r#"{"vector":[1,2],"nprobe":2}"#, target),
            (Some(2), None)
        );
        assert_eq!(
            probe(r#"{"vector":[1,2],"target_recall":0.8}"#, lists),
            (None, Some(0.8))
        );
        // Both named go on to the index, which refuses them.
        assert_eq!(
            probe(r#"{"vector":[1,2],"nprobe":2,"target_recall":0.8}"#, lists),
            (Some(2), Some(0.8))
        );
    }

    /// The rules of the server's own (the index's are checked when it plans
    /// the query: `probe::query` and the HTTP tests).
    #[test]
    fn each_bad_input_has_its_code() {
        assert_eq!(
            check(r#"{"vector":[1,2,3]}"#).unwrap_err(),
            "wrong_dimension"
        );
        assert_eq!(
            check(r#"{"vector":[1,2],"k":6}"#).unwrap_err(),
            "k_too_large"
        );
        assert_eq!(
            check(r#"{"vector":[1,2],"root_factor":-1}"#).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            check(r#"{"vector":[1,2],"rerank":1001}"#).unwrap_err(),
            "rerank_out_of_range"
        );
        assert_eq!(
            check(r#"{"vector":[1,2],"rerank":1000}"#).map(|v| v.params.rerank),
            Ok(Some(1000))
        );
        assert_eq!(
            check(r#"{"vector":[1,2],"include_payload":"yes"}"#).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            check(r#"{"vectors":[[1,2],[1,2],[1,2]]}"#).unwrap_err(),
            "too_many_vectors"
        );
        assert_eq!(check(r#"{"vectors":[]}"#).unwrap_err(), "empty_batch");
        assert_eq!(
            check(r#"{"vector":[1,2],"vectors":[[1,2]]}"#).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(check(r#"{"k":3}"#).unwrap_err(), "invalid_request");
        assert_eq!(
            check(r#"{"vector":[1,2],"kk":3}"#).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            check(r#"{"vector":[1,2],"k":-1}"#).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            check(r#"{"vector":[1,2],"include":["all"]}"#).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            check(r#"{"vector":[1,NaN]}"#).unwrap_err(),
            "malformed_json"
        );
        assert_eq!(check(r#"{"vector":[1,2"#).unwrap_err(), "malformed_json");
    }
}
