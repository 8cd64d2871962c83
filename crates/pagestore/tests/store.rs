//! Single-threaded behaviour: commits, reads, checkpoint modes, recovery, corruption.

mod common;

use common::*;
use prefixkv_pagestore::{BackfillStrategy, CheckpointMode, Error, Options, PageStore, SyncPolicy};
use std::time::Duration;

const PAGE: u32 = 1024;

fn options(backfill: BackfillStrategy) -> Options {
    Options {
        page_size_bytes: PAGE,
        sync: SyncPolicy::Normal,
        auto_checkpoint_frames: 0,
        cache_capacity_pages: 64,
        busy_timeout: Duration::from_millis(200),
        backfill,
        evict_wal_from_os_cache_before_backfill: backfill == BackfillStrategy::FastThreadPool,
    }
}

fn strategies() -> [BackfillStrategy; 3] {
    [
        BackfillStrategy::Naive,
        BackfillStrategy::Fast,
        BackfillStrategy::FastThreadPool,
    ]
}

#[test]
fn commits_checkpoints_and_reopen_agree_with_the_model() {
    for strategy in strategies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let seed = 7;
        let mut model = Model::new(seed, 40);
        let modes = [
            CheckpointMode::Passive,
            CheckpointMode::Full,
            CheckpointMode::Restart,
            CheckpointMode::Truncate,
        ];
        {
            let (store, report) = PageStore::open(&path, options(strategy)).unwrap();
            assert_eq!(report.frames_replayed, 0);
            for commit in 1..=60u32 {
                run_commit(&store, seed, commit, 40).unwrap();
                if commit % 7 == 0 {
                    let outcome = store.checkpoint(modes[(commit / 7) as usize % 4]).unwrap();
                    assert_eq!(outcome.backfilled_frames, outcome.max_frame);
                }
                let versions = read_versions(&store, 40).unwrap();
                assert_eq!(
                    prefix_of(&mut model, &versions).unwrap(),
                    commit,
                    "{strategy:?}"
                );
            }
            assert_fast_backfill_ran_on_io_uring(&store, strategy);
        }
        let (store, _report) = PageStore::open(&path, options(strategy)).unwrap();
        let versions = read_versions(&store, 40).unwrap();
        assert_eq!(prefix_of(&mut model, &versions).unwrap(), 60);
        store.checkpoint(CheckpointMode::Truncate).unwrap();
        assert_eq!(
            std::fs::metadata(dir.path().join("db-wal")).unwrap().len(),
            0
        );
        let versions = read_versions(&store, 40).unwrap();
        assert_eq!(prefix_of(&mut model, &versions).unwrap(), 60);
    }
}

#[test]
fn fast_backfill_reuses_cached_pages_and_writes_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) =
        PageStore::open(dir.path().join("db"), options(BackfillStrategy::Fast)).unwrap();
    let mut txn = store.begin_write().unwrap();
    for page in 1..=32 {
        txn.write_page(page, &page_image(page, 1, PAGE as usize))
            .unwrap();
    }
    txn.commit().unwrap();
    let outcome = store.checkpoint(CheckpointMode::Passive).unwrap();
    assert_eq!(outcome.pages_written, 32);
    assert_eq!(
        outcome.cache_hits, 32,
        "every page was committed through the cache"
    );
    assert_eq!(
        outcome.write_calls, 1,
        "32 consecutive pages are one pwritev"
    );
    // The naive path never looks at the cache.
    run_commit(&store, 3, 2, 32).unwrap();
    let outcome = store
        .checkpoint_with(CheckpointMode::Passive, BackfillStrategy::Naive)
        .unwrap();
    assert_eq!(outcome.cache_hits, 0);
    assert_eq!(outcome.wal_reads, outcome.pages_written);
}

#[test]
fn stale_cache_entries_after_a_restart_are_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) =
        PageStore::open(dir.path().join("db"), options(BackfillStrategy::Fast)).unwrap();
    run_commit(&store, 1, 1, 8).unwrap();
    store.checkpoint(CheckpointMode::Restart).unwrap();
    // Frame ids restart at 1; the epoch bump keeps old (frame 1, epoch 0) entries from matching.
    let mut txn = store.begin_write().unwrap();
    txn.write_page(5, &page_image(5, 2, PAGE as usize)).unwrap();
    txn.commit().unwrap();
    let outcome = store.checkpoint(CheckpointMode::Full).unwrap();
    assert_eq!(outcome.pages_written, 1);
    let snapshot = store.begin_read().unwrap();
    assert_eq!(check_image(&snapshot.read_page(5).unwrap(), 5).unwrap(), 2);
    assert_eq!(check_image(&snapshot.read_page(1).unwrap(), 1).unwrap(), 1);
}

