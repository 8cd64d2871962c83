//! The two contenders as child processes: `prefixkv-server` and `redis-server`, each on a free
//! loopback port with a fresh temporary data directory and matched durability.
//!
//! Invariants: a [`ServerProcess`] owns its child; dropping it SIGKILLs that PID and reaps it, on
//! every exit path of the experiment (errors, panics unwinding through the run). Nothing is ever
//! killed by name. A BGSAVE child Redis forked would not die with its parent, so
//! [`ServerProcess::kill`] first lists the server's children (`/proc/<pid>/task/*/children`) and
//! SIGKILLs them by PID too.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Ours.
    Prefixkv,
    /// The baseline.
    Redis,
}

impl Kind {
    /// Row label.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Prefixkv => "prefixkv",
            Kind::Redis => "redis",
        }
    }
}

/// A matched durability setting of both servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Ours `appendfsync none`; Redis `appendonly no`, `save ""`.
    None,
    /// Ours `appendfsync everysec`; Redis `appendonly yes`, `appendfsync everysec`, `save ""`.
    EverySec,
    /// Ours `appendfsync always`; Redis `appendonly yes`, `appendfsync always`, `save ""`.
    Always,
}

impl Durability {
    /// Row label, also our `appendfsync` value.
    pub fn name(self) -> &'static str {
        match self {
            Durability::None => "none",
            Durability::EverySec => "everysec",
            Durability::Always => "always",
        }
    }

    /// Parses a label.
    pub fn parse(text: &str) -> Result<Durability> {
        match text {
            "none" => Ok(Durability::None),
            "everysec" => Ok(Durability::EverySec),
            "always" => Ok(Durability::Always),
            other => bail!("unknown durability {other:?}: expected none, everysec or always"),
        }
    }

    /// The Redis flags that match this setting, in words and as arguments.
    pub fn redis_arguments(self) -> Vec<&'static str> {
        match self {
            Durability::None => vec!["--appendonly", "no", "--save", ""],
            Durability::EverySec => vec![
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
            ],
            Durability::Always => vec![
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ],
        }
    }
}

/// Where the binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `prefixkv-server` (release build).
    pub prefixkv_server: PathBuf,
    /// `redis-server`.
    pub redis_server: PathBuf,
    /// `redis-benchmark`.
    pub redis_benchmark: PathBuf,
}

impl Binaries {
    /// Finds every binary, or says how to get the missing one.
    pub fn locate(prefixkv_override: Option<&Path>) -> Result<Binaries> {
        let prefixkv_server = match prefixkv_override {
            Some(path) if path.is_file() => path.to_path_buf(),
            Some(path) => bail!("--server-binary {} does not exist", path.display()),
            None => locate_prefixkv_server()?,
        };
        let install =
            "install Debian's redis-server and redis-tools (`./scripts/test` does, as root)";
        let redis_server = find_in_path("redis-server")
            .ok_or_else(|| anyhow!("redis-server is not on PATH: {install}"))?;
        let redis_benchmark = find_in_path("redis-benchmark")
            .ok_or_else(|| anyhow!("redis-benchmark is not on PATH: {install}"))?;
        Ok(Binaries {
            prefixkv_server,
            redis_server,
            redis_benchmark,
        })
    }
}

/// `prefixkv-server` next to this binary (`target/release/`), else `target/release/` of the
/// current directory's workspace.
fn locate_prefixkv_server() -> Result<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join("prefixkv-server"));
    }
    candidates.push(PathBuf::from("target/release/prefixkv-server"));
    for candidate in &candidates {
        if candidate.is_file() {
            return Ok(candidate.clone());
        }
    }
    bail!(
        "prefixkv-server not found (looked at {}): build it with `cargo build --release -p prefixkv-server` \
         (or pass --server-binary)",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A free loopback port (bound then released; the server binds it explicitly, and a start that
/// loses the race is retried on another port).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .context("binding a probe socket on 127.0.0.1")?
        .local_addr()?
        .port())
}

/// A running server; SIGKILLed by PID on drop.
pub struct ServerProcess {
    child: Option<Child>,
    /// Which server.
    pub kind: Kind,
    /// Its loopback port.
    pub port: u16,
    /// Where its stdout/stderr go (for error messages).
    pub log: PathBuf,
}

/// How to start one server.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Which server.
    pub kind: Kind,
    /// Durability.
    pub durability: Durability,
    /// Data directory (created if missing; reused by a restart).
    pub dir: PathBuf,
    /// Extra arguments for our server (for example `--engine-memory`).
    pub prefixkv_extra: Vec<String>,
}

