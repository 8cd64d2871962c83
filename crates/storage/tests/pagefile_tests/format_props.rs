//! Property tests of the page file's sums entries and header: encode/decode round trips, and
//! any single flipped bit or truncation of an entry is rejected (never decoded as another entry).

use prefixkv_storage::pagefile::format::{
    decode_entry, decode_header, encode_entry, encode_header, SumsEntry, SumsHeader, ENTRY_BYTES,
};
use proptest::prelude::*;

fn header() -> impl Strategy<Value = SumsHeader> {
    (12u32..=30, 1u32..=64, 0u64..u64::MAX / 128).prop_map(|(shift, per, index)| SumsHeader {
        page_bytes: 1 << shift,
        pages_per_segment: per,
        first_page: index * u64::from(per),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn entries_round_trip(header in header(), index in 0u32..64, valid in any::<u32>(), crc in any::<u32>()) {
        let entry = SumsEntry {
            page: header.first_page + u64::from(index % header.pages_per_segment),
            valid_bytes: valid % (header.page_bytes + 1),
            crc,
        };
        prop_assert_eq!(decode_entry(&encode_entry(&entry), &header), Ok(entry));
        prop_assert_eq!(decode_header(&encode_header(&header)), Ok(header));
    }

    #[test]
    fn a_flipped_bit_or_a_cut_entry_is_rejected(
        header in header(), index in 0u32..64, crc in any::<u32>(), bit in 0usize..ENTRY_BYTES * 8,
        cut in 0usize..ENTRY_BYTES,
    ) {
        let entry = SumsEntry {
            page: header.first_page + u64::from(index % header.pages_per_segment),
            valid_bytes: header.page_bytes / 2,
            crc,
        };
        let mut bytes = encode_entry(&entry);
        prop_assert!(decode_entry(&bytes[..cut], &header).is_err());
        bytes[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(decode_entry(&bytes, &header).is_err());
    }

    /// An intact entry of one segment is not accepted in another's sums file.
    #[test]
    fn an_entry_outside_its_segment_is_rejected(header in header(), crc in any::<u32>()) {
        let entry = SumsEntry {
            page: header.first_page + u64::from(header.pages_per_segment),
            valid_bytes: 1,
            crc,
        };
        prop_assert!(decode_entry(&encode_entry(&entry), &header).is_err());
    }
}
