//! What the store's simulated-disk tests share: small store options on a `SimDisk`.

use prefixkv_storage::SimDisk;
use prefixkv_store::{Durability, Options};

/// A small store on `disk` (256 index buckets, 8 MiB of log, 4 KiB log segments, two flushers),
/// so that power-cut runs over many seeds stay fast.
pub fn sim_options(disk: &SimDisk, durability: Durability) -> Options {
    let mut options = Options::new("/data/store", durability);
    options.engine.index_buckets = 1 << 8;
    options.engine.log_memory_bytes = 8 << 20;
    options.engine.log_page_bytes = 64 << 10;
    options.engine.flusher_threads = 2;
    options.oplog_segment_bytes = 4096;
    options.disk = disk.as_disk();
    options
}
