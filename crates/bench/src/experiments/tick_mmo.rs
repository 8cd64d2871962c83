//! The synthetic MMO scenario of the `tick` experiment (the paper's §5.4, on our own world
//! model): a game world of entities, each a fixed-size cell of [`ENTITY_WORDS`] 64-bit words,
//! updated every tick by movement and interaction rules. Deterministic from a seed: the world
//! after tick `t` is a pure function of the world before it, `t` and the seed, so recovery can
//! replay a tick from its logged action (the seed and the number of active entities) and the
//! result can be compared with a reference world run on a plain vector.
//!
//! Entity cell (words): 0 x, 1 y (map units, `0..MAP_UNITS`), 2 vx, 3 vy (signed, two's
//! complement), 4 health (0 = not spawned / dead, else 1..=1000), 5 kills, 6 last tick the
//! entity acted, 7 the last entity that hit it (+1; 0 = none).
//!
//! Rules of one tick: `active` entities act, drawn from a Zipf distribution over the entities
//! (some entities — players, monsters in busy areas — act much more often than others),
//! ranks scrambled over the entity ids. An acting entity that is dead respawns at a random
//! position with full health and a random velocity. Otherwise it changes its velocity with
//! probability 1/8 (an input), moves by its velocity, bouncing off the map's borders, and then
//! interacts: the map is divided into square zones; the first entity to act in a zone this tick
//! occupies it, and a later one entering an occupied zone hits the occupant (damage 1..=100); a
//! hit that kills counts as a kill for the attacker. The zone table is transient (rebuilt every
//! tick), not part of the state.

use super::e2e::{
    alternate_runs, check_recovery, end_to_end_row, insert_percentiles, median_over, thread_cpu_ns,
    tick_series, Contender, EndToEnd,
};
use super::sweep::{capture_all, CycleTimer, ImageReplay, OverheadCell};
use super::{Setup, WARMUP_TICKS};
use crate::plot::{write_line_chart, LineChart};
use crate::report::{row, Report};
use crate::stats::{alternating_schedule, Spread};
use anyhow::{bail, Context, Result};
use prefixkv_tickstate::algo::*;
use prefixkv_tickstate::AlgorithmKind;
use prefixkv_tickstate::{recover, Algorithm, Config, ImageBase, ImageStore, TickState};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Words per entity cell (64 bytes: one cache line).
pub const ENTITY_WORDS: usize = 8;
/// Map side in units.
const MAP_UNITS: i64 = 1 << 20;
const FULL_HEALTH: u64 = 1000;
const MAX_SPEED: i64 = 256;

/// Cell access the world rules need: a plain vector (reference, recovery replay) or a
/// checkpointed state.
pub trait Cells {
    /// Value of cell `index`.
    fn get(&self, index: usize) -> u64;
    /// Set cell `index`.
    fn set(&mut self, index: usize, value: u64);
}

impl Cells for [u64] {
    #[inline]
    fn get(&self, index: usize) -> u64 {
        self[index]
    }
    #[inline]
    fn set(&mut self, index: usize, value: u64) {
        self[index] = value;
    }
}

/// The world's parameters.
#[derive(Debug, Clone)]
pub struct World {
    /// Number of entities (cells / ENTITY_WORDS).
    pub entities: usize,
    /// Entities acting per tick.
    pub active: usize,
    /// Seed of the world.
    pub seed: u64,
    zipf: Zipf<f64>,
    /// Zone side is 2^zone_shift units: about one zone per two active entities, so that
    /// entities meet often enough to fight.
    zone_shift: u32,
}

