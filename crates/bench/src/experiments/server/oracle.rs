//! The snapshot phase's oracle: what the writers were acknowledged, key by key, and a check of
//! every key a server holds against it.
//!
//! # The record
//!
//! Writer `w` of `W` owns the keys whose index `i` has `i % W == w` ([`WriterKeys`]); no other
//! connection writes them after the load. A writer sends its SETs on one connection, the server
//! answers them in order, and the writer records a key's new version only once the reply to that
//! SET came back OK. So for each key the record holds the version of the last value its only
//! writer was acknowledged for; the load counts as version 0, acknowledged (the loader checks
//! every reply before the writers start). The value bytes are a function of (index, version)
//! ([`fill_value`]), so the record is one `u64` per key: `8 * keys` bytes, allocated once.
//!
//! # The rule
//!
//! [`check_every_key`] reads **every** key of the record (pipelined GETs in bounded batches) and
//! requires each to hold exactly the value of its recorded version; a key absent, holding an older
//! or a newer version, or a malformed value fails. It also walks the whole keyspace with SCAN: a
//! key that is not in the record (an extra key) fails too. The server's own count (DBSIZE) is
//! never the reference.
//!
//! Exactness (not "some acknowledged prefix") is the right rule in every durability mode here:
//! the phase checks only after every writer has stopped and read the replies to everything it
//! sent, so no write is in flight and there is no newer-but-unacknowledged value a server could
//! legitimately hold; then a synchronous SAVE is acknowledged, which covers the whole state. What
//! the restart reads differs by mode (our server: the checkpoint SAVE wrote plus the oplog after
//! it, empty here; Redis with `appendonly no`: the RDB SAVE wrote; Redis with `appendonly yes`:
//! the AOF, which holds every acknowledged write once its buffer is written, see
//! `snapshot::verify`), but in each the acknowledged state is the whole state.

use super::client::Client;
use anyhow::{anyhow, bail, Result};
use prefixkv_resp::Reply;
use std::fmt;

/// Bytes of a key name (`key:` and 12 digits).
pub const KEY_BYTES: usize = 16;
/// Bytes of a value's header (`<index, 12 digits>:<version, 16 digits>:`).
pub const HEADER_BYTES: usize = 30;
/// GETs per pipelined batch of a check (bounds the replies held at once).
const GET_BATCH: usize = 256;
/// Findings kept as examples (the counts cover all of them).
const EXAMPLES: usize = 5;

/// The name of key `index`.
pub fn key(index: u64) -> [u8; KEY_BYTES] {
    let mut key = [0u8; KEY_BYTES];
    let text = format!("key:{index:012}");
    key.copy_from_slice(text.as_bytes());
    key
}

/// The index of a key name made by [`key`], if it is one.
fn key_index(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"key:")?;
    if digits.len() != KEY_BYTES - 4 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The value of `key` at `version`: a header naming both, then filler derived from them, so a
/// value read back names the write it came from and can be checked without storing it.
pub fn fill_value(index: u64, version: u64, value: &mut Vec<u8>, value_bytes: usize) {
    debug_assert!(value_bytes >= HEADER_BYTES);
    value.clear();
    value.extend_from_slice(format!("{index:012}:{version:016}:").as_bytes());
    debug_assert_eq!(value.len(), HEADER_BYTES);
    let seed = index
        .wrapping_mul(31)
        .wrapping_add(version.wrapping_mul(17));
    value.extend((HEADER_BYTES..value_bytes).map(|i| b'a' + ((seed + i as u64) % 26) as u8));
}

/// The version `value` is a well-formed value of, for key `index`; `None` if it is malformed
/// (wrong length, another key's header, or filler that does not match its header).
pub fn value_version(index: u64, value: &[u8], value_bytes: usize) -> Option<u64> {
    if value.len() != value_bytes || value.len() < HEADER_BYTES {
        return None;
    }
    let header = std::str::from_utf8(&value[..HEADER_BYTES]).ok()?;
    let mut parts = header.split(':');
    let key_part = parts.next()?.parse::<u64>().ok()?;
    let version = parts.next()?.parse::<u64>().ok()?;
    if key_part != index {
        return None;
    }
    let mut expected = Vec::with_capacity(value_bytes);
    fill_value(index, version, &mut expected, value_bytes);
    (expected == value).then_some(version)
}

