//! Batched page-file reads (`PageReads`): many random ranges through a small depth on the real
//! disk, compared with the expected bytes on both backends (io_uring and the synchronous
//! fallback); every error a caller can meet (at submit: unwritten page, range past the valid
//! bytes, bad length, full reader, bad configuration; at completion: a data file cut under a
//! trusted page); a segment removed under reads in flight; the simulated disk (fallback, reads
//! after a power cut); and `complete(wait)` never hanging. No sleeps, no timing assertions.

use prefixkv_storage::pagefile::reads::{MAX_READ_BUFFER_BYTES, MAX_READ_DEPTH};
use prefixkv_storage::pagefile::{
    PageFile, PageFileConfig, PageFileError, PageReads, ReadBackend, ReadBackendChoice, ReadsError,
};
use prefixkv_storage::{real_disk, CrashMode, SimDisk};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::common::{config, page_bytes, PAGE};
use prefixkv_testkit::rng::Rng;

/// Pages 1..=13 over four segments (page 13 with 1000 valid bytes), synced; returns the file
/// and each page's valid bytes.
fn written_file(dir: &Path) -> (Arc<PageFile>, HashMap<u64, Vec<u8>>) {
    let (file, _) = PageFile::open(real_disk(), dir, config()).unwrap();
    let mut expected = HashMap::new();
    for page in 1..=13u64 {
        let valid = if page == 13 { 1000 } else { PAGE };
        let bytes = page_bytes(page, 0);
        file.write_page(page, &bytes, valid as u32).unwrap();
        expected.insert(page, bytes[..valid].to_vec());
    }
    file.sync().unwrap();
    (Arc::new(file), expected)
}

/// The backends to run on the real disk: io_uring (where this machine allows it; otherwise only
/// if the test kit allows skipping io_uring) and the forced fallback.
fn real_backends(file: &Arc<PageFile>) -> Vec<ReadBackendChoice> {
    let auto = PageReads::new(Arc::clone(file), 1, 1).unwrap();
    match auto.backend() {
        ReadBackend::IoUring => vec![ReadBackendChoice::IoUring, ReadBackendChoice::Sync],
        ReadBackend::Sync => {
            // Panics unless PREFIXKV_TEST_ALLOW_SKIP allows it: io_uring must not go untested.
            let why = auto.fallback_reason().unwrap_or_default().to_string();
            prefixkv_testkit::skip::unavailable("io_uring", &why);
            vec![ReadBackendChoice::Sync]
        }
    }
}

type Outcomes = HashMap<u64, Result<Vec<u8>, String>>;

/// Drives `reads` (page, offset, len) through `reader`: submits until `Full`, completes, goes
/// on; returns every completion by token (the index in `reads`).
fn run_all(reader: &mut PageReads, reads: &[(u64, u32, u32)]) -> Outcomes {
    let mut outcomes = Outcomes::new();
    let record = |outcomes: &mut Outcomes, token: u64, result: Result<&[u8], PageFileError>| {
        let previous =
            outcomes.insert(token, result.map(<[u8]>::to_vec).map_err(|e| e.to_string()));
        assert!(previous.is_none(), "token {token} completed twice");
    };
    let mut fulls = 0;
    let mut next = 0;
    while next < reads.len() {
        let (page, offset, len) = reads[next];
        match reader.submit(page, offset, len, next as u64) {
            Ok(()) => next += 1,
            Err(ReadsError::Full { depth }) => {
                assert_eq!(depth, reader.depth());
                assert_eq!(reader.in_flight(), depth as usize);
                fulls += 1;
                let before = reader.in_flight();
                let n = reader
                    .complete(true, |token, result| record(&mut outcomes, token, result))
                    .unwrap();
                assert!(n >= 1, "a wait with reads in flight completes at least one");
                assert_eq!(reader.in_flight(), before - n);
            }
            Err(error) => panic!("submit {next}: {error}"),
        }
    }
    while reader.in_flight() > 0 {
        reader
            .complete(true, |token, result| record(&mut outcomes, token, result))
            .unwrap();
    }
    assert!(fulls > 0, "the run should have met a full reader");
    assert_eq!(outcomes.len(), reads.len());
    outcomes
}

