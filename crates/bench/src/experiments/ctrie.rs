//! `prefixkv-bench ctrie`: the CTrie against concurrent maps without snapshots (dashmap,
//! papaya) and with them (concread's `HashTrie`, an `imbl::HashMap` cloned under a lock), and
//! the cost of a snapshot (plus the first write after it) as the map grows.
//!
//! Part 1 (throughput): every contender is filled with the same keys, then `threads` threads
//! run a get/insert mix (r90w10 by default: 90 % gets, 10 % inserts of uniform 8-byte keys,
//! each insert moved onto a key its thread owns, `key % threads == thread`, so that the final
//! contents can be checked against a model) for a fixed time; contenders alternate over `common.rounds()` rounds. All maps hash with
//! the same function (foldhash), except concread, whose hasher is fixed (foldhash's fast
//! variant, with its `foldhash` feature).
//!
//! Part 2 (snapshot cost): the snapshotting structures grow together through the sizes; at each
//! size, each round times `snapshots_per_round` snapshot calls back to back (`snapshot_ns`, the
//! headline), then as many snapshot + first insert round trips (the insert is made while the
//! snapshot is alive, so it pays whatever copying the snapshot defers: `snapshot_after_write_ns`,
//! `first_write_after_snapshot_ns`), alternating structures.
//!
//! Part 3 (SMaRtTrie's Fig. 3): per state size, one thread updating uniformly random loaded
//! keys in the CTrie, dashmap, papaya and a `BTreeMap` behind a mutex (the blocking model's
//! structure); rows `part: "fig3_updates"`, plot `ctrie-fig3`.
//!
//! Verification: after parts 1 and 3, every map is compared entry by entry with a model of its
//! contents (`ctrie/mix.rs`: each worker writes only keys it owns, with values unique per write, and
//! the model replays each thread's operations up to the count it reported, so a lost update
//! shows), and its length with the model's. In part 2, a CTrie read-only snapshot kept from the
//! smallest size must still iterate to that size's model at the end, and a final snapshot of
//! the grown CTrie must iterate to the final model (every key and value, and `len`).

use crate::plot::{write_line_chart, LineChart, Series};
use crate::progress;
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, ratio, Latencies, Spread};
use anyhow::{bail, Result};
use concread::hashtrie::HashTrie;
use parking_lot::RwLock;
use prefixkv_ctrie::{CTrie, DefaultHashBuilder, ReadOnlySnapshot};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

mod mix;

use mix::{check_with_models, run_mix, MixRun};

/// Flags of `prefixkv-bench ctrie`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Worker threads of the throughput part.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Percentage of gets in the mix (the rest are inserts); 90 is "r90w10".
    #[arg(long, default_value_t = 90)]
    pub read_percent: u32,
    /// Keys in each map for the throughput part (default: 1 000 000; quick: 100 000).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Measured time per contender per round, in milliseconds (default: 2000; quick: 300).
    #[arg(long)]
    pub duration_ms: Option<u64>,
    /// Largest map of the snapshot part (default: 10 000 000; quick: 1 000 000); sizes go from
    /// 10 000 up by factors of 10.
    #[arg(long)]
    pub max_snapshot_keys: Option<u64>,
    /// Snapshots (each with its first write) per structure per round and size.
    #[arg(long, default_value_t = 301)]
    pub snapshots_per_round: usize,
    /// State sizes (keys) of part 3, SMaRtTrie's Fig. 3 [default: 10000,100000,1000000,10000000;
    /// quick: 10000,100000]; empty skips it.
    #[arg(long)]
    pub fig3_keys: Option<String>,
}

/// A map under test: gets and inserts of `u64` keys and values.
trait Contender: Sync {
    fn get(&self, key: u64) -> Option<u64>;
    fn insert(&self, key: u64, value: u64);
    /// Keys held (for the model check: no key beyond the model's).
    fn len(&self) -> usize;
}

impl Contender for CTrie<u64, u64> {
    fn get(&self, key: u64) -> Option<u64> {
        CTrie::get(self, &key)
    }
    fn insert(&self, key: u64, value: u64) {
        CTrie::insert(self, key, value);
    }
    fn len(&self) -> usize {
        CTrie::len(self)
    }
}

