//! Where a DuckLake catalog lives ([`Catalog`]: a SQLite file or a
//! PostgreSQL database) and the one small interface the reader queries it
//! through ([`CatalogDb`]): a statement with `?N` placeholders, its
//! parameters, and rows read by typed getters. The two databases differ only
//! in the placeholder syntax (`$N` in PostgreSQL) and in the flag columns
//! (`boolean` in PostgreSQL, `0`/`1` integers in SQLite); every query and
//! every row decoding lives once, in `metadata.rs`.
//!
//! All catalog work runs on a dedicated OS thread ([`Catalog::read`]): the
//! synchronous PostgreSQL client drives its own runtime and must never run
//! on a tokio worker, and neither should blocking SQLite reads.
//!
//! A PostgreSQL conninfo may carry a password. It is kept only inside the
//! connection [`postgres::Config`]; [`Catalog`]'s `Display` and `Debug`, and
//! every error, show the conninfo with the password removed.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::error::DuckLakeError;

/// The source prefix of a SQLite catalog (`ducklake:sqlite:<file>`).
pub const SQLITE_PREFIX: &str = "sqlite:";
/// The source prefix of a PostgreSQL catalog (`ducklake:postgres:<conninfo>`).
pub const POSTGRES_PREFIX: &str = "postgres:";

/// Seconds to wait for a PostgreSQL server when the conninfo sets no
/// `connect_timeout`.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A DuckLake catalog database.
#[derive(Clone)]
pub enum Catalog {
    /// A SQLite file, opened read-only.
    Sqlite(PathBuf),
    /// A PostgreSQL database, read in one read-only transaction.
    Postgres(PgCatalog),
}

/// A PostgreSQL catalog: the connection settings (password included) and
/// their password-free form, the only one ever shown.
#[derive(Clone)]
pub struct PgCatalog {
    config: Box<postgres::Config>,
    redacted: String,
}

impl Catalog {
    /// Parses what follows `ducklake:` in a source: `sqlite:<file>` or
    /// `postgres:<conninfo>` (libpq `key=value` pairs or a `postgresql://`
    /// URI).
    ///
    /// # Errors
    /// [`DuckLakeError::CatalogKind`] for another prefix,
    /// [`DuckLakeError::Conninfo`] for a conninfo that does not parse.
    pub fn parse(spec: &str) -> Result<Self, DuckLakeError> {
        if let Some(path) = spec.strip_prefix(SQLITE_PREFIX) {
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if let Some(conninfo) = spec.strip_prefix(POSTGRES_PREFIX) {
            return PgCatalog::parse(conninfo).map(Self::Postgres);
        }
        Err(DuckLakeError::CatalogKind {
            kind: spec.split(':').next().unwrap_or_default().to_string(),
        })
    }

    /// `ducklake:`-less source form, password removed: `sqlite:<file>` or
    /// `postgres:<conninfo>`.
    pub fn spec(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("{SQLITE_PREFIX}{}", path.display()),
            Self::Postgres(pg) => format!("{POSTGRES_PREFIX}{}", pg.redacted),
        }
    }
}

impl From<&Path> for Catalog {
    fn from(path: &Path) -> Self {
        Self::Sqlite(path.to_path_buf())
    }
}

impl From<&PathBuf> for Catalog {
    fn from(path: &PathBuf) -> Self {
        Self::Sqlite(path.clone())
    }
}

impl From<PathBuf> for Catalog {
    fn from(path: PathBuf) -> Self {
        Self::Sqlite(path)
    }
}

impl From<&Catalog> for Catalog {
    fn from(catalog: &Catalog) -> Self {
        catalog.clone()
    }
}

/// The name errors and `index.json` use: the SQLite file's path, or
/// `postgres:<conninfo without password>`.
impl fmt::Display for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres(pg) => write!(f, "{POSTGRES_PREFIX}{}", pg.redacted),
        }
    }
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Self::Postgres(pg) => f.debug_tuple("Postgres").field(pg).finish(),
        }
    }
}

