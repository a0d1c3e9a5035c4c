//! Persistence: the control plane's records in SQLite (embedded default) or
//! PostgreSQL (production), through one sqlx [`AnyPool`].
//!
//! One file per concept, each adding its methods to [`Store`]:
//! [`nodes`] (edge nodes, agent token hashes, heartbeats), [`zones`] (zones,
//! NS hosts, scheduled domains), [`rules`] (manual pins and canary splits),
//! [`lines`] (named prefix lists), [`overrides`] (geo corrections),
//! [`certificates`] (edge TLS material), [`sites`] (the edge's customer hosts)
//! and [`purges`] (cache purges and the edges' confirmations).
//!
//! The schema lives in `migrations/sqlite` and `migrations/postgres` (same
//! tables and columns, portable types) and is applied by [`Store::connect`].
//! Every change that touches more than one row runs in one transaction, so a
//! rejected request leaves nothing half-written. The store checks what only it
//! can (existence, uniqueness, references); value checks live beside each
//! record (`validate()` methods) and are also run by the store before writing.
//!
//! Lists come back ordered by their key, compared as Rust strings, so both
//! backends agree whatever the PostgreSQL collation is.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::error::ErrorKind;
use sqlx::migrate::{MigrateError, Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{Any, AnyPool, Decode, Row, Transaction, Type};

pub mod acme;
pub mod asn_carriers;
pub mod certificates;
pub mod cluster;
pub mod dnssec_keys;
pub mod freeze;
mod heartbeats;
pub mod lines;
pub mod measurements;
pub mod names;
pub mod nodes;
pub mod overrides;
pub mod purges;
pub mod rules;
pub mod sites;
pub mod validate;
pub mod zones;

#[cfg(test)]
mod tests;

pub use certificates::Certificate;
pub use nodes::{Heartbeat, NodePatch, hash_token, validate_node, verify_token};
pub use rules::NewRule;
pub use sites::StoredSite;
pub use validate::double_option;

/// The SQLite migrations, `(version, description, sql)`, compiled in. Add a
/// line here for every new file in `migrations/sqlite/` (a test checks).
/// `include_str!` (rather than `sqlx::migrate!`) makes cargo rebuild when a
/// migration file changes and needs no sqlx macros; versions, descriptions
/// and checksums are the ones `sqlx migrate` would record.
const SQLITE_MIGRATIONS: Embedded = Embedded(&[
    (1, "init", include_str!("../../../migrations/sqlite/0001_init.sql")),
    (2, "route freeze", include_str!("../../../migrations/sqlite/0002_route_freeze.sql")),
    (3, "answer modes", include_str!("../../../migrations/sqlite/0003_answer_modes.sql")),
    (4, "sites", include_str!("../../../migrations/sqlite/0004_sites.sql")),
    (5, "cluster", include_str!("../../../migrations/sqlite/0005_cluster.sql")),
    (6, "integrity", include_str!("../../../migrations/sqlite/0006_integrity.sql")),
    (7, "steering", include_str!("../../../migrations/sqlite/0007_steering.sql")),
    (8, "dnssec", include_str!("../../../migrations/sqlite/0008_dnssec.sql")),
    (9, "site scope", include_str!("../../../migrations/sqlite/0009_site_scope.sql")),
    (10, "purge", include_str!("../../../migrations/sqlite/0010_purge.sql")),
    (11, "acme", include_str!("../../../migrations/sqlite/0011_acme.sql")),
    (12, "asn carriers", include_str!("../../../migrations/sqlite/0012_asn_carriers.sql")),
    (13, "site origins", include_str!("../../../migrations/sqlite/0013_site_origins.sql")),
    (14, "dnssec keys", include_str!("../../../migrations/sqlite/0014_dnssec_keys.sql")),
    (15, "acme renewals", include_str!("../../../migrations/sqlite/0015_acme_renewals.sql")),
]);

/// The PostgreSQL migrations: the same versions as [`SQLITE_MIGRATIONS`].
const POSTGRES_MIGRATIONS: Embedded = Embedded(&[
    (1, "init", include_str!("../../../migrations/postgres/0001_init.sql")),
    (2, "route freeze", include_str!("../../../migrations/postgres/0002_route_freeze.sql")),
    (3, "answer modes", include_str!("../../../migrations/postgres/0003_answer_modes.sql")),
    (4, "sites", include_str!("../../../migrations/postgres/0004_sites.sql")),
    (5, "cluster", include_str!("../../../migrations/postgres/0005_cluster.sql")),
    (6, "integrity", include_str!("../../../migrations/postgres/0006_integrity.sql")),
    (7, "steering", include_str!("../../../migrations/postgres/0007_steering.sql")),
    (8, "dnssec", include_str!("../../../migrations/postgres/0008_dnssec.sql")),
    (9, "site scope", include_str!("../../../migrations/postgres/0009_site_scope.sql")),
    (10, "purge", include_str!("../../../migrations/postgres/0010_purge.sql")),
    (11, "acme", include_str!("../../../migrations/postgres/0011_acme.sql")),
    (12, "asn carriers", include_str!("../../../migrations/postgres/0012_asn_carriers.sql")),
    (13, "site origins", include_str!("../../../migrations/postgres/0013_site_origins.sql")),
    (14, "dnssec keys", include_str!("../../../migrations/postgres/0014_dnssec_keys.sql")),
    (15, "acme renewals", include_str!("../../../migrations/postgres/0015_acme_renewals.sql")),
]);

/// Migrations embedded in the binary, as `(version, description, sql)`.
#[derive(Clone, Copy, Debug)]
struct Embedded(&'static [(i64, &'static str, &'static str)]);

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, sqlx::error::BoxDynError>> + Send>> {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|&(version, description, sql)| {
                    Migration::new(
                        version,
                        Cow::Borrowed(description),
                        MigrationType::Simple,
                        Cow::Borrowed(sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

/// Which database engine a [`Store`] talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend a `DATABASE_URL` names, from its scheme.
    pub fn from_url(url: &str) -> Result<Backend, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            Err(StoreError::Invalid {
                field: "database_url",
                reason: format!("{:?} is neither sqlite://PATH nor postgres://…", redact_url(url)),
            })
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a store operation failed. Every variant names the object involved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object to read, change or delete does not exist.
    #[error("{what} {key:?} not found")]
    NotFound { what: &'static str, key: String },
    /// An object with that key already exists.
    #[error("{what} {key:?} already exists")]
    Conflict { what: &'static str, key: String },
    /// A name is already answered otherwise (a node hostname, a zone, a
    /// scheduled name, an NS host: [`names`]). Maps to HTTP 409 naming `field`.
    #[error("{message}")]
    NameTaken { field: &'static str, message: String },
    /// The object cannot be deleted while others refer to it.
    #[error("{what} {key:?} is still used by {by}")]
    InUse { what: &'static str, key: String, by: String },
    /// A field of the submitted record is unacceptable (including references
    /// to objects that do not exist). Maps to HTTP 400/422 naming `field`.
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// The database failed, or returned a value that does not decode. The
    /// message includes the cause, as callers often log only the top level.
    #[error("database error while {context}: {source}")]
    Db {
        context: String,
        #[source]
        source: sqlx::Error,
    },
    /// Applying the embedded migrations failed.
    #[error("migrating the {backend} database failed: {source}")]
    Migrate {
        backend: Backend,
        #[source]
        source: MigrateError,
    },
    /// Preparing the database location failed (e.g. creating its directory).
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<sqlx::Error> for StoreError {
    fn from(source: sqlx::Error) -> Self {
        StoreError::Db { context: "accessing the database".to_string(), source }
    }
}

impl StoreError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        StoreError::Invalid { field, reason: reason.into() }
    }

    pub(crate) fn not_found(what: &'static str, key: impl Into<String>) -> Self {
        StoreError::NotFound { what, key: key.into() }
    }

    pub(crate) fn conflict(what: &'static str, key: impl Into<String>) -> Self {
        StoreError::Conflict { what, key: key.into() }
    }

    /// Whether the database itself failed (not the request: a missing or
    /// conflicting record, a bad field).
    pub fn is_database_fault(&self) -> bool {
        matches!(self, StoreError::Db { .. } | StoreError::Io { .. })
            && self.db_kind().is_none_or(|k| k == ErrorKind::Other)
    }

    /// The database's classification of the underlying error, if it came from the server.
    pub(crate) fn db_kind(&self) -> Option<ErrorKind> {
        match self {
            StoreError::Db { source: sqlx::Error::Database(e), .. } => Some(e.kind()),
            _ => None,
        }
    }
}

/// Attaches "while …" context to sqlx results.
pub(crate) trait DbContext<T> {
    fn ctx<F: FnOnce() -> String>(self, context: F) -> Result<T, StoreError>;
}

impl<T> DbContext<T> for Result<T, sqlx::Error> {
    fn ctx<F: FnOnce() -> String>(self, context: F) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Db { context: context(), source })
    }
}

/// A one-row `… RETURNING` write on the pool, run to its end.
///
/// Not `fetch_one`: stopped at its first row, SQLite's autocommit statement
/// never reaches its commit in this call, so a failed commit (the disk gone
/// read-only) would be lost and the write would look done.
pub(crate) trait ReturningOne {
    fn returning_one(self, pool: &AnyPool) -> impl Future<Output = Result<AnyRow, sqlx::Error>> + Send;
}

impl<'q> ReturningOne for sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    async fn returning_one(self, pool: &AnyPool) -> Result<AnyRow, sqlx::Error> {
        self.fetch_all(pool).await?.into_iter().next().ok_or(sqlx::Error::RowNotFound)
    }
}

/// A handle on the database. Cheap to clone: the connection pool is shared.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// The heartbeat writer's queue ([`heartbeats`]).
    heartbeats: std::sync::Arc<heartbeats::HeartbeatQueue>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("backend", &self.backend).field("connections", &self.pool.size()).finish()
    }
}

impl Store {
    /// Opens the database named by `url` and brings its schema up to date.
    ///
    /// - `sqlite://PATH` (or `sqlite:PATH`): creates the parent directory and the
    ///   file when missing; `sqlite::memory:` gives a private in-memory database
    ///   (one connection, gone when the store is dropped).
    /// - `postgres://…` / `postgresql://…`: the database must exist.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url)?;
        let (url, in_memory) = match backend {
            Backend::Sqlite => prepare_sqlite_url(url)?,
            Backend::Postgres => (url.to_string(), false),
        };
        let mut options = AnyPoolOptions::new().max_connections(match backend {
            Backend::Sqlite if in_memory => 1,
            Backend::Sqlite => 4,
            Backend::Postgres => 10,
        });
        if in_memory {
            // The database lives exactly as long as its only connection.
            options = options.min_connections(1).idle_timeout(None).max_lifetime(None);
        }
        let shown = redact_url(&url);
        let pool = options.connect(&url).await.ctx(|| format!("connecting to {shown}"))?;
        if backend == Backend::Sqlite && !in_memory {
            // Readers do not block the writer; persistent in the file.
            sqlx::query("PRAGMA journal_mode = WAL").execute(&pool).await.ctx(|| format!("enabling WAL on {shown}"))?;
        }
        let migrations = match backend {
            Backend::Sqlite => SQLITE_MIGRATIONS,
            Backend::Postgres => POSTGRES_MIGRATIONS,
        };
        let migrate = async { Migrator::new(migrations).await?.run(&pool).await };
        migrate.await.map_err(|source| StoreError::Migrate { backend, source })?;
        tracing::debug!(%backend, url = %shown, "store connected and migrated");
        Ok(Store { pool, backend, heartbeats: heartbeats::HeartbeatQueue::new() })
    }

    /// The engine behind this store.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Checks that the database answers (for `/healthz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.ctx(|| "pinging the database".to_string())?;
        Ok(())
    }

    /// Writes one row (`store_write_probe`), to learn whether the database
    /// accepts writes when nothing else is written.
    pub async fn probe_write(&self, now_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO store_write_probe (id, written_at_ms) VALUES (1, $1) \
             ON CONFLICT (id) DO UPDATE SET written_at_ms = excluded.written_at_ms",
        )
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .ctx(|| "writing the store's write probe".to_string())?;
        Ok(())
    }

    /// Closes every connection; later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Starts a write transaction. On SQLite it takes the write lock up front
    /// (`BEGIN IMMEDIATE`), so a transaction that reads before it writes cannot
    /// fail half-way with SQLITE_BUSY when another writer got in between.
    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Any>, StoreError> {
        let statement = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        };
        self.pool.begin_with(statement).await.ctx(|| "starting a transaction".to_string())
    }

    /// Starts a read-only snapshot, for reads that span several tables.
    pub(crate) async fn begin_read(&self) -> Result<Transaction<'static, Any>, StoreError> {
        let statement = match self.backend {
            Backend::Sqlite => "BEGIN",
            Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        };
        self.pool.begin_with(statement).await.ctx(|| "starting a read transaction".to_string())
    }
}

