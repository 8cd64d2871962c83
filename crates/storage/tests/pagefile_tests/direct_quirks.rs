//! Direct reads on the simulated disk and on file systems that behave unlike ext4's common
//! case, through a wrapper over the simulated disk: one that grants `O_DIRECT` but refuses every
//! direct read as misaligned (as one that needs more than 4 KiB would: reads fall back to
//! buffered, writes stay direct), and one that returns at most one block per read call (short
//! reads that are not the end of the file, continued from an aligned block). The simulated disk
//! refuses a misaligned direct read as Linux does, so every test that ends with
//! `direct_reads()` still true shows that no request was misaligned — also for a data file
//! cut inside a block, where the read that meets the end of the file is continued.

use prefixkv_storage::pagefile::{PageFile, PageFileError, PageReads};
use prefixkv_storage::{DirEntry, Disk, DiskFile, Metadata, OpenMode, SimDisk};
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::direct::{buffer_at, config, content, edge_ranges, run_reads, write_valid_pages, PAGE};

/// How the wrapped files read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quirk {
    /// Every read refused with `InvalidInput` while direct I/O is on.
    RefuseDirectReads,
    /// At most to the end of the block holding the offset per call.
    OneBlockPerRead,
}

#[derive(Debug)]
struct QuirkyDisk {
    inner: Arc<dyn Disk>,
    quirk: Quirk,
}

#[derive(Debug)]
struct QuirkyFile {
    inner: Arc<dyn DiskFile>,
    quirk: Quirk,
    direct: AtomicBool,
}

impl Disk for QuirkyDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn DiskFile>> {
        Ok(Arc::new(QuirkyFile {
            inner: self.inner.open(path, mode)?,
            quirk: self.quirk,
            direct: AtomicBool::new(false),
        }))
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        self.inner.metadata(path)
    }
    fn kind(&self) -> &'static str {
        "quirky"
    }
}

