//! Checkpoint files: round trips, corruption detection, fallback, refusal, stale directories,
//! pruning and argument checks.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use prefixkv_engine::checkpoint_files::{
    decode_manifest_bytes, decode_segment_bytes, encode_manifest, CheckpointDirectory,
    DecodeLimits, Entry, Manifest, ManifestContent, ManifestKind, SegmentSummary,
};
use prefixkv_engine::error::EngineError;
use proptest::prelude::*;

fn content(version: u64, kind: ManifestKind) -> ManifestContent {
    ManifestContent {
        version,
        strategy: "persian".into(),
        kind,
        session_points: vec![(1, version * 10), (2, version * 10 + 3)],
        next_session_id: 3,
        created_unix_ms: 1_700_000_000_000 + version,
        cookie: Vec::new(),
        tier: None,
    }
}

/// Writes checkpoint `version` with `segments` (entries per segment) and publishes it.
fn write_checkpoint(
    directory: &CheckpointDirectory,
    version: u64,
    kind: ManifestKind,
    segments: &[Vec<Entry>],
) -> PathBuf {
    let pending = directory.begin(version).expect("begin");
    let mut summaries = Vec::new();
    for (index, entries) in segments.iter().enumerate() {
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
        summaries.push(writer.finish().expect("finish").0);
    }
    summaries.reverse(); // publish accepts any order
    pending
        .publish(content(version, kind), summaries)
        .expect("publish")
        .dir
}

fn entry(key: &str, value: &str, record_version: u64) -> Entry {
    Entry {
        tombstone: false,
        record_version,
        key: key.into(),
        value: value.into(),
    }
}

fn simple_segments(version: u64) -> Vec<Vec<Entry>> {
    (0..3)
        .map(|segment| {
            (0..20)
                .map(|i| {
                    entry(
                        &format!("v{version}-s{segment}-k{i}"),
                        &format!("value {i}"),
                        version,
                    )
                })
                .collect()
        })
        .collect()
}

fn load_all(directory: &CheckpointDirectory) -> (u64, Vec<Entry>) {
    let checkpoint = directory
        .select_for_recovery()
        .expect("select")
        .expect("a checkpoint");
    let mut entries = Vec::new();
    checkpoint
        .load_in_order(&mut |entry| {
            entries.push(Entry {
                tombstone: entry.tombstone,
                record_version: entry.record_version,
                key: entry.key.to_vec(),
                value: entry.value.to_vec(),
            });
            Ok(())
        })
        .expect("load");
    (checkpoint.version(), entries)
}

fn flip_byte(path: &Path, offset: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset] ^= 0x5A;
    fs::write(path, bytes).unwrap();
}

fn entry_strategy() -> impl Strategy<Value = Entry> {
    (
        any::<bool>(),
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..40),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(tombstone, record_version, key, value)| Entry {
            tombstone,
            record_version,
            key,
            value: if tombstone { Vec::new() } else { value },
        })
}

