//! The snapshot-under-load phase on one server: load a dataset, run pipelined writes from several
//! connections, trigger BGSAVE a few times, and measure throughput and latency during each save
//! and outside it, and the memory the save costs; then verify that the saved data recovers.
//!
//! Measurement:
//! - Throughput: writers add every acknowledged request to one counter. The control thread reads
//!   it at each BGSAVE's start (the `BGSAVE` reply) and end (`INFO persistence` shows
//!   `rdb_bgsave_in_progress:0`, polled every 20 ms), so "during" is exact to the polling step;
//!   "outside" is the rest of the measured span (after a warm-up). A sampler records the counter
//!   every 100 ms for the timeline plot.
//! - Latency: each writer times every pipelined batch (the round trip a pipelining client sees)
//!   and files it as during or outside by the batch's start time.
//! - Memory: the proportional set size (`Pss`, `/proc/<pid>/smaps_rollup`) of the server plus its
//!   children, sampled at every poll. Redis's save child shares pages with its parent
//!   copy-on-write; Pss counts a shared page once, so the growth is what the machine spends
//!   (summing the two RSS figures would count the whole dataset twice). The growth of one save
//!   is its peak minus the value just before it; the reported growth is the largest.
//!
//! Verification ([`oracle`]): writer `w` owns the keys `i % writers == w` and records, per key,
//! the version of the last value it was acknowledged for (the load is version 0). After the
//! writers stop (every request they sent has its reply) and a synchronous SAVE is acknowledged,
//! every key is read and must hold exactly its last acknowledged value, with no other key in the
//! keyspace; then the server is SIGKILLed, restarted on the same directory, and the same check of
//! every key runs again. The server's DBSIZE is kept as an informational figure, never a verdict.

use super::client::{reply_text, Client};
use super::oracle::{self, fill_value, key, Acks, Verdict, WriterKeys, KEY_BYTES};
use super::processes::{tree_memory, Binaries, Durability, Kind, Launch, ServerProcess};
use crate::stats::Latencies;
use crate::workload::{KeyDistribution, KeyGenerator};
use anyhow::{anyhow, bail, Context, Result};
use prefixkv_engine::CheckpointBreakdown;
use prefixkv_resp::Reply;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sizes and durations of the phase.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Keys in the dataset.
    pub keys: u64,
    /// Bytes per value.
    pub value_bytes: usize,
    /// Writer connections (one thread each).
    pub writers: usize,
    /// Requests per pipelined batch.
    pub pipeline: usize,
    /// Writes before measuring starts.
    pub warmup: Duration,
    /// Measured time before the first BGSAVE and after each one.
    pub gap: Duration,
    /// BGSAVEs to trigger.
    pub bgsaves: usize,
    /// A BGSAVE still running after this fails the run.
    pub bgsave_timeout: Duration,
    /// Durability of both servers in this phase.
    pub durability: Durability,
    /// Extra arguments for our server.
    pub prefixkv_args: Vec<String>,
}

impl Plan {
    /// Bytes of keys and values in the dataset.
    pub fn dataset_bytes(&self) -> u64 {
        self.keys * (KEY_BYTES as u64 + self.value_bytes as u64)
    }
}

