//! The TPC-C part of the `tick` experiment (the paper's §5.5): an in-memory TPC-C
//! (`prefixkv_tickstate::tpcc`) is the mutator; its inputs go to the logical log and are
//! acknowledged in batches of `--tpcc-batch` (500) transactions, the paper's group commit; the
//! writer is pinned to another core than the mutator; checkpoints are taken as often as possible
//! (whenever the writer is idle at a batch boundary).
//!
//! Contenders, alternated over rounds, each on a fresh database of the same sizes and the same
//! input stream:
//! - **NS**, **IPP-Copy**, **IPP-Merge**: a `TickState` (one tick per batch; the population is
//!   tick 1's logged action). Copy and Merge are this project's names (`ImageBase`): Copy reads
//!   the previous image file back and overlays the dirty words; Merge keeps the previous image in
//!   writer memory (one more copy of the state) and overlays in place.
//! - **ARIES**: the physiological redo/undo log, fuzzy checkpoints and restart of
//!   `prefixkv_tickstate::aries`; its page writer runs back to back (as often as possible).
//! - **LOG-ONLY**: the logical log without any checkpoint (recovery replays everything); the
//!   cost every other contender adds to it is its overhead.
//!
//! Per run: throughput (transactions over wall time, inputs generated on the fly), every
//! transaction's latency (its execution; the batch's point of consistency is charged to the
//! batch's last transaction, since every transaction of the batch waits for it), checkpoints per
//! second, and the recovery time of the directory after the run. Every recovered database must
//! equal the reference — the population and the same inputs executed on a plain vector, no
//! durability code involved — or the run is not verified.

use super::Setup;
use crate::plot::{write_line_chart, LineChart, Series};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, median, ratio, Latencies, Spread};
use anyhow::{bail, Context, Result};
use prefixkv_storage::log::{AppendTicket, Log, LogConfig};
use prefixkv_tickstate::algo::{InterleavedPingPong, NaiveSnapshot};
use prefixkv_tickstate::aries::{self, Aries, AriesConfig};
use prefixkv_tickstate::tpcc::{
    execute, populate, Generator, Input, Outcome, Tpcc, TpccConfig, TpccError, WithUndo,
};
use prefixkv_tickstate::{recover, Algorithm, Config, ImageBase, TickState};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::Path;
use std::time::Instant;

/// Flags of the TPC-C part.
#[derive(clap::Args, Debug)]
pub struct TpccArgs {
    /// TPC-C warehouses (default: 4, or 1 with --quick).
    #[arg(long)]
    pub tpcc_warehouses: Option<u32>,
    /// Items, and stock rows per warehouse (default: 100000, or 10000 with --quick).
    #[arg(long)]
    pub tpcc_items: Option<u32>,
    /// Customers per district (default: 3000, or 300 with --quick).
    #[arg(long)]
    pub tpcc_customers: Option<u32>,
    /// Order slots per district, a ring (default: 8192, or 1024 with --quick).
    #[arg(long)]
    pub tpcc_order_slots: Option<u32>,
    /// Transactions per run (default: 1000000, or 20000 with --quick).
    #[arg(long)]
    pub tpcc_txns: Option<u64>,
    /// Transactions per group commit (a point of consistency for the tick-based contenders).
    #[arg(long, default_value_t = 500)]
    pub tpcc_batch: u64,
    /// Skip TPC-C.
    #[arg(long)]
    pub no_tpcc: bool,
}

const SEED: u64 = 0x7C0C_5EED;
/// Width of the over-time windows.
const WINDOW_NS: u64 = 100_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    LogOnly,
    Ns,
    IppCopy,
    IppMerge,
    Aries,
}

impl Contender {
    const ALL: [Contender; 5] = [
        Contender::LogOnly,
        Contender::Ns,
        Contender::IppCopy,
        Contender::IppMerge,
        Contender::Aries,
    ];

    fn label(self) -> &'static str {
        match self {
            Contender::LogOnly => "LOG-ONLY",
            Contender::Ns => "NS",
            Contender::IppCopy => "IPP-Copy",
            Contender::IppMerge => "IPP-Merge",
            Contender::Aries => "ARIES",
        }
    }
}

