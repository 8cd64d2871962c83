//! Fuzz the WAL-backed image store's header decoder: never panics, and whatever decodes
//! re-encodes to the same header bytes.
//! Run: `cd crates/tickstate/fuzz && cargo +nightly fuzz run wal_header`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_tickstate::wal_store::{decode_header, encode_header, HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = decode_header(data) {
        assert_eq!(&encode_header(&header)[..], &data[..HEADER_BYTES]);
    }
});
