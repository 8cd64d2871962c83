//! The unsynced state of one file: what a power cut would lose.
//!
//! An [`Overlay`] sits over a backing file that holds exactly the file's *synced* content.
//! Writes and truncations since the last sync live only here; [`Overlay::read`] shows them over
//! the backing bytes; [`Overlay::sync_to`] makes them durable; dropping the overlay is the crash.
//!
//! Invariants (checked by `debug_check` in tests):
//! - `extents` are non-empty, sorted, non-overlapping, and lie below `len`;
//! - `bytes` is the sum of the extents' lengths (what the memory cap counts);
//! - backing bytes at offsets `>= zero_from` are hidden (a truncation cut them off since the
//!   last sync, so they read as zeros unless an extent covers them);
//! - `backing_len` is the backing file's length, which only `sync_to` changes.

use std::collections::BTreeMap;
use std::io;

/// The backing file as the overlay needs it: positional I/O plus length and sync.
pub trait Backing {
    /// Reads at `offset` into `buf`; returns how many bytes were read (short at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes everything written so far durable (fsync / fdatasync of the backing file).
    fn sync(&self, data_only: bool) -> io::Result<()>;
}

impl Backing for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        // pread may return short counts before end of file; loop until EOF or full.
        while done < buf.len() {
            let n =
                std::os::unix::fs::FileExt::read_at(self, &mut buf[done..], offset + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        std::fs::File::set_len(self, len)
    }
    fn sync(&self, data_only: bool) -> io::Result<()> {
        if data_only {
            self.sync_data()
        } else {
            self.sync_all()
        }
    }
}

/// Unsynced writes and size changes of one file.
#[derive(Debug, Clone)]
pub struct Overlay {
    /// Length of the backing (synced) file.
    backing_len: u64,
    /// Logical length as readers see it.
    len: u64,
    /// Backing bytes at or beyond this offset are hidden by a truncation since the last sync.
    zero_from: u64,
    /// Unsynced data by start offset.
    extents: BTreeMap<u64, Vec<u8>>,
    /// Sum of extent lengths.
    bytes: u64,
}

impl Overlay {
    /// An empty overlay over a backing file of `backing_len` bytes.
    pub fn new(backing_len: u64) -> Self {
        Overlay {
            backing_len,
            len: backing_len,
            zero_from: u64::MAX,
            extents: BTreeMap::new(),
            bytes: 0,
        }
    }

    /// The file's length as readers see it.
    #[allow(clippy::len_without_is_empty)] // a file length, not a collection
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Unsynced bytes held in memory.
    pub fn unsynced_bytes(&self) -> u64 {
        self.bytes
    }

    /// True when a sync would change nothing.
    pub fn is_clean(&self) -> bool {
        self.extents.is_empty()
            && self.len == self.backing_len
            && self.zero_from >= self.backing_len
    }

