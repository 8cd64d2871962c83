//! TPC-C crash tests: a child process (this test binary re-executed by `prefixkv_testkit::child`)
//! runs TPC-C transactions in batches on IPP (a `TickState`, one tick per batch, inputs in the
//! logical log) or on the ARIES baseline, and reports after each batch how many transactions are
//! acknowledged (durable). The parent SIGKILLs it after a random number of reports, recovers the
//! directory, and checks the recovered database equals the reference — the population and the
//! first N inputs executed on a plain vector — for some N between the acknowledged count and the
//! count the child could have started; the next child continues from input N. The directory is
//! reused across kills. `TICKSTATE_TPCC_CRASH_KILLS` sets the number of kills (default 16, half
//! per engine); `TICKSTATE_TPCC_CRASH_SEED` replays the kill points.

use prefixkv_testkit::child::{self, ChildProcess};
use prefixkv_testkit::{env_count, rng::Rng};
use prefixkv_tickstate::algo::InterleavedPingPong;
use prefixkv_tickstate::aries::{self, Aries, AriesConfig};
use prefixkv_tickstate::tpcc::{execute, populate, Generator, Input, Tpcc, TpccConfig, WithUndo};
use prefixkv_tickstate::{recover, Config, TickState};
use std::cell::RefCell;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

const CHILD_ENV: &str = "TICKSTATE_TPCC_CRASH_DIR";
const ENGINE_ENV: &str = "TICKSTATE_TPCC_CRASH_ENGINE";
const DONE_ENV: &str = "TICKSTATE_TPCC_CRASH_DONE";
const BATCH: u64 = 100;

fn tpcc() -> Tpcc {
    Tpcc::new(
        TpccConfig {
            warehouses: 2,
            items: 1_000,
            customers_per_district: 60,
            order_slots: 512,
            history_slots: 512,
        },
        0x7bcc,
    )
    .unwrap()
}

/// The generator positioned after `done` inputs.
fn generator_after(tpcc: &Tpcc, done: u64) -> Generator {
    let mut generator = Generator::new(*tpcc.config(), tpcc.seed());
    for _ in 0..done {
        generator.next_input();
    }
    generator
}

fn ipp_child(dir: &str, done: u64) {
    let tpcc = tpcc();
    let failure = RefCell::new(None);
    let apply = |cells: &mut [u64], _tick: u64, action: &[u8]| {
        if let Err(error) = tpcc.replay(cells, action) {
            failure.borrow_mut().get_or_insert(error);
        }
    };
    let (mut state, _) =
        TickState::<InterleavedPingPong>::open(dir, Config::new(tpcc.layout().cells()), apply)
            .expect("child open");
    assert_eq!(*failure.borrow(), None);
    let mut action = Vec::new();
    if state.tick() == 0 {
        Input::Load.encode(&mut action);
        state.log_action(&action).unwrap();
        populate(&tpcc, &mut state);
        state.point_of_consistency(1).unwrap();
    }
    assert_eq!(
        (state.tick() - 1) * BATCH,
        done,
        "the parent's count and the tick disagree"
    );
    let mut generator = generator_after(&tpcc, done);
    loop {
        for _ in 0..BATCH {
            let input = generator.next_input();
            input.encode(&mut action);
            state.log_action(&action).unwrap();
            execute(&tpcc, &mut WithUndo::new(&mut state), &input).unwrap();
        }
        state.point_of_consistency(state.tick() + 1).unwrap();
        let durable = state.wait_durable().unwrap();
        child::report(format!("acked {}", (durable - 1) * BATCH));
    }
}

fn aries_child(dir: &str, done: u64) {
    let tpcc = tpcc();
    let config = AriesConfig::new(tpcc.layout().cells());
    let mut aries = if Path::new(dir).join("aries.master").exists() {
        Aries::open(dir, config).expect("child open").0
    } else {
        let mut initial = vec![0u64; tpcc.layout().cells()];
        populate(&tpcc, initial.as_mut_slice());
        Aries::create(dir, &initial, config).expect("child create")
    };
    let mut generator = generator_after(&tpcc, done);
    let mut acked = done;
    loop {
        for _ in 0..BATCH {
            execute(&tpcc, &mut aries, &generator.next_input()).unwrap();
        }
        if let Some(ticket) = aries.take_commit_ticket() {
            ticket.wait().unwrap();
        }
        acked += BATCH;
        child::report(format!("acked {acked}"));
    }
}

/// Child mode entry: does nothing unless the parent set the environment.
#[test]
fn tpcc_crash_child_entry() {
    let Some(dir) = child::child_mode(CHILD_ENV) else {
        return;
    };
    let done: u64 = child::child_mode(DONE_ENV).unwrap().parse().unwrap();
    match child::child_mode(ENGINE_ENV).as_deref() {
        Some("IPP") => ipp_child(&dir, done),
        Some("ARIES") => aries_child(&dir, done),
        other => panic!("unknown engine {other:?}"),
    }
}

