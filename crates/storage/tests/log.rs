//! Behaviour of an open log: appends, replay, segments, truncation, policies, tickets, recovery
//! from torn tails and corruption. No test sleeps or times anything.

use prefixkv_storage::log::format::{FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use prefixkv_storage::log::{BackendChoice, BackendKind, Log, LogConfig, LogError, SyncPolicy};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

fn payload(lsn_hint: u64) -> Vec<u8> {
    format!("record-{lsn_hint:08}-")
        .repeat(1 + (lsn_hint % 7) as usize)
        .into_bytes()
}

fn config(backend: BackendChoice) -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        backend,
        ..LogConfig::default()
    }
}

fn replay_all(log: &Log, from: u64) -> Vec<(u64, Vec<u8>)> {
    log.replay(from).unwrap().map(|r| r.unwrap()).collect()
}

fn append_n(log: &Log, range: std::ops::Range<u64>) {
    for i in range {
        let lsn = log.append(&payload(i)).unwrap().wait().unwrap();
        assert_eq!(lsn, i);
    }
}

fn round_trip_on(backend: BackendChoice) -> Option<BackendKind> {
    let dir = tempfile::tempdir().unwrap();
    let (log, report) = match Log::open(dir.path(), config(backend)) {
        Ok(opened) => opened,
        Err(LogError::BackendUnavailable(why)) => {
            // Fails unless PREFIXKV_TEST_ALLOW_SKIP lists io_uring: an untested backend is not
            // a passed test.
            prefixkv_testkit::skip::unavailable("io_uring", &why);
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(report.next_lsn, 1);
    append_n(&log, 1..301);
    assert_eq!(log.durable_lsn(), 300);
    let records = replay_all(&log, 1);
    assert_eq!(records.len(), 300);
    for (lsn, bytes) in &records {
        assert_eq!(bytes, &payload(*lsn));
    }
    assert!(
        log.segment_paths().len() > 1,
        "4 KiB segments must have rolled"
    );
    let kind = log.backend();
    log.close().unwrap();
    let (log, report) = Log::open(dir.path(), config(backend)).unwrap();
    assert_eq!(
        (report.records, report.next_lsn, report.torn_tail),
        (300, 301, None)
    );
    assert_eq!(replay_all(&log, 123).first().map(|r| r.0), Some(123));
    Some(kind)
}

#[test]
fn round_trip_with_pwritev() {
    assert_eq!(
        round_trip_on(BackendChoice::Pwritev),
        Some(BackendKind::Pwritev)
    );
}

#[test]
fn round_trip_with_io_uring() {
    if let Some(kind) = round_trip_on(BackendChoice::IoUring) {
        assert_eq!(kind, BackendKind::IoUring);
    }
}

#[test]
fn auto_backend_opens() {
    assert!(round_trip_on(BackendChoice::Auto).is_some());
}

#[test]
fn truncation_deletes_whole_segments_only() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    append_n(&log, 1..501);
    let before = log.segment_paths().len();
    let report = log.truncate_through(250).unwrap();
    assert!(
        report.segments_deleted > 0 && report.oldest_lsn <= 251,
        "{report:?}"
    );
    assert_eq!(log.segment_paths().len(), before - report.segments_deleted);
    // Everything above 250 is still replayable; what was deleted is reported, not skipped.
    let oldest = log.oldest_lsn();
    assert_eq!(oldest, report.oldest_lsn);
    let records = replay_all(&log, 251);
    assert_eq!(records.first().unwrap().0, 251);
    assert_eq!(records.len(), 250);
    match log.replay(oldest - 1) {
        Err(LogError::Truncated {
            requested,
            oldest_retained,
        }) => {
            assert_eq!((requested, oldest_retained), (oldest - 1, oldest))
        }
        other => panic!("expected Truncated, got {other:?}"),
    }
    // Truncating everything keeps the active segment.
    log.truncate_through(10_000).unwrap();
    assert_eq!(log.segment_paths().len(), 1);
    append_n(&log, 501..511);
    log.close().unwrap();
    let (log, report) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    assert_eq!(report.next_lsn, 511);
    let records = replay_all(&log, report.oldest_lsn);
    assert_eq!(records.last().unwrap(), &(510, payload(510)));
}

fn last_segment(dir: &Path) -> std::path::PathBuf {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "oplog"))
        .collect();
    paths.sort();
    paths.pop().unwrap()
}

