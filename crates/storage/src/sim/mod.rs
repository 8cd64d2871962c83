//! [`SimDisk`]: a simulated disk for power-cut and fault tests, an implementation of [`Disk`].
//!
//! # Fault model (also in `docs/storage.md`)
//!
//! Per file the disk keeps what reads see (`current`), what is durable (`durable`), and the
//! writes and length changes made since the last sync, in order (`pending`). Per directory it
//! keeps the entries reads see, the durable entries, and the entry operations (create, remove,
//! rename) since the directory's last sync. `sync_data`/`sync_all` of a file make its pending
//! operations durable; `sync_dir` makes a directory's pending entry operations durable. Nothing
//! else does: syncing a file does not make its directory entry durable.
//!
//! A power cut comes in two steps. [`SimDisk::cut_after`] arms it: after that many more
//! mutating calls the machine is dead, and every later call (reads included) fails with `EIO`,
//! so the code under test can acknowledge nothing more. [`SimDisk::crash`] then computes the
//! state after the reboot, from the durable state and the pending operations, per
//! [`CrashMode`]: with [`CrashMode::Random`], each pending write of each file is (seeded)
//! dropped, kept, or torn at a sector boundary (a prefix of its sectors kept), each pending
//! length change kept or dropped, independently, so later writes can survive earlier ones as the
//! page cache's write-back allows; and each directory keeps a seeded prefix of its pending entry
//! operations (often none: the entries of a directory that was not synced are gone), as an
//! ordered metadata journal would. Files no durable entry reaches are gone. Every handle opened
//! before the crash is stale afterwards (the process died with the machine).
//!
//! Faults: [`SimDisk::inject`] makes chosen calls fail with `ENOSPC` or `EIO`. A failed write
//! writes nothing. A failed file sync behaves as Linux does after an `fsync` error: the pending
//! data is dropped from what will survive a crash (reads still see it), and a later sync of the
//! same file succeeds, so code that retries a failed fsync and carries on loses data that it
//! believes durable: the PostgreSQL "fsyncgate" lesson, which the power-cut tests check.
//!
//! Determinism: every choice comes from the seed and the cut number, drawn in the order of file
//! and directory creation, so the same sequence of calls with the same seed gives the same state
//! after a crash. (When several threads issue calls, their interleaving, and so the sequence,
//! may differ from run to run; the possible outcomes are the same.)
//!
//! Limits: a simulated disk lives in memory (tests keep files small); there are no permissions,
//! links or timestamps; a rename between two directories is a removal in one and an insertion in
//! the other, each durable with its own directory.

mod file;
mod state;

use crate::io::{DirEntry, Disk, DiskFile, Metadata, OpenMode};
use file::SimFile;
use parking_lot::Mutex;
use state::{
    apply, apply_dir, collect_garbage, crash_choice, not_found, Choice, DirNode, DirOp, Draws,
    FaultState, FileNode, Node, Pending, State,
};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Default sector size: a torn write keeps a whole number of these.
pub const DEFAULT_SECTOR_BYTES: u64 = 512;

/// What survives of the unsynced state at [`SimDisk::crash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Seeded: each pending write dropped, kept or torn at a sector boundary; each directory
    /// keeps a prefix of its pending entry operations (see the module docs).
    Random,
    /// Everything written survives, entries included (what a process crash without a power cut
    /// leaves: the page cache survives).
    KeepAll,
    /// Only what was synced survives.
    DropAll,
    /// Everything survives except that the last pending write of each file is torn inside its
    /// last sector: a seeded number of that sector's new bytes reached the disk, the rest of the
    /// sector keeps its old bytes.
    TornLastSector,
}

/// Which calls a [`Fault`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    /// `write_at` (and so appends).
    Write,
    /// `sync_data` and `sync_all` of a file.
    SyncFile,
    /// `sync_dir`.
    SyncDir,
    /// Creating a file or a directory.
    Create,
    /// `rename`.
    Rename,
    /// `set_len`.
    SetLen,
}

/// The error a [`Fault`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultError {
    /// `ENOSPC`: no space left on the device.
    NoSpace,
    /// `EIO`: an I/O error.
    Io,
}

