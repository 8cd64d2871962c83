//! Startup recovery (checkpoint + oplog replay) and checkpoints (periodic, SAVE, BGSAVE,
//! BGREWRITEAOF, SHUTDOWN).
//!
//! Layout under `dir`: `checkpoints/` (the engine's), `oplog/` (segments, `LOCK`, and
//! `COVERED`).
//!
//! `COVERED` records, for each recent checkpoint version, the highest LSN whose operations the
//! checkpoint holds: just before a checkpoint starts we read `next_lsn - 1`; every record up to
//! it was appended after its engine operations completed (see `keyspace`), so those operations
//! precede every session's CPR point. The file is written (temp file, fsync, rename, fsync of
//! the directory) before `truncate_through` deletes anything, so a crash in between leaves both
//! the records and an older entry. Format: text lines `version lsn`, then `crc <hex CRC32C of
//! the lines before>`; a damaged file fails startup naming it.
//!
//! Recovery: the engine recovers its newest valid checkpoint v; replay starts after the LSN
//! recorded for v (or for the newest older version, or at the oldest record) and skips each
//! operation whose serial is within its session's commit point in v. Replaying absolute
//! writes in LSN order from any point at or before the covered LSN yields the final state,
//! because for every key the oplog order is the engine order.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use parking_lot::Mutex;
use prefixkv_engine::checkpoint_files::{CheckpointDirectory, ManifestKind};
use prefixkv_engine::{EngineError, SessionId, Store, StoreConfig, Strategy};
use prefixkv_oplog::{Oplog, SyncPolicy};

use crate::config::{Config, Durability};
use crate::keyspace::{self, Keyspace};

const COVERED_FILE: &str = "COVERED";
const COVERED_KEEP: usize = 8;

/// What the last checkpoint did.
#[derive(Clone, Debug, Default)]
pub struct CheckpointSummary {
    /// Engine version.
    pub version: u64,
    /// Duration in ms.
    pub duration_ms: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Records written.
    pub records: u64,
    /// Oplog LSN covered.
    pub covered_lsn: Option<u64>,
}

/// Checkpoint control shared by the periodic loop and the commands.
pub struct Persistence {
    /// The keyspace.
    pub keyspace: Arc<Keyspace>,
    /// Durability mode.
    pub durability: Durability,
    dir: PathBuf,
    run_lock: Mutex<()>,
    /// A BGSAVE/BGREWRITEAOF thread is running.
    pub background_running: AtomicBool,
    /// Unix seconds of the last successful checkpoint (startup time if none).
    pub last_save_unix: AtomicU64,
    /// Successful checkpoints since start.
    pub checkpoints_done: AtomicU64,
    /// The last checkpoint's figures.
    pub last_checkpoint: Mutex<Option<CheckpointSummary>>,
    /// The last checkpoint error, if the last attempt failed.
    pub last_error: Mutex<Option<String>>,
    /// What startup loaded, for INFO.
    pub loaded: Mutex<String>,
    shutdown: AtomicBool,
}

fn store_config(config: &Config) -> StoreConfig {
    StoreConfig {
        log_memory_bytes: config.engine_memory_bytes,
        log_page_bytes: 4 << 20,
        default_strategy: Strategy::Persian,
        checkpoint_write_bytes_per_s: (config.checkpoint_rate_bytes_per_s != 0)
            .then_some(config.checkpoint_rate_bytes_per_s),
        ..StoreConfig::new(config.dir.clone())
    }
}

fn oplog_config(durability: Durability) -> prefixkv_oplog::Config {
    prefixkv_oplog::Config {
        policy: match durability {
            Durability::Always => SyncPolicy::Always,
            _ => SyncPolicy::EverySec,
        },
        max_record_bytes: 64 << 20,
        ..prefixkv_oplog::Config::default()
    }
}

