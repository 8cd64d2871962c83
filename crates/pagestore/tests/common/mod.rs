//! Shared test helpers: page images derived from (page, commit) and a deterministic commit
//! generator, so any committed prefix can be recomputed by the oracle.
#![allow(dead_code)]

use prefixkv_pagestore::{BackfillStrategy, PageStore, Result};

/// A page image determined entirely by `(page, commit)`; a torn page cannot match any image.
pub fn page_image(page: u32, commit: u32, page_size: usize) -> Vec<u8> {
    let mut image = vec![0u8; page_size];
    image[0..4].copy_from_slice(&page.to_le_bytes());
    image[4..8].copy_from_slice(&commit.to_le_bytes());
    let mut state = ((page as u64) << 32 | commit as u64) ^ 0x9E37_79B9_7F4A_7C15;
    for chunk in image[8..].chunks_mut(8) {
        state = splitmix(state);
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    image
}

/// Decodes the commit number of an image and checks the whole page; `Err` names the defect.
pub fn check_image(bytes: &[u8], page: u32) -> std::result::Result<u32, String> {
    let stored_page = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let commit = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    if stored_page != page {
        return Err(format!(
            "page {page} holds the image of page {stored_page} (commit {commit})"
        ));
    }
    if bytes != page_image(page, commit, bytes.len()).as_slice() {
        return Err(format!("page {page} (commit {commit}) is torn or corrupt"));
    }
    Ok(commit)
}

pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Pages written by commit `commit` (>= 1): commit 1 writes every page, later ones 1..=16
/// distinct pages chosen by the seed.
pub fn commit_pages(seed: u64, commit: u32, db_pages: u32) -> Vec<u32> {
    if commit == 1 {
        return (1..=db_pages).collect();
    }
    let mut state = splitmix(seed ^ (commit as u64) << 20);
    let count = 1 + (state % 16) as u32;
    let mut pages = Vec::new();
    while pages.len() < count.min(db_pages) as usize {
        state = splitmix(state);
        let page = 1 + (state % db_pages as u64) as u32;
        if !pages.contains(&page) {
            pages.push(page);
        }
    }
    pages
}

/// The model: page versions after each commit.
pub struct Model {
    pub seed: u64,
    pub db_pages: u32,
    /// `history[c][p-1]` = commit that last wrote page p, after commit c (`history[0]` is empty).
    pub history: Vec<Vec<u32>>,
}

impl Model {
    pub fn new(seed: u64, db_pages: u32) -> Model {
        Model {
            seed,
            db_pages,
            history: vec![vec![0; db_pages as usize]],
        }
    }

    pub fn extend_to(&mut self, commit: u32) {
        while (self.history.len() as u32) <= commit {
            let c = self.history.len() as u32;
            let mut next = self.history.last().unwrap().clone();
            for page in commit_pages(self.seed, c, self.db_pages) {
                next[page as usize - 1] = c;
            }
            self.history.push(next);
        }
    }
}

/// Runs commit `commit` of the generator on `store`.
pub fn run_commit(store: &PageStore, seed: u64, commit: u32, db_pages: u32) -> Result<()> {
    let page_size = store.page_size_bytes() as usize;
    let mut txn = store.begin_write()?;
    for page in commit_pages(seed, commit, db_pages) {
        txn.write_page(page, &page_image(page, commit, page_size))?;
    }
    txn.commit()?;
    Ok(())
}

/// Reads every page in one snapshot; returns the versions, or the first defect.
pub fn read_versions(store: &PageStore, db_pages: u32) -> std::result::Result<Vec<u32>, String> {
    let snapshot = store.begin_read().map_err(|e| e.to_string())?;
    if snapshot.db_size_pages() == 0 {
        return Ok(vec![0; db_pages as usize]);
    }
    (1..=db_pages)
        .map(|page| {
            let bytes = snapshot.read_page(page).map_err(|e| e.to_string())?;
            check_image(&bytes, page)
        })
        .collect()
}

/// The commit a consistent state corresponds to (the newest version in it), checked against the
/// model: `Err` if the state is not exactly some committed prefix.
pub fn prefix_of(model: &mut Model, versions: &[u32]) -> std::result::Result<u32, String> {
    let newest = versions.iter().copied().max().unwrap_or(0);
    model.extend_to(newest);
    if model.history[newest as usize] == versions {
        Ok(newest)
    } else {
        Err(format!("state with newest commit {newest} is not the committed prefix {newest}: {versions:?} vs {:?}", model.history[newest as usize]))
    }
}

/// Stress sizes come from the environment, small by default.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// After a checkpoint with `strategy`: a `Fast` backfill on a real file must have run on
/// io_uring, or the test tested only the thread pool. Fails unless `PREFIXKV_TEST_ALLOW_SKIP`
/// lists io_uring (then it says so and goes on).
pub fn assert_fast_backfill_ran_on_io_uring(store: &PageStore, strategy: BackfillStrategy) {
    if strategy != BackfillStrategy::Fast {
        return;
    }
    let reader = store.backfill_reader();
    if reader != "io_uring" {
        prefixkv_testkit::skip::unavailable(
            "io_uring",
            &format!("the Fast backfill ran on: {reader}"),
        );
    }
}
