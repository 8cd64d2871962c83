//! The simulated disk's state: files (current, durable, pending writes), directories (current,
//! durable, pending entry operations), the crash choices, and name resolution. See `mod.rs` for
//! the fault model.
//!
//! Invariant: `durable` plus the pending operations in order give `current`, for every file and
//! every directory, except after a failed sync, which drops a file's pending operations without
//! making them durable (Linux's behaviour after an `fsync` error).

use super::{CrashMode, Fault, FaultOp};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Node {
    File(u64),
    Dir(u64),
}

#[derive(Debug, Clone)]
pub(super) enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone)]
pub(super) enum DirOp {
    Insert(String, Node),
    Remove(String),
    Rename {
        from: String,
        to: String,
        node: Node,
    },
}

#[derive(Debug, Default)]
pub(super) struct FileNode {
    pub(super) current: Vec<u8>,
    pub(super) durable: Vec<u8>,
    pub(super) pending: Vec<Pending>,
}

#[derive(Debug, Default)]
pub(super) struct DirNode {
    pub(super) current: BTreeMap<String, Node>,
    pub(super) durable: BTreeMap<String, Node>,
    pub(super) pending: Vec<DirOp>,
}

#[derive(Debug)]
pub(super) struct FaultState {
    pub(super) fault: Fault,
    pub(super) skipped: u64,
    pub(super) failed: u64,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) seed: u64,
    pub(super) sector_bytes: u64,
    pub(super) files: BTreeMap<u64, FileNode>,
    pub(super) dirs: BTreeMap<u64, DirNode>,
    pub(super) root: u64,
    pub(super) next_id: u64,
    pub(super) generation: u64,
    pub(super) mutations: u64,
    pub(super) cut_at: Option<u64>,
    pub(super) dead: bool,
    pub(super) faults: Vec<FaultState>,
    pub(super) faults_hit: u64,
    pub(super) locks: BTreeMap<u64, u64>,
    pub(super) next_handle: u64,
}

pub(super) fn apply(bytes: &mut Vec<u8>, op: &Pending) {
    match op {
        Pending::Write { offset, data } => {
            let start = *offset as usize;
            let end = start + data.len();
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[start..end].copy_from_slice(data);
        }
        Pending::SetLen(len) => bytes.resize(*len as usize, 0),
    }
}

pub(super) fn apply_dir(entries: &mut BTreeMap<String, Node>, op: &DirOp) {
    match op {
        DirOp::Insert(name, node) => {
            entries.insert(name.clone(), *node);
        }
        DirOp::Remove(name) => {
            entries.remove(name);
        }
        DirOp::Rename { from, to, node } => {
            entries.remove(from);
            entries.insert(to.clone(), *node);
        }
    }
}

/// splitmix64, seeded per crash.
pub(super) struct Draws(pub(super) u64);

impl Draws {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(bound.max(1))) >> 64) as u64
    }
}

pub(super) fn stale() -> io::Error {
    io::Error::other(
        "stale simulated file handle: the simulated machine lost power since it was opened",
    )
}

pub(super) fn dead() -> io::Error {
    let os = io::Error::from_raw_os_error(libc::EIO);
    io::Error::new(
        os.kind(),
        format!("{os} (simulated power cut: the disk accepts no more calls)"),
    )
}

pub(super) fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found on the simulated disk", path.display()),
    )
}

