//! One implementation of [`MetadataStore`] over any SQL backend that can run parameterised
//! statements on `i64` values. Both backends share the SQL text (the common subset of SQLite and
//! PostgreSQL: `$n` placeholders, `ON CONFLICT`, `COALESCE`), so their behaviour cannot drift.

use parking_lot::Mutex;

use super::ownership::{self, PartitionRange};
use super::{MetadataError, MetadataStore, PersistedVersion, WorkerRecord};
use crate::{ClusterState, Cut, Version, WorkerId, WorkerVersion, WorldLine};

/// A connection able to run the store's SQL. Placeholders are written `$1`, `$2`, ...
pub trait SqlBackend: Send {
    /// Starts a transaction that takes the database's write lock as early as the backend allows.
    fn begin(&mut self) -> Result<(), MetadataError>;
    /// Starts a read-only transaction that sees one consistent snapshot (never half of another
    /// transaction's writes) without taking the write lock or writing anything.
    fn begin_read(&mut self) -> Result<(), MetadataError>;
    /// Commits the open transaction.
    fn commit(&mut self) -> Result<(), MetadataError>;
    /// Rolls back the open transaction.
    fn rollback(&mut self) -> Result<(), MetadataError>;
    /// Runs a statement; returns the number of rows changed.
    fn execute(&mut self, sql: &str, parameters: &[i64]) -> Result<u64, MetadataError>;
    /// Runs a query whose columns are all integers.
    fn query(&mut self, sql: &str, parameters: &[i64]) -> Result<Vec<Vec<i64>>, MetadataError>;
    /// Inside the schema-creating transaction: serialise schema creation across processes where
    /// `CREATE TABLE IF NOT EXISTS` alone can race (PostgreSQL). Default: nothing to do.
    fn lock_schema(&mut self) -> Result<(), MetadataError> {
        Ok(())
    }
    /// Runs a statement whose parameters may be text (the ownership table's addresses).
    /// Default: unsupported.
    fn execute_values(&mut self, sql: &str, parameters: &[SqlValue]) -> Result<u64, MetadataError> {
        let _ = parameters;
        Err(MetadataError::Invalid(format!(
            "this SQL backend runs integer statements only: {sql}"
        )))
    }
    /// Runs a query whose columns are integers or text. Default: unsupported.
    fn query_values(
        &mut self,
        sql: &str,
        parameters: &[SqlValue],
    ) -> Result<Vec<Vec<SqlValue>>, MetadataError> {
        let _ = parameters;
        Err(MetadataError::Invalid(format!(
            "this SQL backend runs integer queries only: {sql}"
        )))
    }
}

/// A parameter or column of [`SqlBackend::execute_values`] and [`SqlBackend::query_values`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqlValue {
    /// A `BIGINT`.
    Integer(i64),
    /// A `TEXT`.
    Text(String),
}

impl SqlValue {
    fn integer(&self, what: &str) -> Result<u64, MetadataError> {
        match self {
            Self::Integer(value) => from_column(what, *value),
            Self::Text(text) => Err(MetadataError::Invalid(format!(
                "{what}: expected an integer, found text {text:?}"
            ))),
        }
    }
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS dpr_cluster (id BIGINT PRIMARY KEY, world_line BIGINT NOT NULL, recovering BIGINT NOT NULL, CHECK (id = 1))",
    "CREATE TABLE IF NOT EXISTS dpr_workers (worker_id BIGINT PRIMARY KEY, last_heartbeat_ms BIGINT NOT NULL, recovered_world_line BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS dpr_versions (worker_id BIGINT NOT NULL, version BIGINT NOT NULL, world_line BIGINT NOT NULL, has_dependencies BIGINT NOT NULL, PRIMARY KEY (worker_id, version))",
    "CREATE TABLE IF NOT EXISTS dpr_dependencies (worker_id BIGINT NOT NULL, version BIGINT NOT NULL, dependency_worker_id BIGINT NOT NULL, dependency_version BIGINT NOT NULL, PRIMARY KEY (worker_id, version, dependency_worker_id))",
    "CREATE TABLE IF NOT EXISTS dpr_cut (worker_id BIGINT PRIMARY KEY, version BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS dpr_world_lines (world_line BIGINT NOT NULL, worker_id BIGINT NOT NULL, version BIGINT NOT NULL, PRIMARY KEY (world_line, worker_id))",
    "CREATE TABLE IF NOT EXISTS dpr_ownership (first_partition BIGINT PRIMARY KEY, last_partition BIGINT NOT NULL, worker_id BIGINT NOT NULL, address TEXT NOT NULL)",
    "INSERT INTO dpr_cluster (id, world_line, recovering) VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING",
];