impl Contender for dashmap::DashMap<u64, u64, DefaultHashBuilder> {
    fn get(&self, key: u64) -> Option<u64> {
        dashmap::DashMap::get(self, &key).map(|entry| *entry)
    }
    fn insert(&self, key: u64, value: u64) {
        dashmap::DashMap::insert(self, key, value);
    }
    fn len(&self) -> usize {
        dashmap::DashMap::len(self)
    }
}

impl Contender for papaya::HashMap<u64, u64, DefaultHashBuilder> {
    fn get(&self, key: u64) -> Option<u64> {
        self.pin().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.pin().insert(key, value);
    }
    fn len(&self) -> usize {
        self.pin().len()
    }
}

impl Contender for HashTrie<u64, u64> {
    fn get(&self, key: u64) -> Option<u64> {
        self.read().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        let mut write = self.write();
        write.insert(key, value);
        write.commit();
    }
    fn len(&self) -> usize {
        self.read().len()
    }
}

/// `imbl::HashMap` behind a lock: a snapshot is an O(1) `clone()` under the read lock.
type ImblMap =
    imbl::GenericHashMap<u64, u64, DefaultHashBuilder, imbl::shared_ptr::DefaultSharedPtr>;

/// `imbl::HashMap` (with our hasher) behind a lock.
struct LockedImbl(RwLock<ImblMap>);

impl Contender for LockedImbl {
    fn get(&self, key: u64) -> Option<u64> {
        self.0.read().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.write().insert(key, value);
    }
    fn len(&self) -> usize {
        self.0.read().len()
    }
}

/// `BTreeMap` behind a lock: SMaRtTrie's blocking model keeps its state in an ordered map.
struct LockedBTree(parking_lot::Mutex<BTreeMap<u64, u64>>);

impl Contender for LockedBTree {
    fn get(&self, key: u64) -> Option<u64> {
        self.0.lock().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.0.lock().insert(key, value);
    }
    fn len(&self) -> usize {
        self.0.lock().len()
    }
}

/// Part 3, SMaRtTrie's Fig. 3: one thread updating uniformly random loaded keys, per state
/// size, in each structure the replicated store could hold its state in. Verified: every
/// structure, entry by entry, against the model of the loaded keys and the updates it ran.
fn fig3_updates(
    report: &mut Report,
    sizes: &[u64],
    duration: Duration,
    rounds: usize,
) -> Vec<(String, Vec<(f64, f64)>)> {
    let names = ["ctrie", "dashmap", "papaya", "btreemap_mutex"];
    let mut series: Vec<Vec<(f64, f64)>> = vec![Vec::new(); names.len()];
    let bar = progress::bar((sizes.len() * rounds * names.len()) as u64, "fig3 updates");
    for &size in sizes {
        let ctrie: CTrie<u64, u64> = CTrie::new();
        let dash = dashmap::DashMap::with_hasher(DefaultHashBuilder::default());
        let papaya_map = papaya::HashMap::with_hasher(DefaultHashBuilder::default());
        let btree = LockedBTree(parking_lot::Mutex::new(BTreeMap::new()));
        {
            let papaya_pinned = papaya_map.pin();
            let mut btree_locked = btree.0.lock();
            for key in 0..size {
                ctrie.insert(key, value_of(key));
                dash.insert(key, value_of(key));
                papaya_pinned.insert(key, value_of(key));
                btree_locked.insert(key, value_of(key));
            }
        }
        let contenders: [&dyn Contender; 4] = [&ctrie, &dash, &papaya_map, &btree];
        let mut throughput: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
        let mut runs: Vec<Vec<MixRun>> = vec![Vec::new(); names.len()];
        for (round, contender) in alternating_schedule(names.len(), rounds) {
            // One thread, 0 % reads: updates of existing keys only.
            let seed = round as u64;
            let (ops, operations) = run_mix(contenders[contender], 1, size, 0, duration, seed);
            throughput[contender].push(ops);
            runs[contender].push(MixRun { seed, operations });
            bar.inc(1);
        }
        let maps: Vec<(&str, &dyn Contender)> = names.iter().copied().zip(contenders).collect();
        check_with_models(
            report,
            (
                "fig3 maps after single-thread updates, every entry and the length",
                "a model of the loaded keys replaying the updates",
            ),
            &maps,
            size,
            0,
            &runs,
        );
        for (index, name) in names.iter().enumerate() {
            let spread = Spread::of(&throughput[index]);
            series[index].push((size as f64, spread.median));
            let mut entry = row([
                ("variant", Value::from(*name)),
                ("part", Value::from("fig3_updates")),
                ("threads", Value::from(1u64)),
                ("keys", Value::from(size)),
            ]);
            spread.insert_into(&mut entry, "throughput_ops_per_s");
            report.rows.push(entry);
        }
    }
    bar.finish_and_clear();
    names.iter().map(|n| n.to_string()).zip(series).collect()
}

