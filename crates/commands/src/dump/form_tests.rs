//! The decoder's properties: every form round-trips, and a truncated or corrupted input is an
//! error, never a panic (the CRC is recomputed too, to reach the structural checks).

use proptest::prelude::*;

use super::*;
use crate::commands::streams::object::encode_entry;

const LIMIT: usize = 1 << 20;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..12)
}

/// Owned data a form borrows from.
#[derive(Clone, Debug)]
enum Owned {
    String(Vec<u8>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>, bool),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    ZSet(Vec<(Vec<u8>, f64)>),
    /// Entries, and groups: (name, nacks, consumers: (name, ids)).
    Stream(Vec<Vec<u8>>, Vec<OwnedGroup>),
}

#[derive(Clone, Debug)]
struct OwnedGroup {
    name: Vec<u8>,
    pending: Vec<Vec<u8>>,
    consumers: Vec<(Vec<u8>, Vec<StreamId>)>,
}

fn dedup<T: Clone>(items: Vec<(Vec<u8>, T)>) -> Vec<(Vec<u8>, T)> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|(k, _)| seen.insert(k.clone()))
        .collect()
}

fn stream() -> impl Strategy<Value = Owned> {
    let entries = prop::collection::btree_set(0u64..50, 0..8);
    let groups = prop::collection::vec((bytes(), prop::collection::vec(0usize..3, 0..8)), 0..3);
    (entries, groups).prop_map(|(ids, groups)| {
        let ids: Vec<StreamId> = ids.into_iter().map(|ms| StreamId::new(ms, 1)).collect();
        let entries = ids
            .iter()
            .map(|&id| {
                encode_entry(
                    id,
                    &[
                        bytes::Bytes::from_static(b"f"),
                        bytes::Bytes::from_static(b"v"),
                    ],
                )
            })
            .collect();
        let groups = dedup(groups)
            .into_iter()
            .map(|(name, owners)| {
                // Consumer c owns the pending entries whose owner index is c.
                let mut consumers: Vec<(Vec<u8>, Vec<StreamId>)> = (0..3)
                    .map(|c| (format!("c{c}").into_bytes(), Vec::new()))
                    .collect();
                let mut pending = Vec::new();
                for (&id, &owner) in ids.iter().zip(&owners) {
                    let nack = Nack {
                        id,
                        delivered_ms: 7,
                        deliveries: 2,
                        consumer: consumers[owner].0.clone(),
                    };
                    pending.push(nack.encode());
                    consumers[owner].1.push(id);
                }
                OwnedGroup {
                    name,
                    pending,
                    consumers,
                }
            })
            .collect();
        Owned::Stream(entries, groups)
    })
}

fn owned() -> impl Strategy<Value = Owned> {
    prop_oneof![
        bytes().prop_map(Owned::String),
        (
            prop::collection::vec((bytes(), bytes()), 1..6),
            any::<bool>()
        )
            .prop_map(|(pairs, small)| Owned::Hash(dedup(pairs), small)),
        prop::collection::vec(bytes(), 1..6).prop_map(Owned::List),
        prop::collection::btree_set(bytes(), 1..6)
            .prop_map(|s| Owned::Set(s.into_iter().collect())),
        prop::collection::vec((bytes(), -1e9f64..1e9), 1..6).prop_map(|m| Owned::ZSet(dedup(m))),
        stream(),
    ]
}

fn form(owned: &Owned, expire_at_ms: u64) -> Form<'_> {
    let body = match owned {
        Owned::String(b) => Body::String(b),
        Owned::Hash(pairs, small) => {
            let pairs = pairs.iter().map(|(f, v)| (&f[..], &v[..])).collect();
            if *small {
                Body::Hash(pairs)
            } else {
                Body::HashTable(pairs)
            }
        }
        Owned::List(items) => Body::List(items.iter().map(Vec::as_slice).collect()),
        Owned::Set(items) => Body::Set(items.iter().map(Vec::as_slice).collect()),
        Owned::ZSet(members) => Body::ZSet(members.iter().map(|(m, s)| (&m[..], *s)).collect()),
        Owned::Stream(entries, groups) => Body::Stream(StreamForm {
            last_id: StreamId::new(60, 0),
            entries_added: entries.len() as u64 + 3,
            max_deleted: StreamId::new(2, 0),
            entries: entries.iter().map(Vec::as_slice).collect(),
            groups: groups
                .iter()
                .map(|g| GroupForm {
                    name: &g.name,
                    last_id: StreamId::new(5, 5),
                    entries_read: -1,
                    pending: g.pending.iter().map(Vec::as_slice).collect(),
                    consumers: g
                        .consumers
                        .iter()
                        .map(|(name, ids)| ConsumerForm {
                            name,
                            seen_ms: 99,
                            ids: ids.clone(),
                        })
                        .collect(),
                })
                .collect(),
        }),
    };
    Form { expire_at_ms, body }
}

