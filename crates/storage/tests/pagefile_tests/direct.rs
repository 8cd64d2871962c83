//! Direct (`O_DIRECT`) reads of the page file (issue 33): on a real file system that grants
//! `O_DIRECT` (the target directory, never a tmpfs `/tmp`; where it is refused the tests still
//! pass and say they ran buffered), `read` at unaligned offsets and lengths (ranges ending at
//! the valid bytes, spanning 4 KiB blocks, the page's last bytes, into aligned and unaligned
//! buffers, larger than the bounce buffer), `read_verified_page` (full, partial and empty pages,
//! a flipped byte still `Corrupt`), a data file cut inside a block, and `PageReads` on both
//! backends, each compared with the same pages in a buffered page file. Every test checks that
//! the reads stayed direct: a misaligned direct request would be refused by the kernel and turn
//! the handle buffered. (The simulated disk and odd file systems: `direct_quirks`.)

use prefixkv_storage::pagefile::{
    PageFile, PageFileConfig, PageFileError, PageReads, ReadBackend, ReadBackendChoice,
};
use prefixkv_storage::{real_disk, DIRECT_IO_ALIGNMENT};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use prefixkv_testkit::rng::Rng;

/// Pages of four 4 KiB blocks, so that ranges can span blocks.
pub const PAGE: usize = 16 << 10;

/// The valid bytes of each page [`Fixture`] writes: whole pages, a page ending inside a block,
/// a page ending on a block boundary, an empty page, and page 11 written twice (3000 bytes,
/// then 9000: a rewrite from inside a block).
pub const VALID: [(u64, usize); 14] = [
    (0, PAGE),
    (1, PAGE),
    (2, PAGE),
    (3, PAGE),
    (4, PAGE),
    (5, PAGE),
    (6, PAGE),
    (7, PAGE),
    (8, PAGE),
    (9, PAGE),
    (10, 5000),
    (11, 9000),
    (12, 0),
    (13, 4096),
];

pub fn config(page_bytes: usize, direct_io: bool) -> PageFileConfig {
    PageFileConfig {
        page_bytes: page_bytes as u32,
        pages_per_segment: 4,
        direct_io,
    }
}

/// A page's content of `len` bytes, different for every page, salt and byte.
pub fn content(page: u64, salt: u8, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(131) ^ (i >> 9) ^ page.wrapping_mul(71) ^ u64::from(salt)) as u8)
        .collect()
}

/// A directory on a file system that can grant `O_DIRECT` if this machine has one: under the
/// target directory (never `/tmp`, a tmpfs on many machines).
pub fn direct_capable_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Whether the file system of `dir` grants `O_DIRECT` (a probe file, removed again).
pub fn grants_o_direct(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("o_direct_probe");
    let granted = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .is_ok();
    let _ = std::fs::remove_file(&path);
    granted
}

/// A synced page file with [`VALID`]'s pages and the bytes each page must read back as.
pub struct Fixture {
    pub _dir: tempfile::TempDir,
    pub file: Arc<PageFile>,
    pub expected: HashMap<u64, Vec<u8>>,
    /// Whether the directory's file system grants `O_DIRECT`.
    pub granted: bool,
}

impl Fixture {
    /// The pages of [`VALID`] in a fresh page file, direct I/O asked for or not.
    pub fn new(direct_io: bool) -> Fixture {
        let dir = direct_capable_dir();
        let granted = grants_o_direct(dir.path());
        let (file, _) = PageFile::open(
            real_disk(),
            &dir.path().join("pages"),
            config(PAGE, direct_io),
        )
        .unwrap();
        let expected = write_valid_pages(&file);
        Fixture {
            _dir: dir,
            file: Arc::new(file),
            expected,
            granted,
        }
    }

    /// Checks that reads are direct exactly when asked for and granted (and says which).
    pub fn check_direct(&self, direct_io: bool) {
        let want = direct_io && self.granted;
        if direct_io && !self.granted {
            eprintln!(
                "the file system of {} refuses O_DIRECT: this test ran buffered",
                self.file.dir().display()
            );
        }
        assert_eq!(self.file.direct_reads(), want, "direct reads");
        assert_eq!(self.file.direct_io(), want, "direct writes");
    }
}

/// Writes [`VALID`]'s pages to `file` and syncs; returns each page's expected valid bytes.
pub fn write_valid_pages(file: &PageFile) -> HashMap<u64, Vec<u8>> {
    let mut expected = HashMap::new();
    for (page, valid) in VALID {
        let bytes = content(page, 0, PAGE);
        if page == 11 {
            file.write_page(page, &bytes, 3000).unwrap();
            file.sync().unwrap();
            // The rewrite's bytes below 3000 are ignored (the file keeps its own).
            let mut again = content(page, 9, PAGE);
            file.write_page(page, &again, valid as u32).unwrap();
            again[..3000].copy_from_slice(&bytes[..3000]);
            expected.insert(page, again[..valid].to_vec());
        } else {
            file.write_page(page, &bytes, valid as u32).unwrap();
            expected.insert(page, bytes[..valid].to_vec());
        }
    }
    file.sync().unwrap();
    expected
}