#[test]
fn old_readers_cap_passive_and_make_full_busy() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) =
        PageStore::open(dir.path().join("db"), options(BackfillStrategy::Fast)).unwrap();
    run_commit(&store, 1, 1, 8).unwrap();
    let old = store.begin_read().unwrap();
    let old_mark = old.mark();
    run_commit(&store, 1, 2, 8).unwrap();
    let outcome = store.checkpoint(CheckpointMode::Passive).unwrap();
    assert_eq!(
        outcome.backfilled_frames, old_mark,
        "passive stops at the old reader's mark"
    );
    assert!(matches!(
        store.checkpoint(CheckpointMode::Full),
        Err(Error::Busy(_))
    ));
    // The old snapshot still reads its own versions.
    for page in 1..=8 {
        assert_eq!(check_image(&old.read_page(page).unwrap(), page).unwrap(), 1);
    }
    drop(old);
    let outcome = store.checkpoint(CheckpointMode::Full).unwrap();
    assert_eq!(outcome.backfilled_frames, outcome.max_frame);
    // A WAL reader blocks a restart but not the backfill that precedes it.
    let reader = store.begin_read().unwrap();
    run_commit(&store, 1, 3, 8).unwrap();
    let _newer = store.begin_read().unwrap();
    assert!(matches!(
        store.checkpoint(CheckpointMode::Restart),
        Err(Error::Busy(_))
    ));
    drop(reader);
}

#[test]
fn corrupt_frame_stops_recovery_at_the_last_good_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let seed = 11;
    let mut model = Model::new(seed, 16);
    let mut commit_end_frames = Vec::new();
    {
        let (store, _) = PageStore::open(&path, options(BackfillStrategy::Fast)).unwrap();
        for commit in 1..=10 {
            run_commit(&store, seed, commit, 16).unwrap();
            commit_end_frames.push(store.wal_state().max_frame);
        }
    }
    // Flip one byte inside the page image of the first frame of commit 6.
    let frame = commit_end_frames[4] + 1;
    let offset = prefixkv_pagestore::format::frame_offset(frame, PAGE) + 100;
    let mut wal = std::fs::read(dir.path().join("db-wal")).unwrap();
    wal[offset as usize] ^= 0x40;
    std::fs::write(dir.path().join("db-wal"), &wal).unwrap();
    let (store, report) = PageStore::open(&path, options(BackfillStrategy::Fast)).unwrap();
    let reason = report
        .stopped_because
        .clone()
        .expect("recovery must say why it stopped");
    assert!(
        reason.contains(&format!("frame {frame}")) && reason.contains("checksum"),
        "{reason}"
    );
    assert_eq!(report.frames_replayed, commit_end_frames[4]);
    assert!(report.bytes_ignored > 0);
    let versions = read_versions(&store, 16).unwrap();
    assert_eq!(prefix_of(&mut model, &versions).unwrap(), 5);
}

#[test]
fn uncommitted_tail_is_dropped_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let frames_after_commit_2;
    {
        let (store, _) = PageStore::open(&path, options(BackfillStrategy::Fast)).unwrap();
        run_commit(&store, 5, 1, 8).unwrap();
        run_commit(&store, 5, 2, 8).unwrap();
        frames_after_commit_2 = store.wal_state().max_frame;
    }
    // Cut the WAL in the middle of commit 2's last frame: commit 2 is lost, commit 1 stays.
    let wal_path = dir.path().join("db-wal");
    let length = std::fs::metadata(&wal_path).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&wal_path)
        .unwrap();
    file.set_len(length - 10).unwrap();
    let (store, report) = PageStore::open(&path, options(BackfillStrategy::Fast)).unwrap();
    assert!(report.frames_replayed < frames_after_commit_2);
    assert!(report.stopped_because.unwrap().contains("truncated"));
    let mut model = Model::new(5, 8);
    assert_eq!(
        prefix_of(&mut model, &read_versions(&store, 8).unwrap()).unwrap(),
        1
    );
}

#[test]
fn page_size_mismatch_is_a_clear_error_and_keeps_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let (store, _) = PageStore::open(&path, options(BackfillStrategy::Fast)).unwrap();
        run_commit(&store, 1, 1, 4).unwrap();
    }
    let before = std::fs::read(dir.path().join("db-wal")).unwrap();
    let wrong = Options {
        page_size_bytes: 4096,
        ..options(BackfillStrategy::Fast)
    };
    let error = PageStore::open(&path, wrong).unwrap_err().to_string();
    assert!(
        error.contains("1024-byte pages") && error.contains("db-wal"),
        "{error}"
    );
    assert_eq!(std::fs::read(dir.path().join("db-wal")).unwrap(), before);
}