/// A durability method under the TPC-C mutator.
trait Engine {
    /// Run one transaction (logging its input, if this engine logs inputs).
    fn transaction(&mut self, tpcc: &Tpcc, input: &Input, encoded: &[u8]) -> Result<Outcome>;
    /// Batch `batch` (1-based) is complete: its point of consistency / group commit.
    fn end_batch(&mut self, batch: u64) -> Result<()>;
    /// Wait until batch `batch` is durable.
    fn wait_acknowledged(&mut self, batch: u64) -> Result<()>;
    fn checkpoints(&self) -> u64;
    /// Bytes the engine logged (its own count).
    fn log_bytes(&self) -> u64;
    fn memory_bytes(&self) -> u64;
    /// Stop (as after a crash: no final checkpoint), recover the directory; the recovered cells
    /// and the recovery time (ms).
    fn recover(self: Box<Self>, tpcc: &Tpcc) -> Result<(Vec<u64>, f64)>;
}

/// Recovery's replay of logged TPC-C inputs, with the first error kept (the `apply` of
/// `TickState` cannot return one).
fn replay<'a>(
    tpcc: &'a Tpcc,
    failure: &'a RefCell<Option<TpccError>>,
) -> impl FnMut(&mut [u64], u64, &[u8]) + 'a {
    move |cells, _tick, action| {
        if let Err(error) = tpcc.replay(cells, action) {
            failure.borrow_mut().get_or_insert(error);
        }
    }
}

struct TickEngine<A: Algorithm> {
    state: TickState<A>,
    dir: tempfile::TempDir,
    log_bytes: u64,
    merge_in_memory: bool,
}

impl<A: Algorithm> TickEngine<A> {
    fn open(tpcc: &Tpcc, image_base: ImageBase, writer_cpu: Option<usize>) -> Result<Self> {
        let dir = tempfile::tempdir().context("creating a temporary directory")?;
        let mut config = Config::new(tpcc.layout().cells());
        config.image_base = image_base;
        config.writer_cpu = writer_cpu;
        let failure = RefCell::new(None);
        let (mut state, _) = TickState::<A>::open(dir.path(), config, replay(tpcc, &failure))?;
        let mut action = Vec::new();
        Input::Load.encode(&mut action);
        state.log_action(&action)?;
        populate(tpcc, &mut state);
        state.point_of_consistency(1)?;
        state.wait_durable()?;
        Ok(TickEngine {
            state,
            dir,
            log_bytes: action.len() as u64,
            merge_in_memory: image_base == ImageBase::MergeInMemory,
        })
    }
}

impl<A: Algorithm> Engine for TickEngine<A> {
    fn transaction(&mut self, tpcc: &Tpcc, input: &Input, encoded: &[u8]) -> Result<Outcome> {
        self.state.log_action(encoded)?;
        self.log_bytes += encoded.len() as u64;
        Ok(execute(tpcc, &mut WithUndo::new(&mut self.state), input)?)
    }
    fn end_batch(&mut self, batch: u64) -> Result<()> {
        // Tick 1 is the population; batch b is tick b + 1.
        self.state.point_of_consistency(batch + 1)?;
        Ok(())
    }
    fn wait_acknowledged(&mut self, batch: u64) -> Result<()> {
        self.state.wait_durable_through(batch + 1)?;
        Ok(())
    }
    fn checkpoints(&self) -> u64 {
        self.state.stats().checkpoints_started
    }
    fn log_bytes(&self) -> u64 {
        self.log_bytes
    }
    fn memory_bytes(&self) -> u64 {
        let extra = if self.merge_in_memory {
            self.state.words() as u64 * 8
        } else {
            0
        };
        self.state.memory_bytes() as u64 + extra
    }
    fn recover(self: Box<Self>, tpcc: &Tpcc) -> Result<(Vec<u64>, f64)> {
        let TickEngine { state, dir, .. } = *self;
        state.close()?;
        let failure = RefCell::new(None);
        let started = Instant::now();
        let (cells, _, _) = recover(dir.path(), tpcc.layout().cells(), replay(tpcc, &failure))?;
        let recovery_ms = started.elapsed().as_secs_f64() * 1e3;
        if let Some(error) = failure.into_inner() {
            bail!("replaying the logical log: {error}");
        }
        Ok((cells, recovery_ms))
    }
}