fn mix(mut value: u64) -> u64 {
    // splitmix64 finaliser: a cheap, well-mixed deterministic hash.
    value = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    value = (value ^ (value >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    value ^ (value >> 31)
}

impl World {
    /// A world of `entities` entities with `active` acting per tick, Zipf(`skew`) activity.
    pub fn new(entities: usize, active: usize, skew: f64, seed: u64) -> anyhow::Result<World> {
        anyhow::ensure!(entities > 0 && active > 0, "the MMO world needs entities");
        let zones_per_side = ((active as f64 / 2.0).sqrt() as u64)
            .max(1)
            .next_power_of_two();
        Ok(World {
            entities,
            active,
            seed,
            zipf: Zipf::new(entities as f64, skew)?,
            zone_shift: 20 - zones_per_side.trailing_zeros().min(20),
        })
    }

    /// The logged action of `tick`: everything besides the state that the tick depends on.
    pub fn action(&self) -> [u8; 16] {
        let mut action = [0u8; 16];
        action[..8].copy_from_slice(&self.seed.to_le_bytes());
        action[8..].copy_from_slice(&(self.active as u64).to_le_bytes());
        action
    }

    /// The world a logged action describes (for replay); `entities` from the state size.
    pub fn from_action(entities: usize, skew: f64, action: &[u8]) -> anyhow::Result<World> {
        anyhow::ensure!(action.len() == 16, "MMO action of {} bytes", action.len());
        let seed = u64::from_le_bytes(action[..8].try_into()?);
        let active = u64::from_le_bytes(action[8..].try_into()?) as usize;
        World::new(entities, active, skew, seed)
    }

    /// Run the rules of `tick` on `cells`, using `zones` as scratch. Returns the cell writes.
    pub fn step<C: Cells + ?Sized>(
        &self,
        cells: &mut C,
        tick: u64,
        zones: &mut HashMap<u64, u32>,
    ) -> u64 {
        zones.clear();
        let tick_seed = mix(self.seed ^ tick.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let mut rng = SmallRng::seed_from_u64(tick_seed);
        let mut writes = 0u64;
        for number in 0..self.active {
            let rank = self.zipf.sample(&mut rng) as u64 - 1;
            let entity = (rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % self.entities as u64) as usize;
            let base = entity * ENTITY_WORDS;
            let random = mix(tick_seed ^ (number as u64).wrapping_mul(0xA24B_AED4_963E_E407));
            let health = cells.get(base + 4);
            if health == 0 {
                // (Re)spawn.
                cells.set(base, random % MAP_UNITS as u64);
                cells.set(base + 1, (random >> 20) % MAP_UNITS as u64);
                cells.set(base + 2, velocity(random >> 40) as u64);
                cells.set(base + 3, velocity(random >> 50) as u64);
                cells.set(base + 4, FULL_HEALTH);
                cells.set(base + 6, tick);
                writes += 6;
                continue;
            }
            let (mut vx, mut vy) = (cells.get(base + 2) as i64, cells.get(base + 3) as i64);
            if random & 7 == 0 {
                vx = velocity(random >> 8);
                vy = velocity(random >> 24);
            }
            let (x, bounced_x) = bounce(cells.get(base) as i64 + vx);
            let (y, bounced_y) = bounce(cells.get(base + 1) as i64 + vy);
            if bounced_x {
                vx = -vx;
            }
            if bounced_y {
                vy = -vy;
            }
            if random & 7 == 0 || bounced_x || bounced_y {
                cells.set(base + 2, vx as u64);
                cells.set(base + 3, vy as u64);
                writes += 2;
            }
            cells.set(base, x as u64);
            cells.set(base + 1, y as u64);
            cells.set(base + 6, tick);
            writes += 3;
            let zone = ((x >> self.zone_shift) as u64) << 32 | (y >> self.zone_shift) as u64;
            match zones.insert(zone, entity as u32) {
                Some(occupant) if occupant as usize != entity => {
                    let target = occupant as usize * ENTITY_WORDS;
                    let target_health = cells.get(target + 4);
                    if target_health > 0 {
                        let damage = 1 + (random >> 32) % 100;
                        let left = target_health.saturating_sub(damage);
                        cells.set(target + 4, left);
                        cells.set(target + 7, entity as u64 + 1);
                        writes += 2;
                        if left == 0 {
                            cells.set(base + 5, cells.get(base + 5) + 1);
                            writes += 1;
                        }
                    }
                }
                _ => {}
            }
        }
        writes
    }
}

fn velocity(random: u64) -> i64 {
    (random % (2 * MAX_SPEED as u64 + 1)) as i64 - MAX_SPEED
}

/// Reflect a coordinate into the map; whether it bounced.
fn bounce(coordinate: i64) -> (i64, bool) {
    if coordinate < 0 {
        (-coordinate, true)
    } else if coordinate >= MAP_UNITS {
        (2 * (MAP_UNITS - 1) - coordinate, true)
    } else {
        (coordinate, false)
    }
}

/// A checkpointing algorithm driven directly (overhead sweep: no writer thread, no files).
struct AlgorithmCells<'a, A>(&'a A);

impl<A: Algorithm> Cells for AlgorithmCells<'_, A> {
    #[inline]
    fn get(&self, index: usize) -> u64 {
        self.0.read(index)
    }
    #[inline]
    fn set(&mut self, index: usize, value: u64) {
        self.0.write(index, value)
    }
}

/// A full `TickState` (end-to-end run).
struct TickCells<'a, A: Algorithm>(&'a mut TickState<A>);

