//! `prefixkv-bench crash`: kill the engine at random moments and check what recovery makes of it.
//!
//! Each iteration starts a child process (this same binary, `crash --child`) that preloads a store,
//! runs worker sessions on the oracle's deterministic workload, and checkpoints back to back with a
//! strategy chosen per iteration. The child prints `session <id> <index>` for every session it
//! starts and `published <version>` after each checkpoint is durable. The parent reads those lines,
//! and after a random number of publications (and a random delay of up to a checkpoint's length, so
//! kills land in segment writes, fsyncs and around the manifest rename alike) sends SIGKILL.
//!
//! Then the parent opens the directory. The invariant checked: recovery yields version `v` or
//! `v + 1`, where `v` is the newest version the child reported durable (a checkpoint may become
//! durable just before the kill, before its line was printed), and the recovered image equals the
//! oracle's prefix-consistent state for the recovered CPR points — never a mixture of versions.

use crate::report::{row, Report};
use crate::Common;
use anyhow::{bail, Context, Result};
use prefixkv_engine::{SessionId, Store, StoreConfig, Strategy};
use prefixkv_testkit::oracle::{self, Op, WorkloadSpec};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Flags of `prefixkv-bench crash`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Kill-and-recover iterations.
    #[arg(long, default_value_t = 30)]
    pub iterations: u32,
    /// Strategies to rotate through (comma separated). Default: all five.
    #[arg(long, value_delimiter = ',')]
    pub strategies: Option<Vec<String>>,
    /// Keys in the store.
    #[arg(long, default_value_t = 20_000)]
    pub keys: u64,
    /// Worker sessions in the child.
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Seed for kill timing and workloads (iterations are repeatable from it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for the stores (a fresh subdirectory per iteration). Default: system temp.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Internal: run as the child process in this directory.
    #[arg(long, hide = true)]
    pub child: Option<PathBuf>,
    /// Internal: the child's strategy.
    #[arg(long, hide = true)]
    pub child_strategy: Option<String>,
}

