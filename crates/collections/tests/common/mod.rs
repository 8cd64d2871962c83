//! What the real-store tests share: a small store's options and the root record that holds a
//! structure's header (read back, or a new structure when the key is absent; deleted when empty).

#![allow(dead_code)]

use prefixkv_collections::Result;
use prefixkv_store::{Durability, Options, Txn};

/// A store small enough for a test: 4,096 index buckets, 32 MiB of log in 64 KiB pages, 64 KiB
/// oplog segments (so truncation and several segments are met), `everysec`.
pub fn options(dir: &std::path::Path) -> Options {
    let mut options = Options::new(dir, Durability::EverySec);
    options.engine.index_buckets = 1 << 12;
    options.engine.log_memory_bytes = 32 << 20;
    options.engine.log_page_bytes = 64 << 10;
    options.oplog_segment_bytes = 64 << 10;
    options
}

/// The header `root` holds (decoded whole: nothing may follow it), or `new()` when absent.
pub fn read_header<T>(
    txn: &mut Txn<'_>,
    root: &[u8],
    decode: fn(&mut &[u8]) -> Result<T>,
    new: impl FnOnce() -> T,
) -> T {
    let mut value = Vec::new();
    if !txn.get(root, &mut value).unwrap() {
        return new();
    }
    let mut rest = value.as_slice();
    let header = decode(&mut rest).unwrap();
    assert!(rest.is_empty(), "bytes after the header");
    header
}

/// Writes the header back to `root` with `encode`, or deletes `root` when the structure is
/// `empty`.
pub fn write_header(
    txn: &mut Txn<'_>,
    root: &[u8],
    empty: bool,
    encode: impl FnOnce(&mut Vec<u8>),
) {
    if empty {
        txn.delete(root).unwrap();
    } else {
        let mut value = Vec::new();
        encode(&mut value);
        txn.put(root, &value).unwrap();
    }
}
