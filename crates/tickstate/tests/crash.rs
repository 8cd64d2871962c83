//! Crash tests: a child process (this test binary re-executed in child mode) runs a game loop
//! with logging and checkpoints on, reporting each durable tick on its stdout pipe; the parent
//! SIGKILLs it after a random number of reports, i.e. at an arbitrary point of its image writes
//! and log group commits, and checks that recovery yields exactly the reference state of a tick
//! no older than the last one reported durable. The same directory is reused across kills, so
//! children also recover from earlier crashes and continue (and crash again mid-recovery-state).
//! `TICKSTATE_CRASH_KILLS` sets the number of kills (default 28: four per algorithm).

mod common;

use common::{decode, Inputs};
use prefixkv_tickstate::algo::*;
use prefixkv_tickstate::{recover, Algorithm, AlgorithmKind, Config, TickState};
use rand::{RngExt, SeedableRng};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const CHILD_ENV: &str = "TICKSTATE_CRASH_CHILD_DIR";
const WORDS: usize = 96 * 1024;
const ACTIONS_PER_TICK: u64 = 40;

/// The application's deterministic inputs: the actions of `tick` (same in every process).
fn actions(tick: u64) -> Vec<[u8; 16]> {
    Inputs {
        words: WORDS,
        actions_per_tick: ACTIONS_PER_TICK,
        hot_probability: 0.7,
        hot_words: 256,
        seed: 0x9e37_79b9_7f4a_7c15,
    }
    .actions(tick)
}

/// Order-dependent update, so a reordered or duplicated replay shows.
fn apply(state: &mut [u64], _tick: u64, action: &[u8]) {
    let (index, value) = decode(action);
    state[index] = step(state[index], value);
}

/// One cell's new value (order-dependent, so a reordered or duplicated replay shows).
fn step(old: u64, value: u64) -> u64 {
    old.wrapping_mul(31).wrapping_add(value)
}

fn child_loop<A: Algorithm>(dir: &str) {
    let (mut state, _report) =
        TickState::<A>::open(dir, Config::new(WORDS), apply).expect("child open");
    let mut out = std::io::stdout().lock();
    for _ in 0..100_000 {
        let tick = state.tick() + 1;
        for action in actions(tick) {
            state.log_action(&action).unwrap();
            let (index, value) = decode(&action);
            state.write(index, step(state.read(index), value));
        }
        state.point_of_consistency(tick).unwrap();
        let durable = state.wait_durable().unwrap();
        writeln!(out, "durable {durable}").unwrap();
        out.flush().unwrap();
    }
}

/// Child mode entry: does nothing unless the parent set the environment.
#[test]
fn crash_child_entry() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let kind = AlgorithmKind::parse(&std::env::var("TICKSTATE_CRASH_ALGORITHM").unwrap()).unwrap();
    match kind {
        AlgorithmKind::NaiveSnapshot => child_loop::<NaiveSnapshot>(&dir),
        AlgorithmKind::CopyOnUpdate => child_loop::<CopyOnUpdate>(&dir),
        AlgorithmKind::BitArrayCopyOnUpdate => child_loop::<BitArrayCopyOnUpdate>(&dir),
        AlgorithmKind::NaiveZigzag => child_loop::<NaiveZigzag>(&dir),
        AlgorithmKind::BitArrayZigzag => child_loop::<BitArrayZigzag>(&dir),
        AlgorithmKind::NaivePingPong => child_loop::<NaivePingPong>(&dir),
        AlgorithmKind::InterleavedPingPong => child_loop::<InterleavedPingPong>(&dir),
    }
}

struct Reference {
    state: Vec<u64>,
    tick: u64,
}

impl Reference {
    fn advance_to(&mut self, tick: u64) {
        assert!(
            tick >= self.tick,
            "recovered tick {tick} is older than an earlier recovery ({})",
            self.tick
        );
        while self.tick < tick {
            self.tick += 1;
            for action in actions(self.tick) {
                apply(&mut self.state, self.tick, &action);
            }
        }
    }
}

#[test]
fn sigkill_at_random_points_recovers_last_durable_tick() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let kills: usize = std::env::var("TICKSTATE_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(28);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xc4a5);
    let executable = std::env::current_exe().unwrap();
    for (number, kind) in AlgorithmKind::ALL.iter().enumerate() {
        let per_algorithm = kills.div_ceil(AlgorithmKind::ALL.len());
        let directory = tempfile::tempdir().unwrap();
        let mut reference = Reference {
            state: vec![0; WORDS],
            tick: 0,
        };
        for round in 0..per_algorithm {
            let mut child = Command::new(&executable)
                .args([
                    "--exact",
                    "crash_child_entry",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, directory.path())
                .env("TICKSTATE_CRASH_ALGORITHM", kind.short_name())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let (lines, receiver) = mpsc::channel();
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(tick) = line.strip_prefix("durable ") {
                        if lines.send(tick.parse::<u64>().unwrap()).is_err() {
                            break;
                        }
                    }
                }
            });
            let reports = rng.random_range(1..60);
            let mut last_durable = reference.tick;
            for _ in 0..reports {
                match receiver.recv_timeout(Duration::from_secs(60)) {
                    Ok(tick) => last_durable = tick,
                    Err(error) => panic!(
                        "{kind:?} round {round}: no report from the child within 60 s: {error}"
                    ),
                }
            }
            child.kill().unwrap();
            child.wait().unwrap();
            reader.join().unwrap();
            while let Ok(tick) = receiver.try_recv() {
                last_durable = tick;
            }
            let (state, tick, report) = recover(directory.path(), WORDS, apply).unwrap();
            assert!(tick >= last_durable, "{kind:?} round {round}: recovered tick {tick} < last durable {last_durable} ({report:?})");
            reference.advance_to(tick);
            assert!(state == reference.state, "{kind:?} round {round}: recovered state at tick {tick} differs from the reference ({report:?})");
            eprintln!("crash {number}/{round} {kind:?}: reported {last_durable}, recovered {tick} (image {:?}, {} ticks replayed, {} discarded actions)", report.image_tick, report.ticks_replayed, report.actions_discarded);
        }
    }
}