impl<A: Algorithm> Cells for TickCells<'_, A> {
    #[inline]
    fn get(&self, index: usize) -> u64 {
        self.0.read(index)
    }
    #[inline]
    fn set(&mut self, index: usize, value: u64) {
        self.0.write(index, value)
    }
}

/// The reference world on a plain vector: per-tick ns (after warm-up), the state after
/// `total_ticks`, and the mean cell writes per tick.
pub(super) fn run_baseline(
    world: &World,
    total_ticks: usize,
    timer: &CycleTimer,
) -> (Vec<f64>, Vec<u64>, f64) {
    let mut state = vec![0u64; world.entities * ENTITY_WORDS];
    let mut zones = HashMap::new();
    let mut times = Vec::new();
    let mut writes = 0u64;
    for tick in 1..=total_ticks as u64 {
        let started = timer.now();
        writes += world.step(state.as_mut_slice(), tick, &mut zones);
        std::hint::black_box(&mut state);
        let ended = timer.now();
        if tick as usize > WARMUP_TICKS {
            times.push(timer.elapsed_ns(started, ended));
        }
    }
    (times, state, writes as f64 / total_ticks.max(1) as f64)
}

/// Overhead cell of the MMO: as the Zipf sweep's, with the world's rules as the tick's work.
pub(super) fn run_overhead<A: Algorithm>(
    world: &World,
    huge_pages: bool,
    total_ticks: usize,
    expected: &[u64],
    timer: &CycleTimer,
) -> Result<OverheadCell> {
    let words = world.entities * ENTITY_WORDS;
    let algorithm = A::new(words, huge_pages).context("allocating the world")?;
    let mut image = vec![0u64; words];
    let mut zones = HashMap::new();
    let mut cell = OverheadCell::new(algorithm.memory_bytes());
    // The world's rules on a plain vector, with their own zone table: the independent replay.
    let mut replay_zones = HashMap::new();
    let mut replay = ImageReplay::new(words, |state: &mut [u64], tick: u64| {
        world.step(state, tick, &mut replay_zones);
    });
    for tick in 1..=total_ticks as u64 {
        let started = timer.now();
        world.step(&mut AlgorithmCells(&algorithm), tick, &mut zones);
        let updated = timer.now();
        let prepare_started = timer.now();
        // SAFETY: this thread is the only mutator, and the previous capture finished below.
        unsafe { algorithm.prepare() };
        let prepared = timer.now();
        let prepare_ns = timer.elapsed_ns(prepare_started, prepared);
        if tick as usize > WARMUP_TICKS {
            cell.tick_ns
                .push(timer.elapsed_ns(started, updated) + prepare_ns);
            cell.prepare_ns.push(prepare_ns);
        }
        capture_all(&algorithm, &mut image);
        replay.check(tick, &image);
    }
    cell.record_images(&replay);
    cell.final_state_matches = (0..words).all(|i| algorithm.read(i) == expected[i]);
    Ok(cell)
}

/// End-to-end MMO run through `TickState` (writer and logging on, paced ticks), recovered and
/// compared with `reference`, the world after `ticks` ticks computed on a plain vector.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_end_to_end<A: Algorithm>(
    world: &World,
    skew: f64,
    huge_pages: bool,
    ticks: usize,
    tick: Duration,
    image_base: ImageBase,
    image_store: ImageStore,
    reference: &[u64],
) -> Result<EndToEnd> {
    let words = world.entities * ENTITY_WORDS;
    let entities = world.entities;
    let replay = move |state: &mut [u64], tick: u64, action: &[u8]| {
        let world = World::from_action(entities, skew, action)
            .expect("an MMO action this experiment logged");
        world.step(state, tick, &mut HashMap::new());
    };
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let mut config = Config::new(words);
    config.huge_pages = huge_pages;
    config.image_base = image_base;
    config.image_store = image_store;
    let (mut state, _) = TickState::<A>::open(dir.path(), config, replay)?;
    let mut zones = HashMap::new();
    let mut times = Vec::with_capacity(ticks);
    let mut cpu_times = Vec::with_capacity(ticks);
    let mut next_deadline = Instant::now() + tick;
    let action = world.action();
    for _ in 0..ticks {
        let started = Instant::now();
        let cpu_started = thread_cpu_ns();
        let next_tick = state.tick() + 1;
        state.log_action(&action)?;
        world.step(&mut TickCells(&mut state), next_tick, &mut zones);
        state.point_of_consistency(next_tick)?;
        times.push(started.elapsed().as_nanos() as f64);
        cpu_times.push(thread_cpu_ns() - cpu_started);
        // Pacing the game loop (its frame budget), not a wait for a condition.
        let now = Instant::now();
        if next_deadline > now {
            std::thread::sleep(next_deadline - now);
        }
        next_deadline += tick;
    }
    state.wait_durable()?;
    if !state.wait_writer_idle(Duration::from_secs(120))? {
        bail!("the image writer did not finish within 120 s");
    }
    let live_differs = (0..words).find(|&i| state.read(i) != reference[i]);
    let stats = state.stats();
    let anon_huge_bytes = prefixkv_tickstate::huge_pages_status()
        .anon_huge_bytes
        .unwrap_or(0);
    state.close()?;
    let started = Instant::now();
    let (recovered, recovered_tick, _report) = recover(dir.path(), words, replay)?;
    let recovery_ms = started.elapsed().as_secs_f64() * 1e3;
    let check = match live_differs {
        Some(index) => Err(format!(
            "the live world after {ticks} ticks differs from the reference world at cell {index}"
        )),
        None => check_recovery(&recovered, recovered_tick, ticks as u64, reference),
    };
    Ok(EndToEnd::from_run(
        &stats,
        anon_huge_bytes,
        times,
        cpu_times,
        recovery_ms,
        check,
    ))
}