struct AriesEngine {
    aries: Aries,
    dir: tempfile::TempDir,
    tickets: VecDeque<(u64, AppendTicket)>,
}

impl AriesEngine {
    fn open(tpcc: &Tpcc, writer_cpu: Option<usize>) -> Result<AriesEngine> {
        let dir = tempfile::tempdir().context("creating a temporary directory")?;
        let mut initial = vec![0u64; tpcc.layout().cells()];
        populate(tpcc, initial.as_mut_slice());
        let mut config = AriesConfig::new(initial.len());
        config.writer_cpu = writer_cpu;
        let aries = Aries::create(dir.path(), &initial, config)?;
        Ok(AriesEngine {
            aries,
            dir,
            tickets: VecDeque::new(),
        })
    }
}

impl Engine for AriesEngine {
    fn transaction(&mut self, tpcc: &Tpcc, input: &Input, _encoded: &[u8]) -> Result<Outcome> {
        Ok(execute(tpcc, &mut self.aries, input)?)
    }
    fn end_batch(&mut self, batch: u64) -> Result<()> {
        if let Some(ticket) = self.aries.take_commit_ticket() {
            self.tickets.push_back((batch, ticket));
        }
        if let Some(failure) = self.aries.writer_failure() {
            bail!("the ARIES page writer failed: {failure}");
        }
        Ok(())
    }
    fn wait_acknowledged(&mut self, batch: u64) -> Result<()> {
        while self.tickets.front().is_some_and(|(b, _)| *b <= batch) {
            let (_, ticket) = self.tickets.pop_front().expect("checked");
            ticket.wait()?;
        }
        Ok(())
    }
    fn checkpoints(&self) -> u64 {
        self.aries.stats().checkpoints
    }
    fn log_bytes(&self) -> u64 {
        self.aries.stats().log_bytes
    }
    fn memory_bytes(&self) -> u64 {
        let cells = self.aries.cells() as u64;
        // Cells, and per page: page LSN, recLSN, latch.
        cells * 8 + aries::pages_of(cells as usize) as u64 * 17
    }
    fn recover(self: Box<Self>, tpcc: &Tpcc) -> Result<(Vec<u64>, f64)> {
        let AriesEngine { aries, dir, .. } = *self;
        drop(aries);
        let started = Instant::now();
        let (cells, _) = aries::recover(dir.path(), tpcc.layout().cells())?;
        Ok((cells, started.elapsed().as_secs_f64() * 1e3))
    }
}

struct LogOnlyEngine {
    cells: Vec<u64>,
    log: Log,
    dir: tempfile::TempDir,
    last: Option<AppendTicket>,
    tickets: VecDeque<(u64, AppendTicket)>,
    log_bytes: u64,
}

impl LogOnlyEngine {
    fn open(tpcc: &Tpcc) -> Result<LogOnlyEngine> {
        let dir = tempfile::tempdir().context("creating a temporary directory")?;
        let mut cells = vec![0u64; tpcc.layout().cells()];
        populate(tpcc, cells.as_mut_slice());
        let (log, _) = Log::open(dir.path().join("log"), LogConfig::default())?;
        Ok(LogOnlyEngine {
            cells,
            log,
            dir,
            last: None,
            tickets: VecDeque::new(),
            log_bytes: 0,
        })
    }
}