/// Everything measured on one server.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Which server.
    pub kind: Kind,
    /// Seconds the loader took.
    pub load_seconds: f64,
    /// Writes per second outside the saves.
    pub outside_ops_per_s: f64,
    /// Writes per second during the saves.
    pub during_ops_per_s: f64,
    /// p99 batch latency outside the saves, µs.
    pub outside_p99_us: f64,
    /// p99 batch latency during the saves, µs.
    pub during_p99_us: f64,
    /// Each save's duration, seconds.
    pub bgsave_seconds: Vec<f64>,
    /// Our server only: each save's time breakdown and bytes, from `INFO persistence`.
    pub checkpoints: Vec<(CheckpointBreakdown, u64)>,
    /// From the SIGKILL until the restarted server answered PING (after loading everything).
    pub restart_seconds: f64,
    /// Pss just before the first save.
    pub baseline_pss_bytes: u64,
    /// Largest Pss growth of one save over its starting value.
    pub growth_pss_bytes: u64,
    /// Largest growth of RSS (server plus children, double-counting shared pages), for reference.
    pub growth_rss_with_children_bytes: u64,
    /// Throughput over time: (seconds since writers started, writes/s over the last 100 ms).
    pub timeline: Vec<(f64, f64)>,
    /// Saves as (start, end) seconds since writers started.
    pub windows: Vec<(f64, f64)>,
    /// Every key read after the SAVE, against each writer's last acknowledged value.
    pub after_save: Verdict,
    /// Every key read after the SIGKILL and restart, against the same record.
    pub after_restart: Verdict,
    /// The restarted server's own key count (informational, not a check).
    pub dbsize_after_restart: u64,
}

impl Outcome {
    /// Both checks passed.
    pub fn verified(&self) -> bool {
        self.after_save.passed() && self.after_restart.passed()
    }

    /// What both checks found, in words.
    pub fn verify_note(&self) -> String {
        format!(
            "after SAVE: {}; after SIGKILL and restart ({:.1} s): {}",
            self.after_save, self.restart_seconds, self.after_restart
        )
    }
}

/// Runs the phase on one server, in `dir` (fresh), and stops the server.
pub fn run(binaries: &Binaries, kind: Kind, plan: &Plan, dir: &Path) -> Result<Outcome> {
    let launch = launch(kind, plan, dir);
    let mut server = ServerProcess::start(binaries, &launch, Duration::from_secs(120))?;
    let pid = server.pid().ok_or_else(|| anyhow!("server has no PID"))?;

    let load_started = Instant::now();
    load(server.port, plan)?;
    let load_seconds = load_started.elapsed().as_secs_f64();
    let mut control = Client::connect(server.port)?;
    let size = match control.call(&["DBSIZE"])? {
        Reply::Integer(n) => n as u64,
        other => bail!("DBSIZE: unexpected reply {other:?}"),
    };
    if size != plan.keys {
        bail!(
            "{}: DBSIZE is {size} after loading {} keys",
            kind.name(),
            plan.keys
        );
    }

    let mut acks = Acks::new(plan.keys, plan.writers);
    let mut outcome = measure(kind, pid, server.port, plan, &mut control, &mut acks)?;
    outcome.load_seconds = load_seconds;
    let checked = verify(binaries, &launch, &mut server, plan, &acks)?;
    outcome.after_save = checked.after_save;
    outcome.after_restart = checked.after_restart;
    outcome.dbsize_after_restart = checked.dbsize_after_restart;
    outcome.restart_seconds = checked.restart_seconds;
    server.kill();
    Ok(outcome)
}

/// How the phase starts `kind` on `dir`.
pub(super) fn launch(kind: Kind, plan: &Plan, dir: &Path) -> Launch {
    // Our engine keeps the whole log in memory: give it room for the dataset, the record headers
    // and the copies a checkpoint's read-only phase makes (pages are allocated lazily, so an
    // unused budget costs nothing).
    let engine_memory_bytes = (plan.dataset_bytes() * 3).max(1 << 30);
    Launch {
        kind,
        durability: plan.durability,
        dir: dir.to_path_buf(),
        prefixkv_extra: ["--engine-memory".into(), engine_memory_bytes.to_string()]
            .into_iter()
            .chain(plan.prefixkv_args.iter().cloned())
            .collect(),
    }
}

