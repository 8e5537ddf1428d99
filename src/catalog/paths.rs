//! Path resolution for lake files, decided at resolution time (source 004):
//! a data or delete file resolves to `data_path + schema.path + table.path +
//! file.path`, each part relative to the one before when its
//! `path_is_relative` is set and used verbatim otherwise.
//!
//! Every location is an absolute [`Url`] (`file:///…` for local paths,
//! `s3://bucket/…` for object stores), so the process's working directory
//! never enters: a relative `data_path` resolves against a base the caller
//! chooses (the catalog file's folder, see [`local_dir_url`]) and a part
//! flagged absolute must really be absolute. [`object_path`] turns a location
//! into the `object_store` path that the store rooted at its origin reads.

use thiserror::Error;
use url::Url;

/// Path resolution errors.
#[derive(Debug, Error)]
pub enum PathError {
    /// A part flagged absolute (`path_is_relative = 0`), or an override, that is
    /// neither a URL nor an absolute filesystem path.
    #[error("`{path}` is used verbatim but is not absolute (neither a URL nor a rooted path)")]
    NotAbsolute { path: String },
    /// A path that does not form a valid URL.
    #[error("`{path}` is not a valid location: {reason}")]
    Invalid { path: String, reason: String },
}

/// One part of the resolution chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathPart<'a> {
    pub path: &'a str,
    pub is_relative: bool,
}

/// The `file://` URL of a local folder (with a trailing slash), made
/// absolute without consulting the working directory when already absolute.
///
/// # Errors
/// [`PathError::NotAbsolute`] for a relative folder, [`PathError::Invalid`]
/// when it has no URL form.
pub fn local_dir_url(dir: &std::path::Path) -> Result<Url, PathError> {
    if !dir.is_absolute() {
        return Err(PathError::NotAbsolute {
            path: dir.display().to_string(),
        });
    }
    Url::from_directory_path(dir).map_err(|()| PathError::Invalid {
        path: dir.display().to_string(),
        reason: "no file URL form".into(),
    })
}

/// An absolute location given verbatim: a URL with a scheme (`s3://…`,
/// `file:///…`) or a rooted filesystem path.
///
/// # Errors
/// [`PathError::NotAbsolute`], [`PathError::Invalid`].
pub fn absolute(path: &str) -> Result<Url, PathError> {
    let invalid = |reason: String| PathError::Invalid {
        path: path.to_string(),
        reason,
    };
    if has_scheme(path) {
        return Url::parse(path).map_err(|e| invalid(e.to_string()));
    }
    let p = std::path::Path::new(path);
    if p.is_absolute() {
        let url = if path.ends_with('/') {
            Url::from_directory_path(p)
        } else {
            Url::from_file_path(p)
        };
        return url.map_err(|()| invalid("no file URL form".into()));
    }
    Err(PathError::NotAbsolute {
        path: path.to_string(),
    })
}