impl FaultError {
    pub(super) fn to_error(self, what: &str, path: &Path) -> io::Error {
        let code = match self {
            FaultError::NoSpace => libc::ENOSPC,
            FaultError::Io => libc::EIO,
        };
        let os = io::Error::from_raw_os_error(code);
        io::Error::new(
            os.kind(),
            format!("{os} (simulated fault on {what} of {})", path.display()),
        )
    }
}

/// A fault to inject: fail matching calls with `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Which calls.
    pub op: FaultOp,
    /// Only calls on paths containing this text (empty: any path).
    pub path_contains: String,
    /// Let this many matching calls pass first.
    pub skip: u64,
    /// Fail this many matching calls, then stop; `None`: until [`SimDisk::clear_faults`].
    pub times: Option<u64>,
    /// The error returned.
    pub error: FaultError,
}

impl Fault {
    /// Fails the next matching call once.
    pub fn once(op: FaultOp, path_contains: &str, error: FaultError) -> Fault {
        Fault {
            op,
            path_contains: path_contains.to_string(),
            skip: 0,
            times: Some(1),
            error,
        }
    }

    /// Fails every matching call from now until the faults are cleared.
    pub fn always(op: FaultOp, path_contains: &str, error: FaultError) -> Fault {
        Fault {
            op,
            path_contains: path_contains.to_string(),
            skip: 0,
            times: None,
            error,
        }
    }
}

/// What [`SimDisk::crash`] did to the unsynced state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CrashReport {
    /// Pending writes and length changes that survived whole.
    pub writes_kept: u64,
    /// Pending writes and length changes that were lost.
    pub writes_dropped: u64,
    /// Pending writes of which only a part survived.
    pub writes_torn: u64,
    /// Pending directory entry operations that survived.
    pub entries_kept: u64,
    /// Pending directory entry operations that were lost.
    pub entries_dropped: u64,
}

/// A simulated disk (see the module docs). Cheap to clone: clones share the disk.
#[derive(Debug, Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

impl SimDisk {
    /// An empty disk (just `/`) whose crash choices derive from `seed`, with 512-byte sectors.
    pub fn new(seed: u64) -> SimDisk {
        SimDisk::with_sector_bytes(seed, DEFAULT_SECTOR_BYTES)
    }

    /// [`SimDisk::new`] with another sector size (a power of two).
    pub fn with_sector_bytes(seed: u64, sector_bytes: u64) -> SimDisk {
        assert!(
            sector_bytes.is_power_of_two(),
            "sector size must be a power of two"
        );
        let mut dirs = BTreeMap::new();
        dirs.insert(1, DirNode::default());
        SimDisk {
            state: Arc::new(Mutex::new(State {
                seed,
                sector_bytes,
                files: BTreeMap::new(),
                dirs,
                root: 1,
                next_id: 1,
                generation: 0,
                mutations: 0,
                cut_at: None,
                dead: false,
                faults: Vec::new(),
                faults_hit: 0,
                locks: BTreeMap::new(),
                next_handle: 0,
            })),
        }
    }

    /// This disk as the trait object the crates take.
    pub fn as_disk(&self) -> Arc<dyn Disk> {
        Arc::new(self.clone())
    }

    /// Mutating calls so far (writes, syncs, creations, renames, removals, length changes).
    pub fn mutations(&self) -> u64 {
        self.state.lock().mutations
    }

    /// Arms a power cut: `calls` more mutating calls succeed, then the machine is dead.
    pub fn cut_after(&self, calls: u64) {
        let mut state = self.state.lock();
        state.cut_at = Some(state.mutations + calls);
    }

    /// Whether the armed power cut has happened.
    pub fn is_dead(&self) -> bool {
        self.state.lock().dead
    }

    /// Kills the machine now (as `cut_after(0)` would at the next call).
    pub fn kill(&self) {
        self.state.lock().dead = true;
    }

    /// Injects a fault (faults are checked in the order they were injected).
    pub fn inject(&self, fault: Fault) {
        self.state.lock().faults.push(FaultState {
            fault,
            skipped: 0,
            failed: 0,
        });
    }

