//! Power cuts on the simulated disk (`PageStore::open_on` with a `prefixkv_storage::SimDisk`),
//! checked against what the writer was acknowledged.
//!
//! Each seed (sync policy `Full` or `Normal`, a backfill strategy, auto-checkpoints on or off, by
//! seed) runs two generations: commit transactions of a few pages each, with checkpoints of every
//! mode mixed in, until a power cut armed at a random call kills the disk; crash with seeded
//! choices; reopen; and check that the database is exactly the state after the first `k`
//! transactions for some `k` (never a mixture of two), with `k` at least every transaction that
//! was durable by contract (`Full`: every acknowledged commit; `Normal`: every commit before an
//! acknowledged checkpoint) and at most the transactions attempted. Some transactions shrink the
//! database first ([`prefixkv_pagestore::WriteTransaction::truncate`]), so complete checkpoints
//! cut the database file, and later growth brings truncated pages back as zeros.
//!
//! A second test cuts the power at every call of a shrinking `Truncate` checkpoint in turn.
//!
//! `PAGESTORE_POWER_CUT_SEEDS` (default 2000); `PAGESTORE_POWER_CUT_SEED=n` replays one seed.

use prefixkv_pagestore::{BackfillStrategy, CheckpointMode, Options, PageStore, SyncPolicy};
use prefixkv_storage::{CrashMode, SimDisk};

use prefixkv_testkit::rng::{env_count, Rng};
use std::time::Duration;

const PAGE_BYTES: usize = 512;
const PAGES: u32 = 12;
const DB: &str = "/data/db";

fn options(seed: u64) -> Options {
    Options {
        page_size_bytes: PAGE_BYTES as u32,
        sync: if seed.is_multiple_of(2) {
            SyncPolicy::Full
        } else {
            SyncPolicy::Normal
        },
        auto_checkpoint_frames: if seed.is_multiple_of(3) { 0 } else { 6 },
        cache_capacity_pages: 64,
        busy_timeout: Duration::from_secs(5),
        backfill: [
            BackfillStrategy::Naive,
            BackfillStrategy::Fast,
            BackfillStrategy::FastThreadPool,
        ][(seed / 2 % 3) as usize],
        evict_wal_from_os_cache_before_backfill: false,
    }
}

/// The image transaction `txn` writes to `page`: says which, and is checkable byte by byte.
fn page_image(txn: u64, page: u32) -> Vec<u8> {
    let mut image = vec![0u8; PAGE_BYTES];
    image[..8].copy_from_slice(&txn.to_le_bytes());
    image[8..12].copy_from_slice(&page.to_le_bytes());
    for (i, byte) in image[12..].iter_mut().enumerate() {
        *byte = (txn as usize * 31 + page as usize * 7 + i) as u8;
    }
    image
}

/// One transaction: an optional shrink first, then the pages written.
#[derive(Default, Clone)]
struct Txn {
    truncate_to: Option<u32>,
    pages: Vec<u32>,
}

/// What the writer knows: the pages of every attempted transaction, and what is durable.
#[derive(Default)]
struct Writer {
    /// Transaction `i + 1`.
    transactions: Vec<Txn>,
    /// Transactions durable by contract.
    durable: u64,
    /// Checkpoints that cut the database file (the test must exercise them).
    files_cut: u64,
}

impl Writer {
    /// The database after the first `k` transactions: (size in pages, image of every page).
    fn state(&self, k: u64) -> (u32, Vec<Vec<u8>>) {
        let mut size = 0;
        let mut pages = vec![vec![0u8; PAGE_BYTES]; PAGES as usize];
        for (index, txn) in self.transactions[..k as usize].iter().enumerate() {
            if let Some(n) = txn.truncate_to {
                size = n;
                for page in &mut pages[n as usize..] {
                    page.fill(0);
                }
            }
            for &page in &txn.pages {
                pages[page as usize - 1] = page_image(index as u64 + 1, page);
                size = size.max(page);
            }
        }
        (size, pages)
    }

