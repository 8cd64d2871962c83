//! Fuzzes WAL header and frame decoding: arbitrary bytes are decoded as a header and then as a
//! chain of frames, as recovery does; nothing may panic, and every accepted frame must re-encode
//! to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_pagestore::format::{decode_frame, encode_frame, WalHeader, FRAME_HEADER_BYTES, WAL_HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    let Ok((header, mut chain)) = WalHeader::decode(data) else { return };
    assert_eq!(&header.encode().0[..], &data[..WAL_HEADER_BYTES]);
    let frame_bytes = FRAME_HEADER_BYTES + header.page_size_bytes as usize;
    let mut rest = &data[WAL_HEADER_BYTES..];
    while let Ok((frame, next)) = decode_frame(rest, &header, chain) {
        let page = &rest[FRAME_HEADER_BYTES..frame_bytes];
        let (encoded, checksum) = encode_frame(&frame, &header, chain, page);
        assert_eq!(&encoded[..], &rest[..FRAME_HEADER_BYTES]);
        assert_eq!(checksum, next);
        chain = next;
        rest = &rest[frame_bytes..];
    }
});
