//! Helpers of the storage-tier tests (`tier.rs`, `tier_incremental.rs`): a small tiered store,
//! keys and values that name themselves, and a model check through a fresh session.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prefixkv_engine::{Store, StoreConfig};

/// 16 pages of 64 KiB: a 1 MiB budget.
pub fn tier_config(dir: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.index_buckets = 1 << 14;
    config.log_memory_bytes = 1 << 20;
    config.log_page_bytes = 64 << 10;
    config.flusher_threads = 2;
    config.storage_tier = true;
    // Buffered page-file I/O: with O_DIRECT every cold read is a device read (about 0.6 ms on
    // the CI machine), and these tests read tens of thousands of cold records. Direct reads are
    // the storage crate's tests (`pagefile_tests::direct`).
    config.checkpoint_direct_io = false;
    config.memory_wait_limit = Duration::from_secs(60);
    config
}

pub fn key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// A 100-byte value naming its key and a generation.
pub fn value(index: u64, generation: u64) -> Vec<u8> {
    let mut value = format!("{index}:{generation}:").into_bytes();
    value.resize(100, b'v');
    value
}

/// Bytes of the page file's data segments.
pub fn page_file_bytes(dir: &Path) -> u64 {
    prefixkv_storage::pagefile::data_bytes(&*prefixkv_storage::real_disk(), &dir.join("log"))
        .unwrap()
}

/// Checks every key of `model` (and that deleted keys stay absent) through a fresh session;
/// `when` names the moment in failures.
pub fn check_model(store: &Arc<Store>, model: &HashMap<u64, Option<Vec<u8>>>, when: &str) {
    let mut session = store.start_session();
    let mut out = Vec::new();
    for (&index, expected) in model {
        let found = session.read(&key(index), &mut out).unwrap();
        match expected {
            Some(expected) => {
                assert!(found, "{when}: key {index} is missing");
                assert_eq!(&out, expected, "{when}: key {index}");
            }
            None => assert!(!found, "{when}: deleted key {index} is back"),
        }
    }
}