/// Opens the store, rebuilds the registry, replays the oplog. Returns the keyspace (with the
/// oplog installed when the mode logs) and a one-line report of what was loaded.
pub fn recover(config: &Config) -> anyhow::Result<(Keyspace, String)> {
    let started = Instant::now();
    std::fs::create_dir_all(&config.dir)
        .with_context(|| format!("creating data directory {}", config.dir.display()))?;
    lock_directory(&config.dir)?;
    let store = Store::open(store_config(config))
        .with_context(|| format!("recovering the engine store in {}", config.dir.display()))?;
    let mut keyspace = Keyspace::new(store.clone(), None);
    let mut report = String::new();
    let recovered = store.recovery_info().cloned();
    if let Some(info) = &recovered {
        // The server never resumes engine sessions across a restart (each request thread starts
        // a new one), so the recovered ones would otherwise ride along in every later manifest.
        for id in info.session_commit_points.keys() {
            store
                .forget_session(*id)
                .with_context(|| format!("forgetting recovered engine session {id}"))?;
        }
        let directory = CheckpointDirectory::open(&config.dir.join("checkpoints"))?;
        let verified = directory.select_for_recovery()?.ok_or_else(|| {
            anyhow!(
                "the engine recovered checkpoint v{} but it is gone from {}",
                info.version,
                config.dir.display()
            )
        })?;
        let content = &verified.manifest().content;
        if content.version != info.version {
            bail!(
                "checkpoint selection changed between engine recovery (v{}) and key registry rebuild (v{}) in {}",
                info.version,
                content.version,
                config.dir.display()
            );
        }
        let version = content.version;
        let failure: Mutex<Option<String>> = Mutex::new(None);
        let register = |key: &[u8], value: &[u8]| -> Result<(), EngineError> {
            keyspace.register_loaded(key, value).map_err(|detail| {
                failure.lock().get_or_insert(detail.clone());
                EngineError::InvalidArgument(detail)
            })
        };
        match content.kind {
            ManifestKind::KeyUnique => {
                verified.load_parallel(1, &|entry| {
                    if entry.tombstone {
                        return Ok(());
                    }
                    register(entry.key, entry.value)
                })?;
            }
            ManifestKind::LogOrdered => {
                verified.load_in_order(&mut |entry| {
                    if entry.record_version > version {
                        return Ok(());
                    }
                    if entry.tombstone {
                        keyspace.unregister_loaded(entry.key);
                        return Ok(());
                    }
                    register(entry.key, entry.value)
                })?;
            }
        }
        if let Some(detail) = failure.into_inner() {
            bail!(
                "checkpoint v{version} in {} holds a value the server cannot read: {detail}",
                verified.manifest().content.strategy
            );
        }
        report.push_str(&format!(
            "checkpoint v{} ({} records)",
            info.version, info.records
        ));
        if let Some(why) = &info.fell_back {
            report.push_str(&format!(" [fell back: {why}]"));
        }
    } else {
        report.push_str("no checkpoint");
    }

    let oplog_dir = config.dir.join("oplog");
    let uses_oplog = config.durability.uses_oplog();
    if uses_oplog || oplog_dir.exists() {
        let (oplog, open_report) = Oplog::open(&oplog_dir, oplog_config(config.durability))
            .with_context(|| format!("opening the oplog in {}", oplog_dir.display()))?;
        if let Some(torn) = &open_report.torn_tail {
            report.push_str(&format!("; dropped a torn oplog tail ({torn:?})"));
        }
        let covered = read_covered(&oplog_dir)?;
        let start = match &recovered {
            None => oplog.oldest_lsn(),
            Some(info) => covered
                .iter()
                .filter(|(version, _)| *version <= info.version)
                .max_by_key(|(version, _)| *version)
                .map_or(oplog.oldest_lsn(), |(_, lsn)| lsn + 1),
        };
        if recovered.is_none() && oplog.oldest_lsn() > 1 {
            bail!(
                "the oplog in {} starts at LSN {} but no checkpoint exists to hold the earlier records; \
                 restore the checkpoints directory or move the oplog away to start empty",
                oplog_dir.display(),
                oplog.oldest_lsn()
            );
        }
        let (mut records, mut operations) = (0u64, 0u64);
        if start < oplog.next_lsn() {
            let points = recovered
                .as_ref()
                .map(|info| info.session_commit_points.clone())
                .unwrap_or_default();
            let replay = oplog.replay(start).with_context(|| {
                format!(
                    "replaying {} from LSN {start}: records the recovered checkpoint needs were truncated",
                    oplog_dir.display()
                )
            })?;
            keyspace::with_session(&store, |session| -> anyhow::Result<()> {
                for item in replay {
                    let (lsn, payload) = item
                        .with_context(|| format!("reading the oplog in {}", oplog_dir.display()))?;
                    operations += keyspace
                        .replay_record(session, &payload, |id| {
                            points.get(&SessionId(id)).copied().unwrap_or(0)
                        })
                        .map_err(|detail| {
                            anyhow!(
                                "oplog record LSN {lsn} in {}: {detail}",
                                oplog_dir.display()
                            )
                        })?;
                    records += 1;
                }
                Ok(())
            })?;
            keyspace::end_thread_session();
        }
        report.push_str(&format!(
            "; replayed {records} oplog records ({operations} operations) from LSN {start}"
        ));
        keyspace.set_oplog(Some(oplog));
    }
    let keys: u64 = (0..keyspace::DATABASES as u8)
        .map(|db| keyspace.dbsize(db))
        .sum();
    report.push_str(&format!(
        "; {keys} keys in {} ms",
        started.elapsed().as_millis()
    ));
    if !uses_oplog {
        if let Some(oplog) = keyspace.take_oplog() {
            // The mode does not log: fold the replayed records into a checkpoint, then remove
            // the log so that an old log is never replayed over newer checkpoints.
            let covered = oplog.next_lsn().saturating_sub(1);
            let token = store.checkpoint(Strategy::Persian)?;
            store.wait_for_commit(token, Duration::from_secs(3600))?;
            oplog.close()?;
            std::fs::remove_dir_all(&oplog_dir).with_context(|| {
                format!(
                    "removing {} after folding it into a checkpoint",
                    oplog_dir.display()
                )
            })?;
            report.push_str(&format!(
                "; folded oplog through LSN {covered} into a checkpoint and removed it"
            ));
        }
    }
    Ok((keyspace, report))
}