/// The file of a SQLite database URL; `None` for PostgreSQL and in-memory databases.
pub fn sqlite_file(url: &str) -> Option<PathBuf> {
    if Backend::from_url(url).ok()? != Backend::Sqlite {
        return None;
    }
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
    let path = rest.split_once('?').map_or(rest, |(p, _)| p);
    let memory = path.is_empty() || path == ":memory:" || rest.contains("mode=memory");
    (!memory).then(|| PathBuf::from(path))
}

/// Turns a SQLite URL into one that creates the file, creating its directory.
/// Returns the URL to connect to and whether it is an in-memory database.
fn prepare_sqlite_url(url: &str) -> Result<(String, bool), StoreError> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let params: Vec<&str> = query.map(|q| q.split('&').filter(|p| !p.is_empty()).collect()).unwrap_or_default();
    let in_memory = path.is_empty() || path == ":memory:" || params.contains(&"mode=memory");
    if in_memory {
        return Ok(("sqlite::memory:".to_string(), true));
    }
    let file = PathBuf::from(path);
    if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| StoreError::Io {
            context: format!("creating the directory {} for the SQLite database", parent.display()),
            source,
        })?;
    }
    let mut params: Vec<String> = params.into_iter().map(str::to_string).collect();
    if !params.iter().any(|p| p.starts_with("mode=")) {
        params.push("mode=rwc".to_string());
    }
    Ok((format!("sqlite://{path}?{}", params.join("&")), false))
}

