//! Arbitrary bytes into the segment decoder: it must return Ok or Err, never panic, never allocate
//! beyond its limits, and anything it accepts must re-encode consistently (entry count and CRC).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_engine::checkpoint_files::{decode_segment_bytes, DecodeLimits};

fuzz_target!(|data: &[u8]| {
    // Small limits keep a lying length from costing real memory while still exercising checks.
    let limits = DecodeLimits {
        max_key_bytes: 4096,
        max_value_bytes: 1 << 20,
    };
    if let Ok((_header, entries, footer)) = decode_segment_bytes(data, limits) {
        assert_eq!(entries.len() as u64, footer.entries);
        assert_eq!(footer.body_bytes + 32, data.len() as u64);
        assert_eq!(
            crc32c_of(&data[..footer.body_bytes as usize]),
            footer.crc32c
        );
        for entry in &entries {
            assert!(!entry.tombstone || entry.value.is_empty());
        }
    }
});

fn crc32c_of(bytes: &[u8]) -> u32 {
    // The decoder already compared this; recomputing it independently catches a decoder that
    // accepted without checking.
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
