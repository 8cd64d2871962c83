//! Keyspace notifications (`notify-keyspace-events`), as Redis 7.0 sends them: for every key a
//! command changed, a message on `__keyspace@<db>__:<key>` (the event name; flag `K`) and on
//! `__keyevent@<db>__:<event>` (the key; flag `E`), for the event classes the flags select
//! (`g $ l s h z x e t m d n`, `A` = `g$lshzxetd`), through the ordinary Pub/Sub.
//!
//! How events are found: while notifications are on, every keyspace transaction records, on
//! this thread, each user key it wrote and whether the key exists afterwards
//! ([`record_touch`]); after the command, [`command_events`] names the events for those keys
//! from the command (`lpush` for LPUSH, `rename_from`/`rename_to` for RENAME, `del` for a
//! collection a command emptied, ...). Expiry (lazy, and the active sweep, which goes through
//! the same path) queues `expired` itself, and a key the command created gets `new` before
//! its other events (not for SWAPDB, which moves keys). Events wait in a
//! queue and are published after the command, outside every key lock, before its reply is
//! sent ([`Notifier::flush`]).
//!
//! Invariants: when the flags are 0 (the default) recording and notifying cost one atomic
//! load and nothing is queued; the queue holds only the events of commands still running or
//! finished but not yet flushed, and every command flushes it, so it stays as small as one
//! command's writes.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::pubsub::PubSub;

/// `K`: publish on `__keyspace@<db>__:<key>`.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: publish on `__keyevent@<db>__:<event>`.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME, ...).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted-set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: expired events.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: evicted events.
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u32 = 1 << 10;
/// `m`: key misses (accepted; prefixkv sends none yet: docs/server.md).
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module events (accepted; there are no modules).
pub const MODULE: u32 = 1 << 12;
/// `n`: a key was created.
pub const NEW: u32 = 1 << 13;
/// `A`: every class but `m` and `n`.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

const LETTERS: [(char, u32); 10] = [
    ('g', GENERIC),
    ('$', STRING),
    ('l', LIST),
    ('s', SET),
    ('h', HASH),
    ('z', ZSET),
    ('x', EXPIRED),
    ('e', EVICTED),
    ('t', STREAM),
    ('d', MODULE),
];

/// Parses a `notify-keyspace-events` value; `None` for an unknown letter.
pub fn parse_flags(text: &str) -> Option<u32> {
    let mut flags = 0;
    for letter in text.chars() {
        flags |= match letter {
            'A' => ALL,
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            'm' => KEY_MISS,
            'n' => NEW,
            _ => LETTERS.iter().find(|(l, _)| *l == letter)?.1,
        };
    }
    Some(flags)
}

/// The flags as CONFIG GET shows them, in Redis 7.0's order: `A` or the class letters (with
/// `n` last among them: with `A`, `n` is kept but not shown, as Redis), then `K`, `E`, `m`.
pub fn format_flags(flags: u32) -> String {
    let mut text = String::new();
    if flags & ALL == ALL {
        text.push('A');
    } else {
        text.extend(
            LETTERS
                .iter()
                .filter(|(_, f)| flags & f != 0)
                .map(|(l, _)| *l),
        );
        if flags & NEW != 0 {
            text.push('n');
        }
    }
    for (letter, flag) in [('K', KEYSPACE), ('E', KEYEVENT), ('m', KEY_MISS)] {
        if flags & flag != 0 {
            text.push(letter);
        }
    }
    text
}

/// One event waiting to be published.
struct Event {
    event: &'static str,
    database: u8,
    key: Vec<u8>,
}

/// The notification settings and the queue of events not yet published.
#[derive(Default)]
pub struct Notifier {
    flags: AtomicU32,
    queue: Mutex<Vec<Event>>,
}

impl Notifier {
    /// Sets the flags (CONFIG SET notify-keyspace-events).
    pub fn set_flags(&self, flags: u32) {
        self.flags.store(flags, Ordering::Relaxed);
    }

    /// Whether any event of `class` would be published (one atomic load).
    pub fn wants(&self, class: u32) -> bool {
        let flags = self.flags.load(Ordering::Relaxed);
        flags & class != 0 && flags & (KEYSPACE | KEYEVENT) != 0
    }

    /// Whether notifications are on at all (one atomic load).
    pub fn active(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & (KEYSPACE | KEYEVENT) != 0
    }