    /// Removes every fault ("space returns").
    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// How many calls injected faults have failed so far.
    pub fn faults_hit(&self) -> u64 {
        self.state.lock().faults_hit
    }

    /// The power cut and reboot: computes what survives per `mode` (see the module docs),
    /// makes it the current and durable state, drops unreachable files, and makes every handle
    /// opened before stale. The disk is alive again afterwards, with no cut armed and no faults.
    pub fn crash(&self, mode: CrashMode) -> CrashReport {
        let mut state = self.state.lock();
        state.generation += 1;
        let mut draws = Draws(state.seed ^ state.generation.wrapping_mul(0xA24B_AED4_963E_E407));
        let sector = state.sector_bytes;
        let mut report = CrashReport::default();
        for file in state.files.values_mut() {
            let mut image = std::mem::take(&mut file.durable);
            let pending = std::mem::take(&mut file.pending);
            let last_write = pending
                .iter()
                .rposition(|op| matches!(op, Pending::Write { .. }));
            for (index, op) in pending.iter().enumerate() {
                let torn_last = mode == CrashMode::TornLastSector && Some(index) == last_write;
                match crash_choice(mode, op, sector, torn_last, &mut draws) {
                    Choice::Keep => {
                        report.writes_kept += 1;
                        apply(&mut image, op);
                    }
                    Choice::Drop => report.writes_dropped += 1,
                    Choice::Prefix(keep) => {
                        report.writes_torn += 1;
                        if let Pending::Write { offset, data } = op {
                            apply(
                                &mut image,
                                &Pending::Write {
                                    offset: *offset,
                                    data: data[..keep].to_vec(),
                                },
                            );
                        }
                    }
                }
            }
            file.current = image.clone();
            file.durable = image;
        }
        for dir in state.dirs.values_mut() {
            let pending = std::mem::take(&mut dir.pending);
            let keep = match mode {
                CrashMode::KeepAll | CrashMode::TornLastSector => pending.len(),
                CrashMode::DropAll => 0,
                // Half the time nothing unsynced survives; otherwise an ordered prefix.
                CrashMode::Random if pending.is_empty() || draws.below(2) == 0 => 0,
                CrashMode::Random => draws.below(pending.len() as u64 + 1) as usize,
            };
            let mut entries = std::mem::take(&mut dir.durable);
            for op in &pending[..keep] {
                apply_dir(&mut entries, op);
            }
            report.entries_kept += keep as u64;
            report.entries_dropped += (pending.len() - keep) as u64;
            dir.current = entries.clone();
            dir.durable = entries;
        }
        collect_garbage(&mut state);
        state.dead = false;
        state.cut_at = None;
        state.faults.clear();
        state.locks.clear();
        report
    }

    /// Removes the file (or, with `dir`, the empty directory) at `path`.
    fn remove(&self, path: &Path, dir: bool) -> io::Result<()> {
        let mut state = self.state.lock();
        state.alive()?;
        let refused = match state.lookup(path)? {
            Node::File(_) if dir => Some((io::ErrorKind::NotADirectory, "is not a directory")),
            Node::Dir(_) if !dir => Some((io::ErrorKind::IsADirectory, "is a directory")),
            Node::Dir(id) if !state.dirs[&id].current.is_empty() => {
                Some((io::ErrorKind::DirectoryNotEmpty, "is not empty"))
            }
            _ => None,
        };
        if let Some((kind, why)) = refused {
            return Err(io::Error::new(kind, format!("{} {why}", path.display())));
        }
        let (parent, name) = state.parent(path)?;
        state.mutate()?;
        state.dir_op(parent, DirOp::Remove(name));
        Ok(())
    }

