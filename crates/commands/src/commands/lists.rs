//! List commands. A list is a deque of chunks of up to 128 elements (`prefixkv_collections::list`,
//! `crate::objects`), as Redis's quicklist: a push or pop at either end reads and writes one or two
//! small records whatever the length; LINDEX, LSET, LINSERT and LRANGE walk chunk by chunk from
//! the nearer end (O(n / 128) records, O(n) in Redis).
//!
//! The blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP) first try what their
//! non-blocking forms do; when every key is empty they return [`Flow::Async`] with
//! [`AsyncOp::Block`], and the connection waits for a push to one of the keys
//! (`crate::blocking`) and runs them again. They pop from a key only when no client blocked on
//! it before them (first come, first served, as Redis).

use std::ops::ControlFlow;

use bytes::Bytes;
use prefixkv_collections::list::List;

use super::{
    lower, parse_float, parse_int, read_collection, AsyncOp, CommandError, CommandResult, Ctx, Flow,
};
use crate::keyspace::Txn;
use crate::objects::{list_of, save_list};
use crate::value::Kind;

/// Which end of a list.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum End {
    /// The head (index 0).
    Left,
    /// The tail.
    Right,
}

fn parse_end(argument: &[u8]) -> CommandResult<End> {
    match lower(argument).as_str() {
        "left" => Ok(End::Left),
        "right" => Ok(End::Right),
        _ => Err(CommandError::Syntax),
    }
}

/// The position of `end` in a list of `len` elements (for an insertion: `len` at the right).
fn rank_at(end: End, len: u64, inserting: bool) -> u64 {
    match end {
        End::Left => 0,
        End::Right if inserting => len,
        End::Right => len - 1,
    }
}

/// Resolves a Redis index (negative from the end) into a rank, if in range.
fn resolve_index(index: i64, len: u64) -> Option<u64> {
    let resolved = if index < 0 { len as i64 + index } else { index };
    (resolved >= 0 && (resolved as u64) < len).then_some(resolved as u64)
}

/// Resolves LRANGE/LTRIM's start and stop into an inclusive rank range, `None` when empty.
fn resolve_range(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len).then_some((start as u64, stop as u64))
}

/// LPUSH.
pub(super) fn lpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    push(ctx, End::Left, false, args)
}

/// RPUSH.
pub(super) fn rpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    push(ctx, End::Right, false, args)
}

/// LPUSHX.
pub(super) fn lpushx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    push(ctx, End::Left, true, args)
}

/// RPUSHX.
pub(super) fn rpushx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    push(ctx, End::Right, true, args)
}

/// LPOP.
pub(super) fn lpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    pop(ctx, "lpop", End::Left, args)
}

/// RPOP.
pub(super) fn rpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    pop(ctx, "rpop", End::Right, args)
}

/// LLEN.
pub(super) fn llen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let len = list_of(txn.get(db, &args[1])?)?.map_or(0, |(tree, _)| tree.len());
    txn.commit()?;
    ctx.w.int(len as i64);
    Ok(())
}

/// LMOVE.
pub(super) fn lmove_command(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (from, to) = (parse_end(&args[3])?, parse_end(&args[4])?);
    let moved = lmove(ctx, &args[1], &args[2], from, to)?;
    ctx.w.bulk_or_null(moved.as_deref());
    Ok(())
}

/// RPOPLPUSH.
pub(super) fn rpoplpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let moved = lmove(ctx, &args[1], &args[2], End::Right, End::Left)?;
    ctx.w.bulk_or_null(moved.as_deref());
    Ok(())
}