/// The keys one writer owns (`index % writers == writer`) and, for each, the version of the last
/// value the writer was acknowledged for. Slot `s` is key `writer + s * writers`.
///
/// Versions are unique per (writer, write): writer `w` numbers its writes from `(w + 1) << 40`
/// on, and the counter lives here, with the keys, so a second connection for the same keys goes
/// on numbering instead of writing the same values again. Every stored value thus names the write
/// it came from; 0 is the load's.
#[derive(Debug, Clone)]
pub struct WriterKeys {
    writer: u64,
    writers: u64,
    versions: Vec<u64>,
    last_version: u64,
}

impl WriterKeys {
    /// Writer `writer`'s keys out of `keys`, all at version 0 (the acknowledged load).
    pub fn new(writer: usize, writers: usize, keys: u64) -> WriterKeys {
        let (writer, writers) = (writer as u64, writers.max(1) as u64);
        let owned = if writer < keys {
            (keys - writer).div_ceil(writers)
        } else {
            0
        };
        WriterKeys {
            writer,
            writers,
            versions: vec![0; owned as usize],
            last_version: (writer + 1) << 40,
        }
    }

    /// How many keys this writer owns.
    pub fn len(&self) -> u64 {
        self.versions.len() as u64
    }

    /// True if it owns none.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// A version this writer has not used yet.
    pub fn next_version(&mut self) -> u64 {
        self.last_version += 1;
        self.last_version
    }

    /// The key index of slot `slot`.
    pub fn index(&self, slot: u64) -> u64 {
        self.writer + slot * self.writers
    }

    /// Records that the write of `version` to slot `slot` was acknowledged. Call in the order the
    /// replies came back: a connection's replies come in the order its requests were sent.
    pub fn acknowledge(&mut self, slot: u64, version: u64) {
        self.versions[slot as usize] = version;
    }
}

/// Every writer's record together: the version each key was last acknowledged at.
#[derive(Debug, Clone)]
pub struct Acks {
    keys: u64,
    shards: Vec<WriterKeys>,
}

impl Acks {
    /// `keys` keys split among `writers` writers, everything at version 0.
    pub fn new(keys: u64, writers: usize) -> Acks {
        let writers = writers.max(1);
        Acks {
            keys,
            shards: (0..writers)
                .map(|w| WriterKeys::new(w, writers, keys))
                .collect(),
        }
    }

    /// Keys in the record.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Hands each writer its own keys (the record is empty until [`Acks::restore`]).
    pub fn take_shards(&mut self) -> Vec<WriterKeys> {
        std::mem::take(&mut self.shards)
    }

    /// Puts back what [`Acks::take_shards`] handed out, in the same order.
    pub fn restore(&mut self, shards: Vec<WriterKeys>) {
        assert!(
            shards
                .iter()
                .enumerate()
                .all(|(w, s)| s.writer == w as u64 && s.writers == shards.len() as u64),
            "every writer's keys come back, in order"
        );
        self.shards = shards;
    }

    /// The version key `index` was last acknowledged at.
    pub fn expected(&self, index: u64) -> u64 {
        let writers = self.shards.len() as u64;
        self.shards[(index % writers) as usize].versions[(index / writers) as usize]
    }
}

