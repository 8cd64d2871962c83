//! Property tests of the image footer codec and of `read_image` on arbitrary file contents:
//! round trips, every single-bit corruption is caught, and arbitrary bytes never panic or
//! allocate beyond the configured state size; the same for the WAL-backed store's header page.

use prefixkv_tickstate::image::{
    decode_footer, encode_footer, read_image, Footer, ImageCheck, FOOTER_BYTES,
};
use proptest::prelude::*;

fn footer_strategy() -> impl Strategy<Value = Footer> {
    (
        any::<bool>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(|(complete, tick, marker_lsn, words, data_crc)| Footer {
            complete,
            tick,
            marker_lsn,
            words,
            data_crc,
        })
}

proptest! {
    #[test]
    fn footer_round_trips(footer in footer_strategy()) {
        prop_assert_eq!(decode_footer(&encode_footer(&footer)), Ok(footer));
    }

    #[test]
    fn any_bit_flip_in_a_footer_is_detected(footer in footer_strategy(), bit in 0..FOOTER_BYTES * 8) {
        let mut bytes = encode_footer(&footer);
        bytes[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(decode_footer(&bytes).is_err());
    }

    #[test]
    fn arbitrary_files_never_panic(contents in proptest::collection::vec(any::<u8>(), 0..400), words in 0usize..40) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image-0.tsimg");
        std::fs::write(&path, &contents).unwrap();
        // Either an error (size mismatch), or an invalid/valid verdict; never a panic.
        let disk = prefixkv_storage::real_disk();
        if let Ok(ImageCheck::Valid { cells, .. }) = read_image(&*disk, &path, words) {
            prop_assert_eq!(cells.len(), words);
        }
    }
}

#[test]
fn huge_page_arrays_work_and_report_the_advice() {
    use prefixkv_tickstate::algo::InterleavedPingPong;
    use prefixkv_tickstate::{huge_pages_status, Algorithm};
    // 3 MiB of IPP records: spans more than one 2 MiB page whatever the alignment.
    let words = 100_000;
    let algorithm = InterleavedPingPong::new(words, true).unwrap();
    for index in (0..words).step_by(997) {
        algorithm.write(index, index as u64 * 3);
    }
    for index in (0..words).step_by(997) {
        assert_eq!(algorithm.read(index), index as u64 * 3);
    }
    let status = huge_pages_status();
    // Either the kernel took the advice or it refused and the refusal was counted.
    assert!(
        status.advised_bytes >= (words * 32) as u64 || status.refusals > 0,
        "{status:?}"
    );
}

mod wal_store_header {
    use prefixkv_tickstate::image::Footer;
    use prefixkv_tickstate::wal_store::{decode_header, encode_header, HEADER_BYTES};
    use proptest::prelude::*;

    fn header_strategy() -> impl Strategy<Value = Footer> {
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(
            |(tick, marker_lsn, words, data_crc)| Footer {
                complete: true,
                tick,
                marker_lsn,
                words,
                data_crc,
            },
        )
    }

    proptest! {
        #[test]
        fn header_round_trips(header in header_strategy()) {
            prop_assert_eq!(decode_header(&encode_header(&header)), Ok(header));
        }

        #[test]
        fn any_bit_flip_in_a_header_is_detected(header in header_strategy(), bit in 0..HEADER_BYTES * 8) {
            let mut bytes = encode_header(&header);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode_header(&bytes).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(header) = decode_header(&bytes) {
                prop_assert_eq!(&encode_header(&header)[..], &bytes[..HEADER_BYTES]);
            }
        }
    }
}
