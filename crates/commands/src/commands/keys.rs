//! Generic key commands.

use bytes::Bytes;

use super::{lower, parse_int, CommandError, CommandResult, Ctx};
use crate::keyspace::{now_ms, DATABASES};
use crate::value::{Kind, Stored};

/// DEL and UNLINK.
pub(super) fn del(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let keys: Vec<&[u8]> = args[1..].iter().map(|k| &k[..]).collect();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &keys);
    let mut removed = 0;
    for key in &keys {
        if txn.get(db, key)?.is_some() && txn.delete(db, key)? {
            removed += 1;
        }
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(removed);
    Ok(())
}

// EXISTS, TYPE and the TTL family look keys up without counting an access, as Redis's
// LOOKUP_NOTOUCH; TOUCH counts one.

/// EXISTS.
pub(super) fn exists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut count = 0;
    for key in &args[1..] {
        count += i64::from(
            ctx.server
                .keyspace
                .read_quiet(ctx.session, db, key)?
                .is_some(),
        );
    }
    ctx.w.int(count);
    Ok(())
}

/// TOUCH.
pub(super) fn touch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut count = 0;
    for key in &args[1..] {
        count += i64::from(ctx.server.keyspace.touch(ctx.session, db, key)?);
    }
    ctx.w.int(count);
    Ok(())
}

/// TYPE.
pub(super) fn type_of(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let stored = ctx.server.keyspace.read_quiet(ctx.session, db, &args[1])?;
    ctx.w.simple(stored.map_or("none", |s| s.kind.name()));
    Ok(())
}

/// EXPIRE: seconds from now.
pub(super) fn expire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    set_expiry(ctx, "expire", (1000, false), args)
}

/// PEXPIRE: milliseconds from now.
pub(super) fn pexpire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    set_expiry(ctx, "pexpire", (1, false), args)
}

/// EXPIREAT: a Unix time in seconds.
pub(super) fn expireat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    set_expiry(ctx, "expireat", (1000, true), args)
}

/// PEXPIREAT: a Unix time in milliseconds.
pub(super) fn pexpireat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    set_expiry(ctx, "pexpireat", (1, true), args)
}

/// What the TTL family answers about a key's expiry.
#[derive(Clone, Copy)]
enum Expiry {
    /// TTL: seconds left, rounded.
    Seconds,
    /// PTTL: milliseconds left.
    Millis,
    /// EXPIRETIME: the Unix time in seconds.
    AtSeconds,
    /// PEXPIRETIME: the Unix time in milliseconds.
    AtMillis,
}

/// TTL.
pub(super) fn ttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    expiry(ctx, Expiry::Seconds, args)
}

/// PTTL.
pub(super) fn pttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    expiry(ctx, Expiry::Millis, args)
}

/// EXPIRETIME.
pub(super) fn expiretime(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    expiry(ctx, Expiry::AtSeconds, args)
}

/// PEXPIRETIME.
pub(super) fn pexpiretime(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    expiry(ctx, Expiry::AtMillis, args)
}

/// The TTL family: -2 for no key, -1 for no expiry, else the expiry as `answer` says.
fn expiry(ctx: &mut Ctx<'_>, answer: Expiry, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let stored = ctx.server.keyspace.read_quiet(ctx.session, db, &args[1])?;
    let reply = match stored {
        None => -2,
        Some(s) if s.expire_at_ms == 0 => -1,
        Some(s) => {
            let at = s.expire_at_ms as i64;
            let remaining = (at - now_ms() as i64).max(0);
            match answer {
                Expiry::Seconds => (remaining + 500) / 1000,
                Expiry::Millis => remaining,
                Expiry::AtSeconds => at / 1000,
                Expiry::AtMillis => at,
            }
        }
    };
    ctx.w.int(reply);
    Ok(())
}

/// PERSIST.
pub(super) fn persist(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let changed = match txn.get(db, &args[1])? {
        Some(s) if s.expire_at_ms != 0 => {
            txn.put(db, &args[1], s.kind, 0, &s.payload)?;
            true
        }
        _ => false,
    };
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(changed as i64);
    Ok(())
}

/// KEYS.
pub(super) fn keys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let keys = ctx
        .server
        .keyspace
        .keys_matching(ctx.session, db, &args[1])?;
    ctx.w.array(keys.len());
    for key in keys {
        ctx.w.bulk(&key);
    }
    Ok(())
}

/// RENAME: OK.
pub(super) fn rename(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    rename_key(ctx, false, args)?;
    ctx.w.ok();
    Ok(())
}