/// Loads every key with version 0 over two pipelined connections.
pub(super) fn load(port: u16, plan: &Plan) -> Result<()> {
    const LOADERS: u64 = 2;
    const BATCH: u64 = 512;
    let handles: Vec<_> = (0..LOADERS)
        .map(|loader| {
            let plan = plan.clone();
            std::thread::spawn(move || -> Result<()> {
                let mut client = Client::connect(port)?;
                let mut value = Vec::with_capacity(plan.value_bytes);
                let mut index = loader;
                while index < plan.keys {
                    let mut queued = 0;
                    while queued < BATCH && index < plan.keys {
                        fill_value(index, 0, &mut value, plan.value_bytes);
                        client.queue(&[b"SET", &key(index), &value]);
                        queued += 1;
                        index += LOADERS;
                    }
                    client.flush()?;
                    client.read_ok(queued as usize)?;
                }
                Ok(())
            })
        })
        .collect();
    for handle in handles {
        handle
            .join()
            .map_err(|_| anyhow!("a loader thread panicked"))??;
    }
    Ok(())
}

/// One writer's batch latencies: (start, nanoseconds since the writers started; round trip, ns).
type Batches = Vec<(u64, u64)>;

/// Writes from `plan.writers` connections while the control thread runs the saves; each writer's
/// acknowledged versions end up in `acks`.
fn measure(
    kind: Kind,
    pid: u32,
    port: u16,
    plan: &Plan,
    control: &mut Client,
    acks: &mut Acks,
) -> Result<Outcome> {
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let writers: Vec<_> = acks
        .take_shards()
        .into_iter()
        .enumerate()
        .map(|(writer, owned)| {
            let (stop, acknowledged, plan) = (stop.clone(), acknowledged.clone(), plan.clone());
            std::thread::spawn(move || -> Result<(Batches, WriterKeys)> {
                let mut writer = Writer::connect(port, writer, owned, &plan)?;
                let batches = write_loop(&mut writer, &plan, started, &stop, &acknowledged)?;
                Ok((batches, writer.into_keys()))
            })
        })
        .collect();
    let sampler = {
        let (stop, acknowledged) = (stop.clone(), acknowledged.clone());
        std::thread::spawn(move || sample_loop(started, &stop, &acknowledged))
    };

    let result = control_saves(kind, pid, plan, control, started, &acknowledged);
    stop.store(true, Ordering::SeqCst);
    let mut batches = Vec::new();
    let mut writer_error = None;
    let mut shards = Vec::with_capacity(plan.writers);
    for handle in writers {
        match handle
            .join()
            .map_err(|_| anyhow!("a writer thread panicked"))?
        {
            Ok((mut own, keys)) => {
                batches.append(&mut own);
                shards.push(keys);
            }
            Err(error) => writer_error = Some(error),
        }
    }
    let timeline = sampler
        .join()
        .map_err(|_| anyhow!("the sampler thread panicked"))?;
    let saves = result?;
    if let Some(error) = writer_error {
        return Err(error.context(format!("{} writer", kind.name())));
    }
    acks.restore(shards);

    let to_seconds = |at: Instant| at.duration_since(started).as_secs_f64();
    let windows: Vec<(f64, f64)> = saves
        .iter()
        .map(|s| (to_seconds(s.start), to_seconds(s.end)))
        .collect();
    let measured = (
        to_seconds(saves.measure_start),
        to_seconds(saves.measure_end),
    );
    let during_ops: u64 = saves.iter().map(|s| s.end_ops - s.start_ops).sum();
    let during_seconds: f64 = windows.iter().map(|(a, b)| b - a).sum();
    let outside_ops = saves.measure_end_ops - saves.measure_start_ops - during_ops;
    let outside_seconds = measured.1 - measured.0 - during_seconds;

    let (mut during, mut outside) = (Latencies::new(), Latencies::new());
    for (start_ns, latency_ns) in batches {
        let at = start_ns as f64 / 1e9;
        if at < measured.0 || at > measured.1 {
            continue;
        }
        if windows.iter().any(|(a, b)| at >= *a && at <= *b) {
            during.record_ns(latency_ns);
        } else {
            outside.record_ns(latency_ns);
        }
    }
    let growth_pss_bytes = saves
        .iter()
        .map(|s| s.peak.pss_bytes.saturating_sub(s.before.pss_bytes))
        .max()
        .unwrap_or(0);
    let growth_rss_with_children_bytes = saves
        .iter()
        .map(|s| {
            s.peak
                .rss_with_children_bytes
                .saturating_sub(s.before.rss_with_children_bytes)
        })
        .max()
        .unwrap_or(0);
    Ok(Outcome {
        kind,
        load_seconds: 0.0,
        outside_ops_per_s: outside_ops as f64 / outside_seconds.max(1e-9),
        during_ops_per_s: during_ops as f64 / during_seconds.max(1e-9),
        outside_p99_us: outside.quantile_us(0.99),
        during_p99_us: during.quantile_us(0.99),
        bgsave_seconds: windows.iter().map(|(a, b)| b - a).collect(),
        checkpoints: saves.iter().filter_map(|s| s.cost).collect(),
        restart_seconds: f64::NAN,
        baseline_pss_bytes: saves.saves.first().map_or(0, |s| s.before.pss_bytes),
        growth_pss_bytes,
        growth_rss_with_children_bytes,
        timeline,
        windows,
        after_save: Verdict::default(),
        after_restart: Verdict::default(),
        dbsize_after_restart: 0,
    })
}

