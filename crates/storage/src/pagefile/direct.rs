//! The page file's read handles and how a read goes through them: buffered (any offset, length
//! and buffer) or direct (`O_DIRECT`, so a read costs the device, not the OS page cache, as
//! RocksDB's `use_direct_reads` does for the benchmark's contender; issue 33).
//!
//! A direct read asks the kernel for the aligned range `[align_down(offset),
//! align_up(offset + len))` (multiples of [`DIRECT_IO_ALIGNMENT`]) into an aligned buffer and
//! copies the requested bytes out. Invariants:
//! 1. The aligned range of a read inside a page's valid bytes lies inside that page: pages are
//!    a power of two of at least [`DIRECT_IO_ALIGNMENT`] bytes and start at multiples of their
//!    size. Every write of a page writes from its first rewritten block to the page's end
//!    (`PageFile::write_page` writes the staging buffer's tail), so once a page has an entry the
//!    data file holds its whole last block. A file cut short anyway (damage) is handled as
//!    buffered reads handle it: a read succeeds if the bytes that came back cover the requested
//!    ones (a short read at the end of the file is fine), and is `UnexpectedEof` (so
//!    `DataMissing`) otherwise.
//! 2. A short read is continued from the aligned block holding its end (the kernel needs an
//!    aligned offset), and a continuation that ends no further than the last one is the end of
//!    the file: a read always finishes.
//! 3. A handle's direct flag only ever goes from on to off (a file system that granted
//!    `O_DIRECT` but refuses our alignment with `InvalidInput`, as some need more than 4 KiB):
//!    reads that saw it on issue aligned requests, which a buffered handle serves as well, so
//!    a flip under reads in flight never makes one of them invalid.
//! 4. No allocation per read on [`PageFile::read`](super::PageFile::read)'s path once a thread
//!    has read: the bounce buffer is thread-local, grown to the largest read up to
//!    [`BOUNCE_MAX_BYTES`] (larger reads go through it in pieces), so its size never comes from
//!    an untrusted number.

use crate::io::{DiskFile, DIRECT_IO_ALIGNMENT};
use std::cell::RefCell;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Largest thread-local bounce buffer (its aligned part): 1 MiB per reading thread at most.
pub(crate) const BOUNCE_MAX_BYTES: usize = 1 << 20;

// The aligned range of a read inside a page stays inside the page (invariant 1).
const _: () = assert!((super::MIN_PAGE_BYTES as usize).is_multiple_of(DIRECT_IO_ALIGNMENT));

/// `value` rounded down to a multiple of [`DIRECT_IO_ALIGNMENT`].
pub(crate) fn align_down(value: u64) -> u64 {
    value - value % DIRECT_IO_ALIGNMENT as u64
}

/// `value` rounded up to a multiple of [`DIRECT_IO_ALIGNMENT`].
pub(crate) fn align_up(value: u64) -> u64 {
    align_down(value + DIRECT_IO_ALIGNMENT as u64 - 1)
}

fn is_aligned(value: usize) -> bool {
    value.is_multiple_of(DIRECT_IO_ALIGNMENT)
}

/// A data file's read handle and whether it has `O_DIRECT` on. Separate from the segment's
/// write handle: the writer falls back to buffered writes on its own (a refused direct write)
/// and the reader on its own (a refused direct read), and `O_DIRECT` is a flag of the open file
/// description, so one shared handle would tie the two together.
#[derive(Debug)]
pub(crate) struct ReadHandle {
    file: Arc<dyn DiskFile>,
    direct: AtomicBool,
}

impl ReadHandle {
    /// Wraps `file`, asking for `O_DIRECT` if `direct` (kept buffered where the file system
    /// refuses it, as for writes).
    pub(crate) fn new(file: Arc<dyn DiskFile>, direct: bool) -> io::Result<ReadHandle> {
        let direct = direct && file.set_direct_io(true)?;
        Ok(ReadHandle {
            file,
            direct: AtomicBool::new(direct),
        })
    }

    /// The file.
    pub(crate) fn file(&self) -> &Arc<dyn DiskFile> {
        &self.file
    }

    /// Whether reads through this handle are direct now (invariant 3: once off, off for good).
    pub(crate) fn direct(&self) -> bool {
        self.direct.load(Ordering::Acquire)
    }