    /// Queues `event` of `class` for `key` of `database` if the flags select it (one atomic
    /// load otherwise). Streams call `notify(STREAM, "xadd", db, key)` and so on.
    pub fn notify(&self, class: u32, event: &'static str, database: u8, key: &[u8]) {
        if !self.wants(class) {
            return;
        }
        self.queue.lock().push(Event {
            event,
            database,
            key: key.to_vec(),
        });
    }

    /// Publishes every queued event (nothing to do costs one atomic load).
    pub fn flush(&self, pubsub: &PubSub) {
        let flags = self.flags.load(Ordering::Relaxed);
        if flags & (KEYSPACE | KEYEVENT) == 0 {
            // Turned off with events queued: they are dropped, as Redis drops nothing it has
            // not generated.
            if !self.queue.lock().is_empty() {
                self.queue.lock().clear();
            }
            return;
        }
        let events = std::mem::take(&mut *self.queue.lock());
        for event in events {
            if flags & KEYSPACE != 0 {
                let mut channel = format!("__keyspace@{}__:", event.database).into_bytes();
                channel.extend_from_slice(&event.key);
                pubsub.publish(
                    &Bytes::from(channel),
                    &Bytes::from_static(event.event.as_bytes()),
                );
            }
            if flags & KEYEVENT != 0 {
                let channel = format!("__keyevent@{}__:{}", event.database, event.event);
                pubsub.publish(&Bytes::from(channel), &Bytes::from(event.key));
            }
        }
    }
}

thread_local! {
    /// Keys the running command wrote, in order.
    static TOUCHED: RefCell<Vec<Touch>> = const { RefCell::new(Vec::new()) };
    /// What the running stream command did beyond its own event ([`STREAM_TRIMMED`],
    /// [`CONSUMER_CREATED`]): Redis sends `xtrim` after an XADD that trimmed, and
    /// `xgroup-createconsumer` for a consumer XREADGROUP or XCLAIM created.
    static STREAM_FACTS: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// The running XADD trimmed entries.
pub const STREAM_TRIMMED: u8 = 1;
/// The running command created a consumer.
pub const CONSUMER_CREATED: u8 = 2;

/// Notes a stream fact of the running command (a thread-local store: cheap when notifications
/// are off, and forgotten with the command's touches).
pub fn note_stream(fact: u8) {
    STREAM_FACTS.with(|facts| facts.set(facts.get() | fact));
}

/// The running command's stream facts, forgotten here (read before [`take_touched`]).
pub fn take_stream_facts() -> u8 {
    STREAM_FACTS.with(|facts| facts.replace(0))
}

/// A key a command wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touch {
    /// Its database.
    pub database: u8,
    /// The key.
    pub key: Vec<u8>,
    /// It exists after the write (after the command, once folded by [`take_touched`]).
    pub present: bool,
    /// The write created it (folded: the command's first write to it did).
    pub created: bool,
}

/// Records that a write left `key` of `database` present or not, and whether it created it
/// (called by the keyspace's writes while notifications are on).
pub fn record_touch(database: u8, key: &[u8], present: bool, created: bool) {
    TOUCHED.with(|touched| {
        touched.borrow_mut().push(Touch {
            database,
            key: key.to_vec(),
            present,
            created,
        })
    });
}

/// Forgets the last recorded touch of `key` (a lazy-expiry delete is its own event).
pub fn forget_last_touch(database: u8, key: &[u8]) {
    TOUCHED.with(|touched| {
        let mut touched = touched.borrow_mut();
        if touched
            .last()
            .is_some_and(|t| t.database == database && t.key == key && !t.present)
        {
            touched.pop();
        }
    });
}

/// Takes the keys recorded since the last call: each key once, in first-touch order, with
/// whether it exists at the end and whether the command created it (its first write did, and
/// it exists at the end: a STORE that deletes and rewrites its destination overwrote it).
pub fn take_touched() -> Vec<Touch> {
    // Facts not read by now belong to no event (`take_stream_facts` reads them first).
    take_stream_facts();
    let all = TOUCHED.with(|touched| std::mem::take(&mut *touched.borrow_mut()));
    let mut out: Vec<Touch> = Vec::with_capacity(all.len());
    for touch in all {
        match out
            .iter_mut()
            .find(|t| t.database == touch.database && t.key == touch.key)
        {
            Some(entry) => entry.present = touch.present,
            None => out.push(touch),
        }
    }
    for touch in &mut out {
        touch.created &= touch.present;
    }
    out
}

