//! Property tests of the log's byte format: encode/decode round trips, and every single-byte
//! corruption or truncation of a segment image is detected (never decoded as different data).

use prefixkv_storage::log::format::{
    decode_segment_image, encode_frame, encode_segment_header, FrameError, FRAME_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
};
use proptest::prelude::*;

const MAX_RECORD_BYTES: u32 = 4096;

fn image(first_lsn: u64, payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = encode_segment_header(first_lsn).to_vec();
    for (i, payload) in payloads.iter().enumerate() {
        encode_frame(first_lsn + i as u64, payload, &mut bytes);
    }
    bytes
}

fn payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(first_lsn in 1u64..u64::MAX / 2, payloads in payloads()) {
        let bytes = image(first_lsn, &payloads);
        let decoded = decode_segment_image(&bytes, MAX_RECORD_BYTES).unwrap();
        prop_assert_eq!(decoded.first_lsn, first_lsn);
        prop_assert_eq!(decoded.stopped_at, None);
        prop_assert_eq!(decoded.valid_bytes, bytes.len() as u64);
        let expected: Vec<(u64, Vec<u8>)> =
            payloads.iter().enumerate().map(|(i, p)| (first_lsn + i as u64, p.clone())).collect();
        prop_assert_eq!(decoded.records, expected);
    }

    /// Flipping any bit after the header never yields a record that was not written: decoding
    /// stops at (or before) the damaged frame, and every record it does return is original.
    #[test]
    fn any_bit_flip_is_detected(payloads in payloads().prop_filter("non-empty", |p| !p.is_empty()),
                                position in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut bytes = image(7, &payloads);
        let body = bytes.len() - SEGMENT_HEADER_BYTES;
        let at = SEGMENT_HEADER_BYTES + position.index(body);
        bytes[at] ^= 1 << bit;
        let decoded = decode_segment_image(&bytes, MAX_RECORD_BYTES).unwrap();
        // Which frame holds the flipped byte?
        let mut frame_start = SEGMENT_HEADER_BYTES;
        let mut damaged = 0;
        for (i, payload) in payloads.iter().enumerate() {
            let end = frame_start + FRAME_HEADER_BYTES + payload.len();
            if at < end { damaged = i; break; }
            frame_start = end;
        }
        prop_assert_eq!(decoded.records.len(), damaged);
        for (i, (lsn, payload)) in decoded.records.iter().enumerate() {
            prop_assert_eq!(*lsn, 7 + i as u64);
            prop_assert_eq!(payload, &payloads[i]);
        }
        let stop = decoded.stopped_at.expect("damage must stop decoding");
        prop_assert_eq!(stop.0, frame_start as u64);
    }

    /// Cutting the image anywhere inside a frame reports a truncated frame at that frame's start.
    #[test]
    fn truncation_is_detected(payloads in payloads().prop_filter("non-empty", |p| !p.is_empty()),
                              cut in any::<prop::sample::Index>()) {
        let bytes = image(1, &payloads);
        let cut = SEGMENT_HEADER_BYTES + cut.index(bytes.len() - SEGMENT_HEADER_BYTES);
        let decoded = decode_segment_image(&bytes[..cut], MAX_RECORD_BYTES).unwrap();
        let mut boundary = SEGMENT_HEADER_BYTES;
        let mut whole = 0;
        for payload in &payloads {
            let end = boundary + FRAME_HEADER_BYTES + payload.len();
            if end > cut { break; }
            boundary = end;
            whole += 1;
        }
        prop_assert_eq!(decoded.records.len(), whole);
        prop_assert_eq!(decoded.valid_bytes, boundary as u64);
        if boundary == cut {
            prop_assert_eq!(decoded.stopped_at, None);
        } else {
            let is_truncated = matches!(decoded.stopped_at, Some((at, FrameError::Truncated { .. })) if at == boundary as u64);
            prop_assert!(is_truncated, "{:?}", decoded.stopped_at);
        }
    }

    /// Arbitrary bytes after a valid header never panic and never allocate past the limit.
    #[test]
    fn garbage_never_panics(garbage in prop::collection::vec(any::<u8>(), 0..2000)) {
        let mut bytes = encode_segment_header(1).to_vec();
        bytes.extend_from_slice(&garbage);
        let decoded = decode_segment_image(&bytes, MAX_RECORD_BYTES).unwrap();
        for (_, payload) in &decoded.records {
            prop_assert!(payload.len() <= MAX_RECORD_BYTES as usize);
        }
    }
}
