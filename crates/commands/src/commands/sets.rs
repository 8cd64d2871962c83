//! Set commands. A set is a linear-hashing table of its members (`prefixkv_collections::hash`,
//! empty values): SADD, SREM, SISMEMBER cost O(1) records per member, SMEMBERS and the
//! intersections O(size), SSCAN a couple of buckets per step.

use std::collections::HashSet;

use bytes::Bytes;
use prefixkv_collections::hash::Hash;

use super::{lower, parse_int, read_collection, CommandError, CommandResult, Ctx};
use crate::keyspace::Txn;
use crate::objects::{save_hash, set_of};
use crate::value::Kind;

/// SADD.
pub(super) fn sadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    add_or_remove(ctx, args, true)
}

/// SREM.
pub(super) fn srem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    add_or_remove(ctx, args, false)
}

/// SADD (`add`) and SREM: answers how many members changed.
fn add_or_remove(ctx: &mut Ctx<'_>, args: &[Bytes], add: bool) -> CommandResult {
    let db = ctx.db();
    let key = &args[1][..];
    let keyspace = &ctx.server.keyspace;
    let mut txn = keyspace.begin(ctx.session, db, &[key]);
    let (mut set, expire) = match set_of(txn.get(db, key)?)? {
        Some(found) => found,
        None if !add => {
            txn.commit()?;
            ctx.w.int(0);
            return Ok(());
        }
        None => (Hash::new(keyspace.new_object_id()), 0),
    };
    let mut changed = 0;
    let outcome = txn.with_records(db, key, |records| {
        for member in &args[2..] {
            let hit = if add {
                set.insert(records, member, b"")?
            } else {
                set.remove(records, member)?
            };
            changed += i64::from(hit);
        }
        Ok::<(), CommandError>(())
    });
    // Written back even after an error: it holds what succeeded (`crate::objects`).
    if changed > 0 {
        save_hash(&mut txn, db, key, Kind::Set, &set, expire)?;
    }
    outcome?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(changed);
    Ok(())
}

/// Whether each of `args[2..]` is a member of the set at `args[1]`.
fn are_members(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Vec<bool>> {
    let found = read_collection(ctx, set_of, &args[1], |set, records| {
        args[2..]
            .iter()
            .map(|member| {
                set.get(records, member, &mut Vec::new())
                    .map_err(CommandError::from)
            })
            .collect::<CommandResult<Vec<bool>>>()
    })?;
    Ok(found.unwrap_or_else(|| vec![false; args.len() - 2]))
}

/// SISMEMBER.
pub(super) fn sismember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let found = are_members(ctx, args)?;
    ctx.w.int(i64::from(found[0]));
    Ok(())
}

/// SMISMEMBER.
pub(super) fn smismember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let found = are_members(ctx, args)?;
    ctx.w.array(found.len());
    for hit in found {
        ctx.w.int(i64::from(hit));
    }
    Ok(())
}

/// SCARD.
pub(super) fn scard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let len = read_collection(ctx, set_of, &args[1], |set, _| Ok(set.len()))?.unwrap_or(0);
    ctx.w.int(len as i64);
    Ok(())
}

/// SMEMBERS.
pub(super) fn smembers(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let members = read_collection(ctx, set_of, &args[1], |set, records| {
        members_of(set, records)
    })?
    .unwrap_or_default();
    write_members(ctx, &members);
    Ok(())
}

/// SRANDMEMBER.
pub(super) fn srandmember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    random_members(ctx, false, args)
}

/// SPOP.
pub(super) fn spop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    random_members(ctx, true, args)
}

/// SINTER.
pub(super) fn sinter(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    combine_and_reply(ctx, args, "sinter")
}

/// SUNION.
pub(super) fn sunion(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    combine_and_reply(ctx, args, "sunion")
}

/// SDIFF.
pub(super) fn sdiff(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    combine_and_reply(ctx, args, "sdiff")
}

