//! String commands.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{lower, parse_float, parse_int, CommandError, CommandResult, Ctx};
use crate::keyspace::now_ms;
use crate::value::{Kind, Stored};

/// GET.
pub(super) fn get(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let Ctx {
        server,
        client,
        session,
        w,
    } = ctx;
    // The reply is written from the read buffer: the value is never copied out of it.
    let found = server
        .keyspace
        .read_payload(session, client.database, &args[1], |found| match found {
            Some((Kind::String, payload)) => {
                w.bulk(payload);
                Some(true)
            }
            Some(_) => Some(false),
            None => {
                w.null();
                None
            }
        })?;
    // Counted as `read_string` counts: a key of another type is a hit.
    let counter = if found.is_some() {
        &server.stats.keyspace_hits
    } else {
        &server.stats.keyspace_misses
    };
    counter.fetch_add(1, Ordering::Relaxed);
    match found {
        Some(false) => Err(CommandError::WrongType),
        _ => Ok(()),
    }
}

/// SETNX.
pub(super) fn setnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let done = set_plain(ctx, &args[1], &args[2], Condition::IfAbsent, 0)?;
    ctx.w.int(done as i64);
    Ok(())
}

/// SETEX: seconds.
pub(super) fn setex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    set_expiring(ctx, args, "setex", 1000)
}

/// PSETEX: milliseconds.
pub(super) fn psetex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    set_expiring(ctx, args, "psetex", 1)
}

/// SETEX and PSETEX: `name` for the error text, `unit` ms per unit of the given time.
fn set_expiring(ctx: &mut Ctx<'_>, args: &[Bytes], name: &str, unit: i64) -> CommandResult {
    let amount = parse_int(&args[2])?;
    let expire = absolute_expiry(amount, unit, false)
        .ok_or_else(|| CommandError::invalid_expire_time(name))?;
    set_plain(ctx, &args[1], &args[3], Condition::Always, expire)?;
    ctx.w.ok();
    Ok(())
}

/// GETSET.
pub(super) fn getset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let old = string_of(txn.get(db, &args[1])?)?;
    txn.put(db, &args[1], Kind::String, 0, &args[2])?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.bulk_or_null(old.as_deref());
    Ok(())
}

/// GETDEL.
pub(super) fn getdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let old = string_of(txn.get(db, &args[1])?)?;
    if old.is_some() {
        txn.delete(db, &args[1])?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.bulk_or_null(old.as_deref());
    Ok(())
}

/// MSET.
pub(super) fn mset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    set_many(ctx, args, false)
}

/// MSETNX.
pub(super) fn msetnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    set_many(ctx, args, true)
}

/// MSET and, when `only_new`, MSETNX (nothing is set if any key exists).
fn set_many(ctx: &mut Ctx<'_>, args: &[Bytes], only_new: bool) -> CommandResult {
    if args.len().is_multiple_of(2) {
        return Err(CommandError::arity(if only_new {
            "msetnx"
        } else {
            "mset"
        }));
    }
    let db = ctx.db();
    let keys: Vec<&[u8]> = args[1..].iter().step_by(2).map(|k| &k[..]).collect();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &keys);
    if only_new {
        for key in &keys {
            if txn.get(db, key)?.is_some() {
                drop(txn);
                ctx.w.int(0);
                return Ok(());
            }
        }
    }
    for pair in args[1..].chunks(2) {
        txn.put(db, &pair[0], Kind::String, 0, &pair[1])?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    if only_new {
        ctx.w.int(1);
    } else {
        ctx.w.ok();
    }
    Ok(())
}

/// MGET.
pub(super) fn mget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut values = Vec::with_capacity(args.len() - 1);
    for key in &args[1..] {
        let stored = ctx.server.keyspace.read(ctx.session, db, key)?;
        values.push(stored.filter(|s| s.kind == Kind::String).map(|s| s.payload));
    }
    ctx.w.array(values.len());
    for value in values {
        ctx.w.bulk_or_null(value.as_deref());
    }
    Ok(())
}

/// INCR.
pub(super) fn incr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    incr_by(ctx, &args[1], 1)
}

/// DECR.
pub(super) fn decr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    incr_by(ctx, &args[1], -1)
}

/// INCRBY.
pub(super) fn incrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let delta = parse_int(&args[2])?;
    incr_by(ctx, &args[1], delta)
}

/// DECRBY.
pub(super) fn decrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let delta = parse_int(&args[2])?;
    if delta == i64::MIN {
        return Err(CommandError::err("decrement would overflow"));
    }
    incr_by(ctx, &args[1], -delta)
}

/// APPEND.
pub(super) fn append(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let (mut current, expire) = string_payload(txn.get(db, &args[1])?)?;
    check_size(ctx.server, current.len() as u64 + args[2].len() as u64)?;
    current.extend_from_slice(&args[2]);
    txn.put(db, &args[1], Kind::String, expire, &current)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(current.len() as i64);
    Ok(())
}

/// STRLEN.
pub(super) fn strlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let value = read_string(ctx, &args[1])?;
    ctx.w.int(value.map_or(0, |v| v.len() as i64));
    Ok(())
}

