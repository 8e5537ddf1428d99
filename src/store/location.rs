//! Opening a location: a plain path or a location URI becomes an
//! `Arc<dyn ObjectStore>` plus the object path of the location inside it.
//!
//! | location | store | path |
//! |---|---|---|
//! | `/data/idx`, `idx` (plain path) | `LocalFileSystem` | the absolute path |
//! | `file:///data/idx` | `LocalFileSystem` | `data/idx` |
//! | `memory://name/prefix` | the process-global `InMemory` store `name` | `prefix` |
//! | `s3://bucket/prefix` | `AmazonS3Builder::from_env()` for `bucket` | `prefix` |
//! | `gs://bucket/prefix` (feature `gcp`) | `GoogleCloudStorageBuilder::from_env()` | `prefix` |
//! | `az://container/prefix` (feature `azure`) | `MicrosoftAzureBuilder::from_env()` | `prefix` |
//!
//! URIs must follow the six location-URI rules ([`crate::store::uri`]), and
//! name one location (no `*` pattern). A relative plain path is made absolute
//! against the current directory once, when it is opened; the longest existing
//! ancestor is canonicalised (symlinks resolved) and the rest appended, with
//! `..` in the not-yet-existing rest rejected. Nothing is created on open:
//! local folders appear when the first object is written below them.
//!
//! Credentials, endpoints and regions come from the environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, …, object_store's standard variables),
//! overridden by the same keys in [`StoreOptions::config`] (a library or
//! Python caller's `storage_options`), never from a definition or a URI
//! (which cannot carry user information).
//! Retries, timeouts and the unconditional-publish opt-in come from the
//! runtime [`StoreOptions`] ([`open_with`]).

use std::collections::HashMap;
use std::path::{Component, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;

use super::commit::CheckThenPut;
pub use super::error::LocationError;
use super::hedge::{DEFAULT_MAX_IN_FLIGHT, HedgedStore};
use super::options::StoreOptions;
use crate::store::uri::{LocationUri, Scheme, UriError};

/// Opens `location` (a plain local path or a location URI) with the default
/// [`StoreOptions`].
///
/// # Errors
/// [`LocationError::Uri`] for a URI breaking a rule or naming a pattern,
/// [`LocationError::LocalPath`] for a local path that cannot be made
/// absolute, [`LocationError::Configure`] when the environment does not
/// configure the cloud store.
pub fn open(location: &str) -> Result<(Arc<dyn ObjectStore>, Path), LocationError> {
    open_with(location, &StoreOptions::default())
}

/// Opens `location` with runtime `options` (retries, timeouts, and the
/// [`CheckThenPut`] wrapper when `unconditional_publish` is set).
///
/// # Errors
/// As [`open`].
pub fn open_with(
    location: &str,
    options: &StoreOptions,
) -> Result<(Arc<dyn ObjectStore>, Path), LocationError> {
    let (store, path) = open_unwrapped(location, options)?;
    let remote = location.contains("://")
        && LocationUri::parse_root(location)
            .is_ok_and(|u| matches!(u.scheme(), Scheme::S3 | Scheme::Gs | Scheme::Az));
    Ok((wrap(store, options, remote), path))
}

/// The wrappers `options` ask for: the emulated latency, then, for a remote
/// store or an emulated one, the in-flight bound and hedging
/// ([`HedgedStore`]), then the unconditional publish.
fn wrap(store: Arc<dyn ObjectStore>, options: &StoreOptions, remote: bool) -> Arc<dyn ObjectStore> {
    let store: Arc<dyn ObjectStore> = match options.latency {
        Some(latency) => Arc::new(super::latency::LatencyStore::new(store, latency)),
        None => store,
    };
    let store: Arc<dyn ObjectStore> = if remote || options.latency.is_some() {
        Arc::new(HedgedStore::new(
            store,
            options.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT),
            options.hedge_after.unwrap_or_default(),
        ))
    } else {
        store
    };
    if options.unconditional_publish {
        Arc::new(CheckThenPut::new(store))
    } else {
        store
    }
}

fn open_unwrapped(
    location: &str,
    options: &StoreOptions,
) -> Result<(Arc<dyn ObjectStore>, Path), LocationError> {
    if location.is_empty() {
        return Err(LocationError::Empty);
    }
    if location.contains("://") {
        return open_uri(&LocationUri::parse_root(location)?, options);
    }
    let absolute = absolute_local_path(std::path::Path::new(location))?;
    let path = Path::from_absolute_path(&absolute).map_err(|e| LocationError::LocalPath {
        path: absolute.clone(),
        reason: e.to_string(),
    })?;
    Ok((Arc::new(LocalFileSystem::new()), path))
}