/// The URL with any password replaced, for logs and errors.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') { format!("{scheme}://{user}:***@{host}{tail}") } else { url.to_string() }
        }
        None => url.to_string(),
    }
}

pub(crate) use crate::clock::now_ms;

/// Reads typed columns of one row, turning every failure into a
/// [`StoreError::Db`] that names the record (`reading node "gz-01"`).
pub(crate) struct Cols<'r> {
    row: &'r AnyRow,
    what: &'static str,
    key: String,
}

impl<'r> Cols<'r> {
    /// Reads the row's key from the text column `key_col` first.
    pub(crate) fn keyed(row: &'r AnyRow, what: &'static str, key_col: &str) -> Result<Self, StoreError> {
        let key: String = row.try_get(key_col).ctx(|| format!("reading the {key_col} of a {what}"))?;
        Ok(Cols { row, what, key })
    }

    /// For rows whose key is not a text column (e.g. rule ids).
    pub(crate) fn with_key(row: &'r AnyRow, what: &'static str, key: String) -> Self {
        Cols { row, what, key }
    }

    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    pub(crate) fn get<T>(&self, col: &str) -> Result<T, StoreError>
    where
        T: Decode<'r, Any> + Type<Any>,
    {
        self.row.try_get(col).ctx(|| format!("reading {} {:?}", self.what, self.key))
    }