/// One writer connection and the keys it owns: it writes only those, and records each key's
/// version once the server acknowledged the SET.
pub(super) struct Writer {
    client: Client,
    owned: WriterKeys,
    slots: KeyGenerator,
    value: Vec<u8>,
    value_bytes: usize,
    pipeline: usize,
    /// (slot, version) of the batch in flight, in the order sent.
    in_flight: Vec<(u64, u64)>,
}

impl Writer {
    /// Connects writer `writer` (owning `owned`) to the server on `port`.
    pub(super) fn connect(
        port: u16,
        writer: usize,
        owned: WriterKeys,
        plan: &Plan,
    ) -> Result<Writer> {
        if owned.is_empty() {
            bail!("writer {writer} owns no key: fewer keys than writers");
        }
        Ok(Writer {
            client: Client::connect(port)?,
            slots: KeyGenerator::new(
                KeyDistribution::Uniform,
                owned.len(),
                0x5eed + writer as u64,
            ),
            owned,
            value: Vec::with_capacity(plan.value_bytes),
            value_bytes: plan.value_bytes,
            pipeline: plan.pipeline,
            in_flight: Vec::with_capacity(plan.pipeline),
        })
    }

    /// Sends one pipelined batch of SETs to uniformly chosen owned keys and waits for every
    /// reply; records the versions only once every reply was OK. Returns when the batch was sent
    /// (after building it), the start of the round trip a pipelining client sees.
    pub(super) fn batch(&mut self) -> Result<Instant> {
        self.in_flight.clear();
        for _ in 0..self.pipeline {
            let slot = self.slots.next_key();
            let index = self.owned.index(slot);
            let version = self.owned.next_version();
            fill_value(index, version, &mut self.value, self.value_bytes);
            self.client.queue(&[b"SET", &key(index), &self.value]);
            self.in_flight.push((slot, version));
        }
        let sent = Instant::now();
        self.client.flush()?;
        self.client.read_ok(self.pipeline)?;
        // In sending order: a key written twice in the batch keeps the later version.
        for &(slot, version) in &self.in_flight {
            self.owned.acknowledge(slot, version);
        }
        Ok(sent)
    }

    /// The record of what this writer was acknowledged for.
    pub(super) fn into_keys(self) -> WriterKeys {
        self.owned
    }
}

fn write_loop(
    writer: &mut Writer,
    plan: &Plan,
    started: Instant,
    stop: &AtomicBool,
    acknowledged: &AtomicU64,
) -> Result<Batches> {
    let mut batches = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let batch_started = writer.batch()?;
        let latency = batch_started.elapsed();
        acknowledged.fetch_add(plan.pipeline as u64, Ordering::Relaxed);
        batches.push((
            batch_started.duration_since(started).as_nanos() as u64,
            latency.as_nanos() as u64,
        ));
    }
    Ok(batches)
}