impl Engine for LogOnlyEngine {
    fn transaction(&mut self, tpcc: &Tpcc, input: &Input, encoded: &[u8]) -> Result<Outcome> {
        self.last = Some(self.log.append(encoded)?);
        self.log_bytes += encoded.len() as u64;
        Ok(execute(
            tpcc,
            &mut WithUndo::new(self.cells.as_mut_slice()),
            input,
        )?)
    }
    fn end_batch(&mut self, batch: u64) -> Result<()> {
        if let Some(ticket) = self.last.take() {
            self.tickets.push_back((batch, ticket));
        }
        Ok(())
    }
    fn wait_acknowledged(&mut self, batch: u64) -> Result<()> {
        while self.tickets.front().is_some_and(|(b, _)| *b <= batch) {
            let (_, ticket) = self.tickets.pop_front().expect("checked");
            ticket.wait()?;
        }
        Ok(())
    }
    fn checkpoints(&self) -> u64 {
        0
    }
    fn log_bytes(&self) -> u64 {
        self.log_bytes
    }
    fn memory_bytes(&self) -> u64 {
        self.cells.len() as u64 * 8
    }
    fn recover(self: Box<Self>, tpcc: &Tpcc) -> Result<(Vec<u64>, f64)> {
        let LogOnlyEngine { log, dir, .. } = *self;
        log.close()?;
        // No checkpoint: the population, then every logged input.
        let started = Instant::now();
        let mut cells = vec![0u64; tpcc.layout().cells()];
        populate(tpcc, cells.as_mut_slice());
        let (log, _) = Log::open(dir.path().join("log"), LogConfig::default())?;
        for record in log.replay(1)? {
            let (_, action) = record?;
            tpcc.replay(cells.as_mut_slice(), &action)?;
        }
        log.close()?;
        Ok((cells, started.elapsed().as_secs_f64() * 1e3))
    }
}

/// What one run measured.
struct TpccRun {
    elapsed_s: f64,
    txns: u64,
    rolled_back: u64,
    latency_ns: Vec<f64>,
    end_ns: Vec<u64>,
    ack_wait_ms: f64,
    checkpoints: u64,
    log_bytes: u64,
    memory_bytes: u64,
    recovery_ms: f64,
    verified: bool,
}

/// Every transaction latency of `runs` as one distribution.
fn latencies(runs: &[TpccRun]) -> Latencies {
    let mut all = Latencies::new();
    for run in runs {
        for &latency_ns in &run.latency_ns {
            all.record_ns(latency_ns as u64);
        }
    }
    all
}

impl TpccRun {
    fn txns_per_s(&self) -> f64 {
        self.txns as f64 / self.elapsed_s
    }
    fn latency_us(&self, fraction: f64) -> f64 {
        latencies(std::slice::from_ref(self)).quantile_us(fraction)
    }
    /// Per window of `WINDOW_NS`: (window start s, transactions per second, max latency µs).
    fn windows(&self) -> Vec<(f64, f64, f64)> {
        let count = self.end_ns.last().map_or(0, |end| end / WINDOW_NS + 1) as usize;
        let mut windows = vec![(0u64, 0f64); count];
        for (end, latency) in self.end_ns.iter().zip(&self.latency_ns) {
            let window = &mut windows[(end / WINDOW_NS) as usize];
            window.0 += 1;
            window.1 = window.1.max(*latency);
        }
        windows
            .iter()
            .enumerate()
            .map(|(number, (txns, max))| {
                (
                    number as f64 * WINDOW_NS as f64 / 1e9,
                    *txns as f64 * 1e9 / WINDOW_NS as f64,
                    max / 1e3,
                )
            })
            .collect()
    }
}

fn open_engine(
    contender: Contender,
    tpcc: &Tpcc,
    writer_cpu: Option<usize>,
) -> Result<Box<dyn Engine>> {
    Ok(match contender {
        Contender::LogOnly => Box::new(LogOnlyEngine::open(tpcc)?),
        Contender::Ns => Box::new(TickEngine::<NaiveSnapshot>::open(
            tpcc,
            ImageBase::CopyFromFile,
            writer_cpu,
        )?),
        Contender::IppCopy => Box::new(TickEngine::<InterleavedPingPong>::open(
            tpcc,
            ImageBase::CopyFromFile,
            writer_cpu,
        )?),
        Contender::IppMerge => Box::new(TickEngine::<InterleavedPingPong>::open(
            tpcc,
            ImageBase::MergeInMemory,
            writer_cpu,
        )?),
        Contender::Aries => Box::new(AriesEngine::open(tpcc, writer_cpu)?),
    })
}