/// Opens a parsed location URI.
///
/// # Errors
/// As [`open`]; [`UriError::PatternNotAllowed`] for a pattern.
fn open_uri(
    uri: &LocationUri,
    options: &StoreOptions,
) -> Result<(Arc<dyn ObjectStore>, Path), LocationError> {
    if uri.is_pattern() {
        return Err(UriError::PatternNotAllowed {
            uri: uri.to_string(),
        }
        .into());
    }
    let configure = |scheme, source| LocationError::Configure {
        scheme,
        location: uri.to_string(),
        source,
    };
    let store: Arc<dyn ObjectStore> = match uri.scheme() {
        Scheme::File => Arc::new(LocalFileSystem::new()),
        Scheme::Memory => memory_store(uri.host()),
        Scheme::S3 => Arc::new(
            s3_builder(uri.host(), options)
                .build()
                .map_err(|e| configure("s3", e))?,
        ),
        #[cfg(feature = "gcp")]
        Scheme::Gs => {
            use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
            let mut b = GoogleCloudStorageBuilder::from_env().with_bucket_name(uri.host());
            for (key, value) in options.config_for(|k| k.parse::<GoogleConfigKey>().ok()) {
                b = b.with_config(key, value);
            }
            for (key, value) in options.client_config() {
                b = b.with_config(GoogleConfigKey::Client(key), value);
            }
            if options.sets_retry() {
                b = b.with_retry(options.retry_config());
            }
            Arc::new(b.build().map_err(|e| configure("gs", e))?)
        }
        #[cfg(feature = "azure")]
        Scheme::Az => {
            use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
            let mut b = MicrosoftAzureBuilder::from_env().with_container_name(uri.host());
            for (key, value) in options.config_for(|k| k.parse::<AzureConfigKey>().ok()) {
                b = b.with_config(key, value);
            }
            for (key, value) in options.client_config() {
                b = b.with_config(AzureConfigKey::Client(key), value);
            }
            if options.sets_retry() {
                b = b.with_retry(options.retry_config());
            }
            Arc::new(b.build().map_err(|e| configure("az", e))?)
        }
        #[cfg(not(all(feature = "gcp", feature = "azure")))]
        #[allow(unreachable_patterns)]
        Scheme::Gs | Scheme::Az => {
            // `LocationUri::parse` already refuses these without the feature.
            return Err(UriError::SchemeNotEnabled {
                uri: uri.to_string(),
                scheme: uri.scheme().as_str().to_string(),
                feature: if uri.scheme() == Scheme::Gs {
                    "gcp"
                } else {
                    "azure"
                },
            }
            .into());
        }
    };
    Ok((store, uri.object_path()))
}

/// The S3 builder for `bucket`: the environment's `AWS_*` configuration,
/// then `options`' own store keys ([`StoreOptions::config`]), its timeouts,
/// and its retry policy when one is set.
pub fn s3_builder(bucket: &str, options: &StoreOptions) -> object_store::aws::AmazonS3Builder {
    use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
    let mut b = AmazonS3Builder::from_env();
    for (key, value) in options.config_for(|k| k.parse::<AmazonS3ConfigKey>().ok()) {
        b = b.with_config(key, value);
    }
    b = b.with_bucket_name(bucket);
    for (key, value) in options.client_config() {
        b = b.with_config(AmazonS3ConfigKey::Client(key), value);
    }
    if options.sets_retry() {
        b = b.with_retry(options.retry_config());
    }
    b
}

/// Opens a *source* location, which may hold one `*` wildcard (a Parquet
/// table pattern such as `s3://b/t/*.parquet` or `./data/*.parquet`): the
/// store of the pattern's root folder, and the location inside that store as
/// text (`*` kept), ready for listing and matching.
///
/// # Errors
/// As [`open`]; a URI pattern must also follow the location-URI rules.
pub fn open_pattern(
    location: &str,
    options: &StoreOptions,
) -> Result<(Arc<dyn ObjectStore>, String), LocationError> {
    let Some(star) = location.find('*') else {
        let (store, path) = open_with(location, options)?;
        return Ok((store, path.to_string()));
    };
    if location.contains("://") {
        LocationUri::parse(location)?;
    }
    let (root, rest) = match location[..star].rfind('/') {
        Some(i) => (&location[..=i], &location[i + 1..]),
        None => ("./", location),
    };
    let (store, root) = open_with(root, options)?;
    let root = root.to_string();
    Ok((
        store,
        if root.is_empty() {
            rest.to_string()
        } else {
            format!("{root}/{rest}")
        },
    ))
}

/// The process-global in-memory store called `name`: the same name gives the
/// same store for the life of the process.
pub fn memory_store(name: &str) -> Arc<dyn ObjectStore> {
    static STORES: LazyLock<Mutex<HashMap<String, Arc<InMemory>>>> =
        LazyLock::new(Default::default);
    let mut stores = STORES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    stores
        .entry(name.to_string())
        .or_insert_with(|| Arc::new(InMemory::new()))
        .clone()
}

/// Makes `path` absolute: relative to the current directory, the longest
/// existing ancestor canonicalised, the non-existing rest appended.
fn absolute_local_path(path: &std::path::Path) -> Result<PathBuf, LocationError> {
    let local_err = |reason: String| LocationError::LocalPath {
        path: path.to_path_buf(),
        reason,
    };
    let absolute = std::path::absolute(path).map_err(|e| local_err(e.to_string()))?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    let canonical = loop {
        match std::fs::canonicalize(existing) {
            Ok(canonical) => break canonical,
            Err(_) => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    return Err(local_err(
                        "no existing ancestor (or a '..' below a missing folder)".to_string(),
                    ));
                };
                rest.push(name);
                existing = parent;
            }
        }
    };
    let mut result = canonical;
    for name in rest.into_iter().rev() {
        match std::path::Path::new(name).components().next() {
            Some(Component::Normal(_)) => result.push(name),
            Some(Component::CurDir) => {}
            _ => {
                return Err(local_err(format!(
                    "{name:?} is not allowed in a path that does not exist yet"
                )));
            }
        }
    }
    Ok(result)
}
