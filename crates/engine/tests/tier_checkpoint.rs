//! A tiered store keeps evicting while a checkpoint runs: writers at the memory budget do not
//! wait for the checkpoint (eviction no longer takes the maintenance lock, and the checkpoint's
//! scanners, epoch-protected in a tiered store, suspend their protection around blocking writes).
//!
//! The checkpoint is held up deterministically: the test's disk blocks every write to a file
//! outside `dir/log` (the checkpoint's segments; the page file is not held) until the test
//! opens the gate. While it is held, a writer adds more than three memory budgets of new keys;
//! before eviction ran beside checkpoints, it got `OutOfMemory` after `memory_wait_limit`.
//! After the checkpoint is let through, a restart must hold every key acknowledged before the
//! checkpoint was requested, exactly, and of the writer's keys a prefix in write order: checked
//! against what the test wrote, never against what the store reports.

use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use prefixkv_engine::{Store, StoreConfig, Strategy};
use prefixkv_storage::{DirEntry, Disk, DiskFile, Metadata, OpenMode};

/// Writes to gated files wait while it is closed.
#[derive(Debug, Default)]
struct Gate {
    closed: Mutex<bool>,
    changed: Condvar,
    /// Writes that found the gate closed so far.
    held: AtomicUsize,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.changed.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.closed.lock().unwrap();
        if *closed {
            self.held.fetch_add(1, Ordering::SeqCst);
        }
        while *closed {
            closed = self.changed.wait(closed).unwrap();
        }
    }
}

/// Opens the gate when dropped: declared after the store, it is dropped first, also when a check
/// panics, so the store's drop (which waits for its checkpoint) never waits on a closed gate.
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.set_closed(false);
    }
}

/// The real disk, with writes to files outside any `log` directory behind a [`Gate`].
#[derive(Debug)]
struct GatedDisk {
    inner: Arc<dyn Disk>,
    gate: Arc<Gate>,
}

#[derive(Debug)]
struct GatedFile {
    inner: Arc<dyn DiskFile>,
    gate: Arc<Gate>,
}