#[test]
fn bad_arguments_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) =
        PageStore::open(dir.path().join("db"), options(BackfillStrategy::Fast)).unwrap();
    let mut txn = store.begin_write().unwrap();
    assert!(matches!(
        txn.write_page(0, &[0; PAGE as usize]),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        txn.write_page(1, &[0; 10]),
        Err(Error::Invalid(_))
    ));
    drop(txn);
    assert!(matches!(
        store.begin_read().unwrap().read_page(1),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        PageStore::open(
            dir.path().join("other"),
            Options {
                page_size_bytes: 1000,
                ..Options::default()
            }
        ),
        Err(Error::Invalid(_))
    ));
}

#[test]
fn rollback_discards_pages() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) =
        PageStore::open(dir.path().join("db"), options(BackfillStrategy::Fast)).unwrap();
    run_commit(&store, 1, 1, 4).unwrap();
    let mut txn = store.begin_write().unwrap();
    txn.write_page(2, &page_image(2, 99, PAGE as usize))
        .unwrap();
    assert_eq!(check_image(&txn.read_page(2).unwrap(), 2).unwrap(), 99);
    drop(txn);
    assert_eq!(
        check_image(&store.begin_read().unwrap().read_page(2).unwrap(), 2).unwrap(),
        1
    );
    let outcome = store.checkpoint(CheckpointMode::Full).unwrap();
    assert_eq!(outcome.pages_written, 4);
}

#[test]
fn an_old_reader_never_sees_a_page_copied_past_its_mark() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) =
        PageStore::open(dir.path().join("db"), options(BackfillStrategy::Fast)).unwrap();
    let image = |page, commit| page_image(page, commit, PAGE as usize);
    let commit_page = |page: u32, commit: u32| {
        let mut txn = store.begin_write().unwrap();
        txn.write_page(page, &image(page, commit)).unwrap();
        txn.commit().unwrap();
    };
    let mut txn = store.begin_write().unwrap();
    for page in 1..=4 {
        txn.write_page(page, &image(page, 1)).unwrap();
    }
    txn.commit().unwrap();
    store.checkpoint(CheckpointMode::Truncate).unwrap();
    // New generation: page 2 has no frame at or below the reader's mark, so the reader takes it
    // from the database file, which the checkpoint must therefore not advance past the mark.
    commit_page(1, 2);
    let reader = store.begin_read().unwrap();
    assert_eq!(reader.mark(), 1);
    commit_page(2, 3);
    let outcome = store.checkpoint(CheckpointMode::Passive).unwrap();
    assert_eq!(outcome.backfilled_frames, 1);
    assert_eq!(
        check_image(&reader.read_page(2).unwrap(), 2).unwrap(),
        1,
        "future page visible"
    );
    assert_eq!(check_image(&reader.read_page(1).unwrap(), 1).unwrap(), 2);
    drop(reader);
    store.checkpoint(CheckpointMode::Passive).unwrap();
    assert_eq!(
        check_image(&store.begin_read().unwrap().read_page(2).unwrap(), 2).unwrap(),
        3
    );
}

#[test]
fn fast_backfill_reads_misses_through_io_uring_and_the_pool() {
    for strategy in [BackfillStrategy::Fast, BackfillStrategy::FastThreadPool] {
        let dir = tempfile::tempdir().unwrap();
        let uncached = Options {
            cache_capacity_pages: 0,
            ..options(strategy)
        };
        let (store, _) = PageStore::open(dir.path().join("db"), uncached).unwrap();
        // More pages than one batch, so reads of the next batch overlap the current batch's writes.
        let seed = 21;
        let mut model = Model::new(seed, 700);
        for commit in 1..=3 {
            run_commit(&store, seed, commit, 700).unwrap();
        }
        let outcome = store.checkpoint(CheckpointMode::Truncate).unwrap();
        eprintln!(
            "{strategy:?}: fast backfill reader = {}",
            store.backfill_reader()
        );
        assert_fast_backfill_ran_on_io_uring(&store, strategy);
        assert_eq!(outcome.cache_hits, 0);
        assert_eq!(outcome.wal_reads, 700);
        assert_eq!(outcome.pages_written, 700);
        // Commit 1 wrote every page, so most of the worklist is runs of consecutive frames: on
        // io_uring one read each (up to 32 frames), on the pool one read per frame.
        if store.backfill_reader() == "io_uring" {
            assert!(
                outcome.wal_read_calls <= 700 / 8,
                "{} reads for 700 mostly consecutive frames",
                outcome.wal_read_calls
            );
        } else {
            assert_eq!(outcome.wal_read_calls, 700);
        }
        let versions = read_versions(&store, 700).unwrap();
        assert_eq!(prefix_of(&mut model, &versions).unwrap(), 3, "{strategy:?}");
    }
}

