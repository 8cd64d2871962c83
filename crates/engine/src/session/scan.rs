//! `Session::scan`: visits the keys of a range of index buckets, one operation (one serial) per
//! call, with a read's CPR rules; and `Session::sample`, which takes up to a bounded number of
//! live keys with their access words from consecutive buckets (an evicting caller's sample).
//! Both walk chains with `Shared::for_each_newest`, the one walk that picks each key's newest
//! valid record out of a chain that several keys may share.

use super::{Session, Step};
use crate::log::Record;
use crate::EngineError;

/// The most keys one [`Session::sample`] call returns (larger requests are clamped): the memory
/// one call holds is bounded whatever the caller asks.
pub const MAX_SAMPLE_KEYS: usize = 1024;

/// Buckets one [`Session::sample`] attempt walks before the session refreshes its epoch: a walk of
/// a large, sparse index does not hold back epoch actions (page frees, phase changes) for long.
const SAMPLE_CHUNK_BUCKETS: usize = 4096;

/// One key found by [`Session::sample`] with its access word.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sampled {
    /// The key.
    pub key: Vec<u8>,
    /// The access word of its newest record (see [`Session::read_touch`]).
    pub access: u32,
}

/// Keys and values one [`Session::scan`] call found, in one reused byte buffer.
#[derive(Default)]
pub(super) struct ScanBuffer {
    bytes: Vec<u8>,
    /// (key end, value end, key start) per entry, offsets into `bytes`.
    spans: Vec<(usize, usize, usize)>,
    /// One value as read (the seqlock copy needs its own buffer).
    value: Vec<u8>,
}

impl ScanBuffer {
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
    }

    /// Appends the record's key and value (nothing for a tombstone).
    fn push(&mut self, record: Record<'_>) {
        let start = self.bytes.len();
        if !record.read_value(&mut self.value) {
            return;
        }
        record.copy_key(&mut self.bytes);
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(&self.value);
        self.spans.push((key_end, self.bytes.len(), start));
    }
}

