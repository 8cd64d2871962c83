//! Fuzzes the DPR header decoder: it must never panic, never allocate from an unchecked count, and
//! anything it accepts must re-encode to exactly the bytes it consumed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_dpr::header::DprHeader;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the configured maximum so both the limit and the length checks run.
    let (max, bytes) = match data.split_first() {
        Some((&max, rest)) => (u32::from(max), rest),
        None => (0, data),
    };
    if let Ok((header, consumed)) = DprHeader::decode(bytes, max) {
        assert!(header.dependencies.len() <= max as usize);
        assert_eq!(header.encode().expect("re-encode"), &bytes[..consumed]);
    }
});
