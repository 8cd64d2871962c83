//! Read marks: the five reader slots that pin snapshots, as in SQLite's WAL index.
//!
//! Slot 0 means "reads the database file only" (taken when every committed frame was already
//! backfilled). Slots 1..=4 carry a mark `m`: their readers see, for each page, the newest frame
//! `<= m`, else the database file. The checkpointer holds slot 0 exclusively while it writes the
//! database file, and never copies a frame above the smallest mark of a slot in use
//! ([`MarkTable::safe_frame`]); a log restart holds slots 1..=4 exclusively, so nobody reads the
//! WAL while frame ids are being reused.
//!
//! Invariants (all state lives under one mutex, so a mark and its reader count change together):
//! an in-use slot's mark never changes; a slot is never both exclusive and shared; a mark is
//! `<=` the committed `max_frame` of the log generation that set it. Lock order: this table
//! before the store's shared state.

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// Number of read-mark slots (SQLite's `WAL_NREADER`).
pub const READ_MARK_SLOTS: usize = 5;
/// The mark of a slot nobody has set since the last reset.
pub const UNUSED_MARK: u64 = u64::MAX;

/// One slot.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// The pinned frame (`UNUSED_MARK` when unset).
    pub mark: u64,
    /// Readers holding the slot shared.
    pub readers: u32,
    /// Held exclusively by a checkpointer.
    pub exclusive: bool,
}

/// The table of slots (locked through [`ReadMarks::lock`]).
#[derive(Debug)]
pub struct MarkTable {
    /// The slots; index 0 is the database-only slot.
    pub slots: [Slot; READ_MARK_SLOTS],
}

/// What a reader pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderPin {
    /// Slot index (0 = database file only).
    pub slot: usize,
    /// The newest frame the reader may see.
    pub mark: u64,
}

impl MarkTable {
    /// Pins a snapshot for a new reader given the committed `max_frame` and `backfilled_frames`;
    /// `None` when every usable slot is held exclusively (the caller waits and retries).
    pub fn pin_reader(&mut self, max_frame: u64, backfilled_frames: u64) -> Option<ReaderPin> {
        debug_assert!(backfilled_frames <= max_frame);
        if max_frame == backfilled_frames && !self.slots[0].exclusive {
            self.slots[0].readers += 1;
            return Some(ReaderPin {
                slot: 0,
                mark: max_frame,
            });
        }
        let usable = |s: &Slot| !s.exclusive;
        let chosen = (1..READ_MARK_SLOTS)
            .find(|&i| usable(&self.slots[i]) && self.slots[i].mark == max_frame)
            .or_else(|| {
                (1..READ_MARK_SLOTS)
                    .find(|&i| usable(&self.slots[i]) && self.slots[i].readers == 0)
                    .inspect(|&i| {
                        self.slots[i].mark = max_frame;
                    })
            })
            .or_else(|| {
                // Every slot is in use with another mark: share the newest older snapshot.
                (1..READ_MARK_SLOTS)
                    .filter(|&i| usable(&self.slots[i]) && self.slots[i].mark <= max_frame)
                    .max_by_key(|&i| self.slots[i].mark)
            })?;
        self.slots[chosen].readers += 1;
        Some(ReaderPin {
            slot: chosen,
            mark: self.slots[chosen].mark,
        })
    }

    /// Releases a reader's pin.
    pub fn unpin_reader(&mut self, pin: ReaderPin) {
        let slot = &mut self.slots[pin.slot];
        assert!(slot.readers > 0, "unpinning a slot with no readers");
        slot.readers -= 1;
    }

    /// SQLite's mxSafeFrame: the newest frame that can be copied into the database file without
    /// changing a page some live reader still reads from it. Idle slots with an older mark are
    /// reset on the way, so that new readers cannot pin old frames.
    pub fn safe_frame(&mut self, max_frame: u64) -> u64 {
        let mut safe = max_frame;
        for i in 1..READ_MARK_SLOTS {
            let slot = &mut self.slots[i];
            if slot.mark < safe {
                if slot.readers == 0 && !slot.exclusive {
                    slot.mark = if i == 1 { safe } else { UNUSED_MARK };
                } else {
                    safe = slot.mark;
                }
            }
        }
        safe
    }

    /// Takes slot `index` exclusively if nobody holds it.
    pub fn try_exclusive(&mut self, index: usize) -> bool {
        let slot = &mut self.slots[index];
        if slot.readers == 0 && !slot.exclusive {
            slot.exclusive = true;
            true
        } else {
            false
        }
    }

    /// Releases an exclusive hold on slot `index`.
    pub fn release_exclusive(&mut self, index: usize) {
        assert!(
            self.slots[index].exclusive,
            "releasing a slot that is not held exclusively"
        );
        self.slots[index].exclusive = false;
    }

    /// Readers currently pinned anywhere.
    pub fn total_readers(&self) -> u32 {
        self.slots.iter().map(|s| s.readers).sum()
    }
}

/// The shared slot table plus a condition variable signalled whenever a hold is released.
#[derive(Debug)]
pub struct ReadMarks {
    table: Mutex<MarkTable>,
    released: Condvar,
}

impl Default for ReadMarks {
    fn default() -> Self {
        let slot = Slot {
            mark: UNUSED_MARK,
            readers: 0,
            exclusive: false,
        };
        ReadMarks {
            table: Mutex::new(MarkTable {
                slots: [slot; READ_MARK_SLOTS],
            }),
            released: Condvar::new(),
        }
    }
}

impl ReadMarks {
    /// Locks the table.
    pub fn lock(&self) -> MutexGuard<'_, MarkTable> {
        self.table.lock()
    }

    /// Waits for a release until `deadline`; returns false if the deadline passed.
    pub fn wait(&self, guard: &mut MutexGuard<'_, MarkTable>, deadline: Instant) -> bool {
        !self.released.wait_until(guard, deadline).timed_out()
    }

    /// Wakes every waiter (call after releasing any hold).
    pub fn notify(&self) {
        self.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_frame_is_capped_by_live_readers_and_resets_idle_slots() {
        let marks = ReadMarks::default();
        let mut table = marks.lock();
        let old = table.pin_reader(10, 0).unwrap();
        assert_eq!(old, ReaderPin { slot: 1, mark: 10 });
        let newer = table.pin_reader(20, 0).unwrap();
        assert_eq!(newer.mark, 20);
        assert_eq!(table.safe_frame(30), 10);
        table.unpin_reader(old);
        assert_eq!(table.safe_frame(30), 20);
        table.unpin_reader(newer);
        assert_eq!(table.safe_frame(30), 30);
        assert_eq!(
            table.pin_reader(30, 30).unwrap().slot,
            0,
            "fully backfilled: database only"
        );
    }

    #[test]
    fn readers_share_the_newest_old_snapshot_when_slots_run_out() {
        let marks = ReadMarks::default();
        let mut table = marks.lock();
        for frame in 1..=4 {
            table.pin_reader(frame, 0).unwrap();
        }
        let pin = table.pin_reader(9, 0).unwrap();
        assert_eq!(pin.mark, 4);
        assert!(table.try_exclusive(0));
        assert!(!table.try_exclusive(1));
    }
}
