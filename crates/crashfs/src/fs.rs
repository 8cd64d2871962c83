//! The FUSE side: a passthrough filesystem over a backing directory whose file data goes
//! through an [`Overlay`] per inode until the file is fsynced.
//!
//! Namespace operations (create, mkdir, rename, unlink, rmdir) go to the backing directory at
//! once and are never lost: this filesystem models lost *data*, not lost directory entries
//! (`prefixkv-storage`'s `SimDisk` covers those). `fsyncdir` therefore has nothing to do.
//!
//! The kernel must not cache what a crash can take back, so files are opened with
//! `FOPEN_DIRECT_IO` (no page cache: every read reaches [`Overlay::read`]) and attribute and
//! entry replies have a zero TTL (sizes are asked for again after a crash). Release and flush
//! persist nothing: closing a file (or the process dying) is not a sync, as on a real disk.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::overlay::Overlay;

/// Name of the control file in the root directory: write `crash` to cut the power; read it for
/// counters.
pub const CONTROL_NAME: &str = ".crashfs-control";
const CONTROL_INO: u64 = u64::MAX - 1;
/// Nothing is cached in the kernel: a crash changes sizes behind its back.
const TTL: Duration = Duration::ZERO;

struct Handle {
    ino: u64,
    file: File,
    /// Opened with O_SYNC/O_DSYNC: every write is synced before it is acknowledged.
    sync_writes: bool,
}

#[derive(Default)]
struct State {
    /// Inode number to path relative to the backing root ("" is the root).
    paths: HashMap<u64, PathBuf>,
    inos: HashMap<PathBuf, u64>,
    next_ino: u64,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    /// Open handles per inode, to know when an unlinked inode's overlay can go.
    open_count: HashMap<u64, u32>,
    overlays: HashMap<u64, Overlay>,
    unsynced: u64,
    crashes: u64,
    syncs: u64,
    enospc: u64,
}

/// The filesystem: one mutex around all state. Simple and enough for a test tool; an fsync
/// holds it while the backing file syncs, which serialises I/O but never loses an update.
pub struct CrashFs {
    root: PathBuf,
    max_unsynced: u64,
    state: Mutex<State>,
}

fn kind_of(m: &fs::Metadata) -> FileType {
    let t = m.file_type();
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    }
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

impl CrashFs {
    pub fn new(root: PathBuf, max_unsynced: u64) -> Self {
        let mut st = State {
            next_ino: 2,
            next_fh: 1,
            ..State::default()
        };
        st.paths.insert(1, PathBuf::new());
        st.inos.insert(PathBuf::new(), 1);
        CrashFs {
            root,
            max_unsynced,
            state: Mutex::new(st),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic in one request must not wedge the mount; the state stays consistent
        // because every mutation completes before a fallible call.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn real(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    /// Drops every overlay: the simulated power cut.
    fn crash(&self, st: &mut State) {
        let lost = st.unsynced;
        st.overlays.clear();
        st.unsynced = 0;
        st.crashes += 1;
        eprintln!(
            "crashfs: CRASH #{}: dropped {lost} unsynced bytes",
            st.crashes
        );
    }

    fn control_text(&self, st: &State) -> String {
        format!(
            "crashes {}\nunsynced_bytes {}\nmax_unsynced_bytes {}\nsyncs {}\nenospc {}\n",
            st.crashes, st.unsynced, self.max_unsynced, st.syncs, st.enospc
        )
    }

    fn control_attr(&self, st: &State) -> FileAttr {
        let mut a = attr_from(
            CONTROL_INO,
            &fs::metadata(&self.root).expect("backing root"),
        );
        a.kind = FileType::RegularFile;
        a.perm = 0o600;
        a.nlink = 1;
        a.size = self.control_text(st).len() as u64;
        a
    }

    fn ino_for(st: &mut State, rel: PathBuf) -> u64 {
        if let Some(&i) = st.inos.get(&rel) {
            return i;
        }
        let i = st.next_ino;
        st.next_ino += 1;
        st.paths.insert(i, rel.clone());
        st.inos.insert(rel, i);
        i
    }

    fn child(st: &State, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(st.paths.get(&parent.0).ok_or(Errno::ENOENT)?.join(name))
    }

    /// Attributes from the backing file with the overlay's length on top.
    fn attr(&self, st: &State, ino: u64, m: &fs::Metadata) -> FileAttr {
        let mut a = attr_from(ino, m);
        if let Some(o) = st.overlays.get(&ino) {
            a.size = o.len();
            a.blocks = o.len().div_ceil(512);
        }
        a
    }

    fn entry(&self, st: &mut State, rel: PathBuf) -> Result<FileAttr, Errno> {
        let m = fs::symlink_metadata(self.real(&rel)).map_err(errno)?;
        let ino = Self::ino_for(st, rel);
        Ok(self.attr(st, ino, &m))
    }

    /// Forgets a path whose directory entry is gone; its overlay goes when no handle is open.
    fn forget_path(st: &mut State, rel: &Path) {
        if let Some(ino) = st.inos.remove(rel) {
            st.paths.remove(&ino);
            if st.open_count.get(&ino).copied().unwrap_or(0) == 0 {
                if let Some(o) = st.overlays.remove(&ino) {
                    st.unsynced -= o.unsynced_bytes();
                }
            }
        }
    }

    /// `unlink` and `rmdir`: removes the backing entry with `remove`, then forgets its path.
    fn remove_entry(
        &self,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
        remove: impl FnOnce(&Path) -> std::io::Result<()>,
    ) {
        let mut st = self.lock();
        let r = Self::child(&st, parent, name).and_then(|rel| {
            remove(&self.real(&rel)).map_err(errno)?;
            Self::forget_path(&mut st, &rel);
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// The overlay of `ino`, created over the backing file's current length on first use.
    fn overlay<'a>(st: &'a mut State, ino: u64, file: &File) -> std::io::Result<&'a mut Overlay> {
        Ok(match st.overlays.entry(ino) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Overlay::new(file.metadata()?.len()))
            }
        })
    }

