//! Collections in the session workload (opt-in: [`super::Progress::collections`]): besides its
//! string keys, a session appends to a list, a set, a hash, a sorted set and a stream of its own,
//! and the final check reads each back and compares it with the session's oracle.
//!
//! Invariants the check rests on:
//! - Every collection key of a session carries one hash tag, chosen so that its slot belongs to
//!   worker `id % shards`; the client routes by slot, so all of them go to that one worker, and a
//!   session's commands on one worker run in push order (one connection, batches in order).
//! - Element `i` of a collection is written by the collection's `i`-th operation of one
//!   *generation* (numbered from one): a rollback ends a generation, and later operations go to
//!   keys of the next one. A checkpoint keeps a prefix of what one worker ran, so each generation's key
//!   must hold exactly the elements of its operations `1..=k`, in order, for one `k`: every
//!   operation the oracle says must be present is at most `k`, every one it says is lost is
//!   beyond `k`, nothing beyond what was sent, no holes (an operation a worker refused without
//!   running it, `-MOVED`/`-TRYAGAIN`, is skipped, never present).
//! - The element of operation `i` is self-describing in every type (list and set member `i`,
//!   hash field `field_i` = `i`, sorted-set member `member_i` scored `i`, stream entry id `i-1`
//!   with field `n` = `i`), so a read-back names the operations it holds.

use std::collections::BTreeMap;

use prefixkv_dprnet::client::ClientError;
use prefixkv_dprnet::{DprRedisClient, DprRedisSession};
use prefixkv_resp::Reply;

use super::{Expected, SessionRecord};

/// The five collection types of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Collection {
    /// `RPUSH`, read with `LRANGE`.
    List,
    /// `SADD`, read with `SMEMBERS`.
    Set,
    /// `HSET`, read with `HGETALL`.
    Hash,
    /// `ZADD`, read with `ZRANGE … WITHSCORES`.
    SortedSet,
    /// `XADD` with an explicit id, read with `XRANGE`.
    Stream,
}

/// Every collection type, in the order a session writes them.
pub const COLLECTIONS: [Collection; 5] = [
    Collection::List,
    Collection::Set,
    Collection::Hash,
    Collection::SortedSet,
    Collection::Stream,
];

/// Collection operations (of each type) a session issues after each batch of string writes.
pub const OPERATIONS_PER_BATCH: u64 = 2;

/// One collection write: element `number` (from 1) of generation `generation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Element {
    /// Which collection.
    pub collection: Collection,
    /// The session's rollbacks seen when it was pushed.
    pub generation: u64,
    /// Its operation number within the generation, from 1.
    pub number: u64,
}

impl Collection {
    fn name(self) -> &'static str {
        match self {
            Collection::List => "list",
            Collection::Set => "set",
            Collection::Hash => "hash",
            Collection::SortedSet => "zset",
            Collection::Stream => "stream",
        }
    }

    /// The key of this collection in `generation` for a session whose hash tag is `tag`.
    pub fn key(self, tag: &str, generation: u64) -> Vec<u8> {
        format!("{{{tag}}}:{}:{generation}", self.name()).into_bytes()
    }

    /// The command that writes element `number` to `key`.
    pub fn write(self, key: &[u8], number: u64) -> Vec<Vec<u8>> {
        let n = number.to_string();
        let words: Vec<String> = match self {
            Collection::List => vec!["RPUSH".into(), n],
            Collection::Set => vec!["SADD".into(), n],
            Collection::Hash => vec!["HSET".into(), format!("field_{n}"), n],
            Collection::SortedSet => vec!["ZADD".into(), n.clone(), format!("member_{n}")],
            Collection::Stream => vec!["XADD".into(), format!("{n}-1"), "n".into(), n],
        };
        let mut args: Vec<Vec<u8>> = words.into_iter().map(String::into_bytes).collect();
        args.insert(1, key.to_vec());
        args
    }

    /// The command that reads the whole collection at `key`.
    pub fn read(self, key: &[u8]) -> Vec<Vec<u8>> {
        let words: &[&str] = match self {
            Collection::List => &["LRANGE", "0", "-1"],
            Collection::Set => &["SMEMBERS"],
            Collection::Hash => &["HGETALL"],
            Collection::SortedSet => &["ZRANGE", "0", "-1", "WITHSCORES"],
            Collection::Stream => &["XRANGE", "-", "+"],
        };
        let mut args: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
        args.insert(1, key.to_vec());
        args
    }

    /// Checks the reply to the write of element `number`.
    pub fn check_write_reply(self, number: u64, reply: &Reply) -> Result<(), String> {
        let ok = match self {
            Collection::List => matches!(reply, Reply::Integer(n) if *n >= 1),
            // Each element is new to its collection.
            Collection::Set | Collection::Hash | Collection::SortedSet => {
                *reply == Reply::Integer(1)
            }
            Collection::Stream => *reply == Reply::bulk(format!("{number}-1")),
        };
        if ok {
            Ok(())
        } else {
            Err(format!("{:?} of element {number} answered {reply:?}", self))
        }
    }

    /// The operation numbers a read-back holds, in the collection's order (by number for the
    /// unordered set and hash), checking each element describes itself consistently.
    pub fn parse_read(self, reply: &Reply) -> Result<Vec<u64>, String> {
        let items = flatten(reply)?;
        let mut numbers = match self {
            Collection::List | Collection::Set => items
                .iter()
                .map(|item| number(item, ""))
                .collect::<Result<Vec<_>, _>>()?,
            Collection::Hash | Collection::SortedSet => {
                if items.len() % 2 != 0 {
                    return Err(format!("{self:?}: an odd number of items: {items:?}"));
                }
                let prefix = if self == Collection::Hash {
                    "field_"
                } else {
                    "member_"
                };
                let mut numbers = Vec::new();
                for pair in items.chunks(2) {
                    let named = number(&pair[0], prefix)?;
                    let valued = number(&pair[1], "")?;
                    if named != valued {
                        return Err(format!("{self:?}: {:?} holds {valued}", pair[0]));
                    }
                    numbers.push(named);
                }
                numbers
            }
            Collection::Stream => {
                // Flattened entries: id, then the field and its value.
                if items.len() % 3 != 0 {
                    return Err(format!("stream: malformed entries {items:?}"));
                }
                let mut numbers = Vec::new();
                for entry in items.chunks(3) {
                    let id = String::from_utf8_lossy(&entry[0]).into_owned();
                    let value = number(&entry[2], "")?;
                    if id != format!("{value}-1") || entry[1] != b"n" {
                        return Err(format!("stream: entry {id} holds {entry:?}"));
                    }
                    numbers.push(value);
                }
                numbers
            }
        };
        if matches!(self, Collection::Set | Collection::Hash) {
            numbers.sort_unstable();
        }
        Ok(numbers)
    }
}

