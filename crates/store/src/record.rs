//! The operation-log record: the writes of one engine session, a whole group of them (a write
//! transaction, or an exclusive body such as MULTI/EXEC or a script) or one part of a group that
//! spans several records.
//!
//! ```text
//! [header u64: bit 63 "more records of this group follow", bit 62 "continues a group that
//!  earlier records started", bits 0..62 the session id]
//! then per operation:
//! [serial u64][kind u8: 1 put, 2 delete][key length u32][key][value length u32][value]
//! ```
//! All integers little-endian. A delete has an empty value. The log frames and checksums each
//! record (`docs/storage.md`); this format only has to be unambiguous. Records written before
//! groups existed have both flag bits clear (session ids are counters far below 2^62), which
//! reads as a whole group of one record.
//!
//! Invariants: a record holds absolute effects (the value written, or a delete), never an
//! increment, so applying one twice is harmless; every operation carries the engine serial it ran
//! at in its session, so replay can skip what a checkpoint already holds. The decoder checks every
//! length against the bytes present before it takes a slice and allocates nothing from a length
//! field; a record that does not decode as a whole is rejected before any of it is applied.
//!
//! Groups (the crash-safety argument for "all of a group or none of it"): the records of one group
//! are appended back to back, by one session, with no other record between them (an exclusive
//! body holds the exec gate exclusively, a transaction holds it shared and appends its parts
//! before it releases anything, and no checkpoint request runs meanwhile), and they are
//! [`Part::First`], any number of [`Part::Middle`], then [`Part::Last`], or a single
//! [`Part::Whole`]. The log keeps a dense prefix of what was appended, so after a crash a group is
//! either complete or a run of its first parts at the very end of the log; the process that
//! reopens the log appends after that run, and the next record it appends starts a new group
//! (`First` or `Whole`). Replay therefore applies a group only when it meets its `Last` part, and
//! drops an open group that the end of the log or the start of another group interrupts: such a
//! group never completed, so no client was told it was durable in `always`, and in the other
//! modes losing it whole is within their loss bound.

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;

/// One operation of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation<'a> {
    /// The engine serial of the operation in its session.
    pub serial: u64,
    /// The key.
    pub key: &'a [u8],
    /// `Some(value)` for a put, `None` for a delete.
    pub value: Option<&'a [u8]>,
}

/// Header bit: more records of this group follow this one.
const MORE_FOLLOW: u64 = 1 << 63;
/// Header bit: this record continues a group that earlier records started.
const CONTINUES: u64 = 1 << 62;
/// The header bits that hold the session id.
const SESSION_BITS: u64 = CONTINUES - 1;

/// Where a record stands in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The whole group (the common case, and every record written before groups existed).
    Whole,
    /// The first record of a group that more records complete.
    First,
    /// Neither the first nor the last record of its group.
    Middle,
    /// The record that completes its group.
    Last,
}

impl Part {
    /// The part of a group's record: whether records precede it and whether more follow.
    pub fn of(continues: bool, more_follow: bool) -> Part {
        match (continues, more_follow) {
            (false, false) => Part::Whole,
            (false, true) => Part::First,
            (true, true) => Part::Middle,
            (true, false) => Part::Last,
        }
    }

    /// Whether earlier records of its group precede it.
    pub fn continues(self) -> bool {
        matches!(self, Part::Middle | Part::Last)
    }

    /// Whether more records of its group follow it.
    pub fn more_follow(self) -> bool {
        matches!(self, Part::First | Part::Middle)
    }
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// The engine session that wrote it.
    pub session_id: u64,
    /// Its place in its group.
    pub part: Part,
    /// Its operations (a group's last part may have none).
    pub operations: Vec<Operation<'a>>,
}

/// Starts a record payload of `session_id` (its part is [`Part::Whole`] until [`set_part`]).
pub fn start_record(record: &mut Vec<u8>, session_id: u64) {
    assert!(
        session_id <= SESSION_BITS,
        "session id {session_id} does not fit the record header"
    );
    record.clear();
    record.extend_from_slice(&session_id.to_le_bytes());
}

/// Sets the part of a record that [`start_record`] started.
pub fn set_part(record: &mut [u8], part: Part) {
    let (head, _) = record
        .split_first_chunk_mut::<8>()
        .expect("a record starts with its header");
    let mut header = u64::from_le_bytes(*head) & SESSION_BITS;
    if part.continues() {
        header |= CONTINUES;
    }
    if part.more_follow() {
        header |= MORE_FOLLOW;
    }
    *head = header.to_le_bytes();
}

/// Appends one operation to a record payload (starting it with `session_id` when empty, as a
/// [`Part::Whole`] record).
pub fn encode_operation(record: &mut Vec<u8>, session_id: u64, operation: Operation<'_>) {
    if record.is_empty() {
        start_record(record, session_id);
    }
    record.extend_from_slice(&operation.serial.to_le_bytes());
    record.push(if operation.value.is_some() {
        OP_PUT
    } else {
        OP_DELETE
    });
    let value = operation.value.unwrap_or(&[]);
    record.extend_from_slice(&(operation.key.len() as u32).to_le_bytes());
    record.extend_from_slice(operation.key);
    record.extend_from_slice(&(value.len() as u32).to_le_bytes());
    record.extend_from_slice(value);
}

