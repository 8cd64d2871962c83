//! `StoreConfig::compact_dead_fraction`: a store whose live bytes stay small while it deletes and
//! rewrites keys (a cache that evicts) keeps its pages in use bounded; with the fraction off,
//! compaction waits for half the page budget, so the same writes leave the log far larger.

mod common;

use std::time::{Duration, Instant};

use prefixkv_engine::{Store, StoreConfig};

const PAGE: usize = 64 << 10;
/// Pages in use the garbage trigger brings the log back to: the few pages under
/// `MIN_PAGES_FOR_DEAD_TRIGGER`, the tail page and some slack for pages opened meanwhile.
const BOUND_PAGES: u64 = 8;

fn config(dir: &std::path::Path, fraction: Option<f64>) -> StoreConfig {
    let mut config = common::small_config(dir);
    config.log_page_bytes = PAGE;
    config.log_memory_bytes = 128 * PAGE as u64;
    config.compact_dead_fraction = fraction;
    config
}

/// One round: 40 times, deletes 100 keys and writes 100 new ones (what a cache that evicts does;
/// about 16 pages of records, while the live data stays under a page).
fn churn(session: &mut prefixkv_engine::Session, round: u64) {
    let value = vec![round as u8; 200];
    for repeat in 0..40u64 {
        let generation = round * 40 + repeat;
        for n in 0..100u64 {
            if generation > 0 {
                let old = format!("key{}:{n}", generation - 1);
                assert!(session.delete(old.as_bytes()).unwrap());
            }
            let key = format!("key{generation}:{n}");
            session.upsert(key.as_bytes(), &value).unwrap();
        }
    }
    session.suspend();
}

fn pages(store: &Store) -> u64 {
    store.log_memory_in_use_bytes() / PAGE as u64
}

#[test]
fn garbage_starts_compaction_and_keeps_the_log_small() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), Some(0.25))).unwrap();
    let mut session = store.start_session();
    for round in 0..20 {
        churn(&mut session, round);
        assert!(store.live_record_bytes() < PAGE as u64);
        // Compaction runs on its own thread: wait (bounded) for it to bring the log down.
        let deadline = Instant::now() + Duration::from_secs(30);
        while pages(&store) > BOUND_PAGES {
            assert!(
                Instant::now() < deadline,
                "round {round}: {} pages in use after 30 s (live bytes {})",
                pages(&store),
                store.live_record_bytes()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[test]
fn without_the_fraction_the_log_grows_to_half_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), None)).unwrap();
    let mut session = store.start_session();
    for round in 0..20 {
        churn(&mut session, round);
    }
    // Compaction only starts above half of the 128 pages, and stops at it.
    assert!(
        pages(&store) >= 48,
        "{} pages in use: the page-budget trigger alone compacts only near half the budget",
        pages(&store)
    );
}
