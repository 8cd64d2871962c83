#!/bin/bash
# usage: scripts/bench/build-rocksdb-contender.sh [more cargo build args]
#
# Builds prefixkv-bench with `ycsb`'s `rocksdb` contender (cargo feature `rocksdb`, off by
# default so that the suite never builds it), linked to Debian's RocksDB instead of compiling
# RocksDB's C++ (librocksdb-sys's bundled build takes many minutes on two cores):
#   - apt packages: librocksdb-dev (7.8.3 on Debian 12: the library and its C header) and
#     libclang-dev (bindgen in librocksdb-sys's build script loads libclang at run time);
#   - rocksdb crate =0.20.1 (librocksdb-sys 0.10.0+7.9.2, the release nearest to 7.8.3), with
#     its default features (bundled snappy, lz4, zstd, zlib, bzip2) off: the system library
#     brings its own compression libraries;
#   - ROCKSDB_LIB_DIR: link the system librocksdb.so (dynamically);
#   - ROCKSDB_INCLUDE_DIR: generate the bindings from the system's c.h (7.8.3), not the crate's
#     bundled 7.9.2 header, so that the bindings match the library that is linked;
#   - LIBCLANG_PATH: where libclang-dev put libclang.so.
# Then `target/release/prefixkv-bench ycsb --variants engine,rocksdb ...` (docs/benchmarks.md).
# The same environment runs the contender's test:
#   cargo test -p prefixkv-bench --features rocksdb --lib rocksdb
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! dpkg -s librocksdb-dev libclang-dev >/dev/null 2>&1; then
  apt-get update
  apt-get install -y librocksdb-dev libclang-dev
fi
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
export ROCKSDB_LIB_DIR=/usr/lib/$MULTIARCH
export ROCKSDB_INCLUDE_DIR=/usr/include
if [ -z "${LIBCLANG_PATH:-}" ]; then
  LIBCLANG_PATH=$(dirname "$(ls /usr/lib/llvm-*/lib/libclang.so | sort -V | tail -1)")
  export LIBCLANG_PATH
fi
echo "librocksdb-dev $(dpkg-query -W -f='${Version}' librocksdb-dev)," \
  "ROCKSDB_LIB_DIR=$ROCKSDB_LIB_DIR ROCKSDB_INCLUDE_DIR=$ROCKSDB_INCLUDE_DIR LIBCLANG_PATH=$LIBCLANG_PATH"
cargo build --release -p prefixkv-bench --features rocksdb "$@"