/// `bytes` with its checksum replaced by the right one for its (changed) body.
fn with_crc(mut bytes: Vec<u8>) -> Vec<u8> {
    let n = bytes.len().saturating_sub(CRC_BYTES);
    bytes.truncate(n);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

proptest! {
    #[test]
    fn every_form_round_trips(owned in owned(), expire in any::<u64>()) {
        let form = form(&owned, expire);
        let bytes = encode(&form, LIMIT).unwrap();
        prop_assert_eq!(decode(&bytes).unwrap(), form);
    }

    #[test]
    fn truncated_or_corrupted_input_is_an_error(owned in owned(), cut in any::<prop::sample::Index>(),
                                                flip in any::<prop::sample::Index>(), byte in 1u8..) {
        let bytes = encode(&form(&owned, 0), LIMIT).unwrap();
        // Any truncation: the checksum (or the length) no longer matches.
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert!(decode(short).is_err());
        // Any changed byte: CRC-32C detects every error burst of up to 32 bits.
        let mut damaged = bytes.clone();
        let at = flip.index(damaged.len());
        damaged[at] ^= byte;
        prop_assert!(decode(&damaged).is_err());
        // A truncated body under a valid checksum reaches the structural checks: an error
        // unless the cut happens to leave a complete form (never a panic either way).
        let body_cut = cut.index(bytes.len() - CRC_BYTES);
        let resealed = with_crc(bytes[..body_cut + CRC_BYTES].to_vec());
        if body_cut < bytes.len() - CRC_BYTES {
            prop_assert!(decode(&resealed).is_err());
        }
        // A changed body byte under a valid checksum: decoding must not panic.
        let _ = decode(&with_crc(damaged));
    }

    #[test]
    fn arbitrary_bytes_under_a_valid_checksum_never_panic(mut body in prop::collection::vec(any::<u8>(), 0..200),
                                                          tag in 1u8..8) {
        if body.len() >= 2 {
            body[0] = VERSION;
            body[1] = tag;
        }
        body.extend_from_slice(&[0; CRC_BYTES]);
        let _ = decode(&with_crc(body));
    }
}

#[test]
fn a_form_beyond_the_limit_is_refused_while_written() {
    let big = vec![7u8; 1000];
    let items = vec![&big[..]; 10];
    let form = Form {
        expire_at_ms: 0,
        body: Body::List(items),
    };
    let error = encode(&form, 4096).unwrap_err();
    assert!(error.to_string().contains("limit of 4096 bytes"), "{error}");
    assert!(encode(&form, 1 << 20).is_ok());
}

#[test]
fn inconsistent_streams_and_repeats_are_refused() {
    // A consumer owning an id its group's pending list gives another consumer.
    let nack = Nack {
        id: StreamId::new(1, 1),
        delivered_ms: 0,
        deliveries: 1,
        consumer: b"alice".to_vec(),
    }
    .encode();
    let entry = encode_entry(StreamId::new(1, 1), &[]);
    let form = Form {
        expire_at_ms: 0,
        body: Body::Stream(StreamForm {
            last_id: StreamId::new(1, 1),
            entries_added: 1,
            max_deleted: StreamId::MIN,
            entries: vec![&entry],
            groups: vec![GroupForm {
                name: b"g",
                last_id: StreamId::new(1, 1),
                entries_read: 1,
                pending: vec![&nack],
                consumers: vec![ConsumerForm {
                    name: b"bob",
                    seen_ms: 0,
                    ids: vec![StreamId::new(1, 1)],
                }],
            }],
        }),
    };
    let error = decode(&encode(&form, LIMIT).unwrap()).unwrap_err();
    assert!(error.to_string().contains("consumer owns an id"), "{error}");
    let repeated = Form {
        expire_at_ms: 0,
        body: Body::Set(vec![b"a", b"a"]),
    };
    assert!(decode(&encode(&repeated, LIMIT).unwrap()).is_err());
    let empty = Form {
        expire_at_ms: 0,
        body: Body::List(Vec::new()),
    };
    assert!(decode(&encode(&empty, LIMIT).unwrap()).is_err());
}