#[test]
fn torn_tail_is_dropped_reported_and_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    append_n(&log, 1..11);
    log.close().unwrap();
    let segment = last_segment(dir.path());
    let valid = std::fs::metadata(&segment).unwrap().len();
    // Half of a frame for LSN 11: a full header promising 100 bytes, then 30 of them.
    let mut frame = Vec::new();
    prefixkv_storage::log::format::encode_frame(11, &[9u8; 100], &mut frame);
    OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap()
        .write_all(&frame[..46])
        .unwrap();

    let (log, report) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    let torn = report.torn_tail.expect("torn tail reported");
    assert_eq!(
        (torn.segment.as_path(), torn.offset, torn.bytes_dropped),
        (segment.as_path(), valid, 46)
    );
    assert_eq!(
        std::fs::metadata(&segment).unwrap().len(),
        valid,
        "file cut before new appends"
    );
    assert_eq!(report.next_lsn, 11);
    append_n(&log, 11..21);
    log.close().unwrap();
    let (log, report) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    assert!(report.torn_tail.is_none());
    assert_eq!(replay_all(&log, 1).len(), 20);
}

#[test]
fn torn_segment_header_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    append_n(&log, 1..6);
    log.close().unwrap();
    // A crash while rolling: the new segment has half a header.
    let name = prefixkv_storage::log::format::segment_file_name(6);
    let header = prefixkv_storage::log::format::encode_segment_header(6);
    std::fs::write(dir.path().join(&name), &header[..20]).unwrap();
    let (log, report) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    let torn = report.torn_tail.unwrap();
    assert_eq!((torn.offset, torn.bytes_dropped), (0, 20));
    append_n(&log, 6..9);
    assert_eq!(replay_all(&log, 1).len(), 8);
}

/// Builds a log of several segments and returns (dir, paths, records).
fn multi_segment_log() -> (tempfile::TempDir, Vec<std::path::PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    append_n(&log, 1..201);
    let paths = log.segment_paths();
    assert!(paths.len() >= 3);
    log.close().unwrap();
    (dir, paths)
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn corruption_in_an_earlier_segment_is_an_error_naming_file_and_offset() {
    let (dir, paths) = multi_segment_log();
    // Payload byte of the second frame of the first segment.
    let first_frame = (FRAME_HEADER_BYTES + payload(1).len()) as u64;
    let offset = SEGMENT_HEADER_BYTES as u64 + first_frame;
    flip_byte(&paths[0], offset + FRAME_HEADER_BYTES as u64 + 3);
    match Log::open(dir.path(), config(BackendChoice::Pwritev)) {
        Err(LogError::Corrupt {
            path,
            offset: at,
            reason,
        }) => {
            assert_eq!((path.as_path(), at), (paths[0].as_path(), offset));
            assert!(reason.contains("CRC32C"), "{reason}");
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|(_, r)| r)),
    }
    // Existing data is intact after the failed open.
    assert!(paths.iter().all(|p| p.exists()));

    let (log, report) = Log::open(
        dir.path(),
        LogConfig {
            repair: true,
            ..config(BackendChoice::Pwritev)
        },
    )
    .unwrap();
    let repair = report.repair.expect("repair reported");
    assert_eq!(
        (repair.segment.as_path(), repair.offset),
        (paths[0].as_path(), offset)
    );
    assert_eq!(repair.segments_deleted, paths[1..].to_vec());
    assert_eq!(report.next_lsn, 2);
    append_n(&log, 2..5);
    assert_eq!(replay_all(&log, 1).len(), 4);
}

/// A damaged frame followed by intact ones in the *last* segment is what a power cut leaves when
/// unsynced sectors reach the disk out of order, *if* the damage is lost sectors (fresh space
/// reads back as zeros): then it is a torn tail (point-in-time recovery), reported with
/// `intact_frame_after`. An earlier segment was synced at its roll, so there the same damage is
/// corruption (the test above).
#[test]
fn lost_sectors_inside_the_last_segment_followed_by_valid_records_are_a_reported_torn_tail() {
    let (dir, paths) = multi_segment_log();
    let last = paths.last().unwrap();
    // Find the first frame that crosses a 512-byte sector boundary, and lose the sectors from
    // that boundary to the frame's end, as a power cut does to a write that was cut short.
    let mut bytes = std::fs::read(last).unwrap();
    let mut offset = SEGMENT_HEADER_BYTES;
    let (boundary, frame_end) = loop {
        let length = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
        let frame_end = offset + FRAME_HEADER_BYTES + length;
        assert!(
            frame_end < bytes.len(),
            "some frame crosses a sector boundary"
        );
        let boundary = (offset / 512 + 1) * 512;
        if boundary < frame_end {
            break (boundary, frame_end);
        }
        offset = frame_end;
    };
    bytes[boundary..frame_end].fill(0);
    std::fs::write(last, bytes).unwrap();
    let offset = offset as u64;
    let (log, report) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    let torn = report.torn_tail.expect("reported");
    assert_eq!(
        (torn.segment.as_path(), torn.offset),
        (last.as_path(), offset)
    );
    assert!(torn.intact_frame_after, "the intact successor is reported");
    assert_eq!(
        std::fs::metadata(last).unwrap().len(),
        offset,
        "cut there, synced"
    );
    let first_of_last = report.next_lsn;
    append_n(&log, first_of_last..first_of_last + 3);
}