/// SINTER, SUNION and SDIFF: `operation` as [`combine`] takes it.
fn combine_and_reply(ctx: &mut Ctx<'_>, args: &[Bytes], operation: &str) -> CommandResult {
    let db = ctx.db();
    let keys: Vec<&[u8]> = args[1..].iter().map(|k| &k[..]).collect();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &keys);
    let result = combine(&mut txn, db, &keys, operation, u64::MAX)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    write_members(ctx, &result);
    Ok(())
}

/// SINTERSTORE.
pub(super) fn sinterstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    combine_and_store(ctx, args, "sinter")
}

/// SUNIONSTORE.
pub(super) fn sunionstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    combine_and_store(ctx, args, "sunion")
}

/// SDIFFSTORE.
pub(super) fn sdiffstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    combine_and_store(ctx, args, "sdiff")
}

/// The STORE forms: the result of `operation` over `args[2..]` replaces `args[1]`.
fn combine_and_store(ctx: &mut Ctx<'_>, args: &[Bytes], operation: &str) -> CommandResult {
    let db = ctx.db();
    let keys: Vec<&[u8]> = args[1..].iter().map(|k| &k[..]).collect();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &keys);
    let result = combine(&mut txn, db, &keys[1..], operation, u64::MAX)?;
    store(&mut txn, db, keys[0], &result)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(result.len() as i64);
    Ok(())
}

fn members_of(
    set: &Hash,
    records: &mut impl prefixkv_collections::Records,
) -> CommandResult<Vec<Vec<u8>>> {
    let mut members = Vec::new();
    set.for_each(records, |member, _| members.push(member.to_vec()))?;
    Ok(members)
}

fn write_members(ctx: &mut Ctx<'_>, members: &[Vec<u8>]) {
    ctx.w.set(members.len());
    for member in members {
        ctx.w.bulk(member);
    }
}

/// The members of `set`, the set at `key` (its header already read under `txn`); empty for
/// none.
fn members_at(
    txn: &mut Txn<'_>,
    db: u8,
    key: &[u8],
    set: Option<Hash>,
) -> CommandResult<Vec<Vec<u8>>> {
    match set {
        Some(set) => txn.with_records(db, key, |records| members_of(&set, records)),
        None => Ok(Vec::new()),
    }
}

/// SINTER, SUNION or SDIFF (`operation`: "sinte", "sunio", "sdiff" prefixes accepted) of the sets
/// at `keys`, stopping an intersection at `limit` members. Every key's type is checked, as
/// Redis does, before a missing set short-cuts the result.
fn combine(
    txn: &mut Txn<'_>,
    db: u8,
    keys: &[&[u8]],
    operation: &str,
    limit: u64,
) -> CommandResult<Vec<Vec<u8>>> {
    let mut sets = Vec::with_capacity(keys.len());
    for key in keys {
        sets.push(set_of(txn.get(db, key)?)?.map(|(set, _)| set));
    }
    if operation.starts_with("sunio") {
        let mut union: HashSet<Vec<u8>> = HashSet::new();
        for (key, set) in keys.iter().zip(&sets) {
            union.extend(members_at(txn, db, key, *set)?);
        }
        return Ok(union.into_iter().collect());
    }
    // No first set: the difference and the intersection are both empty.
    if !matches!(sets.first(), Some(Some(_))) {
        return Ok(Vec::new());
    }
    let intersect = operation.starts_with("sinte");
    if intersect && sets.iter().any(Option::is_none) {
        return Ok(Vec::new());
    }
    // The intersection walks its smallest set; the difference must walk the first.
    let walk = if intersect {
        (0..keys.len())
            .min_by_key(|&i| sets[i].map_or(0, |s| s.len()))
            .expect("at least one key")
    } else {
        0
    };
    let candidates = members_at(txn, db, keys[walk], sets[walk])?;
    let mut result = Vec::new();
    let mut scratch = Vec::new();
    for member in candidates {
        let mut keep = true;
        for (index, set) in sets.iter().enumerate() {
            if index == walk {
                continue;
            }
            let Some(set) = set else { continue };
            let present = txn.with_records(db, keys[index], |records| {
                set.get(records, &member, &mut scratch)
            })?;
            if present != intersect {
                keep = false;
                break;
            }
        }
        if keep {
            result.push(member);
            if result.len() as u64 >= limit {
                break;
            }
        }
    }
    Ok(result)
}

