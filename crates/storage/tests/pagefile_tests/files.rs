//! The page file on the real disk (a temp directory) and on the simulated disk: round trips
//! across segments and reopen, rewrites of a partly full page, prefix deletion, every error
//! a caller can meet (unwritten page, range past the valid bytes, a flipped data byte, a flipped
//! or truncated sums file, stray names, another configuration), and `EIO` on sync.

use prefixkv_storage::pagefile::format::{self, ENTRY_BYTES, SUMS_HEADER_BYTES};
use prefixkv_storage::pagefile::{PageFile, PageFileConfig, PageFileError};
use prefixkv_storage::{real_disk, CrashMode, Disk, Fault, FaultError, FaultOp, OpenMode, SimDisk};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::common::{config, page_bytes, PAGE};

fn read_page(file: &PageFile, page: u64) -> Vec<u8> {
    let mut buf = vec![0u8; PAGE];
    let valid = file.read_verified_page(page, &mut buf).unwrap();
    buf.truncate(valid as usize);
    buf
}

#[test]
fn round_trip_across_segments_and_reopen_on_the_real_disk() {
    let dir = tempfile::tempdir().unwrap();
    let disk = real_disk();
    {
        let (file, opened) = PageFile::open(Arc::clone(&disk), dir.path(), config()).unwrap();
        assert!(opened.segments.is_empty());
        for page in 1..11 {
            file.write_page(page, &page_bytes(page, 0), PAGE as u32)
                .unwrap();
        }
        // Page 11 partly full, then again with more bytes (a fold-over flush, then the full page).
        file.write_page(11, &page_bytes(11, 0), 100).unwrap();
        let synced = file.sync().unwrap();
        assert_eq!(synced.entries.len(), 11);
        assert_eq!(synced.segments_created, 3);
        assert_eq!(read_page(&file, 11), page_bytes(11, 0)[..100].to_vec());
        // The rewrite's first 100 bytes differ from the file's: the file keeps its own (the
        // prefix of a written page never changes), the rest is the new page.
        file.write_page(11, &page_bytes(11, 9), 3000).unwrap();
        file.sync().unwrap();
        eprintln!("direct I/O on this file system: {}", file.direct_io());
    }
    let (file, opened) = PageFile::open(Arc::clone(&disk), dir.path(), config()).unwrap();
    assert_eq!(opened.segments, vec![0, 4, 8]);
    assert_eq!(opened.trusted_pages, 11);
    assert!(opened.torn.is_empty(), "{opened:?}");
    for page in 1..11 {
        assert_eq!(read_page(&file, page), page_bytes(page, 0));
    }
    let mut expected = page_bytes(11, 0)[..100].to_vec();
    expected.extend_from_slice(&page_bytes(11, 9)[100..3000]);
    assert_eq!(read_page(&file, 11), expected);
    let mut part = [0u8; 10];
    file.read(5, 1000, &mut part).unwrap();
    assert_eq!(part[..], page_bytes(5, 0)[1000..1010]);

    // Only segments wholly below page 6 go: [0, 4) does, [4, 8) holds page 6 and stays.
    assert_eq!(file.remove_before(6).unwrap(), 1);
    assert!(matches!(
        file.read_verified_page(3, &mut vec![0; PAGE]),
        Err(PageFileError::NotWritten { page: 3 })
    ));
    assert_eq!(read_page(&file, 4), page_bytes(4, 0));
    drop(file);
    let (file, opened) = PageFile::open(disk, dir.path(), config()).unwrap();
    assert_eq!(opened.segments, vec![4, 8]);
    assert_eq!(read_page(&file, 10), page_bytes(10, 0));
}