#[test]
fn many_random_reads_match_the_pages_on_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let (file, expected) = written_file(dir.path());
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let reads: Vec<(u64, u32, u32)> = (0..600)
        .map(|_| {
            let page = 1 + rng.below(13);
            let valid = expected[&page].len() as u64;
            let len = 1 + rng.below(valid.min(1024));
            let offset = rng.below(valid - len + 1);
            (page, offset as u32, len as u32)
        })
        .collect();
    let mut results = Vec::new();
    for choice in real_backends(&file) {
        let mut reader = PageReads::with_backend(Arc::clone(&file), 8, 1024, choice).unwrap();
        let outcomes = run_all(&mut reader, &reads);
        for (token, (page, offset, len)) in reads.iter().enumerate() {
            let want = &expected[page][*offset as usize..(*offset + *len) as usize];
            let got = outcomes[&(token as u64)].as_ref().unwrap();
            assert_eq!(
                got.as_slice(),
                want,
                "{choice:?} read {token}: page {page} at {offset}"
            );
        }
        results.push(outcomes);
    }
    if results.len() == 2 {
        assert_eq!(results[0], results[1]);
    }
}

#[test]
fn submit_rejects_bad_reads_at_once_and_full_clears_after_complete() {
    let dir = tempfile::tempdir().unwrap();
    let (file, expected) = written_file(dir.path());
    for choice in real_backends(&file) {
        let mut reader = PageReads::with_backend(Arc::clone(&file), 2, 512, choice).unwrap();
        let error = reader.submit(20, 0, 10, 1).unwrap_err();
        assert!(
            matches!(
                error,
                ReadsError::PageFile(PageFileError::NotWritten { page: 20 })
            ),
            "{error}"
        );
        let error = reader.submit(13, 990, 20, 1).unwrap_err();
        assert!(
            matches!(
                error,
                ReadsError::PageFile(PageFileError::OutOfRange {
                    page: 13,
                    end: 1010,
                    valid_bytes: 1000,
                    ..
                })
            ),
            "{error}"
        );
        for len in [0, 513] {
            let error = reader.submit(1, 0, len, 1).unwrap_err();
            assert!(
                matches!(
                    error,
                    ReadsError::BadLength {
                        max_read_bytes: 512,
                        ..
                    }
                ),
                "{error}"
            );
        }
        assert_eq!(reader.in_flight(), 0, "rejected reads are not in flight");
        reader.submit(1, 0, 512, 1).unwrap();
        reader.submit(2, 100, 512, 2).unwrap();
        let error = reader.submit(3, 0, 10, 3).unwrap_err();
        assert!(matches!(error, ReadsError::Full { depth: 2 }), "{error}");
        assert!(error.to_string().contains("complete some"), "{error}");
        let mut seen = Vec::new();
        while reader.in_flight() > 0 {
            reader
                .complete(true, |token, result| {
                    let (page, offset) = if token == 1 { (1, 0) } else { (2, 100) };
                    assert_eq!(result.unwrap(), &expected[&page][offset..offset + 512]);
                    seen.push(token);
                })
                .unwrap();
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2]);
        reader.submit(3, 0, 10, 3).unwrap();
        assert_eq!(reader.complete(true, |_, r| assert!(r.is_ok())).unwrap(), 1);
    }
}

