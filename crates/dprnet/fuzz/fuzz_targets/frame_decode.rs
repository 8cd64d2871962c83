//! Arbitrary bytes as a stream of request frames and as response bodies: never a panic, never an
//! allocation beyond the frame limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_dprnet::wire::{decode_request_body, decode_response_body, FrameLimits, FrameReader};

fuzz_target!(|data: &[u8]| {
    let limits = FrameLimits {
        max_frame_bytes: 1 << 16,
        ..FrameLimits::default()
    };
    let _ = decode_request_body(data, 0, &limits);
    let _ = decode_response_body(data, 0, &limits);
    let mut reader = FrameReader::new(data, limits);
    while let Ok(Some(_)) = reader.read_request() {}
});
