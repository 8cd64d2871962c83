//! Arbitrary bytes into the MANIFEST decoder: Ok or Err, never a panic; anything accepted must
//! survive an encode/decode round trip unchanged.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use prefixkv_engine::checkpoint_files::{decode_manifest_bytes, encode_manifest};

fuzz_target!(|data: &[u8]| {
    if let Ok(manifest) = decode_manifest_bytes(data, Path::new("MANIFEST")) {
        let again = decode_manifest_bytes(&encode_manifest(&manifest), Path::new("MANIFEST"))
            .expect("a re-encoded manifest decodes");
        assert_eq!(again, manifest);
    }
});
