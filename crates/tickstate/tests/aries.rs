//! The ARIES baseline on TPC-C: after a clean close, after a "crash" (the handle dropped with the
//! page writer stopped mid-way, nothing flushed at the end), with a transaction in flight whose
//! records are durable (a loser: undone), and after rollbacks in normal processing, the recovered
//! database must equal the reference: the same inputs executed on a plain vector. A damaged page
//! is an error naming the page.

use prefixkv_tickstate::aries::{db_path, recover, Aries, AriesConfig, PAGE_BYTES};
use prefixkv_tickstate::tpcc::{
    execute, populate, Generator, Input, Outcome, Store, Tpcc, TpccConfig, WithUndo,
};
use std::os::unix::fs::FileExt;

fn small() -> Tpcc {
    Tpcc::new(
        TpccConfig {
            warehouses: 2,
            items: 1_000,
            customers_per_district: 60,
            order_slots: 256,
            history_slots: 512,
        },
        11,
    )
    .unwrap()
}

/// The population and the first `transactions` inputs executed on a plain vector.
fn reference(tpcc: &Tpcc, transactions: u64) -> Vec<u64> {
    let mut cells = vec![0u64; tpcc.layout().cells()];
    populate(tpcc, cells.as_mut_slice());
    let mut generator = Generator::new(*tpcc.config(), tpcc.seed());
    let mut store = WithUndo::new(cells.as_mut_slice());
    for _ in 0..transactions {
        execute(tpcc, &mut store, &generator.next_input()).unwrap();
    }
    drop(store);
    cells
}

fn create(tpcc: &Tpcc, dir: &std::path::Path) -> Aries {
    let mut initial = vec![0u64; tpcc.layout().cells()];
    populate(tpcc, initial.as_mut_slice());
    Aries::create(dir, &initial, AriesConfig::new(tpcc.layout().cells())).unwrap()
}

/// Run inputs `generator` yields next, `count` of them; returns how many rolled back.
fn run(tpcc: &Tpcc, aries: &mut Aries, generator: &mut Generator, count: u64) -> u64 {
    let mut rolled_back = 0;
    for _ in 0..count {
        if execute(tpcc, aries, &generator.next_input()).unwrap() == Outcome::RolledBack {
            rolled_back += 1;
        }
    }
    rolled_back
}

fn first_difference(a: &[u64], b: &[u64]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

#[test]
fn recovery_after_close_and_after_a_crash_equals_the_reference() {
    let tpcc = small();
    let dir = tempfile::tempdir().unwrap();
    let mut aries = create(&tpcc, dir.path());
    let mut generator = Generator::new(*tpcc.config(), tpcc.seed());
    let rolled_back = run(&tpcc, &mut aries, &mut generator, 3_000);
    assert!(rolled_back > 0, "no rollback in 3 000 transactions");
    aries.close().unwrap();
    let (cells, report) = recover(dir.path(), tpcc.layout().cells()).unwrap();
    assert_eq!(
        first_difference(&cells, &reference(&tpcc, 3_000)),
        None,
        "{report:?}"
    );
    assert_eq!(report.losers, 0);

    // Continue from the recovered database, then crash: the last commit is durable (waited for),
    // the pages are whatever the writer had flushed.
    let (mut aries, _) = Aries::open(dir.path(), AriesConfig::new(tpcc.layout().cells())).unwrap();
    run(&tpcc, &mut aries, &mut generator, 4_000);
    // Let the page writer complete a checkpoint (bounded wait on the condition), so that the
    // recovery below starts from one, then run more.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while aries.stats().checkpoints == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint in 60 s"
        );
        std::thread::yield_now();
    }
    run(&tpcc, &mut aries, &mut generator, 500);
    aries.take_commit_ticket().unwrap().wait().unwrap();
    drop(aries);
    let (cells, report) = recover(dir.path(), tpcc.layout().cells()).unwrap();
    assert_eq!(
        first_difference(&cells, &reference(&tpcc, 7_500)),
        None,
        "{report:?}"
    );
    assert!(report.checkpoint_lsn > 0, "{report:?}");
}

#[test]
fn a_transaction_in_flight_at_the_crash_is_undone() {
    let tpcc = small();
    let dir = tempfile::tempdir().unwrap();
    let mut aries = create(&tpcc, dir.path());
    let mut generator = Generator::new(*tpcc.config(), tpcc.seed());
    run(&tpcc, &mut aries, &mut generator, 500);
    // A transaction that writes two rows, one across a page boundary, and never commits.
    aries.begin();
    let layout = tpcc.layout();
    aries.set_row(layout.warehouse(1), &[1, 2, 3, 4]);
    aries.set_row(layout.stock(2, 7), &[9, 9, 9, 9]);
    let row = 3 * 510 - 2;
    aries.set_row(row, &[5, 6, 7, 8]);
    aries.sync_log().unwrap();
    drop(aries);
    let (cells, report) = recover(dir.path(), tpcc.layout().cells()).unwrap();
    assert_eq!(report.losers, 1, "{report:?}");
    assert_eq!(report.records_undone, 4, "{report:?}");
    assert_eq!(
        first_difference(&cells, &reference(&tpcc, 500)),
        None,
        "{report:?}"
    );
    // Recovery logged CLRs and an END for the loser: a second recovery undoes nothing more.
    let (again, report) = recover(dir.path(), tpcc.layout().cells()).unwrap();
    assert_eq!(report.losers, 0, "{report:?}");
    assert!(again == cells);
}

#[test]
fn the_oracle_of_these_tests_sees_a_lost_transaction() {
    // The reference of 499 transactions is not the state after 500: the comparison can fail.
    let tpcc = small();
    let dir = tempfile::tempdir().unwrap();
    let mut aries = create(&tpcc, dir.path());
    let mut generator = Generator::new(*tpcc.config(), tpcc.seed());
    run(&tpcc, &mut aries, &mut generator, 500);
    aries.close().unwrap();
    let (cells, _) = recover(dir.path(), tpcc.layout().cells()).unwrap();
    assert!(first_difference(&cells, &reference(&tpcc, 499)).is_some());
}

#[test]
fn a_damaged_page_is_an_error_naming_it() {
    let tpcc = small();
    let dir = tempfile::tempdir().unwrap();
    let aries = create(&tpcc, dir.path());
    aries.close().unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(db_path(dir.path()))
        .unwrap();
    let offset = (5 * PAGE_BYTES + 100) as u64;
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, offset).unwrap();
    file.write_all_at(&[byte[0] ^ 4], offset).unwrap();
    let error = recover(dir.path(), tpcc.layout().cells())
        .unwrap_err()
        .to_string();
    assert!(error.contains("page 5") && error.contains("CRC"), "{error}");
    // And a wrong size is refused with both sizes.
    let error = recover(dir.path(), tpcc.layout().cells() + 1)
        .unwrap_err()
        .to_string();
    assert!(error.contains("cells"), "{error}");
}

#[test]
fn load_inputs_are_not_transactions() {
    let tpcc = small();
    let mut cells = vec![0u64; tpcc.layout().cells()];
    let error = execute(
        &tpcc,
        &mut WithUndo::new(cells.as_mut_slice()),
        &Input::Load,
    );
    assert!(error.is_err());
}