/// The bytes of a single-segment file holding `entries`, and its summary.
fn segment_bytes(entries: &[Entry]) -> (Vec<u8>, SegmentSummary) {
    let temp = tempfile::tempdir().unwrap();
    let directory = CheckpointDirectory::open(temp.path()).unwrap();
    let dir = write_checkpoint(&directory, 1, ManifestKind::LogOrdered, &[entries.to_vec()]);
    let checkpoint = directory.select_for_recovery().unwrap().unwrap();
    let summary = checkpoint.manifest().segments[0].clone();
    (fs::read(dir.join(&summary.file_name)).unwrap(), summary)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn segments_round_trip(segments in prop::collection::vec(prop::collection::vec(entry_strategy(), 0..30), 1..4)) {
        let temp = tempfile::tempdir().unwrap();
        let directory = CheckpointDirectory::open(temp.path()).unwrap();
        write_checkpoint(&directory, 5, ManifestKind::LogOrdered, &segments);
        let (version, loaded) = load_all(&directory);
        prop_assert_eq!(version, 5);
        let expected: Vec<Entry> = segments.concat();
        prop_assert_eq!(loaded, expected);
        // The in-memory decoder agrees with the file reader.
        let (bytes, summary) = segment_bytes(&segments[0]);
        let (header, decoded, footer) = decode_segment_bytes(&bytes, DecodeLimits::default()).unwrap();
        prop_assert_eq!(header.segment_index, 0);
        prop_assert_eq!(header.checkpoint_version, 1);
        prop_assert_eq!(&decoded, &segments[0]);
        prop_assert_eq!(footer.entries, summary.entries);
        prop_assert_eq!(footer.crc32c, summary.crc32c);
        prop_assert_eq!(bytes.len() as u64, summary.bytes);
    }

    #[test]
    fn any_flipped_or_truncated_segment_byte_is_detected(
        entries in prop::collection::vec(entry_strategy(), 0..12),
        position in any::<prop::sample::Index>(),
        mask in 1u8..=255,
        cut in any::<prop::sample::Index>(),
    ) {
        let (bytes, _) = segment_bytes(&entries);
        let mut flipped = bytes.clone();
        let at = position.index(bytes.len());
        flipped[at] ^= mask;
        prop_assert!(decode_segment_bytes(&flipped, DecodeLimits::default()).is_err(), "flip at {} accepted", at);
        let truncated = &bytes[..cut.index(bytes.len())];
        prop_assert!(decode_segment_bytes(truncated, DecodeLimits::default()).is_err());
        let mut extended = bytes.clone();
        extended.push(0);
        prop_assert!(decode_segment_bytes(&extended, DecodeLimits::default()).is_err());
    }

    #[test]
    fn any_flipped_or_truncated_manifest_byte_is_detected(
        segments in 0u32..5,
        position in any::<prop::sample::Index>(),
        mask in 1u8..=255,
        cut in any::<prop::sample::Index>(),
    ) {
        let manifest = Manifest {
            content: content(9, ManifestKind::KeyUnique),
            segments: (0..segments)
                .map(|index| SegmentSummary {
                    index,
                    file_name: format!("segment-{index:06}.seg"),
                    entries: u64::from(index) * 3,
                    bytes: 64 + u64::from(index) * 100,
                    crc32c: 0xDEAD_0000 + index,
                })
                .collect(),
        };
        let bytes = encode_manifest(&manifest);
        let path = Path::new("MANIFEST");
        prop_assert_eq!(decode_manifest_bytes(&bytes, path).unwrap(), manifest);
        let mut flipped = bytes.clone();
        let at = position.index(bytes.len());
        flipped[at] ^= mask;
        prop_assert!(decode_manifest_bytes(&flipped, path).is_err(), "flip at {} accepted", at);
        prop_assert!(decode_manifest_bytes(&bytes[..cut.index(bytes.len())], path).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = decode_segment_bytes(&bytes, DecodeLimits::default());
        let _ = decode_manifest_bytes(&bytes, Path::new("MANIFEST"));
    }

    #[test]
    fn any_corrupted_byte_of_the_newest_checkpoint_falls_back(
        file_choice in any::<prop::sample::Index>(),
        position in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let temp = tempfile::tempdir().unwrap();
        let directory = CheckpointDirectory::open(temp.path()).unwrap();
        write_checkpoint(&directory, 1, ManifestKind::KeyUnique, &simple_segments(1));
        let newest = write_checkpoint(&directory, 2, ManifestKind::KeyUnique, &simple_segments(2));
        let mut files: Vec<PathBuf> = fs::read_dir(&newest).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        let victim = files[file_choice.index(files.len())].clone();
        let length = fs::metadata(&victim).unwrap().len() as usize;
        if truncate {
            let bytes = fs::read(&victim).unwrap();
            fs::write(&victim, &bytes[..position.index(length)]).unwrap();
        } else {
            flip_byte(&victim, position.index(length));
        }
        let checkpoint = directory.select_for_recovery().unwrap().expect("v1 remains");
        prop_assert_eq!(checkpoint.version(), 1);
        let message = checkpoint.fell_back().expect("fell back").to_string();
        let victim_name = victim.file_name().unwrap().to_string_lossy().to_string();
        prop_assert!(message.contains("checkpoint v2 failed verification"), "{}", message);
        prop_assert!(message.contains(&victim_name), "{}", message);
        prop_assert!(message.contains("recovered v1"), "{}", message);
        // The failed checkpoint is kept aside for inspection, and v2 can be written again.
        let quarantined = temp.path().join("v00000000000000000002.corrupt");
        prop_assert!(message.contains(&quarantined.display().to_string()), "{}", message);
        prop_assert!(quarantined.join(&victim_name).exists());
        prop_assert!(!newest.exists());
        prop_assert_eq!(directory.newest_published_version(), Some(1));
        write_checkpoint(&directory, 2, ManifestKind::KeyUnique, &simple_segments(2));
        let reopened = CheckpointDirectory::open(temp.path()).unwrap();
        prop_assert!(quarantined.is_dir(), "open leaves quarantined checkpoints alone");
        let again = reopened.select_for_recovery().unwrap().unwrap();
        prop_assert_eq!(again.version(), 2);
        prop_assert!(again.fell_back().is_none());
    }
}

#[test]
fn large_values_bypass_the_buffer_and_round_trip() {
    let temp = tempfile::tempdir().unwrap();
    let directory = CheckpointDirectory::open(temp.path()).unwrap();
    let big = vec![0xAB; 3 << 20];
    let segments = vec![vec![
        entry("small", "x", 1),
        Entry {
            tombstone: false,
            record_version: 2,
            key: b"big".to_vec(),
            value: big,
        },
        Entry {
            tombstone: true,
            record_version: 3,
            key: b"gone".to_vec(),
            value: Vec::new(),
        },
        entry("after", "y", 4),
    ]];
    write_checkpoint(&directory, 1, ManifestKind::LogOrdered, &segments);
    let (_, loaded) = load_all(&directory);
    assert_eq!(loaded, segments[0]);
}

#[test]
fn writer_refuses_entries_over_the_limits() {
    let temp = tempfile::tempdir().unwrap();
    let limits = DecodeLimits {
        max_key_bytes: 8,
        max_value_bytes: 16,
    };
    let directory = CheckpointDirectory::open_with_limits(temp.path(), limits).unwrap();
    let pending = directory.begin(1).unwrap();
    let mut writer = pending.segment_writer(0).unwrap();
    assert!(matches!(
        writer.put(1, b"123456789", b"v"),
        Err(EngineError::InvalidArgument(_))
    ));
    assert!(matches!(
        writer.put(1, b"k", &[0; 17]),
        Err(EngineError::InvalidArgument(_))
    ));
    writer.put(1, b"12345678", &[0; 16]).unwrap();
    let (summary, _) = writer.finish().unwrap();
    assert_eq!(summary.entries, 1);
    // A decoder with smaller limits refuses the file instead of allocating.
    let bytes = fs::read(pending.path().join(&summary.file_name)).unwrap();
    let tight = DecodeLimits {
        max_key_bytes: 8,
        max_value_bytes: 15,
    };
    let error = decode_segment_bytes(&bytes, tight).unwrap_err().to_string();
    assert!(
        error.contains("value length 16 exceeds the limit of 15"),
        "{error}"
    );
}

#[test]
fn a_length_larger_than_the_file_is_refused_without_allocating() {
    let (mut bytes, _) = segment_bytes(&[entry("key", "value", 1)]);
    // Value length of the first entry (offset 32 + 13) set to 500 MB, below the limit.
    bytes[45..49].copy_from_slice(&500_000_000u32.to_le_bytes());
    let error = decode_segment_bytes(&bytes, DecodeLimits::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("only") && error.contains("remain"),
        "{error}"
    );
}

#[test]
fn refuses_when_every_checkpoint_is_corrupt_and_names_each_file() {
    let temp = tempfile::tempdir().unwrap();
    let directory = CheckpointDirectory::open(temp.path()).unwrap();
    let first = write_checkpoint(&directory, 1, ManifestKind::KeyUnique, &simple_segments(1));
    let second = write_checkpoint(&directory, 2, ManifestKind::KeyUnique, &simple_segments(2));
    flip_byte(&first.join("segment-000001.seg"), 100);
    fs::remove_file(second.join("MANIFEST")).unwrap();
    let error = directory.select_for_recovery().unwrap_err();
    assert!(matches!(error, EngineError::Corrupt { .. }));
    let message = error.to_string();
    for expected in [
        "none of the 2 checkpoints verifies",
        "v00000000000000000001/segment-000001.seg",
        "checksum mismatch",
        "v00000000000000000002/MANIFEST",
        "MANIFEST is missing",
        "move the directory",
    ] {
        assert!(message.contains(expected), "{expected:?} not in {message}");
    }
    // Refusing changes nothing on disk.
    assert!(first.join("segment-000001.seg").exists() && second.exists());
}

#[test]
fn with_several_corrupt_segments_the_lowest_is_named_every_time() {
    // Segments are verified in parallel; which failure is reported must not depend on timing.
    for _ in 0..20 {
        let temp = tempfile::tempdir().unwrap();
        let directory = CheckpointDirectory::open(temp.path()).unwrap();
        let dir = write_checkpoint(&directory, 1, ManifestKind::KeyUnique, &simple_segments(1));
        flip_byte(&dir.join("segment-000001.seg"), 100);
        flip_byte(&dir.join("segment-000002.seg"), 100);
        let message = directory.select_for_recovery().unwrap_err().to_string();
        assert!(message.contains("segment-000001.seg"), "{message}");
        assert!(!message.contains("segment-000002.seg"), "{message}");
    }
}

#[test]
fn no_checkpoint_means_none() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("checkpoints");
    let directory = CheckpointDirectory::open(&root).unwrap();
    assert!(root.is_dir());
    assert!(directory.select_for_recovery().unwrap().is_none());
    assert_eq!(directory.newest_published_version(), None);
}

