//! Which DPR finder and which metadata store a DPR deployment (D-Redis or prefixkv-cluster) uses.
//!
//! - [`FinderKind`]: `exact` (default), `approximate` or `hybrid`, libDPR's three finders
//!   (`docs/dpr.md`, "DPR finders: which to pick"). With `approximate` and `hybrid` the proxies
//!   commit with `Vmax` catch-up (`DprWorker::commit_with_catch_up`), which the approximate cut
//!   needs so that one lagging shard does not hold the cut back.
//! - [`MetadataLocation`]: a SQLite file (default: `metadata.sqlite` in the cluster directory) or
//!   a PostgreSQL server, given as a `postgres://…`/`postgresql://…` URL or a `host=… port=…`
//!   conninfo string (both are what `tokio-postgres` parses). Clients, proxies and the manager
//!   must all use the same location.
//!
//! Invariant: the hybrid finder's graph lives in the memory of one finder instance, so its exact
//! part only sees versions reported through that instance: in one `cluster` process that is every
//! shard; standalone `proxy` processes reach the cut only through its approximate part.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use prefixkv_dpr::finder::{ApproximateFinder, DprFinder, ExactFinder, HybridFinder};
use prefixkv_dpr::metadata::{
    MetadataError, MetadataStore, PostgresMetadataStore, SqliteMetadataStore,
};

/// Which DPR finder computes the cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FinderKind {
    /// [`ExactFinder`]: the durable precedence graph, the maximal closed cut.
    #[default]
    Exact,
    /// [`ApproximateFinder`]: version numbers only (`Vmin`); proxies commit with catch-up.
    Approximate,
    /// [`HybridFinder`]: the graph in memory, the approximate cut as the durable fallback.
    Hybrid,
}

impl FinderKind {
    /// Whether proxies should commit with `Vmax` catch-up (the approximate cut needs it).
    pub fn commits_with_catch_up(self) -> bool {
        !matches!(self, FinderKind::Exact)
    }

    /// Builds the finder over `store`.
    pub fn open(self, store: Arc<dyn MetadataStore>) -> Result<Arc<dyn DprFinder>, MetadataError> {
        Ok(match self {
            FinderKind::Exact => Arc::new(ExactFinder::new(store)?),
            FinderKind::Approximate => Arc::new(ApproximateFinder::new(store)),
            FinderKind::Hybrid => Arc::new(HybridFinder::new(store)?),
        })
    }
}

impl FromStr for FinderKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "exact" => Ok(FinderKind::Exact),
            "approximate" => Ok(FinderKind::Approximate),
            "hybrid" => Ok(FinderKind::Hybrid),
            other => Err(format!(
                "unknown finder {other:?}: expected exact, approximate or hybrid"
            )),
        }
    }
}

impl fmt::Display for FinderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FinderKind::Exact => "exact",
            FinderKind::Approximate => "approximate",
            FinderKind::Hybrid => "hybrid",
        })
    }
}

/// Where the DPR metadata store lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetadataLocation {
    /// A SQLite file shared by every process on the machine.
    Sqlite(PathBuf),
    /// A PostgreSQL server: a URL (`postgres://user@host:port/db`) or a conninfo string
    /// (`host=… port=… user=… dbname=…`).
    Postgres(String),
}

impl MetadataLocation {
    /// Reads a metadata location as the command lines take it (`--metadata`, `--metadata-url`):
    /// `sqlite:PATH` is a SQLite file path; otherwise `postgres://`/`postgresql://` URLs and
    /// strings holding `=` (conninfo) are PostgreSQL, and anything else a SQLite file path.
    pub fn parse(text: &str) -> Self {
        // `sqlite:` first: it is how a file path holding `=` is told apart from conninfo.
        if let Some(path) = text.strip_prefix("sqlite:") {
            return MetadataLocation::Sqlite(PathBuf::from(path));
        }
        if text.starts_with("postgres://")
            || text.starts_with("postgresql://")
            || text.contains('=')
        {
            MetadataLocation::Postgres(text.to_string())
        } else {
            MetadataLocation::Sqlite(PathBuf::from(text))
        }
    }

    /// The text [`MetadataLocation::parse`] reads back as this location: how a launcher passes
    /// it to the processes it starts (a SQLite path that would read as PostgreSQL gets the
    /// `sqlite:` prefix). Unlike [`Display`](fmt::Display), it keeps any password in a URL.
    pub fn argument(&self) -> std::ffi::OsString {
        match self {
            MetadataLocation::Sqlite(path) => {
                let text = path.to_string_lossy();
                if MetadataLocation::parse(&text) == *self {
                    path.clone().into_os_string()
                } else {
                    let mut prefixed = std::ffi::OsString::from("sqlite:");
                    prefixed.push(path);
                    prefixed
                }
            }
            MetadataLocation::Postgres(config) => config.into(),
        }
    }

    /// Opens (connects to) the store.
    pub fn open(&self) -> Result<Arc<dyn MetadataStore>, MetadataError> {
        Ok(match self {
            MetadataLocation::Sqlite(path) => Arc::new(SqliteMetadataStore::open(path)?),
            MetadataLocation::Postgres(config) => Arc::new(PostgresMetadataStore::connect(config)?),
        })
    }
}

impl fmt::Display for MetadataLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetadataLocation::Sqlite(path) => write!(f, "{}", path.display()),
            // Conninfo strings may hold a password: show only that it is PostgreSQL.
            MetadataLocation::Postgres(config) => match config.split_once('@') {
                Some((_, rest)) if config.contains("://") => write!(f, "postgres://…@{rest}"),
                _ => f.write_str("postgres (conninfo)"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_and_finders_parse() {
        assert_eq!(
            MetadataLocation::parse("/tmp/m.sqlite"),
            MetadataLocation::Sqlite("/tmp/m.sqlite".into())
        );
        assert_eq!(
            MetadataLocation::parse("sqlite:/tmp/m.sqlite"),
            MetadataLocation::Sqlite("/tmp/m.sqlite".into())
        );
        for postgres in [
            "postgres://u@h:5/db",
            "postgresql://h/db",
            "host=/tmp port=5432",
        ] {
            assert_eq!(
                MetadataLocation::parse(postgres),
                MetadataLocation::Postgres(postgres.into())
            );
        }
        assert_eq!(
            MetadataLocation::parse("postgres://u:secret@h:5/db").to_string(),
            "postgres://…@h:5/db"
        );
        for location in [
            MetadataLocation::Sqlite("/tmp/m.sqlite".into()),
            MetadataLocation::Sqlite("/tmp/a=b/m.sqlite".into()),
            MetadataLocation::Sqlite("postgres://not-a-url".into()),
            MetadataLocation::Postgres("postgres://u:secret@h:5/db".into()),
            MetadataLocation::Postgres("host=/tmp port=5432".into()),
        ] {
            let argument = location.argument();
            assert_eq!(
                MetadataLocation::parse(argument.to_str().unwrap()),
                location,
                "{argument:?} reads back"
            );
        }
        assert_eq!(
            MetadataLocation::Sqlite("/tmp/a=b".into()).argument(),
            "sqlite:/tmp/a=b"
        );
        assert_eq!("hybrid".parse::<FinderKind>(), Ok(FinderKind::Hybrid));
        assert!("fast".parse::<FinderKind>().is_err());
        assert!(!FinderKind::Exact.commits_with_catch_up());
        assert!(FinderKind::Approximate.commits_with_catch_up());
    }
}