    /// Records a write of `data` at `offset`. Returns the change in unsynced bytes.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> i64 {
        if data.is_empty() {
            return 0;
        }
        let before = self.bytes;
        let end = offset + data.len() as u64;
        // Remove every extent overlapping [offset, end); keep their parts outside it.
        let overlapping: Vec<u64> = self
            .extents
            .range(..end)
            .rev()
            .take_while(|(s, v)| *s + v.len() as u64 > offset)
            .map(|(s, _)| *s)
            .collect();
        let mut start = offset;
        let mut merged = Vec::new();
        let mut tail = Vec::new();
        for s in overlapping {
            let v = self.extents.remove(&s).expect("listed above");
            self.bytes -= v.len() as u64;
            let e = s + v.len() as u64;
            if s < offset {
                start = s;
                merged = v[..(offset - s) as usize].to_vec();
            }
            if e > end {
                tail = v[(end - s) as usize..].to_vec();
            }
        }
        // Coalesce with an extent ending exactly at `start` (sequential appends, the log's
        // pattern) and one starting exactly at `end`, so the map stays small.
        if let Some((&s, v)) = self.extents.range(..start).next_back() {
            if s + v.len() as u64 == start {
                let mut v = self.extents.remove(&s).expect("just seen");
                self.bytes -= v.len() as u64;
                v.extend_from_slice(&merged);
                merged = v;
                start = s;
            }
        }
        merged.extend_from_slice(data);
        merged.extend_from_slice(&tail);
        if tail.is_empty() {
            if let Some(next) = self.extents.remove(&end) {
                self.bytes -= next.len() as u64;
                merged.extend_from_slice(&next);
            }
        }
        self.bytes += merged.len() as u64;
        self.extents.insert(start, merged);
        self.len = self.len.max(end);
        self.bytes as i64 - before as i64
    }

    /// Records a truncation (or extension) to `new_len`. Returns the change in unsynced bytes.
    pub fn truncate(&mut self, new_len: u64) -> i64 {
        let before = self.bytes;
        if new_len < self.len {
            // Drop extents at or beyond the cut, shorten the one that straddles it.
            let beyond: Vec<u64> = self.extents.range(new_len..).map(|(s, _)| *s).collect();
            for s in beyond {
                let v = self.extents.remove(&s).expect("listed above");
                self.bytes -= v.len() as u64;
            }
            if let Some((&s, v)) = self.extents.range_mut(..new_len).next_back() {
                let keep = (new_len - s) as usize;
                if v.len() > keep {
                    self.bytes -= (v.len() - keep) as u64;
                    v.truncate(keep);
                }
            }
            self.zero_from = self.zero_from.min(new_len);
        }
        self.len = new_len;
        self.bytes as i64 - before as i64
    }

    /// Reads up to `size` bytes at `offset`: backing bytes below `zero_from`, zeros elsewhere,
    /// the unsynced extents on top; short at the logical end of file.
    pub fn read(&self, backing: &impl Backing, offset: u64, size: usize) -> io::Result<Vec<u8>> {
        if offset >= self.len {
            return Ok(Vec::new());
        }
        let end = self.len.min(offset + size as u64);
        let mut buf = vec![0u8; (end - offset) as usize];
        let visible_end = end.min(self.zero_from).min(self.backing_len);
        if visible_end > offset {
            let want = (visible_end - offset) as usize;
            let got = backing.read_at(&mut buf[..want], offset)?;
            // A backing file shorter than recorded means someone changed it behind our back.
            if got < want {
                return Err(io::Error::other(format!(
                    "backing file shorter than its synced length {} (read {got} of {want} at {offset})",
                    self.backing_len
                )));
            }
        }
        // Extents that may overlap [offset, end): start below `end`, ending after `offset`.
        for (&s, v) in self.extents.range(..end).rev() {
            let e = s + v.len() as u64;
            if e <= offset {
                break;
            }
            let from = s.max(offset);
            let to = e.min(end);
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&v[(from - s) as usize..(to - s) as usize]);
        }
        Ok(buf)
    }

    /// Makes the overlay durable: applies the truncation, writes the extents, sets the length
    /// and syncs the backing file. On success the overlay is clean; on error it is unchanged
    /// (the backing file may hold part of it, as a real disk may after a failed fsync).
    pub fn sync_to(&mut self, backing: &impl Backing, data_only: bool) -> io::Result<()> {
        if self.zero_from < self.backing_len {
            backing.set_len(self.zero_from)?;
        }
        for (&s, v) in &self.extents {
            backing.write_all_at(v, s)?;
        }
        backing.set_len(self.len)?;
        backing.sync(data_only)?;
        self.backing_len = self.len;
        self.zero_from = u64::MAX;
        self.extents.clear();
        self.bytes = 0;
        Ok(())
    }

    #[cfg(test)]
    fn debug_check(&self) {
        let mut prev_end = 0;
        let mut sum = 0;
        for (&s, v) in &self.extents {
            assert!(!v.is_empty(), "empty extent at {s}");
            assert!(s >= prev_end, "overlap at {s}");
            prev_end = s + v.len() as u64;
            sum += v.len() as u64;
        }
        assert!(prev_end <= self.len, "extent beyond len");
        assert_eq!(sum, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// An in-memory backing file that counts syncs.
    #[derive(Default)]
    struct MemFile {
        data: RefCell<Vec<u8>>,
        syncs: RefCell<u32>,
    }
    impl Backing for MemFile {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let d = self.data.borrow();
            let o = (offset as usize).min(d.len());
            let n = buf.len().min(d.len() - o);
            buf[..n].copy_from_slice(&d[o..o + n]);
            Ok(n)
        }
        fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            let mut d = self.data.borrow_mut();
            let end = offset as usize + buf.len();
            if d.len() < end {
                d.resize(end, 0);
            }
            d[offset as usize..end].copy_from_slice(buf);
            Ok(())
        }
        fn set_len(&self, len: u64) -> io::Result<()> {
            self.data.borrow_mut().resize(len as usize, 0);
            Ok(())
        }
        fn sync(&self, _: bool) -> io::Result<()> {
            *self.syncs.borrow_mut() += 1;
            Ok(())
        }
    }

    fn file(content: &[u8]) -> MemFile {
        MemFile {
            data: RefCell::new(content.to_vec()),
            syncs: RefCell::new(0),
        }
    }

    fn all(o: &Overlay, f: &MemFile) -> Vec<u8> {
        o.read(f, 0, 1 << 20).unwrap()
    }

    #[test]
    fn writes_are_visible_but_not_in_the_backing_file_until_sync() {
        let f = file(b"hello world");
        let mut o = Overlay::new(11);
        o.write(6, b"WORLD!!");
        o.debug_check();
        assert_eq!(all(&o, &f), b"hello WORLD!!");
        assert_eq!(o.len(), 13);
        assert_eq!(f.data.borrow().as_slice(), b"hello world");
        o.sync_to(&f, true).unwrap();
        assert_eq!(f.data.borrow().as_slice(), b"hello WORLD!!");
        assert_eq!(*f.syncs.borrow(), 1);
        assert!(o.is_clean());
        assert_eq!(o.unsynced_bytes(), 0);
    }

    #[test]
    fn crash_is_dropping_the_overlay() {
        let f = file(b"durable");
        let mut o = Overlay::new(7);
        o.write(7, b" and lost");
        o.truncate(3);
        o.write(10, b"x");
        drop(o);
        // After the cut the file is rebuilt from the backing file alone.
        let o = Overlay::new(f.data.borrow().len() as u64);
        assert_eq!(all(&o, &f), b"durable");
    }

    #[test]
    fn overlapping_and_adjacent_writes_merge() {
        let f = file(b"");
        let mut o = Overlay::new(0);
        o.write(0, b"aaaa");
        o.write(4, b"bbbb"); // adjacent: coalesced
        o.write(10, b"cc");
        o.write(2, b"XXXXXXXXX"); // covers 2..11: swallows parts of both
        o.debug_check();
        assert_eq!(o.extents.len(), 1);
        assert_eq!(all(&o, &f), b"aaXXXXXXXXXc");
        assert_eq!(o.unsynced_bytes(), 12);
        o.write(20, b"z"); // beyond the end: a hole of zeros
        o.debug_check();
        assert_eq!(&all(&o, &f)[12..], b"\0\0\0\0\0\0\0\0z");
        o.write(11, b"Q"); // adjacent to both its neighbours' ends/starts
        o.debug_check();
        assert_eq!(&all(&o, &f)[..13], b"aaXXXXXXXXXQ\0");
    }

    #[test]
    fn truncate_then_extend_hides_the_old_backing_bytes() {
        let f = file(b"0123456789");
        let mut o = Overlay::new(10);
        o.truncate(4);
        assert_eq!(all(&o, &f), b"0123");
        o.truncate(8);
        o.write(6, b"ab");
        o.debug_check();
        // Bytes 4..6 were cut and must read as zeros, not as the backing file's "45".
        assert_eq!(all(&o, &f), b"0123\0\0ab");
        o.sync_to(&f, false).unwrap();
        assert_eq!(f.data.borrow().as_slice(), b"0123\0\0ab");
        assert_eq!(all(&o, &f), b"0123\0\0ab");
    }

    #[test]
    fn truncate_trims_unsynced_extents() {
        let f = file(b"");
        let mut o = Overlay::new(0);
        o.write(0, b"abcdef");
        o.write(10, b"ghij");
        assert_eq!(o.truncate(3), -7);
        o.debug_check();
        assert_eq!(all(&o, &f), b"abc");
        assert_eq!(o.unsynced_bytes(), 3);
    }

    #[test]
    fn reads_are_bounded_by_offset_size_and_length() {
        let f = file(b"0123456789");
        let mut o = Overlay::new(10);
        o.write(3, b"xy");
        assert_eq!(o.read(&f, 2, 4).unwrap(), b"2xy5");
        assert_eq!(o.read(&f, 8, 100).unwrap(), b"89");
        assert!(o.read(&f, 10, 5).unwrap().is_empty());
        assert!(o.read(&f, 50, 5).unwrap().is_empty());
    }

    #[test]
    fn a_shrunken_backing_file_is_an_error_not_zeros() {
        let f = file(b"0123");
        let o = Overlay::new(10);
        assert!(o.read(&f, 0, 10).is_err());
    }

    /// Random operations against a plain byte vector as the model of what readers must see.
    #[test]
    fn random_operations_match_a_byte_vector_model() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _round in 0..200 {
            let f = file(b"");
            let mut o = Overlay::new(0);
            let mut model: Vec<u8> = Vec::new();
            let mut synced: Vec<u8> = Vec::new();
            for _ in 0..60 {
                match next(10) {
                    0..=5 => {
                        let off = next(64);
                        let len = 1 + next(16) as usize;
                        let byte = b'a' + next(26) as u8;
                        o.write(off, &vec![byte; len]);
                        let end = off as usize + len;
                        if model.len() < end {
                            model.resize(end, 0);
                        }
                        model[off as usize..end].fill(byte);
                    }
                    6 | 7 => {
                        let n = next(80) as usize;
                        o.truncate(n as u64);
                        model.resize(n, 0);
                    }
                    8 => {
                        o.sync_to(&f, true).unwrap();
                        synced = model.clone();
                    }
                    _ => {
                        // Crash: only the synced content survives.
                        o = Overlay::new(f.data.borrow().len() as u64);
                        model = synced.clone();
                    }
                }
                o.debug_check();
                assert_eq!(all(&o, &f), model);
                assert_eq!(o.len(), model.len() as u64);
            }
        }
    }
}