#[test]
fn missing_or_foreign_segments_are_detected() {
    let temp = tempfile::tempdir().unwrap();
    let directory = CheckpointDirectory::open(temp.path()).unwrap();
    let first = write_checkpoint(&directory, 1, ManifestKind::KeyUnique, &simple_segments(1));
    let second = write_checkpoint(&directory, 2, ManifestKind::KeyUnique, &simple_segments(1));
    // v2's segment 0 replaced by v1's (same size, valid on its own): the header gives it away.
    fs::copy(
        first.join("segment-000000.seg"),
        second.join("segment-000000.seg"),
    )
    .unwrap();
    let checkpoint = directory.select_for_recovery().unwrap().unwrap();
    assert_eq!(checkpoint.version(), 1);
    assert!(checkpoint
        .fell_back()
        .unwrap()
        .contains("belongs to another checkpoint"));
    fs::remove_file(first.join("segment-000002.seg")).unwrap();
    let message = directory.select_for_recovery().unwrap_err().to_string();
    assert!(
        message.contains("segment-000002.seg") && message.contains("missing"),
        "{message}"
    );
}

#[test]
fn stale_unfinished_directories_are_removed_on_open() {
    let temp = tempfile::tempdir().unwrap();
    let directory = CheckpointDirectory::open(temp.path()).unwrap();
    write_checkpoint(&directory, 1, ManifestKind::KeyUnique, &simple_segments(1));
    // A crash mid-checkpoint: the pending checkpoint is never dropped.
    let pending = directory.begin(2).unwrap();
    let mut writer = pending.segment_writer(0).unwrap();
    writer.put(2, b"k", b"v").unwrap();
    let tmp_path = pending.path().to_path_buf();
    std::mem::forget(writer);
    std::mem::forget(pending);
    let half_deleted = temp.path().join("v00000000000000000000.deleting");
    fs::create_dir(&half_deleted).unwrap();
    let unrelated = temp.path().join("README");
    fs::write(&unrelated, "not ours").unwrap();
    assert!(tmp_path.is_dir());

    let reopened = CheckpointDirectory::open(temp.path()).unwrap();
    let mut removed = reopened.removed_stale().to_vec();
    removed.sort();
    assert_eq!(removed, vec![half_deleted.clone(), tmp_path.clone()]);
    assert!(!tmp_path.exists() && !half_deleted.exists());
    assert!(
        unrelated.exists(),
        "files that are not checkpoints are left alone"
    );
    assert_eq!(reopened.newest_published_version(), Some(1));
    assert_eq!(load_all(&reopened).0, 1);
    // The version can be written again now.
    write_checkpoint(&reopened, 2, ManifestKind::KeyUnique, &simple_segments(2));
    assert_eq!(reopened.newest_published_version(), Some(2));
}