/// Drive `engine` with `batches` batches of `batch` inputs, then recover and compare with
/// `reference`.
fn run_one(
    engine: Box<dyn Engine>,
    tpcc: &Tpcc,
    batches: u64,
    batch: u64,
    reference: &[u64],
) -> Result<(TpccRun, Option<String>)> {
    let mut engine = engine;
    let mut generator = Generator::new(*tpcc.config(), SEED);
    let txns = batches * batch;
    let mut run = TpccRun {
        elapsed_s: 0.0,
        txns,
        rolled_back: 0,
        latency_ns: Vec::with_capacity(txns as usize),
        end_ns: Vec::with_capacity(txns as usize),
        ack_wait_ms: 0.0,
        checkpoints: 0,
        log_bytes: 0,
        memory_bytes: 0,
        recovery_ms: 0.0,
        verified: false,
    };
    let mut encoded = Vec::new();
    let started = Instant::now();
    for number in 1..=batches {
        for _ in 0..batch {
            let input = generator.next_input();
            input.encode(&mut encoded);
            let begun = Instant::now();
            if engine.transaction(tpcc, &input, &encoded)? == Outcome::RolledBack {
                run.rolled_back += 1;
            }
            let ended = Instant::now();
            run.latency_ns.push((ended - begun).as_nanos() as f64);
            run.end_ns.push((ended - started).as_nanos() as u64);
        }
        // The paper: the previous batch's log write overlaps this batch's work, and must be
        // durable before the next point of consistency.
        if number > 1 {
            let waited = Instant::now();
            engine.wait_acknowledged(number - 1)?;
            run.ack_wait_ms += waited.elapsed().as_secs_f64() * 1e3;
        }
        let begun = Instant::now();
        engine.end_batch(number)?;
        *run.latency_ns.last_mut().expect("a batch has transactions") +=
            begun.elapsed().as_nanos() as f64;
    }
    engine.wait_acknowledged(batches)?;
    run.elapsed_s = started.elapsed().as_secs_f64();
    run.checkpoints = engine.checkpoints();
    run.log_bytes = engine.log_bytes();
    run.memory_bytes = engine.memory_bytes();
    let (recovered, recovery_ms) = engine.recover(tpcc)?;
    run.recovery_ms = recovery_ms;
    let failure = match recovered.iter().zip(reference).position(|(a, b)| a != b) {
        _ if recovered.len() != reference.len() => Some(format!(
            "recovered {} cells, the reference has {}",
            recovered.len(),
            reference.len()
        )),
        Some(cell) => Some(format!(
            "recovered database differs from the independent replay at cell {cell}: {:#x}, \
             reference {:#x}",
            recovered[cell], reference[cell]
        )),
        None => None,
    };
    run.verified = failure.is_none();
    Ok((run, failure))
}

