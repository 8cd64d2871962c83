//! Arbitrary bytes as a checkpoint file: the decoder must return an error or a header, never
//! panic, and never allocate more than the input can justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut pairs = 0usize;
    let _ = prefixkv_smr::checkpoint::decode_bytes(data, std::path::Path::new("fuzz.ckp"), |_, _| pairs += 1);
});
