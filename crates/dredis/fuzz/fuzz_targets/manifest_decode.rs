//! Arbitrary bytes as a versioned-RDB manifest: an error or a manifest, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_dredis::manifest::Manifest;

fuzz_target!(|data: &[u8]| {
    let _ = Manifest::decode(data, std::path::Path::new("fuzz.manifest"));
});