impl Session {
    /// Visits every key whose index bucket lies in `cursor .. cursor + buckets` with its value
    /// (`visit(key, value)`), and returns the cursor to continue from: 0 once the last bucket was
    /// visited. Start at 0.
    ///
    /// A whole scan (from 0 until 0 comes back) visits every key that is present for the whole
    /// scan exactly once (a key's bucket is fixed and visited once); a key written or deleted
    /// while the scan runs may or may not be visited, and is then visited with the value it had
    /// when its bucket was visited. Each call is one operation with its own serial, and sees
    /// one moment of each bucket: it obeys the same CPR rules as a read. The visitor runs after
    /// the buckets were read, so it may use this session's store through other sessions, but
    /// `buckets` bounds the memory one call holds (keys and values of those buckets).
    pub fn scan(
        &mut self,
        cursor: u64,
        buckets: usize,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<u64, EngineError> {
        let total = self.store.index.bucket_count() as u64;
        if cursor >= total {
            return Err(EngineError::InvalidArgument(format!(
                "scan cursor {cursor} is past the index's {total} buckets"
            )));
        }
        let end = cursor.saturating_add(buckets.max(1) as u64).min(total);
        self.begin_op()?;
        let mut found = std::mem::take(&mut self.scan_buffer);
        let result = self.run(|session| Ok(session.try_scan(cursor..end, &mut found)));
        if result.is_err() {
            // An attempt that shifted may have left part of its buckets; the call failed (e.g.
            // `RolledBack`), so nothing is visited.
            found.clear();
        }
        for &(key_end, value_end, start) in &found.spans {
            visit(
                &found.bytes[start..key_end],
                &found.bytes[key_end..value_end],
            );
        }
        found.clear();
        self.scan_buffer = found;
        result.map(|()| if end == total { 0 } else { end })
    }

    /// One attempt at [`Session::scan`]: the newest live record of every key of `range`'s
    /// chains, into `found`.
    fn try_scan(&self, range: std::ops::Range<u64>, found: &mut ScanBuffer) -> Step<()> {
        found.clear();
        let mut shift = false;
        self.for_each_newest_in(range.start as usize..range.end as usize, |record| {
            if self.observes_newer(&record) {
                shift = true;
                return false;
            }
            found.push(record);
            true
        });
        if shift {
            // A v session must not observe v+1 state.
            return Step::Shift;
        }
        Step::Done(())
    }

    /// Calls `visit` with the newest valid record (tombstones included) of every key whose
    /// chain starts in main buckets `buckets`, until `visit` returns `false`. Caller holds epoch
    /// protection.
    fn for_each_newest_in<'a>(
        &'a self,
        buckets: std::ops::Range<usize>,
        mut visit: impl FnMut(Record<'a>) -> bool,
    ) {
        let shared = &self.store;
        // The bound first, then the heads (see `shared::Located`).
        let begin = shared.log.begin_address();
        let mut settled: Vec<Record<'a>> = Vec::new();
        let mut going = true;
        shared.index.for_each_entry(buckets, |head| {
            if going {
                going = shared.for_each_newest(head, begin, self.invalid, &mut settled, &mut visit);
            }
        });
    }

    /// Takes up to `max_keys` (at most [`MAX_SAMPLE_KEYS`]) live keys with the access words of
    /// their newest records into `out` (cleared first; its key buffers are reused by later
    /// calls): the keys of main buckets `start % buckets`, the next one and so on, wrapping
    /// around, until enough were found or every bucket was visited once. A bucket whose chain
    /// holds several keys yields each live one; a bucket is not split unless `max_keys` is
    /// reached in it. The caller supplies `start` from its own random source, so the engine holds
    /// no randomness.
    ///
    /// One operation (one serial) with a read's CPR rules per batch of buckets; a long walk
    /// refreshes between batches, so the result is not one moment of the whole index (a key
    /// written meanwhile may be missed or seen, as with [`Session::scan`]).
    pub fn sample(
        &mut self,
        start: u64,
        max_keys: usize,
        out: &mut Vec<Sampled>,
    ) -> Result<(), EngineError> {
        let max_keys = max_keys.min(MAX_SAMPLE_KEYS);
        let total = self.store.index.bucket_count();
        let first = (start % total as u64) as usize;
        let mut used = 0;
        self.begin_op()?;
        let mut visited = 0;
        let mut result = Ok(());
        while visited < total && used < max_keys {
            let count = SAMPLE_CHUNK_BUCKETS.min(total - visited);
            let mark = used;
            let spare = &mut self.sample_spare;
            // Split the borrow: `try_sample` needs the session, `spare` is one of its fields.
            let mut spare_taken = std::mem::take(spare);
            result = self.run(|session| {
                used = mark;
                Ok(session.try_sample(
                    first + visited..first + visited + count,
                    max_keys,
                    out,
                    &mut used,
                    &mut spare_taken,
                ))
            });
            self.sample_spare = spare_taken;
            if result.is_err() {
                used = 0;
                break;
            }
            visited += count;
            if visited < total && used < max_keys {
                self.refresh_in_op();
                if let Err(error) = self.check_thrown() {
                    result = Err(error);
                    used = 0;
                    break;
                }
            }
        }
        // Entries past `used` keep their key buffers for the next call.
        self.sample_spare.extend(out.drain(used..));
        self.sample_spare.truncate(MAX_SAMPLE_KEYS);
        result
    }

    /// One attempt at a batch of [`Session::sample`]: `positions` count buckets from bucket 0
    /// and wrap around the index. Writes found keys from `out[*used]` on.
    fn try_sample(
        &self,
        positions: std::ops::Range<usize>,
        max_keys: usize,
        out: &mut Vec<Sampled>,
        used: &mut usize,
        spare: &mut Vec<Sampled>,
    ) -> Step<()> {
        let total = self.store.index.bucket_count();
        let mut shift = false;
        let (from, to) = (positions.start % total, (positions.end - 1) % total + 1);
        // At most two contiguous ranges: the batch may wrap past the last bucket.
        let ranges = if from < to {
            [from..to, 0..0]
        } else {
            [from..total, 0..to]
        };
        for range in ranges {
            self.for_each_newest_in(range, |record| {
                if *used >= max_keys {
                    return false;
                }
                if self.observes_newer(&record) {
                    shift = true;
                    return false;
                }
                if record.is_tombstone() {
                    return true;
                }
                if *used == out.len() {
                    out.push(spare.pop().unwrap_or_default());
                }
                let slot = &mut out[*used];
                slot.key.clear();
                record.copy_key(&mut slot.key);
                slot.access = record.access();
                *used += 1;
                true
            });
            if shift {
                return Step::Shift;
            }
        }
        Step::Done(())
    }
}