fn value_of(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555
}

/// One snapshotting structure of part 2.
trait Snapshotting {
    /// Takes a snapshot and drops it; returns the time of the snapshot call in nanoseconds.
    fn snapshot_only(&self) -> f64;
    /// Takes a snapshot, then inserts `key` while it is alive; returns (snapshot, first write)
    /// times in nanoseconds.
    fn snapshot_then_write(&self, key: u64, value: u64) -> (f64, f64);
    fn fill(&self, keys: std::ops::Range<u64>);
}

fn nanos(since: Instant) -> f64 {
    since.elapsed().as_nanos() as f64
}

impl Snapshotting for CTrie<u64, u64> {
    fn snapshot_only(&self) -> f64 {
        let start = Instant::now();
        let snapshot = self.read_only_snapshot();
        let snapshot_ns = nanos(start);
        drop(std::hint::black_box(snapshot));
        snapshot_ns
    }
    fn snapshot_then_write(&self, key: u64, value: u64) -> (f64, f64) {
        let start = Instant::now();
        let snapshot = self.read_only_snapshot();
        let snapshot_ns = nanos(start);
        let start = Instant::now();
        self.insert(key, value);
        let write_ns = nanos(start);
        drop(std::hint::black_box(snapshot));
        (snapshot_ns, write_ns)
    }
    fn fill(&self, keys: std::ops::Range<u64>) {
        for key in keys {
            self.insert(key, value_of(key));
        }
    }
}

impl Snapshotting for HashTrie<u64, u64> {
    fn snapshot_only(&self) -> f64 {
        let start = Instant::now();
        let snapshot = self.read();
        let snapshot_ns = nanos(start);
        drop(std::hint::black_box(snapshot));
        snapshot_ns
    }
    fn snapshot_then_write(&self, key: u64, value: u64) -> (f64, f64) {
        let start = Instant::now();
        let snapshot = self.read();
        let snapshot_ns = nanos(start);
        let start = Instant::now();
        Contender::insert(self, key, value);
        let write_ns = nanos(start);
        drop(std::hint::black_box(snapshot));
        (snapshot_ns, write_ns)
    }
    fn fill(&self, keys: std::ops::Range<u64>) {
        // Batched commits: one write transaction per 10 000 keys.
        let keys: Vec<u64> = keys.collect();
        for chunk in keys.chunks(10_000) {
            let mut write = self.write();
            for &key in chunk {
                write.insert(key, value_of(key));
            }
            write.commit();
        }
    }
}

impl Snapshotting for LockedImbl {
    fn snapshot_only(&self) -> f64 {
        let start = Instant::now();
        let snapshot = self.0.read().clone();
        let snapshot_ns = nanos(start);
        drop(std::hint::black_box(snapshot));
        snapshot_ns
    }
    fn snapshot_then_write(&self, key: u64, value: u64) -> (f64, f64) {
        let start = Instant::now();
        let snapshot = self.0.read().clone();
        let snapshot_ns = nanos(start);
        let start = Instant::now();
        Contender::insert(self, key, value);
        let write_ns = nanos(start);
        drop(std::hint::black_box(snapshot));
        (snapshot_ns, write_ns)
    }
    fn fill(&self, keys: std::ops::Range<u64>) {
        let mut map = self.0.write();
        for key in keys {
            map.insert(key, value_of(key));
        }
    }
}