/// RENAMENX: whether it renamed.
pub(super) fn renamenx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let renamed = rename_key(ctx, true, args)?;
    ctx.w.int(i64::from(renamed));
    Ok(())
}

/// RENAME and, when `only_new`, RENAMENX: whether the key moved (a key renamed to itself did
/// not, nor did one whose target exists under RENAMENX).
fn rename_key(ctx: &mut Ctx<'_>, only_new: bool, args: &[Bytes]) -> CommandResult<bool> {
    let db = ctx.db();
    let (source, target) = (&args[1][..], &args[2][..]);
    let mut txn = ctx
        .server
        .keyspace
        .begin(ctx.session, db, &[source, target]);
    let Some(stored) = txn.get(db, source)? else {
        return Err(CommandError::NoSuchKey);
    };
    if source == target || (only_new && txn.get(db, target)?.is_some()) {
        return Ok(false);
    }
    txn.put(
        db,
        target,
        stored.kind,
        stored.expire_at_ms,
        &stored.payload,
    )?;
    // The value (a collection's records too) now belongs to the target.
    txn.delete_keeping_records(db, source)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    Ok(true)
}

/// RANDOMKEY.
pub(super) fn randomkey(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let seed = now_ms().wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ctx.client.id;
    let key = ctx.server.keyspace.random_key(ctx.session, db, seed)?;
    ctx.w.bulk_or_null(key.as_deref());
    Ok(())
}

/// A database index argument: an integer (Redis's integer error otherwise) within 0..16.
fn database_index(argument: &[u8]) -> CommandResult<u8> {
    let index = parse_int(argument)?;
    if !(0..DATABASES as i64).contains(&index) {
        return Err(CommandError::DbIndexOutOfRange);
    }
    Ok(index as u8)
}

/// COPY source destination [DB destination-db] [REPLACE]: the value and its expiry.
pub(super) fn copy(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (source_db, mut target_db, mut replace) = (ctx.db(), ctx.db(), false);
    let mut index = 3;
    while index < args.len() {
        match lower(&args[index]).as_str() {
            "replace" => replace = true,
            "db" if index + 1 < args.len() => {
                target_db = database_index(&args[index + 1])?;
                index += 1;
            }
            _ => return Err(CommandError::Syntax),
        }
        index += 1;
    }
    let (source, target) = (&args[1][..], &args[2][..]);
    if source_db == target_db && source == target {
        return Err(CommandError::SameObject);
    }
    let mut txn = ctx
        .server
        .keyspace
        .begin_across(ctx.session, &[(source_db, source), (target_db, target)]);
    let Some(stored) = txn.get(source_db, source)? else {
        drop(txn);
        ctx.w.int(0);
        return Ok(());
    };
    if txn.get(target_db, target)?.is_some() && !replace {
        drop(txn);
        ctx.w.int(0);
        return Ok(());
    }
    // A collection's records are copied into a new object owned by the target.
    let payload = if stored.kind.in_records() {
        let new_id = txn.keyspace().new_object_id();
        crate::objects::copy(
            &mut txn,
            (source_db, source),
            (target_db, target),
            stored.kind,
            &stored.payload,
            new_id,
        )?
    } else {
        stored.payload
    };
    txn.put(
        target_db,
        target,
        stored.kind,
        stored.expire_at_ms,
        &payload,
    )?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(1);
    Ok(())
}

/// Keys SWAPDB moves in one transaction at most (both databases together): the swap is one
/// atomic store transaction, so its size is bounded.
pub const SWAPDB_MAX_KEYS: usize = 1 << 18;

/// SWAPDB index1 index2: every key of each database moves to the other, in one store
/// transaction (one oplog record: a crash recovers all of it or none) while no other write runs
/// (the exec gate). O(keys in both databases), where Redis swaps two pointers; refused past
/// [`SWAPDB_MAX_KEYS`]. Collections keep their records (only their root keys move).
pub(super) fn swapdb(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let index = |argument: &[u8], which: &'static str| {
        parse_int(argument).map_err(|_| CommandError::err(format!("invalid {which} DB index")))
    };
    let (first, second) = (index(&args[1], "first")?, index(&args[2], "second")?);
    let valid = 0..DATABASES as i64;
    if !valid.contains(&first) || !valid.contains(&second) {
        return Err(CommandError::DbIndexOutOfRange);
    }
    let (a, b) = (first as u8, second as u8);
    if a != b {
        let keyspace = &ctx.server.keyspace;
        if ctx.client.in_exec {
            let mark = swap_databases(keyspace, ctx.session, a, b)?;
            ctx.client.note_write(mark);
        } else {
            // Not under the shared gate (`commands::EXCLUSIVE`): the body takes it exclusively.
            super::run_exclusive(ctx.server, ctx.client, ctx.session, |client, session| {
                let mark = swap_databases(keyspace, session, a, b)?;
                client.note_write(mark);
                CommandResult::Ok(())
            })??;
        }
    }
    ctx.w.ok();
    Ok(())
}