/// The reference: the population, then inputs executed one at a time on a plain vector.
struct Reference {
    cells: Vec<u64>,
    generator: Generator,
    done: u64,
}

impl Reference {
    fn new(tpcc: &Tpcc) -> Reference {
        let mut cells = vec![0u64; tpcc.layout().cells()];
        populate(tpcc, cells.as_mut_slice());
        Reference {
            cells,
            generator: Generator::new(*tpcc.config(), tpcc.seed()),
            done: 0,
        }
    }

    fn step(&mut self, tpcc: &Tpcc) {
        let input = self.generator.next_input();
        execute(tpcc, &mut WithUndo::new(self.cells.as_mut_slice()), &input).unwrap();
        self.done += 1;
    }

    /// Advance to the first count in `low..=high` at which the reference equals `recovered`;
    /// panics if there is none.
    fn match_recovered(&mut self, tpcc: &Tpcc, recovered: &[u64], low: u64, high: u64, what: &str) {
        assert!(self.done <= low, "{what}: the reference is past {low}");
        while self.done < low {
            self.step(tpcc);
        }
        loop {
            if self.cells == recovered {
                self.settle_on_batch_boundary(tpcc, recovered, high);
                return;
            }
            assert!(
                self.done < high,
                "{what}: the recovered database equals the reference after no count of \
                 transactions in {low}..={high}"
            );
            self.step(tpcc);
        }
    }
}

impl Reference {
    /// A transaction that changes nothing (a read-only one, or a rolled-back New-Order) makes
    /// several counts explain the same recovered state, and the first match may fall one short
    /// of the count the engine really recovered. Both engines acknowledge in batches of `BATCH`
    /// and IPP recovers at tick (batch) boundaries, so when the run of equal states reaches a
    /// batch boundary (no later than `high`), the reference moves there; otherwise it stays at
    /// the first match. Either count explains the state; this one is where the next child resumes.
    fn settle_on_batch_boundary(&mut self, tpcc: &Tpcc, recovered: &[u64], high: u64) {
        let (first_cells, first_done) = (self.cells.clone(), self.done);
        while !self.done.is_multiple_of(BATCH) && self.done < high {
            self.step(tpcc);
            if self.cells != recovered {
                break;
            }
        }
        if !(self.done.is_multiple_of(BATCH) && self.cells == recovered) {
            self.cells = first_cells;
            self.done = first_done;
            self.generator = generator_after(tpcc, first_done);
        }
    }
}

fn acked(line: &str) -> u64 {
    line.strip_prefix("acked ")
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("unexpected line from the child: {line:?}"))
}

#[test]
fn sigkill_during_tpcc_recovers_a_prefix_covering_every_acknowledged_transaction() {
    if child::child_mode(CHILD_ENV).is_some() {
        return;
    }
    let kills = env_count("TICKSTATE_TPCC_CRASH_KILLS", 16);
    let mut rng = Rng::from_env("TICKSTATE_TPCC_CRASH_SEED");
    let tpcc = tpcc();
    let cells = tpcc.layout().cells();
    for engine in ["IPP", "ARIES"] {
        let directory = tempfile::tempdir().unwrap();
        let mut reference = Reference::new(&tpcc);
        for round in 0..kills.div_ceil(2) {
            let done = OsString::from(reference.done.to_string());
            let mut child = ChildProcess::spawn_test(
                "tpcc_crash_child_entry",
                &[
                    (CHILD_ENV, directory.path().as_os_str()),
                    (ENGINE_ENV, engine.as_ref()),
                    (DONE_ENV, &done),
                ],
            )
            .unwrap();
            let mut last_acked = reference.done;
            for _ in 0..rng.in_range(1..25) {
                match child.next_line(Duration::from_secs(60)) {
                    Ok(line) => last_acked = acked(&line),
                    Err(error) => panic!("{engine} round {round}: {error}"),
                }
            }
            for line in child.kill() {
                last_acked = acked(&line);
            }
            let what = format!("{engine} round {round} (acknowledged {last_acked})");
            // At most one batch past the last acknowledgement had started when the kill came.
            let high = last_acked + BATCH;
            let recovered = if engine == "IPP" {
                let failure = RefCell::new(None);
                let (state, tick, report) = recover(directory.path(), cells, |state, _, action| {
                    if let Err(error) = tpcc.replay(state, action) {
                        failure.borrow_mut().get_or_insert(error);
                    }
                })
                .unwrap();
                assert_eq!(*failure.borrow(), None, "{what}");
                eprintln!("{what}: recovered tick {tick} ({report:?})");
                state
            } else {
                let (state, report) = aries::recover(directory.path(), cells).unwrap();
                eprintln!("{what}: {report:?}");
                state
            };
            reference.match_recovered(&tpcc, &recovered, last_acked, high, &what);
            eprintln!("{what}: recovered {} transactions", reference.done);
        }
    }
}