#[test]
fn an_unaligned_caller_buffer_still_writes_with_direct_io() {
    let disk = SimDisk::new(1);
    let (file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    // One byte past an aligned start: the page file's staging copy is what is written.
    let mut backing = vec![0u8; PAGE + 1];
    backing[1..].copy_from_slice(&page_bytes(2, 1));
    file.write_page(2, &backing[1..], PAGE as u32).unwrap();
    file.sync().unwrap();
    assert!(file.direct_io(), "the simulated disk accepts direct I/O");
    assert_eq!(read_page(&file, 2), page_bytes(2, 1));
}

#[test]
fn reads_of_unwritten_pages_and_past_valid_bytes_are_clear_errors() {
    let disk = SimDisk::new(2);
    let (file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    file.write_page(1, &page_bytes(1, 0), 500).unwrap();
    let mut buf = [0u8; 20];
    let error = file.read(2, 0, &mut buf).unwrap_err();
    assert!(
        matches!(error, PageFileError::NotWritten { page: 2 }),
        "{error}"
    );
    let error = file.read(1, 490, &mut buf).unwrap_err();
    assert!(
        matches!(
            error,
            PageFileError::OutOfRange {
                page: 1,
                end: 510,
                valid_bytes: 500,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("only 500 valid bytes"),
        "{error}"
    );
    let error = file.write_page(1, &page_bytes(1, 0), 400).unwrap_err();
    assert!(matches!(error, PageFileError::Invalid(_)), "{error}");
    let error = file.write_page(1, &[0u8; 100], 50).unwrap_err();
    assert!(matches!(error, PageFileError::Invalid(_)), "{error}");
}

fn synced_file(disk: &SimDisk, pages: std::ops::Range<u64>) -> (PathBuf, PathBuf) {
    let (file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    for page in pages {
        file.write_page(page, &page_bytes(page, 0), PAGE as u32)
            .unwrap();
    }
    file.sync().unwrap();
    file.segment_paths()[0].clone()
}

#[test]
fn a_flipped_data_byte_is_corrupt_on_a_verified_read() {
    let disk = SimDisk::new(3);
    let (data, _) = synced_file(&disk, 0..4);
    disk.corrupt(&data, 2 * PAGE as u64 + 77, &[0xAA ^ page_bytes(2, 0)[77]])
        .unwrap();
    let (file, opened) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    assert_eq!(opened.trusted_pages, 4, "open does not read the data");
    let error = file.read_verified_page(2, &mut vec![0; PAGE]).unwrap_err();
    assert!(
        matches!(error, PageFileError::Corrupt { page: 2, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("page 2"), "{error}");
    assert_eq!(read_page(&file, 1), page_bytes(1, 0));
}

#[test]
fn a_data_file_cut_short_under_a_trusted_page_is_reported() {
    let disk = SimDisk::new(11);
    let (data, _) = synced_file(&disk, 0..3);
    let file = disk.open(&data, OpenMode::ReadWrite).unwrap();
    file.set_len(2 * PAGE as u64 + 100).unwrap();
    file.sync_data().unwrap();
    drop(file);
    let (file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    let error = file.read_verified_page(2, &mut vec![0; PAGE]).unwrap_err();
    assert!(
        matches!(
            error,
            PageFileError::DataMissing {
                page: 2,
                valid_bytes: 4096,
                ..
            }
        ),
        "{error}"
    );
    let error = file.read(2, 200, &mut [0; 10]).unwrap_err();
    assert!(
        matches!(error, PageFileError::DataMissing { page: 2, .. }),
        "{error}"
    );
    let mut part = [0u8; 100];
    file.read(2, 0, &mut part).unwrap();
    assert_eq!(part[..], page_bytes(2, 0)[..100]);
}

#[test]
fn a_flipped_sums_byte_ends_the_trusted_entries_as_a_torn_tail() {
    let disk = SimDisk::new(4);
    let (_, sums) = synced_file(&disk, 0..4);
    // Entry 2 of 4 (page 2): it and the entries after it are dropped.
    let at = SUMS_HEADER_BYTES + 2 * ENTRY_BYTES + 3;
    disk.corrupt(&sums, at as u64, &[0xFF]).unwrap();
    let (file, opened) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    assert_eq!(opened.trusted_pages, 2);
    assert_eq!(opened.torn.len(), 1);
    assert_eq!(
        opened.torn[0].offset,
        (SUMS_HEADER_BYTES + 2 * ENTRY_BYTES) as u64
    );
    assert_eq!(opened.torn[0].dropped_bytes, 2 * ENTRY_BYTES as u64);
    assert!(opened.torn[0].reason.contains("CRC32C"), "{opened:?}");
    assert!(matches!(
        file.read(3, 0, &mut [0; 1]),
        Err(PageFileError::NotWritten { page: 3 })
    ));
    assert_eq!(read_page(&file, 1), page_bytes(1, 0));
    // The cut was synced: a later entry appended after it is trusted at the next open.
    file.write_page(3, &page_bytes(3, 5), PAGE as u32).unwrap();
    file.sync().unwrap();
    drop(file);
    let (file, opened) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    assert!(opened.torn.is_empty());
    assert_eq!(read_page(&file, 3), page_bytes(3, 5));
}

#[test]
fn a_truncated_sums_file_drops_the_partial_entry() {
    let disk = SimDisk::new(5);
    let (_, sums) = synced_file(&disk, 0..3);
    let file = disk.open(&sums, OpenMode::ReadWrite).unwrap();
    let cut = (SUMS_HEADER_BYTES + 2 * ENTRY_BYTES + 10) as u64;
    file.set_len(cut).unwrap();
    file.sync_data().unwrap();
    drop(file);
    let (file, opened) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    assert_eq!(opened.trusted_pages, 2);
    assert_eq!(opened.torn[0].dropped_bytes, 10);
    assert!(opened.torn[0].reason.contains("partial"), "{opened:?}");
    assert!(file.entry(2).is_none());
    assert!(file.entry(1).is_some());
}

#[test]
fn stray_names_are_ignored_and_reported_and_another_geometry_is_refused() {
    let disk = SimDisk::new(6);
    synced_file(&disk, 0..2);
    for name in [
        "log-1.pages",
        "notes.txt",
        "log-00000000000000000004.pages.tmp",
    ] {
        let file = disk
            .open(&Path::new("/p").join(name), OpenMode::Create)
            .unwrap();
        file.write_all_at(b"junk", 0).unwrap();
    }
    let (_, opened) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    assert_eq!(opened.ignored.len(), 3, "{opened:?}");
    let other = PageFileConfig {
        page_bytes: 8192,
        ..config()
    };
    let error = PageFile::open(disk.as_disk(), Path::new("/p"), other).unwrap_err();
    assert!(matches!(error, PageFileError::InvalidConfig(_)), "{error}");
    let bad = PageFileConfig {
        page_bytes: 5000,
        ..config()
    };
    assert!(PageFile::open(disk.as_disk(), Path::new("/q"), bad).is_err());
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let disk = SimDisk::new(7);
    let (_file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    let error = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap_err();
    assert!(matches!(error, PageFileError::Locked { .. }), "{error}");
}

/// `EIO` from the data file's fsync: `sync` returns it, the page file refuses every later write
/// and sync (no retry), and after a power cut only what an earlier sync covered is trusted.
#[test]
fn eio_on_sync_is_returned_and_nothing_it_covered_is_trusted() {
    for (seed, target) in [(8, ".pages"), (9, ".sums")] {
        let disk = SimDisk::new(seed);
        let (file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
        file.write_page(1, &page_bytes(1, 0), PAGE as u32).unwrap();
        file.sync().unwrap();
        file.write_page(2, &page_bytes(2, 0), PAGE as u32).unwrap();
        file.write_page(1, &page_bytes(1, 1), PAGE as u32).unwrap();
        disk.inject(Fault::once(FaultOp::SyncFile, target, FaultError::Io));
        let error = file.sync().unwrap_err();
        assert!(error.to_string().contains("Input/output error"), "{error}");
        assert!(matches!(file.sync(), Err(PageFileError::Failed(_))));
        assert!(matches!(
            file.write_page(3, &page_bytes(3, 0), 10),
            Err(PageFileError::Failed(_))
        ));
        drop(file);
        disk.crash(CrashMode::DropAll);
        let (file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
        assert_eq!(read_page(&file, 1), page_bytes(1, 0), "{target}");
        assert!(
            file.entry(2).is_none(),
            "{target}: page 2 was never durable"
        );
    }
}

#[test]
fn sums_header_round_trips_and_rejects_damage() {
    let header = format::SumsHeader {
        page_bytes: 4096,
        pages_per_segment: 4,
        first_page: 8,
    };
    let mut bytes = format::encode_header(&header);
    assert_eq!(format::decode_header(&bytes), Ok(header));
    bytes[13] ^= 1;
    assert!(format::decode_header(&bytes).is_err());
    assert!(format::decode_header(&bytes[..20]).is_err());
}

/// What a power cut can leave in the middle of a segment's creation (a data file without its
/// sums file, or with a sums file shorter than its header) or removal (a sums file without its
/// data file) is repaired at open; a damaged header with entries after it is corruption.
#[test]
fn interrupted_creations_and_removals_are_repaired_and_a_bad_header_is_corrupt() {
    let disk = SimDisk::new(10);
    let (data, sums) = synced_file(&disk, 0..2);
    let (segment4, segment8) = {
        let (file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
        file.write_page(5, &page_bytes(5, 0), PAGE as u32).unwrap();
        file.write_page(9, &page_bytes(9, 0), PAGE as u32).unwrap();
        file.sync().unwrap();
        let paths = file.segment_paths();
        (paths[1].clone(), paths[2].clone())
    };
    // Segment 0: removal cut after the data file went. Segment 4: creation cut before the sums
    // file existed. Segment 8: creation cut inside the header write.
    disk.remove_file(&data).unwrap();
    disk.remove_file(&segment4.1).unwrap();
    let torn = disk.open(&segment8.1, OpenMode::ReadWrite).unwrap();
    torn.set_len(12).unwrap();
    drop(torn);
    let (file, opened) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    assert_eq!(opened.removed_leftovers, vec![0]);
    assert_eq!(opened.repaired_creations, vec![4, 8]);
    assert_eq!(opened.segments, vec![4, 8]);
    assert_eq!(opened.trusted_pages, 0);
    assert!(
        disk.read_file(&sums).is_err(),
        "the leftover sums file is gone"
    );
    file.write_page(5, &page_bytes(5, 1), PAGE as u32).unwrap();
    file.sync().unwrap();
    drop(file);
    disk.crash(CrashMode::DropAll);
    let (file, opened) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    assert!(opened.repaired_creations.is_empty() && opened.removed_leftovers.is_empty());
    assert_eq!(read_page(&file, 5), page_bytes(5, 1));
    drop(file);
    disk.corrupt(&segment4.1, 3, &[0x00]).unwrap();
    let error = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap_err();
    assert!(
        matches!(error, PageFileError::CorruptSums { .. }),
        "{error}"
    );
}

/// Readers verifying pages while one writer rewrites them with more valid bytes and syncs:
/// every verified read succeeds (a rewrite never changes the bytes an entry already covers).
#[test]
fn verified_reads_during_rewrites_always_verify() {
    let disk = SimDisk::new(12);
    let (file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), config()).unwrap();
    for page in 0..8 {
        file.write_page(page, &page_bytes(page, 0), 64).unwrap();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for reader in 0..2u64 {
            let (file, done) = (&file, &done);
            scope.spawn(move || {
                let mut buf = vec![0u8; PAGE];
                let mut reads = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || reads < 100 {
                    let page = (reads + reader) % 8;
                    file.read_verified_page(page, &mut buf)
                        .unwrap_or_else(|e| panic!("reader {reader}: {e}"));
                    reads += 1;
                }
            });
        }
        for round in 1..=60u32 {
            for page in 0..8 {
                let valid = (64 + round * 67).min(PAGE as u32);
                file.write_page(page, &page_bytes(page, round as u8), valid)
                    .unwrap();
            }
            if round % 10 == 0 {
                file.sync().unwrap();
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // The first 64 bytes are the first write's, whatever the rewrites passed.
    assert_eq!(read_page(&file, 3)[..64], page_bytes(3, 0)[..64]);
}