    /// A direct read was refused with `error` (`InvalidInput`: the file system wants another
    /// alignment): turns `O_DIRECT` off for this handle, so this and every later read is
    /// buffered. Reads in flight stay valid (invariant 3).
    pub(crate) fn refused(&self, error: &io::Error) -> io::Result<()> {
        if self.direct.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                path = %self.file.path().display(),
                %error,
                "direct read refused; the page file reads this segment buffered"
            );
        }
        self.file.set_direct_io(false).map(|_| ())
    }
}

/// Fills `buf[..need]` with the file's bytes from `offset` through `handle`; `UnexpectedEof`
/// if the file ends first. `buf[need..]` is scratch the read may fill: a direct read whose
/// `buf` and `offset` are aligned and whose `buf` holds `align_up(need)` bytes goes straight
/// into it (no bounce copy; a whole page into a page buffer). A direct read the file system
/// refuses as misaligned is done again buffered, and the handle stays buffered.
pub(crate) fn read_exact(
    handle: &ReadHandle,
    buf: &mut [u8],
    offset: u64,
    need: usize,
) -> io::Result<()> {
    if need == 0 {
        return Ok(());
    }
    if handle.direct() {
        let aligned_end = align_up(need as u64) as usize;
        let result = if is_aligned(buf.as_ptr() as usize)
            && offset.is_multiple_of(DIRECT_IO_ALIGNMENT as u64)
            && buf.len() >= aligned_end
        {
            read_covering(handle.file.as_ref(), &mut buf[..aligned_end], offset, need)
        } else {
            read_bounced(handle.file.as_ref(), &mut buf[..need], offset)
        };
        match result {
            Err(error) if error.kind() == io::ErrorKind::InvalidInput => handle.refused(&error)?,
            result => return result,
        }
    }
    handle.file.read_exact_at(&mut buf[..need], offset)
}

/// Reads the aligned `buf` (aligned address and length) from the aligned `offset` until at
/// least `need` bytes came back (invariant 2 for short reads); `UnexpectedEof` if the file
/// ends before `need`.
pub(crate) fn read_covering(
    file: &dyn DiskFile,
    buf: &mut [u8],
    offset: u64,
    need: usize,
) -> io::Result<()> {
    debug_assert!(is_aligned(buf.as_ptr() as usize) && is_aligned(buf.len()));
    debug_assert!(offset.is_multiple_of(DIRECT_IO_ALIGNMENT as u64) && need <= buf.len());
    let mut done = 0;
    while done < need {
        let from = align_down(done as u64) as usize;
        match file.read_at(&mut buf[from..], offset + from as u64) {
            Ok(n) if from + n > done => done = from + n,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{}: the file ended at offset {} before the bytes expected",
                        file.path().display(),
                        offset + done as u64
                    ),
                ))
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// A direct read of any range into any `buf` through this thread's bounce buffer, in pieces of
/// at most the bounce buffer's size.
fn read_bounced(file: &dyn DiskFile, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let span = align_up(offset + buf.len() as u64) - align_down(offset);
    with_bounce(span as usize, |bounce| {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let start = align_down(at);
            let skip = (at - start) as usize;
            // `bounce` holds at least two blocks and `skip` is less than one: each piece
            // makes progress.
            let want = (skip + buf.len() - done).min(bounce.len());
            let aligned = align_up(want as u64) as usize;
            read_covering(file, &mut bounce[..aligned], start, want)?;
            let n = want - skip;
            buf[done..done + n].copy_from_slice(&bounce[skip..want]);
            done += n;
        }
        Ok(())
    })
}