/// Every string in a (nested) reply, depth first; an empty or absent collection is empty.
fn flatten(reply: &Reply) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    fn walk(reply: &Reply, out: &mut Vec<Vec<u8>>) -> Result<(), String> {
        match reply {
            Reply::Array(items) | Reply::Set(items) => {
                for item in items {
                    walk(item, out)?;
                }
            }
            Reply::Map(pairs) => {
                for (key, value) in pairs {
                    walk(key, out)?;
                    walk(value, out)?;
                }
            }
            Reply::BulkString(bytes) | Reply::SimpleString(bytes) => out.push(bytes.to_vec()),
            Reply::Integer(n) => out.push(n.to_string().into_bytes()),
            Reply::Double(d) => out.push(d.to_string().into_bytes()),
            Reply::Null | Reply::NullArray | Reply::NullBulkString => {}
            other => return Err(format!("unexpected reply {other:?}")),
        }
        Ok(())
    }
    walk(reply, &mut out)?;
    Ok(out)
}

/// The operation number `item` names after `prefix`.
fn number(item: &[u8], prefix: &str) -> Result<u64, String> {
    std::str::from_utf8(item)
        .ok()
        .and_then(|text| text.strip_prefix(prefix))
        .and_then(|digits| digits.parse().ok())
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("{:?} is no element", String::from_utf8_lossy(item)))
}

/// What a session writes to its collections next.
pub struct CollectionWriter {
    /// The hash tag of every collection key of the session.
    pub tag: String,
    generation: u64,
    next_number: u64,
}

impl CollectionWriter {
    /// A writer for session `id`: its hash tag is the first `c<id>-<n>` whose slot belongs to
    /// worker `id % shards` (so every worker holds some session's collections).
    pub fn new(session: &DprRedisSession, id: u64) -> Result<Self, ClientError> {
        let worker = (id % session.shard_count() as u64) as usize;
        // 16384 slots spread over the workers: a few tries find one of `worker`'s.
        for n in 0..100_000u64 {
            let tag = format!("c{id}-{n}");
            if session.shard_of(format!("{{{tag}}}").as_bytes())? == worker {
                return Ok(Self {
                    tag,
                    generation: 0,
                    next_number: 1,
                });
            }
        }
        panic!("no hash tag of worker {worker} among 100000 tries")
    }

    /// The next operation on every collection: each element with its command.
    pub fn next_operation(&mut self) -> Vec<(Element, Vec<Vec<u8>>)> {
        let number = self.next_number;
        self.next_number += 1;
        COLLECTIONS
            .iter()
            .map(|&collection| {
                let key = collection.key(&self.tag, self.generation);
                let element = Element {
                    collection,
                    generation: self.generation,
                    number,
                };
                (element, collection.write(&key, number))
            })
            .collect()
    }

    /// After a rollback: later operations go to the next generation's keys, from number 1.
    pub fn next_generation(&mut self) {
        self.generation += 1;
        self.next_number = 1;
    }
}

/// One generation of one collection.
pub type CollectionId = (Collection, u64);