#[test]
fn configuration_limits_are_clear_errors() {
    let disk = SimDisk::new(1);
    let big = PageFileConfig {
        page_bytes: 1 << 20,
        pages_per_segment: 4,
        direct_io: false,
    };
    let (file, _) = PageFile::open(disk.as_disk(), Path::new("/p"), big).unwrap();
    let file = Arc::new(file);
    let cases = [
        (0, 100, "depth 0"),
        (MAX_READ_DEPTH + 1, 100, "depth 4097"),
        (4, 0, "max_read_bytes 0"),
        (4, (1 << 20) + 1, "max_read_bytes 1048577"),
        (MAX_READ_DEPTH, 1 << 20, "bytes of buffers"),
    ];
    for (depth, max, says) in cases {
        let error = PageReads::new(Arc::clone(&file), depth, max).unwrap_err();
        assert!(matches!(error, ReadsError::InvalidConfig(_)), "{error}");
        assert!(
            error.to_string().contains(says),
            "{error} should say {says}"
        );
    }
    assert!(u64::from(MAX_READ_DEPTH) * (1 << 20) > MAX_READ_BUFFER_BYTES);
    PageReads::new(Arc::clone(&file), MAX_READ_DEPTH, 4096).unwrap();
    PageReads::new(file, 1, 1 << 20).unwrap();
}

#[test]
fn a_data_file_cut_under_a_trusted_page_is_data_missing_at_completion() {
    let dir = tempfile::tempdir().unwrap();
    let (file, expected) = written_file(dir.path());
    // Segment 0 holds pages 0..4; cut it 100 bytes into page 2.
    let data = file.segment_paths()[0].0.clone();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(2 * PAGE as u64 + 100)
        .unwrap();
    for choice in real_backends(&file) {
        let mut reader = PageReads::with_backend(Arc::clone(&file), 4, 1024, choice).unwrap();
        reader.submit(2, 0, 50, 1).unwrap(); // wholly before the cut
        reader.submit(2, 0, 1000, 2).unwrap(); // a short read, then the end of the file
        reader.submit(3, 0, 10, 3).unwrap(); // wholly past the end
        reader.submit(1, 4000, 96, 4).unwrap(); // an intact page
        let mut outcomes = HashMap::new();
        while reader.in_flight() > 0 {
            reader
                .complete(true, |token, result| {
                    outcomes.insert(token, result.map(<[u8]>::to_vec));
                })
                .unwrap();
        }
        assert_eq!(outcomes[&1].as_ref().unwrap(), &expected[&2][..50]);
        assert_eq!(outcomes[&4].as_ref().unwrap(), &expected[&1][4000..]);
        for (token, page) in [(2, 2), (3, 3)] {
            let error = outcomes[&token].as_ref().unwrap_err();
            assert!(
                matches!(error, PageFileError::DataMissing { page: p, valid_bytes: 4096, .. } if *p == page),
                "{choice:?} token {token}: {error}"
            );
        }
    }
}

#[test]
fn reads_in_flight_survive_the_removal_of_their_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = written_file(dir.path());
    for choice in real_backends(&file) {
        // A fresh file per backend: the removal below is not undone.
        let dir = tempfile::tempdir().unwrap();
        let (file, expected) = written_file(dir.path());
        let mut reader = PageReads::with_backend(Arc::clone(&file), 16, 4096, choice).unwrap();
        for (token, page) in (1..=13u64).enumerate() {
            let len = expected[&page].len() as u32;
            reader.submit(page, 0, len, token as u64).unwrap();
        }
        // The first segment goes while its reads may be in flight: they return its bytes (the
        // handle they hold keeps the file open), the others are unaffected.
        // (The fallback read at submit: nothing races, and the result is the same.)
        let removed = file.remove_before(4).unwrap();
        assert!(removed <= 1);
        let mut n = 0;
        while reader.in_flight() > 0 {
            n += reader
                .complete(true, |token, result| {
                    let page = token + 1;
                    assert_eq!(result.unwrap(), expected[&page].as_slice(), "page {page}");
                })
                .unwrap();
        }
        assert_eq!(n, 13);
        let error = reader.submit(1, 0, 10, 99).unwrap_err();
        assert!(
            matches!(
                error,
                ReadsError::PageFile(PageFileError::NotWritten { page: 1 })
            ),
            "{error}"
        );
    }
}