/// Replaces `key` with a set of `members` (deletes it when there are none).
fn store(txn: &mut Txn<'_>, db: u8, key: &[u8], members: &[Vec<u8>]) -> CommandResult {
    txn.delete(db, key)?;
    if members.is_empty() {
        return Ok(());
    }
    let mut set = Hash::new(txn.keyspace().new_object_id());
    let outcome = txn.with_records(db, key, |records| {
        members
            .iter()
            .try_for_each(|member| set.insert(records, member, b"").map(|_| ()))
    });
    save_hash(txn, db, key, Kind::Set, &set, 0)?;
    outcome.map_err(CommandError::from)
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit].
pub(super) fn sintercard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let count = parse_int(&args[1])
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| CommandError::err("numkeys should be greater than 0"))?
        as usize;
    let rest = &args[2..];
    if count > rest.len() {
        return Err(CommandError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let mut limit = u64::MAX;
    match &rest[count..] {
        [] => {}
        [word, value] if lower(word) == "limit" => {
            limit = match parse_int(value) {
                Ok(n) if n >= 0 => n as u64,
                _ => return Err(CommandError::err("LIMIT can't be negative")),
            };
            if limit == 0 {
                limit = u64::MAX;
            }
        }
        _ => return Err(CommandError::Syntax),
    }
    let db = ctx.db();
    let keys: Vec<&[u8]> = rest[..count].iter().map(|k| &k[..]).collect();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &keys);
    let result = combine(&mut txn, db, &keys, "sinte", limit)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(result.len() as i64);
    Ok(())
}

pub(super) fn smove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let (source, destination, member) = (&args[1][..], &args[2][..], &args[3][..]);
    let keyspace = &ctx.server.keyspace;
    let mut txn = keyspace.begin(ctx.session, db, &[source, destination]);
    let Some((mut set, expire)) = set_of(txn.get(db, source)?)? else {
        txn.commit()?;
        ctx.w.int(0);
        return Ok(());
    };
    // As Redis: a missing source answers 0 whatever the destination is.
    let target = set_of(txn.get(db, destination)?)?;
    if source == destination {
        // Redis answers whether it is a member and changes nothing.
        let member_there = txn.with_records(db, source, |records| {
            set.get(records, member, &mut Vec::new())
        })?;
        txn.commit()?;
        ctx.w.int(i64::from(member_there));
        return Ok(());
    }
    let removed = txn.with_records(db, source, |records| set.remove(records, member))?;
    if !removed {
        txn.commit()?;
        ctx.w.int(0);
        return Ok(());
    }
    let (mut target, target_expire) =
        target.unwrap_or_else(|| (Hash::new(keyspace.new_object_id()), 0));
    let added = txn.with_records(db, destination, |records| {
        target.insert(records, member, b"")
    });
    if let Err(failure) = added {
        // Put the member back, so a refused add loses nothing.
        let back = txn.with_records(db, source, |records| set.insert(records, member, b""));
        save_hash(&mut txn, db, source, Kind::Set, &set, expire)?;
        back?;
        return Err(failure.into());
    }
    save_hash(&mut txn, db, source, Kind::Set, &set, expire)?;
    save_hash(&mut txn, db, destination, Kind::Set, &target, target_expire)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(1);
    Ok(())
}