/// What the MMO part measured, for the summary.
pub(super) struct MmoPart {
    /// Median overhead per checkpoint (ns) per algorithm.
    pub(super) overhead_median: Vec<f64>,
    /// Median over rounds of max/p50 tick time per algorithm (its main contender).
    pub(super) spike: Vec<f64>,
    /// Cell writes per second of the world (at the tick length).
    pub(super) updates_per_s: f64,
}

/// The MMO part: the overhead sweep's measurement on the world (writer off, ticks back to back,
/// alternated over rounds), then the end-to-end contenders alternated over rounds, each recovered
/// and checked against the reference world.
pub(super) fn run_part(
    setup: &Setup,
    contenders: &[Contender],
    report: &mut Report,
    out: &std::path::Path,
) -> Result<MmoPart> {
    let algorithms = &setup.algorithms;
    let entities = setup.mmo_mb * (1 << 20) / 8 / ENTITY_WORDS;
    let world = World::new(entities, setup.mmo_active, setup.skew, 0x6A4E_5EED)?;
    report.config("mmo_mb", setup.mmo_mb as u64);
    report.config("mmo_entities", entities as u64);
    report.config("mmo_active_per_tick", setup.mmo_active as u64);
    let total_ticks = WARMUP_TICKS + setup.ticks;
    let mut overheads: Vec<Vec<f64>> = vec![Vec::new(); algorithms.len()];
    let mut ticks: Vec<Vec<f64>> = vec![Vec::new(); algorithms.len()];
    let mut memory = vec![0usize; algorithms.len()];
    let mut baseline: Option<(usize, Vec<f64>, Vec<u64>)> = None;
    let mut updates_per_s = f64::NAN;
    for (round, contender) in alternating_schedule(algorithms.len(), setup.rounds) {
        if baseline.as_ref().is_none_or(|(r, _, _)| *r != round) {
            let (times, state, writes_per_tick) = run_baseline(&world, total_ticks, &setup.timer);
            updates_per_s = writes_per_tick * 1000.0 / setup.tick.as_millis() as f64;
            baseline = Some((round, times, state));
        }
        let (_, baseline_ns, expected) = baseline.as_ref().expect("set above");
        let kind = algorithms[contender];
        let cell = dispatch!(
            kind,
            run_overhead(
                &world,
                setup.huge_pages,
                total_ticks,
                expected,
                &setup.timer
            )
        )?;
        cell.report_checks(
            report,
            (
                "MMO checkpoint images, tick by tick",
                "an independent plain-vector replay of the same world ticks",
            ),
            entities * ENTITY_WORDS,
            &format!("MMO overhead {} round {round}", kind.short_name()),
        );
        overheads[contender].push(cell.overhead_ns(baseline_ns));
        ticks[contender].extend_from_slice(&cell.tick_ns);
        memory[contender] = cell.memory_bytes;
    }
    let mut part = MmoPart {
        overhead_median: vec![f64::NAN; algorithms.len()],
        spike: vec![f64::NAN; algorithms.len()],
        updates_per_s,
    };
    for (contender, kind) in algorithms.iter().enumerate() {
        part.overhead_median[contender] = crate::stats::median(&overheads[contender]);
        let mut line = row([
            ("part", Value::from("mmo_overhead")),
            ("algorithm", Value::from(kind.short_name())),
            ("updates_per_s", Value::from(updates_per_s)),
        ]);
        let ms: Vec<f64> = overheads[contender].iter().map(|ns| ns / 1e6).collect();
        Spread::of(&ms).insert_into(&mut line, "overhead_ms_per_checkpoint");
        insert_percentiles(&mut line, &ticks[contender]);
        line.insert("memory_bytes".into(), Value::from(memory[contender] as u64));
        report.rows.push(line);
    }
    eprintln!("tick: MMO overhead done ({updates_per_s:.0} updates/s)");
    let (_, reference, _) = run_baseline(&world, setup.e2e_ticks, &setup.timer);
    let runs = alternate_runs(
        report,
        "mmo_end_to_end",
        contenders,
        setup.e2e_rounds,
        |contender| {
            dispatch!(
                contender.kind,
                run_end_to_end(
                    &world,
                    setup.skew,
                    setup.huge_pages,
                    setup.e2e_ticks,
                    setup.tick,
                    contender.image_base,
                    contender.image_store,
                    &reference
                )
            )
        },
    )?;
    let mut series = Vec::new();
    for (contender, runs) in contenders.iter().zip(&runs) {
        if contender.primary {
            part.spike[contender.index] = median_over(runs, EndToEnd::tick_max_over_p50);
        }
        report.rows.push(end_to_end_row(
            "mmo_end_to_end",
            &contender.label,
            updates_per_s,
            runs,
            memory[contender.index] as u64 + contender.extra_memory_bytes(entities * ENTITY_WORDS),
        ));
        series.push(tick_series(&contender.label, &runs[0]));
    }
    let chart = LineChart {
        title: format!(
            "MMO: mutator time per tick ({entities} entities, {} acting per tick, writer and log on; round 1)",
            setup.mmo_active
        ),
        x_label: "tick".into(),
        y_label: "mutator time per tick (ms)".into(),
        series,
        markers: Vec::new(),
        log_x: false,
    };
    write_line_chart(&chart, out, "tick_mmo_over_time")?;
    if let Some(best) = (0..algorithms.len())
        .min_by(|a, b| part.overhead_median[*a].total_cmp(&part.overhead_median[*b]))
    {
        report.notes.push(format!(
            "MMO: lowest overhead per checkpoint: {} ({:.6} ms).",
            algorithms[best].short_name(),
            part.overhead_median[best] / 1e6
        ));
    }
    Ok(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_is_deterministic_and_eventful() {
        let world = World::new(10_000, 2_000, 0.8, 7).unwrap();
        let mut zones = HashMap::new();
        let mut first = vec![0u64; world.entities * ENTITY_WORDS];
        let mut second = first.clone();
        for tick in 1..=50 {
            world.step(first.as_mut_slice(), tick, &mut zones);
            world.step(second.as_mut_slice(), tick, &mut zones);
        }
        assert!(first == second);
        let kills: u64 = (0..world.entities)
            .map(|e| first[e * ENTITY_WORDS + 5])
            .sum();
        let spawned = (0..world.entities)
            .filter(|e| first[e * ENTITY_WORDS + 4] > 0)
            .count();
        assert!(
            kills > 0 && spawned > 100,
            "kills {kills}, spawned {spawned}"
        );
        for e in 0..world.entities {
            let (x, y) = (first[e * ENTITY_WORDS], first[e * ENTITY_WORDS + 1]);
            assert!(x < MAP_UNITS as u64 && y < MAP_UNITS as u64);
        }
    }

    #[test]
    fn mmo_images_match_the_replay_and_a_changed_cell_fails() {
        let world = World::new(2_000, 500, 0.8, 11).unwrap();
        let timer = CycleTimer::calibrate();
        let (_, expected, _) = run_baseline(&world, 6, &timer);
        let cell =
            run_overhead::<InterleavedPingPong>(&world, false, 6, &expected, &timer).unwrap();
        assert_eq!((cell.images_compared, cell.image_mismatch), (6, None));
        assert!(cell.final_state_matches);
        // The replay of the world's rules catches one cell changed in the final image.
        let mut zones = HashMap::new();
        let mut replay = ImageReplay::new(expected.len(), |state: &mut [u64], tick: u64| {
            world.step(state, tick, &mut zones);
        });
        let mut tampered = expected.clone();
        tampered[4 * ENTITY_WORDS + 4] ^= 1;
        assert!(!replay.check(6, &tampered));
        assert!(replay.check(6, &expected));
    }
}