/// Serialises writers: every transaction starts by touching the single cluster row.
const LOCK_CLUSTER_ROW: &str = "UPDATE dpr_cluster SET world_line = world_line WHERE id = 1";

fn to_column(what: &'static str, value: u64) -> Result<i64, MetadataError> {
    i64::try_from(value).map_err(|_| MetadataError::OutOfRange { what, value })
}

fn from_column(what: &str, value: i64) -> Result<u64, MetadataError> {
    u64::try_from(value).map_err(|_| MetadataError::Invalid(format!("negative {what}: {value}")))
}

/// [`MetadataStore`] over a [`SqlBackend`]; one connection, used under a mutex.
pub struct SqlMetadataStore<B: SqlBackend> {
    backend: Mutex<B>,
}

impl<B: SqlBackend> SqlMetadataStore<B> {
    /// Wraps `backend`, creating the schema if it does not exist.
    pub fn new(backend: B) -> Result<Self, MetadataError> {
        let store = Self {
            backend: Mutex::new(backend),
        };
        {
            let mut backend = store.backend.lock();
            backend.begin()?;
            let result = backend.lock_schema().and_then(|()| {
                SCHEMA
                    .iter()
                    .try_for_each(|sql| backend.execute(sql, &[]).map(|_| ()))
            });
            match result {
                Ok(()) => backend.commit()?,
                Err(error) => {
                    let _ = backend.rollback();
                    return Err(error);
                }
            }
        }
        Ok(store)
    }

    /// Runs `body` (queries only) on one snapshot, without the write lock: reads of the cut,
    /// the workers and the versions neither wait for writers nor write (and fsync) anything.
    fn read_transaction<T>(
        &self,
        body: impl FnOnce(&mut B) -> Result<T, MetadataError>,
    ) -> Result<T, MetadataError> {
        let mut backend = self.backend.lock();
        backend.begin_read()?;
        match body(&mut backend) {
            Ok(value) => {
                backend.commit()?;
                Ok(value)
            }
            Err(error) => {
                let _ = backend.rollback();
                Err(error)
            }
        }
    }

    fn transaction<T>(
        &self,
        body: impl FnOnce(&mut B) -> Result<T, MetadataError>,
    ) -> Result<T, MetadataError> {
        let mut backend = self.backend.lock();
        backend.begin()?;
        let result = backend
            .execute(LOCK_CLUSTER_ROW, &[])
            .and_then(|_| body(&mut backend));
        match result {
            Ok(value) => {
                backend.commit()?;
                Ok(value)
            }
            Err(error) => {
                let _ = backend.rollback();
                Err(error)
            }
        }
    }
}

/// Validated ownership ranges as table rows.
fn ownership_rows(ranges: &[PartitionRange]) -> Result<Vec<[SqlValue; 4]>, MetadataError> {
    ownership::validate(ranges)?;
    ranges
        .iter()
        .map(|range| {
            Ok([
                SqlValue::Integer(to_column("first partition", range.first)?),
                SqlValue::Integer(to_column("last partition", range.last)?),
                SqlValue::Integer(to_column("worker id", range.worker)?),
                SqlValue::Text(range.address.clone()),
            ])
        })
        .collect()
}

/// Replaces the ownership table's rows (inside the caller's transaction).
fn replace_ownership(
    backend: &mut impl SqlBackend,
    rows: &[[SqlValue; 4]],
) -> Result<(), MetadataError> {
    backend.execute("DELETE FROM dpr_ownership", &[])?;
    for row in rows {
        backend.execute_values(
            "INSERT INTO dpr_ownership (first_partition, last_partition, worker_id, address) \
             VALUES ($1, $2, $3, $4)",
            row,
        )?;
    }
    Ok(())
}

fn read_cluster(backend: &mut impl SqlBackend) -> Result<(WorldLine, bool), MetadataError> {
    let rows = backend.query(
        "SELECT world_line, recovering FROM dpr_cluster WHERE id = 1",
        &[],
    )?;
    let row = rows
        .first()
        .ok_or_else(|| MetadataError::Invalid("dpr_cluster has no row".into()))?;
    Ok((from_column("world_line", row[0])?, row[1] != 0))
}