/// One key that does not hold what its writer was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The key is absent.
    Missing {
        /// Key index.
        index: u64,
        /// Its last acknowledged version.
        expected: u64,
    },
    /// The key holds another value: `found` is the version it is a well-formed value of, or
    /// `None` if it is malformed.
    Wrong {
        /// Key index.
        index: u64,
        /// Its last acknowledged version.
        expected: u64,
        /// The version found, if the value is well-formed.
        found: Option<u64>,
    },
    /// A key no writer wrote.
    Extra {
        /// Its name, lossily decoded.
        name: String,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |index: u64| String::from_utf8_lossy(&key(index)).into_owned();
        match self {
            Finding::Missing { index, expected } => {
                write!(
                    f,
                    "{} missing (acknowledged version {expected})",
                    name(*index)
                )
            }
            Finding::Wrong {
                index,
                expected,
                found: Some(found),
            } => write!(
                f,
                "{} holds version {found}, acknowledged version {expected}",
                name(*index)
            ),
            Finding::Wrong {
                index,
                expected,
                found: None,
            } => write!(
                f,
                "{} holds a malformed value (acknowledged version {expected})",
                name(*index)
            ),
            Finding::Extra { name } => write!(f, "{name} was never written"),
        }
    }
}

/// Compares what the server answered for key `index` with its last acknowledged version.
pub fn judge(
    index: u64,
    expected: u64,
    observed: Option<&[u8]>,
    value_bytes: usize,
) -> Option<Finding> {
    let Some(value) = observed else {
        return Some(Finding::Missing { index, expected });
    };
    match value_version(index, value, value_bytes) {
        Some(found) if found == expected => None,
        found => Some(Finding::Wrong {
            index,
            expected,
            found,
        }),
    }
}

/// The outcome of one check of every key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Keys compared (every key of the record).
    pub keys: u64,
    /// Keys absent.
    pub missing: u64,
    /// Keys holding another value than their last acknowledged one.
    pub wrong: u64,
    /// Keys the server holds that no writer wrote.
    pub extra: u64,
    /// The first few findings.
    pub examples: Vec<Finding>,
}

impl Verdict {
    /// True if every key held its last acknowledged value and there was no other key.
    pub fn passed(&self) -> bool {
        self.missing == 0 && self.wrong == 0 && self.extra == 0
    }

    fn note(&mut self, finding: Finding) {
        match finding {
            Finding::Missing { .. } => self.missing += 1,
            Finding::Wrong { .. } => self.wrong += 1,
            Finding::Extra { .. } => self.extra += 1,
        }
        if self.examples.len() < EXAMPLES {
            self.examples.push(finding);
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            return write!(
                f,
                "all {} keys hold their last acknowledged value",
                self.keys
            );
        }
        write!(
            f,
            "{} of {} keys missing, {} wrong, {} extra keys",
            self.missing, self.keys, self.wrong, self.extra
        )?;
        for example in &self.examples {
            write!(f, "; {example}")?;
        }
        Ok(())
    }
}

/// Reads every key of `acks` from the server behind `client` and walks its keyspace, comparing
/// both with the record (see the module doc). Errors only when the server cannot be read.
pub fn check_every_key(client: &mut Client, acks: &Acks, value_bytes: usize) -> Result<Verdict> {
    let mut verdict = Verdict {
        keys: acks.keys(),
        ..Verdict::default()
    };
    let mut first = 0;
    while first < acks.keys() {
        let last = (first + GET_BATCH as u64).min(acks.keys());
        for index in first..last {
            client.queue(&[b"GET", &key(index)]);
        }
        client.flush()?;
        for index in first..last {
            let observed = match client.read()? {
                Reply::BulkString(bytes) => Some(bytes),
                Reply::NullBulkString | Reply::Null => None,
                other => bail!("GET: unexpected reply {other:?}"),
            };
            if let Some(finding) = judge(
                index,
                acks.expected(index),
                observed.as_deref(),
                value_bytes,
            ) {
                verdict.note(finding);
            }
        }
        first = last;
    }
    for_each_extra_key(client, acks.keys(), |name| {
        verdict.note(Finding::Extra {
            name: String::from_utf8_lossy(name).into_owned(),
        })
    })?;
    Ok(verdict)
}