    /// A text column parsed with `FromStr`.
    pub(crate) fn parse<T>(&self, col: &str) -> Result<T, StoreError>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        let text: String = self.get(col)?;
        text.parse().map_err(|e| self.corrupt(col, format!("{text:?} does not parse: {e}")))
    }

    /// A nullable text column parsed with `FromStr`.
    pub(crate) fn parse_opt<T>(&self, col: &str) -> Result<Option<T>, StoreError>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        let text: Option<String> = self.get(col)?;
        text.map(|text| text.parse().map_err(|e| self.corrupt(col, format!("{text:?} does not parse: {e}"))))
            .transpose()
    }

    /// An integer column that must fit in `T` (e.g. `u32` SOA fields).
    pub(crate) fn int<T: TryFrom<i64>>(&self, col: &str) -> Result<T, StoreError> {
        let v: i64 = self.get(col)?;
        T::try_from(v).map_err(|_| self.corrupt(col, format!("{v} is out of range")))
    }

    /// A nullable integer column that must fit in `T`.
    pub(crate) fn int_opt<T: TryFrom<i64>>(&self, col: &str) -> Result<Option<T>, StoreError> {
        let v: Option<i64> = self.get(col)?;
        v.map(|v| T::try_from(v).map_err(|_| self.corrupt(col, format!("{v} is out of range")))).transpose()
    }

    /// A decode error for a stored value that the schema should have prevented.
    pub(crate) fn corrupt(&self, col: &str, reason: String) -> StoreError {
        StoreError::Db {
            context: format!("reading {} {:?}", self.what, self.key),
            source: sqlx::Error::ColumnDecode { index: col.to_string(), source: reason.into() },
        }
    }
}