fn read_cut(backend: &mut impl SqlBackend) -> Result<Cut, MetadataError> {
    let mut cut = Cut::new();
    for row in backend.query("SELECT worker_id, version FROM dpr_cut", &[])? {
        cut.insert(
            from_column("worker_id", row[0])?,
            from_column("cut version", row[1])?,
        );
    }
    Ok(cut)
}

impl<B: SqlBackend> MetadataStore for SqlMetadataStore<B> {
    fn register_worker(&self, worker: WorkerId, now_ms: u64) -> Result<(), MetadataError> {
        let worker = to_column("worker id", worker)?;
        let now_ms = to_column("heartbeat time", now_ms)?;
        self.transaction(|backend| {
            backend.execute(
                "INSERT INTO dpr_workers (worker_id, last_heartbeat_ms, recovered_world_line) \
                 VALUES ($1, $2, (SELECT world_line FROM dpr_cluster WHERE id = 1)) \
                 ON CONFLICT (worker_id) DO UPDATE SET last_heartbeat_ms = excluded.last_heartbeat_ms",
                &[worker, now_ms],
            )?;
            backend.execute(
                "INSERT INTO dpr_cut (worker_id, version) VALUES ($1, 0) ON CONFLICT (worker_id) DO NOTHING",
                &[worker],
            )?;
            Ok(())
        })
    }

    fn remove_worker(&self, worker: WorkerId) -> Result<(), MetadataError> {
        let worker = to_column("worker id", worker)?;
        self.transaction(|backend| {
            for table in ["dpr_dependencies", "dpr_versions", "dpr_cut", "dpr_workers"] {
                backend.execute(
                    &format!("DELETE FROM {table} WHERE worker_id = $1"),
                    &[worker],
                )?;
            }
            Ok(())
        })
    }

    fn heartbeat(&self, worker: WorkerId, now_ms: u64) -> Result<(), MetadataError> {
        let worker = to_column("worker id", worker)?;
        let now_ms = to_column("heartbeat time", now_ms)?;
        self.transaction(|backend| {
            backend.execute(
                "UPDATE dpr_workers SET last_heartbeat_ms = $2 WHERE worker_id = $1 AND last_heartbeat_ms < $2",
                &[worker, now_ms],
            )?;
            Ok(())
        })
    }

    fn workers(&self) -> Result<Vec<WorkerRecord>, MetadataError> {
        self.read_transaction(|backend| {
            backend
                .query(
                    "SELECT worker_id, last_heartbeat_ms, recovered_world_line FROM dpr_workers ORDER BY worker_id",
                    &[],
                )?
                .into_iter()
                .map(|row| {
                    Ok(WorkerRecord {
                        worker: from_column("worker_id", row[0])?,
                        last_heartbeat_ms: from_column("last_heartbeat_ms", row[1])?,
                        recovered_world_line: from_column("recovered_world_line", row[2])?,
                    })
                })
                .collect()
        })
    }

    fn add_persisted_version(
        &self,
        world_line: WorldLine,
        version: WorkerVersion,
        dependencies: Option<&[WorkerVersion]>,
    ) -> Result<bool, MetadataError> {
        let world_line_column = to_column("world-line", world_line)?;
        let worker = to_column("worker id", version.worker)?;
        let version_column = to_column("version", version.version)?;
        let mut dependency_columns = Vec::new();
        for dependency in dependencies.unwrap_or(&[]) {
            dependency_columns.push((
                to_column("dependency worker id", dependency.worker)?,
                to_column("dependency version", dependency.version)?,
            ));
        }
        self.transaction(|backend| {
            let (current, _) = read_cluster(backend)?;
            if current != world_line {
                return Ok(false);
            }
            backend.execute(
                "INSERT INTO dpr_versions (worker_id, version, world_line, has_dependencies) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (worker_id, version) DO NOTHING",
                &[worker, version_column, world_line_column, i64::from(dependencies.is_some())],
            )?;
            for (dependency_worker, dependency_version) in &dependency_columns {
                backend.execute(
                    "INSERT INTO dpr_dependencies (worker_id, version, dependency_worker_id, dependency_version) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (worker_id, version, dependency_worker_id) DO NOTHING",
                    &[worker, version_column, *dependency_worker, *dependency_version],
                )?;
            }
            Ok(true)
        })
    }