/// GETRANGE.
pub(super) fn getrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let start = parse_int(&args[2])?;
    let end = parse_int(&args[3])?;
    let value = read_string(ctx, &args[1])?.unwrap_or_default();
    ctx.w.bulk(range(&value, start, end));
    Ok(())
}

/// INCRBYFLOAT key increment: the sum, written back in its shortest text.
pub(super) fn incr_by_float(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let delta = parse_float(&args[2])?;
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let old = txn.get(db, &args[1])?;
    let (current, expire) = match &old {
        Some(s) if s.kind != Kind::String => return Err(CommandError::WrongType),
        Some(s) => (parse_float(&s.payload)?, s.expire_at_ms),
        None => (0.0, 0),
    };
    let result = current + delta;
    if !result.is_finite() {
        return Err(CommandError::NotFinite);
    }
    let text = format_float(result);
    txn.put(db, &args[1], Kind::String, expire, text.as_bytes())?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.bulk(text.as_bytes());
    Ok(())
}

/// SETRANGE key offset value: zero-padded, within proto-max-bulk-len.
pub(super) fn setrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let offset = parse_int(&args[2])?;
    if offset < 0 {
        return Err(CommandError::err("offset is out of range"));
    }
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let (mut current, expire) = string_payload(txn.get(db, &args[1])?)?;
    if args[3].is_empty() {
        ctx.w.int(current.len() as i64);
        return Ok(());
    }
    let end = offset as u64 + args[3].len() as u64;
    check_size(ctx.server, end)?;
    let (offset, end) = (offset as usize, end as usize);
    if current.len() < end {
        current.resize(end, 0);
    }
    current[offset..end].copy_from_slice(&args[3]);
    txn.put(db, &args[1], Kind::String, expire, &current)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(current.len() as i64);
    Ok(())
}

/// Redis's substring rule for GETRANGE.
fn range(value: &[u8], start: i64, end: i64) -> &[u8] {
    let len = value.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return &[];
    }
    let mut start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let mut end = if end < 0 { (len + end).max(0) } else { end };
    end = end.min(len - 1);
    if start > end || start >= len {
        return &[];
    }
    start = start.max(0);
    &value[start as usize..=end as usize]
}

fn check_size(server: &crate::state::Server, bytes: u64) -> CommandResult {
    if bytes > server.settings.read().proto_max_bulk_len_bytes {
        return Err(CommandError::err(
            "string exceeds maximum allowed size (proto-max-bulk-len)",
        ));
    }
    Ok(())
}