/// Sizes after applying `--quick` defaults.
struct Plan {
    quick: bool,
    threads: usize,
    read_percent: u32,
    /// The mix's name, `r{reads}w{writes}`.
    mix: String,
    keys: u64,
    duration: Duration,
    max_snapshot_keys: u64,
    snapshots_per_round: usize,
    rounds: usize,
    /// Map sizes of part 2: 10 000 up by factors of 10 to `max_snapshot_keys`.
    snapshot_sizes: Vec<u64>,
    /// State sizes of part 3 (empty: skipped).
    fig3_sizes: Vec<u64>,
}

/// The names of part 1's contenders, in the order they are built.
const THROUGHPUT_NAMES: [&str; 5] = [
    "ctrie",
    "dashmap",
    "papaya",
    "concread_hashtrie",
    "imbl_rwlock",
];

/// Runs the experiment.
pub fn run(common: &crate::Common, args: &Args) -> Result<Report> {
    let plan = plan(common, args)?;
    let mut report = Report::new("ctrie");
    write_config(&mut report, &plan);
    let medians = throughput_part(&mut report, &plan);
    let snapshots = snapshot_part(&mut report, &plan);
    write_summary(&mut report, &plan, &medians, &snapshots);
    write_chart(
        common,
        [
            "ctrie",
            "Snapshot time against map size",
            "keys in the map (log scale)",
            "snapshot time (ns, median)",
        ],
        snapshots.series,
    )?;
    if !plan.fig3_sizes.is_empty() {
        let series = fig3_updates(&mut report, &plan.fig3_sizes, plan.duration, plan.rounds);
        write_chart(
            common,
            [
                "ctrie-fig3",
                "Single-thread updates against state size (SMaRtTrie Fig. 3)",
                "keys loaded (log scale)",
                "updates per second (median)",
            ],
            series,
        )?;
    }
    Ok(report)
}

fn plan(common: &crate::Common, args: &Args) -> Result<Plan> {
    if args.threads == 0 || args.read_percent > 100 || args.snapshots_per_round == 0 {
        bail!("--threads and --snapshots-per-round must be at least 1, --read-percent at most 100");
    }
    if args.keys.is_some_and(|keys| keys < args.threads as u64) {
        // Each thread writes only keys it owns: it needs at least one.
        bail!("--keys must be at least --threads");
    }
    let quick = common.quick;
    let max_snapshot_keys =
        args.max_snapshot_keys
            .unwrap_or(if quick { 1_000_000 } else { 10_000_000 });
    let mut snapshot_sizes = vec![10_000u64];
    while snapshot_sizes.last().copied().unwrap_or(0) * 10 <= max_snapshot_keys {
        snapshot_sizes.push(snapshot_sizes.last().copied().unwrap_or(0) * 10);
    }
    let fig3_sizes: Vec<u64> = args
        .fig3_keys
        .as_deref()
        .unwrap_or(if quick {
            "10000,100000"
        } else {
            "10000,100000,1000000,10000000"
        })
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse::<u64>())
        .collect::<std::result::Result<_, _>>()?;
    Ok(Plan {
        quick,
        threads: args.threads,
        read_percent: args.read_percent,
        mix: format!("r{}w{}", args.read_percent, 100 - args.read_percent),
        keys: args
            .keys
            .unwrap_or(if quick { 100_000 } else { 1_000_000 })
            .max(1),
        duration: Duration::from_millis(args.duration_ms.unwrap_or(if quick { 300 } else { 2000 })),
        max_snapshot_keys,
        snapshots_per_round: args.snapshots_per_round,
        rounds: common.rounds(),
        snapshot_sizes,
        fig3_sizes,
    })
}

fn write_config(report: &mut Report, plan: &Plan) {
    report.config("quick", plan.quick);
    report.config("threads", plan.threads as u64);
    report.config("mix", plan.mix.clone());
    report.config("key_bytes", 8u64);
    report.config("keys", plan.keys);
    report.config("duration_ms", plan.duration.as_millis() as u64);
    report.config("rounds", plan.rounds as u64);
    report.config("max_snapshot_keys", plan.max_snapshot_keys);
    report.config("snapshots_per_round", plan.snapshots_per_round as u64);
    report.config("hasher", "foldhash (quality) for ctrie, dashmap, papaya, imbl; concread: its built-in foldhash (fast)");
    report.config(
        "snapshot_semantics",
        "ctrie: read_only_snapshot (O(1), lock-free); concread: read transaction (writers serialised); imbl: clone() under a RwLock",
    );
}