/// SRANDMEMBER key [count] and SPOP key [count]. A positive SRANDMEMBER count and every SPOP
/// count pick distinct members; a negative SRANDMEMBER count may repeat them and is bounded by
/// client-output-buffer-limit (16 bytes a member at least), as HRANDFIELD's.
/// SRANDMEMBER and, when `pop`, SPOP.
fn random_members(ctx: &mut Ctx<'_>, pop: bool, args: &[Bytes]) -> CommandResult {
    if args.len() > 3 {
        return Err(CommandError::Syntax);
    }
    let count = match args.get(2) {
        None => None,
        Some(argument) => {
            let count = match parse_int(argument) {
                Ok(count) if pop && count < 0 => return Err(CommandError::NotPositive),
                Err(_) if pop => return Err(CommandError::NotPositive),
                parsed => parsed?,
            };
            Some(count)
        }
    };
    let limit = ctx.server.settings.read().client_output_buffer_limit_bytes;
    if count.is_some_and(|c| c < 0 && c.unsigned_abs() > (limit / 16).max(1)) {
        return Err(CommandError::ReplyTooLarge { limit_bytes: limit });
    }
    let db = ctx.db();
    let key = &args[1][..];
    let mut seed = super::hashes::random_seed(ctx.client.id);
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let Some((mut set, expire)) = set_of(txn.get(db, key)?)? else {
        txn.commit()?;
        match count {
            None => ctx.w.null(),
            Some(_) => ctx.w.array(0),
        }
        return Ok(());
    };
    let wanted = count.map_or(1, |c| c.unsigned_abs());
    let distinct = count.is_none_or(|c| c >= 0);
    let mut picked: Vec<Vec<u8>> = Vec::new();
    let outcome = txn.with_records(db, key, |records| {
        if distinct && wanted >= set.len() && !pop {
            picked = members_of(&set, records)?;
            return Ok(());
        }
        let mut chosen: HashSet<Vec<u8>> = HashSet::new();
        while (picked.len() as u64) < wanted && !set.is_empty() {
            seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let Some((member, _)) = set.random(records, seed)? else {
                break;
            };
            if pop {
                set.remove(records, &member)?;
            } else if distinct && !chosen.insert(member.clone()) {
                continue;
            }
            picked.push(member);
        }
        Ok::<(), CommandError>(())
    });
    // Written back even after an error: it holds the pops that succeeded (`crate::objects`).
    if pop && !picked.is_empty() {
        save_hash(&mut txn, db, key, Kind::Set, &set, expire)?;
    }
    outcome?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    match count {
        None => ctx.w.bulk_or_null(picked.first().map(Vec::as_slice)),
        Some(_) if pop => write_members(ctx, &picked),
        Some(_) => {
            ctx.w.array(picked.len());
            for member in &picked {
                ctx.w.bulk(member);
            }
        }
    }
    Ok(())
}

/// SSCAN key cursor [MATCH pattern] [COUNT count].
pub(super) fn sscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let cursor = super::parse_cursor(&args[2])?;
    let options = super::parse_scan_options(&args[3..], false)?;
    let (next, members) = read_collection(ctx, set_of, &args[1], |set, records| {
        scan_table(set, records, cursor, options.count, |member, _| {
            options
                .pattern
                .as_ref()
                .is_none_or(|p| crate::glob::matches(p, member, false))
        })
    })?
    .unwrap_or((0, Vec::new()));
    ctx.w.array(2);
    ctx.w.bulk(next.to_string().as_bytes());
    ctx.w.array(members.len());
    for (member, _) in &members {
        ctx.w.bulk(member);
    }
    Ok(())
}

/// A table entry, owned: (field or member, value).
pub(super) type Entry = (Vec<u8>, Vec<u8>);

/// Scan steps over a table from `cursor` until about `count` entries were seen or the scan
/// ended; the entries `keep` accepts, and the cursor to continue from (0 at the end).
pub(super) fn scan_table(
    table: &Hash,
    records: &mut impl prefixkv_collections::Records,
    mut cursor: u64,
    count: usize,
    mut keep: impl FnMut(&[u8], &[u8]) -> bool,
) -> CommandResult<(u64, Vec<Entry>)> {
    let mut seen = 0;
    let mut entries = Vec::new();
    loop {
        cursor = table.scan(records, cursor, |field, value| {
            seen += 1;
            if keep(field, value) {
                entries.push((field.to_vec(), value.to_vec()));
            }
        })?;
        if cursor == 0 || seen >= count {
            return Ok((cursor, entries));
        }
    }
}
