//! Property tests of the WAL header and frame codecs.

use prefixkv_pagestore::format::{
    decode_frame, encode_frame, FrameDefect, FrameHeader, WalHeader, WAL_HEADER_BYTES,
};
use proptest::prelude::*;

fn header_strategy() -> impl Strategy<Value = WalHeader> {
    (9u32..=12, any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
        |(shift, sequence, salt1, salt2)| WalHeader {
            page_size_bytes: 1 << shift,
            checkpoint_sequence: sequence,
            salt1,
            salt2,
        },
    )
}

proptest! {
    #[test]
    fn header_round_trips(header in header_strategy()) {
        let (bytes, checksum) = header.encode();
        prop_assert_eq!(WalHeader::decode(&bytes).unwrap(), (header, checksum));
    }

    #[test]
    fn any_header_bit_flip_is_rejected(header in header_strategy(), bit in 0usize..WAL_HEADER_BYTES * 8) {
        let (mut bytes, _) = header.encode();
        bytes[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(WalHeader::decode(&bytes).is_err());
    }

    #[test]
    fn frames_round_trip_and_chain(
        header in header_strategy(),
        frames in proptest::collection::vec((1u32..1_000_000, any::<u32>(), any::<u8>()), 1..6),
    ) {
        let page_size = header.page_size_bytes as usize;
        let (_, mut chain) = header.encode();
        for (page_number, commit_size_pages, fill) in frames {
            let page: Vec<u8> = (0..page_size).map(|i| fill.wrapping_add(i as u8)).collect();
            let frame_header = FrameHeader { page_number, commit_size_pages };
            let (head, next) = encode_frame(&frame_header, &header, chain, &page);
            let mut frame = head.to_vec();
            frame.extend_from_slice(&page);
            prop_assert_eq!(decode_frame(&frame, &header, chain).unwrap(), (frame_header, next));
            // The same frame does not validate at another point of the chain.
            prop_assert!(decode_frame(&frame, &header, chain ^ 1).is_err());
            chain = next;
        }
    }

    #[test]
    fn any_frame_bit_flip_is_rejected(header in header_strategy(), bit in 0usize..(24 + 512) * 8) {
        let page = vec![7u8; header.page_size_bytes as usize];
        let (_, chain) = header.encode();
        let (head, _) = encode_frame(&FrameHeader { page_number: 3, commit_size_pages: 9 }, &header, chain, &page);
        let mut frame = head.to_vec();
        frame.extend_from_slice(&page);
        frame[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(decode_frame(&frame, &header, chain).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200), header in header_strategy(), chain in any::<u32>()) {
        let _ = WalHeader::decode(&bytes);
        if let Err(FrameDefect::Truncated { got, need }) = decode_frame(&bytes, &header, chain) {
            prop_assert!(got < need);
        }
    }
}
