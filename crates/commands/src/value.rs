//! Stored value encoding: what the server writes as an engine value.
//!
//! Layout (all integers little-endian):
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 1 | type tag ([`Kind`]): 1 string, 2 small hash, 3 list, 4 set, 5 sorted set, 6 large hash, 7 stream |
//! | 1 | 8 | absolute expiry, Unix milliseconds (0 = no expiry) |
//! | 9 | n | payload |
//!
//! Payloads: a string's bytes; a small hash's fields, a sequence of
//! `[field length u32][field][value length u32][value]`, fields unique, in insertion order; for
//! the kinds stored as records ([`Kind::in_records`]) the headers of their `prefixkv-collections`
//! structures, whose records are keyed by the object id the payload starts with (a list: a
//! `List`; a set and a large hash: a `Hash`; a sorted set: a `Hash` of member -> score, then a
//! `Tree` of `[score key][member]`, both under one id; a stream: the headers of
//! `crate::commands::streams::object`, its entries tree's id first). Decoding checks every length against the
//! bytes present, so a damaged value is an error, never an out-of-bounds read or an allocation
//! sized by a length.

/// Bytes before the payload.
pub const HEADER_BYTES: usize = 9;

/// The Redis type of a stored value, with how it is stored (the type tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    String,
    /// A small hash of field -> value, stored whole in the value (Redis's listpack encoding).
    Hash,
    /// A list (records: a `List`, a deque of chunks).
    List,
    /// A set (records: a `Hash` of member -> empty).
    Set,
    /// A sorted set (records: a `Hash` of member -> score and a `Tree` in score order).
    ZSet,
    /// A large hash (records: a `Hash`; Redis's hashtable encoding).
    HashTable,
    /// A stream (records: its entries `Tree`, its groups `Hash` and each group's structures).
    Stream,
}

impl Kind {
    /// The name `TYPE` and `SCAN ... TYPE` use.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash | Kind::HashTable => "hash",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::Stream => "stream",
        }
    }

    /// Whether the value lives in records of its own under an object id (its payload is only
    /// headers): deleting or overwriting it must delete them, copying it must copy them.
    pub fn in_records(self) -> bool {
        matches!(
            self,
            Kind::List | Kind::Set | Kind::ZSet | Kind::HashTable | Kind::Stream
        )
    }

    fn tag(self) -> u8 {
        match self {
            Kind::String => 1,
            Kind::Hash => 2,
            Kind::List => 3,
            Kind::Set => 4,
            Kind::ZSet => 5,
            Kind::HashTable => 6,
            Kind::Stream => 7,
        }
    }
}

/// The object id of a payload stored as records (every collection header starts with it).
pub fn object_id(kind: Kind, payload: &[u8]) -> Option<u64> {
    if !kind.in_records() {
        return None;
    }
    payload
        .first_chunk::<8>()
        .map(|bytes| u64::from_le_bytes(*bytes))
}

/// A decoded stored value (owning its bytes).
#[derive(Clone, Debug)]
pub struct Stored {
    /// The type tag.
    pub kind: Kind,
    /// Absolute expiry in Unix ms, 0 = none.
    pub expire_at_ms: u64,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Why a stored value could not be decoded.
#[derive(Debug)]
pub struct Malformed(pub &'static str);

/// Reads the header of an encoded value.
pub fn decode_header(bytes: &[u8]) -> Result<(Kind, u64), Malformed> {
    if bytes.len() < HEADER_BYTES {
        return Err(Malformed("value shorter than its header"));
    }
    let kind = match bytes[0] {
        1 => Kind::String,
        2 => Kind::Hash,
        3 => Kind::List,
        4 => Kind::Set,
        5 => Kind::ZSet,
        6 => Kind::HashTable,
        7 => Kind::Stream,
        _ => return Err(Malformed("unknown type tag")),
    };
    let expire = u64::from_le_bytes(bytes[1..9].try_into().expect("8 bytes"));
    Ok((kind, expire))
}

/// Decodes an encoded value.
pub fn decode(bytes: &[u8]) -> Result<Stored, Malformed> {
    let (kind, expire_at_ms) = decode_header(bytes)?;
    Ok(Stored {
        kind,
        expire_at_ms,
        payload: bytes[HEADER_BYTES..].to_vec(),
    })
}

/// Encodes a value into `out` (cleared first).
pub fn encode(kind: Kind, expire_at_ms: u64, payload: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(HEADER_BYTES + payload.len());
    out.push(kind.tag());
    out.extend_from_slice(&expire_at_ms.to_le_bytes());
    out.extend_from_slice(payload);
}

/// A hash's (field, value) pairs in insertion order.
pub type HashPairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Decodes a hash payload into (field, value) pairs.
pub fn decode_hash(payload: &[u8]) -> Result<HashPairs, Malformed> {
    let mut pairs = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        let field = take_chunk(&mut rest)?;
        let value = take_chunk(&mut rest)?;
        pairs.push((field.to_vec(), value.to_vec()));
    }
    Ok(pairs)
}

fn take_chunk<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], Malformed> {
    if rest.len() < 4 {
        return Err(Malformed("hash entry length cut short"));
    }
    let length = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    if rest.len() - 4 < length {
        return Err(Malformed("hash entry longer than the value"));
    }
    let chunk = &rest[4..4 + length];
    *rest = &rest[4 + length..];
    Ok(chunk)
}

/// Encodes hash pairs as a payload.
pub fn encode_hash(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let total: usize = pairs.iter().map(|(f, v)| 8 + f.len() + v.len()).sum();
    let mut out = Vec::with_capacity(total);
    for (field, value) in pairs {
        out.extend_from_slice(&(field.len() as u32).to_le_bytes());
        out.extend_from_slice(field);
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut out = Vec::new();
        encode(
            Kind::Hash,
            77,
            &encode_hash(&[(b"f".to_vec(), b"v".to_vec())]),
            &mut out,
        );
        let stored = decode(&out).unwrap();
        assert_eq!(stored.kind, Kind::Hash);
        assert_eq!(stored.expire_at_ms, 77);
        assert_eq!(
            decode_hash(&stored.payload).unwrap(),
            vec![(b"f".to_vec(), b"v".to_vec())]
        );
        assert!(decode_hash(&[9, 0, 0, 0, 1]).is_err());
        assert!(decode(&[8; 9]).is_err());
        assert_eq!(decode(&[7; 9]).unwrap().kind, Kind::Stream);
        assert_eq!(object_id(Kind::List, &9u64.to_le_bytes()), Some(9));
        assert_eq!(object_id(Kind::Hash, &9u64.to_le_bytes()), None);
    }
}