/// The part: every contender alternated over rounds, rows, charts and the `tpcc_*` summary.
pub(super) fn run_part(
    setup: &Setup,
    args: &TpccArgs,
    report: &mut Report,
    out: &Path,
) -> Result<()> {
    let quick = setup.quick;
    let config = TpccConfig {
        warehouses: args.tpcc_warehouses.unwrap_or(if quick { 1 } else { 4 }),
        items: args
            .tpcc_items
            .unwrap_or(if quick { 10_000 } else { 100_000 }),
        customers_per_district: args
            .tpcc_customers
            .unwrap_or(if quick { 300 } else { 3_000 }),
        order_slots: args
            .tpcc_order_slots
            .unwrap_or(if quick { 1_024 } else { 8_192 }),
        history_slots: 65_536,
    };
    let tpcc = Tpcc::new(config, SEED)?;
    let txns = args
        .tpcc_txns
        .unwrap_or(if quick { 20_000 } else { 1_000_000 });
    if args.tpcc_batch == 0 || txns < args.tpcc_batch || args.tpcc_batch > 1_000_000 {
        bail!("--tpcc-batch {} and --tpcc-txns {txns}: need 1 <= batch <= txns (batch at most 1000000)", args.tpcc_batch);
    }
    let batches = txns / args.tpcc_batch;
    let txns = batches * args.tpcc_batch;
    let cells = tpcc.layout().cells();
    report.config("tpcc_warehouses", config.warehouses);
    report.config("tpcc_items", config.items);
    report.config("tpcc_customers_per_district", config.customers_per_district);
    report.config("tpcc_order_slots", config.order_slots);
    report.config("tpcc_history_slots", config.history_slots);
    report.config("tpcc_state_bytes", cells as u64 * 8);
    report.config("tpcc_txns_per_run", txns);
    report.config("tpcc_batch", args.tpcc_batch);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let writer_cpu = (cpus >= 2).then_some(1);
    report.config("tpcc_mutator_cpu", 0u64);
    report.config(
        "tpcc_writer_cpu",
        writer_cpu.map_or(Value::Null, Value::from),
    );

    // The reference: the population and the inputs on a plain vector.
    let mut reference = vec![0u64; cells];
    populate(&tpcc, reference.as_mut_slice());
    let started = Instant::now();
    let mut generator = Generator::new(config, SEED);
    let mut store = WithUndo::new(reference.as_mut_slice());
    for _ in 0..txns {
        execute(&tpcc, &mut store, &generator.next_input())?;
    }
    drop(store);
    let memory_only = txns as f64 / started.elapsed().as_secs_f64();
    eprintln!("tick: TPC-C reference of {txns} transactions done ({memory_only:.0}/s in memory)");

    let mut runs: Vec<Vec<TpccRun>> = Contender::ALL.iter().map(|_| Vec::new()).collect();
    for (round, number) in alternating_schedule(Contender::ALL.len(), setup.e2e_rounds) {
        let contender = Contender::ALL[number];
        // The mutator on CPU 0, in a thread of its own (the rest of the bench is not pinned).
        let (run, failure) = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    if let Err(error) = prefixkv_tickstate::pin_current_thread(0) {
                        eprintln!("tick: TPC-C could not pin the mutator to CPU 0: {error}");
                    }
                    let engine = open_engine(contender, &tpcc, writer_cpu)?;
                    run_one(engine, &tpcc, batches, args.tpcc_batch, &reference)
                })
                .join()
                .expect("the TPC-C mutator thread panicked")
        })?;
        report.check(
            "TPC-C checkpoint images",
            "a reference replay of the same transactions",
            1,
            run.verified,
        );
        if let Some(failure) = failure {
            let message = format!("tpcc {} round {round}: {failure}", contender.label());
            eprintln!("tick: {message}");
            report.notes.push(message);
        }
        eprintln!(
            "tick: TPC-C {} round {round}: {:.0} txn/s, p99 {:.1} µs, {} checkpoints, recovery {:.0} ms (verified: {})",
            contender.label(),
            run.txns_per_s(),
            run.latency_us(0.99),
            run.checkpoints,
            run.recovery_ms,
            run.verified
        );
        runs[number].push(run);
    }
    for (contender, runs) in Contender::ALL.iter().zip(&runs) {
        report.rows.push(tpcc_row(*contender, runs));
    }
    tpcc_summary(report, &runs, memory_only);
    tpcc_charts(&runs, out)
}

fn tpcc_row(contender: Contender, runs: &[TpccRun]) -> serde_json::Map<String, Value> {
    let mut line = row([
        ("part", Value::from("tpcc")),
        ("algorithm", Value::from(contender.label())),
        ("rounds", Value::from(runs.len() as u64)),
    ]);
    let per_run =
        |value: &dyn Fn(&TpccRun) -> f64| Spread::of(&runs.iter().map(value).collect::<Vec<_>>());
    per_run(&|run| run.txns_per_s()).insert_into(&mut line, "txns_per_s");
    let all = latencies(runs);
    for (name, fraction) in [
        ("latency_p50_us", 0.5),
        ("latency_p99_us", 0.99),
        ("latency_max_us", 1.0),
    ] {
        line.insert(name.into(), Value::from(all.quantile_us(fraction)));
    }
    per_run(&|run| run.latency_us(0.99)).insert_into(&mut line, "latency_p99_us_per_round");
    per_run(&|run| run.checkpoints as f64 / run.elapsed_s)
        .insert_into(&mut line, "checkpoints_per_s");
    per_run(&|run| run.recovery_ms).insert_into(&mut line, "recovery_ms");
    per_run(&|run| run.ack_wait_ms).insert_into(&mut line, "ack_wait_ms");
    let txns: u64 = runs.iter().map(|run| run.txns).sum();
    let log_bytes: u64 = runs.iter().map(|run| run.log_bytes).sum();
    line.insert(
        "log_bytes_per_txn".into(),
        Value::from(ratio(log_bytes as f64, txns as f64)),
    );
    line.insert(
        "rolled_back_per_run".into(),
        Value::from(runs.first().map_or(0, |run| run.rolled_back)),
    );
    line.insert(
        "memory_bytes".into(),
        Value::from(runs.first().map_or(0, |run| run.memory_bytes)),
    );
    line.insert(
        "verified".into(),
        Value::from(runs.iter().all(|run| run.verified)),
    );
    line
}

