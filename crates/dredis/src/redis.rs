//! A `redis-server` child process, and the `INFO persistence` fields the proxy watches (the
//! RESP connection to it is `prefixkv_dprnet::connection::RedisConnection`).
//!
//! The proxy owns its Redis: it starts it (`--port P --dir D --save "" --appendonly no`, so the
//! only persistence is the BGSAVE the proxy asks for), stops it with SIGKILL for a restore (nothing
//! in its memory matters then: the committed RDB replaces it), and restarts it on the same port.
//! Every wait here is bounded by a deadline; readiness is a successful `PING`.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prefixkv_dprnet::connection::RedisConnection;
use prefixkv_resp::Reply;

/// How to start a Redis shard.
#[derive(Clone, Debug)]
pub struct RedisServerConfig {
    /// The `redis-server` executable.
    pub executable: PathBuf,
    /// Loopback port it listens on.
    pub port: u16,
    /// Its working directory (`--dir`), where it writes RDB files.
    pub directory: PathBuf,
    /// How long a start may take until `PING` answers.
    pub start_timeout_ms: u64,
}

/// `INFO persistence` of the Redis behind `connection`, as (field, value) pairs.
pub fn info_persistence(connection: &mut RedisConnection) -> io::Result<Vec<(String, String)>> {
    match connection.command(&[b"INFO", b"persistence"])? {
        Reply::BulkString(text) | Reply::VerbatimString { text, .. } => {
            Ok(String::from_utf8_lossy(&text)
                .lines()
                .filter_map(|line| line.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect())
        }
        other => Err(invalid(format!("INFO persistence replied {other:?}"))),
    }
}

fn invalid(error: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error.to_string())
}

/// Looks up `field` in `INFO persistence` output and parses it as an integer.
pub fn info_field(info: &[(String, String)], field: &str) -> io::Result<i64> {
    info.iter()
        .find(|(k, _)| k == field)
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| invalid(format!("INFO persistence lacks an integer field {field}")))
}

/// A running `redis-server` child.
pub struct RedisProcess {
    config: RedisServerConfig,
    child: Option<Child>,
}

impl RedisProcess {
    /// Starts `redis-server` loading `dbfilename` from the configured directory if it exists, and
    /// waits until it answers `PING`.
    pub fn start(config: RedisServerConfig, dbfilename: &str) -> io::Result<Self> {
        let mut process = Self {
            config,
            child: None,
        };
        process.spawn(dbfilename)?;
        Ok(process)
    }

    fn spawn(&mut self, dbfilename: &str) -> io::Result<()> {
        std::fs::create_dir_all(&self.config.directory)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.config.directory.join("redis.log"))?;
        let child = Command::new(&self.config.executable)
            .arg("--port")
            .arg(self.config.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.config.directory)
            .arg("--dbfilename")
            .arg(dbfilename)
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            // Redis reaps a finished BGSAVE child only in serverCron, which runs `hz` times a
            // second: at the default 10 a commit could wait up to 100 ms for the previous save
            // to be seen finished. 100 bounds that by 10 ms.
            .arg("--hz")
            .arg("100")
            // The proxy names each version's RDB file with CONFIG SET dbfilename.
            .arg("--enable-protected-configs")
            .arg("local")
            .arg("--daemonize")
            .arg("no")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "starting {}: {e} (install redis-server or pass --redis-server)",
                        self.config.executable.display()
                    ),
                )
            })?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_millis(self.config.start_timeout_ms);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    self.child = None;
                    return Err(io::Error::other(format!(
                        "redis-server on port {} exited during start ({status}); see {}",
                        self.config.port,
                        self.config.directory.join("redis.log").display()
                    )));
                }
            }
            let attempt = RedisConnection::connect(self.address(), Duration::from_millis(500))
                .and_then(|mut c| c.command(&[b"PING"]));
            match attempt {
                Ok(Reply::SimpleString(s)) if &s[..] == b"PONG" => return Ok(()),
                // LOADING while a large RDB loads, or not listening yet: retry until the deadline.
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                other => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "redis-server on port {} did not answer PING within {} ms (last: {other:?})",
                            self.config.port, self.config.start_timeout_ms
                        ),
                    ))
                }
            }
        }
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.config.port))
    }

    /// Its directory.
    pub fn directory(&self) -> &Path {
        &self.config.directory
    }

    /// Its process id (None while stopped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills it (SIGKILL) and reaps it. Its memory is discarded, which is the point: a restore
    /// replaces it with a committed RDB.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// If the child has exited (on its own: [`stop`](Self::stop) takes it out first), reaps it,
    /// forgets it and describes the exit. Never blocks.
    pub fn reap_if_exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        let pid = child.id();
        let status = match child.try_wait() {
            Ok(Some(status)) => status.to_string(),
            Ok(None) => return None,
            Err(error) => format!("unknown status ({error})"),
        };
        self.child = None;
        Some(format!(
            "redis-server pid {pid} on port {} exited: {status}",
            self.config.port
        ))
    }

    /// Stops it and starts it again loading `dbfilename`.
    pub fn restart(&mut self, dbfilename: &str) -> io::Result<()> {
        self.stop();
        self.spawn(dbfilename)
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
