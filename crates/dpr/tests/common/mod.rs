//! Shared test helpers: a private PostgreSQL server and metadata-store factories.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prefixkv_dpr::metadata::{MetadataStore, PostgresMetadataStore, SqliteMetadataStore};

/// Waits up to `timeout` for `condition`, polling; returns whether it became true.
pub fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn postgres_bin_dir() -> PathBuf {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
        .collect();
    candidates.sort();
    candidates.pop().unwrap_or_else(|| {
        panic!(
            "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: install the \
             `postgresql` package (scripts/test installs it: apt-get install postgresql)"
        )
    })
}

/// Runs a PostgreSQL binary, as the `postgres` OS user when we are root (PostgreSQL refuses root).
fn run_postgres_tool(program: &Path, args: &[&str]) -> std::process::Output {
    let mut command = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    command.args(args);
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

/// A private PostgreSQL server in a temporary directory, stopped (immediate mode) on drop; or the
/// server `scripts/with-postgres` started (`DPR_POSTGRES_HOST`/`DPR_POSTGRES_PORT`), left running.
pub struct PostgresServer {
    bin: PathBuf,
    /// Socket directory.
    host: String,
    /// Our own server's directory (None: an external server).
    directory: Option<tempfile::TempDir>,
    port: u16,
    pid: i32,
    next_database: AtomicU64,
}

impl PostgresServer {
    /// initdb + pg_ctl start on a free loopback port, socket in the temp dir (or the server from
    /// `scripts/with-postgres`).
    pub fn start() -> Self {
        let bin = postgres_bin_dir();
        if let (Ok(host), Ok(port)) = (
            std::env::var("DPR_POSTGRES_HOST"),
            std::env::var("DPR_POSTGRES_PORT"),
        ) {
            let port = port
                .parse()
                .expect("DPR_POSTGRES_PORT must be a port number");
            // Databases are named per process so concurrent test binaries do not collide.
            return Self {
                bin,
                host,
                directory: None,
                port,
                pid: 0,
                next_database: AtomicU64::new(u64::from(std::process::id()) * 1000),
            };
        }
        let directory = tempfile::Builder::new()
            .prefix("dpr-pg")
            .tempdir()
            .expect("temp dir");
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(directory.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown of the PostgreSQL temp dir failed");
        }
        let data = directory.path().join("data");
        let data_str = data.to_str().expect("utf-8 path");
        let output = run_postgres_tool(
            &bin.join("initdb"),
            &[
                "-D",
                data_str,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        assert!(
            output.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let socket_dir = directory.path().to_str().expect("utf-8 path").to_string();
        let options =
            format!("-p {port} -k {socket_dir} -c listen_addresses=127.0.0.1 -c fsync=off");
        let log = directory.path().join("postgres.log");
        let data = data.clone();
        let output = run_postgres_tool(
            &bin.join("pg_ctl"),
            &[
                "-D",
                data_str,
                "-l",
                log.to_str().expect("utf-8"),
                "-w",
                "-t",
                "60",
                "-o",
                &options,
                "start",
            ],
        );
        let pid = std::fs::read_to_string(data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()))
            .unwrap_or(0);
        let server = Self {
            bin,
            host: socket_dir,
            directory: Some(directory),
            port,
            pid,
            next_database: AtomicU64::new(0),
        };
        assert!(
            output.status.success() && pid > 0,
            "pg_ctl start failed: {} {}",
            String::from_utf8_lossy(&output.stdout),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        server
    }

    /// A connection string for `database`.
    pub fn connection_string(&self, database: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={database}",
            self.host, self.port
        )
    }

    /// Creates a fresh database and returns its name.
    pub fn create_database(&self) -> String {
        let name = format!(
            "dpr_case_{}",
            self.next_database.fetch_add(1, Ordering::SeqCst)
        );
        let output = Command::new(self.bin.join("createdb"))
            .args(["-h", &self.host])
            .args(["-p", &self.port.to_string(), "-U", "postgres", &name])
            .output()
            .expect("createdb");
        assert!(
            output.status.success(),
            "createdb failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        name
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let Some(directory) = &self.directory else {
            return; // external server: scripts/with-postgres stops it
        };
        let data = directory.path().join("data");
        let output = run_postgres_tool(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap_or_default(),
                "stop",
                "-m",
                "immediate",
                "-w",
            ],
        );
        if !output.status.success() && self.pid > 0 {
            // SAFETY: signalling the postmaster we started, by its recorded PID.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
    }
}

/// Opens stores on one database: call it again for another connection to the same data.
pub type Opener = Box<dyn Fn() -> Arc<dyn MetadataStore> + Send + Sync>;

/// A fresh SQLite database file; the returned opener opens connections to it.
pub fn sqlite_opener() -> (tempfile::TempDir, Opener) {
    let directory = tempfile::tempdir().expect("temp dir");
    let path = directory.path().join("dpr-metadata.sqlite");
    let opener: Opener =
        Box::new(move || Arc::new(SqliteMetadataStore::open(&path).expect("open SQLite store")));
    (directory, opener)
}

/// A fresh PostgreSQL database on `server`; the returned opener connects to it.
pub fn postgres_opener(server: &PostgresServer) -> Opener {
    let config = server.connection_string(&server.create_database());
    Box::new(move || {
        Arc::new(PostgresMetadataStore::connect(&config).expect("connect to PostgreSQL"))
    })
}