/// The names of `path`'s components, `.` and `..` resolved, relative paths taken from `/`.
pub(super) fn components(path: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => names.push(name.to_string_lossy().into_owned()),
            Component::ParentDir => {
                names.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    names
}

impl State {
    pub(super) fn lookup(&self, path: &Path) -> io::Result<Node> {
        let mut node = Node::Dir(self.root);
        for name in components(path) {
            let Node::Dir(dir) = node else {
                return Err(not_found(path));
            };
            node = *self.dirs[&dir]
                .current
                .get(&name)
                .ok_or_else(|| not_found(path))?;
        }
        Ok(node)
    }

    /// The directory holding `path` and `path`'s last name.
    pub(super) fn parent(&self, path: &Path) -> io::Result<(u64, String)> {
        let mut names = components(path);
        let name = names.pop().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the root of the simulated disk has no parent",
            )
        })?;
        let parent: PathBuf = names.iter().collect();
        match self.lookup(&Path::new("/").join(parent))? {
            Node::Dir(dir) => Ok((dir, name)),
            Node::File(_) => Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("a parent of {} is a file", path.display()),
            )),
        }
    }

    pub(super) fn alive(&self) -> io::Result<()> {
        if self.dead {
            Err(dead())
        } else {
            Ok(())
        }
    }

    /// Counts one mutating call; kills the machine when the armed cut is reached.
    pub(super) fn mutate(&mut self) -> io::Result<()> {
        self.alive()?;
        self.mutations += 1;
        if self.cut_at.is_some_and(|cut| self.mutations > cut) {
            self.dead = true;
            return Err(dead());
        }
        Ok(())
    }

    pub(super) fn fault(&mut self, op: FaultOp, what: &str, path: &Path) -> io::Result<()> {
        let text = path.to_string_lossy();
        for state in &mut self.faults {
            if state.fault.op != op || !text.contains(&state.fault.path_contains) {
                continue;
            }
            if state.skipped < state.fault.skip {
                state.skipped += 1;
                continue;
            }
            if state.fault.times.is_some_and(|times| state.failed >= times) {
                continue;
            }
            state.failed += 1;
            self.faults_hit += 1;
            return Err(state.fault.error.to_error(what, path));
        }
        Ok(())
    }

    pub(super) fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(super) fn file(&mut self, id: u64) -> &mut FileNode {
        self.files.get_mut(&id).expect("open files exist")
    }

    pub(super) fn dir_op(&mut self, dir: u64, op: DirOp) {
        let node = self.dirs.get_mut(&dir).expect("parent directory exists");
        apply_dir(&mut node.current, &op);
        node.pending.push(op);
    }
}

pub(super) enum Choice {
    Keep,
    Drop,
    /// Keep the first this many bytes of the write.
    Prefix(usize),
}

pub(super) fn crash_choice(
    mode: CrashMode,
    op: &Pending,
    sector: u64,
    torn_last: bool,
    draws: &mut Draws,
) -> Choice {
    match (mode, op) {
        (CrashMode::KeepAll, _) => Choice::Keep,
        (CrashMode::DropAll, _) => Choice::Drop,
        (CrashMode::TornLastSector, Pending::Write { offset, data }) if torn_last => {
            let end = offset + data.len() as u64;
            let last_sector_start = ((end - 1) / sector * sector).max(*offset);
            let in_last = end - last_sector_start;
            if in_last <= 1 {
                return Choice::Drop;
            }
            let kept_in_last = 1 + draws.below(in_last - 1);
            Choice::Prefix((last_sector_start - offset + kept_in_last) as usize)
        }
        (CrashMode::TornLastSector, _) => Choice::Keep,
        (CrashMode::Random, Pending::SetLen(_)) => {
            if draws.below(2) == 0 {
                Choice::Keep
            } else {
                Choice::Drop
            }
        }
        (CrashMode::Random, Pending::Write { offset, data }) => {
            let end = offset + data.len() as u64;
            let first_boundary = (offset / sector + 1) * sector;
            let boundaries = if first_boundary < end {
                (end - 1 - first_boundary) / sector + 1
            } else {
                0
            };
            match draws.below(if boundaries > 0 { 4 } else { 2 }) {
                0 => Choice::Drop,
                1 => Choice::Keep,
                _ => {
                    let boundary = first_boundary + draws.below(boundaries) * sector;
                    Choice::Prefix((boundary - offset) as usize)
                }
            }
        }
    }
}

/// Drops files and directories that no entry reaches from the root any more.
pub(super) fn collect_garbage(state: &mut State) {
    let mut reachable_dirs = BTreeSet::new();
    let mut reachable_files = BTreeSet::new();
    let mut stack = vec![state.root];
    while let Some(dir) = stack.pop() {
        if !reachable_dirs.insert(dir) {
            continue;
        }
        for node in state.dirs[&dir].current.values() {
            match node {
                Node::Dir(child) => stack.push(*child),
                Node::File(file) => {
                    reachable_files.insert(*file);
                }
            }
        }
    }
    state.dirs.retain(|id, _| reachable_dirs.contains(id));
    state.files.retain(|id, _| reachable_files.contains(id));
}