/// A changed byte (not a lost sector) in the last segment with intact records after it is
/// corruption: dropping the tail would silently discard records that reached the disk whole.
#[test]
fn a_changed_byte_inside_the_last_segment_followed_by_valid_records_is_an_error() {
    let (dir, paths) = multi_segment_log();
    let last = paths.last().unwrap();
    let offset = SEGMENT_HEADER_BYTES as u64;
    let length_before = std::fs::metadata(last).unwrap().len();
    flip_byte(last, offset + FRAME_HEADER_BYTES as u64); // first payload byte of the first record
    match Log::open(dir.path(), config(BackendChoice::Pwritev)) {
        Err(LogError::Corrupt {
            path,
            offset: at,
            reason,
        }) => {
            assert_eq!((path.as_path(), at), (last.as_path(), offset));
            assert!(reason.contains("corruption, not a torn write"), "{reason}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(
        std::fs::metadata(last).unwrap().len(),
        length_before,
        "nothing was cut"
    );
}

#[test]
fn oversized_length_field_is_corruption_not_an_allocation() {
    let (dir, paths) = multi_segment_log();
    let offset = SEGMENT_HEADER_BYTES as u64;
    let mut bytes = std::fs::read(&paths[1]).unwrap();
    bytes[offset as usize..offset as usize + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&paths[1], bytes).unwrap();
    match Log::open(dir.path(), config(BackendChoice::Pwritev)) {
        Err(LogError::Corrupt {
            path,
            offset: at,
            reason,
        }) => {
            assert_eq!((path.as_path(), at), (paths[1].as_path(), offset));
            assert!(reason.contains("max record size"), "{reason}");
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|(_, r)| r)),
    }
}

#[test]
fn missing_middle_segment_is_reported() {
    let (dir, paths) = multi_segment_log();
    std::fs::remove_file(&paths[1]).unwrap();
    match Log::open(dir.path(), config(BackendChoice::Pwritev)) {
        Err(LogError::Inconsistent { reason, .. }) => {
            assert!(reason.contains("missing"), "{reason}")
        }
        other => panic!("expected Inconsistent, got {:?}", other.map(|(_, r)| r)),
    }
}

#[test]
fn everysec_and_none_complete_on_write_and_flush_makes_durable() {
    for policy in [SyncPolicy::EverySec, SyncPolicy::None] {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = Log::open(
            dir.path(),
            LogConfig {
                policy,
                ..config(BackendChoice::Auto)
            },
        )
        .unwrap();
        let tickets: Vec<_> = (1..=50).map(|i| log.append(&payload(i)).unwrap()).collect();
        for (i, ticket) in tickets.iter().enumerate() {
            assert_eq!(ticket.wait().unwrap(), i as u64 + 1);
        }
        assert!(log.written_lsn() >= 50);
        assert_eq!(log.flush_and_sync().unwrap(), 50);
        assert!(log.durable_lsn() >= 50);
        assert_eq!(replay_all(&log, 1).len(), 50);
    }
}

#[test]
fn record_too_large_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(
        dir.path(),
        LogConfig {
            max_record_bytes: 64,
            ..config(BackendChoice::Pwritev)
        },
    )
    .unwrap();
    assert!(matches!(
        log.append(&[0u8; 65]),
        Err(LogError::RecordTooLarge { bytes: 65, .. })
    ));
    assert_eq!(log.append(&[0u8; 64]).unwrap().wait().unwrap(), 1);
}

#[test]
fn back_pressure_with_a_tiny_queue_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(
        dir.path(),
        LogConfig {
            queue_capacity_bytes: 300,
            ..config(BackendChoice::Auto)
        },
    )
    .unwrap();
    let threads = 8;
    let per_thread = 60;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let log = &log;
            scope.spawn(move || {
                for i in 0..per_thread {
                    let body = format!("t{t}-i{i}");
                    let lsn = log.append(body.as_bytes()).unwrap().wait().unwrap();
                    assert!(lsn >= 1);
                }
            });
        }
    });
    let records = replay_all(&log, 1);
    assert_eq!(records.len(), threads * per_thread);
    let mut bodies: Vec<_> = records
        .iter()
        .map(|(_, b)| String::from_utf8(b.clone()).unwrap())
        .collect();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), threads * per_thread);
    // A record bigger than the whole queue still goes through alone.
    assert!(log.append(&[1u8; 1000]).unwrap().wait().is_ok());
}

