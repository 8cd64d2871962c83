//! What the commands ask of the process that embeds them: saving, shutting down, and the
//! settings only that process knows. prefixkv-server implements [`Host`] with its checkpoint
//! schedule and configuration; a cluster worker implements it for its shard.
//!
//! Invariant: the command layer never reaches the disk, the sockets or the process itself
//! except through this trait; each method says which command calls it.

/// The embedding process, as the commands see it.
pub trait Host: Send + Sync {
    /// SAVE, and WAITAOF under `checkpoint` durability: takes a checkpoint now and returns when
    /// it is durable. Blocks; callers run it off the request threads.
    fn save(&self) -> Result<(), String>;
    /// BGSAVE and BGREWRITEAOF: starts a checkpoint in the background unless one runs; whether
    /// it started.
    fn start_background_save(&self) -> bool;
    /// LASTSAVE: Unix seconds of the last successful save (the start time if none).
    fn last_save_unix(&self) -> u64;
    /// SHUTDOWN: stops persistence, with a last checkpoint when `save`; the caller exits the
    /// process after `Ok`. Blocks.
    fn shutdown(&self, save: bool) -> Result<(), String>;
    /// INFO server's `tcp_port`.
    fn port(&self) -> u16;
    /// INFO server's `io_threads_active`: the request threads.
    fn threads(&self) -> usize;
    /// INFO persistence: the host's lines (what it loaded, its checkpoints), each ending in
    /// `\r\n`, appended after the durability lines the commands write themselves.
    fn info_persistence(&self, text: &mut String);
    /// CONFIG GET: the (name, value) of every parameter only the host knows (`port`, `dir`,
    /// `checkpoint-interval`, ...). CONFIG SET refuses these names as immutable.
    fn parameters(&self) -> Vec<(&'static str, String)>;
}

/// A host without persistence or a listener: SAVE and BGSAVE fail, SHUTDOWN only returns.
/// For tests and embedders that keep the store in memory.
#[derive(Debug, Default)]
pub struct NoHost;

impl Host for NoHost {
    fn save(&self) -> Result<(), String> {
        Err("this process does not save (no host persistence)".into())
    }

    fn start_background_save(&self) -> bool {
        false
    }

    fn last_save_unix(&self) -> u64 {
        0
    }

    fn shutdown(&self, _save: bool) -> Result<(), String> {
        Ok(())
    }

    fn port(&self) -> u16 {
        0
    }

    fn threads(&self) -> usize {
        1
    }

    fn info_persistence(&self, _text: &mut String) {}

    fn parameters(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
