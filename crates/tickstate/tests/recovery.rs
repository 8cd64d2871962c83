//! Recovery from the image files: the newest verified image wins; a torn or damaged newest image
//! falls back to the older one plus the log; a state-size mismatch is a clear error.

use prefixkv_tickstate::algo::{BitArrayZigzag, InterleavedPingPong, NaiveSnapshot};
use prefixkv_tickstate::image::image_path;
use prefixkv_tickstate::{recover, Algorithm, Config, ImageBase, TickState};
use std::os::unix::fs::FileExt;
use std::time::Duration;

const WORDS: usize = 5000;

fn apply(state: &mut [u64], tick: u64, action: &[u8]) {
    let index = u64::from_le_bytes(action[..8].try_into().unwrap()) as usize;
    state[index] = state[index].wrapping_mul(7).wrapping_add(tick);
}

/// Run `ticks` ticks, waiting for the writer after each so that every tick gets an image.
fn run<A: Algorithm>(dir: &std::path::Path, ticks: u64, logging: bool) -> Vec<u64> {
    run_with::<A>(dir, ticks, logging, ImageBase::CopyFromFile)
}

fn run_with<A: Algorithm>(
    dir: &std::path::Path,
    ticks: u64,
    logging: bool,
    image_base: ImageBase,
) -> Vec<u64> {
    let mut config = Config::new(WORDS);
    config.image_base = image_base;
    if !logging {
        config.log = None;
    }
    let (mut state, _) = TickState::<A>::open(dir, config, apply).unwrap();
    for _ in 0..ticks {
        let tick = state.tick() + 1;
        for k in 0..50u64 {
            let index = ((tick * 131 + k * 17) % WORDS as u64) as usize;
            if logging {
                state.log_action(&(index as u64).to_le_bytes()).unwrap();
            }
            let value = state.read(index).wrapping_mul(7).wrapping_add(tick);
            state.write(index, value);
        }
        state.point_of_consistency(tick).unwrap();
        assert!(state.wait_writer_idle(Duration::from_secs(30)).unwrap());
    }
    let snapshot = (0..WORDS).map(|i| state.read(i)).collect();
    state.close().unwrap();
    snapshot
}

#[test]
fn newest_image_then_log() {
    let dir = tempfile::tempdir().unwrap();
    let expected = run::<InterleavedPingPong>(dir.path(), 20, true);
    let (state, tick, report) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!(tick, 20);
    assert_eq!(report.image_tick, Some(20));
    assert!(state == expected);
    // Reopen with another algorithm, continue, recover again.
    let expected = run::<NaiveSnapshot>(dir.path(), 5, true);
    let (state, tick, _) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!(tick, 25);
    assert!(state == expected);
}

#[test]
fn damaged_newest_image_falls_back_to_older_image_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let expected = run::<BitArrayZigzag>(dir.path(), 9, true);
    let (_, _, report) = recover(dir.path(), WORDS, apply).unwrap();
    let newest = report.image_slot.unwrap();
    // Flip a bit in the newest image's cells: its checksum no longer matches.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(image_path(dir.path(), newest))
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, 100).unwrap();
    file.write_all_at(&[byte[0] ^ 1], 100).unwrap();
    let (state, tick, report) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!(tick, 9);
    assert_eq!(report.image_tick, Some(8), "{report:?}");
    assert_eq!(report.skipped_images.len(), 1);
    assert!(report.skipped_images[0].contains("checksum"), "{report:?}");
    assert!(state == expected);
}

#[test]
fn torn_footer_is_skipped_without_logging_too() {
    let dir = tempfile::tempdir().unwrap();
    let expected = run::<NaiveSnapshot>(dir.path(), 4, false);
    let (state, tick, report) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!((tick, report.image_tick), (4, Some(4)));
    assert!(state == expected);
    let newest = report.image_slot.unwrap();
    let path = image_path(dir.path(), newest);
    let length = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[0u8; 20], length - 20).unwrap();
    let (_, tick, report) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!((tick, report.image_tick), (3, Some(3)), "{report:?}");
    assert!(report.skipped_images[0].contains("footer"), "{report:?}");
}

#[test]
fn wrong_state_size_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    run::<NaiveSnapshot>(dir.path(), 2, false);
    let error = recover(dir.path(), WORDS + 1, apply)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("image-") && error.contains("cells"),
        "{error}"
    );
}

#[test]
fn ticks_must_increase_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let (mut state, _) =
        TickState::<NaiveSnapshot>::open(dir.path(), Config::new(8), apply).unwrap();
    assert!(state.point_of_consistency(2).is_err());
    assert!(state.point_of_consistency(1).is_ok());
}

#[test]
fn merge_in_memory_builds_the_same_images_as_copy() {
    for image_base in [ImageBase::CopyFromFile, ImageBase::MergeInMemory] {
        let dir = tempfile::tempdir().unwrap();
        // No logging: recovery returns exactly the newest image, so it checks the image itself.
        let expected = run_with::<InterleavedPingPong>(dir.path(), 12, false, image_base);
        let (state, tick, report) = recover(dir.path(), WORDS, apply).unwrap();
        assert_eq!((tick, report.image_tick), (12, Some(12)), "{image_base:?}");
        assert!(state == expected, "{image_base:?}");
    }
}

#[test]
fn wait_durable_through_a_tick_leaves_later_ticks_in_flight_or_done() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(WORDS);
    config.writer_cpu = Some(0);
    let (mut state, _) = TickState::<InterleavedPingPong>::open(dir.path(), config, apply).unwrap();
    for tick in 1..=5u64 {
        state.log_action(&tick.to_le_bytes()).unwrap();
        state.write(tick as usize, tick);
        state.point_of_consistency(tick).unwrap();
    }
    let durable = state.wait_durable_through(3).unwrap();
    assert!((3..=5).contains(&durable), "{durable}");
    assert_eq!(state.wait_durable().unwrap(), 5);
    state.close().unwrap();
    let (_, tick, _) = recover(dir.path(), WORDS, apply).unwrap();
    assert_eq!(tick, 5);
}