#[test]
fn complete_with_wait_never_hangs_and_drop_waits_for_reads_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = written_file(dir.path());
    for choice in real_backends(&file) {
        let mut reader = PageReads::with_backend(Arc::clone(&file), 32, 4096, choice).unwrap();
        assert_eq!(
            reader
                .complete(true, |_, _| panic!("nothing to complete"))
                .unwrap(),
            0
        );
        assert_eq!(
            reader
                .complete(false, |_, _| panic!("nothing to complete"))
                .unwrap(),
            0
        );
        reader.submit(5, 0, 4096, 5).unwrap();
        let n = reader.complete(true, |token, r| {
            assert_eq!(token, 5);
            assert!(r.is_ok());
        });
        assert_eq!(n.unwrap(), 1);
        assert_eq!(reader.in_flight(), 0);
        assert_eq!(
            reader
                .complete(true, |_, _| panic!("nothing left"))
                .unwrap(),
            0
        );
        // Dropped with 32 reads in flight: the drop waits for the kernel before freeing.
        for token in 0..32u64 {
            reader.submit(1 + token % 12, 0, 4096, token).unwrap();
        }
        drop(reader);
    }
}

#[test]
fn the_simulated_disk_uses_the_fallback_and_reads_synced_pages_after_a_power_cut() {
    for (seed, mode) in [
        (1, CrashMode::DropAll),
        (2, CrashMode::Random),
        (3, CrashMode::KeepAll),
    ] {
        let disk = SimDisk::new(seed);
        let dir = Path::new("/p");
        {
            let (file, _) = PageFile::open(disk.as_disk(), dir, config()).unwrap();
            for page in 1..=5u64 {
                let valid = if page == 3 { 2000 } else { PAGE as u32 };
                file.write_page(page, &page_bytes(page, 0), valid).unwrap();
            }
            file.sync().unwrap();
            // Unsynced: page 3 grown to a full page, page 6 new.
            file.write_page(3, &page_bytes(3, 0), PAGE as u32).unwrap();
            file.write_page(6, &page_bytes(6, 0), PAGE as u32).unwrap();
            let file = Arc::new(file);
            let error =
                PageReads::with_backend(Arc::clone(&file), 4, 64, ReadBackendChoice::IoUring)
                    .unwrap_err();
            assert!(
                matches!(error, ReadsError::IoUringUnavailable(_)),
                "{error}"
            );
        }
        disk.crash(mode);
        let (file, _) = PageFile::open(disk.as_disk(), dir, config()).unwrap();
        let file = Arc::new(file);
        let mut reader = PageReads::new(Arc::clone(&file), 4, 2048).unwrap();
        assert_eq!(reader.backend(), ReadBackend::Sync);
        assert!(
            reader
                .fallback_reason()
                .unwrap()
                .contains("no file descriptors"),
            "{:?}",
            reader.fallback_reason()
        );
        let synced = [
            (1u64, 0u32, 2048u32),
            (2, 2048, 2048),
            (3, 0, 2000),
            (5, 100, 1),
        ];
        for (token, (page, offset, len)) in synced.iter().enumerate() {
            reader.submit(*page, *offset, *len, token as u64).unwrap();
        }
        assert!(matches!(
            reader.submit(7, 0, 1, 9),
            Err(ReadsError::Full { depth: 4 })
        ));
        let n = reader
            .complete(false, |token, result| {
                let (page, offset, len) = synced[token as usize];
                let range = offset as usize..(offset + len) as usize;
                assert_eq!(result.unwrap(), &page_bytes(page, 0)[range], "page {page}");
            })
            .unwrap();
        assert_eq!(n, 4, "the fallback's reads are all finished at submit");
        // Unsynced writes have no sums entry (entries are appended only by a sync), whatever
        // the cut kept of their bytes: page 3 is trusted to its synced 2000 bytes, page 6 not.
        assert_eq!(file.entry(3).unwrap().valid_bytes, 2000);
        assert!(matches!(
            reader.submit(3, 2000, 1, 10),
            Err(ReadsError::PageFile(PageFileError::OutOfRange { .. }))
        ));
        assert!(matches!(
            reader.submit(6, 0, 1, 11),
            Err(ReadsError::PageFile(PageFileError::NotWritten { page: 6 }))
        ));
    }
}