impl DiskFile for QuirkyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        match self.quirk {
            Quirk::RefuseDirectReads if self.direct.load(Ordering::SeqCst) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "this file system wants another alignment",
            )),
            Quirk::RefuseDirectReads => self.inner.read_at(buf, offset),
            Quirk::OneBlockPerRead => {
                let to_block_end = 4096 - (offset % 4096) as usize;
                let n = buf.len().min(to_block_end);
                // The inner simulated file checks a direct request's alignment: the whole
                // request is checked first, then the first block is read.
                if self.direct.load(Ordering::SeqCst) {
                    self.inner.read_at(buf, offset)?;
                }
                self.inner.read_at(&mut buf[..n], offset)
            }
        }
    }
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        self.inner.write_at(bufs, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn try_lock(&self) -> io::Result<bool> {
        self.inner.try_lock()
    }
    fn set_direct_io(&self, on: bool) -> io::Result<bool> {
        self.direct.store(on, Ordering::SeqCst);
        self.inner.set_direct_io(on)
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

fn quirky(seed: u64, quirk: Quirk) -> Arc<dyn Disk> {
    Arc::new(QuirkyDisk {
        inner: SimDisk::new(seed).as_disk(),
        quirk,
    })
}

#[test]
fn a_file_system_that_refuses_direct_reads_gets_buffered_reads() {
    let disk = quirky(5, Quirk::RefuseDirectReads);
    let dir = Path::new("/p");
    let (file, _) = PageFile::open(Arc::clone(&disk), dir, config(PAGE, true)).unwrap();
    // Page 11's rewrite reads its block back through the read handle: the first refusal.
    let expected = write_valid_pages(&file);
    assert!(file.direct_io(), "writes stay direct");
    assert!(!file.direct_reads(), "page 11's segment reads buffered now");
    for (page, offset, len) in edge_ranges() {
        let mut buf = vec![0u8; len];
        file.read(page, offset as u32, &mut buf).unwrap();
        assert_eq!(buf, expected[&page][offset..offset + len]);
    }
    drop(file);
    // A fresh open: every read handle is direct again until its first read is refused, in
    // `read_verified_page` and in `PageReads` alike.
    let (file, opened) = PageFile::open(disk, dir, config(PAGE, true)).unwrap();
    assert!(opened.direct_io && opened.direct_reads);
    let file = Arc::new(file);
    let mut page = vec![0u8; PAGE];
    assert_eq!(
        file.read_verified_page(1, &mut page).unwrap() as usize,
        PAGE
    );
    assert_eq!(page, expected[&1]);
    let mut reader = PageReads::new(Arc::clone(&file), 4, PAGE as u32).unwrap();
    let reads = [(5, 1, 100), (9, 0, 0), (10, 4000, 1000)];
    let outcomes = run_reads(&mut reader, &reads);
    assert_eq!(outcomes[&0].as_ref().unwrap(), &expected[&5][1..101]);
    assert_eq!(outcomes[&1].as_ref().unwrap(), &expected[&9]);
    assert_eq!(outcomes[&2].as_ref().unwrap(), &expected[&10][4000..]);
    assert!(!file.direct_reads());
    assert!(file.direct_io());
}

/// Every edge range through `read` and `PageReads` (plus each page verified whole) on `file`,
/// compared with `expected`.
fn check_every_path(file: &Arc<PageFile>, expected: &std::collections::HashMap<u64, Vec<u8>>) {
    let mut backing = Vec::new();
    for (page, offset, len) in edge_ranges() {
        for shift in [0, 1] {
            let buf = buffer_at(&mut backing, len, shift);
            file.read(page, offset as u32, buf).unwrap();
            assert_eq!(buf, &expected[&page][offset..offset + len]);
        }
    }
    let mut reader = PageReads::new(Arc::clone(file), 4, PAGE as u32).unwrap();
    let mut reads = edge_ranges();
    reads.extend(expected.keys().map(|page| (*page, 0, 0)));
    let outcomes = run_reads(&mut reader, &reads);
    for (token, &(page, offset, len)) in reads.iter().enumerate() {
        let want = if len == 0 {
            &expected[&page][..]
        } else {
            &expected[&page][offset..offset + len]
        };
        assert_eq!(outcomes[&(token as u64)].as_ref().unwrap().as_slice(), want);
    }
}

#[test]
fn the_simulated_disk_holds_direct_reads_to_the_alignment() {
    let sim = SimDisk::new(6);
    let disk = sim.as_disk();
    disk.create_dir(Path::new("/d")).unwrap();
    let raw = disk.open(Path::new("/d/f"), OpenMode::Create).unwrap();
    raw.write_all_at(&content(1, 1, 3 * 4096 + 10), 0).unwrap();
    assert!(raw.set_direct_io(true).unwrap());
    let mut backing = Vec::new();
    for (len, offset, shift) in [(100, 0, 0), (4096, 1, 0), (4096, 0, 1)] {
        let error = raw
            .read_at(buffer_at(&mut backing, len, shift), offset)
            .unwrap_err();
        assert_eq!(
            error.kind(),
            io::ErrorKind::InvalidInput,
            "{len} at {offset}"
        );
    }
    // Aligned: fine, and short at the end of the file.
    let buf = buffer_at(&mut backing, 8192, 0);
    assert_eq!(raw.read_at(buf, 8192).unwrap(), 4096 + 10);

    // The page file on the simulated disk reads direct, and every read is aligned (or the
    // simulated disk would have refused it and the handle would be buffered now).
    for (seed, disk) in [(7, disk), (8, quirky(8, Quirk::OneBlockPerRead))] {
        let (file, opened) = PageFile::open(disk, Path::new("/p"), config(PAGE, true)).unwrap();
        assert!(opened.direct_reads, "nothing to refuse yet");
        let file = Arc::new(file);
        let expected = write_valid_pages(&file);
        check_every_path(&file, &expected);
        assert!(file.direct_reads() && file.direct_io(), "seed {seed}");
    }
}

#[test]
fn a_read_that_meets_the_end_of_a_cut_file_is_continued_aligned() {
    for quirk in [None, Some(Quirk::OneBlockPerRead)] {
        let sim = SimDisk::new(9);
        let disk = match quirk {
            Some(quirk) => Arc::new(QuirkyDisk {
                inner: sim.as_disk(),
                quirk,
            }) as Arc<dyn Disk>,
            None => sim.as_disk(),
        };
        let (file, _) = PageFile::open(disk, Path::new("/p"), config(PAGE, true)).unwrap();
        let file = Arc::new(file);
        let expected = write_valid_pages(&file);
        // Cut segment 0 5000 bytes into page 2 (inside its second block).
        let data = file.segment_paths()[0].0.clone();
        let raw = sim.as_disk().open(&data, OpenMode::ReadWrite).unwrap();
        raw.set_len(2 * PAGE as u64 + 5000).unwrap();
        let mut buf = vec![0u8; 11];
        file.read(2, 4990, &mut buf[..10]).unwrap();
        assert_eq!(buf[..10], expected[&2][4990..5000]);
        let error = file.read(2, 4990, &mut buf).unwrap_err();
        assert!(
            matches!(error, PageFileError::DataMissing { page: 2, .. }),
            "{error}"
        );
        let mut reader = PageReads::new(Arc::clone(&file), 4, PAGE as u32).unwrap();
        let outcomes = run_reads(&mut reader, &[(2, 4990, 10), (2, 4990, 11), (2, 0, 0)]);
        assert_eq!(outcomes[&0].as_ref().unwrap(), &expected[&2][4990..5000]);
        for token in [1, 2] {
            let error = outcomes[&token].as_ref().unwrap_err();
            assert!(
                error.contains("the file ends before"),
                "{quirk:?} token {token}: {error}"
            );
        }
        assert!(file.direct_reads(), "{quirk:?}: every request was aligned");
    }
}