/// Reads the database file itself (not through the store) and checks every page's image.
fn db_file_versions(path: &std::path::Path, db_pages: u32) -> Vec<u32> {
    let bytes = std::fs::read(path).unwrap();
    (1..=db_pages)
        .map(|page| {
            let start = (page as usize - 1) * PAGE as usize;
            check_image(&bytes[start..start + PAGE as usize], page).unwrap()
        })
        .collect()
}

#[test]
fn fast_backfill_with_a_wal_larger_than_the_cache_writes_each_page_once() {
    for strategy in [BackfillStrategy::Fast, BackfillStrategy::FastThreadPool] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        // 48 cached pages against ~1500 distinct pages per checkpoint: mostly reads, some hits,
        // several batches and early flushes of long runs (commit 1 writes every page in order).
        let small_cache = Options {
            cache_capacity_pages: 48,
            ..options(strategy)
        };
        let (store, _) = PageStore::open(&path, small_cache).unwrap();
        let seed = 33;
        let db_pages = 1500;
        let mut model = Model::new(seed, db_pages);
        for commit in 1..=40 {
            run_commit(&store, seed, commit, db_pages).unwrap();
        }
        let outcome = store.checkpoint(CheckpointMode::Full).unwrap();
        assert_eq!(
            outcome.pages_written, db_pages as u64,
            "{strategy:?}: one write per page"
        );
        assert_eq!(outcome.cache_hits + outcome.wal_reads, db_pages as u64);
        assert!(outcome.cache_hits > 0 && outcome.wal_reads > outcome.cache_hits);
        assert!(
            outcome.write_calls < db_pages as u64 / 2,
            "{strategy:?}: {} calls for runs of consecutive pages",
            outcome.write_calls
        );
        model.extend_to(40);
        assert_eq!(
            db_file_versions(&path, db_pages),
            model.history[40],
            "{strategy:?}"
        );
    }
}

/// A failed database write aborts the checkpoint before anything is published; the next
/// checkpoint copies everything. On the simulated disk (no descriptor: the pool engine).
#[test]
fn a_failed_backfill_write_publishes_nothing() {
    use prefixkv_storage::{Fault, FaultError, FaultOp, SimDisk};
    for strategy in [BackfillStrategy::Fast, BackfillStrategy::FastThreadPool] {
        let disk = SimDisk::new(5);
        prefixkv_storage::durable::create_dir_all_durably(&disk, std::path::Path::new("/d"))
            .unwrap();
        let (store, _) = PageStore::open_on(disk.as_disk(), "/d/db", options(strategy)).unwrap();
        let seed = 9;
        let mut model = Model::new(seed, 300);
        for commit in 1..=5 {
            run_commit(&store, seed, commit, 300).unwrap();
        }
        disk.inject(Fault::once(FaultOp::Write, "/d/db", FaultError::Io));
        let error = store.checkpoint(CheckpointMode::Full).unwrap_err();
        assert!(error.to_string().contains("pwritev"), "{error}");
        assert_eq!(store.wal_state().backfilled_frames, 0, "{strategy:?}");
        let outcome = store.checkpoint(CheckpointMode::Truncate).unwrap();
        assert_eq!(outcome.pages_written, 300);
        drop(store);
        let (store, _) = PageStore::open_on(disk.as_disk(), "/d/db", options(strategy)).unwrap();
        let versions = read_versions(&store, 300).unwrap();
        assert_eq!(prefix_of(&mut model, &versions).unwrap(), 5);
    }
}

