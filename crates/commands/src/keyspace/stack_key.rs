//! Engine keys on the stack: the transaction paths build one per read and write of a key, and a
//! heap key each time was a tenth of a collection command's instructions (malloc and free).
//! Invariant: a [`StackKey`] derefs to exactly the bytes `super::engine_key` returns.

use super::engine_key;

/// Keys up to this many bytes get their engine key on the stack ([`StackKey`]).
const STACK_KEY_BYTES: usize = 64;

/// An engine key (`[database] ++ key`), on the stack when the key is short, as nearly all are.
pub(crate) enum StackKey {
    /// The key's bytes are `.0[..1 + key length]`.
    Inline([u8; 1 + STACK_KEY_BYTES], usize),
    /// A longer key.
    Heap(Vec<u8>),
}

impl StackKey {
    /// The engine key of `key` in `database`.
    pub(crate) fn new(database: u8, key: &[u8]) -> StackKey {
        if key.len() > STACK_KEY_BYTES {
            return StackKey::Heap(engine_key(database, key));
        }
        let mut bytes = [0u8; 1 + STACK_KEY_BYTES];
        bytes[0] = database;
        bytes[1..1 + key.len()].copy_from_slice(key);
        StackKey::Inline(bytes, 1 + key.len())
    }
}

impl std::ops::Deref for StackKey {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            StackKey::Inline(bytes, len) => &bytes[..*len],
            StackKey::Heap(bytes) => bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_keys_are_engine_keys() {
        for len in [
            0,
            1,
            STACK_KEY_BYTES - 1,
            STACK_KEY_BYTES,
            STACK_KEY_BYTES + 1,
            300,
        ] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert_eq!(
                &*StackKey::new(7, &key),
                &engine_key(7, &key)[..],
                "length {len}"
            );
        }
    }
}
