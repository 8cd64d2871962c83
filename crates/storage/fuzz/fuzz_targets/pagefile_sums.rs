//! Fuzzes the page file's sums decoder: arbitrary bytes read as a sums file (a header, then
//! entries, as `PageFile::open` reads them) must decode without panicking, and whatever decodes
//! must re-encode to exactly the bytes it came from (so no two byte strings mean one entry).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_storage::pagefile::format::{
    decode_entry, decode_header, encode_entry, encode_header, SumsHeader, ENTRY_BYTES,
    SUMS_HEADER_BYTES,
};

/// Decodes entries after `header` up to the first one that fails, as `open` does.
fn entries(header: &SumsHeader, bytes: &[u8]) {
    for chunk in bytes.chunks(ENTRY_BYTES) {
        let Ok(entry) = decode_entry(chunk, header) else {
            return;
        };
        assert!(entry.valid_bytes <= header.page_bytes);
        assert_eq!(&encode_entry(&entry)[..], chunk);
    }
}

fuzz_target!(|data: &[u8]| {
    // The whole input as a sums file.
    if data.len() >= SUMS_HEADER_BYTES {
        if let Ok(header) = decode_header(&data[..SUMS_HEADER_BYTES]) {
            assert_eq!(&encode_header(&header)[..], &data[..SUMS_HEADER_BYTES]);
            entries(&header, &data[SUMS_HEADER_BYTES..]);
        }
    }
    // The input as entries behind a valid header (most inputs fail the header's CRC above).
    let header = SumsHeader {
        page_bytes: 4096,
        pages_per_segment: 16,
        first_page: 16,
    };
    entries(&header, data);
});
