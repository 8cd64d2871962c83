//! SQLite backend (rusqlite, bundled SQLite): the default metadata store. One database file is
//! shared by every process on the machine; WAL mode lets readers proceed during a write, and the
//! busy timeout makes concurrent writers wait for the lock instead of failing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::sql::{SqlBackend, SqlMetadataStore, SqlValue};
use super::MetadataError;

/// How long a writer waits for another process's write lock before giving up.
pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 10_000;

/// The SQLite-backed metadata store.
pub type SqliteMetadataStore = SqlMetadataStore<SqliteBackend>;

/// A rusqlite connection adapted to [`SqlBackend`].
pub struct SqliteBackend {
    path: PathBuf,
    connection: rusqlite::Connection,
}

impl SqliteBackend {
    fn error(&self, source: rusqlite::Error) -> MetadataError {
        MetadataError::Sqlite {
            path: self.path.display().to_string(),
            source,
        }
    }
}

impl SqlMetadataStore<SqliteBackend> {
    /// Opens (creating if needed) the database at `path` in WAL mode with the default busy timeout.
    ///
    /// Several processes may open a fresh database at once. SQLite does not call the busy handler
    /// in every lock conflict of that first open (switching to WAL and creating the schema can
    /// meet a lock held by a connection that is itself waiting, and SQLite then fails at once
    /// rather than risk a deadlock), so the whole open is retried on `SQLITE_BUSY` until the busy
    /// timeout has passed.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MetadataError> {
        let path = path.as_ref().to_path_buf();
        let deadline = Instant::now() + Duration::from_millis(DEFAULT_BUSY_TIMEOUT_MS);
        let mut backoff = Duration::from_millis(1);
        loop {
            match Self::open_once(&path) {
                Err(error) if is_busy(&error) && Instant::now() < deadline => {
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
                result => return result,
            }
        }
    }

    fn open_once(path: &Path) -> Result<Self, MetadataError> {
        let error = |source| MetadataError::Sqlite {
            path: path.display().to_string(),
            source,
        };
        let connection = rusqlite::Connection::open(path).map_err(error)?;
        connection
            .busy_timeout(Duration::from_millis(DEFAULT_BUSY_TIMEOUT_MS))
            .map_err(error)?;
        let mode: String = connection
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .map_err(error)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(MetadataError::Invalid(format!(
                "{}: SQLite refused WAL mode (got {mode}); put the database on a local filesystem",
                path.display()
            )));
        }
        // WAL + NORMAL is durable at each checkpoint but may lose the last transactions on power
        // loss; the cut must never move back, so use FULL.
        connection
            .pragma_update(None, "synchronous", "FULL")
            .map_err(error)?;
        Self::new(SqliteBackend {
            path: path.to_path_buf(),
            connection,
        })
    }
}

/// Whether `error` is SQLite's "database is busy/locked", which a later attempt may not meet.
fn is_busy(error: &MetadataError) -> bool {
    matches!(
        error,
        MetadataError::Sqlite {
            source: rusqlite::Error::SqliteFailure(failure, _),
            ..
        } if matches!(
            failure.code,
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
        )
    )
}

/// `$n` → `?n`: SQLite's positional form of the same placeholder.
fn to_sqlite(sql: &str) -> String {
    sql.replace('$', "?")
}

impl SqlBackend for SqliteBackend {
    fn begin(&mut self) -> Result<(), MetadataError> {
        self.connection
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| self.error(e))
    }

    fn begin_read(&mut self) -> Result<(), MetadataError> {
        // Deferred: in WAL mode the first SELECT pins a snapshot; no lock is taken for writing.
        self.connection
            .execute_batch("BEGIN DEFERRED")
            .map_err(|e| self.error(e))
    }

    fn commit(&mut self) -> Result<(), MetadataError> {
        self.connection
            .execute_batch("COMMIT")
            .map_err(|e| self.error(e))
    }

    fn rollback(&mut self) -> Result<(), MetadataError> {
        self.connection
            .execute_batch("ROLLBACK")
            .map_err(|e| self.error(e))
    }

    fn execute(&mut self, sql: &str, parameters: &[i64]) -> Result<u64, MetadataError> {
        let changed = self
            .connection
            .prepare_cached(&to_sqlite(sql))
            .and_then(|mut statement| {
                statement.execute(rusqlite::params_from_iter(parameters.iter()))
            })
            .map_err(|e| self.error(e))?;
        Ok(changed as u64)
    }

    fn query(&mut self, sql: &str, parameters: &[i64]) -> Result<Vec<Vec<i64>>, MetadataError> {
        let result = (|| {
            let mut statement = self.connection.prepare_cached(&to_sqlite(sql))?;
            let columns = statement.column_count();
            let rows =
                statement.query_map(rusqlite::params_from_iter(parameters.iter()), |row| {
                    (0..columns)
                        .map(|i| row.get::<_, i64>(i))
                        .collect::<Result<Vec<_>, _>>()
                })?;
            rows.collect::<Result<Vec<_>, _>>()
        })();
        result.map_err(|e| self.error(e))
    }

    fn execute_values(&mut self, sql: &str, parameters: &[SqlValue]) -> Result<u64, MetadataError> {
        let changed = self
            .connection
            .prepare_cached(&to_sqlite(sql))
            .and_then(|mut statement| {
                statement.execute(rusqlite::params_from_iter(parameters.iter().map(to_value)))
            })
            .map_err(|e| self.error(e))?;
        Ok(changed as u64)
    }

    fn query_values(
        &mut self,
        sql: &str,
        parameters: &[SqlValue],
    ) -> Result<Vec<Vec<SqlValue>>, MetadataError> {
        let result = (|| {
            let mut statement = self.connection.prepare_cached(&to_sqlite(sql))?;
            let columns = statement.column_count();
            let rows = statement.query_map(
                rusqlite::params_from_iter(parameters.iter().map(to_value)),
                |row| {
                    (0..columns)
                        .map(|i| match row.get::<_, rusqlite::types::Value>(i)? {
                            rusqlite::types::Value::Integer(value) => Ok(SqlValue::Integer(value)),
                            rusqlite::types::Value::Text(text) => Ok(SqlValue::Text(text)),
                            _ => Err(rusqlite::Error::InvalidColumnType(
                                i,
                                format!("column {i}"),
                                rusqlite::types::Type::Blob,
                            )),
                        })
                        .collect::<Result<Vec<_>, _>>()
                },
            )?;
            rows.collect::<Result<Vec<_>, _>>()
        })();
        result.map_err(|e| self.error(e))
    }
}

fn to_value(value: &SqlValue) -> rusqlite::types::Value {
    match value {
        SqlValue::Integer(value) => rusqlite::types::Value::Integer(*value),
        SqlValue::Text(text) => rusqlite::types::Value::Text(text.clone()),
    }
}