/// Walks the whole keyspace with SCAN and calls `extra` for every key that is not one of the
/// `keys` keys of the record. SCAN may return a key twice; an extra key is then reported twice,
/// which still fails the check. Bounded: a walk returning far more names than the record holds
/// is an error instead of an endless loop.
fn for_each_extra_key(client: &mut Client, keys: u64, mut extra: impl FnMut(&[u8])) -> Result<()> {
    let limit = keys.saturating_mul(4).saturating_add(100_000);
    let mut returned = 0u64;
    let mut cursor = String::from("0");
    loop {
        let reply = client.call(&["SCAN", &cursor, "COUNT", "1000"])?;
        let Reply::Array(mut parts) = reply else {
            bail!("SCAN: unexpected reply {reply:?}");
        };
        let (Some(Reply::Array(names)), Some(Reply::BulkString(next)), None) =
            (parts.pop(), parts.pop(), parts.pop())
        else {
            bail!("SCAN: expected a cursor and a list of keys, got {parts:?}");
        };
        for name in &names {
            let Reply::BulkString(name) = name else {
                bail!("SCAN: a key name that is not a string: {name:?}");
            };
            if key_index(name).is_none_or(|index| index >= keys) {
                extra(name);
            }
        }
        returned += names.len() as u64;
        if returned > limit {
            return Err(anyhow!("SCAN returned over {limit} names for {keys} keys"));
        }
        cursor = String::from_utf8_lossy(&next).into_owned();
        if cursor == "0" {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(index: u64, version: u64) -> Vec<u8> {
        let mut value = Vec::new();
        fill_value(index, version, &mut value, 100);
        value
    }

    #[test]
    fn values_name_their_key_and_version() {
        let mut v = value(42, 7);
        assert_eq!(v.len(), 100);
        assert_eq!(value_version(42, &v, 100), Some(7));
        assert_eq!(value_version(43, &v, 100), None);
        v[70] ^= 1;
        assert_eq!(value_version(42, &v, 100), None);
        assert_eq!(value_version(42, b"short", 100), None);
        assert_eq!(&key(5), b"key:000000000005");
        assert_eq!(key_index(&key(5)), Some(5));
        assert_eq!(key_index(b"key:5"), None);
        assert_eq!(key_index(b"other:000000000005"), None);
    }

    #[test]
    fn writers_own_disjoint_keys_covering_the_keyspace() {
        let keys = 1003;
        let mut acks = Acks::new(keys, 4);
        let mut shards = acks.take_shards();
        let mut seen = vec![0u32; keys as usize];
        for shard in &mut shards {
            for slot in 0..shard.len() {
                let index = shard.index(slot);
                seen[index as usize] += 1;
                shard.acknowledge(slot, index + 1);
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "each key has one owner");
        acks.restore(shards);
        assert!((0..keys).all(|i| acks.expected(i) == i + 1));
        assert!(WriterKeys::new(5, 8, 3).is_empty());
    }

    /// The comparison on hand-made server answers: the acknowledged value passes; a missing key,
    /// an older (lost write), a newer (never acknowledged) and a corrupted value each fail and name
    /// the key.
    #[test]
    fn judge_accepts_only_the_last_acknowledged_value() {
        assert_eq!(judge(9, 3, Some(&value(9, 3)), 100), None);
        let cases = [
            (None, "key:000000000009 missing (acknowledged version 3)"),
            (
                Some(value(9, 2)),
                "key:000000000009 holds version 2, acknowledged version 3",
            ),
            (
                Some(value(9, 4)),
                "key:000000000009 holds version 4, acknowledged version 3",
            ),
            (
                Some(value(8, 3)),
                "key:000000000009 holds a malformed value (acknowledged version 3)",
            ),
        ];
        for (observed, message) in cases {
            let finding = judge(9, 3, observed.as_deref(), 100).expect("a finding");
            assert_eq!(finding.to_string(), message);
        }
        let mut verdict = Verdict {
            keys: 10,
            ..Verdict::default()
        };
        assert!(verdict.passed());
        verdict.note(Finding::Extra {
            name: "stray".into(),
        });
        assert!(!verdict.passed());
        assert_eq!(
            verdict.to_string(),
            "0 of 10 keys missing, 0 wrong, 1 extra keys; stray was never written"
        );
    }
}