    fn persisted_versions(&self) -> Result<Vec<PersistedVersion>, MetadataError> {
        self.read_transaction(|backend| {
            let mut versions = Vec::new();
            for row in backend.query(
                "SELECT worker_id, version, has_dependencies FROM dpr_versions ORDER BY worker_id, version",
                &[],
            )? {
                versions.push(PersistedVersion {
                    version: WorkerVersion::new(from_column("worker_id", row[0])?, from_column("version", row[1])?),
                    dependencies: (row[2] != 0).then(Vec::new),
                });
            }
            let mut index = std::collections::BTreeMap::new();
            for (position, persisted) in versions.iter().enumerate() {
                index.insert(persisted.version, position);
            }
            for row in backend.query(
                "SELECT worker_id, version, dependency_worker_id, dependency_version FROM dpr_dependencies \
                 ORDER BY worker_id, version, dependency_worker_id",
                &[],
            )? {
                let vertex = WorkerVersion::new(from_column("worker_id", row[0])?, from_column("version", row[1])?);
                let dependency = WorkerVersion::new(
                    from_column("dependency_worker_id", row[2])?,
                    from_column("dependency_version", row[3])?,
                );
                if let Some(list) = index
                    .get(&vertex)
                    .and_then(|&position| versions[position].dependencies.as_mut())
                {
                    list.push(dependency);
                }
            }
            Ok(versions)
        })
    }

    fn cluster_state(&self) -> Result<ClusterState, MetadataError> {
        self.read_transaction(|backend| {
            let (world_line, recovering) = read_cluster(backend)?;
            Ok(ClusterState {
                world_line,
                cut: read_cut(backend)?,
                recovering,
            })
        })
    }

    fn publish_cut(&self, world_line: WorldLine, cut: &Cut) -> Result<bool, MetadataError> {
        let mut columns = Vec::new();
        for (&worker, &version) in cut {
            columns.push((
                to_column("worker id", worker)?,
                to_column("cut version", version)?,
            ));
        }
        self.transaction(|backend| {
            let (current, recovering) = read_cluster(backend)?;
            if current != world_line || recovering {
                return Ok(false);
            }
            for &(worker, version) in &columns {
                backend.execute(
                    "UPDATE dpr_cut SET version = $2 WHERE worker_id = $1 AND version < $2",
                    &[worker, version],
                )?;
                backend.execute(
                    "DELETE FROM dpr_dependencies WHERE worker_id = $1 AND version < $2",
                    &[worker, version],
                )?;
                backend.execute(
                    "DELETE FROM dpr_versions WHERE worker_id = $1 AND version < $2",
                    &[worker, version],
                )?;
            }
            Ok(true)
        })
    }

    fn advance_world_line(&self, expected: WorldLine) -> Result<ClusterState, MetadataError> {
        self.transaction(|backend| {
            let (current, recovering) = read_cluster(backend)?;
            if current == expected {
                backend.execute(
                    "UPDATE dpr_cluster SET world_line = world_line + 1, recovering = 1 WHERE id = 1",
                    &[],
                )?;
                // Remember the cut this world-line starts from: sessions still on an older
                // world-line judge their operations against it, not against later cuts.
                backend.execute(
                    "INSERT INTO dpr_world_lines (world_line, worker_id, version) \
                     SELECT $1, worker_id, version FROM dpr_cut",
                    &[to_column("world-line", expected + 1)?],
                )?;
                for table in ["dpr_dependencies", "dpr_versions"] {
                    backend.execute(
                        &format!(
                            "DELETE FROM {table} WHERE version > COALESCE((SELECT c.version FROM dpr_cut c \
                             WHERE c.worker_id = {table}.worker_id), 0)"
                        ),
                        &[],
                    )?;
                }
                let (world_line, recovering) = read_cluster(backend)?;
                debug_assert!(recovering && world_line == expected + 1);
                return Ok(ClusterState {
                    world_line,
                    cut: read_cut(backend)?,
                    recovering,
                });
            }
            Ok(ClusterState {
                world_line: current,
                cut: read_cut(backend)?,
                recovering,
            })
        })
    }

