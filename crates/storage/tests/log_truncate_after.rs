//! Suffix truncation of the log (`truncate_after`, what Raft's log needs for conflicting
//! entries): across segment boundaries, with appends queued meanwhile, durable before it returns
//! (power cuts right after it), and a power cut in the middle leaves a dense log.

use prefixkv_storage::log::{BackendChoice, Log, LogConfig, SyncPolicy};
use prefixkv_storage::{CrashMode, SimDisk};
use std::path::Path;

fn config(policy: SyncPolicy) -> LogConfig {
    LogConfig {
        policy,
        segment_bytes: 4096,
        backend: BackendChoice::Auto,
        ..LogConfig::default()
    }
}

fn payload(tag: u64, lsn: u64) -> Vec<u8> {
    format!("{tag}:{lsn}:")
        .repeat(1 + (lsn % 9) as usize)
        .into_bytes()
}

fn append(log: &Log, tag: u64, lsns: std::ops::RangeInclusive<u64>) {
    for lsn in lsns {
        assert_eq!(log.append(&payload(tag, lsn)).unwrap().wait().unwrap(), lsn);
    }
}

fn replay(log: &Log) -> Vec<(u64, Vec<u8>)> {
    log.replay(log.oldest_lsn())
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn expected(parts: &[(u64, std::ops::RangeInclusive<u64>)]) -> Vec<(u64, Vec<u8>)> {
    parts
        .iter()
        .flat_map(|(tag, lsns)| lsns.clone().map(|lsn| (lsn, payload(*tag, lsn))))
        .collect()
}

#[test]
fn truncate_after_cuts_across_segments_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(dir.path(), config(SyncPolicy::Always)).unwrap();
    append(&log, 0, 1..=300);
    let segments = log.segment_paths().len();
    assert!(segments >= 4, "{segments} segments");
    let report = log.truncate_after(40).unwrap();
    assert_eq!(report.records_removed, 260);
    assert!(report.segments_deleted >= 2);
    assert_eq!((log.next_lsn(), log.durable_lsn()), (41, 40));
    append(&log, 1, 41..=60);
    assert_eq!(replay(&log), expected(&[(0, 1..=40), (1, 41..=60)]));
    // Everything removed: the log starts over at the oldest LSN.
    log.truncate_after(0).unwrap();
    append(&log, 2, 1..=5);
    log.close().unwrap();
    let (log, report) = Log::open(dir.path(), config(SyncPolicy::Always)).unwrap();
    assert!(report.torn_tail.is_none());
    assert_eq!(replay(&log), expected(&[(2, 1..=5)]));
    // Behind a prefix truncation, the oldest retained LSN bounds it.
    append(&log, 2, 6..=400);
    log.truncate_through(200).unwrap();
    let oldest = log.oldest_lsn();
    assert!(oldest > 1);
    assert!(log.truncate_after(oldest - 2).is_err());
    log.truncate_after(oldest - 1).unwrap();
    assert_eq!(log.next_lsn(), oldest);
}

#[test]
fn truncate_after_is_durable_when_it_returns_and_dense_when_cut_midway() {
    for seed in 0..300u64 {
        let disk = SimDisk::new(seed);
        let dir = Path::new("/log");
        let policy =
            [SyncPolicy::Always, SyncPolicy::EverySec, SyncPolicy::None][seed as usize % 3];
        let (log, _) = Log::open_on(disk.as_disk(), dir, config(policy)).unwrap();
        append(&log, 0, 1..=120);
        log.flush_and_sync().unwrap();
        disk.cut_after(seed % 12);
        let truncated = log.truncate_after(30).is_ok();
        drop(log);
        disk.crash(CrashMode::Random);
        let (log, _) = Log::open_on(disk.as_disk(), dir, config(policy))
            .unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
        let records = replay(&log);
        if truncated {
            assert_eq!(records, expected(&[(0, 1..=30)]), "seed {seed}");
        } else {
            let last = records.last().map_or(0, |r| r.0);
            assert!(
                last >= 30,
                "seed {seed}: cut below the truncation point: {last}"
            );
            assert_eq!(
                records,
                expected(&[(0, 1..=last)]),
                "seed {seed}: not dense"
            );
        }
    }
}
