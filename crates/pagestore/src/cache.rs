//! A bounded in-memory page cache shared by readers, the writer and the checkpointer.
//!
//! Every clean entry carries a [`FrameTag`]: the WAL frame its bytes came from and the log epoch
//! at that time. An entry is interchangeable with a WAL read of frame `f` only if its tag is
//! exactly `(f, current epoch)` and it is clean. The epoch is bumped whenever the log restarts
//! (the only event that reuses frame ids), so a stale entry can never match a reused frame id.
//!
//! Invariants: at most `capacity_pages` entries, unless dirty entries alone exceed it; dirty
//! entries (a write transaction's pending pages) are never evicted, never carry a tag, and are
//! never in the FIFO queue (so eviction never walks past them: a transaction that dirties more
//! pages than the cache holds costs O(1) per page, not a rescan of its dirty pages); entries are immutable `Arc<[u8]>` images, so
//! a reader that got one keeps a whole, untorn page whatever happens to the cache afterwards.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Where a clean cached page came from: WAL frame `frame_id` of log epoch `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTag {
    /// The WAL frame id (1-based) whose page image this is.
    pub frame_id: u64,
    /// The log epoch (bumped at every restart) in which that frame was written.
    pub epoch: u64,
}

#[derive(Debug)]
struct Entry {
    bytes: Arc<[u8]>,
    tag: Option<FrameTag>,
    dirty: bool,
    generation: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<u32, Entry>,
    /// Insertion order of clean entries for FIFO eviction; stale (page, generation) pairs (the
    /// page was replaced or removed since) are skipped lazily.
    order: VecDeque<(u32, u64)>,
    next_generation: u64,
}

/// The bounded page cache.
#[derive(Debug)]
pub struct PageCache {
    capacity_pages: usize,
    inner: Mutex<Inner>,
}

