//! The operation-log record: one committed write transaction of one engine session.
//!
//! ```text
//! [session id u64]
//! then per operation:
//! [serial u64][kind u8: 1 put, 2 delete][key length u32][key][value length u32][value]
//! ```
//! All integers little-endian. A delete has an empty value. The log frames and checksums each
//! record (`docs/storage.md`); this format only has to be unambiguous.
//!
//! Invariants: a record holds absolute effects (the value written, or a delete), never an
//! increment, so applying one twice is harmless; every operation carries the engine serial it ran
//! at in its session, so replay can skip what a checkpoint already holds. The decoder checks every
//! length against the bytes present before it takes a slice and allocates nothing from a length
//! field; a record that does not decode as a whole is rejected before any of it is applied.

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

/// Appends one operation to a record payload (starting it with `session_id` when empty).
pub fn encode_operation(record: &mut Vec<u8>, session_id: u64, operation: Operation<'_>) {
    if record.is_empty() {
        record.extend_from_slice(&session_id.to_le_bytes());
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

/// Decodes a whole record: its session id and operations, or why it is damaged.
pub fn decode_record(payload: &[u8]) -> Result<(u64, Vec<Operation<'_>>), String> {
    let mut rest = payload;
    let session_id = take_u64(&mut rest)?;
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
    Ok((session_id, operations))
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
            session_id in any::<u64>(),
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
            let (decoded_session, decoded) = decode_record(&record).unwrap();
            prop_assert_eq!(decoded_session, session_id);
            prop_assert_eq!(decoded.len(), operations.len());
            for (operation, (serial, key, value)) in decoded.iter().zip(&operations) {
                prop_assert_eq!(operation.serial, *serial);
                prop_assert_eq!(operation.key, &key[..]);
                prop_assert_eq!(operation.value, value.as_deref());
            }
            // A cut inside an operation is an error, never a misread.
            for cut in 8..record.len() {
                if let Ok((_, partial)) = decode_record(&record[..cut]) {
                    prop_assert!(partial.len() < operations.len());
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_record(&bytes);
        }
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