/// `len` bytes starting `shift` bytes past a 4 KiB boundary (an aligned buffer for 0).
pub fn buffer_at(backing: &mut Vec<u8>, len: usize, shift: usize) -> &mut [u8] {
    backing.clear();
    backing.resize(len + shift + DIRECT_IO_ALIGNMENT, 0);
    let start = backing.as_ptr().align_offset(DIRECT_IO_ALIGNMENT) + shift;
    &mut backing[start..start + len]
}

/// Ranges (page, offset, len) at the edges the aligned requests must get right.
pub fn edge_ranges() -> Vec<(u64, usize, usize)> {
    vec![
        (1, 0, 1),
        (1, 0, PAGE),             // a whole page (aligned at both ends)
        (1, 1, PAGE - 1),         // through the page's last byte
        (1, PAGE - 1, 1),         // the page's last byte
        (2, PAGE - 4096, 4096),   // the last block
        (2, PAGE - 4097, 4097),   // the last block and a byte before it
        (3, 4095, 2),             // spans a block boundary by one byte each side
        (3, 4000, 8500),          // spans three blocks
        (4, 8192, 4096),          // one aligned block in the middle
        (4, 8191, 4098),          // one block and a byte each side
        (10, 0, 5000),            // ends at the valid bytes, inside a block
        (10, 4990, 10),           // the last valid bytes
        (10, 4096, 904),          // from a boundary to the valid bytes
        (11, 2990, 20),           // across the rewrite's start (3000)
        (11, 0, 9000),            // the whole rewritten page
        (11, 8999, 1),            // its last valid byte
        (13, 0, 4096),            // valid bytes end on a boundary
        (13, 4095, 1),            // its last valid byte
        (9, 12345, PAGE - 12345), // the last page of a segment, to its end
    ]
}

#[test]
fn read_returns_the_written_bytes_at_unaligned_offsets_and_lengths() {
    let direct = Fixture::new(true);
    let buffered = Fixture::new(false);
    direct.check_direct(true);
    buffered.check_direct(false);
    let mut backing = Vec::new();
    let mut twin = Vec::new();
    for (page, offset, len) in edge_ranges() {
        let want = &direct.expected[&page][offset..offset + len];
        for shift in [0, 1, 512, 4095] {
            let buf = buffer_at(&mut backing, len, shift);
            direct.file.read(page, offset as u32, buf).unwrap();
            assert_eq!(
                buf, want,
                "page {page} at {offset}, {len} bytes, shift {shift}"
            );
            let buf = buffer_at(&mut twin, len, shift);
            buffered.file.read(page, offset as u32, buf).unwrap();
            assert_eq!(buf, want, "buffered: page {page} at {offset}, {len} bytes");
        }
    }
    // Past the valid bytes is still `OutOfRange`, direct or not.
    let error = direct.file.read(10, 4990, &mut [0u8; 11]).unwrap_err();
    assert!(
        matches!(
            error,
            PageFileError::OutOfRange {
                page: 10,
                end: 5001,
                ..
            }
        ),
        "{error}"
    );
    direct.check_direct(true);
}

#[test]
fn read_verified_page_checks_full_partial_and_empty_pages_and_finds_a_flipped_byte() {
    for direct_io in [true, false] {
        let fixture = Fixture::new(direct_io);
        let file = &fixture.file;
        let mut backing = Vec::new();
        for (page, valid) in VALID {
            for shift in [0, 3] {
                let buf = buffer_at(&mut backing, PAGE, shift);
                assert_eq!(file.read_verified_page(page, buf).unwrap() as usize, valid);
                assert_eq!(
                    &buf[..valid],
                    fixture.expected[&page].as_slice(),
                    "page {page}"
                );
            }
        }
        // A buffer shorter than a page but holding the valid bytes works too.
        let mut short = vec![0u8; 5000];
        assert_eq!(file.read_verified_page(10, &mut short).unwrap(), 5000);
        assert_eq!(short, fixture.expected[&10]);
        // Flip one byte of page 5 (segment 4..8, its second page) and one of page 10 past its
        // valid bytes, through the buffered page cache: a direct read still sees them (the
        // kernel writes dirty cached pages back before a direct read).
        let (data_4, _) = file.segment_paths()[1].clone();
        let (data_8, _) = file.segment_paths()[2].clone();
        flip_byte(&data_4, PAGE as u64 + 7000);
        flip_byte(&data_8, 2 * PAGE as u64 + 6000);
        for shift in [0, 3] {
            let buf = buffer_at(&mut backing, PAGE, shift);
            let error = file.read_verified_page(5, buf).unwrap_err();
            assert!(
                matches!(error, PageFileError::Corrupt { page: 5, .. }),
                "{error}"
            );
            // The byte past page 10's valid bytes is not covered by its CRC.
            assert_eq!(file.read_verified_page(10, buf).unwrap(), 5000);
        }
        let mut byte = [0u8; 1];
        file.read(5, 7000, &mut byte).unwrap();
        assert_eq!(byte[0], fixture.expected[&5][7000] ^ 0x5A);
        fixture.check_direct(direct_io);
    }
}

