//! Fuzz the image footer decoder: never panics, and whatever decodes re-encodes identically.
//! Run: `cd crates/tickstate/fuzz && cargo +nightly fuzz run image_footer`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_tickstate::image::{decode_footer, encode_footer, FOOTER_BYTES};

fuzz_target!(|data: &[u8]| {
    if data.len() < FOOTER_BYTES {
        return;
    }
    let bytes: [u8; FOOTER_BYTES] = data[..FOOTER_BYTES].try_into().unwrap();
    if let Ok(footer) = decode_footer(&bytes) {
        assert_eq!(encode_footer(&footer), bytes);
    }
});
