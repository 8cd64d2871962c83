//! The `rocksdb` contender of `ycsb` (only with the cargo feature `rocksdb`): RocksDB, the LSM
//! store people pick for data beyond RAM, as issue 33's larger-than-memory peer. It runs the same
//! pre-generated chunks as every other contender, through the same
//! [`Worker`](crate::workload::maps::Worker) interface.
//!
//! Configuration (docs/benchmarks.md): one `DB` shared by every worker thread, in a directory
//! under the round's temp dir (removed with it); the write-ahead log off
//! (`WriteOptions::disable_wal`), so a write costs what the engine's unlogged upsert costs; an LRU
//! block cache of the byte budget the caller gives (by default `ycsb --log-memory-bytes`, the
//! tiered engine's log budget, and without it the in-memory engine's, see
//! [`super::contenders::engine_config`]); no compression (the values are not compressible);
//! direct I/O for reads and for flushes and compactions unless `ycsb --buffered-io` (as the
//! tiered engine's page file: the block cache is then RocksDB's only cache, as the log budget is
//! the engine's); everything else RocksDB's defaults. Keys are the engine's bytes
//! ([`encode_key`]), values of `--value-bytes` as the engine's: the 8 big-endian bytes of the
//! operation's stamp (or the counter), then the fixed filler ([`value_buffer`]); a read is
//! `get_pinned` (no copy out of the block cache or memtable), a read-modify-write a `get_pinned`
//! then a `put` (RocksDB has no atomic read-modify-write without a merge operator; the workloads
//! never have two threads count on one key's exact total, and the check is presence only).
//!
//! Invariant: the `DB` is dropped (closed) before the round's temp dir is removed: [`RocksDbMap`]
//! owns it and the caller drops the map first.

use std::path::Path;

use anyhow::{Context, Result};
use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, WriteOptions, DB};

use crate::workload::maps::{Loaded, Worker};
use crate::workload::operations::{encode_key, leading_word, value_buffer, Chunk, Kind};

/// The `rocksdb` crate version this contender is built with (pinned with `=` in Cargo.toml).
pub const CRATE_VERSION: &str = "0.20.1";

/// RocksDB as a [`Loaded`] map.
pub struct RocksDbMap {
    db: DB,
    write: WriteOptions,
    value_bytes: usize,
    /// The version of the RocksDB library actually linked, as RocksDB itself wrote it into its
    /// OPTIONS file (`rocksdb_version=`); `None` if that file could not be read.
    pub library_version: Option<String>,
}

impl RocksDbMap {
    /// Opens a new database in `dir` (created) with an LRU block cache of `block_cache_bytes`,
    /// with direct I/O (`use_direct_reads`, `use_direct_io_for_flush_and_compaction`) if
    /// `direct_io`; its workers write values of `value_bytes` (at least 8).
    pub fn open(
        dir: &Path,
        block_cache_bytes: u64,
        value_bytes: usize,
        direct_io: bool,
    ) -> Result<RocksDbMap> {
        let cache = Cache::new_lru_cache(block_cache_bytes as usize)
            .context("creating RocksDB's block cache")?;
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_compression_type(DBCompressionType::None);
        options.set_block_based_table_factory(&table);
        options.set_use_direct_reads(direct_io);
        options.set_use_direct_io_for_flush_and_compaction(direct_io);
        let db = DB::open(&options, dir).with_context(|| {
            if direct_io {
                format!(
                    "opening RocksDB with direct I/O in {} (a file system without O_DIRECT \
                     refuses it: give another --data-dir, or --buffered-io)",
                    dir.display()
                )
            } else {
                format!("opening RocksDB in {}", dir.display())
            }
        })?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        Ok(RocksDbMap {
            db,
            write,
            value_bytes,
            library_version: library_version(dir),
        })
    }

    /// The value stored under `key`, as the `u64` its leading word encodes (tests and checks;
    /// not timed).
    pub fn value(&self, key: u64) -> Option<u64> {
        self.bytes(key).map(|value| decode(&value))
    }

    /// The whole value stored under `key` (tests and checks; not timed).
    pub fn bytes(&self, key: u64) -> Option<Vec<u8>> {
        self.db
            .get_pinned(encode_key(key))
            .expect("RocksDB refused a read")
            .map(|value| value.to_vec())
    }
}

/// The `rocksdb_version=` line of the newest OPTIONS file RocksDB wrote into `dir`.
fn library_version(dir: &Path) -> Option<String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("OPTIONS-") && !name.ends_with(".dbtmp"))
        })
        .collect();
    files.sort();
    let text = std::fs::read_to_string(files.last()?).ok()?;
    text.lines()
        .find_map(|line| line.trim().strip_prefix("rocksdb_version="))
        .map(str::to_string)
}

fn decode(bytes: &[u8]) -> u64 {
    leading_word(bytes).expect("values of at least 8 bytes")
}