fn flip_byte(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x5A], at).unwrap();
}

#[test]
fn a_data_file_cut_inside_a_block_fails_only_the_reads_that_need_the_missing_bytes() {
    let fixture = Fixture::new(true);
    let file = &fixture.file;
    // Segment 0 holds pages 0..4; cut it 5000 bytes into page 2 (inside its second block).
    let cut = 5000;
    let data = file.segment_paths()[0].0.clone();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(2 * PAGE as u64 + cut as u64)
        .unwrap();
    let expected = &fixture.expected[&2];
    for (offset, len) in [(0, 100), (4096, cut - 4096), (4990, 10), (0, cut)] {
        let mut buf = vec![0u8; len];
        file.read(2, offset as u32, &mut buf).unwrap();
        assert_eq!(
            buf,
            expected[offset..offset + len],
            "{offset}+{len} is before the cut"
        );
    }
    for (offset, len) in [(4990, 11), (8192, 8), (0, PAGE)] {
        let error = file
            .read(2, offset as u32, &mut vec![0u8; len])
            .unwrap_err();
        assert!(
            matches!(error, PageFileError::DataMissing { page: 2, .. }),
            "{offset}+{len}: {error}"
        );
    }
    let error = file
        .read_verified_page(3, &mut vec![0u8; PAGE])
        .unwrap_err();
    assert!(
        matches!(error, PageFileError::DataMissing { page: 3, .. }),
        "{error}"
    );
    for choice in backends(file) {
        let mut reader = PageReads::with_backend(Arc::clone(file), 8, PAGE as u32, choice).unwrap();
        reader.submit(2, 4096, (cut - 4096) as u32, 1).unwrap(); // ends at the cut
        reader.submit(2, 4990, 11, 2).unwrap(); // one byte past it
        reader.submit_verified_page(2, 3).unwrap();
        reader.submit(1, PAGE as u32 - 5, 5, 4).unwrap(); // an intact page
        let mut outcomes = HashMap::new();
        while reader.in_flight() > 0 {
            reader
                .complete(true, |token, result| {
                    outcomes.insert(token, result.map(<[u8]>::to_vec));
                })
                .unwrap();
        }
        assert_eq!(outcomes[&1].as_ref().unwrap(), &expected[4096..cut]);
        assert_eq!(
            outcomes[&4].as_ref().unwrap(),
            &fixture.expected[&1][PAGE - 5..]
        );
        for token in [2, 3] {
            let error = outcomes[&token].as_ref().unwrap_err();
            assert!(
                matches!(error, PageFileError::DataMissing { page: 2, .. }),
                "{choice:?} token {token}: {error}"
            );
        }
    }
    fixture.check_direct(true);
}

/// The backends to run: io_uring where this machine allows it (else only if the test kit
/// allows skipping it) and the synchronous one.
pub fn backends(file: &Arc<PageFile>) -> Vec<ReadBackendChoice> {
    let auto = PageReads::new(Arc::clone(file), 1, 1).unwrap();
    match auto.backend() {
        ReadBackend::IoUring => vec![ReadBackendChoice::IoUring, ReadBackendChoice::Sync],
        ReadBackend::Sync => {
            let why = auto.fallback_reason().unwrap_or_default().to_string();
            prefixkv_testkit::skip::unavailable("io_uring", &why);
            vec![ReadBackendChoice::Sync]
        }
    }
}

type Outcomes = HashMap<u64, Result<Vec<u8>, String>>;

