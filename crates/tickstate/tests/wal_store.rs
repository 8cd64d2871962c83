//! The WAL-backed image store (`ImageStore::PageStoreWal`).
//!
//! * Trace tests: random writes and points of consistency through a `TickState` whose writer
//!   runs concurrently; whenever the writer is idle, the committed image read back through the
//!   page store must equal the reference copy of the state taken at the image's point of
//!   consistency. Backfill thresholds from "every commit" to "rarely" exercise images read from
//!   WAL frames, from the database file, and from both. `TICKSTATE_TRACE_STEPS` scales them.
//! * Recovery: image + log; a damaged backfilled page is detected by the page checksum table
//!   and reported by name; switching stores in either direction keeps the newest state.
//! * Bytes: Ping-Pong writes only changed pages (fewer bytes than full images); algorithms that
//!   track no changes write every page.

use prefixkv_tickstate::algo::*;
use prefixkv_tickstate::image::ImageCheck;
use prefixkv_tickstate::wal_store::{read_wal_image, store_path, Layout, PAGE_BYTES};
use prefixkv_tickstate::{recover, Algorithm, Config, ImageStore, TickState};
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

/// Trace steps per seed: a quarter of `TICKSTATE_TRACE_STEPS` (default 20 000), since every
/// image here is a committed, fsynced page-store transaction.
fn steps() -> usize {
    std::env::var("TICKSTATE_TRACE_STEPS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(20_000)
        / 4
}

fn wal_config(words: usize, backfill_after_frames: u64, logging: bool) -> Config {
    let mut config = Config::new(words);
    config.image_store = ImageStore::PageStoreWal {
        backfill_after_frames,
    };
    if !logging {
        config.log = None;
    }
    config
}

fn no_actions(_: &mut [u64], _: u64, _: &[u8]) {
    panic!("no actions are logged in this test");
}

fn image_of(dir: &Path, words: usize) -> (u64, Vec<u64>) {
    match read_wal_image(&prefixkv_storage::real_disk(), dir, words).unwrap() {
        ImageCheck::Valid { footer, cells } => (footer.tick, cells),
        other => panic!("no valid image in the WAL store: {other:?}"),
    }
}

fn run_trace<A: Algorithm>(seed: u64, words: usize, backfill_after_frames: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut state, _) = TickState::<A>::open(
        dir.path(),
        wal_config(words, backfill_after_frames, false),
        no_actions,
    )
    .unwrap();
    let mut model = vec![0u64; words];
    // Reference states at the points of consistency whose checkpoint started.
    let mut references: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut checked = 0;
    for _ in 0..steps() {
        match rng.random_range(0..100) {
            0..=84 => {
                // Skewed: rewrites within a period and clean pages between checkpoints.
                let index = if rng.random_bool(0.6) {
                    rng.random_range(0..words.min(16))
                } else {
                    rng.random_range(0..words)
                };
                let value = rng.random();
                state.write(index, value);
                model[index] = value;
            }
            85..=89 => {
                let index = rng.random_range(0..words);
                assert_eq!(
                    state.read(index),
                    model[index],
                    "{:?} read({index})",
                    A::KIND
                );
            }
            _ => {
                if rng.random_bool(0.2) {
                    assert!(state.wait_writer_idle(Duration::from_secs(60)).unwrap());
                    if let Some(tick) = state.checkpointed_tick() {
                        let (image_tick, cells) = image_of(dir.path(), words);
                        assert_eq!(image_tick, tick);
                        let reference = references.get(&tick).expect("reference kept");
                        assert!(
                            &cells == reference,
                            "{:?} seed {seed}: WAL image of tick {tick} differs from the state at its point of consistency",
                            A::KIND
                        );
                        references.retain(|&kept, _| kept >= tick);
                        checked += 1;
                    }
                }
                let tick = state.tick() + 1;
                if state.point_of_consistency(tick).unwrap().checkpoint_started {
                    references.insert(tick, model.clone());
                }
            }
        }
    }
    assert!(state.wait_writer_idle(Duration::from_secs(60)).unwrap());
    let tick = state.checkpointed_tick().unwrap();
    let (image_tick, cells) = image_of(dir.path(), words);
    assert_eq!(image_tick, tick);
    assert!(&cells == references.get(&tick).unwrap());
    assert!(checked > 3, "{:?}: only {checked} images checked", A::KIND);
    state.close().unwrap();
}

fn run_all<A: Algorithm>() {
    // Words not a multiple of a page (512 cells), one page, many pages; backfill after every
    // commit, after a few frames, and after one image's worth (0).
    run_trace::<A>(1, 1, 1);
    run_trace::<A>(2, 700, 3);
    run_trace::<A>(3, 5000, 0);
    run_trace::<A>(4, 20_000, 7);
}

#[test]
fn interleaved_ping_pong_wal_traces() {
    run_all::<InterleavedPingPong>();
}

#[test]
fn naive_ping_pong_wal_traces() {
    run_all::<NaivePingPong>();
}

#[test]
fn naive_snapshot_wal_traces() {
    run_all::<NaiveSnapshot>();
}

#[test]
fn bit_array_zigzag_wal_traces() {
    run_all::<BitArrayZigzag>();
}

#[test]
fn bit_array_copy_on_update_wal_traces() {
    run_all::<BitArrayCopyOnUpdate>();
}