    fn run(&mut self, store: &PageStore, options: &Options, rng: &mut Rng) {
        for _ in 0..80 {
            let txn = self.transactions.len() as u64 + 1;
            let mut pages: Vec<u32> = (0..1 + rng.below(4))
                .map(|_| 1 + rng.below(u64::from(PAGES)) as u32)
                .collect();
            pages.sort_unstable();
            pages.dedup();
            let Ok(mut write) = store.begin_write() else {
                return;
            };
            let size = write.size_pages();
            let truncate_to =
                (size > 1 && rng.below(8) == 0).then(|| 1 + rng.below(size as u64) as u32);
            if let Some(n) = truncate_to {
                write.truncate(n).unwrap();
            }
            for &page in &pages {
                write.write_page(page, &page_image(txn, page)).unwrap();
            }
            self.transactions.push(Txn { truncate_to, pages });
            if write.commit().is_err() {
                return;
            }
            if options.sync == SyncPolicy::Full {
                self.durable = txn;
            }
            if rng.below(6) == 0 {
                let mode = [
                    CheckpointMode::Passive,
                    CheckpointMode::Full,
                    CheckpointMode::Restart,
                    CheckpointMode::Truncate,
                ][rng.below(4) as usize];
                match store.checkpoint(mode) {
                    Ok(outcome) => {
                        self.durable = txn;
                        self.files_cut += u64::from(outcome.db_file_truncated_to_pages.is_some());
                    }
                    Err(prefixkv_pagestore::Error::Busy(_)) => {}
                    Err(_) => return,
                }
            }
        }
    }

    /// Finds the `k` the recovered store equals; panics naming the difference otherwise.
    fn check(&mut self, store: &PageStore, seed: u64) -> u64 {
        let read = store.begin_read().unwrap();
        let size = read.db_size_pages().min(PAGES);
        let image: Vec<Vec<u8>> = (1..=PAGES)
            .map(|page| {
                if page <= size {
                    read.read_page(page).unwrap().to_vec()
                } else {
                    vec![0u8; PAGE_BYTES]
                }
            })
            .collect();
        drop(read);
        let attempted = self.transactions.len() as u64;
        let k = (self.durable..=attempted)
            .rev()
            .find(|&k| self.state(k) == (size, image.clone()))
            .unwrap_or_else(|| {
                let differing: Vec<(u32, u64)> = image
                    .iter()
                    .enumerate()
                    .map(|(i, bytes)| {
                        (
                            i as u32 + 1,
                            u64::from_le_bytes(bytes[..8].try_into().unwrap()),
                        )
                    })
                    .collect();
                panic!(
                    "seed {seed} (PAGESTORE_POWER_CUT_SEED={seed}): the database (size {size}, \
                     (page, writer txn) {differing:?}) is no state after k transactions for k in \
                     {}..={attempted}",
                    self.durable
                )
            });
        self.transactions.truncate(k as usize);
        self.durable = k;
        k
    }
}

/// A disk with the store's directory, durably.
fn disk(seed: u64) -> SimDisk {
    let disk = SimDisk::new(seed);
    prefixkv_storage::durable::create_dir_all_durably(&disk, std::path::Path::new("/data"))
        .unwrap();
    disk
}

/// Runs one seed; returns how many checkpoints cut the database file.
fn run_seed(seed: u64) -> u64 {
    let disk = disk(seed);
    let mut rng = Rng::new(seed);
    let options = options(seed);
    let mut writer = Writer::default();
    for generation in 0..2 {
        let (store, _report) = PageStore::open_on(disk.as_disk(), DB, options.clone())
            .unwrap_or_else(|e| panic!("seed {seed} generation {generation}: reopen: {e}"));
        if generation > 0 {
            writer.check(&store, seed);
        }
        disk.cut_after(rng.below(150));
        writer.run(&store, &options, &mut rng);
        disk.kill();
        drop(store);
        disk.crash(CrashMode::Random);
    }
    let (store, _) = PageStore::open_on(disk.as_disk(), DB, options).unwrap();
    writer.check(&store, seed);
    writer.files_cut
}

#[test]
fn power_cuts_recover_a_committed_prefix_never_a_mixture() {
    if let Some(seed) = std::env::var("PAGESTORE_POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        run_seed(seed);
        return;
    }
    let seeds = env_count("PAGESTORE_POWER_CUT_SEEDS", 2000);
    let files_cut: u64 = (0..seeds).map(run_seed).sum();
    assert!(
        seeds < 100 || files_cut > seeds / 10,
        "only {files_cut} checkpoints cut the database file"
    );
    eprintln!(
        "pagestore power cuts: {seeds} seeds x 2 generations, {files_cut} checkpoints cut the database file"
    );
}