/// Part 1: every contender filled with the same keys, then the mix for `plan.duration`,
/// alternated over rounds. Returns each contender's median throughput by name.
fn throughput_part(report: &mut Report, plan: &Plan) -> HashMap<&'static str, f64> {
    let ctrie: CTrie<u64, u64> = CTrie::new();
    let dash = dashmap::DashMap::with_hasher(DefaultHashBuilder::default());
    let papaya_map = papaya::HashMap::with_hasher(DefaultHashBuilder::default());
    let concread_map: HashTrie<u64, u64> = HashTrie::new();
    let imbl_map = LockedImbl(RwLock::new(ImblMap::with_hasher(
        DefaultHashBuilder::default(),
    )));
    ctrie.fill(0..plan.keys);
    for key in 0..plan.keys {
        dash.insert(key, value_of(key));
        papaya_map.pin().insert(key, value_of(key));
    }
    concread_map.fill(0..plan.keys);
    imbl_map.fill(0..plan.keys);
    let contenders: [&dyn Contender; 5] = [&ctrie, &dash, &papaya_map, &concread_map, &imbl_map];
    let schedule = alternating_schedule(contenders.len(), plan.rounds);
    let bar = progress::bar(schedule.len() as u64, "throughput");
    let mut throughput: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    let mut runs: Vec<Vec<MixRun>> = vec![Vec::new(); contenders.len()];
    for (round, contender) in schedule {
        let seed = round as u64;
        let (ops, operations) = run_mix(
            contenders[contender],
            plan.threads,
            plan.keys,
            plan.read_percent,
            plan.duration,
            seed,
        );
        throughput[contender].push(ops);
        runs[contender].push(MixRun { seed, operations });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let maps: Vec<(&str, &dyn Contender)> =
        THROUGHPUT_NAMES.iter().copied().zip(contenders).collect();
    check_with_models(
        report,
        (
            "part 1 maps after the concurrent get/insert mix, every entry and the length",
            "a model of the loaded keys replaying each thread's writes (disjoint keys per \
             thread, values unique per write)",
        ),
        &maps,
        plan.keys,
        plan.read_percent,
        &runs,
    );
    let mut medians = HashMap::new();
    for (index, name) in THROUGHPUT_NAMES.iter().enumerate() {
        let spread = Spread::of(&throughput[index]);
        medians.insert(*name, spread.median);
        let mut entry = row([
            ("variant", Value::from(*name)),
            ("part", Value::from("throughput")),
            ("threads", Value::from(plan.threads as u64)),
            ("mix", Value::from(plan.mix.clone())),
            ("keys", Value::from(plan.keys)),
        ]);
        spread.insert_into(&mut entry, "throughput_ops_per_s");
        report.rows.push(entry);
    }
    medians
}