#[test]
fn truncate_shrinks_the_database_and_a_complete_checkpoint_cuts_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let page = PAGE as usize;
    let file_pages = || std::fs::metadata(&path).unwrap().len() / PAGE as u64;
    let (store, _) = PageStore::open(&path, options(BackfillStrategy::Fast)).unwrap();
    let mut txn = store.begin_write().unwrap();
    for p in 1..=20 {
        txn.write_page(p, &page_image(p, 1, page)).unwrap();
    }
    txn.commit().unwrap();
    store.checkpoint(CheckpointMode::Full).unwrap();
    assert_eq!(file_pages(), 20);

    let mut txn = store.begin_write().unwrap();
    assert!(matches!(txn.truncate(0), Err(Error::Invalid(_))));
    assert!(matches!(txn.truncate(21), Err(Error::Invalid(_))));
    txn.write_page(15, &page_image(15, 2, page)).unwrap();
    txn.truncate(8).unwrap();
    assert_eq!(txn.size_pages(), 8);
    txn.write_page(3, &page_image(3, 2, page)).unwrap();
    txn.commit().unwrap();
    let check = |store: &PageStore, size: u32, versions: &[(u32, u32)]| {
        let read = store.begin_read().unwrap();
        assert_eq!(read.db_size_pages(), size);
        assert!(read.read_page(size + 1).is_err());
        for &(p, commit) in versions {
            let bytes = read.read_page(p).unwrap();
            if commit == 0 {
                assert!(bytes.iter().all(|&b| b == 0), "page {p} must read as zeros");
            } else {
                assert_eq!(check_image(&bytes, p).unwrap(), commit, "page {p}");
            }
        }
    };
    check(&store, 8, &[(1, 1), (3, 2), (8, 1)]);
    // Growing back before any checkpoint: page 9 has its old image in the file and in the WAL,
    // but comes back as zeros.
    let mut txn = store.begin_write().unwrap();
    txn.write_page(10, &page_image(10, 3, page)).unwrap();
    assert!(txn.read_page(9).unwrap().iter().all(|&b| b == 0));
    txn.commit().unwrap();
    let after_growth = [(1, 1), (3, 2), (8, 1), (9, 0), (10, 3)];
    check(&store, 10, &after_growth);
    // The sizes are in the WAL only: a reopen takes them from it, not from the longer file.
    drop(store);
    assert_eq!(file_pages(), 20);
    let (store, _) = PageStore::open(&path, options(BackfillStrategy::Fast)).unwrap();
    check(&store, 10, &after_growth);
    let outcome = store.checkpoint(CheckpointMode::Passive).unwrap();
    assert_eq!(outcome.db_file_truncated_to_pages, Some(10));
    assert_eq!(file_pages(), 10);
    check(&store, 10, &after_growth);
    // A shrink that writes nothing still commits (page 1's image carries the size).
    let mut txn = store.begin_write().unwrap();
    txn.truncate(6).unwrap();
    txn.commit().unwrap();
    check(&store, 6, &[(1, 1), (3, 2), (6, 1)]);
    let outcome = store.checkpoint(CheckpointMode::Truncate).unwrap();
    assert_eq!(outcome.db_file_truncated_to_pages, Some(6));
    drop(store);
    assert_eq!(file_pages(), 6);
    let (store, report) = PageStore::open(&path, options(BackfillStrategy::Fast)).unwrap();
    assert_eq!(report.frames_replayed, 0);
    check(&store, 6, &[(1, 1), (3, 2), (6, 1)]);
}

/// A failed cut of the database file fails the checkpoint before its fsync: nothing is
/// published, the shrunk size still comes from the WAL after a reopen, and the next complete
/// checkpoint cuts the file.
#[test]
fn a_failed_database_cut_publishes_nothing() {
    use prefixkv_storage::{Fault, FaultError, FaultOp, SimDisk};
    let disk = SimDisk::new(6);
    prefixkv_storage::durable::create_dir_all_durably(&disk, std::path::Path::new("/d")).unwrap();
    let db = std::path::Path::new("/d/db");
    let options = options(BackfillStrategy::Fast);
    let (store, _) = PageStore::open_on(disk.as_disk(), db, options.clone()).unwrap();
    let mut txn = store.begin_write().unwrap();
    for p in 1..=10 {
        txn.write_page(p, &page_image(p, 1, PAGE as usize)).unwrap();
    }
    txn.commit().unwrap();
    store.checkpoint(CheckpointMode::Full).unwrap();
    let mut txn = store.begin_write().unwrap();
    txn.truncate(4).unwrap();
    txn.commit().unwrap();
    disk.inject(Fault::once(FaultOp::SetLen, "/d/db", FaultError::Io));
    let error = store.checkpoint(CheckpointMode::Truncate).unwrap_err();
    assert!(
        error.to_string().contains("truncating to 4 pages"),
        "{error}"
    );
    assert_eq!(store.wal_state().backfilled_frames, 0);
    drop(store);
    let (store, _) = PageStore::open_on(disk.as_disk(), db, options.clone()).unwrap();
    assert_eq!(store.begin_read().unwrap().db_size_pages(), 4);
    let outcome = store.checkpoint(CheckpointMode::Truncate).unwrap();
    assert_eq!(outcome.db_file_truncated_to_pages, Some(4));
    assert_eq!(disk.read_file(db).unwrap().len(), 4 * PAGE as usize);
}