#[test]
fn dropping_a_pending_checkpoint_removes_it() {
    let temp = tempfile::tempdir().unwrap();
    let directory = CheckpointDirectory::open(temp.path()).unwrap();
    let pending = directory.begin(1).unwrap();
    let path = pending.path().to_path_buf();
    assert!(matches!(
        directory.begin(1),
        Err(EngineError::InvalidArgument(_))
    ));
    drop(pending);
    assert!(!path.exists());
    assert!(directory.select_for_recovery().unwrap().is_none());
}

#[test]
fn prune_keeps_the_newest() {
    let temp = tempfile::tempdir().unwrap();
    let directory = CheckpointDirectory::open(temp.path()).unwrap();
    for version in 1..=4 {
        write_checkpoint(
            &directory,
            version,
            ManifestKind::KeyUnique,
            &simple_segments(version),
        );
    }
    assert!(matches!(
        directory.prune(0),
        Err(EngineError::InvalidArgument(_))
    ));
    directory.prune(2).unwrap();
    let mut names: Vec<String> = fs::read_dir(temp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec!["v00000000000000000003", "v00000000000000000004"]
    );
    assert_eq!(directory.newest_published_version(), Some(4));
    assert!(matches!(
        directory.begin(4),
        Err(EngineError::InvalidArgument(_))
    ));
}

