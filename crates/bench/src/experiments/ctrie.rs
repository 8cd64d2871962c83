//! `prefixkv-bench ctrie`: the CTrie against concurrent maps without snapshots (dashmap,
//! papaya) and with them (concread's `HashTrie`, an `imbl::HashMap` cloned under a lock), and
//! the cost of a snapshot (plus the first write after it) as the map grows.
//!
//! Part 1 (throughput): every contender is filled with the same keys, then `threads` threads
//! run a get/insert mix (r90w10 by default: 90 % gets, 10 % inserts of uniform 8-byte keys)
//! for a fixed time; contenders alternate over `common.rounds()` rounds. All maps hash with
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
//! Verification: a CTrie read-only snapshot kept from the smallest size must still iterate to
//! that size's model at the end, and a final snapshot of the grown CTrie must iterate to the
//! final model (every key and value, and `len`); after part 3 every structure holds exactly the
//! loaded key count.

use crate::plot::{write_line_chart, LineChart, Series};
use crate::progress;
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, ratio, Spread};
use crate::workload::{KeyDistribution, KeyGenerator};
use anyhow::{bail, Result};
use concread::hashtrie::HashTrie;
use parking_lot::RwLock;
use prefixkv_ctrie::{CTrie, DefaultHashBuilder};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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
}

impl Contender for CTrie<u64, u64> {
    fn get(&self, key: u64) -> Option<u64> {
        CTrie::get(self, &key)
    }
    fn insert(&self, key: u64, value: u64) {
        CTrie::insert(self, key, value);
    }
}

impl Contender for dashmap::DashMap<u64, u64, DefaultHashBuilder> {
    fn get(&self, key: u64) -> Option<u64> {
        dashmap::DashMap::get(self, &key).map(|entry| *entry)
    }
    fn insert(&self, key: u64, value: u64) {
        dashmap::DashMap::insert(self, key, value);
    }
}

impl Contender for papaya::HashMap<u64, u64, DefaultHashBuilder> {
    fn get(&self, key: u64) -> Option<u64> {
        self.pin().get(&key).copied()
    }
    fn insert(&self, key: u64, value: u64) {
        self.pin().insert(key, value);
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
}

/// Part 3, SMaRtTrie's Fig. 3: one thread updating uniformly random loaded keys, per state
/// size, in each structure the replicated store could hold its state in. Verified: every
/// structure still holds exactly the loaded key count (updates never add or remove a key).
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
        for (round, contender) in alternating_schedule(names.len(), rounds) {
            // One thread, 0 % reads: updates of existing keys only.
            let ops = run_mix(contenders[contender], 1, size, 0, duration, round as u64);
            throughput[contender].push(ops);
            bar.inc(1);
        }
        let lengths = [
            ctrie.len(),
            dash.len(),
            papaya_map.len(),
            btree.0.lock().len(),
        ];
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
            let intact = lengths[index] as u64 == size;
            report.record_verification(intact);
            if !intact {
                report.notes.push(format!(
                    "fig3: {name} holds {} keys after updates of {size} loaded keys",
                    lengths[index]
                ));
            }
        }
    }
    bar.finish_and_clear();
    names.iter().map(|n| n.to_string()).zip(series).collect()
}

fn value_of(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555
}

