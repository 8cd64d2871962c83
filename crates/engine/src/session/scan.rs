//! `Session::scan`: visits the keys of a range of index buckets, one operation (one serial) per
//! call, with a read's CPR rules.

use super::{Session, Step};
use crate::log::{Record, FLAG_INVALID, FLAG_STABLE};
use crate::state::Phase;
use crate::EngineError;

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
        let total = self.store.shared.index.bucket_count() as u64;
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
        let shared = &self.store.shared;
        // The bound first, then the heads (see `store::Located`).
        let begin = shared.log.begin_address();
        let mut heads = Vec::new();
        shared
            .index
            .for_each_entry(range.start as usize..range.end as usize, |head| {
                heads.push(head)
            });
        let mut settled: Vec<Record<'_>> = Vec::new();
        for head in heads {
            settled.clear();
            let mut address = head;
            while address >= begin && address != 0 {
                let record = shared.log.record(address);
                let word0 = record.word0();
                address = record.previous();
                if word0 & (FLAG_INVALID | FLAG_STABLE) != 0
                    || self.invalid.contains(record.version())
                    || settled.iter().any(|other| other.same_key(&record))
                {
                    continue;
                }
                settled.push(record);
                if matches!(self.phase, Phase::Prepare | Phase::Pause)
                    && record.version() > self.version
                {
                    // A v session must not observe v+1 state.
                    return Step::Shift;
                }
                found.push(record);
            }
        }
        Step::Done(())
    }
}
