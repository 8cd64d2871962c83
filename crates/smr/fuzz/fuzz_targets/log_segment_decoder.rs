//! Arbitrary bytes as a Raft log segment: the decoder must stop at the first bad record with a
//! valid prefix length inside the input, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (entries, valid_bytes, _) = prefixkv_smr::log_store::decode_segment(data, std::path::Path::new("fuzz.log"));
    assert!(valid_bytes as usize <= data.len());
    for pair in entries.windows(2) {
        assert_eq!(pair[1].1.log_id.index, pair[0].1.log_id.index + 1);
    }
});