/// Submits every range (page, offset, len; `len == 0` is a verified whole page) through
/// `reader`, completing when it is full; returns the outcomes by index.
pub fn run_reads(reader: &mut PageReads, reads: &[(u64, usize, usize)]) -> Outcomes {
    let mut outcomes = Outcomes::new();
    let mut record = |token: u64, result: Result<&[u8], PageFileError>| {
        outcomes.insert(token, result.map(<[u8]>::to_vec).map_err(|e| e.to_string()));
    };
    for (token, &(page, offset, len)) in reads.iter().enumerate() {
        loop {
            let submitted = if len == 0 {
                reader.submit_verified_page(page, token as u64)
            } else {
                reader.submit(page, offset as u32, len as u32, token as u64)
            };
            match submitted {
                Ok(()) => break,
                Err(prefixkv_storage::pagefile::ReadsError::Full { .. }) => {
                    reader.complete(true, &mut record).unwrap();
                }
                Err(error) => panic!("submit {token}: {error}"),
            }
        }
    }
    while reader.in_flight() > 0 {
        reader.complete(true, &mut record).unwrap();
    }
    outcomes
}

#[test]
fn page_reads_on_both_backends_match_the_buffered_page_file() {
    let direct = Fixture::new(true);
    let buffered = Fixture::new(false);
    let mut rng = Rng::new(0xD1EC_7EAD);
    let mut reads: Vec<(u64, usize, usize)> = edge_ranges();
    reads.extend((0..VALID.len() as u64).map(|page| (page, 0, 0)));
    for _ in 0..400 {
        let (page, valid) = VALID[rng.below(VALID.len() as u64) as usize];
        if valid == 0 {
            continue;
        }
        let len = 1 + rng.below(valid as u64) as usize;
        let offset = rng.below((valid - len + 1) as u64) as usize;
        reads.push((page, offset, len));
    }
    let mut all = Vec::new();
    for fixture in [&direct, &buffered] {
        for choice in backends(&fixture.file) {
            // A depth well below the reads: slots are reused for other alignments.
            let mut reader =
                PageReads::with_backend(Arc::clone(&fixture.file), 16, PAGE as u32, choice)
                    .unwrap();
            let outcomes = run_reads(&mut reader, &reads);
            for (token, &(page, offset, len)) in reads.iter().enumerate() {
                let expected = &fixture.expected[&page];
                let want = if len == 0 {
                    expected.as_slice()
                } else {
                    &expected[offset..offset + len]
                };
                let got = outcomes[&(token as u64)].as_ref().unwrap();
                assert_eq!(
                    got.as_slice(),
                    want,
                    "{choice:?}: read {token} of page {page}"
                );
            }
            all.push(outcomes);
        }
    }
    assert!(all.windows(2).all(|pair| pair[0] == pair[1]));
    // Short reads through a reader whose max_read_bytes is not a multiple of a block.
    for choice in backends(&direct.file) {
        let mut reader =
            PageReads::with_backend(Arc::clone(&direct.file), 4, 5000, choice).unwrap();
        let reads = [
            (3, 4095, 5000),
            (10, 0, 5000),
            (3, PAGE - 5000, 5000),
            (10, 0, 0),
        ];
        let outcomes = run_reads(&mut reader, &reads);
        for (token, &(page, offset, len)) in reads.iter().enumerate() {
            let len = if len == 0 { 5000 } else { len };
            let want = &direct.expected[&page][offset..offset + len];
            assert_eq!(outcomes[&(token as u64)].as_ref().unwrap().as_slice(), want);
        }
    }
    direct.check_direct(true);
    buffered.check_direct(false);
}

#[test]
fn reads_larger_than_the_bounce_buffer_go_in_pieces() {
    // 4 MiB pages: the thread-local bounce buffer holds 1 MiB.
    let page_bytes = 4 << 20;
    let dir = direct_capable_dir();
    let granted = grants_o_direct(dir.path());
    let (file, _) = PageFile::open(
        real_disk(),
        &dir.path().join("pages"),
        config(page_bytes, true),
    )
    .unwrap();
    let bytes = content(7, 1, page_bytes);
    file.write_page(1, &bytes, page_bytes as u32).unwrap();
    file.write_page(2, &bytes, 3_000_001).unwrap();
    file.sync().unwrap();
    assert_eq!(file.direct_reads(), granted);
    let mut backing = Vec::new();
    for (offset, len) in [
        (1234, 3 << 20),
        (0, page_bytes),
        (1 << 20, 1 << 20),
        (5, page_bytes - 10),
    ] {
        for shift in [0, 1] {
            let buf = buffer_at(&mut backing, len, shift);
            file.read(1, offset as u32, buf).unwrap();
            assert!(
                buf == &bytes[offset..offset + len],
                "{offset}+{len}, shift {shift}"
            );
        }
    }
    for shift in [0, 1] {
        let buf = buffer_at(&mut backing, page_bytes, shift);
        assert_eq!(file.read_verified_page(2, buf).unwrap(), 3_000_001);
        assert!(buf[..3_000_001] == bytes[..3_000_001]);
    }
    assert_eq!(file.direct_reads(), granted, "no read was refused");
}