/// The push commands: at `end`; when `only_existing` (the X forms) no list is created.
fn push(ctx: &mut Ctx<'_>, end: End, only_existing: bool, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let key = &args[1][..];
    let keyspace = &ctx.server.keyspace;
    let mut txn = keyspace.begin(ctx.session, db, &[key]);
    let (mut tree, expire) = match list_of(txn.get(db, key)?)? {
        Some(found) => found,
        None if only_existing => {
            txn.commit()?;
            ctx.w.int(0);
            return Ok(());
        }
        None => (List::new(keyspace.new_object_id()), 0),
    };
    let pushed = txn.with_records(db, key, |records| {
        args[2..].iter().try_for_each(|element| {
            let rank = rank_at(end, tree.len(), true);
            tree.insert_at(records, rank, element)
        })
    });
    // Written back even after an error: it holds the pushes that succeeded (`crate::objects`).
    save_list(&mut txn, db, key, &tree, expire)?;
    pushed?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(tree.len() as i64);
    Ok(())
}

/// Pops up to `count` elements from `end` of the list at `key` under `txn` (which locked it);
/// `None` when there is no list.
fn pop_in(
    txn: &mut Txn<'_>,
    db: u8,
    key: &[u8],
    end: End,
    count: u64,
) -> CommandResult<Option<Vec<Vec<u8>>>> {
    let Some((mut tree, expire)) = list_of(txn.get(db, key)?)? else {
        return Ok(None);
    };
    let mut popped = Vec::new();
    let outcome = txn.with_records(db, key, |records| {
        while (popped.len() as u64) < count && !tree.is_empty() {
            let rank = rank_at(end, tree.len(), false);
            popped.push(tree.remove_at(records, rank)?);
        }
        Ok::<(), CommandError>(())
    });
    if !popped.is_empty() {
        save_list(txn, db, key, &tree, expire)?;
    }
    outcome?;
    Ok(Some(popped))
}

/// LPOP and RPOP (`name` for the arity error): from `end`.
fn pop(ctx: &mut Ctx<'_>, name: &str, end: End, args: &[Bytes]) -> CommandResult {
    if args.len() > 3 {
        return Err(CommandError::arity(name.to_string()));
    }
    let db = ctx.db();
    let count = match args.get(2) {
        Some(argument) => {
            let count = parse_int(argument).map_err(|_| CommandError::NotPositive)?;
            if count < 0 {
                return Err(CommandError::NotPositive);
            }
            Some(count as u64)
        }
        None => None,
    };
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let popped = pop_in(&mut txn, db, &args[1], end, count.unwrap_or(1))?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    match (popped, count) {
        (None, None) => ctx.w.null(),
        (None, Some(_)) => ctx.w.null_array(),
        (Some(popped), None) => ctx.w.bulk_or_null(popped.first().map(Vec::as_slice)),
        (Some(popped), Some(_)) => {
            ctx.w.array(popped.len());
            for element in &popped {
                ctx.w.bulk(element);
            }
        }
    }
    Ok(())
}

pub(super) fn lrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (start, stop) = (parse_int(&args[2])?, parse_int(&args[3])?);
    let elements = read_collection(ctx, list_of, &args[1], |tree, records| {
        let mut elements = Vec::new();
        if let Some((first, last)) = resolve_range(start, stop, tree.len()) {
            tree.range(records, first, |rank, element| {
                elements.push(element.to_vec());
                if rank >= last {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
        }
        Ok(elements)
    })?
    .unwrap_or_default();
    ctx.w.array(elements.len());
    for element in &elements {
        ctx.w.bulk(element);
    }
    Ok(())
}

pub(super) fn lindex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let index = parse_int(&args[2])?;
    let element = read_collection(ctx, list_of, &args[1], |tree, records| {
        let Some(rank) = resolve_index(index, tree.len()) else {
            return Ok(None);
        };
        let mut out = Vec::new();
        tree.get(records, rank, &mut out)?;
        Ok(Some(out))
    })?
    .flatten();
    ctx.w.bulk_or_null(element.as_deref());
    Ok(())
}

pub(super) fn lset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let key = &args[1][..];
    let index = parse_int(&args[2])?;
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let Some((mut tree, expire)) = list_of(txn.get(db, key)?)? else {
        return Err(CommandError::NoSuchKey);
    };
    let Some(rank) = resolve_index(index, tree.len()) else {
        return Err(CommandError::err("index out of range"));
    };
    let outcome = txn.with_records(db, key, |records| tree.replace_at(records, rank, &args[3]));
    save_list(&mut txn, db, key, &tree, expire)?;
    outcome?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.ok();
    Ok(())
}