    /// The current content of the file at `path` (for tests that damage or inspect files).
    pub fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = self.state.lock();
        match state.lookup(path)? {
            Node::File(id) => Ok(state.files[&id].current.clone()),
            Node::Dir(_) => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory", path.display()),
            )),
        }
    }

    /// Overwrites bytes of the file at `path`, durably, outside any call accounting (a test's
    /// way to model media corruption).
    pub fn corrupt(&self, path: &Path, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        let Node::File(id) = state.lookup(path)? else {
            return Err(not_found(path));
        };
        let file = state.file(id);
        let op = Pending::Write {
            offset,
            data: bytes.to_vec(),
        };
        apply(&mut file.current, &op);
        apply(&mut file.durable, &op);
        Ok(())
    }
}

impl Disk for SimDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn DiskFile>> {
        let mut state = self.state.lock();
        state.alive()?;
        let id = match (state.lookup(path), mode) {
            (Ok(_), OpenMode::CreateNew) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} already exists", path.display()),
                ))
            }
            (Ok(Node::File(id)), _) => id,
            (Ok(Node::Dir(_)), _) => {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    format!("{} is a directory", path.display()),
                ))
            }
            (Err(error), mode) if error.kind() == io::ErrorKind::NotFound && mode.creates() => {
                let (dir, name) = state.parent(path)?;
                state.mutate()?;
                state.fault(FaultOp::Create, "create", path)?;
                let id = state.new_id();
                state.files.insert(id, FileNode::default());
                state.dir_op(dir, DirOp::Insert(name, Node::File(id)));
                id
            }
            (Err(error), _) => return Err(error),
        };
        state.next_handle += 1;
        Ok(Arc::new(SimFile {
            state: Arc::clone(&self.state),
            id,
            generation: state.generation,
            handle: state.next_handle,
            path: path.to_path_buf(),
            writable: mode != OpenMode::Read,
            direct: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        state.alive()?;
        if state.lookup(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", path.display()),
            ));
        }
        let (dir, name) = state.parent(path)?;
        state.mutate()?;
        state.fault(FaultOp::Create, "create_dir", path)?;
        let id = state.new_id();
        state.dirs.insert(id, DirNode::default());
        state.dir_op(dir, DirOp::Insert(name, Node::Dir(id)));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        state.alive()?;
        let node = state.lookup(from)?;
        let (from_dir, from_name) = state.parent(from)?;
        let (to_dir, to_name) = state.parent(to)?;
        if let Ok(Node::Dir(existing)) = state.lookup(to) {
            if !state.dirs[&existing].current.is_empty() || matches!(node, Node::File(_)) {
                return Err(io::Error::new(
                    io::ErrorKind::DirectoryNotEmpty,
                    format!("cannot rename onto the directory {}", to.display()),
                ));
            }
        }
        state.mutate()?;
        state.fault(FaultOp::Rename, "rename", from)?;
        if from_dir == to_dir {
            state.dir_op(
                from_dir,
                DirOp::Rename {
                    from: from_name,
                    to: to_name,
                    node,
                },
            );
        } else {
            state.dir_op(from_dir, DirOp::Remove(from_name));
            state.dir_op(to_dir, DirOp::Insert(to_name, node));
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.remove(path, false)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.remove(path, true)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let state = self.state.lock();
        state.alive()?;
        let Node::Dir(id) = state.lookup(dir)? else {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", dir.display()),
            ));
        };
        Ok(state.dirs[&id]
            .current
            .iter()
            .map(|(name, node)| DirEntry {
                name: name.clone(),
                is_dir: matches!(node, Node::Dir(_)),
            })
            .collect())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        state.alive()?;
        let Node::Dir(id) = state.lookup(path)? else {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", path.display()),
            ));
        };
        state.mutate()?;
        state.fault(FaultOp::SyncDir, "fsync of the directory", path)?;
        let dir = state.dirs.get_mut(&id).expect("looked up");
        dir.pending.clear();
        dir.durable = dir.current.clone();
        Ok(())
    }

    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        let state = self.state.lock();
        state.alive()?;
        Ok(match state.lookup(path)? {
            Node::File(id) => Metadata {
                len: state.files[&id].current.len() as u64,
                is_dir: false,
            },
            Node::Dir(_) => Metadata {
                len: 0,
                is_dir: true,
            },
        })
    }

    fn kind(&self) -> &'static str {
        "simulated"
    }
}
