//! PostgreSQL backend. tokio-postgres is async; this backend owns a private current-thread tokio
//! runtime and blocks on it for each statement, so the [`MetadataStore`](super::MetadataStore)
//! trait stays synchronous. Consequence: do not call it from inside another tokio runtime's async
//! context (tokio forbids nested `block_on`); use `spawn_blocking` there.
//!
//! The connection task is spawned on the private runtime; a current-thread runtime drives spawned
//! tasks while it is inside `block_on`, which is exactly when a statement is waiting for them.

use tokio_postgres::types::ToSql;

use super::sql::{SqlBackend, SqlMetadataStore, SqlValue};
use super::MetadataError;

/// The PostgreSQL-backed metadata store.
pub type PostgresMetadataStore = SqlMetadataStore<PostgresBackend>;

/// A tokio-postgres client plus the runtime that drives it.
pub struct PostgresBackend {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl SqlMetadataStore<PostgresBackend> {
    /// Connects with a libpq-style connection string (e.g.
    /// `host=/tmp/pg port=5433 user=postgres dbname=postgres`) and creates the schema if needed.
    pub fn connect(config: &str) -> Result<Self, MetadataError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(MetadataError::Runtime)?;
        let (client, connection) =
            runtime.block_on(tokio_postgres::connect(config, tokio_postgres::NoTls))?;
        runtime.spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(%error, "PostgreSQL metadata connection ended");
            }
        });
        Self::new(PostgresBackend { runtime, client })
    }
}

impl PostgresBackend {
    fn parameters(parameters: &[i64]) -> Vec<&(dyn ToSql + Sync)> {
        parameters
            .iter()
            .map(|p| p as &(dyn ToSql + Sync))
            .collect()
    }
}

fn value_parameters(parameters: &[SqlValue]) -> Vec<&(dyn ToSql + Sync)> {
    parameters
        .iter()
        .map(|p| match p {
            SqlValue::Integer(value) => value as &(dyn ToSql + Sync),
            SqlValue::Text(text) => text as &(dyn ToSql + Sync),
        })
        .collect()
}

impl SqlBackend for PostgresBackend {
    fn begin(&mut self) -> Result<(), MetadataError> {
        Ok(self.runtime.block_on(self.client.batch_execute("BEGIN"))?)
    }

    fn begin_read(&mut self) -> Result<(), MetadataError> {
        // One snapshot for every query of the transaction; READ ONLY documents the intent.
        Ok(self.runtime.block_on(
            self.client
                .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
        )?)
    }

    fn commit(&mut self) -> Result<(), MetadataError> {
        Ok(self.runtime.block_on(self.client.batch_execute("COMMIT"))?)
    }

    fn rollback(&mut self) -> Result<(), MetadataError> {
        Ok(self
            .runtime
            .block_on(self.client.batch_execute("ROLLBACK"))?)
    }

    fn lock_schema(&mut self) -> Result<(), MetadataError> {
        // Two processes creating the tables at once can collide in the catalog even with
        // IF NOT EXISTS; a transaction-scoped advisory lock (key: "DPR" in ASCII) serialises them.
        self.runtime.block_on(
            self.client
                .batch_execute("SELECT pg_advisory_xact_lock(4476994)"),
        )?;
        Ok(())
    }

    fn execute(&mut self, sql: &str, parameters: &[i64]) -> Result<u64, MetadataError> {
        let parameters = Self::parameters(parameters);
        Ok(self
            .runtime
            .block_on(self.client.execute(sql, &parameters))?)
    }

    fn query(&mut self, sql: &str, parameters: &[i64]) -> Result<Vec<Vec<i64>>, MetadataError> {
        let parameters = Self::parameters(parameters);
        let rows = self.runtime.block_on(self.client.query(sql, &parameters))?;
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| row.try_get::<_, i64>(i).map_err(MetadataError::from))
                    .collect()
            })
            .collect()
    }

    fn execute_values(&mut self, sql: &str, parameters: &[SqlValue]) -> Result<u64, MetadataError> {
        let parameters = value_parameters(parameters);
        Ok(self
            .runtime
            .block_on(self.client.execute(sql, &parameters))?)
    }

    fn query_values(
        &mut self,
        sql: &str,
        parameters: &[SqlValue],
    ) -> Result<Vec<Vec<SqlValue>>, MetadataError> {
        let parameters = value_parameters(parameters);
        let rows = self.runtime.block_on(self.client.query(sql, &parameters))?;
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        let column = &row.columns()[i];
                        if *column.type_() == tokio_postgres::types::Type::TEXT {
                            Ok(SqlValue::Text(row.try_get::<_, String>(i)?))
                        } else {
                            Ok(SqlValue::Integer(row.try_get::<_, i64>(i)?))
                        }
                    })
                    .collect()
            })
            .collect()
    }
}