/// The ranks of the elements equal to `element`, scanning from the head (`from_head`) or the
/// tail, at most `limit` of them, looking at no more than `max_len` elements (0 = all).
fn find(
    tree: &List,
    records: &mut impl prefixkv_collections::Records,
    element: &[u8],
    from_head: bool,
    limit: u64,
    max_len: u64,
) -> CommandResult<Vec<u64>> {
    let mut found = Vec::new();
    let mut seen = 0u64;
    let mut visit = |rank: u64, candidate: &[u8]| {
        seen += 1;
        if candidate == element {
            found.push(rank);
        }
        if found.len() as u64 >= limit || (max_len != 0 && seen >= max_len) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    if tree.is_empty() || limit == 0 {
        return Ok(found);
    }
    if from_head {
        tree.range(records, 0, &mut visit)?;
    } else {
        tree.range_rev(records, tree.len() - 1, &mut visit)?;
    }
    Ok(found)
}

pub(super) fn linsert(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let after = match lower(&args[2]).as_str() {
        "before" => false,
        "after" => true,
        _ => return Err(CommandError::Syntax),
    };
    let db = ctx.db();
    let key = &args[1][..];
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let Some((mut tree, expire)) = list_of(txn.get(db, key)?)? else {
        txn.commit()?;
        ctx.w.int(0);
        return Ok(());
    };
    let outcome = txn.with_records(db, key, |records| {
        let Some(&pivot) = find(&tree, records, &args[3], true, 1, 0)?.first() else {
            return Ok(false);
        };
        tree.insert_at(records, pivot + u64::from(after), &args[4])?;
        Ok::<bool, CommandError>(true)
    });
    if let Ok(false) = outcome {
        // No pivot: nothing was written.
        txn.commit()?;
        ctx.w.int(-1);
        return Ok(());
    }
    // Written back even after an error (`crate::objects`).
    save_list(&mut txn, db, key, &tree, expire)?;
    outcome?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(tree.len() as i64);
    Ok(())
}

pub(super) fn lrem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let count = parse_int(&args[2])?;
    let db = ctx.db();
    let key = &args[1][..];
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let Some((mut tree, expire)) = list_of(txn.get(db, key)?)? else {
        txn.commit()?;
        ctx.w.int(0);
        return Ok(());
    };
    let limit = if count == 0 {
        u64::MAX
    } else {
        count.unsigned_abs()
    };
    let outcome = txn.with_records(db, key, |records| {
        let mut ranks = find(&tree, records, &args[3], count >= 0, limit, 0)?;
        // Highest rank first, so the ranks still to remove do not move.
        ranks.sort_unstable_by(|a, b| b.cmp(a));
        for &rank in &ranks {
            tree.remove_at(records, rank)?;
        }
        Ok::<usize, CommandError>(ranks.len())
    });
    // Written back when something was removed, or after an error (`crate::objects`).
    if !matches!(outcome, Ok(0)) {
        save_list(&mut txn, db, key, &tree, expire)?;
    }
    let removed = outcome?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(removed as i64);
    Ok(())
}

