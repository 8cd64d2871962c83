//! Header wire format: round trips, corruption, truncation and hostile counts.

use prefixkv_dpr::header::{DprHeader, HeaderError, HeaderKind, FIXED_LEN_BYTES};
use prefixkv_dpr::WorkerVersion;
use proptest::prelude::*;

fn kind() -> impl Strategy<Value = HeaderKind> {
    prop_oneof![
        Just(HeaderKind::Request),
        Just(HeaderKind::Response),
        Just(HeaderKind::Rollback)
    ]
}

fn header() -> impl Strategy<Value = DprHeader> {
    (
        kind(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        proptest::collection::vec((any::<u64>(), any::<u64>()), 0..40),
    )
        .prop_map(
            |(kind, world_line, version, sender, batch_sequence, pairs)| DprHeader {
                kind,
                world_line,
                version,
                sender,
                batch_sequence,
                dependencies: pairs
                    .into_iter()
                    .map(|(w, v)| WorkerVersion::new(w, v))
                    .collect(),
            },
        )
}

proptest! {
    #[test]
    fn round_trip(header in header(), trailer in proptest::collection::vec(any::<u8>(), 0..16)) {
        let mut bytes = header.encode().unwrap();
        prop_assert_eq!(bytes.len(), header.encoded_len_bytes());
        let encoded_len = bytes.len();
        bytes.extend_from_slice(&trailer);
        let (decoded, consumed) = DprHeader::decode(&bytes, 64).unwrap();
        prop_assert_eq!(consumed, encoded_len);
        prop_assert_eq!(decoded, header);
    }

    /// Any single flipped bit is detected (CRC32C catches all 1-bit errors; structural fields fail
    /// their own checks first).
    #[test]
    fn single_bit_flip_is_rejected(header in header(), position in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut bytes = header.encode().unwrap();
        let index = position.index(bytes.len());
        bytes[index] ^= 1 << bit;
        prop_assert!(DprHeader::decode(&bytes, 64).is_err());
    }

    #[test]
    fn truncation_is_rejected(header in header(), cut in any::<prop::sample::Index>()) {
        let bytes = header.encode().unwrap();
        let length = cut.index(bytes.len());
        let result = DprHeader::decode(&bytes[..length], 64);
        let is_truncated = matches!(result, Err(HeaderError::Truncated { .. }));
        prop_assert!(is_truncated);
    }

    /// Arbitrary bytes never panic, and anything accepted re-encodes to the same bytes.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok((header, consumed)) = DprHeader::decode(&bytes, 8) {
            prop_assert_eq!(header.encode().unwrap(), bytes[..consumed].to_vec());
        }
    }
}

#[test]
fn configured_maximum_is_enforced() {
    let header = DprHeader {
        kind: HeaderKind::Request,
        world_line: 0,
        version: 0,
        sender: 0,
        batch_sequence: 0,
        dependencies: (0..5).map(|w| WorkerVersion::new(w, 1)).collect(),
    };
    let bytes = header.encode().unwrap();
    assert_eq!(
        DprHeader::decode(&bytes, 4),
        Err(HeaderError::TooManyDependencies { count: 5, max: 4 })
    );
    assert!(DprHeader::decode(&bytes, 5).is_ok());
}

#[test]
fn foreign_format_version_and_magic_are_rejected() {
    let header = DprHeader {
        kind: HeaderKind::Response,
        world_line: 1,
        version: 2,
        sender: 3,
        batch_sequence: 4,
        dependencies: vec![],
    };
    let mut bytes = header.encode().unwrap();
    assert_eq!(bytes.len(), FIXED_LEN_BYTES);
    bytes[4] = 2;
    assert_eq!(
        DprHeader::decode(&bytes, 4),
        Err(HeaderError::UnsupportedFormat { found: 2 })
    );
    bytes[0] = b'X';
    assert!(matches!(
        DprHeader::decode(&bytes, 4),
        Err(HeaderError::BadMagic { .. })
    ));
}
