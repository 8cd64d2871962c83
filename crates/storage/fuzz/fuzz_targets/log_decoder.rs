//! Fuzzes the log's segment and record decoder: arbitrary bytes, either raw or behind a valid header, must decode
//! without panicking, never yield a payload above the limit, and whatever valid prefix it finds
//! must re-encode to exactly the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_storage::log::format::{decode_segment_image, encode_frame, encode_segment_header};

const MAX_RECORD_BYTES: u32 = 1 << 16;

fn check(bytes: &[u8]) {
    let Ok(image) = decode_segment_image(bytes, MAX_RECORD_BYTES) else {
        return;
    };
    let mut reencoded = encode_segment_header(image.first_lsn).to_vec();
    for (lsn, payload) in &image.records {
        assert!(payload.len() <= MAX_RECORD_BYTES as usize);
        encode_frame(*lsn, payload, &mut reencoded);
    }
    assert_eq!(reencoded.len() as u64, image.valid_bytes);
    assert_eq!(&reencoded[..], &bytes[..reencoded.len()]);
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut framed = encode_segment_header(1).to_vec();
    framed.extend_from_slice(data);
    check(&framed);
});