/// Every 100 ms: (seconds since start, writes/s over the last interval).
fn sample_loop(started: Instant, stop: &AtomicBool, acknowledged: &AtomicU64) -> Vec<(f64, f64)> {
    let interval = Duration::from_millis(100);
    let mut timeline = Vec::new();
    let mut previous = (Instant::now(), acknowledged.load(Ordering::Relaxed));
    let mut next = previous.0 + interval;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            // A fixed-rate sampler: wait for the next tick.
            std::thread::sleep(next - now);
            continue;
        }
        next += interval;
        let count = acknowledged.load(Ordering::Relaxed);
        let seconds = now.duration_since(previous.0).as_secs_f64();
        timeline.push((
            now.duration_since(started).as_secs_f64(),
            (count - previous.1) as f64 / seconds.max(1e-9),
        ));
        previous = (now, count);
    }
    timeline
}

/// One BGSAVE as observed by the control thread.
struct Save {
    start: Instant,
    end: Instant,
    start_ops: u64,
    end_ops: u64,
    before: super::processes::TreeMemory,
    peak: super::processes::TreeMemory,
    /// Our server's breakdown of this save and its bytes.
    cost: Option<(CheckpointBreakdown, u64)>,
}

struct Saves {
    saves: Vec<Save>,
    measure_start: Instant,
    measure_end: Instant,
    measure_start_ops: u64,
    measure_end_ops: u64,
}

impl Saves {
    fn iter(&self) -> std::slice::Iter<'_, Save> {
        self.saves.iter()
    }
}

fn control_saves(
    kind: Kind,
    pid: u32,
    plan: &Plan,
    control: &mut Client,
    started: Instant,
    acknowledged: &AtomicU64,
) -> Result<Saves> {
    std::thread::sleep(plan.warmup.saturating_sub(started.elapsed()));
    let measure_start = Instant::now();
    let measure_start_ops = acknowledged.load(Ordering::Relaxed);
    let mut saves = Vec::new();
    for _ in 0..plan.bgsaves {
        std::thread::sleep(plan.gap);
        let before = tree_memory(pid);
        let start_ops = acknowledged.load(Ordering::Relaxed);
        let start = Instant::now();
        let reply = control.call(&["BGSAVE"])?;
        let text = reply_text(&reply);
        if !text.starts_with("Background saving started") {
            bail!("BGSAVE answered {text:?}");
        }
        let mut peak = before;
        loop {
            let memory = tree_memory(pid);
            peak.pss_bytes = peak.pss_bytes.max(memory.pss_bytes);
            peak.rss_bytes = peak.rss_bytes.max(memory.rss_bytes);
            peak.rss_with_children_bytes = peak
                .rss_with_children_bytes
                .max(memory.rss_with_children_bytes);
            if control.info_field("persistence", "rdb_bgsave_in_progress")? == "0" {
                break;
            }
            if start.elapsed() > plan.bgsave_timeout {
                bail!("BGSAVE still running after {:?}", plan.bgsave_timeout);
            }
            // Polling the server's own progress flag: 20 ms steps bound the error of "during".
            std::thread::sleep(Duration::from_millis(20));
        }
        let end = Instant::now();
        let end_ops = acknowledged.load(Ordering::Relaxed);
        let status = control.info_field("persistence", "rdb_last_bgsave_status")?;
        if status != "ok" {
            bail!("BGSAVE finished with rdb_last_bgsave_status:{status}");
        }
        let cost = match kind {
            Kind::Prefixkv => Some(checkpoint_cost(&control.info("persistence")?)?),
            Kind::Redis => None,
        };
        saves.push(Save {
            start,
            end,
            start_ops,
            end_ops,
            before,
            peak,
            cost,
        });
    }
    std::thread::sleep(plan.gap);
    Ok(Saves {
        saves,
        measure_start,
        measure_end: Instant::now(),
        measure_start_ops,
        measure_end_ops: acknowledged.load(Ordering::Relaxed),
    })
}

