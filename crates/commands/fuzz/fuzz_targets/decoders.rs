//! Arbitrary bytes through the server's decoders: the oplog record payload (replayed at
//! startup), the stored value header and the hash payload. None may panic; a decoded record
//! must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prefixkv_commands::keyspace::{decode_record, encode_operation};
use prefixkv_commands::value;

fuzz_target!(|data: &[u8]| {
    if let Ok((session_id, operations)) = decode_record(data) {
        let mut again = Vec::new();
        for operation in &operations {
            encode_operation(
                &mut again,
                session_id,
                operation.serial,
                operation.expire_at_ms.is_some(),
                operation.key,
                operation.value,
            );
        }
        if !operations.is_empty() {
            assert_eq!(again, data);
        }
    }
    if let Ok(stored) = value::decode(data) {
        if stored.kind == value::Kind::Hash {
            if let Ok(pairs) = value::decode_hash(&stored.payload) {
                assert_eq!(value::encode_hash(&pairs), stored.payload);
            }
        }
    }
});