fn tpcc_summary(report: &mut Report, runs: &[Vec<TpccRun>], memory_only: f64) {
    let index = |contender: Contender| {
        Contender::ALL
            .iter()
            .position(|c| *c == contender)
            .expect("listed")
    };
    let throughput = |contender: Contender| {
        median(
            &runs[index(contender)]
                .iter()
                .map(TpccRun::txns_per_s)
                .collect::<Vec<_>>(),
        )
    };
    let p99 = |contender: Contender| latencies(&runs[index(contender)]).quantile_ns(0.99);
    let spike = |contender: Contender| {
        let all = latencies(&runs[index(contender)]);
        ratio(all.quantile_ns(1.0), all.quantile_ns(0.5))
    };
    // Overhead per transaction: time per transaction beyond the logical log alone.
    let overhead_ns =
        |contender: Contender| 1e9 / throughput(contender) - 1e9 / throughput(Contender::LogOnly);
    report.summary(
        "tpcc_ipp_over_aries",
        ratio(throughput(Contender::IppCopy), throughput(Contender::Aries)),
    );
    report.summary(
        "tpcc_p99_ipp_over_aries",
        ratio(p99(Contender::IppCopy), p99(Contender::Aries)),
    );
    report.summary(
        "tpcc_ipp_copy_over_merge",
        ratio(
            throughput(Contender::IppCopy),
            throughput(Contender::IppMerge),
        ),
    );
    report.summary(
        "tpcc_ipp_over_ns",
        ratio(throughput(Contender::IppCopy), throughput(Contender::Ns)),
    );
    report.summary(
        "tpcc_overhead_ipp_over_aries",
        ratio(
            overhead_ns(Contender::IppCopy),
            overhead_ns(Contender::Aries),
        ),
    );
    for contender in [Contender::Ns, Contender::IppCopy, Contender::Aries] {
        let name = contender.label().to_ascii_lowercase().replace('-', "_");
        report.summary(
            &format!("tpcc_{name}_latency_max_over_p50"),
            spike(contender),
        );
    }
    report.summary("tpcc_memory_only_txns_per_s", memory_only);
    report.notes.push("TPC-C: tpcc_ipp_over_aries, tpcc_ipp_copy_over_merge and tpcc_ipp_over_ns are throughput ratios (medians over rounds; above 1: the first is faster); tpcc_p99_ipp_over_aries is the ratio of 99th-percentile transaction latencies over all rounds (below 1: IPP's is lower); tpcc_overhead_ipp_over_aries = (1/throughput − 1/LOG-ONLY's) of IPP-Copy over ARIES's, the time each adds per transaction to the logical log alone. IPP means IPP-Copy. Latency is a transaction's execution; the point of consistency closing a batch is charged to its last transaction.".into());
}

fn tpcc_charts(runs: &[Vec<TpccRun>], out: &Path) -> Result<()> {
    let series = |value: fn(&(f64, f64, f64)) -> f64| -> Vec<Series> {
        Contender::ALL
            .iter()
            .zip(runs)
            .filter_map(|(contender, runs)| {
                runs.first().map(|run| Series {
                    label: contender.label().into(),
                    points: run
                        .windows()
                        .iter()
                        .map(|window| (window.0, value(window)))
                        .collect(),
                })
            })
            .collect()
    };
    write_line_chart(
        &LineChart {
            title: "TPC-C throughput over time (100 ms windows, round 1)".into(),
            x_label: "time (s)".into(),
            y_label: "transactions per second".into(),
            series: series(|window| window.1),
            markers: Vec::new(),
            log_x: false,
        },
        out,
        "tick_tpcc_throughput",
    )?;
    write_line_chart(
        &LineChart {
            title: "TPC-C: slowest transaction per 100 ms window (round 1)".into(),
            x_label: "time (s)".into(),
            y_label: "max transaction latency (µs)".into(),
            series: series(|window| window.2),
            markers: Vec::new(),
            log_x: false,
        },
        out,
        "tick_tpcc_latency",
    )
}