/// Runs the mix on `map` for `duration`; returns operations per second.
fn run_mix(
    map: &dyn Contender,
    threads: usize,
    keys: u64,
    read_percent: u32,
    duration: Duration,
    seed: u64,
) -> f64 {
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let total: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let stop = &stop;
                scope.spawn(move || {
                    let mut generator = KeyGenerator::new(
                        KeyDistribution::Uniform,
                        keys,
                        seed * 64 + thread as u64,
                    );
                    let mut operations = 0u64;
                    let mut checksum = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..256 {
                            let key = generator.next_key();
                            if generator.percent() < read_percent {
                                checksum = checksum.wrapping_add(map.get(key).unwrap_or(0));
                            } else {
                                map.insert(key, value_of(key) ^ operations);
                            }
                            operations += 1;
                        }
                    }
                    std::hint::black_box(checksum);
                    operations
                })
            })
            .collect();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|worker| worker.join().expect("worker panicked"))
            .sum()
    });
    total as f64 / start.elapsed().as_secs_f64()
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

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs the experiment.
pub fn run(common: &crate::Common, args: &Args) -> Result<Report> {
    if args.threads == 0 || args.read_percent > 100 || args.snapshots_per_round == 0 {
        bail!("--threads and --snapshots-per-round must be at least 1, --read-percent at most 100");
    }
    let quick = common.quick;
    let keys = args
        .keys
        .unwrap_or(if quick { 100_000 } else { 1_000_000 })
        .max(1);
    let duration =
        Duration::from_millis(args.duration_ms.unwrap_or(if quick { 300 } else { 2000 }));
    let max_snapshot_keys =
        args.max_snapshot_keys
            .unwrap_or(if quick { 1_000_000 } else { 10_000_000 });
    let rounds = common.rounds();
    let mix = format!("r{}w{}", args.read_percent, 100 - args.read_percent);

    let mut report = Report::new("ctrie");
    report.config("quick", quick);
    report.config("threads", args.threads as u64);
    report.config("mix", mix.clone());
    report.config("key_bytes", 8u64);
    report.config("keys", keys);
    report.config("duration_ms", duration.as_millis() as u64);
    report.config("rounds", rounds as u64);
    report.config("max_snapshot_keys", max_snapshot_keys);
    report.config("snapshots_per_round", args.snapshots_per_round as u64);
    report.config("hasher", "foldhash (quality) for ctrie, dashmap, papaya, imbl; concread: its built-in foldhash (fast)");
    report.config(
        "snapshot_semantics",
        "ctrie: read_only_snapshot (O(1), lock-free); concread: read transaction (writers serialised); imbl: clone() under a RwLock",
    );

    // Part 1: throughput.
    let names = [
        "ctrie",
        "dashmap",
        "papaya",
        "concread_hashtrie",
        "imbl_rwlock",
    ];
    let ctrie: CTrie<u64, u64> = CTrie::new();
    let dash = dashmap::DashMap::with_hasher(DefaultHashBuilder::default());
    let papaya_map = papaya::HashMap::with_hasher(DefaultHashBuilder::default());
    let concread_map: HashTrie<u64, u64> = HashTrie::new();
    let imbl_map = LockedImbl(RwLock::new(ImblMap::with_hasher(
        DefaultHashBuilder::default(),
    )));
    ctrie.fill(0..keys);
    for key in 0..keys {
        dash.insert(key, value_of(key));
        papaya_map.pin().insert(key, value_of(key));
    }
    concread_map.fill(0..keys);
    imbl_map.fill(0..keys);
    let contenders: [&dyn Contender; 5] = [&ctrie, &dash, &papaya_map, &concread_map, &imbl_map];
    let schedule = alternating_schedule(contenders.len(), rounds);
    let bar = progress::bar(schedule.len() as u64, "throughput");
    let mut throughput: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    for (round, contender) in schedule {
        let ops = run_mix(
            contenders[contender],
            args.threads,
            keys,
            args.read_percent,
            duration,
            round as u64,
        );
        throughput[contender].push(ops);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut medians = HashMap::new();
    for (index, name) in names.iter().enumerate() {
        let spread = Spread::of(&throughput[index]);
        medians.insert(*name, spread.median);
        let mut entry = row([
            ("variant", Value::from(*name)),
            ("part", Value::from("throughput")),
            ("threads", Value::from(args.threads as u64)),
            ("mix", Value::from(mix.clone())),
            ("keys", Value::from(keys)),
        ]);
        spread.insert_into(&mut entry, "throughput_ops_per_s");
        report.rows.push(entry);
    }
    drop((dash, papaya_map));

    // Part 2: snapshot cost as the maps grow. The throughput part's CTrie, concread and imbl
    // maps are reused (their first `keys` keys were overwritten by the mix with other values),
    // so start fresh ones with known contents for the model check.
    drop((ctrie, concread_map, imbl_map));
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
    let mut sizes = vec![10_000u64];
    while sizes.last().copied().unwrap_or(0) * 10 <= max_snapshot_keys {
        sizes.push(sizes.last().copied().unwrap_or(0) * 10);
    }
    let mut model: HashMap<u64, u64> = HashMap::new();
    let mut kept: Option<(
        prefixkv_ctrie::ReadOnlySnapshot<u64, u64>,
        HashMap<u64, u64>,
    )> = None;
    let mut snapshot_series: Vec<Vec<(f64, f64)>> = vec![Vec::new(); structures.len()];
    let mut ctrie_snapshot_ns_by_size = Vec::new();
    let mut ctrie_interleaved_ns_by_size = Vec::new();
    let mut filled = 0u64;
    let bar = progress::bar(
        (sizes.len() * rounds * structures.len()) as u64,
        "snapshots",
    );
    let mut write_key = 0u64;
    for &size in &sizes {
        for (_, structure) in &structures {
            structure.fill(filled..size);
        }
        for key in filled..size {
            model.insert(key, value_of(key));
        }
        filled = size;
        if kept.is_none() {
            kept = Some((ctrie.read_only_snapshot(), model.clone()));
        }
        // Per structure: medians per round of the snapshot call alone (back to back), of the
        // snapshot call taken right after the previous round trip's write, and of that write.
        let mut alone_rounds: Vec<Vec<f64>> = vec![Vec::new(); structures.len()];
        let mut interleaved_rounds: Vec<Vec<f64>> = vec![Vec::new(); structures.len()];
        let mut write_rounds: Vec<Vec<f64>> = vec![Vec::new(); structures.len()];
        let round_start_key = write_key;
        for (round, index) in alternating_schedule(structures.len(), rounds) {
            let (_, structure) = structures[index];
            let mut alone_ns: Vec<f64> = (0..args.snapshots_per_round)
                .map(|_| structure.snapshot_only())
                .collect();
            let mut snapshot_ns = Vec::with_capacity(args.snapshots_per_round);
            let mut write_ns = Vec::with_capacity(args.snapshots_per_round);
            // Every structure writes the same keys in the same round, spread over the map.
            for step in 0..args.snapshots_per_round as u64 {
                let key = (round_start_key + round as u64 * args.snapshots_per_round as u64 + step)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    % size;
                let value = key ^ 0xFFFF_0000 ^ round as u64;
                let (snapshot, write) = structure.snapshot_then_write(key, value);
                snapshot_ns.push(snapshot);
                write_ns.push(write);
                if index == 0 {
                    model.insert(key, value);
                }
            }
            alone_rounds[index].push(median(&mut alone_ns));
            interleaved_rounds[index].push(median(&mut snapshot_ns));
            write_rounds[index].push(median(&mut write_ns));
            bar.inc(1);
        }
        write_key += (rounds * args.snapshots_per_round) as u64;
        for (index, (name, _)) in structures.iter().enumerate() {
            let alone = Spread::of(&alone_rounds[index]);
            let interleaved = Spread::of(&interleaved_rounds[index]);
            let write = Spread::of(&write_rounds[index]);
            snapshot_series[index].push((size as f64, alone.median));
            if index == 0 {
                ctrie_snapshot_ns_by_size.push(alone.median);
                ctrie_interleaved_ns_by_size.push(interleaved.median);
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
    bar.finish_and_clear();

    // Verification against the models.
    let final_snapshot = ctrie.read_only_snapshot();
    let final_entries: HashMap<u64, u64> = final_snapshot.iter().collect();
    let final_ok = final_entries == model && final_snapshot.len() == model.len();
    let kept_ok = kept.as_ref().is_some_and(|(snapshot, expected)| {
        snapshot.len() == expected.len()
            && snapshot.iter().collect::<HashMap<u64, u64>>() == *expected
    });
    report.record_verification(final_ok);
    report.record_verification(kept_ok);
    report.config(
        "verified_final_snapshot_entries",
        final_entries.len() as u64,
    );

    // Summary.
    let smallest = *ctrie_snapshot_ns_by_size.first().unwrap_or(&f64::NAN);
    let largest = *ctrie_snapshot_ns_by_size.last().unwrap_or(&f64::NAN);
    report.summary("snapshot_time_10m_over_10k", ratio(largest, smallest));
    let smallest_interleaved = *ctrie_interleaved_ns_by_size.first().unwrap_or(&f64::NAN);
    let largest_interleaved = *ctrie_interleaved_ns_by_size.last().unwrap_or(&f64::NAN);
    report.summary(
        "snapshot_after_write_time_10m_over_10k",
        ratio(largest_interleaved, smallest_interleaved),
    );
    report.notes.push(
        "snapshot_ns: the snapshot call alone, back to back (what the O(1) claim is about); \
         snapshot_after_write_ns: the snapshot call right after a write that renewed a path, \
         whose cache misses grow with the map; first_write_after_snapshot_ns: that write"
            .to_string(),
    );
    report.config(
        "snapshot_time_10m_over_10k_largest_keys",
        *sizes.last().unwrap_or(&0),
    );
    report.summary(
        &format!("ctrie_over_dashmap_{mix}"),
        ratio(medians["ctrie"], medians["dashmap"]),
    );
    report.summary(
        &format!("ctrie_over_papaya_{mix}"),
        ratio(medians["ctrie"], medians["papaya"]),
    );
    report.summary(
        &format!("ctrie_over_concread_{mix}"),
        ratio(medians["ctrie"], medians["concread_hashtrie"]),
    );
    report.summary(
        &format!("ctrie_over_imbl_{mix}"),
        ratio(medians["ctrie"], medians["imbl_rwlock"]),
    );
    if quick {
        report.notes.push(format!(
            "quick: snapshot sizes stop at {} keys; snapshot_time_10m_over_10k holds largest/smallest ({} / 10000)",
            sizes.last().unwrap_or(&0),
            sizes.last().unwrap_or(&0)
        ));
    }
    report.notes.push(format!(
        "{} threads on a {}-core machine; snapshot costs are medians of {} snapshots per round",
        args.threads, report.host.cpus, args.snapshots_per_round
    ));

    let chart = LineChart {
        title: "Snapshot time against map size".into(),
        x_label: "keys in the map (log scale)".into(),
        y_label: "snapshot time (ns, median)".into(),
        series: structures
            .iter()
            .zip(snapshot_series)
            .map(|((name, _), points)| Series {
                label: (*name).to_string(),
                points,
            })
            .collect(),
        markers: Vec::new(),
        log_x: true,
    };
    write_line_chart(&chart, &common.out, "ctrie")?;

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
    if !fig3_sizes.is_empty() {
        let series = fig3_updates(&mut report, &fig3_sizes, duration, rounds);
        let chart = LineChart {
            title: "Single-thread updates against state size (SMaRtTrie Fig. 3)".into(),
            x_label: "keys loaded (log scale)".into(),
            y_label: "updates per second (median)".into(),
            series: series
                .into_iter()
                .map(|(label, points)| Series { label, points })
                .collect(),
            markers: Vec::new(),
            log_x: true,
        };
        write_line_chart(&chart, &common.out, "ctrie-fig3")?;
    }
    Ok(report)
}
