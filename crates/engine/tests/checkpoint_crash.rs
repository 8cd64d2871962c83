//! Crash test of checkpoint publishing with real processes.
//!
//! The parent re-executes this test binary in "child mode" (environment variable
//! `PREFIXKV_CHECKPOINT_CRASH_CHILD` = checkpoint root). The child writes checkpoints in a loop,
//! each one's content a pure function of its version, prunes to two, and prints progress lines
//! (`begin N`, `segment N I`, `publishing N`, `published N`, `pruned N`) to its stdout pipe. The
//! parent picks a random progress line, waits for it (bounded), lets a random short spin pass so the
//! kill lands anywhere in the following work (mid-segment-write, between fsyncs, around the rename,
//! mid-prune), and SIGKILLs the child. Then it recovers and checks:
//! - a checkpoint is found once any was reported published, with no fallback;
//! - its version is the newest reported `published N`, or N + 1 (renamed, but killed before it
//!   could print the line);
//! - its MANIFEST and every entry equal exactly the deterministic content of that version.
//!
//! `PREFIXKV_CRASH_ITERATIONS` (default 30) and `PREFIXKV_CRASH_SEED` tune the run.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use prefixkv_engine::checkpoint_files::{
    CheckpointDirectory, Entry, ManifestContent, ManifestKind,
};

const CHILD_ENV: &str = "PREFIXKV_CHECKPOINT_CRASH_CHILD";
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn kind_of(version: u64) -> ManifestKind {
    if version.is_multiple_of(2) {
        ManifestKind::KeyUnique
    } else {
        ManifestKind::LogOrdered
    }
}

fn content_of(version: u64) -> ManifestContent {
    ManifestContent {
        version,
        strategy: if version.is_multiple_of(2) {
            "persian".into()
        } else {
            "fold-over".into()
        },
        kind: kind_of(version),
        session_points: vec![(1, version * 100), (2, version * 100 + 7)],
        next_session_id: 3,
        created_unix_ms: version,
        cookie: version.to_le_bytes().to_vec(),
        tier: None,
    }
}

/// The segments of checkpoint `version`: 1 to 3 segments, a few hundred entries each, and one
/// value of over 1 MiB in segment 0 so that some kills land in the middle of a large write.
fn segments_of(version: u64) -> Vec<Vec<Entry>> {
    let segment_count = 1 + (mix64(version) % 3) as usize;
    (0..segment_count)
        .map(|segment| {
            let entry_count = 50 + mix64(version ^ ((segment as u64) << 32)) % 400;
            (0..entry_count)
                .map(|i| {
                    let hash =
                        mix64(version.wrapping_mul(1_000_003) ^ ((segment as u64) << 40) ^ i);
                    let tombstone =
                        kind_of(version) == ManifestKind::LogOrdered && hash.is_multiple_of(7);
                    let value_bytes = if segment == 0 && i == 10 {
                        (1 << 20) + 12_345
                    } else {
                        (hash % 300) as usize
                    };
                    Entry {
                        tombstone,
                        record_version: version - (hash % 2).min(version - 1),
                        key: format!("key-{segment}-{i}").into_bytes(),
                        value: if tombstone {
                            Vec::new()
                        } else {
                            (0..value_bytes).map(|b| (hash >> (b % 56)) as u8).collect()
                        },
                    }
                })
                .collect()
        })
        .collect()
}

fn child_main(root: &Path) -> ! {
    let directory = CheckpointDirectory::open(root).expect("child opens the checkpoint root");
    let first_version = directory.newest_published_version().unwrap_or(0) + 1;
    let stdout = std::io::stdout();
    let report = |line: String| {
        let mut out = stdout.lock();
        // The parent reads these lines; if it is gone there is no one to write for.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            std::process::exit(0);
        }
    };
    // Bounded so that an orphaned child cannot run forever.
    for version in first_version..first_version + 100_000 {
        report(format!("begin {version}"));
        let pending = directory.begin(version).expect("begin");
        let segments = segments_of(version);
        let summaries = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for (index, entries) in segments.iter().enumerate() {
                let pending = &pending;
                let summaries = &summaries;
                let report = &report;
                scope.spawn(move || {
                    let mut writer = pending.segment_writer(index as u32).expect("writer");
                    for entry in entries {
                        if entry.tombstone {
                            writer
                                .tombstone(entry.record_version, &entry.key)
                                .expect("tombstone");
                        } else {
                            writer
                                .put(entry.record_version, &entry.key, &entry.value)
                                .expect("put");
                        }
                    }
                    summaries
                        .lock()
                        .unwrap()
                        .push(writer.finish().expect("finish").0);
                    report(format!("segment {version} {index}"));
                });
            }
        });
        report(format!("publishing {version}"));
        pending
            .publish(content_of(version), summaries.into_inner().unwrap())
            .expect("publish");
        report(format!("published {version}"));
        directory.prune(2).expect("prune");
        report(format!("pruned {version}"));
    }
    std::process::exit(0);
}

fn entry_of(entry: prefixkv_engine::checkpoint_files::EntryRef<'_>) -> Entry {
    Entry {
        tombstone: entry.tombstone,
        record_version: entry.record_version,
        key: entry.key.to_vec(),
        value: entry.value.to_vec(),
    }
}