/// A minimal executor: polls the future, parking the thread between wake-ups.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct ThreadWaker(std::thread::Thread);
    impl std::task::Wake for ThreadWaker {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(ThreadWaker(std::thread::current())));
    let mut context = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

#[test]
fn tickets_work_as_futures_and_callbacks() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), config(BackendChoice::Auto)).unwrap();
    let ticket = log.append(b"as a future").unwrap();
    assert_eq!(block_on(ticket).unwrap(), 1);
    let (sender, receiver) = mpsc::channel();
    let lsn = log
        .append_with_callback(
            b"with a callback",
            Box::new(move |result| sender.send(result).unwrap()),
        )
        .unwrap();
    let fired = receiver
        .recv_timeout(Duration::from_secs(30))
        .expect("callback fired")
        .unwrap();
    assert_eq!((lsn, fired), (2, 2));
    assert!(
        log.durable_lsn() >= 2,
        "always: callback fires after the sync"
    );
}

#[test]
fn replay_while_appending_sees_a_consistent_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), config(BackendChoice::Auto)).unwrap();
    std::thread::scope(|scope| {
        let log = &log;
        scope.spawn(move || append_n(log, 1..401));
        for _ in 0..20 {
            let records = replay_all(log, 1);
            for (i, (lsn, bytes)) in records.iter().enumerate() {
                assert_eq!(*lsn, i as u64 + 1);
                assert_eq!(bytes, &payload(*lsn));
            }
        }
    });
}

#[test]
fn a_second_handle_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    match Log::open(dir.path(), config(BackendChoice::Pwritev)) {
        Err(LogError::Locked { dir: locked }) => assert_eq!(locked, dir.path()),
        other => panic!("expected Locked, got {:?}", other.map(|(_, r)| r)),
    }
    log.close().unwrap();
    let (log, report) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    assert_eq!(report.next_lsn, 1);
    drop(log);
}

/// A crash can cut the last group anywhere: every cut point inside the last three frames is
/// recovered as the prefix of whole frames, reported as a torn tail unless it falls on a frame
/// boundary; so is a tail of zeros (a file extended but never written).
#[test]
fn every_cut_point_of_the_tail_recovers_the_whole_frame_prefix() {
    let source = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(source.path(), config(BackendChoice::Pwritev)).unwrap();
    append_n(&log, 1..11);
    log.close().unwrap();
    let segment_name = last_segment(source.path()).file_name().unwrap().to_owned();
    let full = std::fs::read(source.path().join(&segment_name)).unwrap();
    // Frame boundaries of the last segment.
    let mut boundaries = vec![SEGMENT_HEADER_BYTES as u64];
    let image = prefixkv_storage::log::format::decode_segment_image(&full, 1 << 20).unwrap();
    for (_, payload) in &image.records {
        let last = *boundaries.last().unwrap();
        boundaries.push(last + (FRAME_HEADER_BYTES + payload.len()) as u64);
    }
    let first_in_segment = image.first_lsn;
    let start = boundaries[boundaries.len().saturating_sub(4)];
    for cut in start..=full.len() as u64 {
        let dir = tempfile::tempdir().unwrap();
        prefixkv_testkit::fs::copy_dir(source.path(), dir.path()).unwrap();
        let path = dir.path().join(&segment_name);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let (log, report) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
        let whole = boundaries.iter().filter(|&&b| b <= cut).count() as u64 - 1;
        let boundary = boundaries[whole as usize];
        assert_eq!(report.next_lsn, first_in_segment + whole, "cut at {cut}");
        match report.torn_tail {
            None => assert_eq!(boundary, cut),
            Some(torn) => assert_eq!(
                (torn.offset, torn.bytes_dropped),
                (boundary, cut - boundary)
            ),
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), boundary);
        let next = report.next_lsn;
        assert_eq!(log.append(&payload(next)).unwrap().wait().unwrap(), next);
    }
    // Zeros after the valid data.
    let dir = tempfile::tempdir().unwrap();
    prefixkv_testkit::fs::copy_dir(source.path(), dir.path()).unwrap();
    let path = dir.path().join(&segment_name);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&[0u8; 700])
        .unwrap();
    let (_log, report) = Log::open(dir.path(), config(BackendChoice::Pwritev)).unwrap();
    let torn = report.torn_tail.expect("zero tail is torn");
    assert_eq!((torn.offset, torn.bytes_dropped), (full.len() as u64, 700));
    assert_eq!(report.next_lsn, 11);
}