/// Shortest text that reads back as `value` (Redis prints up to 17 significant digits).
pub fn format_float(value: f64) -> String {
    if value == value.trunc() && value.abs() < 1e17 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// A string's bytes and expiry for a read-modify-write (APPEND, SETRANGE): empty and no expiry
/// when the key is absent, WRONGTYPE when it holds another type.
fn string_payload(stored: Option<Stored>) -> CommandResult<(Vec<u8>, u64)> {
    match stored {
        Some(s) if s.kind != Kind::String => Err(CommandError::WrongType),
        Some(s) => Ok((s.payload, s.expire_at_ms)),
        None => Ok((Vec::new(), 0)),
    }
}

fn string_of(stored: Option<Stored>) -> CommandResult<Option<Vec<u8>>> {
    match stored {
        Some(s) if s.kind != Kind::String => Err(CommandError::WrongType),
        Some(s) => Ok(Some(s.payload)),
        None => Ok(None),
    }
}

/// Reads a string (WRONGTYPE for a hash), counting hits and misses.
pub(super) fn read_string(ctx: &mut Ctx<'_>, key: &[u8]) -> CommandResult<Option<Vec<u8>>> {
    let stored = ctx
        .server
        .keyspace
        .read(ctx.session, ctx.client.database, key)?;
    let counter = if stored.is_some() {
        &ctx.server.stats.keyspace_hits
    } else {
        &ctx.server.stats.keyspace_misses
    };
    counter.fetch_add(1, Ordering::Relaxed);
    string_of(stored)
}

/// An absolute expiry from a relative or absolute amount in `unit` ms; `None` if invalid
/// (non-positive, or overflowing).
pub(super) fn absolute_expiry(amount: i64, unit_ms: i64, absolute: bool) -> Option<u64> {
    if amount <= 0 {
        return None;
    }
    let ms = amount.checked_mul(unit_ms)?;
    let at = if absolute {
        ms
    } else {
        ms.checked_add(now_ms() as i64)?
    };
    (at > 0).then_some(at as u64)
}

#[derive(PartialEq, Clone, Copy)]
enum Condition {
    Always,
    IfAbsent,
    IfPresent,
}

fn set_plain(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    value: &[u8],
    condition: Condition,
    expire: u64,
) -> CommandResult<bool> {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let exists = condition != Condition::Always && txn.get(db, key)?.is_some();
    if (condition == Condition::IfAbsent && exists)
        || (condition == Condition::IfPresent && !exists)
    {
        return Ok(false);
    }
    txn.put(db, key, Kind::String, expire, value)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    Ok(true)
}

enum Expiry {
    Keep,
    Clear,
    At(u64),
}

pub(super) fn set(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let mut condition = Condition::Always;
    let mut get = false;
    let mut expiry = Expiry::Clear;
    let mut expiry_given = false;
    let mut index = 3;
    while index < args.len() {
        let option = lower(&args[index]);
        match option.as_str() {
            "nx" if condition == Condition::Always => condition = Condition::IfAbsent,
            "xx" if condition == Condition::Always => condition = Condition::IfPresent,
            "get" => get = true,
            "keepttl" if !expiry_given => {
                expiry = Expiry::Keep;
                expiry_given = true;
            }
            "ex" | "px" | "exat" | "pxat" if !expiry_given && index + 1 < args.len() => {
                let amount = parse_int(&args[index + 1])?;
                let unit = if option == "ex" || option == "exat" {
                    1000
                } else {
                    1
                };
                let at = absolute_expiry(amount, unit, option.ends_with("at"))
                    .ok_or_else(|| CommandError::invalid_expire_time("set"))?;
                expiry = Expiry::At(at);
                expiry_given = true;
                index += 1;
            }
            _ => return Err(CommandError::Syntax),
        }
        index += 1;
    }
    let db = ctx.db();
    let key = &args[1];
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    // A plain SET needs nothing of the old value: it is not read (a read before each write was a
    // fifth of a SET's time).
    let needs_old = get || condition != Condition::Always || matches!(expiry, Expiry::Keep);
    let old = if needs_old { txn.get(db, key)? } else { None };
    if get {
        if let Some(s) = &old {
            if s.kind != Kind::String {
                return Err(CommandError::WrongType);
            }
        }
    }
    let exists = old.is_some();
    let skip = (condition == Condition::IfAbsent && exists)
        || (condition == Condition::IfPresent && !exists);
    if !skip {
        let expire = match expiry {
            Expiry::Keep => old.as_ref().map_or(0, |s| s.expire_at_ms),
            Expiry::Clear => 0,
            Expiry::At(at) => at,
        };
        match &old {
            // Read just now, and no collection whose records a write must drop.
            Some(old) if !old.kind.in_records() => {
                txn.put_object(db, key, Kind::String, expire, &args[2])?
            }
            _ => txn.put(db, key, Kind::String, expire, &args[2])?,
        }
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    if get {
        ctx.w.bulk_or_null(old.as_ref().map(|s| &s.payload[..]));
    } else if skip {
        ctx.w.null();
    } else {
        ctx.w.ok();
    }
    Ok(())
}

pub(super) fn getex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let mut change: Option<Expiry> = None;
    let mut index = 2;
    while index < args.len() {
        let option = lower(&args[index]);
        match option.as_str() {
            "persist" if change.is_none() => change = Some(Expiry::Clear),
            "ex" | "px" | "exat" | "pxat" if change.is_none() && index + 1 < args.len() => {
                let amount = parse_int(&args[index + 1])?;
                let unit = if option == "ex" || option == "exat" {
                    1000
                } else {
                    1
                };
                let at = absolute_expiry(amount, unit, option.ends_with("at"))
                    .ok_or_else(|| CommandError::invalid_expire_time("getex"))?;
                change = Some(Expiry::At(at));
                index += 1;
            }
            _ => return Err(CommandError::Syntax),
        }
        index += 1;
    }
    let Some(change) = change else {
        let value = read_string(ctx, &args[1])?;
        ctx.w.bulk_or_null(value.as_deref());
        return Ok(());
    };
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let old = txn.get(db, &args[1])?;
    let value = string_of(old)?;
    if let Some(v) = &value {
        let expire = match change {
            Expiry::At(at) => at,
            _ => 0,
        };
        txn.put(db, &args[1], Kind::String, expire, v)?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.bulk_or_null(value.as_deref());
    Ok(())
}

fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], delta: i64) -> CommandResult {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let (current, expire) = match txn.get(db, key)? {
        Some(s) if s.kind != Kind::String => return Err(CommandError::WrongType),
        Some(s) => (parse_int(&s.payload)?, s.expire_at_ms),
        None => (0, 0),
    };
    let result = current.checked_add(delta).ok_or(CommandError::Overflow)?;
    txn.put(db, key, Kind::String, expire, result.to_string().as_bytes())?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(result);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrange_rules() {
        assert_eq!(range(b"This is a string", 0, 3), b"This");
        assert_eq!(range(b"This is a string", -3, -1), b"ing");
        assert_eq!(range(b"This is a string", 0, -1), b"This is a string");
        assert_eq!(range(b"This is a string", 10, 100), b"string");
        assert_eq!(range(b"abc", 5, 10), b"");
        assert_eq!(range(b"abc", -1, -5), b"");
    }

    #[test]
    fn floats() {
        assert_eq!(format_float(10.5), "10.5");
        assert_eq!(format_float(11.0), "11");
        assert_eq!(format_float(5.0e3), "5000");
    }
}