    fn rollback_target(&self, from: WorldLine) -> Result<ClusterState, MetadataError> {
        let next = to_column("world-line", from.saturating_add(1))?;
        self.transaction(|backend| {
            let (world_line, recovering) = read_cluster(backend)?;
            if world_line <= from {
                return Ok(ClusterState {
                    world_line,
                    cut: read_cut(backend)?,
                    recovering,
                });
            }
            let mut cut = Cut::new();
            for row in backend.query(
                "SELECT worker_id, version FROM dpr_world_lines WHERE world_line = $1",
                &[next],
            )? {
                cut.insert(
                    from_column("worker_id", row[0])?,
                    from_column("version", row[1])?,
                );
            }
            Ok(ClusterState {
                world_line,
                cut,
                recovering,
            })
        })
    }

    fn report_recovered(
        &self,
        worker: WorkerId,
        world_line: WorldLine,
    ) -> Result<(), MetadataError> {
        let worker = to_column("worker id", worker)?;
        let world_line = to_column("world-line", world_line)?;
        self.transaction(|backend| {
            backend.execute(
                "UPDATE dpr_workers SET recovered_world_line = $2 WHERE worker_id = $1 AND recovered_world_line < $2",
                &[worker, world_line],
            )?;
            Ok(())
        })
    }

    fn finish_recovery(&self, world_line: WorldLine) -> Result<bool, MetadataError> {
        let world_line_column = to_column("world-line", world_line)?;
        self.transaction(|backend| {
            let (current, recovering) = read_cluster(backend)?;
            if current != world_line {
                return Ok(false);
            }
            if !recovering {
                return Ok(true);
            }
            let behind = backend.query(
                "SELECT COUNT(*) FROM dpr_workers WHERE recovered_world_line < $1",
                &[world_line_column],
            )?;
            if behind.first().map(|row| row[0]).unwrap_or(0) > 0 {
                return Ok(false);
            }
            backend.execute("UPDATE dpr_cluster SET recovering = 0 WHERE id = 1", &[])?;
            Ok(true)
        })
    }

    fn max_version(&self) -> Result<Version, MetadataError> {
        self.read_transaction(|backend| {
            let rows = backend.query(
                "SELECT COALESCE((SELECT MAX(version) FROM dpr_versions), 0), COALESCE((SELECT MAX(version) FROM dpr_cut), 0)",
                &[],
            )?;
            let row = rows
                .first()
                .ok_or_else(|| MetadataError::Invalid("max version query returned no row".into()))?;
            Ok(from_column("version", row[0])?.max(from_column("version", row[1])?))
        })
    }

    fn set_ownership(&self, ranges: &[PartitionRange]) -> Result<(), MetadataError> {
        let rows = ownership_rows(ranges)?;
        self.transaction(|backend| replace_ownership(backend, &rows))
    }

    fn set_ownership_in(
        &self,
        world_line: WorldLine,
        ranges: &[PartitionRange],
    ) -> Result<bool, MetadataError> {
        let rows = ownership_rows(ranges)?;
        self.transaction(|backend| {
            let (current, recovering) = read_cluster(backend)?;
            if current != world_line || recovering {
                return Ok(false);
            }
            replace_ownership(backend, &rows)?;
            Ok(true)
        })
    }

    fn ownership(&self) -> Result<Vec<PartitionRange>, MetadataError> {
        let ranges = self.read_transaction(|backend| {
            let count = backend.query("SELECT COUNT(*) FROM dpr_ownership", &[])?;
            let count = count.first().map_or(0, |row| row[0]);
            if count > ownership::MAX_RANGES as i64 {
                return Err(MetadataError::Invalid(format!(
                    "dpr_ownership holds {count} ranges (at most {})",
                    ownership::MAX_RANGES
                )));
            }
            backend
                .query_values(
                    "SELECT first_partition, last_partition, worker_id, address FROM dpr_ownership \
                     ORDER BY first_partition",
                    &[],
                )?
                .into_iter()
                .map(|row| match <[SqlValue; 4]>::try_from(row) {
                    Ok([first, last, worker, SqlValue::Text(address)]) => Ok(PartitionRange {
                        first: first.integer("first_partition")?,
                        last: last.integer("last_partition")?,
                        worker: worker.integer("worker_id")?,
                        address,
                    }),
                    Ok(row) => Err(MetadataError::Invalid(format!(
                        "dpr_ownership row {row:?}: the address is not text"
                    ))),
                    Err(row) => Err(MetadataError::Invalid(format!(
                        "dpr_ownership row has {} columns, expected 4",
                        row.len()
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()
        })?;
        // A table written by something else than `set_ownership` must still be sound to use.
        ownership::validate(&ranges)?;
        Ok(ranges)
    }
}