thread_local! {
    /// This thread's bounce buffer (aligned part plus room to align it); see invariant 4.
    static BOUNCE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with an aligned buffer of `min(align_up(span), BOUNCE_MAX_BYTES)` bytes (at least
/// two blocks), a multiple of [`DIRECT_IO_ALIGNMENT`]: this thread's bounce buffer, grown if
/// needed, or a fresh one if it is unavailable (borrowed already, or the thread is exiting).
fn with_bounce<R>(span: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let len = (align_up(span as u64) as usize).clamp(2 * DIRECT_IO_ALIGNMENT, BOUNCE_MAX_BYTES);
    let mut f = Some(f);
    let shared = BOUNCE
        .try_with(|cell| {
            let mut vec = cell.try_borrow_mut().ok()?;
            Some(run_aligned(&mut vec, len, f.take().expect("taken once")))
        })
        .ok()
        .flatten();
    match shared {
        Some(result) => result,
        // `f` was not taken: the shared buffer was not used.
        None => run_aligned(&mut Vec::new(), len, f.take().expect("not taken yet")),
    }
}

/// Runs `f` on `len` aligned bytes of `vec`, growing `vec` first if it is too small.
fn run_aligned<R>(vec: &mut Vec<u8>, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    if vec.len() < len + DIRECT_IO_ALIGNMENT {
        // Doubling bounds the regrowths of a thread whose reads grow slowly.
        let grown =
            (vec.len().saturating_sub(DIRECT_IO_ALIGNMENT) * 2).clamp(len, BOUNCE_MAX_BYTES);
        *vec = vec![0u8; grown + DIRECT_IO_ALIGNMENT];
    }
    let skip = vec.as_ptr().align_offset(DIRECT_IO_ALIGNMENT);
    f(&mut vec[skip..skip + len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagefile::{PageFile, PageFileConfig};
    use std::io::IoSlice;
    use std::os::fd::RawFd;
    use std::path::{Path, PathBuf};

    /// A file that answers reads as `O_DIRECT` does while direct: at most `blocks` whole
    /// blocks per call, fewer bytes only at the end of the file, `InvalidInput` for a
    /// misaligned request. Remembers the last request.
    #[derive(Debug)]
    struct BlockReads {
        data: Vec<u8>,
        blocks: usize,
        direct: AtomicBool,
        last: parking_lot::Mutex<(u64, usize)>,
    }

    impl DiskFile for BlockReads {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            *self.last.lock() = (offset, buf.len());
            let direct = self.direct.load(Ordering::Relaxed);
            if direct && !crate::io::direct_io_aligned(&[IoSlice::new(buf)], offset) {
                return Err(io::Error::from(io::ErrorKind::InvalidInput));
            }
            let start = (offset as usize).min(self.data.len());
            let n = buf
                .len()
                .min(self.blocks * DIRECT_IO_ALIGNMENT)
                .min(self.data.len() - start);
            buf[..n].copy_from_slice(&self.data[start..start + n]);
            Ok(n)
        }
        fn write_at(&self, _: &[IoSlice<'_>], _: u64) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        }
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }
        fn sync_all(&self) -> io::Result<()> {
            Ok(())
        }
        fn set_len(&self, _: u64) -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        }
        fn len(&self) -> io::Result<u64> {
            Ok(self.data.len() as u64)
        }
        fn try_lock(&self) -> io::Result<bool> {
            Ok(true)
        }
        fn set_direct_io(&self, on: bool) -> io::Result<bool> {
            self.direct.store(on, Ordering::Relaxed);
            Ok(on)
        }
        fn raw_fd(&self) -> Option<RawFd> {
            None
        }
        fn path(&self) -> &Path {
            Path::new("block-reads")
        }
    }

    fn block_reads(len: usize, blocks: usize) -> Arc<BlockReads> {
        Arc::new(BlockReads {
            data: (0..len).map(|i| (i * 7 + i / 4096) as u8).collect(),
            blocks,
            direct: AtomicBool::new(false),
            last: parking_lot::Mutex::new((0, 0)),
        })
    }

    #[test]
    fn short_direct_reads_continue_from_an_aligned_block_and_end_at_the_end_of_the_file() {
        // 3 blocks and 100 bytes; one block per call.
        let len = 3 * DIRECT_IO_ALIGNMENT + 100;
        let file = block_reads(len, 1);
        let want: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
        let handle = ReadHandle::new(file.clone(), true).unwrap();
        assert!(handle.direct());
        let mut buf = vec![0u8; 5000];
        for (offset, n) in [
            (0, 1),
            (1, 4096),
            (4095, 5000),
            (len - 5000, 5000),
            (len - 1, 1),
        ] {
            read_exact(&handle, &mut buf[..n], offset as u64, n).unwrap();
            assert_eq!(buf[..n], want[offset..offset + n], "{offset}+{n}");
        }
        // One byte past the end: the last request makes no progress.
        let error = read_exact(&handle, &mut buf[..2], len as u64 - 1, 2).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        assert!(handle.direct(), "every request was aligned");

        // The aligned buffer of a whole range is filled in place, scratch past `need` included.
        let mut backing = vec![0u8; 3 * DIRECT_IO_ALIGNMENT];
        let skip = backing.as_ptr().align_offset(DIRECT_IO_ALIGNMENT);
        let aligned = &mut backing[skip..skip + 2 * DIRECT_IO_ALIGNMENT];
        read_exact(&handle, aligned, 4096, 4097).unwrap();
        assert_eq!(aligned[..], want[4096..4096 + 2 * DIRECT_IO_ALIGNMENT]);
        // The file ends 4196 bytes after 8192: a short read that covers `need` is enough.
        read_covering(&*file, aligned, 8192, 4196).unwrap();
        let error = read_covering(&*file, aligned, 8192, 4197).unwrap_err();
        assert_eq!(
            error.kind(),
            io::ErrorKind::UnexpectedEof,
            "a byte past the end"
        );
    }

    #[test]
    fn reads_larger_than_the_bounce_buffer_go_in_pieces_without_regrowing_it() {
        let len = 3 * BOUNCE_MAX_BYTES + 5;
        let file = block_reads(len, 1 << 20);
        let handle = ReadHandle::new(file.clone(), true).unwrap();
        let mut buf = vec![0u8; len - 10];
        read_exact(&handle, &mut buf, 7, len - 10).unwrap();
        assert!(buf
            .iter()
            .enumerate()
            .all(|(i, b)| *b == ((i + 7) * 7 + (i + 7) / 4096) as u8));
        BOUNCE.with(|cell| {
            let vec = cell.borrow();
            assert!(
                vec.len() <= BOUNCE_MAX_BYTES + DIRECT_IO_ALIGNMENT,
                "{}",
                vec.len()
            );
        });
    }

    #[test]
    fn a_buffered_handle_reads_exactly_what_was_asked() {
        let file = block_reads(10_000, 4);
        let handle = ReadHandle::new(file.clone(), false).unwrap();
        assert!(!handle.direct());
        let mut buf = [0u8; 4096];
        read_exact(&handle, &mut buf, 1, 100).unwrap();
        assert_eq!(*file.last.lock(), (1, 100));
        assert_eq!(buf[..100], file.data[1..101]);
        // Direct, the same read asks for the aligned block around it.
        let handle = ReadHandle::new(file.clone(), true).unwrap();
        read_exact(&handle, &mut buf, 1, 100).unwrap();
        assert_eq!(*file.last.lock(), (0, DIRECT_IO_ALIGNMENT));
        assert_eq!(buf[..100], file.data[1..101]);
    }

    /// A directory on a file system that can grant `O_DIRECT` where this machine has one:
    /// `/var/tmp` (a disk on common systems, unlike a tmpfs `/tmp`), else the temp dir.
    fn direct_capable_dir() -> tempfile::TempDir {
        let var_tmp = PathBuf::from("/var/tmp");
        if var_tmp.is_dir() {
            if let Ok(dir) = tempfile::tempdir_in(&var_tmp) {
                return dir;
            }
        }
        tempfile::tempdir().unwrap()
    }

    /// Whether the file system of `dir` grants `O_DIRECT` (a probe file, removed again).
    fn grants_o_direct(dir: &Path) -> bool {
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

    /// The open-file flags of this process's descriptor `fd` (`/proc/self/fdinfo`, octal).
    fn fd_flags(fd: RawFd) -> i32 {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let flags = info
            .lines()
            .find_map(|line| line.strip_prefix("flags:"))
            .expect("fdinfo has flags");
        i32::from_str_radix(flags.trim(), 8).unwrap()
    }

    #[test]
    fn the_handle_reads_use_has_o_direct_when_direct_reads_are_on() {
        let dir = direct_capable_dir();
        let granted = grants_o_direct(dir.path());
        for direct_io in [true, false] {
            let config = PageFileConfig {
                page_bytes: 4096,
                pages_per_segment: 2,
                direct_io,
            };
            let path = dir.path().join(format!("pages-{direct_io}"));
            let (file, _) = PageFile::open(crate::real_disk(), &path, config).unwrap();
            for page in 0..4 {
                file.write_page(page, &[page as u8; 4096], 4000).unwrap();
            }
            file.sync().unwrap();
            if direct_io && !granted {
                eprintln!(
                    "{} refuses O_DIRECT: this test ran buffered",
                    path.display()
                );
            }
            assert_eq!(file.direct_reads(), direct_io && granted);
            for page in 0..4 {
                // The handle `read`, `read_verified_page` and `PageReads` read through.
                let target = file.locate_range(page, 10, 1).unwrap();
                let fd = target.reader.file().raw_fd().unwrap();
                let o_direct = fd_flags(fd) & libc::O_DIRECT != 0;
                assert_eq!(o_direct, file.direct_reads(), "page {page}");
                assert_eq!(target.reader.direct(), o_direct);
                let mut byte = [0u8; 1];
                file.read(page, 10, &mut byte).unwrap();
                assert_eq!(byte[0], page as u8);
            }
            assert!(direct_io || !file.direct_reads());
        }
    }
}