pub(super) fn ltrim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (start, stop) = (parse_int(&args[2])?, parse_int(&args[3])?);
    let db = ctx.db();
    let key = &args[1][..];
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    if let Some((mut tree, expire)) = list_of(txn.get(db, key)?)? {
        let keep = resolve_range(start, stop, tree.len());
        let outcome = txn.with_records(db, key, |records| match keep {
            None => tree.clear(records),
            Some((first, last)) => {
                while tree.len() > last + 1 {
                    tree.remove_at(records, tree.len() - 1)?;
                }
                for _ in 0..first {
                    tree.remove_at(records, 0)?;
                }
                Ok(())
            }
        });
        save_list(&mut txn, db, key, &tree, expire)?;
        outcome?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.ok();
    Ok(())
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len].
pub(super) fn lpos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (mut rank, mut count, mut max_len) = (1i64, None, 0u64);
    for pair in args[3..].chunks(2) {
        let [option, value] = pair else {
            return Err(CommandError::Syntax);
        };
        match lower(option).as_str() {
            "rank" => {
                rank = parse_int(value)?;
                if rank == 0 || rank == i64::MIN {
                    return Err(CommandError::err(
                        "RANK can't be zero: use 1 to start from the first match, \
                         2 from the second ... or use negative to start from the end \
                         of the list",
                    ));
                }
            }
            "count" => match parse_int(value)? {
                n if n < 0 => return Err(CommandError::err("COUNT can't be negative")),
                n => count = Some(n as u64),
            },
            "maxlen" => match parse_int(value)? {
                n if n < 0 => return Err(CommandError::err("MAXLEN can't be negative")),
                n => max_len = n as u64,
            },
            _ => return Err(CommandError::Syntax),
        }
    }
    let skip = rank.unsigned_abs() - 1;
    let wanted = match count {
        Some(0) => u64::MAX,
        Some(n) => n,
        None => 1,
    };
    let ranks = read_collection(ctx, list_of, &args[1], |tree, records| {
        let found = find(
            tree,
            records,
            &args[2],
            rank > 0,
            wanted.saturating_add(skip),
            max_len,
        )?;
        Ok(found.into_iter().skip(skip as usize).collect::<Vec<u64>>())
    })?
    .unwrap_or_default();
    match count {
        None => match ranks.first() {
            Some(&found) => ctx.w.int(found as i64),
            None => ctx.w.null(),
        },
        Some(_) => {
            ctx.w.array(ranks.len());
            for found in ranks {
                ctx.w.int(found as i64);
            }
        }
    }
    Ok(())
}

/// LMOVE source destination: pops at `from` of `source`, pushes at `to` of `destination`, in one
/// transaction; the element, or `None` when `source` is empty.
fn lmove(
    ctx: &mut Ctx<'_>,
    source: &[u8],
    destination: &[u8],
    from: End,
    to: End,
) -> CommandResult<Option<Vec<u8>>> {
    let db = ctx.db();
    let keyspace = &ctx.server.keyspace;
    let mut txn = keyspace.begin(ctx.session, db, &[source, destination]);
    let found = match list_of(txn.get(db, source)?) {
        // A woken BLMOVE whose source became another type waits on (Redis leaves it blocked).
        Err(CommandError::WrongType) if ctx.client.unblocking => None,
        other => other?,
    };
    let Some((mut tree, expire)) = found else {
        txn.commit()?;
        return Ok(None);
    };
    // Then the destination's type (as Redis: a missing source answers null whatever the
    // destination is): a wrong type moves nothing.
    let target = list_of(txn.get(db, destination)?)?;
    let rank = rank_at(from, tree.len(), false);
    let element = txn.with_records(db, source, |records| tree.remove_at(records, rank))?;
    // The destination may be the source: then it is the tree just popped from.
    let same = source == destination;
    let (mut target, target_expire) = match target {
        _ if same => (tree, expire),
        Some(found) => found,
        None => (List::new(keyspace.new_object_id()), 0),
    };
    let rank = rank_at(to, target.len(), true);
    let pushed = txn.with_records(db, destination, |records| {
        target.insert_at(records, rank, &element)
    });
    if let Err(failure) = pushed {
        // Put the element back where it was, so a refused push loses nothing.
        let mut source_tree = if same { target } else { tree };
        let rank = rank_at(from, source_tree.len(), true);
        let back = txn.with_records(db, source, |records| {
            source_tree.insert_at(records, rank, &element)
        });
        save_list(&mut txn, db, source, &source_tree, expire)?;
        back?;
        return Err(failure.into());
    }
    if !same {
        save_list(&mut txn, db, source, &tree, expire)?;
    }
    save_list(&mut txn, db, destination, &target, target_expire)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    Ok(Some(element))
}

