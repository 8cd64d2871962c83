//! Shuttle model check of the read-mark protocol (`MarkTable`): a writer appends frames, a
//! checkpointer computes mxSafeFrame, takes slot 0, copies frames into a model database one page
//! at a time and publishes, and readers pin snapshots and read page by page. Every read must
//! return the page's value as of the reader's mark: never a torn (half-copied) or future value.
//!
//! The store's real `MarkTable` is used; the WAL and database are in-memory models, with every
//! page access a separate critical section so that shuttle can interleave them.

use prefixkv_pagestore::marks::{MarkTable, ReadMarks, ReaderPin, READ_MARK_SLOTS, UNUSED_MARK};
use shuttle::sync::Mutex;
use std::sync::Arc;

const PAGES: usize = 3;

#[derive(Default)]
struct Model {
    /// (page, version) of frames 1..=len.
    frames: Vec<(usize, u32)>,
    backfilled: u64,
    db: [u32; PAGES],
}

impl Model {
    fn newest(&self, page: usize, at_or_below: u64) -> Option<u32> {
        self.frames[..at_or_below as usize]
            .iter()
            .rev()
            .find(|(p, _)| *p == page)
            .map(|(_, v)| *v)
    }
}

fn table() -> MarkTable {
    // `ReadMarks::default()` builds the table; take a fresh copy of its initial state.
    let marks = ReadMarks::default();
    let guard = marks.lock();
    MarkTable { slots: guard.slots }
}

fn scenario() {
    let marks = Arc::new(Mutex::new(table()));
    let model = Arc::new(Mutex::new(Model::default()));
    let writer = {
        let model = Arc::clone(&model);
        shuttle::thread::spawn(move || {
            for version in 1..=4u32 {
                model
                    .lock()
                    .unwrap()
                    .frames
                    .push(((version as usize) % PAGES, version));
            }
        })
    };
    let checkpointer = {
        let (marks, model) = (Arc::clone(&marks), Arc::clone(&model));
        shuttle::thread::spawn(move || {
            for _ in 0..2 {
                let safe = {
                    let mut table = marks.lock().unwrap();
                    let max_frame = model.lock().unwrap().frames.len() as u64;
                    let safe = table.safe_frame(max_frame);
                    if !table.try_exclusive(0) {
                        continue;
                    }
                    safe
                };
                for page in 0..PAGES {
                    let mut m = model.lock().unwrap();
                    let from = m.backfilled;
                    if m.frames[from as usize..safe as usize]
                        .iter()
                        .any(|(p, _)| *p == page)
                    {
                        let value = m.newest(page, safe).unwrap();
                        m.db[page] = value;
                    }
                }
                {
                    let mut m = model.lock().unwrap();
                    m.backfilled = m.backfilled.max(safe);
                }
                marks.lock().unwrap().release_exclusive(0);
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (marks, model) = (Arc::clone(&marks), Arc::clone(&model));
            shuttle::thread::spawn(move || {
                for _ in 0..2 {
                    let pin: ReaderPin = {
                        let mut table = marks.lock().unwrap();
                        let m = model.lock().unwrap();
                        match table.pin_reader(m.frames.len() as u64, m.backfilled) {
                            Some(pin) => pin,
                            None => continue,
                        }
                    };
                    for page in 0..PAGES {
                        let m = model.lock().unwrap();
                        let expected = m.newest(page, pin.mark).unwrap_or(0);
                        let seen = if pin.slot == 0 {
                            m.db[page]
                        } else {
                            m.newest(page, pin.mark).unwrap_or(m.db[page])
                        };
                        assert_eq!(
                            seen, expected,
                            "page {page} read at mark {} (slot {})",
                            pin.mark, pin.slot
                        );
                    }
                    marks.lock().unwrap().unpin_reader(pin);
                }
            })
        })
        .collect();
    writer.join().unwrap();
    checkpointer.join().unwrap();
    for reader in readers {
        reader.join().unwrap();
    }
    let table = marks.lock().unwrap();
    assert_eq!(table.total_readers(), 0);
    assert!(table.slots.iter().all(|s| !s.exclusive));
    assert!(table.slots[1..READ_MARK_SLOTS]
        .iter()
        .all(|s| s.mark == UNUSED_MARK || s.mark <= 4));
}

#[test]
fn readers_never_see_torn_or_future_pages_under_checkpoints() {
    let iterations = std::env::var("PAGESTORE_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    shuttle::check_random(scenario, iterations);
}

#[test]
fn readers_never_see_torn_or_future_pages_under_checkpoints_pct() {
    shuttle::check_pct(scenario, 1000, 3);
}