impl ServerProcess {
    /// Starts the server and waits (bounded by `ready_timeout`) until it answers PING.
    pub fn start(
        binaries: &Binaries,
        launch: &Launch,
        ready_timeout: Duration,
    ) -> Result<ServerProcess> {
        std::fs::create_dir_all(&launch.dir)
            .with_context(|| format!("creating {}", launch.dir.display()))?;
        let mut last_error = None;
        for attempt in 0..5 {
            let port = free_port()?;
            let log = launch.dir.with_extension(format!("{attempt}.log"));
            let log_file = std::fs::File::create(&log)
                .with_context(|| format!("creating {}", log.display()))?;
            let mut command = match launch.kind {
                Kind::Prefixkv => {
                    let mut command = Command::new(&binaries.prefixkv_server);
                    command
                        .arg("--port")
                        .arg(port.to_string())
                        .arg("--bind")
                        .arg("127.0.0.1")
                        .arg("--dir")
                        .arg(&launch.dir)
                        .arg("--appendfsync")
                        .arg(launch.durability.name())
                        .args(&launch.prefixkv_extra);
                    command
                }
                Kind::Redis => {
                    let mut command = Command::new(&binaries.redis_server);
                    command
                        .arg("--port")
                        .arg(port.to_string())
                        .arg("--bind")
                        .arg("127.0.0.1")
                        .arg("--dir")
                        .arg(&launch.dir)
                        .args(["--daemonize", "no", "--protected-mode", "yes"])
                        .args(launch.durability.redis_arguments());
                    command
                }
            };
            let child = command
                .stdin(Stdio::null())
                .stdout(log_file.try_clone()?)
                .stderr(log_file)
                .spawn()
                .with_context(|| format!("starting {}", launch.kind.name()))?;
            let mut server = ServerProcess {
                child: Some(child),
                kind: launch.kind,
                port,
                log,
            };
            match server.wait_ready(ready_timeout) {
                Ok(()) => return Ok(server),
                Err(error) => {
                    server.kill();
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("{} did not start", launch.kind.name())))
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                    let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                    bail!("{} exited at start ({status}): {tail}", self.kind.name());
                }
            }
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                stream.set_read_timeout(Some(Duration::from_secs(5)))?;
                let mut reply = [0u8; 7];
                if stream.write_all(b"PING\r\n").is_ok()
                    && stream.read_exact(&mut reply).is_ok()
                    && &reply == b"+PONG\r\n"
                {
                    return Ok(());
                }
            }
            // Polling a process we cannot be notified about: a short pause between attempts.
            std::thread::sleep(Duration::from_millis(25));
        }
        bail!(
            "{} did not answer PING within {:?} (log: {})",
            self.kind.name(),
            timeout,
            self.log.display()
        )
    }

    /// The server's PID.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILLs the server (and any child it forked) by PID and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let children = child_pids(child.id());
            let _ = child.kill();
            let _ = child.wait();
            for pid in children {
                // SAFETY: kill(2) on a PID read from our own child's `children` list just now; a
                // save child is killed so that it does not outlive the benchmark.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// PIDs of the direct children of `pid` (Redis's BGSAVE fork), from `/proc/<pid>/task/*/children`.
pub fn child_pids(pid: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return pids;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Memory of a process tree at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeMemory {
    /// Sum of proportional set sizes (`Pss` of `smaps_rollup`) of the process and its children:
    /// pages shared copy-on-write between Redis and its save child count once, so this is the
    /// memory the machine actually spends.
    pub pss_bytes: u64,
    /// `VmRSS` of the process alone.
    pub rss_bytes: u64,
    /// `VmRSS` of the process plus its children (double-counts shared pages).
    pub rss_with_children_bytes: u64,
}

/// Samples the memory of `pid` and its children.
pub fn tree_memory(pid: u32) -> TreeMemory {
    let own_rss = status_kib(pid, "VmRSS:") * 1024;
    let mut memory = TreeMemory {
        pss_bytes: pss_kib(pid) * 1024,
        rss_bytes: own_rss,
        rss_with_children_bytes: own_rss,
    };
    for child in child_pids(pid) {
        memory.pss_bytes += pss_kib(child) * 1024;
        memory.rss_with_children_bytes += status_kib(child, "VmRSS:") * 1024;
    }
    memory
}

fn status_kib(pid: u32, field: &str) -> u64 {
    read_kib(&format!("/proc/{pid}/status"), field)
}

fn pss_kib(pid: u32) -> u64 {
    read_kib(&format!("/proc/{pid}/smaps_rollup"), "Pss:")
}

fn read_kib(path: &str, field: &str) -> u64 {
    crate::memory::read_proc_kib(path, field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_memory_is_readable() {
        let memory = tree_memory(std::process::id());
        assert!(memory.rss_bytes > 0);
        assert!(memory.pss_bytes > 0);
    }

    #[test]
    fn durability_labels_round_trip() {
        for durability in [Durability::None, Durability::EverySec, Durability::Always] {
            assert_eq!(Durability::parse(durability.name()).unwrap(), durability);
        }
        assert!(Durability::parse("sometimes").is_err());
    }
}