/// Per collection and generation, its operations in order: (number, what the oracle expects).
pub fn collection_operations(
    record: &SessionRecord,
) -> BTreeMap<CollectionId, Vec<(u64, Expected)>> {
    let mut operations: BTreeMap<CollectionId, Vec<(u64, Expected)>> = BTreeMap::new();
    for (tag, element) in &record.elements {
        let expected = record.expected[tag];
        operations
            .entry((element.collection, element.generation))
            .or_default()
            .push((element.number, expected));
    }
    for list in operations.values_mut() {
        list.sort_unstable_by_key(|&(number, _)| number);
    }
    operations
}

/// Checks one collection as read back (`read`: the operation numbers it holds, in its order)
/// against its operations (`operations`: numbers 1..=n in order, with what the oracle expects):
/// it must be exactly the elements of operations `1..=k` (refused ones skipped) for a `k` at
/// least every operation that must be present and below every one that was lost. Returns `k`.
pub fn check_collection(read: &[u64], operations: &[(u64, Expected)]) -> Result<u64, String> {
    let sent = operations.len() as u64;
    if let Some(stray) = read.iter().find(|&&n| n == 0 || n > sent) {
        return Err(format!(
            "element {stray} was never sent (operations 1..={sent})"
        ));
    }
    let k = read.last().copied().unwrap_or(0);
    let prefix: Vec<u64> = operations
        .iter()
        .filter(|&&(n, expected)| n <= k && expected != Expected::Refused)
        .map(|&(n, _)| n)
        .collect();
    if read != prefix.as_slice() {
        return Err(format!(
            "holds {read:?}, not the elements of operations 1..={k} (a hole, a duplicate or out of order)"
        ));
    }
    for &(n, expected) in operations {
        match expected {
            Expected::Present if n > k => {
                return Err(format!(
                    "operation {n} was acknowledged and reported surviving, but the collection ends at {k}"
                ))
            }
            Expected::Absent if n <= k => {
                return Err(format!("operation {n} was reported lost, but is present"))
            }
            Expected::Pushed => return Err(format!("operation {n} has no outcome")),
            _ => {}
        }
    }
    Ok(k)
}

/// Reads every collection the record wrote through `client` (a reader session of its own):
/// per collection and generation, the operation numbers it holds.
pub fn read_collections(
    client: &DprRedisClient,
    record: &SessionRecord,
) -> BTreeMap<CollectionId, Vec<u64>> {
    let Some(tag) = &record.collection_tag else {
        return BTreeMap::new();
    };
    // Session ids only need to be unique among live sessions.
    let mut reader = client
        .session(2_000_000 + record.id)
        .expect("reader session");
    let ids: Vec<CollectionId> = collection_operations(record).into_keys().collect();
    for &(collection, generation) in &ids {
        let read = collection.read(&collection.key(tag, generation));
        let args: Vec<&[u8]> = read.iter().map(Vec::as_slice).collect();
        reader.push(&args).expect("read a collection");
    }
    reader.drain().expect("drain the reads");
    let mut found = BTreeMap::new();
    for completed in reader.take_completed() {
        let (collection, generation) = ids[completed.tag as usize];
        let numbers = collection
            .parse_read(&completed.reply)
            .unwrap_or_else(|e| panic!("session {} generation {generation}: {e}", record.id));
        found.insert((collection, generation), numbers);
    }
    found
}

/// Checks every collection of the record against its oracle, panicking on the first
/// disagreement; returns how many elements the collections hold in all.
pub fn verify_collections(
    found: &BTreeMap<CollectionId, Vec<u64>>,
    record: &SessionRecord,
) -> usize {
    let mut elements = 0;
    for (id, operations) in collection_operations(record) {
        let read = found.get(&id).map(Vec::as_slice).unwrap_or(&[]);
        if let Err(error) = check_collection(read, &operations) {
            panic!(
                "session {}: {:?} of generation {}: {error}",
                record.id, id.0, id.1
            );
        }
        elements += read.len();
    }
    elements
}

/// Shows [`check_collection`] failing on tampered read-backs of every collection the record
/// holds elements of: one element removed from the middle (with at least three), and one
/// element beyond what was sent.
pub fn assert_collection_check_catches_tampering(
    found: &BTreeMap<CollectionId, Vec<u64>>,
    record: &SessionRecord,
) {
    let mut tampered_with = 0;
    for (id, operations) in collection_operations(record) {
        let Some(read) = found.get(&id).filter(|read| !read.is_empty()) else {
            continue;
        };
        if read.len() >= 3 {
            let mut holed = read.clone();
            holed.remove(read.len() / 2);
            assert!(
                check_collection(&holed, &operations).is_err(),
                "{id:?}: a hole was missed"
            );
        }
        let mut extra = read.clone();
        extra.push(operations.len() as u64 + 1);
        assert!(
            check_collection(&extra, &operations).is_err(),
            "{id:?}: an element never sent was missed"
        );
        tampered_with += 1;
    }
    assert!(
        tampered_with > 0,
        "session {}: no collection to tamper with",
        record.id
    );
}