    fn apply_delta(st: &mut State, delta: i64) {
        st.unsynced = st
            .unsynced
            .checked_add_signed(delta)
            .expect("unsynced byte count");
    }

    fn open_handle(&self, st: &mut State, ino: u64, rel: &Path, flags: i32) -> Result<u64, Errno> {
        // Always read-write on the backing side: an fsync through a read-only handle must
        // still be able to write the inode's overlay out. O_TRUNC is a data change, so it
        // goes to the overlay instead of the backing file.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.real(rel))
            .map_err(errno)?;
        if flags & libc::O_TRUNC != 0 {
            let o = Self::overlay(st, ino, &file).map_err(errno)?;
            let d = o.truncate(0);
            Self::apply_delta(st, d);
        }
        let sync_writes = flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
        let fh = st.next_fh;
        st.next_fh += 1;
        st.handles.insert(
            fh,
            Handle {
                ino,
                file,
                sync_writes,
            },
        );
        *st.open_count.entry(ino).or_default() += 1;
        Ok(fh)
    }

    fn sync_ino(st: &mut State, ino: u64, file: &File, data_only: bool) -> Result<(), Errno> {
        st.syncs += 1;
        if let Some(o) = st.overlays.get_mut(&ino) {
            let before = o.unsynced_bytes();
            o.sync_to(file, data_only).map_err(errno)?;
            st.unsynced -= before;
            st.overlays.remove(&ino);
            Ok(())
        } else {
            // Nothing unsynced; still sync the backing file so a sync costs what it should.
            if data_only {
                file.sync_data()
            } else {
                file.sync_all()
            }
            .map_err(errno)
        }
    }
}