fn swap_databases(
    keyspace: &crate::keyspace::Keyspace,
    session: &mut prefixkv_store::StoreSession,
    a: u8,
    b: u8,
) -> CommandResult<Option<crate::keyspace::WriteMark>> {
    let too_many = || {
        CommandError::err(format!(
            "SWAPDB moves at most {SWAPDB_MAX_KEYS} keys here (prefixkv moves every key)"
        ))
    };
    let in_a = keyspace
        .all_keys(session, a, SWAPDB_MAX_KEYS)?
        .ok_or_else(too_many)?;
    let in_b = keyspace
        .all_keys(session, b, SWAPDB_MAX_KEYS - in_a.len())?
        .ok_or_else(too_many)?;
    let mut pairs: Vec<(u8, &[u8])> = Vec::with_capacity(2 * (in_a.len() + in_b.len()));
    for key in in_a.iter().chain(&in_b) {
        pairs.extend([(a, &key[..]), (b, &key[..])]);
    }
    let mut txn = keyspace.begin_across(session, &pairs);
    let mut values = Vec::with_capacity(in_a.len() + in_b.len());
    for (from, keys) in [(a, &in_a), (b, &in_b)] {
        for key in keys {
            // An expired key is removed here (lazy expiry) instead of moved.
            if let Some(stored) = txn.get(from, key)? {
                values.push((from, key, stored));
            }
        }
    }
    for (from, key, _) in &values {
        txn.delete_keeping_records(*from, key)?;
    }
    for (from, key, stored) in &values {
        let to = if *from == a { b } else { a };
        // The old value there was deleted above with its records kept: they are the object
        // that moves the other way.
        txn.put_object(to, key, stored.kind, stored.expire_at_ms, &stored.payload)?;
    }
    txn.commit()
}

/// MOVE key db: moves the key (with its expiry) unless the target database has it.
pub(super) fn move_key(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (source_db, target_db) = (ctx.db(), database_index(&args[2])?);
    if source_db == target_db {
        return Err(CommandError::SameObject);
    }
    let key = &args[1][..];
    let mut txn = ctx
        .server
        .keyspace
        .begin_across(ctx.session, &[(source_db, key), (target_db, key)]);
    let moved = match txn.get(source_db, key)? {
        Some(stored) if txn.get(target_db, key)?.is_none() => {
            txn.put(
                target_db,
                key,
                stored.kind,
                stored.expire_at_ms,
                &stored.payload,
            )?;
            txn.delete_keeping_records(source_db, key)?;
            true
        }
        _ => false,
    };
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(i64::from(moved));
    Ok(())
}

/// The encoding Redis 7.0 reports: for a string, the one its content gets (`int` for a canonical
/// 64-bit integer, `embstr` up to 44 bytes, `raw` above; Redis keeps an encoding a value reached,
/// so APPEND makes `raw` there); for a hash, `listpack` while it is stored whole, `hashtable`
/// once it moved into records (as in Redis, it never moves back); `quicklist` for a list,
/// `hashtable` for a set and `skiplist` for a sorted set (Redis's small-collection encodings,
/// `intset` and `listpack`, have no counterpart here).
fn encoding_of(stored: &Stored) -> &'static str {
    match stored.kind {
        Kind::String => {
            let text = &stored.payload;
            let canonical_int = text.len() <= 20
                && std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| t.parse::<i64>().ok())
                    .is_some_and(|n| n.to_string().as_bytes() == &text[..]);
            if canonical_int {
                "int"
            } else if text.len() <= 44 {
                "embstr"
            } else {
                "raw"
            }
        }
        Kind::Hash => "listpack",
        Kind::HashTable | Kind::Set => "hashtable",
        Kind::List => "quicklist",
        Kind::ZSet => "skiplist",
        Kind::Stream => "stream",
    }
}