/// Parses a blocking timeout in seconds (a float; 0 = forever) into milliseconds.
pub(super) fn parse_timeout(argument: &[u8]) -> CommandResult<u64> {
    let seconds = parse_float(argument)
        .map_err(|_| CommandError::err("timeout is not a float or out of range"))?;
    if seconds < 0.0 {
        return Err(CommandError::NegativeTimeout);
    }
    if !seconds.is_finite() || seconds > 1e12 {
        return Err(CommandError::err("timeout is out of range"));
    }
    Ok((seconds * 1000.0).ceil() as u64)
}

/// BLPOP/BRPOP key [key ...] timeout, BLMOVE source destination from to timeout, BRPOPLPUSH
/// source destination timeout, BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count].
/// Inside MULTI/EXEC they do not wait: an empty result answers null at once, as in Redis.
/// Whether this client may pop from `key` now: no client blocked on it for `kind` before this
/// one (`crate::blocking`: first come, first served).
pub(super) fn may_serve(ctx: &Ctx<'_>, key: &[u8], kind: Kind) -> bool {
    ctx.server
        .keyspace
        .blocked
        .may_serve(ctx.client.id, ctx.db(), key, kind)
}

/// A blocking command found nothing to pop in `keys`: inside EXEC a null array at once, else
/// the wait (`AsyncOp::Block`).
pub(super) fn block_on(ctx: &mut Ctx<'_>, keys: Vec<Bytes>, timeout_ms: u64, kind: Kind) -> Flow {
    if ctx.client.in_exec {
        ctx.w.null_array();
        return Flow::Continue;
    }
    Flow::Async(AsyncOp::Block {
        database: ctx.db(),
        keys,
        timeout_ms,
        kind,
        rerun: None,
    })
}

/// BLMPOP.
pub(super) fn blmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    let timeout_ms = parse_timeout(&args[1])?;
    let request = parse_mpop(&args[2..], parse_end)?;
    if !lmpop_into(ctx, &request)? {
        return Ok(block_on(ctx, request.keys, timeout_ms, Kind::List));
    }
    Ok(Flow::Continue)
}

/// BLPOP.
pub(super) fn blpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    blocking_pop(ctx, End::Left, args)
}

/// BRPOP.
pub(super) fn brpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    blocking_pop(ctx, End::Right, args)
}

/// BLPOP and BRPOP: pops from `end` of the first non-empty list, else blocks on them all.
fn blocking_pop(ctx: &mut Ctx<'_>, end: End, args: &[Bytes]) -> CommandResult<Flow> {
    let timeout_ms = parse_timeout(&args[args.len() - 1])?;
    let db = ctx.db();
    for key in &args[1..args.len() - 1] {
        if !may_serve(ctx, key, Kind::List) {
            continue;
        }
        let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
        let popped = match pop_in(&mut txn, db, key, end, 1) {
            // Woken, but the key now holds another type: wait on, as Redis does.
            Err(CommandError::WrongType) if ctx.client.unblocking => None,
            other => other?,
        };
        let mark = txn.commit()?;
        ctx.client.note_write(mark);
        if let Some(element) = popped.and_then(|mut p| p.pop()) {
            ctx.w.array(2);
            ctx.w.bulk(key);
            ctx.w.bulk(&element);
            return Ok(Flow::Continue);
        }
    }
    let keys = args[1..args.len() - 1].to_vec();
    Ok(block_on(ctx, keys, timeout_ms, Kind::List))
}

/// BLMOVE.
pub(super) fn blmove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    let timeout_ms = parse_timeout(&args[args.len() - 1])?;
    let (from, to) = (parse_end(&args[3])?, parse_end(&args[4])?);
    blocking_move(ctx, (from, to), timeout_ms, args)
}

/// BRPOPLPUSH.
pub(super) fn brpoplpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    let timeout_ms = parse_timeout(&args[args.len() - 1])?;
    blocking_move(ctx, (End::Right, End::Left), timeout_ms, args)
}