impl Loaded for RocksDbMap {
    fn worker(&self) -> Box<dyn Worker + '_> {
        Box::new(RocksDbWorker {
            map: self,
            written: value_buffer(self.value_bytes),
        })
    }
}

/// One thread's handle: the shared `DB` and its own value buffer (leading word overwritten per
/// write, the filler kept).
struct RocksDbWorker<'a> {
    map: &'a RocksDbMap,
    written: Vec<u8>,
}

impl Worker for RocksDbWorker<'_> {
    fn run(&mut self, chunk: &Chunk<'_>) {
        let RocksDbMap { db, write, .. } = self.map;
        let written = &mut self.written;
        let mut found = 0u64;
        for (position, (&key, &kind)) in chunk.keys.iter().zip(chunk.kinds).enumerate() {
            let bytes = encode_key(key);
            match kind {
                Kind::Read => {
                    let value = db.get_pinned(bytes).expect("RocksDB refused a read");
                    found += value.map_or(0, |value| decode(&value));
                }
                Kind::Upsert => {
                    written[..8].copy_from_slice(&chunk.value(position).to_be_bytes());
                    db.put_opt(bytes, &written[..], write)
                        .expect("RocksDB refused a write");
                }
                Kind::Rmw => {
                    let count = db
                        .get_pinned(bytes)
                        .expect("RocksDB refused a read")
                        .map_or(0, |value| decode(&value));
                    written[..8].copy_from_slice(&count.wrapping_add(1).to_be_bytes());
                    db.put_opt(bytes, &written[..], write)
                        .expect("RocksDB refused a write");
                }
            }
        }
        std::hint::black_box(found);
    }

    fn contains(&mut self, key: u64) -> bool {
        self.map.value(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::maps::{fill, DashMapMap};
    use crate::workload::operations::{has_filler, key, Operations, CHUNK_OPS};
    use crate::workload::KeyDistribution;

    /// RocksDB and `dashmap` run the same pre-generated operations (every workload, uniform and
    /// zipfian, one thread so the order is fixed, 8-byte and 100-byte values): afterwards every
    /// key holds the same leading word in both, and RocksDB's whole value has the size asked for
    /// and the filler, so RocksDB's reads saw what its writes wrote (RMW reads its own last
    /// write).
    #[test]
    fn rocksdb_ends_where_dashmap_ends() {
        const KEYS: u64 = 2_000;
        for (seed, workload) in [
            super::super::Workload::A,
            super::super::Workload::B,
            super::super::Workload::C,
            super::super::Workload::F,
        ]
        .into_iter()
        .enumerate()
        {
            for (distribution, value_bytes) in [
                (KeyDistribution::Uniform, 8),
                (KeyDistribution::Zipfian, 8),
                (KeyDistribution::Uniform, 100),
                (KeyDistribution::Zipfian, 100),
            ] {
                let dir = tempfile::tempdir().unwrap();
                // Direct I/O where the temp dir's file system has it.
                let rocks =
                    RocksDbMap::open(&dir.path().join("rocksdb"), 1 << 20, value_bytes, true)
                        .or_else(|_| {
                            RocksDbMap::open(
                                &dir.path().join("rocksdb-buffered"),
                                1 << 20,
                                value_bytes,
                                false,
                            )
                        })
                        .unwrap();
                let version = rocks.library_version.clone();
                assert!(
                    version
                        .as_deref()
                        .is_some_and(|v| v.split('.').count() == 3),
                    "the linked library's version from its OPTIONS file: {version:?}"
                );
                let dash = DashMapMap(dashmap::DashMap::with_capacity_and_hasher(
                    KEYS as usize,
                    std::hash::RandomState::new(),
                ));
                fill(&rocks, KEYS, 2);
                fill(&dash, KEYS, 2);
                let operations =
                    Operations::generate(workload.mix(), distribution, KEYS, 6_000, seed as u64);
                let (mut r, mut d) = (rocks.worker(), dash.worker());
                let mut position = 0;
                while position < operations.len() {
                    let chunk = operations.chunk_at(position, 1, position + 1);
                    r.run(&chunk);
                    d.run(&chunk);
                    position += CHUNK_OPS;
                }
                drop((r, d));
                for index in 0..KEYS {
                    let k = key(index);
                    assert_eq!(
                        rocks.value(k),
                        dash.0.get(&k).map(|v| *v),
                        "{workload:?} {distribution:?} {value_bytes}: key index {index}"
                    );
                    let bytes = rocks.bytes(k).unwrap();
                    assert!(
                        has_filler(&bytes, value_bytes),
                        "{workload:?} {distribution:?}: key index {index}: {bytes:?}"
                    );
                }
                assert!(!rocks.worker().contains(key(KEYS)), "a key never written");
            }
        }
    }
}
