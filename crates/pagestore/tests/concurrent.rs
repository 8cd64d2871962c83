//! Readers never see a torn or future page while checkpoints of every mode run, and snapshots
//! are monotonic. A writer commits page versions derived from (page, commit); readers validate
//! whole pages and that each snapshot is exactly some committed prefix, never newer than the
//! commits acknowledged so far, and not older than the previous snapshot of the same reader.
//!
//! Size: `PAGESTORE_STRESS_COMMITS` commits (default 2000).

mod common;

use common::*;
use prefixkv_pagestore::{BackfillStrategy, CheckpointMode, Error, Options, PageStore, SyncPolicy};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const DB_PAGES: u32 = 48;

fn stress(strategy: BackfillStrategy) {
    let commits = env_count("PAGESTORE_STRESS_COMMITS", 2000) as u32;
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        page_size_bytes: 1024,
        sync: SyncPolicy::Normal,
        auto_checkpoint_frames: 40,
        cache_capacity_pages: 32,
        busy_timeout: Duration::from_millis(20),
        backfill: strategy,
        evict_wal_from_os_cache_before_backfill: false,
    };
    let (store, _) = PageStore::open(dir.path().join("db"), options).unwrap();
    let seed = 99;
    run_commit(&store, seed, 1, DB_PAGES).unwrap();
    let acknowledged = AtomicU32::new(1);
    let done = AtomicBool::new(false);
    let checkpoints = Mutex::new([0u64; 4]);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // Ends the other loops even if this thread panics.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            let _done = Done(&done);
            for commit in 2..=commits {
                // A blocking checkpoint holds the writer lock for up to a busy timeout.
                loop {
                    match run_commit(&store, seed, commit, DB_PAGES) {
                        Ok(()) => break,
                        Err(Error::Busy(_)) => continue,
                        Err(other) => panic!("commit {commit}: {other}"),
                    }
                }
                acknowledged.store(commit, Ordering::SeqCst);
            }
        });
        scope.spawn(|| {
            let modes = [
                CheckpointMode::Passive,
                CheckpointMode::Full,
                CheckpointMode::Restart,
                CheckpointMode::Truncate,
            ];
            let mut i = 0usize;
            while !done.load(Ordering::SeqCst) {
                let mode = modes[i % 4];
                match store.checkpoint(mode) {
                    Ok(_) => checkpoints.lock().unwrap()[i % 4] += 1,
                    Err(Error::Busy(_)) => {}
                    Err(other) => panic!("checkpoint {mode:?}: {other}"),
                }
                i += 1;
                std::thread::yield_now();
            }
        });
        for _ in 0..2 {
            scope.spawn(|| {
                let mut model = Model::new(seed, DB_PAGES);
                let mut previous = 0u32;
                let mut snapshots = 0u64;
                while !done.load(Ordering::SeqCst) {
                    let floor = acknowledged.load(Ordering::SeqCst);
                    let snapshot = match store.begin_read() {
                        Ok(snapshot) => snapshot,
                        Err(Error::Busy(_)) => continue,
                        Err(other) => panic!("begin_read: {other}"),
                    };
                    let read_all = || -> Vec<u32> {
                        (1..=DB_PAGES)
                            .map(|page| {
                                // Widen the window in which a checkpoint can run mid-snapshot.
                                if page % 8 == 0 {
                                    std::thread::yield_now();
                                }
                                check_image(&snapshot.read_page(page).unwrap(), page)
                                    .unwrap_or_else(|defect| panic!("{defect}"))
                            })
                            .collect()
                    };
                    let first = read_all();
                    let ceiling = acknowledged.load(Ordering::SeqCst) + 1;
                    let at =
                        prefix_of(&mut model, &first).unwrap_or_else(|defect| panic!("{defect}"));
                    assert!(
                        at >= floor,
                        "snapshot {at} older than commit {floor} acknowledged before it began"
                    );
                    assert!(
                        at <= ceiling,
                        "snapshot {at} newer than any commit acknowledged ({ceiling})"
                    );
                    assert!(
                        at >= previous,
                        "snapshots went backwards: {previous} then {at}"
                    );
                    previous = at;
                    std::thread::yield_now();
                    assert_eq!(read_all(), first, "a snapshot changed while it was held");
                    snapshots += 1;
                    drop(snapshot);
                    // Leave windows with no reader, so Restart and Truncate can also succeed.
                    let resume_at = acknowledged.load(Ordering::SeqCst)
                        + 2 * u32::from(snapshots.is_multiple_of(2));
                    while !done.load(Ordering::SeqCst)
                        && acknowledged.load(Ordering::SeqCst) < resume_at
                    {
                        std::thread::yield_now();
                    }
                }
                eprintln!("reader validated {snapshots} snapshots, last at commit {previous}");
            });
        }
    });
    let mut model = Model::new(seed, DB_PAGES);
    assert_eq!(
        prefix_of(&mut model, &read_versions(&store, DB_PAGES).unwrap()).unwrap(),
        commits
    );
    store.checkpoint(CheckpointMode::Truncate).unwrap();
    assert_fast_backfill_ran_on_io_uring(&store, strategy);
    drop(store);
    let (store, _) = PageStore::open(
        dir.path().join("db"),
        Options {
            page_size_bytes: 1024,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(
        prefix_of(&mut model, &read_versions(&store, DB_PAGES).unwrap()).unwrap(),
        commits
    );
    eprintln!(
        "{strategy:?}: successful checkpoints [passive, full, restart, truncate] = {:?}",
        checkpoints.lock().unwrap()
    );
}

#[test]
fn readers_see_consistent_snapshots_during_fast_checkpoints() {
    stress(BackfillStrategy::Fast);
}

#[test]
fn readers_see_consistent_snapshots_during_thread_pool_checkpoints() {
    stress(BackfillStrategy::FastThreadPool);
}

#[test]
fn readers_see_consistent_snapshots_during_naive_checkpoints() {
    stress(BackfillStrategy::Naive);
}