/// The check is not vacuous: recovering a store whose last acknowledged (`Full`) commit is
/// removed from the record is reported.
#[test]
fn the_check_catches_a_lost_acknowledged_commit() {
    let disk = disk(0);
    let options = options(0);
    assert_eq!(options.sync, SyncPolicy::Full);
    let (store, _) = PageStore::open_on(disk.as_disk(), DB, options.clone()).unwrap();
    let mut writer = Writer::default();
    for txn in 1..=3u64 {
        let mut write = store.begin_write().unwrap();
        write.write_page(1, &page_image(txn, 1)).unwrap();
        write.commit().unwrap();
        writer.transactions.push(Txn {
            truncate_to: None,
            pages: vec![1],
        });
        writer.durable = txn;
    }
    drop(store);
    disk.crash(CrashMode::Random);
    // Tamper: the record claims a fourth acknowledged commit that the store never saw.
    writer.transactions.push(Txn {
        truncate_to: None,
        pages: vec![2],
    });
    writer.durable = 4;
    let (store, _) = PageStore::open_on(disk.as_disk(), DB, options).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.check(&store, 0)));
    assert!(caught.is_err());
}

/// Cuts the power at every call of a `Truncate` checkpoint that shrinks the database file, one
/// cut per run, with every crash mode: the recovered database is always the shrunk one, and
/// growing it back afterwards shows zeros for the truncated pages.
#[test]
fn a_power_cut_at_every_call_of_a_shrinking_truncate_checkpoint_recovers_the_shrunk_database() {
    let modes = [
        CrashMode::Random,
        CrashMode::DropAll,
        CrashMode::KeepAll,
        CrashMode::TornLastSector,
    ];
    let mut writer = Writer::default();
    let full: Vec<u32> = (1..=PAGES).collect();
    writer.transactions.push(Txn {
        truncate_to: None,
        pages: full.clone(),
    });
    writer.transactions.push(Txn {
        truncate_to: Some(5),
        pages: vec![2],
    });
    writer.durable = 2;
    let mut cuts_before_completion = 0;
    for cut in 0.. {
        let seed = cut * 2; // even: `Full` sync, so every commit is durable when acknowledged
        let disk = disk(seed);
        let mut options = options(seed);
        options.auto_checkpoint_frames = 0;
        let (store, _) = PageStore::open_on(disk.as_disk(), DB, options.clone()).unwrap();
        let mut write = store.begin_write().unwrap();
        for &page in &full {
            write.write_page(page, &page_image(1, page)).unwrap();
        }
        write.commit().unwrap();
        store.checkpoint(CheckpointMode::Full).unwrap();
        let mut write = store.begin_write().unwrap();
        write.truncate(5).unwrap();
        write.write_page(2, &page_image(2, 2)).unwrap();
        write.commit().unwrap();
        disk.cut_after(cut);
        let outcome = store.checkpoint(CheckpointMode::Truncate);
        let completed = !disk.is_dead();
        if completed {
            let outcome = outcome.unwrap();
            assert_eq!(outcome.db_file_truncated_to_pages, Some(5));
        }
        disk.kill();
        drop(store);
        disk.crash(modes[cut as usize % modes.len()]);
        let (store, _) = PageStore::open_on(disk.as_disk(), DB, options.clone())
            .unwrap_or_else(|e| panic!("cut {cut}: reopen: {e}"));
        let mut check = Writer {
            transactions: writer.transactions.clone(),
            durable: writer.durable,
            files_cut: 0,
        };
        assert_eq!(check.check(&store, seed), 2, "cut {cut}");
        // Growing back: pages 6..=8 were truncated, so they return as zeros.
        let mut write = store.begin_write().unwrap();
        write.write_page(9, &page_image(3, 9)).unwrap();
        write.commit().unwrap();
        check.transactions.push(Txn {
            truncate_to: None,
            pages: vec![9],
        });
        check.durable = 3;
        store.checkpoint(CheckpointMode::Truncate).unwrap();
        drop(store);
        let (store, _) = PageStore::open_on(disk.as_disk(), DB, options).unwrap();
        assert_eq!(
            check.check(&store, seed),
            3,
            "cut {cut}, after growing back"
        );
        let length = disk.read_file(std::path::Path::new(DB)).unwrap().len();
        assert_eq!(length, 9 * PAGE_BYTES, "cut {cut}");
        if completed {
            break;
        }
        cuts_before_completion += 1;
    }
    // Backfill writes, the truncation, the database fsync, the WAL truncation and its fsync.
    assert!(cuts_before_completion >= 4, "{cuts_before_completion} cuts");
    eprintln!("shrinking truncate checkpoint: cut at each of its {cuts_before_completion} calls");
}