impl fmt::Debug for PgCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted)
    }
}

impl PgCatalog {
    /// Parses a conninfo. Without a password in it, `PGPASSWORD` supplies
    /// one (as libpq does), so that none need appear on a command line.
    fn parse(conninfo: &str) -> Result<Self, DuckLakeError> {
        let mut config =
            postgres::Config::from_str(conninfo).map_err(|e| DuckLakeError::Conninfo {
                conninfo: redact_text(conninfo),
                reason: e.to_string(),
            })?;
        if config.get_password().is_none()
            && let Ok(password) = std::env::var("PGPASSWORD")
        {
            config.password(password);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        let redacted = redacted(&config);
        Ok(Self {
            config: Box::new(config),
            redacted,
        })
    }

    /// The conninfo without its password (`host=… port=… user=… dbname=…`).
    pub fn redacted(&self) -> &str {
        &self.redacted
    }
}

/// The settings that name the database, as libpq `key=value` pairs; never
/// the password.
fn redacted(config: &postgres::Config) -> String {
    let quote = |v: &str| {
        if !v.is_empty() && !v.contains([' ', '\'', '\\']) {
            v.to_string()
        } else {
            format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
        }
    };
    let mut parts = Vec::new();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    if !hosts.is_empty() {
        parts.push(format!("host={}", quote(&hosts.join(","))));
    }
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    if !ports.is_empty() {
        parts.push(format!("port={}", ports.join(",")));
    }
    for (key, value) in [
        ("user", config.get_user()),
        ("dbname", config.get_dbname()),
        ("options", config.get_options()),
    ] {
        if let Some(v) = value {
            parts.push(format!("{key}={}", quote(v)));
        }
    }
    parts.join(" ")
}

/// Best-effort removal of a password from a conninfo that did not parse:
/// the value of every `password=` pair and a URI's `user:password@`.
fn redact_text(conninfo: &str) -> String {
    if conninfo.contains("://") {
        let (scheme, rest) = conninfo.split_once("://").unwrap_or(("", conninfo));
        let rest = match rest.split_once('@') {
            Some((userinfo, host)) => {
                format!("{}@{host}", userinfo.split(':').next().unwrap_or_default())
            }
            None => rest.to_string(),
        };
        let rest = match rest.split_once('?') {
            Some((head, query)) if query.contains("password") => format!("{head}?…"),
            _ => rest,
        };
        return format!("{scheme}://{rest}");
    }
    match conninfo.find("password") {
        Some(at) => format!("{}…", &conninfo[..at]),
        None => conninfo.to_string(),
    }
}

/// A statement parameter: the catalog's ids are `bigint`, its names text.
#[derive(Debug, Clone, Copy)]
pub(super) enum Param<'a> {
    Int(i64),
    Text(&'a str),
}

/// A failure of either database, given its catalog name by [`CatalogDb`].
#[derive(Debug)]
pub(super) enum DbError {
    Sqlite(rusqlite::Error),
    Postgres(postgres::Error),
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(e)
    }
}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> Self {
        Self::Postgres(e)
    }
}

/// One result row of either database.
pub(super) enum CatalogRow<'r, 's> {
    Sqlite(&'r rusqlite::Row<'s>),
    Postgres(&'r postgres::Row),
}

impl CatalogRow<'_, '_> {
    /// Column `i` as `T` (`i64`, `String`, or an `Option` of them).
    pub(super) fn get<T>(&self, i: usize) -> Result<T, DbError>
    where
        T: rusqlite::types::FromSql + for<'a> postgres::types::FromSql<'a>,
    {
        Ok(match self {
            Self::Sqlite(row) => row.get(i)?,
            Self::Postgres(row) => row.try_get(i)?,
        })
    }