impl Disk for GatedDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn DiskFile>> {
        let file = self.inner.open(path, mode)?;
        let in_log = path
            .components()
            .any(|component| component == Component::Normal("log".as_ref()));
        if in_log {
            return Ok(file);
        }
        Ok(Arc::new(GatedFile {
            inner: file,
            gate: Arc::clone(&self.gate),
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
        "gated"
    }
}

impl DiskFile for GatedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        self.gate.pass();
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
        self.inner.set_direct_io(on)
    }
    fn raw_fd(&self) -> Option<RawFd> {
        // Every write must go through `write_at`, where the gate is.
        None
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

/// Budget of the log's memory: 16 pages of 64 KiB.
const BUDGET_BYTES: u64 = 1 << 20;

fn config(dir: &Path, disk: Arc<dyn Disk>) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.index_buckets = 1 << 15;
    config.log_memory_bytes = BUDGET_BYTES;
    config.log_page_bytes = 64 << 10;
    // One scanner, so that it has more to write than its two buffers hold (see `LOADED`).
    config.flusher_threads = 1;
    config.storage_tier = true;
    // Buffered page-file I/O: with O_DIRECT every cold read is a device read (about 0.6 ms on
    // the CI machine), and these tests read tens of thousands of cold records. Direct reads are
    // the storage crate's tests (`pagefile_tests::direct`).
    config.checkpoint_direct_io = false;
    // Long enough for a loaded machine to evict, far shorter than the hold-up below lasts:
    // a writer that had to wait for the checkpoint would fail.
    config.memory_wait_limit = Duration::from_secs(10);
    config.disk = disk;
    config
}

fn key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// A 100-byte value naming its key.
fn value(index: u64) -> Vec<u8> {
    let mut value = format!("{index}:").into_bytes();
    value.resize(100, b'v');
    value
}

/// Keys loaded before the checkpoint: ~12 MiB of records, more than the scanner's two 4 MiB
/// write buffers, so it is still scanning when the held writes fill both (it then waits for a
/// buffer, which it must do with its epoch protection suspended).
const LOADED: u64 = 90_000;
/// Keys the writer adds while the checkpoint is held (its scanner waiting for a buffer): more
/// than three budgets of records. With the suspension around blocking appends removed, both
/// tests fail (checked): eviction then waits for the blocked scanner.
const ADDED: u64 = 25_000;

/// Waits until the thread named `name` sleeps in three samples 20 ms apart (a scanner that
/// waits for a write buffer; when it runs or reads the page file it is not in `S`), at most until
/// `deadline`.
fn wait_until_sleeping(name: &str, deadline: Instant) {
    let mut sleeping_samples = 0;
    while sleeping_samples < 3 {
        assert!(
            Instant::now() < deadline,
            "thread {name} never waited (is it still named so?)"
        );
        let sleeping = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| task.ok())
            .any(|task| {
                let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                // The state is the first field after the command's closing parenthesis.
                let state = stat
                    .rsplit_once(") ")
                    .map(|(_, rest)| rest.starts_with('S'));
                comm.trim_end() == name && state == Some(true)
            });
        sleeping_samples = if sleeping { sleeping_samples + 1 } else { 0 };
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn held_checkpoint_lets_writers_evict(strategy: Strategy) {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let disk = Arc::new(GatedDisk {
        inner: prefixkv_storage::real_disk(),
        gate: Arc::clone(&gate),
    });
    {
        let store = Store::open(config(dir.path(), disk.clone())).unwrap();
        let mut loader = store.start_session();
        for index in 0..LOADED {
            loader.upsert(&key(index), &value(index)).unwrap();
        }
        drop(loader);
        let _open_on_drop = OpenOnDrop(Arc::clone(&gate));
        gate.set_closed(true);
        let token = store.checkpoint(strategy).unwrap();
        // Bounded waits for the checkpoint to reach the gate (its first segment write), and then
        // for its scanner to wait for a buffer (so that the writer below needs eviction while
        // the scanner is blocked).
        let deadline = Instant::now() + Duration::from_secs(60);
        while gate.held.load(Ordering::SeqCst) == 0 {
            assert!(
                Instant::now() < deadline,
                "{strategy}: the checkpoint never wrote"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // Persian's scanner waits for a segment buffer; fold-over on a tiered store is the
        // incremental checkpoint, whose checkpoint thread (its name cut to the kernel's 15
        // bytes) waits in the index copy's write.
        let waiter = match strategy {
            Strategy::FoldOver => "prefixkv-checkp",
            _ => "prefixkv-scan-0",
        };
        wait_until_sleeping(waiter, deadline);
        let mut writer = store.start_session();
        for index in LOADED..LOADED + ADDED {
            writer
                .upsert(&key(index), &value(index))
                .unwrap_or_else(|error| {
                    panic!("{strategy}: write {index} while the checkpoint is held: {error}")
                });
        }
        assert!(
            store.log_memory_in_use_bytes() <= BUDGET_BYTES,
            "{strategy}: memory stays within the budget: {}",
            store.log_memory_in_use_bytes()
        );
        drop(writer);
        gate.set_closed(false);
        store
            .wait_for_commit(token, Duration::from_secs(120))
            .unwrap_or_else(|error| panic!("{strategy}: {error}"));
    }
    let store = Store::open(config(dir.path(), prefixkv_storage::real_disk())).unwrap();
    let mut session = store.start_session();
    let mut out = Vec::new();
    for index in 0..LOADED {
        assert!(
            session.read(&key(index), &mut out).unwrap(),
            "{strategy}: key {index}, acknowledged before the checkpoint, is missing"
        );
        assert_eq!(out, value(index), "{strategy}: key {index}");
    }
    let mut present = true;
    for index in LOADED..LOADED + ADDED {
        let found = session.read(&key(index), &mut out).unwrap();
        assert!(
            !found || present,
            "{strategy}: the writer's key {index} is back but an earlier one is not: not a prefix"
        );
        if found {
            assert_eq!(out, value(index), "{strategy}: key {index}");
        }
        present = found;
    }
}

/// One test for both strategies, one after the other: the waits above look for threads by
/// name in this process, and a test running beside it would have threads of the same names.
#[test]
fn a_held_up_checkpoint_lets_writers_evict() {
    held_checkpoint_lets_writers_evict(Strategy::Persian);
    held_checkpoint_lets_writers_evict(Strategy::FoldOver);
}
