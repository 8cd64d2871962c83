//! Popping from sorted sets: ZPOPMIN, ZPOPMAX, ZMPOP and the blocking BZPOPMIN, BZPOPMAX,
//! BZMPOP. The blocking forms try once, and when every key is empty wait as the blocking list
//! commands do (`crate::blocking`: first come, first served per key; a woken client whose key
//! now holds another type waits on).

use bytes::Bytes;

use super::{write_entries, CommandError, CommandResult, Ctx, Entries};
use crate::commands::lists::{block_on, may_serve, parse_mpop, parse_timeout};
use crate::commands::{lower, parse_int, Flow};
use crate::objects::{save_zset, split_entry, zset_of};
use crate::value::Kind;

/// Which end of a sorted set.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Min,
    Max,
}

fn parse_side(argument: &[u8]) -> CommandResult<Side> {
    match lower(argument).as_str() {
        "min" => Ok(Side::Min),
        "max" => Ok(Side::Max),
        _ => Err(CommandError::Syntax),
    }
}

/// Pops up to `count` entries from `side` of the sorted set at `key` (in one transaction);
/// `None` when there is none. With `lenient` (a woken blocked client) another type reads as
/// none.
fn pop_from(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    side: Side,
    count: u64,
    lenient: bool,
) -> CommandResult<Option<Entries>> {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let found = match zset_of(txn.get(db, key)?) {
        Err(CommandError::WrongType) if lenient => None,
        other => other?,
    };
    let mut popped = Vec::new();
    if let Some((mut zset, expire)) = found {
        let outcome = txn.with_records(db, key, |records| {
            while (popped.len() as u64) < count && !zset.is_empty() {
                let rank = if side == Side::Min { 0 } else { zset.len() - 1 };
                let mut entry = Vec::new();
                zset.order.get(records, rank, &mut entry)?;
                let (score, member) = split_entry(&entry)?;
                zset.remove(records, member)?;
                popped.push((member.to_vec(), score));
            }
            Ok::<(), CommandError>(())
        });
        // Written back even after an error: it holds what succeeded (`crate::objects`).
        if !popped.is_empty() {
            save_zset(&mut txn, db, key, &zset, expire)?;
        }
        outcome?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    Ok((!popped.is_empty()).then_some(popped))
}

/// ZPOPMIN key [count].
pub(in crate::commands) fn zpopmin(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    zpop(ctx, Side::Min, args)
}

/// ZPOPMAX key [count].
pub(in crate::commands) fn zpopmax(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    zpop(ctx, Side::Max, args)
}

/// ZPOPMIN/ZPOPMAX key [count], from `side`.
fn zpop(ctx: &mut Ctx<'_>, side: Side, args: &[Bytes]) -> CommandResult {
    if args.len() > 3 {
        return Err(CommandError::Syntax);
    }
    let count = match args.get(2) {
        Some(argument) => match parse_int(argument) {
            Ok(count) if count >= 0 => count as u64,
            _ => return Err(CommandError::NotPositive),
        },
        None => 1,
    };
    let popped = pop_from(ctx, &args[1], side, count, false)?.unwrap_or_default();
    let resp3 = ctx.w.encoder.protocol() == prefixkv_resp::Protocol::Resp3;
    if resp3 && args.len() == 3 {
        // RESP3 with a count: an array of [member, score] pairs.
        write_entries(ctx, &popped, true);
    } else {
        ctx.w.array(popped.len() * 2);
        for (member, score) in &popped {
            ctx.w.bulk(member);
            ctx.w.score(*score);
        }
    }
    Ok(())
}

/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count].
pub(in crate::commands) fn zmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let request = parse_mpop(&args[1..], parse_side)?;
    if !zmpop_into(ctx, &request.keys, request.side, request.count)? {
        ctx.w.null_array();
    }
    Ok(())
}

/// Pops from the first non-empty sorted set of `keys` and writes `[key, [[member, score], ...]]`;
/// false (nothing written) when all are empty.
fn zmpop_into(ctx: &mut Ctx<'_>, keys: &[Bytes], side: Side, count: u64) -> CommandResult<bool> {
    let lenient = ctx.client.unblocking;
    for key in keys {
        if !may_serve(ctx, key, Kind::ZSet) {
            continue;
        }
        if let Some(popped) = pop_from(ctx, key, side, count, lenient)? {
            ctx.w.array(2);
            ctx.w.bulk(key);
            // Each pair nested, in RESP2 too (unlike ZRANGE WITHSCORES).
            ctx.w.array(popped.len());
            for (member, score) in &popped {
                ctx.w.array(2);
                ctx.w.bulk(member);
                ctx.w.score(*score);
            }
            return Ok(true);
        }
    }
    Ok(false)
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count].
pub(in crate::commands) fn bzmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    let timeout_ms = parse_timeout(&args[1])?;
    let request = parse_mpop(&args[2..], parse_side)?;
    if zmpop_into(ctx, &request.keys, request.side, request.count)? {
        return Ok(Flow::Continue);
    }
    Ok(block_on(ctx, request.keys, timeout_ms, Kind::ZSet))
}

/// BZPOPMIN key [key ...] timeout.
pub(in crate::commands) fn bzpopmin(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    blocking_pop(ctx, Side::Min, args)
}

/// BZPOPMAX key [key ...] timeout.
pub(in crate::commands) fn bzpopmax(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    blocking_pop(ctx, Side::Max, args)
}

/// BZPOPMIN and BZPOPMAX: pops from `side` of the first non-empty sorted set, else blocks.
fn blocking_pop(ctx: &mut Ctx<'_>, side: Side, args: &[Bytes]) -> CommandResult<Flow> {
    let timeout_ms = parse_timeout(&args[args.len() - 1])?;
    let keys = &args[1..args.len() - 1];
    let lenient = ctx.client.unblocking;
    for key in keys {
        if !may_serve(ctx, key, Kind::ZSet) {
            continue;
        }
        if let Some(popped) = pop_from(ctx, key, side, 1, lenient)? {
            let (member, score) = &popped[0];
            ctx.w.array(3);
            ctx.w.bulk(key);
            ctx.w.bulk(member);
            ctx.w.score(*score);
            return Ok(Flow::Continue);
        }
    }
    Ok(block_on(ctx, keys.to_vec(), timeout_ms, Kind::ZSet))
}