/// Our server's last checkpoint from `INFO persistence`: its breakdown (the
/// `last_checkpoint_<part>_us` lines) and `last_checkpoint_bytes`.
fn checkpoint_cost(info: &[(String, String)]) -> Result<(CheckpointBreakdown, u64)> {
    let field = |name: &str| -> Result<u64> {
        let text = info
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value)
            .ok_or_else(|| anyhow!("INFO persistence has no {name}"))?;
        text.parse()
            .with_context(|| format!("INFO persistence {name}:{text}"))
    };
    let mut parts = [Duration::ZERO; 11];
    for (part, name) in parts.iter_mut().zip(CheckpointBreakdown::PART_NAMES) {
        *part = Duration::from_micros(field(&format!("last_checkpoint_{name}_us"))?);
    }
    let breakdown =
        CheckpointBreakdown::from_parts(field("last_checkpoint_threads")? as u32, parts);
    Ok((breakdown, field("last_checkpoint_bytes")?))
}

/// What [`verify`] found.
pub(super) struct Checked {
    /// Every key after the SAVE.
    pub after_save: Verdict,
    /// Every key after the SIGKILL and restart.
    pub after_restart: Verdict,
    /// The restarted server's DBSIZE (informational).
    pub dbsize_after_restart: u64,
    /// From the SIGKILL until the restarted server answered PING.
    pub restart_seconds: f64,
}

/// SAVE (synchronous; only once every writer has stopped, so `acks` is the whole acknowledged
/// state), check every key against `acks`, SIGKILL, restart on the same directory, check every
/// key again. `before_restart` runs between the SIGKILL and the restart (tests use it to tamper
/// with the files); the benchmark passes a no-op.
pub(super) fn verify_with(
    binaries: &Binaries,
    launch: &Launch,
    server: &mut ServerProcess,
    plan: &Plan,
    acks: &Acks,
    before_restart: impl FnOnce() -> Result<()>,
) -> Result<Checked> {
    let mut client = Client::connect(server.port)?;
    let saved = reply_text(&client.call(&["SAVE"])?);
    if saved != "OK" {
        bail!("SAVE answered {saved:?}");
    }
    let after_save = oracle::check_every_key(&mut client, acks, plan.value_bytes)?;
    if launch.kind == Kind::Redis && launch.durability != Durability::None {
        wait_aof_written(&mut client)?;
    }
    drop(client);
    server.kill();
    before_restart()?;
    let restart_started = Instant::now();
    *server = ServerProcess::start(binaries, launch, Duration::from_secs(600))
        .context("restarting on the saved files")?;
    let restart_seconds = restart_started.elapsed().as_secs_f64();
    let mut client = Client::connect(server.port)?;
    let dbsize_after_restart = match client.call(&["DBSIZE"])? {
        Reply::Integer(n) => n as u64,
        other => bail!("DBSIZE after restart: unexpected reply {other:?}"),
    };
    let after_restart = oracle::check_every_key(&mut client, acks, plan.value_bytes)?;
    Ok(Checked {
        after_save,
        after_restart,
        dbsize_after_restart,
        restart_seconds,
    })
}

fn verify(
    binaries: &Binaries,
    launch: &Launch,
    server: &mut ServerProcess,
    plan: &Plan,
    acks: &Acks,
) -> Result<Checked> {
    verify_with(binaries, launch, server, plan, acks, || Ok(()))
}

/// Redis with `appendonly yes` restarts from its AOF, not from the RDB SAVE wrote. It writes the
/// AOF buffer before sending the replies of the commands in it, except under `everysec` while a
/// background fsync is slow, when it may hold the buffer back for up to 2 s: wait (bounded) until
/// the buffer is empty, so that the SIGKILL tests the files rather than that window. The
/// server's field is only a condition to wait on here, never the check.
fn wait_aof_written(client: &mut Client) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.info_field("persistence", "aof_buffer_length")? != "0" {
        if Instant::now() > deadline {
            bail!("Redis's AOF buffer still held data 30 s after the writers stopped");
        }
        // Polling a field the server offers no notification for.
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}