impl PageCache {
    /// A cache holding at most `capacity_pages` pages (0 disables caching).
    pub fn new(capacity_pages: usize) -> PageCache {
        PageCache {
            capacity_pages,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The configured capacity in pages.
    pub fn capacity_pages(&self) -> usize {
        self.capacity_pages
    }

    /// Pages currently cached.
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached image of `page_number` if it is clean and tagged exactly `tag`.
    pub fn get_clean(&self, page_number: u32, tag: FrameTag) -> Option<Arc<[u8]>> {
        let inner = self.inner.lock();
        let entry = inner.entries.get(&page_number)?;
        (!entry.dirty && entry.tag == Some(tag)).then(|| Arc::clone(&entry.bytes))
    }

    /// Caches a clean page image read from or appended to the WAL as frame `tag`. A dirty entry
    /// for the page (a pending write) is left alone: the writer's image wins until it commits.
    pub fn insert_clean(&self, page_number: u32, bytes: Arc<[u8]>, tag: FrameTag) {
        self.insert(page_number, bytes, Some(tag), false, false);
    }

    /// Marks `page_number` as being rewritten by the current write transaction: its entry loses
    /// its tag, so the checkpointer cannot reuse it until the commit re-tags it.
    pub fn mark_dirty(&self, page_number: u32, bytes: Arc<[u8]>) {
        self.insert(page_number, bytes, None, true, true);
    }

    /// Commits a previously dirty page: it becomes clean with tag `tag`.
    pub fn commit_dirty(&self, page_number: u32, bytes: Arc<[u8]>, tag: FrameTag) {
        self.insert(page_number, bytes, Some(tag), false, true);
    }

    /// Drops a dirty entry (the transaction that dirtied it rolled back).
    pub fn discard_dirty(&self, page_number: u32) {
        let mut inner = self.inner.lock();
        if inner.entries.get(&page_number).is_some_and(|e| e.dirty) {
            inner.entries.remove(&page_number);
        }
    }

    fn insert(
        &self,
        page_number: u32,
        bytes: Arc<[u8]>,
        tag: Option<FrameTag>,
        dirty: bool,
        overwrite_dirty: bool,
    ) {
        debug_assert!(!(dirty && tag.is_some()), "dirty pages carry no tag");
        if self.capacity_pages == 0 && !dirty {
            return;
        }
        let mut inner = self.inner.lock();
        if let Some(existing) = inner.entries.get(&page_number) {
            if existing.dirty && !overwrite_dirty {
                return;
            }
        }
        inner.next_generation += 1;
        let generation = inner.next_generation;
        inner.entries.insert(
            page_number,
            Entry {
                bytes,
                tag,
                dirty,
                generation,
            },
        );
        if !dirty {
            inner.order.push_back((page_number, generation));
        }
        self.evict(&mut inner);
    }

    fn evict(&self, inner: &mut Inner) {
        // Amortised O(1): every pair popped here was pushed once by `insert`. Only clean entries
        // are queued, so when dirty entries alone fill the cache the queue simply runs dry.
        while inner.entries.len() > self.capacity_pages {
            let Some((page, generation)) = inner.order.pop_front() else {
                break;
            };
            if inner
                .entries
                .get(&page)
                .is_some_and(|entry| entry.generation == generation)
            {
                debug_assert!(
                    !inner.entries[&page].dirty,
                    "dirty entries are never queued"
                );
                inner.entries.remove(&page);
            }
        }
        // Stale pairs accumulate when pages are re-inserted; compact when they dominate.
        if inner.order.len() > 4 * inner.entries.len() + 64 {
            let entries = &inner.entries;
            inner.order.retain(|(page, generation)| {
                entries
                    .get(page)
                    .is_some_and(|e| e.generation == *generation)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(byte: u8) -> Arc<[u8]> {
        Arc::from(vec![byte; 16])
    }

    #[test]
    fn tag_must_match_exactly_and_page_must_be_clean() {
        let cache = PageCache::new(4);
        let tag = FrameTag {
            frame_id: 7,
            epoch: 1,
        };
        cache.insert_clean(3, page(1), tag);
        assert!(cache.get_clean(3, tag).is_some());
        assert!(cache
            .get_clean(
                3,
                FrameTag {
                    frame_id: 7,
                    epoch: 2
                }
            )
            .is_none());
        assert!(cache
            .get_clean(
                3,
                FrameTag {
                    frame_id: 8,
                    epoch: 1
                }
            )
            .is_none());
        cache.mark_dirty(3, page(2));
        assert!(cache.get_clean(3, tag).is_none());
        cache.insert_clean(3, page(1), tag);
        assert!(
            cache.get_clean(3, tag).is_none(),
            "a reader must not overwrite a dirty page"
        );
    }

    #[test]
    fn capacity_is_respected_and_dirty_pages_survive() {
        let cache = PageCache::new(2);
        cache.mark_dirty(1, page(1));
        for p in 2..10 {
            cache.insert_clean(
                p,
                page(p as u8),
                FrameTag {
                    frame_id: p as u64,
                    epoch: 0,
                },
            );
        }
        assert_eq!(cache.len(), 2);
        cache.commit_dirty(
            1,
            page(1),
            FrameTag {
                frame_id: 99,
                epoch: 0,
            },
        );
        assert!(cache
            .get_clean(
                1,
                FrameTag {
                    frame_id: 99,
                    epoch: 0
                }
            )
            .is_some());
    }

    #[test]
    fn a_transaction_larger_than_the_cache_keeps_all_its_dirty_pages() {
        let cache = PageCache::new(4);
        for p in 0..10u32 {
            cache.insert_clean(
                p,
                page(p as u8),
                FrameTag {
                    frame_id: u64::from(p) + 1,
                    epoch: 0,
                },
            );
        }
        for p in 100..1100u32 {
            cache.mark_dirty(p, page(1));
        }
        // Every clean page made way; every dirty page stayed.
        assert_eq!(cache.len(), 1000);
        for p in 100..1100u32 {
            let tag = FrameTag {
                frame_id: u64::from(p),
                epoch: 0,
            };
            cache.commit_dirty(p, page(2), tag);
        }
        // Committed pages are clean and evictable again: back to the capacity.
        assert_eq!(cache.len(), 4);
        let last = FrameTag {
            frame_id: 1099,
            epoch: 0,
        };
        assert!(cache.get_clean(1099, last).is_some());
    }
}