/// Takes an exclusive `flock` on `dir/server.lock` for the life of the process (the file
/// descriptor is leaked on purpose), so two servers never share a data directory in any mode.
/// The kernel releases it when the process dies, so a crash never leaves it locked.
fn lock_directory(dir: &Path) -> anyhow::Result<()> {
    use std::os::fd::IntoRawFd;
    let path = dir.join("server.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let fd = file.into_raw_fd();
    // SAFETY: `fd` is a valid open descriptor we own and never close.
    let result = unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) };
    if result != 0 {
        let error = std::io::Error::last_os_error();
        // SAFETY: closing the descriptor we own, once.
        unsafe { libc::close(fd) };
        bail!(
            "cannot lock {}: {error}; another prefixkv-server is probably using {} (stop it or choose another --dir)",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

fn covered_path(oplog_dir: &Path) -> PathBuf {
    oplog_dir.join(COVERED_FILE)
}

/// Reads `COVERED` (empty when absent).
fn read_covered(oplog_dir: &Path) -> anyhow::Result<Vec<(u64, u64)>> {
    let path = covered_path(oplog_dir);
    let text = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    let corrupt = |what: &str| {
        anyhow!(
            "{} is damaged ({what}); it records which oplog records the checkpoints hold. Restore it \
             from a backup, or delete it to replay the whole retained oplog (safe when the oplog was never truncated)",
            path.display()
        )
    };
    let text = std::str::from_utf8(&text).map_err(|_| corrupt("not UTF-8"))?;
    let crc_at = text.rfind("crc ").ok_or_else(|| corrupt("no crc line"))?;
    let (body, crc_line) = text.split_at(crc_at);
    let expected =
        u32::from_str_radix(crc_line[4..].trim(), 16).map_err(|_| corrupt("bad crc line"))?;
    if crc32c::crc32c(body.as_bytes()) != expected {
        return Err(corrupt("checksum mismatch"));
    }
    body.lines()
        .map(|line| {
            let mut parts = line.split(' ');
            let version = parts.next().and_then(|p| p.parse().ok());
            let lsn = parts.next().and_then(|p| p.parse().ok());
            match (version, lsn) {
                (Some(v), Some(l)) => Ok((v, l)),
                _ => Err(corrupt("bad line")),
            }
        })
        .collect()
}

fn write_covered(oplog_dir: &Path, entries: &[(u64, u64)]) -> anyhow::Result<()> {
    let mut body = String::new();
    for (version, lsn) in entries {
        body.push_str(&format!("{version} {lsn}\n"));
    }
    let crc = crc32c::crc32c(body.as_bytes());
    body.push_str(&format!("crc {crc:08x}\n"));
    let path = covered_path(oplog_dir);
    let temporary = oplog_dir.join("COVERED.tmp");
    let mut file = std::fs::File::create(&temporary)
        .with_context(|| format!("creating {}", temporary.display()))?;
    file.write_all(body.as_bytes())
        .with_context(|| format!("writing {}", temporary.display()))?;
    file.sync_all()
        .with_context(|| format!("fsync {}", temporary.display()))?;
    std::fs::rename(&temporary, &path)
        .with_context(|| format!("renaming to {}", path.display()))?;
    std::fs::File::open(oplog_dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync directory {}", oplog_dir.display()))?;
    Ok(())
}

impl Persistence {
    /// Wraps the recovered keyspace.
    pub fn new(keyspace: Arc<Keyspace>, config: &Config, loaded: String) -> Persistence {
        Persistence {
            keyspace,
            durability: config.durability,
            dir: config.dir.clone(),
            run_lock: Mutex::new(()),
            background_running: AtomicBool::new(false),
            last_save_unix: AtomicU64::new(keyspace::now_ms() / 1000),
            checkpoints_done: AtomicU64::new(0),
            last_checkpoint: Mutex::new(None),
            last_error: Mutex::new(None),
            loaded: Mutex::new(loaded),
            shutdown: AtomicBool::new(false),
        }
    }

    /// Whether a checkpoint is running now.
    pub fn checkpoint_running(&self) -> bool {
        self.run_lock.is_locked()
    }

    /// Takes a Persian checkpoint and waits for it; then records the covered LSN and truncates
    /// the oplog. Blocking: call from a plain thread or `spawn_blocking`.
    pub fn checkpoint_now(&self) -> Result<CheckpointSummary, String> {
        let _running = self.run_lock.lock();
        let result = self.checkpoint_locked();
        match &result {
            Ok(summary) => {
                *self.last_checkpoint.lock() = Some(summary.clone());
                *self.last_error.lock() = None;
                self.checkpoints_done.fetch_add(1, Ordering::Relaxed);
                self.last_save_unix
                    .store(keyspace::now_ms() / 1000, Ordering::Relaxed);
            }
            Err(error) => *self.last_error.lock() = Some(error.clone()),
        }
        result
    }

    fn checkpoint_locked(&self) -> Result<CheckpointSummary, String> {
        let store = &self.keyspace.store;
        let covered_lsn = self
            .keyspace
            .oplog()
            .map(|log| log.next_lsn().saturating_sub(1));
        let deadline = Instant::now() + Duration::from_secs(60);
        let token = loop {
            match store.checkpoint(Strategy::Persian) {
                Ok(token) => break token,
                Err(EngineError::CheckpointInProgress) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(error) => return Err(format!("checkpoint could not start: {error}")),
            }
        };
        let report = store
            .wait_for_commit(token, Duration::from_secs(3600))
            .map_err(|error| format!("checkpoint failed: {error}"))?;
        if let (Some(oplog), Some(lsn)) = (self.keyspace.oplog(), covered_lsn) {
            let oplog_dir = self.dir.join("oplog");
            let mut entries = read_covered(&oplog_dir).map_err(|e| format!("{e:#}"))?;
            entries.push((report.version, lsn));
            let skip = entries.len().saturating_sub(COVERED_KEEP);
            write_covered(&oplog_dir, &entries[skip..]).map_err(|e| format!("{e:#}"))?;
            oplog
                .truncate_through(lsn)
                .map_err(|error| format!("oplog truncation failed: {error}"))?;
        }
        Ok(CheckpointSummary {
            version: report.version,
            duration_ms: report.duration.as_millis() as u64,
            bytes: report.bytes,
            records: report.records,
            covered_lsn,
        })
    }

    /// Starts the periodic checkpoint thread (modes other than `none`): every interval, when
    /// writes happened since the last one.
    pub fn start_periodic(self: &Arc<Self>, interval_ms: u64) -> std::io::Result<()> {
        if self.durability == Durability::None {
            return Ok(());
        }
        let persistence = self.clone();
        std::thread::Builder::new()
            .name("prefixkv-checkpointer".into())
            .spawn(move || {
                let mut seen_writes = 0;
                while !persistence.shutdown.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(interval_ms));
                    let writes = persistence.keyspace.writes.load(Ordering::Relaxed);
                    if writes == seen_writes {
                        continue;
                    }
                    seen_writes = writes;
                    if let Err(error) = persistence.checkpoint_now() {
                        eprintln!("prefixkv-server: periodic {error}");
                    }
                }
            })?;
        Ok(())
    }

    /// Makes everything durable for SHUTDOWN: flushes the oplog; checkpoints when `save`.
    pub fn shutdown(&self, save: bool) -> Result<(), String> {
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(oplog) = self.keyspace.oplog() {
            oplog
                .flush_and_sync()
                .map_err(|e| format!("oplog sync failed: {e}"))?;
        }
        if save {
            self.checkpoint_now()?;
        }
        Ok(())
    }
}