/// OBJECT ENCODING | REFCOUNT | IDLETIME | FREQ | HELP.
pub(super) fn object(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let subcommand = lower(&args[1]);
    if subcommand == "help" && args.len() == 2 {
        let lines = [
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key>. The returned integer is",
            "    proportional to the logarithm of the recent access frequency of the key.",
            "IDLETIME <key>",
            "    Return the idle time of the <key>, that is the approximated number of",
            "    seconds elapsed since the last access to the key.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
            "HELP",
            "    Print this help.",
        ];
        ctx.w.help(&lines);
        return Ok(());
    }
    if !matches!(
        subcommand.as_str(),
        "encoding" | "refcount" | "idletime" | "freq"
    ) {
        return Err(CommandError::unknown_subcommand("OBJECT", &args[1]));
    }
    if args.len() != 3 {
        return Err(CommandError::arity(format!("object|{subcommand}")));
    }
    let keyspace = &ctx.server.keyspace;
    // OBJECT does not count as an access (Redis's LOOKUP_NOTOUCH).
    let Some(stored) = keyspace.read_quiet(ctx.session, ctx.db(), &args[2])? else {
        ctx.w.null();
        return Ok(());
    };
    let lfu = keyspace.access.is_lfu();
    match subcommand.as_str() {
        "encoding" => ctx.w.bulk(encoding_of(&stored).as_bytes()),
        "refcount" => ctx.w.int(1),
        "idletime" if lfu => return Err(CommandError::IdleTimeUnderLfu),
        "freq" if !lfu => return Err(CommandError::FreqWithoutLfu),
        _ => {
            // The key was just read: a concurrent delete leaves no word, answered as absent.
            let Some(word) = keyspace.access_of(ctx.session, ctx.db(), &args[2])? else {
                ctx.w.null();
                return Ok(());
            };
            let now = now_ms();
            let answer = if lfu {
                u64::from(keyspace.access.frequency(word, now))
            } else {
                crate::evict::access::lru_idle_ms(word, crate::evict::access::lru_clock(now)) / 1000
            };
            ctx.w.int(answer as i64);
        }
    }
    Ok(())
}

/// The EXPIRE family (`name` for the error text): `unit` ms per unit of the given time,
/// `absolute` when it is a Unix time rather than a delay.
fn set_expiry(
    ctx: &mut Ctx<'_>,
    name: &str,
    (unit, absolute): (i64, bool),
    args: &[Bytes],
) -> CommandResult {
    let amount = parse_int(&args[2])?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &args[3..] {
        match lower(option).as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "gt" => gt = true,
            "lt" => lt = true,
            _ => {
                return Err(CommandError::err(format!(
                    "Unsupported option {}",
                    String::from_utf8_lossy(option)
                )))
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err(CommandError::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(CommandError::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let invalid = || CommandError::invalid_expire_time(name);
    let mut at = amount.checked_mul(unit).ok_or_else(invalid)?;
    if !absolute {
        at = at.checked_add(now_ms() as i64).ok_or_else(invalid)?;
    }
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let Some(stored) = txn.get(db, &args[1])? else {
        drop(txn);
        ctx.w.int(0);
        return Ok(());
    };
    let current = stored.expire_at_ms;
    // No expiry counts as infinite for GT and LT, as in Redis.
    let allowed = !(nx && current != 0
        || xx && current == 0
        || gt && (current == 0 || at <= current as i64)
        || lt && current != 0 && at >= current as i64);
    if !allowed {
        drop(txn);
        ctx.w.int(0);
        return Ok(());
    }
    if at <= now_ms() as i64 {
        txn.delete(db, &args[1])?;
    } else {
        txn.put(db, &args[1], stored.kind, at as u64, &stored.payload)?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(1);
    Ok(())
}

pub(super) fn scan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let cursor = super::parse_cursor(&args[1])?;
    let super::ScanOptions {
        pattern,
        count,
        kind,
    } = super::parse_scan_options(&args[2..], true)?;
    let db = ctx.db();
    let (next, mut keys) =
        ctx.server
            .keyspace
            .scan(ctx.session, db, cursor, count, pattern.as_deref())?;
    if let Some(kind) = kind {
        let mut kept = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(stored) = ctx.server.keyspace.read(ctx.session, db, &key)? {
                if stored.kind.name() == kind {
                    kept.push(key);
                }
            }
        }
        keys = kept;
    }
    ctx.w.array(2);
    ctx.w.bulk(next.to_string().as_bytes());
    ctx.w.array(keys.len());
    for key in keys {
        ctx.w.bulk(&key);
    }
    Ok(())
}