#[test]
fn whole_pages_are_verified_at_completion() {
    fn send<T: Send>(_: &T) {}
    let dir = tempfile::tempdir().unwrap();
    let (file, expected) = written_file(dir.path());
    // Flip one byte of page 6 (segment 4..8, second page there).
    let data = file.segment_paths()[1].0.clone();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&data)
            .unwrap();
        let mut byte = [0u8; 1];
        f.read_exact_at(&mut byte, 2 * PAGE as u64 + 77).unwrap();
        f.write_all_at(&[byte[0] ^ 0x10], 2 * PAGE as u64 + 77)
            .unwrap();
    }
    for choice in real_backends(&file) {
        let small = PageReads::with_backend(Arc::clone(&file), 2, 1000, choice);
        let mut small = small.unwrap();
        let error = small.submit_verified_page(1, 1).unwrap_err();
        assert!(
            matches!(
                error,
                ReadsError::BadLength {
                    len: 4096,
                    max_read_bytes: 1000
                }
            ),
            "{error}"
        );
        small.submit_verified_page(13, 13).unwrap(); // 1000 valid bytes fit
        assert_eq!(
            small
                .complete(true, |_, r| assert_eq!(
                    r.unwrap(),
                    expected[&13].as_slice()
                ))
                .unwrap(),
            1
        );

        let mut reader =
            PageReads::with_backend(Arc::clone(&file), 4, PAGE as u32, choice).unwrap();
        send(&reader);
        let error = reader.submit_verified_page(14, 14).unwrap_err();
        assert!(
            matches!(
                error,
                ReadsError::PageFile(PageFileError::NotWritten { page: 14 })
            ),
            "{error}"
        );
        let mut seen = 0;
        for page in 1..=13u64 {
            match reader.submit_verified_page(page, page) {
                Ok(()) => {}
                Err(ReadsError::Full { .. }) => panic!("depth 4 with one page at a time"),
                Err(error) => panic!("{error}"),
            }
            seen += reader
                .complete(true, |token, result| match token {
                    6 => assert!(
                        matches!(result, Err(PageFileError::Corrupt { page: 6, .. })),
                        "{result:?}"
                    ),
                    page => assert_eq!(result.unwrap(), expected[&page].as_slice(), "page {page}"),
                })
                .unwrap();
        }
        assert_eq!(seen, 13);
    }
}

#[test]
fn a_deep_reader_holds_depth_reads_at_once_and_polling_drains_them() {
    let dir = tempfile::tempdir().unwrap();
    let (file, expected) = written_file(dir.path());
    for choice in real_backends(&file) {
        let depth = 512;
        let mut reader = PageReads::with_backend(Arc::clone(&file), depth, 256, choice).unwrap();
        for token in 0..u64::from(depth) {
            let page = 1 + token % 12;
            reader
                .submit(page, (token % 15) as u32 * 256, 256, token)
                .unwrap();
        }
        assert!(matches!(
            reader.submit(1, 0, 1, 0),
            Err(ReadsError::Full { depth: 512 })
        ));
        let mut done = 0;
        let mut check = |token: u64, result: Result<&[u8], PageFileError>| {
            let (page, offset) = (1 + token % 12, (token % 15) as usize * 256);
            assert_eq!(result.unwrap(), &expected[&page][offset..offset + 256]);
        };
        // Polls (no wait) until one completion shows up or a bound passes, then waits.
        for _ in 0..1000 {
            done += reader.complete(false, &mut check).unwrap();
            if done > 0 {
                break;
            }
        }
        while reader.in_flight() > 0 {
            done += reader.complete(true, &mut check).unwrap();
        }
        assert_eq!(done, depth as usize);
    }
}
