//! A `prefixkv-smr` replica group as separate processes (the `prefixkv-smr replica` binary), for
//! `prefixkv-bench smr`: start on free loopback ports, optionally pin each replica to its own
//! core, talk to the replicas over RESP, SIGKILL and restart one, stop all (by PID, on drop too).
//!
//! Invariants: every child started here is killed and reaped when its [`ReplicaProcess`] is
//! dropped, so an error anywhere in a run leaves no replica behind; every wait is bounded
//! ([`WAIT`]); nothing here reads a replica's state except through its client port.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use prefixkv_resp::Reply;
use prefixkv_smr::client::{Connection, MAX_LOAD_PAIRS};
use prefixkv_smr::log_store::LogSync;
use prefixkv_smr::types::NodeId;
use prefixkv_smr::StateModel;

/// The longest any single wait (election, load, checkpoint, catch-up) may take.
pub const WAIT: Duration = Duration::from_secs(1800);

/// How a replica group is run: the paper's setting or this machine's shared one.
#[derive(Clone, Debug)]
pub struct Setting {
    /// Name in reports.
    pub name: &'static str,
    /// Replicas.
    pub replicas: usize,
    /// Raft log sync.
    pub log_sync: LogSync,
    /// Pin replica `i` to core `i` (and the bench's clients to the cores left), if the machine
    /// has more cores than replicas.
    pub pin: bool,
    /// Every core the bench may use, taken once at its start (before any thread is pinned).
    pub machine_cores: Vec<usize>,
}

impl Setting {
    /// Core of each replica (empty: unpinned) and the cores for the bench's clients.
    pub fn cores(&self) -> (Vec<usize>, Vec<usize>) {
        let available = self.machine_cores.clone();
        if !self.pin || available.len() <= self.replicas {
            return (Vec::new(), available);
        }
        let (replicas, clients) = available.split_at(self.replicas);
        (replicas.to_vec(), clients.to_vec())
    }
}

/// The cores this process may run on.
pub fn allowed_cores() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills it; CPU_ISSET reads
    // inside it for indexes below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|cpu| libc::CPU_ISSET(*cpu, &set))
            .collect()
    }
}

/// Restricts the calling thread (and the threads it creates afterwards) to `cores`.
pub fn pin_current_thread(cores: &[usize]) -> std::io::Result<()> {
    // SAFETY: as in `allowed_cores`; CPU_SET writes inside the set for cores below CPU_SETSIZE
    // (checked); pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for core in cores.iter().filter(|c| **c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(*core, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `prefixkv-smr` next to this binary, else in `target/release/`.
pub fn locate_binary(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = given {
        anyhow::ensure!(
            path.is_file(),
            "--smr-binary {} does not exist",
            path.display()
        );
        return Ok(path.to_path_buf());
    }
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join("prefixkv-smr"));
    }
    candidates.push(PathBuf::from("target/release/prefixkv-smr"));
    candidates.into_iter().find(|c| c.is_file()).ok_or_else(|| {
        anyhow!(
            "prefixkv-smr not found next to this binary or in target/release: build it with \
             `cargo build --release -p prefixkv-smr` (or pass --smr-binary)"
        )
    })
}

