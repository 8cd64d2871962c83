//! A `redis-server` child process and a minimal blocking RESP connection to it.
//!
//! The proxy owns its Redis: it starts it (`--port P --dir D --save "" --appendonly no`, so the
//! only persistence is the BGSAVE the proxy asks for), stops it with SIGKILL for a restore (nothing
//! in its memory matters then: the committed RDB replaces it), and restarts it on the same port.
//! Every wait here is bounded by a deadline; readiness is a successful `PING`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use prefixkv_resp::{Limits, Reply, ReplyParser};

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

/// Encodes one command as a RESP array of bulk strings.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// A blocking RESP connection (to Redis directly).
pub struct RedisConnection {
    stream: TcpStream,
    buffer: BytesMut,
    parser: ReplyParser,
}

impl RedisConnection {
    /// Connects with `timeout` for the connect and for each read/write.
    pub fn connect(address: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let stream = TcpStream::connect_timeout(&address, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Self {
            stream,
            buffer: BytesMut::with_capacity(16 * 1024),
            parser: ReplyParser::new(Limits::default()),
        })
    }

    /// Writes raw RESP commands.
    pub fn send_raw(&mut self, commands: &[u8]) -> io::Result<()> {
        self.stream.write_all(commands)
    }

    fn fill(&mut self) -> io::Result<Bytes> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "redis closed the connection",
            ));
        }
        self.buffer.extend_from_slice(&chunk[..n]);
        Ok(Bytes::copy_from_slice(&chunk[..n]))
    }

    /// Reads one decoded reply.
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        loop {
            if let Some(reply) = self.parser.parse(&mut self.buffer).map_err(invalid)? {
                return Ok(reply);
            }
            self.fill()?;
        }
    }

    /// Reads exactly `count` replies and appends their raw bytes to `out` (for forwarding).
    /// Bytes after them (replies to commands pipelined later) stay buffered.
    pub fn read_raw_replies(&mut self, count: usize, out: &mut Vec<u8>) -> io::Result<()> {
        let start = out.len();
        let mut seen = 0;
        // `out` mirrors every byte the parser sees; whatever is left unparsed at the end is
        // trimmed off again.
        out.extend_from_slice(&self.buffer);
        loop {
            while seen < count {
                match self.parser.parse(&mut self.buffer).map_err(invalid)? {
                    Some(_) => seen += 1,
                    None => break,
                }
            }
            if seen == count {
                let replies_end = out.len() - self.buffer.len();
                debug_assert!(replies_end >= start);
                out.truncate(replies_end);
                return Ok(());
            }
            let chunk = self.fill()?;
            out.extend_from_slice(&chunk);
        }
    }

    /// Bytes received but not yet consumed as replies.
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// Sends one command and reads its reply.
    pub fn command(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let mut out = Vec::new();
        encode_command(&mut out, args);
        self.send_raw(&out)?;
        self.read_reply()
    }

    /// `INFO persistence` as (field, value) pairs.
    pub fn info_persistence(&mut self) -> io::Result<Vec<(String, String)>> {
        match self.command(&[b"INFO", b"persistence"])? {
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