/// What part 2 hands to the summary and the chart.
struct SnapshotPart {
    /// The CTrie's median snapshot call alone, per size.
    ctrie_snapshot_ns_by_size: Vec<f64>,
    /// The CTrie's median snapshot call right after a write, per size.
    ctrie_interleaved_ns_by_size: Vec<f64>,
    /// Per structure: (size, median snapshot ns) points.
    series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Per structure and round at one size: the medians of the snapshot call alone (back to back),
/// of the snapshot call right after the previous round trip's write, and of that write.
#[derive(Default, Clone)]
struct SizeRounds {
    alone_ns: Vec<f64>,
    interleaved_ns: Vec<f64>,
    write_ns: Vec<f64>,
}

/// A CTrie snapshot kept from the smallest size, and the model it must still iterate to.
type KeptSnapshot = (ReadOnlySnapshot<u64, u64>, HashMap<u64, u64>);

/// Part 2: snapshot cost as the structures grow together through the sizes, then the check of
/// the CTrie against its models (a snapshot kept from the smallest size, and the final state).
/// Fresh structures with known contents: part 1's were overwritten by its mix.
fn snapshot_part(report: &mut Report, plan: &Plan) -> SnapshotPart {
    let ctrie: CTrie<u64, u64> = CTrie::new();
    let concread_map: HashTrie<u64, u64> = HashTrie::new();
    let imbl_map = LockedImbl(RwLock::new(ImblMap::with_hasher(
        DefaultHashBuilder::default(),
    )));
    let structures: [(&str, &dyn Snapshotting); 3] = [
        ("ctrie", &ctrie),
        ("concread_hashtrie", &concread_map),
        ("imbl_rwlock", &imbl_map),
    ];
    let mut model: HashMap<u64, u64> = HashMap::new();
    let mut kept: Option<KeptSnapshot> = None;
    let mut part = SnapshotPart {
        ctrie_snapshot_ns_by_size: Vec::new(),
        ctrie_interleaved_ns_by_size: Vec::new(),
        series: structures
            .iter()
            .map(|(name, _)| (name.to_string(), Vec::new()))
            .collect(),
    };
    let bar = progress::bar(
        (plan.snapshot_sizes.len() * plan.rounds * structures.len()) as u64,
        "snapshots",
    );
    let (mut filled, mut write_key) = (0u64, 0u64);
    for &size in &plan.snapshot_sizes {
        for (_, structure) in &structures {
            structure.fill(filled..size);
        }
        model.extend((filled..size).map(|key| (key, value_of(key))));
        filled = size;
        if kept.is_none() {
            kept = Some((ctrie.read_only_snapshot(), model.clone()));
        }
        let rounds = snapshot_rounds(plan, &structures, size, write_key, &mut model, &bar);
        write_key += (plan.rounds * plan.snapshots_per_round) as u64;
        snapshot_rows(report, &structures, size, &rounds, &mut part);
    }
    bar.finish_and_clear();
    verify_models(report, &ctrie, &model, kept.as_ref());
    part
}

/// The rounds at one size, structures alternated; every structure writes the same keys in the
/// same round, spread over the map (the CTrie's writes also go into `model`).
fn snapshot_rounds(
    plan: &Plan,
    structures: &[(&str, &dyn Snapshotting)],
    size: u64,
    round_start_key: u64,
    model: &mut HashMap<u64, u64>,
    bar: &indicatif::ProgressBar,
) -> Vec<SizeRounds> {
    let per_round = plan.snapshots_per_round as u64;
    let mut rounds = vec![SizeRounds::default(); structures.len()];
    for (round, index) in alternating_schedule(structures.len(), plan.rounds) {
        let (_, structure) = structures[index];
        let mut alone = Latencies::new();
        for _ in 0..per_round {
            alone.record_ns(structure.snapshot_only() as u64);
        }
        let (mut interleaved, mut write) = (Latencies::new(), Latencies::new());
        for step in 0..per_round {
            let key = (round_start_key + round as u64 * per_round + step)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                % size;
            let value = key ^ 0xFFFF_0000 ^ round as u64;
            let (snapshot_ns, write_ns) = structure.snapshot_then_write(key, value);
            interleaved.record_ns(snapshot_ns as u64);
            write.record_ns(write_ns as u64);
            if index == 0 {
                model.insert(key, value);
            }
        }
        rounds[index].alone_ns.push(alone.quantile_ns(0.5));
        rounds[index]
            .interleaved_ns
            .push(interleaved.quantile_ns(0.5));
        rounds[index].write_ns.push(write.quantile_ns(0.5));
        bar.inc(1);
    }
    rounds
}

/// One row per structure at `size` (spreads over rounds), and the chart's and summary's points.
fn snapshot_rows(
    report: &mut Report,
    structures: &[(&str, &dyn Snapshotting)],
    size: u64,
    rounds: &[SizeRounds],
    part: &mut SnapshotPart,
) {
    for (index, (name, _)) in structures.iter().enumerate() {
        let alone = Spread::of(&rounds[index].alone_ns);
        let interleaved = Spread::of(&rounds[index].interleaved_ns);
        let write = Spread::of(&rounds[index].write_ns);
        part.series[index].1.push((size as f64, alone.median));
        if index == 0 {
            part.ctrie_snapshot_ns_by_size.push(alone.median);
            part.ctrie_interleaved_ns_by_size.push(interleaved.median);
        }
        let mut entry = row([
            ("variant", Value::from(*name)),
            ("part", Value::from("snapshot")),
            ("keys", Value::from(size)),
        ]);
        alone.insert_into(&mut entry, "snapshot_ns");
        interleaved.insert_into(&mut entry, "snapshot_after_write_ns");
        write.insert_into(&mut entry, "first_write_after_snapshot_ns");
        report.rows.push(entry);
    }
}

/// The CTrie's kept snapshot must still iterate to its model, and a final snapshot to the final
/// model (every key and value, and `len`).
fn verify_models(
    report: &mut Report,
    ctrie: &CTrie<u64, u64>,
    model: &HashMap<u64, u64>,
    kept: Option<&KeptSnapshot>,
) {
    let final_snapshot = ctrie.read_only_snapshot();
    let final_entries: HashMap<u64, u64> = final_snapshot.iter().collect();
    let final_ok = final_entries == *model && final_snapshot.len() == model.len();
    let kept_ok = kept.is_some_and(|(snapshot, expected)| {
        snapshot.len() == expected.len()
            && snapshot.iter().collect::<HashMap<u64, u64>>() == *expected
    });
    report.check(
        "the CTrie's final snapshot, entry by entry",
        "a model HashMap updated by the same operations",
        model.len() as u64,
        final_ok,
    );
    report.check(
        "a snapshot kept through later updates, entry by entry",
        "a copy of the model taken when the snapshot was",
        kept.map_or(0, |(_, expected)| expected.len() as u64),
        kept_ok,
    );
    report.config(
        "verified_final_snapshot_entries",
        final_entries.len() as u64,
    );
}

fn write_summary(
    report: &mut Report,
    plan: &Plan,
    medians: &HashMap<&'static str, f64>,
    snapshots: &SnapshotPart,
) {
    let largest_over_smallest = |by_size: &[f64]| {
        let smallest = *by_size.first().unwrap_or(&f64::NAN);
        let largest = *by_size.last().unwrap_or(&f64::NAN);
        ratio(largest, smallest)
    };
    report.summary(
        "snapshot_time_10m_over_10k",
        largest_over_smallest(&snapshots.ctrie_snapshot_ns_by_size),
    );
    report.summary(
        "snapshot_after_write_time_10m_over_10k",
        largest_over_smallest(&snapshots.ctrie_interleaved_ns_by_size),
    );
    report.notes.push(
        "snapshot_ns: the snapshot call alone, back to back (what the O(1) claim is about); \
         snapshot_after_write_ns: the snapshot call right after a write that renewed a path, \
         whose cache misses grow with the map; first_write_after_snapshot_ns: that write"
            .to_string(),
    );
    let largest_size = *plan.snapshot_sizes.last().unwrap_or(&0);
    report.config("snapshot_time_10m_over_10k_largest_keys", largest_size);
    let mix = &plan.mix;
    for (field, other) in [
        ("dashmap", "dashmap"),
        ("papaya", "papaya"),
        ("concread", "concread_hashtrie"),
        ("imbl", "imbl_rwlock"),
    ] {
        report.summary(
            &format!("ctrie_over_{field}_{mix}"),
            ratio(medians["ctrie"], medians[other]),
        );
    }
    if plan.quick {
        report.notes.push(format!(
            "quick: snapshot sizes stop at {largest_size} keys; snapshot_time_10m_over_10k holds largest/smallest ({largest_size} / 10000)"
        ));
    }
    report.notes.push(format!(
        "{} threads on a {}-core machine; snapshot costs are medians of {} snapshots per round",
        plan.threads, report.host.cpus, plan.snapshots_per_round
    ));
}

/// One of the experiment's two plots, `<name>.png`: `series` over a log-scale key count.
fn write_chart(
    common: &crate::Common,
    [name, title, x_label, y_label]: [&str; 4],
    series: Vec<(String, Vec<(f64, f64)>)>,
) -> Result<()> {
    let chart = LineChart {
        title: title.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        series: series
            .into_iter()
            .map(|(label, points)| Series { label, points })
            .collect(),
        markers: Vec::new(),
        log_x: true,
    };
    write_line_chart(&chart, &common.out, name)
}
