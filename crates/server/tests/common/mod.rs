//! Test harness: starts the real `prefixkv-server` binary on a free port with a data directory
//! in a tempdir, waits (bounded) until it accepts connections, and kills it by PID on drop.
//! Also a raw RESP client for exact error lines, ([`load`]) writer connections whose
//! acknowledged writes are checked after a restart, and ([`clients`]) client-library check
//! programs run against this server and a real redis-server; ([`differential`]) the cases the
//! differential tests compare with redis-server (the cluster's include them by path).

#![allow(dead_code)]

pub mod clients;
pub mod differential;
pub mod generators;
pub mod load;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use prefixkv_resp::{parse_reply, Limits, Reply};

/// A running server.
pub struct Server {
    child: Option<Child>,
    /// Its port.
    pub port: u16,
    /// Its data directory.
    pub dir: PathBuf,
}

/// Starts the server with `args` and `--dir dir`, expecting it to refuse to start: asserts a
/// failing exit (within a minute) and returns what it wrote to standard error.
pub fn failed_start(args: &[&str], dir: &Path) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_prefixkv-server"));
    command.args(args).arg("--dir").arg(dir);
    let output = prefixkv_testkit::child::output_within(command, Duration::from_secs(60))
        .expect("the server exits instead of serving");
    assert!(!output.status.success(), "the server started: {args:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A free loopback port (bound and released; the server binds it explicitly), outside the
/// kernel's ephemeral range: see `prefixkv_testkit::net`.
pub fn free_port() -> u16 {
    prefixkv_testkit::net::free_port()
}

impl Server {
    /// Starts a server on `dir` with extra flags.
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        for _attempt in 0..5 {
            let port = free_port();
            let child = Command::new(env!("CARGO_BIN_EXE_prefixkv-server"))
                .arg("--port")
                .arg(port.to_string())
                .arg("--dir")
                .arg(dir)
                .arg("--threads")
                .arg("2")
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn prefixkv-server");
            let mut server = Server {
                child: Some(child),
                port,
                dir: dir.to_path_buf(),
            };
            if server.wait_ready(Duration::from_secs(60)) {
                return server;
            }
            // The port may have been taken between probe and bind: retry on another.
            server.kill();
        }
        panic!("prefixkv-server did not start");
    }

    /// Starts a real `redis-server` (no persistence) on `dir` and a free port, for differential
    /// tests; it fails (never skips) when redis-server is missing: `./scripts/test` installs it.
    pub fn start_redis(dir: &Path) -> Server {
        for _attempt in 0..5 {
            let port = free_port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("cannot run redis-server: ./scripts/test installs Debian's redis-server");
            let mut server = Server {
                child: Some(child),
                port,
                dir: dir.to_path_buf(),
            };
            if server.wait_ready(Duration::from_secs(30)) {
                return server;
            }
            server.kill();
        }
        panic!("redis-server did not start");
    }

    fn wait_ready(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_status)) = child.try_wait() {
                    return false;
                }
            }
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                if stream.write_all(b"PING\r\n").is_ok() {
                    // +PONG, or -NOAUTH when a password is set: either way the server serves.
                    let mut reply = [0u8; 7];
                    if stream.read_exact(&mut reply).is_ok()
                        && (&reply == b"+PONG\r\n" || &reply == b"-NOAUTH")
                    {
                        // The listener is ours if our child still runs: a server whose port was
                        // taken exits on its failed bind (then the caller retries another port).
                        std::thread::sleep(Duration::from_millis(50));
                        return match self.child.as_mut() {
                            Some(child) => matches!(child.try_wait(), Ok(None)),
                            None => true,
                        };
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends a signal to the server process.
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is running").id()
    }

    pub fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child's PID.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// Waits for the process to exit on its own (SHUTDOWN), bounded.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// A redis-rs connection (RESP2 or RESP3).
    pub fn connect(&self, resp3: bool) -> redis::Connection {
        let url = if resp3 {
            format!("redis://127.0.0.1:{}/?protocol=resp3", self.port)
        } else {
            format!("redis://127.0.0.1:{}/", self.port)
        };
        redis::Client::open(url).unwrap().get_connection().unwrap()
    }

    /// Waits (at most 60 s) until `INFO persistence` counts `at_least` completed checkpoints: a
    /// way to time a kill after some checkpoints, not a reference for any check.
    pub fn wait_for_checkpoints(&self, at_least: u64) {
        let mut raw = self.raw();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let completed: u64 = raw
                .info_field("persistence", "checkpoints_completed")
                .parse()
                .expect("checkpoints_completed is a number");
            if completed >= at_least {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{completed} checkpoints completed in 60 s, waiting for {at_least}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A raw connection.
    pub fn raw(&self) -> Raw {
        Raw::connect(self.port).expect("connect to the server")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A raw RESP client.
pub struct Raw {
    /// The socket.
    pub stream: TcpStream,
    buffer: BytesMut,
}

/// Appends `args` to `out` as one multibulk request.
pub fn encode_request(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

impl Raw {
    /// Connects to `127.0.0.1:port`; a read waits at most 30 s (a silent server fails the test
    /// instead of hanging it).
    pub fn connect(port: u16) -> std::io::Result<Raw> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Raw {
            stream,
            buffer: BytesMut::new(),
        })
    }

    /// Sends a command as a multibulk request.
    pub fn send(&mut self, args: &[&[u8]]) {
        let mut out = Vec::new();
        encode_request(&mut out, args);
        self.stream.write_all(&out).unwrap();
    }

    /// Sends already encoded requests with one write.
    pub fn send_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads one reply (None at EOF).
    pub fn read(&mut self) -> Option<Reply> {
        loop {
            if let Some(reply) = parse_reply(&mut self.buffer, Limits::default()).unwrap() {
                return Some(reply);
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).ok()?;
            if n == 0 {
                return None;
            }
            self.buffer.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends a command and reads its reply.
    pub fn call(&mut self, args: &[&str]) -> Reply {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.send(&args);
        self.read().expect("reply")
    }

    /// One field of `INFO <section>` (the server's own report: for timing a test, never as the
    /// reference of a check).
    pub fn info_field(&mut self, section: &str, field: &str) -> String {
        let text = match self.call(&["INFO", section]) {
            Reply::BulkString(text) => String::from_utf8_lossy(&text).into_owned(),
            other => panic!("INFO {section}: {other:?}"),
        };
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{field}:")))
            .unwrap_or_else(|| panic!("INFO {section} has no {field}: {text}"))
            .trim()
            .to_string()
    }

    /// The error line of a command that must fail.
    pub fn error(&mut self, args: &[&str]) -> String {
        match self.call(args) {
            Reply::Error(text) => String::from_utf8_lossy(&text).into_owned(),
            other => panic!("{args:?}: expected an error, got {other:?}"),
        }
    }
}

/// Reads Pub/Sub pushes until the `marker` message; the (channel, payload) pairs of the rest.
pub fn notifications_until_marker(subscriber: &mut Raw) -> Vec<(Reply, Reply)> {
    let mut seen = Vec::new();
    loop {
        let Some(Reply::Array(items) | Reply::Push(items)) = subscriber.read() else {
            panic!("the subscriber's connection ended");
        };
        let kind = items[0].clone();
        if kind == Reply::bulk("message") && items[1] == Reply::bulk("marker") {
            return seen;
        }
        if kind == Reply::bulk("pmessage") {
            seen.push((items[2].clone(), items[3].clone()));
        }
    }
}

/// Waits (at most 10 s) until `INFO clients` reports `count` blocked clients: the server's own
/// report, used only to know a client is blocked before acting, never as a check's reference.
pub fn wait_blocked(raw: &mut Raw, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let blocked: u64 = raw
            .info_field("clients", "blocked_clients")
            .parse()
            .unwrap();
        if blocked == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{blocked} blocked clients, waiting for {count}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends a command of text arguments without reading its reply.
/// Sends PING on `raw` until it answers an error (BUSY: a script of another client is past
/// busy-reply-threshold), within a bounded time; returns the error line.
pub fn wait_busy(raw: &mut Raw) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = raw.call(&["PING"]);
        if let Reply::Error(line) = &reply {
            return String::from_utf8_lossy(line).into_owned();
        }
        assert!(Instant::now() < deadline, "never BUSY: {reply:?}");
    }
}

pub fn send(raw: &mut Raw, args: &[&str]) {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    raw.send(&args);
}

/// A server with its defaults and a 64 MB engine, in a fresh directory (kept alive with it).
pub fn small_server() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    (dir, server)
}

/// A connection of `server` subscribed to every keyspace and keyevent channel and to `marker`
/// (which [`notifications_of_batch`] publishes to end a batch), with a bounded read.
pub fn notification_subscriber(server: &Server) -> Raw {
    let mut subscriber = server.raw();
    subscriber
        .stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    subscriber.send(&[b"PSUBSCRIBE", b"__key*__:*"]);
    subscriber.read().unwrap();
    subscriber.send(&[b"SUBSCRIBE", b"marker"]);
    subscriber.read().unwrap();
    subscriber
}

/// Runs `commands` on every writer, then ends the batch with the marker, and returns what each
/// writer's subscriber received meanwhile ((channel, payload) pairs, in order).
pub fn notifications_of_batch(
    writers: &mut [Raw],
    subscribers: &mut [Raw],
    commands: &[Vec<String>],
) -> Vec<Vec<(Reply, Reply)>> {
    for args in commands {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        for writer in writers.iter_mut() {
            writer.call(&refs);
        }
    }
    let mut seen = Vec::new();
    for (writer, subscriber) in writers.iter_mut().zip(subscribers.iter_mut()) {
        writer.call(&["PUBLISH", "marker", "end"]);
        seen.push(notifications_until_marker(subscriber));
    }
    seen
}

/// Fails naming the first message where redis-server's notifications (`seen[0]`) and ours
/// (`seen[1]`) differ, with the messages around it and the batch's commands.
pub fn assert_same_notifications(seen: &[Vec<(Reply, Reply)>], at: &str, commands: &[Vec<String>]) {
    if seen[0] == seen[1] {
        return;
    }
    let index = (0..).find(|&i| seen[0].get(i) != seen[1].get(i)).unwrap();
    let window =
        |s: &[(Reply, Reply)]| s[index.saturating_sub(2)..(index + 4).min(s.len())].to_vec();
    let commands: Vec<String> = commands.iter().map(|args| args.join(" ")).collect();
    panic!(
        "{at}, message {index}:\n  redis-server: {:?}\n  prefixkv:     {:?}\n  commands:\n  {}",
        window(&seen[0]),
        window(&seen[1]),
        commands.join("\n  ")
    );
}