const WORDS: usize = 5000;

fn apply(state: &mut [u64], tick: u64, action: &[u8]) {
    let index = u64::from_le_bytes(action[..8].try_into().unwrap()) as usize;
    state[index] = state[index].wrapping_mul(7).wrapping_add(tick);
}

/// Run `ticks` logged ticks with `config`, waiting for the writer after each.
fn run<A: Algorithm>(
    dir: &Path,
    ticks: u64,
    config: Config,
) -> (Vec<u64>, prefixkv_tickstate::Stats) {
    let logging = config.log.is_some();
    let words = config.words;
    let (mut state, _) = TickState::<A>::open(dir, config, apply).unwrap();
    for _ in 0..ticks {
        let tick = state.tick() + 1;
        for k in 0..20u64 {
            // A few hot pages: Ping-Pong's images change only a few pages each.
            let index = ((tick * 131 + k * 17) % 600) as usize;
            if logging {
                state.log_action(&(index as u64).to_le_bytes()).unwrap();
            }
            let value = state.read(index).wrapping_mul(7).wrapping_add(tick);
            state.write(index, value);
        }
        state.point_of_consistency(tick).unwrap();
        assert!(state.wait_writer_idle(Duration::from_secs(30)).unwrap());
    }
    let snapshot = (0..words).map(|i| state.read(i)).collect();
    let stats = state.stats();
    state.close().unwrap();
    (snapshot, stats)
}

#[test]
fn newest_wal_image_then_log_and_store_switches() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, _) = run::<InterleavedPingPong>(dir.path(), 15, wal_config(WORDS, 0, true));
    let (state, tick, report) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!(tick, 15);
    assert_eq!(report.image_tick, Some(15));
    assert!(report.image_from_wal_store, "{report:?}");
    assert!(state == expected);
    // Continue with double-backup files: their images are newer and win.
    let (expected, _) = run::<NaiveSnapshot>(dir.path(), 4, Config::new(WORDS));
    let (state, tick, report) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!((tick, report.image_tick), (19, Some(19)));
    assert!(!report.image_from_wal_store, "{report:?}");
    assert!(state == expected);
    // And back to the WAL store, whose old image is now stale: the newest tick still wins.
    let (expected, _) = run::<NaivePingPong>(dir.path(), 3, wal_config(WORDS, 2, true));
    let (state, tick, report) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!((tick, report.image_tick), (22, Some(22)));
    assert!(report.image_from_wal_store, "{report:?}");
    assert!(state == expected);
}

#[test]
fn damaged_backfilled_page_is_detected_and_named() {
    let dir = tempfile::tempdir().unwrap();
    // Backfill after every commit, so the image is in the database file, whose pages have no
    // WAL checksum: only the image's own page table can catch the damage.
    run::<InterleavedPingPong>(dir.path(), 6, wal_config(WORDS, 1, false));
    let layout = Layout::new(WORDS).unwrap();
    let offset = ((1 + layout.table_pages + 3) * PAGE_BYTES + 40) as u64;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(store_path(dir.path()))
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, offset).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], offset).unwrap();
    drop(file);
    match read_wal_image(&prefixkv_storage::real_disk(), dir.path(), WORDS).unwrap() {
        ImageCheck::Invalid(reason) => {
            assert!(
                reason.contains("data page 3") && reason.contains("image.pkvpages"),
                "{reason}"
            )
        }
        other => panic!("damage not detected: {other:?}"),
    }
    // Without logging there is nothing else to recover from: recovery reports the skip and
    // returns the empty state at tick 0 rather than the damaged image.
    let (state, tick, report) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!(tick, 0);
    assert!(state.iter().all(|&cell| cell == 0));
    assert_eq!(report.skipped_images.len(), 1, "{report:?}");
}

#[test]
fn wrong_state_size_is_an_error_naming_the_store() {
    let dir = tempfile::tempdir().unwrap();
    run::<NaiveSnapshot>(dir.path(), 2, wal_config(WORDS, 0, false));
    let error = recover(dir.path(), WORDS + 1, apply)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("image.pkvpages") && error.contains("cells"),
        "{error}"
    );
}

#[test]
fn ping_pong_writes_only_changed_pages() {
    let ticks = 12;
    let words = 100 * 512;
    let dir = tempfile::tempdir().unwrap();
    let (_, wal) = run::<InterleavedPingPong>(dir.path(), ticks, wal_config(words, 1, true));
    let full_image_bytes = (words * 8) as u64;
    // 20 writes per tick into the first 600 cells (2 pages): after the first full image each
    // commit holds at most 2 data pages + 1 table page + the header.
    assert!(
        wal.image_bytes_written < 2 * full_image_bytes + ticks * 8 * (PAGE_BYTES as u64 + 24),
        "WAL store wrote {} bytes for {ticks} images of {full_image_bytes} bytes",
        wal.image_bytes_written,
    );
    assert_eq!(
        wal.image_bytes_written,
        wal.wal_frame_bytes_written + wal.backfill_bytes_written
    );
    assert!(wal.backfill_bytes_written > 0);
    let dir = tempfile::tempdir().unwrap();
    let (_, snapshot) = run::<NaiveSnapshot>(dir.path(), ticks, wal_config(words, 1, true));
    assert!(snapshot.wal_frame_bytes_written >= ticks * full_image_bytes);
}
