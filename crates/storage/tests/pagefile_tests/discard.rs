//! `PageFile::discard_from`: forgetting the pages from one on (a restart after a crash, before
//! it writes those page numbers again). Checked against the bytes the test wrote:
//! - pages below the cut keep their entries and bytes, through a reopen;
//! - pages from the cut on have no entry, through a reopen, and a new, shorter write of such a
//!   page reads back as written (without the discard it is refused: shown first);
//! - a power cut at any call of a discard leaves every page below the cut intact, and a discard
//!   repeated after the cut completes it.

use prefixkv_storage::pagefile::PageFile;
use prefixkv_storage::{CrashMode, SimDisk};
use std::path::Path;

use super::common::{config, page_bytes, PAGE, PAGES_PER_SEGMENT};

const DIR: &str = "/data/discard";
/// Pages written: three segments.
const PAGES: u64 = 3 * PAGES_PER_SEGMENT;
/// The first discarded page: in the middle of the second segment.
const CUT: u64 = PAGES_PER_SEGMENT + 2;

fn write_all(file: &PageFile) {
    for page in 0..PAGES {
        file.write_page(page, &page_bytes(page, 1), PAGE as u32)
            .unwrap();
    }
    file.sync().unwrap();
}

/// Pages below [`CUT`] hold what [`write_all`] wrote.
fn check_kept(file: &PageFile, when: &str) {
    let mut buf = vec![0u8; PAGE];
    for page in 0..CUT {
        let valid = file
            .read_verified_page(page, &mut buf)
            .unwrap_or_else(|e| panic!("{when}: page {page}: {e}"));
        assert_eq!(valid as usize, PAGE, "{when}: page {page}");
        assert!(buf == page_bytes(page, 1), "{when}: page {page} changed");
    }
}

fn check_discarded(file: &PageFile, when: &str) {
    for page in CUT..PAGES {
        assert!(file.entry(page).is_none(), "{when}: page {page} kept");
    }
}

#[test]
fn discarded_pages_are_gone_and_written_again_as_new() {
    let disk = SimDisk::new(7);
    let dir = Path::new(DIR);
    {
        let (file, _) = PageFile::open(disk.as_disk(), dir, config()).unwrap();
        write_all(&file);
        // Without a discard, a shorter write of a page that has a longer one is refused (and a
        // longer one would keep the old bytes below the old valid bytes, invariant 2): a new run
        // could not write these page numbers again.
        let short = page_bytes(CUT, 2);
        file.write_page(CUT, &short, PAGE as u32 / 2).unwrap_err();
    }
    let (file, _) = PageFile::open(disk.as_disk(), dir, config()).unwrap();
    assert_eq!(file.discard_from(CUT).unwrap(), (PAGES - CUT) as usize);
    check_kept(&file, "after the discard");
    check_discarded(&file, "after the discard");
    // A second call has nothing to do.
    assert_eq!(file.discard_from(CUT).unwrap(), 0);
    drop(file);
    let (file, _) = PageFile::open(disk.as_disk(), dir, config()).unwrap();
    check_kept(&file, "after a reopen");
    check_discarded(&file, "after a reopen");
    // The page numbers are written again, shorter than before, and read back as written.
    let new = page_bytes(CUT, 3);
    file.write_page(CUT, &new, PAGE as u32 / 2).unwrap();
    file.write_page(PAGES - 1, &new, 100).unwrap();
    file.sync().unwrap();
    drop(file);
    let (file, _) = PageFile::open(disk.as_disk(), dir, config()).unwrap();
    let mut buf = vec![0u8; PAGE];
    assert_eq!(
        file.read_verified_page(CUT, &mut buf).unwrap() as usize,
        PAGE / 2
    );
    assert!(
        buf[..PAGE / 2] == new[..PAGE / 2],
        "the rewritten page holds old bytes"
    );
    assert_eq!(file.read_verified_page(PAGES - 1, &mut buf).unwrap(), 100);
    assert!(buf[..100] == new[..100]);
    check_kept(&file, "after the rewrite");
}

#[test]
fn a_power_cut_during_a_discard_keeps_the_pages_below_it() {
    let dir = Path::new(DIR);
    let mut cuts = 0;
    for seed in 0..64u64 {
        let disk = SimDisk::new(seed);
        {
            let (file, _) = PageFile::open(disk.as_disk(), dir, config()).unwrap();
            write_all(&file);
        }
        let (file, _) = PageFile::open(disk.as_disk(), dir, config()).unwrap();
        disk.cut_after(seed % 16);
        let result = file.discard_from(CUT);
        if disk.is_dead() {
            // Any outcome: the cut may land after the last call.
            cuts += 1;
        } else {
            result.unwrap();
        }
        disk.kill();
        drop(file);
        disk.crash(CrashMode::Random);
        let (file, _) = PageFile::open(disk.as_disk(), dir, config())
            .unwrap_or_else(|e| panic!("seed {seed}: reopen after the cut: {e}"));
        check_kept(&file, &format!("seed {seed}, after the cut"));
        file.discard_from(CUT)
            .unwrap_or_else(|e| panic!("seed {seed}: the repeated discard: {e}"));
        check_discarded(&file, &format!("seed {seed}, after the repeated discard"));
        drop(file);
        let (file, _) = PageFile::open(disk.as_disk(), dir, config()).unwrap();
        check_kept(&file, &format!("seed {seed}, reopened"));
        check_discarded(&file, &format!("seed {seed}, reopened"));
    }
    assert!(cuts > 16, "the cuts must land inside discards: {cuts}");
}