/// The events a command sends for one key it wrote: `(class, event)` in order. `args` is the
/// command; `in_source_db` whether the key is in the client's database; `present` whether it
/// exists after the command.
pub fn command_events(
    name: &str,
    args: &[Bytes],
    key: &[u8],
    in_source_db: bool,
    present: bool,
    stream_facts: u8,
) -> Vec<(u32, &'static str)> {
    let is_arg = |i: usize| args.get(i).is_some_and(|a| &a[..] == key);
    let has_option = |options: &[&str]| {
        args.iter()
            .skip(2)
            .any(|a| options.iter().any(|o| a.eq_ignore_ascii_case(o.as_bytes())))
    };
    let deleted = [(GENERIC, "del")];
    let (class, event): (u32, &'static str) = match name {
        "del" | "unlink" | "getdel" => return deleted.to_vec(),
        "flushdb" | "flushall" | "swapdb" => return Vec::new(),
        // An expiry in the past deletes the key: only `del`.
        "expire" | "pexpire" | "expireat" | "pexpireat" if !present => return deleted.to_vec(),
        "expire" | "pexpire" | "expireat" | "pexpireat" => (GENERIC, "expire"),
        "persist" => (GENERIC, "persist"),
        "rename" | "renamenx" => {
            let event = if present { "rename_to" } else { "rename_from" };
            return vec![(GENERIC, event)];
        }
        "move" => {
            let event = if in_source_db { "move_from" } else { "move_to" };
            return vec![(GENERIC, event)];
        }
        "copy" => (GENERIC, "copy_to"),
        // Redis files SORT's store under the list class.
        "sort" => (LIST, "sortstore"),
        "set" | "setnx" | "setex" | "psetex" | "getset" | "mset" | "msetnx" => {
            let mut events = vec![(STRING, "set")];
            let expiring = matches!(name, "setex" | "psetex")
                || (name == "set" && has_option(&["ex", "px", "exat", "pxat"]));
            if expiring {
                events.push((GENERIC, "expire"));
            }
            return events;
        }
        "getex" => {
            let event = if has_option(&["persist"]) {
                "persist"
            } else {
                "expire"
            };
            (GENERIC, event)
        }
        "incr" | "decr" | "incrby" | "decrby" => (STRING, "incrby"),
        "incrbyfloat" => (STRING, "incrbyfloat"),
        "append" => (STRING, "append"),
        "setrange" => (STRING, "setrange"),
        "setbit" => (STRING, "setbit"),
        "bitop" => (STRING, "set"),
        "lpush" | "lpushx" => (LIST, "lpush"),
        "rpush" | "rpushx" => (LIST, "rpush"),
        "lpop" | "blpop" => (LIST, "lpop"),
        "rpop" | "brpop" => (LIST, "rpop"),
        "lmpop" | "blmpop" => {
            let left = args.iter().any(|a| a.eq_ignore_ascii_case(b"left"));
            (LIST, if left { "lpop" } else { "rpop" })
        }
        "linsert" => (LIST, "linsert"),
        "lset" => (LIST, "lset"),
        "lrem" => (LIST, "lrem"),
        "ltrim" => (LIST, "ltrim"),
        "lmove" | "blmove" | "rpoplpush" | "brpoplpush" => {
            let (from, to) = if name.ends_with("move") {
                (lower_arg(args, 3), lower_arg(args, 4))
            } else {
                ("right".to_string(), "left".to_string())
            };
            let mut events = Vec::new();
            if is_arg(1) {
                events.push((LIST, if from == "left" { "lpop" } else { "rpop" }));
            }
            if is_arg(2) && present {
                events.push((LIST, if to == "left" { "lpush" } else { "rpush" }));
            }
            if !present {
                events.extend(deleted);
            }
            return events;
        }
        "hset" | "hmset" | "hsetnx" => (HASH, "hset"),
        "hdel" => (HASH, "hdel"),
        "hincrby" => (HASH, "hincrby"),
        "hincrbyfloat" => (HASH, "hincrbyfloat"),
        "sadd" => (SET, "sadd"),
        "srem" => (SET, "srem"),
        "spop" => (SET, "spop"),
        "smove" => (SET, if is_arg(1) { "srem" } else { "sadd" }),
        "sinterstore" => (SET, "sinterstore"),
        "sunionstore" => (SET, "sunionstore"),
        "sdiffstore" => (SET, "sdiffstore"),
        "zadd" => (
            ZSET,
            if has_option(&["incr"]) {
                "zincr"
            } else {
                "zadd"
            },
        ),
        "zincrby" => (ZSET, "zincr"),
        "zrem" => (ZSET, "zrem"),
        "zremrangebyrank" => (ZSET, "zremrangebyrank"),
        "zremrangebyscore" => (ZSET, "zremrangebyscore"),
        "zremrangebylex" => (ZSET, "zremrangebylex"),
        "zpopmin" | "bzpopmin" => (ZSET, "zpopmin"),
        "zpopmax" | "bzpopmax" => (ZSET, "zpopmax"),
        "zmpop" | "bzmpop" => {
            let min = args.iter().any(|a| a.eq_ignore_ascii_case(b"min"));
            (ZSET, if min { "zpopmin" } else { "zpopmax" })
        }
        "zunionstore" => (ZSET, "zunionstore"),
        "zinterstore" => (ZSET, "zinterstore"),
        "zdiffstore" => (ZSET, "zdiffstore"),
        "zrangestore" => (ZSET, "zrangestore"),
        "xadd" if stream_facts & STREAM_TRIMMED != 0 => {
            return vec![(STREAM, "xadd"), (STREAM, "xtrim")];
        }
        "xadd" => (STREAM, "xadd"),
        "xreadgroup" | "xclaim" | "xautoclaim" if stream_facts & CONSUMER_CREATED != 0 => {
            (STREAM, "xgroup-createconsumer")
        }
        "xdel" => (STREAM, "xdel"),
        "xtrim" => (STREAM, "xtrim"),
        "xsetid" => (STREAM, "xsetid"),
        "xgroup" => match lower_arg(args, 1).as_str() {
            "create" => (STREAM, "xgroup-create"),
            "createconsumer" => (STREAM, "xgroup-createconsumer"),
            "delconsumer" => (STREAM, "xgroup-delconsumer"),
            "destroy" => (STREAM, "xgroup-destroy"),
            "setid" => (STREAM, "xgroup-setid"),
            _ => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    let stores = name.ends_with("store") || matches!(name, "sort" | "bitop" | "copy");
    match (present, stores) {
        (true, _) => vec![(class, event)],
        // A STORE whose result is empty deletes its destination: only `del`.
        (false, true) => deleted.to_vec(),
        // A command that emptied a collection: its event, then `del`.
        (false, false) => vec![(class, event), (GENERIC, "del")],
    }
}

fn lower_arg(args: &[Bytes], index: usize) -> String {
    args.get(index)
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_format_as_redis() {
        assert_eq!(parse_flags(""), Some(0));
        assert_eq!(format_flags(parse_flags("KEA").unwrap()), "AKE");
        assert_eq!(format_flags(parse_flags("Elg").unwrap()), "glE");
        assert_eq!(format_flags(parse_flags("Kx$").unwrap()), "$xK");
        assert_eq!(format_flags(parse_flags("AKEmn").unwrap()), "AKEm");
        assert_eq!(format_flags(parse_flags("Kmn").unwrap()), "nKm");
        assert_eq!(format_flags(parse_flags("Eg$zn").unwrap()), "g$znE");
        assert_eq!(parse_flags("Kq"), None);
    }

    #[test]
    fn touches_fold_to_the_final_state() {
        take_touched();
        record_touch(0, b"a", true, true);
        record_touch(0, b"b", false, false);
        record_touch(0, b"b", true, true);
        record_touch(0, b"a", false, false);
        forget_last_touch(0, b"a");
        record_touch(0, b"c", false, false);
        let touch = |key: &[u8], present, created| Touch {
            database: 0,
            key: key.to_vec(),
            present,
            created,
        };
        assert_eq!(
            take_touched(),
            vec![
                touch(b"a", true, true),
                // Deleted, then written again: overwritten, not created.
                touch(b"b", true, false),
                touch(b"c", false, false)
            ]
        );
    }
}