    /// A flag column: `boolean` in PostgreSQL, `0`/`1` in SQLite; `None`
    /// for NULL.
    pub(super) fn flag(&self, i: usize) -> Result<Option<bool>, DbError> {
        Ok(match self {
            Self::Sqlite(row) => row.get::<_, Option<i64>>(i)?.map(|v| v != 0),
            Self::Postgres(row) => row.try_get(i)?,
        })
    }
}

/// An open, read-only connection to a catalog database.
pub(super) enum CatalogDb {
    Sqlite(Connection),
    Postgres(Box<postgres::Client>),
}

impl CatalogDb {
    /// Opens `catalog` read-only. A PostgreSQL session starts one
    /// `REPEATABLE READ READ ONLY` transaction, so that every statement
    /// sees the same catalog state; it is never committed.
    pub(super) fn open(catalog: &Catalog) -> Result<Self, DbError> {
        match catalog {
            Catalog::Sqlite(path) => {
                let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
                Ok(Self::Sqlite(Connection::open_with_flags(path, flags)?))
            }
            Catalog::Postgres(pg) => {
                let mut client = pg.config.connect(postgres::NoTls)?;
                client
                    .batch_execute("START TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
                Ok(Self::Postgres(Box::new(client)))
            }
        }
    }

    /// Runs `sql` (placeholders `?1`, `?2`, …) with `params`, decoding
    /// every row with `decode`.
    pub(super) fn query<T>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        mut decode: impl FnMut(&CatalogRow<'_, '_>) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        match self {
            Self::Sqlite(conn) => {
                let mut stmt = conn.prepare(sql)?;
                let values = params.iter().map(|p| match p {
                    Param::Int(v) => rusqlite::types::Value::Integer(*v),
                    Param::Text(v) => rusqlite::types::Value::Text((*v).to_string()),
                });
                let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(decode(&CatalogRow::Sqlite(row))?);
                }
                Ok(out)
            }
            Self::Postgres(client) => {
                let values: Vec<&(dyn postgres::types::ToSql + Sync)> = params
                    .iter()
                    .map(|p| match p {
                        Param::Int(v) => v as &(dyn postgres::types::ToSql + Sync),
                        Param::Text(v) => v as &(dyn postgres::types::ToSql + Sync),
                    })
                    .collect();
                let rows = client.query(&dollar_placeholders(sql), &values)?;
                rows.iter()
                    .map(|row| decode(&CatalogRow::Postgres(row)))
                    .collect()
            }
        }
    }
}

/// `?N` → `$N` (the catalog statements have no `?` inside literals).
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_numbered_dollars() {
        assert_eq!(
            dollar_placeholders("a <= ?1 AND (b > ?1) AND c = ?23"),
            "a <= $1 AND (b > $1) AND c = $23"
        );
    }

    #[test]
    fn the_password_is_never_shown() {
        for conninfo in [
            "host=127.0.0.1 port=5433 user=u password=s3cret dbname=lake",
            "password='s3cret' dbname=lake host=db.example",
            "postgresql://u:s3cret@127.0.0.1:5433/lake",
            "postgresql://u@127.0.0.1/lake?password=s3cret",
        ] {
            let catalog = Catalog::parse(&format!("postgres:{conninfo}")).unwrap();
            for shown in [catalog.to_string(), format!("{catalog:?}"), catalog.spec()] {
                assert!(!shown.contains("s3cret"), "{shown}");
                assert!(shown.contains("lake"), "{shown}");
            }
        }
        let catalog =
            Catalog::parse("postgres:host=h port=1 user=u password=p dbname='my lake'").unwrap();
        assert_eq!(
            catalog.to_string(),
            "postgres:host=h port=1 user=u dbname='my lake'"
        );
        for bad in [
            "host=h password=s3cret bogus=1",
            "postgresql://u:s3cret@h:notaport/d",
        ] {
            let err = Catalog::parse(&format!("postgres:{bad}")).unwrap_err();
            let shown = format!("{err} {err:?}");
            assert!(!shown.contains("s3cret"), "{shown}");
        }
    }

    #[test]
    fn unknown_catalog_kinds_are_typed() {
        assert!(matches!(
            Catalog::parse("mysql:x"),
            Err(DuckLakeError::CatalogKind { ref kind }) if kind == "mysql"
        ));
    }
}
