//! Helpers shared by the page file's test modules.

use prefixkv_storage::pagefile::PageFileConfig;

/// The page size of every test file: one direct-I/O block.
pub const PAGE: usize = 4096;

/// Pages per segment of every test file: small, so a few pages span several segments.
pub const PAGES_PER_SEGMENT: u64 = 4;

/// 4 KiB pages, [`PAGES_PER_SEGMENT`] per segment, direct I/O asked for.
pub fn config() -> PageFileConfig {
    PageFileConfig {
        page_bytes: PAGE as u32,
        pages_per_segment: PAGES_PER_SEGMENT as u32,
        direct_io: true,
    }
}

/// A page's content, different for every page, salt and 256-byte stretch of the page.
pub fn page_bytes(page: u64, salt: u8) -> Vec<u8> {
    (0..PAGE)
        .map(|i| (i as u64 * 31 + page * 7 + u64::from(salt) + (i as u64 >> 8)) as u8)
        .collect()
}