/// Recovers after a kill and checks the result; returns the recovered version and how many
/// unfinished directories the open removed.
fn check_recovered(
    root: &Path,
    newest_reported: Option<u64>,
    iteration: u32,
) -> (Option<u64>, usize) {
    let directory = CheckpointDirectory::open(root).expect("open after crash");
    let stale = directory.removed_stale().len();
    let selected = directory
        .select_for_recovery()
        .expect("recovery never fails after a SIGKILL");
    let Some(checkpoint) = selected else {
        assert_eq!(
            newest_reported, None,
            "iteration {iteration}: a reported checkpoint vanished"
        );
        return (None, stale);
    };
    let version = checkpoint.version();
    assert!(
        checkpoint.fell_back().is_none(),
        "iteration {iteration}: {:?}",
        checkpoint.fell_back()
    );
    let allowed: BTreeSet<u64> = match newest_reported {
        Some(reported) => [reported, reported + 1].into(),
        None => [1].into(),
    };
    assert!(
        allowed.contains(&version),
        "iteration {iteration}: recovered v{version}, newest reported published {newest_reported:?}"
    );
    assert_eq!(
        checkpoint.manifest().content,
        content_of(version),
        "iteration {iteration}"
    );
    let expected = segments_of(version);
    match kind_of(version) {
        ManifestKind::LogOrdered => {
            let mut loaded = Vec::new();
            checkpoint
                .load_in_order(&mut |entry| {
                    loaded.push(entry_of(entry));
                    Ok(())
                })
                .expect("load in order");
            assert!(
                loaded == expected.concat(),
                "iteration {iteration}: v{version} content differs"
            );
        }
        ManifestKind::KeyUnique => {
            let loaded = Mutex::new(Vec::new());
            checkpoint
                .load_parallel(2, &|entry| {
                    loaded.lock().unwrap().push(entry_of(entry));
                    Ok(())
                })
                .expect("load in parallel");
            let mut loaded = loaded.into_inner().unwrap();
            let mut expected = expected.concat();
            loaded.sort_by(|a, b| a.key.cmp(&b.key));
            expected.sort_by(|a, b| a.key.cmp(&b.key));
            assert!(
                loaded == expected,
                "iteration {iteration}: v{version} content differs"
            );
        }
        ManifestKind::LogDelta { .. } | ManifestKind::Incremental => {
            unreachable!("this test writes no deltas and no incremental checkpoints")
        }
    }
    (Some(version), stale)
}

#[test]
fn publish_survives_sigkill_at_random_points() {
    if let Some(root) = std::env::var_os(CHILD_ENV) {
        child_main(Path::new(&root));
    }
    let iterations: u32 = std::env::var("PREFIXKV_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let mut random: u64 = std::env::var("PREFIXKV_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED);
    let mut next_random = move |bound: u64| {
        random = mix64(random);
        random % bound
    };
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("checkpoints");
    let executable = std::env::current_exe().unwrap();
    let mut newest_reported: Option<u64> = None;
    let mut recovered_versions = BTreeSet::new();
    let mut stale_directories_removed = 0;
    let mut published_but_unreported = 0;
    for iteration in 0..iterations {
        let mut child = Command::new(&executable)
            .args([
                "--exact",
                "publish_survives_sigkill_at_random_points",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &root)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let (sender, receiver) = mpsc::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let note = |line: &str, newest: &mut Option<u64>| {
            if let Some(version) = line.strip_prefix("published ") {
                let version: u64 = version.parse().unwrap();
                *newest = Some(newest.map_or(version, |n| n.max(version)));
            }
        };
        // Kill after the target-th progress line (a checkpoint makes 4 to 6 of them) plus a spin.
        let target = 1 + next_random(14);
        let mut lines_seen = 0;
        while lines_seen < target {
            let line = receiver.recv_timeout(LINE_TIMEOUT).unwrap_or_else(|error| {
                panic!("iteration {iteration}: child stopped reporting ({error}); see its stderr")
            });
            if line.starts_with("begin ")
                || line.starts_with("segment ")
                || line.starts_with("publish")
                || line.starts_with("pruned ")
            {
                lines_seen += 1;
                note(&line, &mut newest_reported);
            }
        }
        for _ in 0..next_random(300_000) {
            std::hint::spin_loop();
        }
        child.kill().expect("SIGKILL the child");
        let status = child.wait().expect("reap the child");
        assert!(
            !status.success(),
            "iteration {iteration}: the child was expected to die by the signal"
        );
        // Everything the child printed before it died, up to end of file.
        while let Ok(line) = receiver.recv_timeout(LINE_TIMEOUT) {
            note(&line, &mut newest_reported);
        }
        reader.join().unwrap();
        let (recovered, stale) = check_recovered(&root, newest_reported, iteration);
        stale_directories_removed += stale;
        if let Some(version) = recovered {
            recovered_versions.insert(version);
            if Some(version) != newest_reported {
                published_but_unreported += 1;
            }
            newest_reported = Some(newest_reported.map_or(version, |n| n.max(version)));
        }
    }
    println!(
        "{iterations} kills; recovered versions {recovered_versions:?}; newest reported \
         {newest_reported:?}; unfinished directories removed {stale_directories_removed}; recovered \
         a checkpoint renamed but not yet reported {published_but_unreported} times"
    );
    assert!(
        recovered_versions.len() as u32 >= iterations.min(3),
        "the kills should land at different checkpoints, recovered {recovered_versions:?}"
    );
}