/// The part of a record, from its header alone (the whole record is decoded when applied).
pub fn part_of(payload: &[u8]) -> Result<Part, String> {
    let header = take_u64(&mut &payload[..])?;
    Ok(Part::of(header & CONTINUES != 0, header & MORE_FOLLOW != 0))
}

/// Decodes a whole record: its session id, part and operations, or why it is damaged.
pub fn decode_record(payload: &[u8]) -> Result<Record<'_>, String> {
    let mut rest = payload;
    let header = take_u64(&mut rest)?;
    let part = Part::of(header & CONTINUES != 0, header & MORE_FOLLOW != 0);
    let session_id = header & SESSION_BITS;
    let mut operations = Vec::new();
    while !rest.is_empty() {
        let serial = take_u64(&mut rest)?;
        let (&kind, tail) = rest.split_first().ok_or("operation kind missing")?;
        rest = tail;
        let key = take_bytes(&mut rest)?;
        let value = take_bytes(&mut rest)?;
        let value = match kind {
            OP_PUT => Some(value),
            OP_DELETE if value.is_empty() => None,
            OP_DELETE => return Err("a delete operation carries a value".into()),
            other => return Err(format!("unknown operation kind {other}")),
        };
        if serial == 0 {
            return Err("operation with serial 0 (serials start at 1)".into());
        }
        operations.push(Operation { serial, key, value });
    }
    Ok(Record {
        session_id,
        part,
        operations,
    })
}

fn take_u64(rest: &mut &[u8]) -> Result<u64, String> {
    let (head, tail) = rest
        .split_first_chunk::<8>()
        .ok_or("record cut short in an integer")?;
    *rest = tail;
    Ok(u64::from_le_bytes(*head))
}

fn take_bytes<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], String> {
    let (head, tail) = rest
        .split_first_chunk::<4>()
        .ok_or("record cut short in a length")?;
    let length = u32::from_le_bytes(*head) as usize;
    if tail.len() < length {
        return Err(format!(
            "a field claims {length} bytes but only {} remain in the record",
            tail.len()
        ));
    }
    let (bytes, tail) = tail.split_at(length);
    *rest = tail;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn records_round_trip(
            session_id in any::<u64>().prop_map(|id| id & SESSION_BITS),
            operations in proptest::collection::vec(
                (1u64.., proptest::collection::vec(any::<u8>(), 0..20),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40))),
                1..8,
            ),
        ) {
            let mut record = Vec::new();
            for (serial, key, value) in &operations {
                encode_operation(&mut record, session_id, Operation {
                    serial: *serial, key, value: value.as_deref(),
                });
            }
            let parts = [Part::Whole, Part::First, Part::Middle, Part::Last];
            let part = parts[(session_id % 4) as usize];
            set_part(&mut record, part);
            let decoded = decode_record(&record).unwrap();
            prop_assert_eq!(decoded.session_id, session_id);
            prop_assert_eq!(decoded.part, part);
            let decoded = decoded.operations;
            prop_assert_eq!(decoded.len(), operations.len());
            for (operation, (serial, key, value)) in decoded.iter().zip(&operations) {
                prop_assert_eq!(operation.serial, *serial);
                prop_assert_eq!(operation.key, &key[..]);
                prop_assert_eq!(operation.value, value.as_deref());
            }
            // A cut inside an operation is an error, never a misread.
            for cut in 8..record.len() {
                if let Ok(partial) = decode_record(&record[..cut]) {
                    prop_assert!(partial.operations.len() < operations.len());
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_record(&bytes);
        }
    }

    #[test]
    fn records_without_flags_read_as_whole_groups() {
        let mut record = Vec::new();
        let operation = Operation {
            serial: 3,
            key: b"k",
            value: Some(b"v"),
        };
        encode_operation(&mut record, 41, operation);
        let decoded = decode_record(&record).unwrap();
        assert_eq!((decoded.session_id, decoded.part), (41, Part::Whole));
        for part in [Part::First, Part::Middle, Part::Last, Part::Whole] {
            set_part(&mut record, part);
            let decoded = decode_record(&record).unwrap();
            assert_eq!((decoded.session_id, decoded.part), (41, part));
            assert_eq!(decoded.operations, vec![operation]);
        }
        // A closing part may carry no operation.
        let mut empty = Vec::new();
        start_record(&mut empty, 41);
        set_part(&mut empty, Part::Last);
        let decoded = decode_record(&empty).unwrap();
        assert_eq!((decoded.part, decoded.operations.len()), (Part::Last, 0));
    }

    #[test]
    fn damaged_records_are_named() {
        assert!(decode_record(&[1, 2, 3]).unwrap_err().contains("cut short"));
        let mut record = Vec::new();
        encode_operation(
            &mut record,
            7,
            Operation {
                serial: 1,
                key: b"k",
                value: None,
            },
        );
        record[16] = 9;
        assert!(decode_record(&record).unwrap_err().contains("kind 9"));
    }
}