/// One replica process; dropping it SIGKILLs and reaps it.
pub struct ReplicaProcess {
    child: Child,
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running replica group.
pub struct Cluster {
    binary: PathBuf,
    dir: PathBuf,
    model: StateModel,
    setting: Setting,
    peers: String,
    client_ports: BTreeMap<NodeId, u16>,
    /// Client (RESP) address of each replica.
    pub clients: BTreeMap<NodeId, SocketAddr>,
    processes: BTreeMap<NodeId, ReplicaProcess>,
    replica_cores: Vec<usize>,
}

impl Cluster {
    /// Starts `setting.replicas` replicas of `model` with their data under `dir`.
    pub fn start(
        binary: &Path,
        dir: &Path,
        model: StateModel,
        setting: &Setting,
    ) -> Result<Cluster> {
        let ids: Vec<NodeId> = (1..=setting.replicas as NodeId).collect();
        let listeners: Vec<std::net::TcpListener> = (0..2 * ids.len())
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<_>>()?;
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<std::io::Result<_>>()?;
        drop(listeners);
        let peers = ids
            .iter()
            .zip(&ports)
            .map(|(id, port)| format!("{id}=127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let client_ports: BTreeMap<NodeId, u16> = ids
            .iter()
            .copied()
            .zip(ports[ids.len()..].iter().copied())
            .collect();
        let clients = client_ports
            .iter()
            .map(|(id, port)| (*id, SocketAddr::from(([127, 0, 0, 1], *port))))
            .collect();
        let mut cluster = Cluster {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            model,
            setting: setting.clone(),
            peers,
            client_ports,
            clients,
            processes: BTreeMap::new(),
            replica_cores: setting.cores().0,
        };
        for id in ids {
            cluster.spawn(id)?;
        }
        Ok(cluster)
    }

    /// Starts (or restarts) replica `id` from its directory and waits for its `READY` line.
    pub fn spawn(&mut self, id: NodeId) -> Result<()> {
        let dir = self.dir.join(format!("replica-{id}"));
        let mut command = Command::new(&self.binary);
        command
            .args(["replica", "--id", &id.to_string(), "--peers", &self.peers])
            .args(["--client-port", &self.client_ports[&id].to_string()])
            .arg("--dir")
            .arg(&dir)
            .args(["--model", self.model.name()])
            .args(["--log-sync", self.setting.log_sync.name()])
            // Δ is set per phase with SMR.CHECKPOINT-EVERY; none while loading.
            .args(["--checkpoint-every", "0"])
            // A blocking checkpoint of GBs stalls commits for longer than the default.
            .args(["--request-timeout-ms", "600000"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if std::env::var_os("RUST_LOG").is_none() {
            // Kills and restarts are part of the run; openraft's warnings about them are not news.
            command.env("RUST_LOG", "error");
        }
        // Always set: the spawning thread may be pinned to the clients' cores, and a child
        // inherits its parent thread's affinity.
        let cores = match self.replica_cores.get(id as usize - 1) {
            Some(core) => vec![*core],
            None => self.setting.machine_cores.clone(),
        };
        // SAFETY: between fork and exec only sched_setaffinity (async-signal-safe) runs, on a
        // vector allocated before the fork.
        unsafe {
            command.pre_exec(move || pin_current_thread(&cores));
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let process = ReplicaProcess { child };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        if !line.starts_with("READY") {
            bail!("replica {id} did not start (printed {line:?}); its stderr is above");
        }
        self.processes.insert(id, process);
        Ok(())
    }

    /// SIGKILLs replica `id` and reaps it.
    pub fn kill(&mut self, id: NodeId) {
        drop(self.processes.remove(&id));
    }

    /// The replica ids.
    pub fn ids(&self) -> Vec<NodeId> {
        self.clients.keys().copied().collect()
    }

    /// A new RESP connection to replica `id`.
    pub async fn connect(&self, id: NodeId) -> Result<Connection> {
        Connection::connect(self.clients[&id])
            .await
            .with_context(|| format!("connecting to replica {id}"))
    }

    /// `SMR.STATUS` of replica `id` as `name → value`.
    pub async fn status(&self, id: NodeId) -> Result<BTreeMap<String, String>> {
        let reply = call(&mut self.connect(id).await?, &[b"SMR.STATUS"]).await?;
        let Reply::BulkString(text) = reply else {
            bail!("SMR.STATUS answered {reply:?}");
        };
        Ok(String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect())
    }

    /// Waits until one replica is leader and every replica names it; returns it.
    pub async fn wait_for_leader(&self) -> Result<NodeId> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let mut leaders = Vec::new();
            for id in self.ids() {
                if let Ok(status) = self.status(id).await {
                    leaders.push(status.get("leader").cloned().unwrap_or_default());
                }
            }
            let agreed =
                leaders.len() == self.clients.len() && leaders.windows(2).all(|w| w[0] == w[1]);
            if let (true, Some(Ok(leader))) = (agreed, leaders.first().map(|l| l.parse())) {
                return Ok(leader);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("no leader agreed on within {WAIT:?}: {leaders:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A numeric field of replica `id`'s `SMR.STATUS`.
    pub async fn status_number(&self, id: NodeId, field: &str) -> Result<u64> {
        let status = self.status(id).await?;
        status
            .get(field)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("SMR.STATUS of replica {id} has no numeric {field}"))
    }

    /// Waits until replica `id` has applied at least `index`.
    pub async fn wait_applied(&self, id: NodeId, index: u64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.status_number(id, "applied_index").await.unwrap_or(0) < index {
            if tokio::time::Instant::now() >= deadline {
                bail!("replica {id} did not apply index {index} within {WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Loads keys `0..keys` (`key_name(k)` → `value`) in `SMR.LOAD` batches through the leader,
    /// from `connections` parallel connections.
    pub async fn load(
        &self,
        leader: NodeId,
        keys: u64,
        value: &[u8],
        key_name: fn(u64) -> Vec<u8>,
    ) -> Result<()> {
        let loaders = 4u64;
        let batch = MAX_LOAD_PAIRS as u64;
        let mut tasks = Vec::new();
        for loader in 0..loaders {
            let mut connection = self.connect(leader).await?;
            let value = value.to_vec();
            tasks.push(tokio::spawn(async move {
                let mut start = loader * batch;
                while start < keys {
                    let names: Vec<Vec<u8>> =
                        (start..(start + batch).min(keys)).map(key_name).collect();
                    let mut args: Vec<&[u8]> = vec![b"SMR.LOAD"];
                    for name in &names {
                        args.push(name);
                        args.push(&value);
                    }
                    let reply = call(&mut connection, &args).await?;
                    anyhow::ensure!(
                        reply == Reply::SimpleString("OK".into()),
                        "SMR.LOAD: {reply:?}"
                    );
                    start += loaders * batch;
                }
                anyhow::Ok(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        Ok(())
    }

    /// Checkpoints every replica at what it has applied (after `index` is applied everywhere).
    pub async fn checkpoint_all(&self, index: u64) -> Result<()> {
        for id in self.ids() {
            self.wait_applied(id, index).await?;
            let reply = call(&mut self.connect(id).await?, &[b"SMR.CHECKPOINT"]).await?;
            anyhow::ensure!(
                matches!(reply, Reply::Integer(_)),
                "SMR.CHECKPOINT: {reply:?}"
            );
        }
        Ok(())
    }

    /// Sets Δ on every replica.
    pub async fn set_checkpoint_every(&self, delta: u64) -> Result<()> {
        for id in self.ids() {
            let every = delta.to_string();
            let reply = call(
                &mut self.connect(id).await?,
                &[b"SMR.CHECKPOINT-EVERY", every.as_bytes()],
            )
            .await?;
            anyhow::ensure!(reply == Reply::SimpleString("OK".into()), "{reply:?}");
        }
        Ok(())
    }

    /// Replica `id`'s checkpoints from the `from`-th on: (index, started, finished) with times
    /// in seconds since `origin`.
    pub async fn checkpoint_events(
        &self,
        id: NodeId,
        from: usize,
        origin: SystemTime,
    ) -> Result<Vec<CheckpointTimes>> {
        let from_text = from.to_string();
        let reply = call(
            &mut self.connect(id).await?,
            &[b"SMR.CHECKPOINTS", from_text.as_bytes()],
        )
        .await?;
        let Reply::BulkString(text) = reply else {
            bail!("SMR.CHECKPOINTS answered {reply:?}");
        };
        let origin_us = origin.duration_since(UNIX_EPOCH)?.as_micros() as f64;
        let seconds = |us: &str| us.parse::<f64>().ok().map(|us| (us - origin_us) / 1e6);
        String::from_utf8_lossy(&text)
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let parsed = (|| {
                    Some(CheckpointTimes {
                        started: seconds(fields.get(1)?)?,
                        finished: seconds(fields.get(2)?),
                    })
                })();
                parsed.ok_or_else(|| anyhow!("bad SMR.CHECKPOINTS line {line:?}"))
            })
            .collect()
    }

    /// The number of checkpoint events replica `id` lists so far.
    pub async fn checkpoint_count(&self, id: NodeId) -> Result<usize> {
        Ok(self.checkpoint_events(id, 0, UNIX_EPOCH).await?.len())
    }
}

/// When one checkpoint ran, in seconds from the bench's origin.
#[derive(Clone, Copy, Debug)]
pub struct CheckpointTimes {
    /// Snapshot taken (blocking: writing started).
    pub started: f64,
    /// Durable (`None`: still writing).
    pub finished: Option<f64>,
}

/// One command on `connection`, bounded by [`WAIT`].
pub async fn call(connection: &mut Connection, args: &[&[u8]]) -> Result<Reply> {
    tokio::time::timeout(WAIT, connection.call(args))
        .await
        .map_err(|_| anyhow!("no reply within {WAIT:?}"))?
        .map_err(Into::into)
}