fn has_scheme(path: &str) -> bool {
    match path.split_once("://") {
        Some((scheme, _)) => {
            scheme.len() > 1
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

/// Resolves `part` against `parent`: appended segment by segment when
/// relative (the parent acts as a folder), [`absolute`] otherwise.
///
/// # Errors
/// As [`absolute`]; [`PathError::Invalid`] for a parent that cannot hold a path.
pub fn resolve(parent: &Url, part: PathPart<'_>) -> Result<Url, PathError> {
    if !part.is_relative {
        return absolute(part.path);
    }
    let mut url = parent.clone();
    {
        let mut segments = url.path_segments_mut().map_err(|()| PathError::Invalid {
            path: parent.to_string(),
            reason: "cannot be a base".into(),
        })?;
        segments.pop_if_empty();
        for segment in part.path.split('/') {
            match segment {
                "" | "." => {}
                ".." => {
                    segments.pop();
                }
                s => {
                    segments.push(s);
                }
            }
        }
        if part.path.ends_with('/') || part.path.is_empty() {
            segments.push("");
        }
    }
    Ok(url)
}

/// Resolves a chain of parts from `base` (each relative to the one before).
///
/// # Errors
/// As [`resolve`].
pub fn resolve_chain(base: &Url, parts: &[PathPart<'_>]) -> Result<Url, PathError> {
    let mut url = base.clone();
    for (i, part) in parts.iter().enumerate() {
        url = resolve(&url, *part)?;
        // Every part but the last is a folder.
        if i + 1 < parts.len() && !url.path().ends_with('/') {
            url = resolve(
                &url,
                PathPart {
                    path: "",
                    is_relative: true,
                },
            )?;
        }
    }
    Ok(url)
}

/// The `object_store` path of `location` inside the store rooted at its
/// origin (`LocalFileSystem::new()` for `file://`, the bucket for `s3://`).
///
/// # Errors
/// [`PathError::Invalid`] when the URL path does not decode.
pub fn object_path(location: &Url) -> Result<object_store::path::Path, PathError> {
    object_store::path::Path::from_url_path(location.path()).map_err(|e| PathError::Invalid {
        path: location.to_string(),
        reason: e.to_string(),
    })
}

/// A location for people and the `filename` lineage column: the filesystem
/// path for `file://`, the URL otherwise.
pub fn display(location: &Url) -> String {
    match location.scheme() {
        "file" => location
            .to_file_path()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|()| location.to_string()),
        _ => location.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(path: &str) -> PathPart<'_> {
        PathPart {
            path,
            is_relative: true,
        }
    }

    #[test]
    fn chain_appends_relative_parts() {
        let base = Url::parse("file:///lake/").unwrap();
        let url = resolve_chain(
            &base,
            &[rel("data/"), rel("s1/"), rel("docs/"), rel("ext/x.parquet")],
        )
        .unwrap();
        assert_eq!(url.as_str(), "file:///lake/data/s1/docs/ext/x.parquet");
    }

    #[test]
    fn folder_parts_without_trailing_slash_still_nest() {
        let base = Url::parse("s3://bucket/root").unwrap();
        let url = resolve_chain(&base, &[rel("s1"), rel("docs"), rel("f.parquet")]).unwrap();
        assert_eq!(url.as_str(), "s3://bucket/root/s1/docs/f.parquet");
    }

    #[test]
    fn absolute_part_replaces_everything_before() {
        let base = Url::parse("file:///lake/data/").unwrap();
        let abs = PathPart {
            path: "/elsewhere/o.parquet",
            is_relative: false,
        };
        assert_eq!(
            resolve_chain(&base, &[rel("s1/"), abs]).unwrap().as_str(),
            "file:///elsewhere/o.parquet"
        );
        let s3 = PathPart {
            path: "s3://b/k/o.parquet",
            is_relative: false,
        };
        assert_eq!(
            resolve_chain(&base, &[s3]).unwrap().as_str(),
            "s3://b/k/o.parquet"
        );
    }

    #[test]
    fn verbatim_relative_string_is_an_error_not_the_cwd() {
        let base = Url::parse("file:///lake/data/").unwrap();
        let part = PathPart {
            path: "outside/o.parquet",
            is_relative: false,
        };
        assert!(
            matches!(resolve(&base, part), Err(PathError::NotAbsolute { path }) if path == "outside/o.parquet")
        );
    }

    #[test]
    fn special_characters_survive_round_trip() {
        let base = Url::parse("file:///lake/").unwrap();
        let url = resolve(&base, rel("part=a b/x:y.parquet")).unwrap();
        assert_eq!(display(&url), "/lake/part=a b/x:y.parquet");
        assert_eq!(
            object_path(&url).unwrap().as_ref(),
            "lake/part=a b/x:y.parquet"
        );
        assert_eq!(
            crate::store::uri::hive_partitions(&object_path(&url).unwrap()),
            vec![("part".to_string(), "a b".to_string())]
        );
    }
}