#[test]
fn load_parallel_delivers_every_entry_once_and_only_for_key_unique() {
    let temp = tempfile::tempdir().unwrap();
    let directory = CheckpointDirectory::open(temp.path()).unwrap();
    let segments: Vec<Vec<Entry>> = (0..5)
        .map(|segment| {
            (0..200)
                .map(|i| entry(&format!("s{segment}-{i}"), "v", 1))
                .collect()
        })
        .collect();
    write_checkpoint(&directory, 1, ManifestKind::KeyUnique, &segments);
    let checkpoint = directory.select_for_recovery().unwrap().unwrap();
    assert!(checkpoint.fell_back().is_none());
    for threads in [1, 3, 16] {
        let keys = Mutex::new(Vec::new());
        let count = checkpoint
            .load_parallel(threads, &|entry| {
                keys.lock().unwrap().push(entry.key.to_vec());
                Ok(())
            })
            .unwrap();
        assert_eq!(count, 1000);
        let mut keys = keys.into_inner().unwrap();
        keys.sort();
        let mut expected: Vec<Vec<u8>> = segments.concat().into_iter().map(|e| e.key).collect();
        expected.sort();
        assert_eq!(keys, expected);
    }
    // A sink error stops the load and is returned.
    let error = checkpoint
        .load_parallel(2, &|_| {
            Err(EngineError::InvalidArgument("sink says no".into()))
        })
        .unwrap_err();
    assert!(error.to_string().contains("sink says no"));

    write_checkpoint(&directory, 2, ManifestKind::LogOrdered, &segments);
    let checkpoint = directory.select_for_recovery().unwrap().unwrap();
    assert_eq!(checkpoint.version(), 2);
    let error = checkpoint.load_parallel(2, &|_| Ok(())).unwrap_err();
    assert!(matches!(error, EngineError::InvalidArgument(_)), "{error}");
}

#[test]
fn publish_checks_its_arguments() {
    let temp = tempfile::tempdir().unwrap();
    let directory = CheckpointDirectory::open(temp.path()).unwrap();
    let pending = directory.begin(3).unwrap();
    let error = pending
        .publish(content(4, ManifestKind::KeyUnique), Vec::new())
        .unwrap_err();
    assert!(
        error.to_string().contains("manifest says version 4"),
        "{error}"
    );

    let pending = directory.begin(3).unwrap();
    let mut writer = pending.segment_writer(0).unwrap();
    writer.put(1, b"k", b"v").unwrap();
    writer.finish().unwrap();
    let error = pending
        .publish(content(3, ManifestKind::KeyUnique), Vec::new())
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("not among the published segments"),
        "{error}"
    );
    assert!(directory.select_for_recovery().unwrap().is_none());
    assert!(matches!(
        directory.begin(0),
        Err(EngineError::InvalidArgument(_))
    ));
}

#[test]
fn handles_cross_threads() {
    fn send_and_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_and_sync::<CheckpointDirectory>();
    send_and_sync::<prefixkv_engine::checkpoint_files::PendingCheckpoint>();
    send_and_sync::<prefixkv_engine::checkpoint_files::VerifiedCheckpoint>();
    send::<prefixkv_engine::checkpoint_files::SegmentWriter>();
    send_and_sync::<EngineError>();
}