/// How long the parent waits for any line from the child before declaring it stuck.
const CHILD_LINE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the stress (parent) or the child.
pub fn run(common: &Common, args: &Args) -> Result<Report> {
    if let Some(dir) = &args.child {
        run_child(dir, args)?;
        unreachable!("the child runs until it is killed");
    }
    let strategies: Vec<Strategy> = match &args.strategies {
        Some(names) => names
            .iter()
            .map(|n| {
                n.parse()
                    .map_err(|_| anyhow::anyhow!("unknown strategy {n:?}"))
            })
            .collect::<Result<_>>()?,
        None => Strategy::ALL.to_vec(),
    };
    if strategies.is_empty() || args.iterations == 0 {
        bail!("nothing to do: give at least one strategy and one iteration");
    }
    let data_dir = args.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut report = Report::new("crash");
    report.config("iterations", args.iterations);
    report.config("keys", args.keys);
    report.config("threads", args.threads);
    report.config("seed", args.seed);
    report.config(
        "strategies",
        strategies.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    let _ = common;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let progress = crate::progress::bar(u64::from(args.iterations), "crash");
    let mut per_strategy: HashMap<String, (u32, u32, u32)> = HashMap::new(); // (runs, passed, recovered at the reported version)
    for iteration in 0..args.iterations {
        let strategy = strategies[iteration as usize % strategies.len()];
        let outcome = one_iteration(args, &data_dir, strategy, iteration, &mut rng)
            .with_context(|| format!("iteration {iteration} ({strategy})"));
        let entry = per_strategy.entry(strategy.to_string()).or_default();
        entry.0 += 1;
        match outcome {
            Ok(at_reported) => {
                entry.1 += 1;
                entry.2 += u32::from(at_reported);
            }
            Err(error) => {
                eprintln!("crash: {error:#}");
                report.record_verification(false);
                report.notes.push(format!("{error:#}"));
            }
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    let mut names: Vec<_> = per_strategy.keys().cloned().collect();
    names.sort();
    for name in names {
        let (runs, passed, at_reported) = per_strategy[&name];
        report.rows.push(row([
            ("variant", Value::from(name)),
            ("kills", Value::from(runs)),
            ("verified_recoveries", Value::from(passed)),
            ("recovered_reported_version", Value::from(at_reported)),
            ("recovered_next_version", Value::from(runs - at_reported)),
            ("verified", Value::from(runs == passed)),
        ]));
    }
    Ok(report)
}

/// One kill-and-recover cycle; returns whether recovery came back at the last *reported* version
/// rather than a newer one.
fn one_iteration(
    args: &Args,
    data_dir: &Path,
    strategy: Strategy,
    iteration: u32,
    rng: &mut SmallRng,
) -> Result<bool> {
    let dir = tempfile::Builder::new()
        .prefix("prefixkv-crash-")
        .tempdir_in(data_dir)
        .with_context(|| format!("creating a store directory in {}", data_dir.display()))?;
    let exe = std::env::current_exe().context("locating this binary to re-run it as the child")?;
    let seed = args
        .seed
        .wrapping_mul(1_000_003)
        .wrapping_add(u64::from(iteration));
    let mut child = Command::new(exe)
        .arg("crash")
        .arg("--child")
        .arg(dir.path())
        .arg("--child-strategy")
        .arg(strategy.to_string())
        .arg("--keys")
        .arg(args.keys.to_string())
        .arg("--threads")
        .arg(args.threads.to_string())
        .arg("--seed")
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the child")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines_tx, lines_rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let kill_after_publications = rng.random_range(1..=4u32);
    let jitter = Duration::from_micros(rng.random_range(0..40_000));
    let mut heard = Heard::default();
    let mut kill_at: Option<Instant> = None;
    loop {
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            break;
        }
        let wait = kill_at.map_or(CHILD_LINE_TIMEOUT, |at| {
            at.saturating_duration_since(Instant::now())
        });
        match lines_rx.recv_timeout(wait) {
            Ok(line) => {
                heard.take(&line)?;
                if kill_at.is_none() && heard.publications == kill_after_publications {
                    kill_at = Some(Instant::now() + jitter);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if kill_at.is_some() => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the child printed nothing for {CHILD_LINE_TIMEOUT:?}");
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait()?;
                bail!("the child exited on its own ({status}) before it was killed");
            }
        }
    }
    child.kill().context("sending SIGKILL to the child")?;
    child.wait()?;
    // Lines still in the pipe when the child died count too: each was printed after what it says.
    reader.join().ok();
    for line in lines_rx.try_iter() {
        heard.take(&line)?;
    }
    let (sessions, newest_published) = (heard.sessions, heard.newest_published);

    let store = Store::open(StoreConfig::new(dir.path().to_path_buf()))
        .context("recovery refused a directory left by a killed process")?;
    let info = store
        .recovery_info()
        .context("no checkpoint recovered although some were published")?
        .clone();
    if info.version != newest_published && info.version != newest_published + 1 {
        bail!(
            "recovered version {} but version {newest_published} was reported durable (expected it or the next)",
            info.version
        );
    }
    let spec = child_spec(args.keys, seed);
    let mut points = Vec::new();
    for (id, serial) in &info.session_commit_points {
        match sessions.get(id) {
            Some(&index) => points.push((index, *serial)),
            // A session can be registered (and so be in a checkpoint) before its line is printed,
            // but it runs no operation before printing it.
            None if *serial == 0 => {}
            None => {
                bail!("recovered session {id} at serial {serial}, which the child never announced")
            }
        }
    }
    let mut reader = store.start_session();
    let mut image = Vec::new();
    let mut value = Vec::new();
    for key in 0..spec.keys {
        if reader.read(&key.to_be_bytes(), &mut value)? {
            image.push((key.to_be_bytes().to_vec(), value.clone()));
        }
    }
    oracle::verify_image(&spec, &points, image).map_err(|problem| {
        anyhow::anyhow!(
            "recovered version {} is not prefix-consistent: {problem}",
            info.version
        )
    })?;
    Ok(info.version == newest_published)
}

/// What the parent has heard from the child.
#[derive(Default)]
struct Heard {
    sessions: HashMap<SessionId, u32>,
    newest_published: u64,
    publications: u32,
}

impl Heard {
    fn take(&mut self, line: &str) -> Result<()> {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("session"), Some(id), Some(index)) => {
                self.sessions.insert(SessionId(id.parse()?), index.parse()?);
            }
            (Some("published"), Some(version), None) => {
                self.newest_published = version.parse()?;
                self.publications += 1;
            }
            _ => bail!("unexpected line from the child: {line:?}"),
        }
        Ok(())
    }
}

fn child_spec(keys: u64, seed: u64) -> WorkloadSpec {
    WorkloadSpec {
        keys,
        read_percent: 50,
        delete_percent: 0,
        zipfian: seed % 2 == 1,
        seed,
    }
}

/// The child: preload, then workers under continuous checkpoints until killed.
fn run_child(dir: &Path, args: &Args) -> Result<()> {
    let strategy: Strategy = args
        .child_strategy
        .as_deref()
        .unwrap_or("persian")
        .parse()
        .map_err(|_| anyhow::anyhow!("bad --child-strategy"))?;
    let spec = child_spec(args.keys, args.seed);
    let mut config = StoreConfig::new(dir.to_path_buf());
    config.index_buckets = (args.keys as usize / 4).next_power_of_two().max(1 << 10);
    config.log_memory_bytes = 256 << 20;
    config.flusher_threads = 2;
    let store = Store::open(config)?;
    let stdout = std::sync::Mutex::new(std::io::stdout());
    let say = |line: String| {
        let mut out = stdout.lock().expect("stdout lock");
        // A failed write means the parent is gone; the parent will kill us anyway.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let mut loader = store.start_session();
    say(format!("session {} 0", loader.id().0));
    for serial in 1..=spec.keys {
        if let Op::Upsert(key) = oracle::op_at(&spec, 0, serial) {
            loader.upsert(&key.to_be_bytes(), &oracle::encode_value(0, serial))?;
        }
    }
    loader.suspend();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| -> Result<()> {
        for index in 1..=args.threads {
            let (store, spec, stop, say) = (&store, &spec, &stop, &say);
            scope.spawn(move || -> Result<()> {
                let mut session = store.start_session();
                say(format!("session {} {index}", session.id().0));
                let mut value = Vec::new();
                let mut serial = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    serial += 1;
                    match oracle::op_at(spec, index, serial) {
                        Op::Read(key) => {
                            session.read(&key.to_be_bytes(), &mut value)?;
                        }
                        Op::Upsert(key) => session
                            .upsert(&key.to_be_bytes(), &oracle::encode_value(index, serial))?,
                        Op::Delete(key) => {
                            session.delete(&key.to_be_bytes())?;
                        }
                    }
                }
                Ok(())
            });
        }
        loop {
            let token = store.checkpoint(strategy)?;
            let report = store.wait_for_commit(token, Duration::from_secs(60))?;
            say(format!("published {}", report.version));
        }
    })
}