/// BLMOVE and BRPOPLPUSH: moves from `from` of `args[1]` to `to` of `args[2]`, else blocks.
fn blocking_move(
    ctx: &mut Ctx<'_>,
    (from, to): (End, End),
    timeout_ms: u64,
    args: &[Bytes],
) -> CommandResult<Flow> {
    if may_serve(ctx, &args[1], Kind::List) {
        if let Some(element) = lmove(ctx, &args[1], &args[2], from, to)? {
            ctx.w.bulk(&element);
            return Ok(Flow::Continue);
        }
    }
    if ctx.client.in_exec {
        // BLMOVE and BRPOPLPUSH answer a null bulk inside EXEC.
        ctx.w.null();
        return Ok(Flow::Continue);
    }
    Ok(block_on(ctx, vec![args[1].clone()], timeout_ms, Kind::List))
}

/// The arguments of LMPOP/ZMPOP (and their blocking forms) from numkeys on.
pub(super) struct MpopRequest<T> {
    /// The keys, in order.
    pub keys: Vec<Bytes>,
    /// LEFT/RIGHT or MIN/MAX.
    pub side: T,
    /// COUNT (1 when not given).
    pub count: u64,
}

/// Parses `numkeys key [key ...] side [COUNT count]` as Redis 7.0 does (its error texts).
pub(super) fn parse_mpop<T>(
    args: &[Bytes],
    side: impl Fn(&[u8]) -> CommandResult<T>,
) -> CommandResult<MpopRequest<T>> {
    let numkeys = parse_int(&args[0])
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| CommandError::err("numkeys should be greater than 0"))?;
    let side_index = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(1))
        .filter(|index| *index < args.len())
        .ok_or(CommandError::Syntax)?;
    let side = side(&args[side_index]).map_err(|_| CommandError::Syntax)?;
    let mut count = None;
    let mut index = side_index + 1;
    while index < args.len() {
        if count.is_none() && lower(&args[index]) == "count" && index + 1 < args.len() {
            let n = parse_int(&args[index + 1])
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| CommandError::err("count should be greater than 0"))?;
            count = Some(n as u64);
            index += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(MpopRequest {
        keys: args[1..side_index].to_vec(),
        side,
        count: count.unwrap_or(1),
    })
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count].
pub(super) fn lmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let request = parse_mpop(&args[1..], parse_end)?;
    if !lmpop_into(ctx, &request)? {
        ctx.w.null_array();
    }
    Ok(())
}

/// Pops from the first non-empty list of the request and writes `[key, [elements]]`; false
/// (nothing written) when every list is empty.
fn lmpop_into(ctx: &mut Ctx<'_>, request: &MpopRequest<End>) -> CommandResult<bool> {
    let db = ctx.db();
    for key in &request.keys {
        if !may_serve(ctx, key, Kind::List) {
            continue;
        }
        let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
        let popped = match pop_in(&mut txn, db, key, request.side, request.count) {
            Err(CommandError::WrongType) if ctx.client.unblocking => None,
            other => other?,
        };
        let mark = txn.commit()?;
        ctx.client.note_write(mark);
        if let Some(popped) = popped.filter(|p| !p.is_empty()) {
            ctx.w.array(2);
            ctx.w.bulk(key);
            ctx.w.array(popped.len());
            for element in &popped {
                ctx.w.bulk(element);
            }
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_as_redis() {
        assert_eq!(resolve_range(0, -1, 5), Some((0, 4)));
        assert_eq!(resolve_range(-2, -1, 5), Some((3, 4)));
        assert_eq!(resolve_range(-100, 100, 5), Some((0, 4)));
        assert_eq!(resolve_range(3, 1, 5), None);
        assert_eq!(resolve_range(5, 10, 5), None);
        assert_eq!(resolve_range(0, -6, 5), None);
        assert_eq!(resolve_index(-1, 3), Some(2));
        assert_eq!(resolve_index(3, 3), None);
        assert_eq!(resolve_index(-4, 3), None);
    }
}