fn attr_from(ino: u64, m: &fs::Metadata) -> FileAttr {
    let t = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns as u32);
    FileAttr {
        ino: INodeNo(ino),
        size: m.len(),
        blocks: m.blocks(),
        atime: t(m.atime(), m.atime_nsec()),
        mtime: t(m.mtime(), m.mtime_nsec()),
        ctime: t(m.ctime(), m.ctime_nsec()),
        crtime: t(m.ctime(), m.ctime_nsec()),
        kind: kind_of(m),
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: m.rdev() as u32,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for CrashFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.lock();
        if parent == INodeNo::ROOT && name == CONTROL_NAME {
            return reply.entry(&TTL, &self.control_attr(&st), Generation(0));
        }
        let r = Self::child(&st, parent, name).and_then(|rel| self.entry(&mut st, rel));
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let st = self.lock();
        if ino.0 == CONTROL_INO {
            return reply.attr(&TTL, &self.control_attr(&st));
        }
        // Through the handle when there is one: the file may be unlinked but open.
        let m = match fh.and_then(|fh| st.handles.get(&fh.0)) {
            Some(h) => h.file.metadata(),
            None => match st.paths.get(&ino.0) {
                Some(rel) => fs::symlink_metadata(self.real(rel)),
                None => return reply.error(Errno::ENOENT),
            },
        };
        match m {
            Ok(m) => reply.attr(&TTL, &self.attr(&st, ino.0, &m)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.lock();
        if ino.0 == CONTROL_INO {
            return reply.attr(&TTL, &self.control_attr(&st));
        }
        let Some(rel) = st.paths.get(&ino.0).cloned() else {
            return reply.error(Errno::ENOENT);
        };
        let real = self.real(&rel);
        if let Some(mode) = mode {
            if let Err(e) = fs::set_permissions(&real, fs::Permissions::from_mode(mode & 0o7777)) {
                return reply.error(errno(e));
            }
        }
        if let Some(size) = size {
            // ftruncate is a data change: it waits in the overlay for the next fsync.
            let file = match fh.and_then(|fh| st.handles.get(&fh.0)) {
                Some(h) => h.file.try_clone(),
                None => OpenOptions::new().read(true).write(true).open(&real),
            };
            let r = file.and_then(|f| {
                let o = Self::overlay(&mut st, ino.0, &f)?;
                Ok(o.truncate(size))
            });
            match r {
                Ok(d) => Self::apply_delta(&mut st, d),
                Err(e) => return reply.error(errno(e)),
            }
        }
        match fs::symlink_metadata(&real) {
            Ok(m) => reply.attr(&TTL, &self.attr(&st, ino.0, &m)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut st = self.lock();
        let r = Self::child(&st, parent, name).and_then(|rel| {
            fs::DirBuilder::new()
                .mode(mode & !umask)
                .create(self.real(&rel))
                .map_err(errno)?;
            self.entry(&mut st, rel)
        });
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove_entry(parent, name, reply, |path| fs::remove_file(path));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove_entry(parent, name, reply, |path| fs::remove_dir(path));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            // RENAME_EXCHANGE/NOREPLACE are not needed by the server; say so rather than guess.
            return reply.error(Errno::EINVAL);
        }
        let mut st = self.lock();
        let r = (|| {
            let from = Self::child(&st, parent, name)?;
            let to = Self::child(&st, newparent, newname)?;
            if from == to {
                return Ok(());
            }
            fs::rename(self.real(&from), self.real(&to)).map_err(errno)?;
            // The replaced target's inode is gone; then move `from` and everything under it.
            Self::forget_path(&mut st, &to);
            let moved: Vec<(u64, PathBuf)> = st
                .paths
                .iter()
                .filter(|(_, p)| p.starts_with(&from) && !from.as_os_str().is_empty())
                .map(|(&i, p)| (i, to.join(p.strip_prefix(&from).expect("prefix"))))
                .collect();
            for (i, new) in moved {
                let old = st.paths.insert(i, new.clone()).expect("listed");
                st.inos.remove(&old);
                st.inos.insert(new, i);
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut st = self.lock();
        if ino.0 == CONTROL_INO {
            return reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
        }
        let Some(rel) = st.paths.get(&ino.0).cloned() else {
            return reply.error(Errno::ENOENT);
        };
        match self.open_handle(&mut st, ino.0, &rel, flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.lock();
        let r = (|| {
            let rel = Self::child(&st, parent, name)?;
            let mut o = OpenOptions::new();
            o.write(true).create(true).mode(mode & !umask);
            if flags & libc::O_EXCL != 0 {
                o.create_new(true);
            }
            drop(o.open(self.real(&rel)).map_err(errno)?);
            let a = self.entry(&mut st, rel.clone())?;
            let fh = self.open_handle(&mut st, a.ino.0, &rel, flags)?;
            Ok((a, fh))
        })();
        match r {
            Ok((a, fh)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let st = self.lock();
        if ino.0 == CONTROL_INO {
            let text = self.control_text(&st).into_bytes();
            let from = (offset as usize).min(text.len());
            let to = (from + size as usize).min(text.len());
            return reply.data(&text[from..to]);
        }
        let Some(h) = st.handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let r = match st.overlays.get(&h.ino) {
            Some(o) => o.read(&h.file, offset, size as usize),
            None => {
                let mut buf = vec![0; size as usize];
                crate::overlay::Backing::read_at(&h.file, &mut buf, offset).map(|n| {
                    buf.truncate(n);
                    buf
                })
            }
        };
        match r {
            Ok(data) => reply.data(&data),
            Err(e) => {
                eprintln!("crashfs: read of inode {} failed: {e}", h.ino);
                reply.error(Errno::EIO)
            }
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut st = self.lock();
        if ino.0 == CONTROL_INO {
            return match std::str::from_utf8(data).map(str::trim) {
                Ok("crash") => {
                    self.crash(&mut st);
                    reply.written(data.len() as u32)
                }
                other => {
                    eprintln!("crashfs: unknown control command {other:?} (known: crash)");
                    reply.error(Errno::EINVAL)
                }
            };
        }
        // Bounded memory: refuse rather than grow without limit (a full disk, as it were).
        if st.unsynced + data.len() as u64 > self.max_unsynced {
            st.enospc += 1;
            eprintln!(
                "crashfs: ENOSPC: {} unsynced bytes + a write of {} exceed the cap of {} (--max-unsynced)",
                st.unsynced,
                data.len(),
                self.max_unsynced
            );
            return reply.error(Errno::ENOSPC);
        }
        let Some(h) = st.handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let (hino, sync_writes) = (h.ino, h.sync_writes);
        let file = match h.file.try_clone() {
            Ok(f) => f,
            Err(e) => return reply.error(errno(e)),
        };
        let r = Self::overlay(&mut st, hino, &file).map(|o| o.write(offset, data));
        match r {
            Ok(d) => Self::apply_delta(&mut st, d),
            Err(e) => return reply.error(errno(e)),
        }
        if sync_writes {
            if let Err(e) = Self::sync_ino(&mut st, hino, &file, false) {
                return reply.error(e);
            }
        }
        reply.written(data.len() as u32)
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() is not a sync: nothing to do.
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        if let Some(h) = st.handles.remove(&fh.0) {
            let n = st.open_count.get_mut(&h.ino).expect("counted at open");
            *n -= 1;
            if *n == 0 {
                st.open_count.remove(&h.ino);
                // Unlinked while open: the last close ends the inode and its unsynced data.
                if !st.paths.contains_key(&h.ino) {
                    if let Some(o) = st.overlays.remove(&h.ino) {
                        st.unsynced -= o.unsynced_bytes();
                    }
                }
            }
        }
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        if ino.0 == CONTROL_INO {
            return reply.ok();
        }
        let Some(h) = st.handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let (hino, file) = match h.file.try_clone() {
            Ok(f) => (h.ino, f),
            Err(e) => return reply.error(errno(e)),
        };
        match Self::sync_ino(&mut st, hino, &file, datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ds: bool,
        reply: ReplyEmpty,
    ) {
        // Directory entries are never lost in this model (see the module doc).
        reply.ok()
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut st = self.lock();
        let Some(rel) = st.paths.get(&ino.0).cloned() else {
            return reply.error(Errno::ENOENT);
        };
        let rd = match fs::read_dir(self.real(&rel)) {
            Ok(rd) => rd,
            Err(e) => return reply.error(errno(e)),
        };
        let mut entries = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        for e in rd {
            let Ok(e) = e else { continue };
            let Ok(m) = e.metadata() else { continue };
            let i = Self::ino_for(&mut st, rel.join(e.file_name()));
            entries.push((i, kind_of(&m), e.file_name()));
        }
        for (n, (i, k, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(i), n as u64 + 1, k, name) {
                break;
            }
        }
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // The backing filesystem's figures, so free-space checks see a real disk.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let path = std::ffi::CString::new(self.root.as_os_str().as_encoded_bytes())
            .expect("no NUL in path");
        // SAFETY: `path` is a valid C string and `s` a properly sized out-parameter.
        if unsafe { libc::statvfs(path.as_ptr(), &mut s) } != 0 {
            return reply.error(errno(std::io::Error::last_os_error()));
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            255,
            s.f_frsize as u32,
        )
    }
}
