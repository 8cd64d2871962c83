//! prefixkv-server as the command layer's host (`prefixkv_commands::host::Host`): SAVE,
//! BGSAVE, LASTSAVE and SHUTDOWN go to [`Persistence`], INFO persistence shows its
//! checkpoints, and CONFIG GET shows the settings only this process knows (all immutable at run
//! time: the listener, the data directory, the checkpoint schedule, the engine's sizing).

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use prefixkv_commands::host::Host;

use crate::config::Config;
use crate::persistence::Persistence;

/// The server process behind the commands.
pub struct ServerHost {
    /// Checkpoints.
    pub persistence: Arc<Persistence>,
    /// The resolved configuration (its command settings are the `Server`'s copy at start;
    /// CONFIG SET changes that copy, not this one).
    pub config: Config,
    /// The port actually bound (`config.port` may be 0 or taken).
    pub port: u16,
}

impl Host for ServerHost {
    fn save(&self) -> Result<(), String> {
        self.persistence.checkpoint_now().map(|_| ())
    }

    fn start_background_save(&self) -> bool {
        self.persistence.start_background()
    }

    fn last_save_unix(&self) -> u64 {
        self.persistence.last_save_unix.load(Ordering::Relaxed)
    }

    fn shutdown(&self, save: bool) -> Result<(), String> {
        self.persistence.shutdown(save)
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn threads(&self) -> usize {
        self.config.threads
    }

    fn info_persistence(&self, text: &mut String) {
        let persistence = &self.persistence;
        let last = persistence.last_checkpoint.lock().clone();
        let error = persistence.last_error.lock().clone();
        let _ = write!(
            text,
            "loaded:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\n\
             checkpoints_completed:{}\r\nlast_checkpoint_version:{}\r\nlast_checkpoint_ms:{}\r\nlast_checkpoint_bytes:{}\r\n\
             last_checkpoint_records:{}\r\nlast_checkpoint_covered_lsn:{}\r\n",
            persistence.loaded.lock().replace(['\r', '\n'], " "),
            // As Redis: 1 from the BGSAVE reply until the save ends, so a client polling
            // right after BGSAVE never sees 0 before the background thread has begun.
            (persistence.checkpoint_running()
                || persistence.background_running.load(Ordering::SeqCst)) as u8,
            persistence.last_save_unix.load(Ordering::Relaxed),
            if error.is_some() { "err" } else { "ok" },
            persistence.checkpoints_done.load(Ordering::Relaxed),
            last.as_ref().map_or(0, |c| c.version),
            last.as_ref().map_or(0, |c| c.duration_ms),
            last.as_ref().map_or(0, |c| c.bytes),
            last.as_ref().map_or(0, |c| c.records),
            last.as_ref().and_then(|c| c.covered_lsn).unwrap_or(0),
        );
        write_checkpoint_breakdown(text, last.as_ref().map(|c| &c.breakdown));
        if let Some(error) = error {
            let _ = write!(
                text,
                "last_checkpoint_error:{}\r\n",
                error.replace(['\r', '\n'], " ")
            );
        }
    }

    fn parameters(&self) -> Vec<(&'static str, String)> {
        let config = &self.config;
        vec![
            ("port", self.port.to_string()),
            ("bind", config.bind.clone()),
            ("dir", config.dir.display().to_string()),
            (
                "checkpoint-interval",
                config.checkpoint_interval_ms.to_string(),
            ),
            (
                "checkpoint-rate",
                config.checkpoint_rate_bytes_per_s.to_string(),
            ),
            ("metrics-port", config.metrics_port.to_string()),
            ("loglevel", config.loglevel.name().into()),
            ("threads", config.threads.to_string()),
            (
                "engine-memory",
                config.settings.engine_memory_bytes.to_string(),
            ),
            (
                "storage-tier",
                if config.storage_tier { "yes" } else { "no" }.into(),
            ),
            (
                "engine-compact-dead-fraction",
                config.engine_compact_dead_fraction.to_string(),
            ),
            (
                "engine-index-buckets",
                config.engine_index_buckets.to_string(),
            ),
        ]
    }
}

/// The last checkpoint's time breakdown (`prefixkv_engine::CheckpointBreakdown`) as
/// `last_checkpoint_<part>_us` lines, zeros before the first checkpoint. The thread figures are
/// sums over the checkpoint's segment threads.
fn write_checkpoint_breakdown(
    text: &mut String,
    breakdown: Option<&prefixkv_engine::CheckpointBreakdown>,
) {
    let b = breakdown.copied().unwrap_or_default();
    let _ = write!(text, "last_checkpoint_threads:{}\r\n", b.threads);
    let names = prefixkv_engine::CheckpointBreakdown::PART_NAMES;
    for (name, part) in names.iter().zip(b.parts()) {
        let _ = write!(text, "last_checkpoint_{name}_us:{}\r\n", part.as_micros());
    }
}
