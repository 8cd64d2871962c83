//! Sorted-set commands. A sorted set is a member -> score table and a counted B+tree of
//! `[score key][member]` entries under one object id (`crate::objects::ZSet`): ZADD, ZREM,
//! ZINCRBY, ZRANK and ZSCORE cost O(log n) records, range queries O(log n + elements returned).
//!
//! Submodules: `setops` (ZUNION, ZINTER, ZDIFF, their STORE forms, ZINTERCARD), `pops` (ZPOPMIN,
//! ZPOPMAX, ZMPOP and the blocking BZPOPMIN, BZPOPMAX, BZMPOP), `random` (ZRANDMEMBER,
//! ZRANGESTORE).

mod pops;
mod random;
mod setops;

pub(super) use pops::{bzmpop, bzpopmax, bzpopmin, zmpop, zpopmax, zpopmin};
pub(super) use random::{zrandmember, zrangestore};

/// (member, score) entries, in reply order.
type Entries = Vec<(Vec<u8>, f64)>;

use std::ops::ControlFlow;

use bytes::Bytes;
use prefixkv_collections::tree::Tree;
use prefixkv_collections::{score_key, Records};

use super::{
    lower, parse_float, parse_int, read_collection, CommandError, CommandResult, Ctx, Writer,
};
use crate::objects::{save_zset, split_entry, zset_of, ZSet};

/// Formats a score as Redis 7.0 does (`%.17g`: `1.1000000000000001`, `3`, `1e+21`, `inf`).
pub fn format_score(score: f64) -> String {
    if score.is_infinite() {
        return if score > 0.0 { "inf" } else { "-inf" }.into();
    }
    let scientific = format!("{score:.16e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("{:e} always writes an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} writes a decimal exponent");
    if !(-4..17).contains(&exponent) {
        let mantissa = strip_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let fixed = format!("{score:.*}", (16 - exponent) as usize);
    strip_zeros(&fixed).to_string()
}

fn strip_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

impl Writer<'_> {
    /// A score: a bulk string in RESP2, a double in RESP3, in Redis 7.0's text.
    pub fn score(&mut self, score: f64) {
        let text = format_score(score);
        if self.encoder.protocol() == prefixkv_resp::Protocol::Resp3 {
            self.out.extend_from_slice(b",");
            self.out.extend_from_slice(text.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }
}

/// ZINCRBY.
pub(super) fn zincrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let increment = parse_float(&args[2])?;
    let options = AddOptions {
        incr: true,
        ..AddOptions::default()
    };
    let (_, result) = add(ctx, &args[1], &options, &[(increment, &args[3][..])])?;
    match result {
        Some(score) => ctx.w.score(score),
        None => ctx.w.null(),
    }
    Ok(())
}

/// ZREM.
pub(super) fn zrem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let key = &args[1][..];
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let mut removed = 0;
    if let Some((mut zset, expire)) = zset_of(txn.get(db, key)?)? {
        let outcome = txn.with_records(db, key, |records| {
            for member in &args[2..] {
                removed += i64::from(zset.remove(records, member)?.is_some());
            }
            Ok::<(), CommandError>(())
        });
        // Written back even after an error: it holds what succeeded (`crate::objects`).
        if removed > 0 {
            save_zset(&mut txn, db, key, &zset, expire)?;
        }
        outcome?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(removed);
    Ok(())
}

/// The scores of the members `args[2..]` of the sorted set at `args[1]`.
fn scores_of(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Vec<Option<f64>>> {
    Ok(read_collection(ctx, zset_of, &args[1], |zset, records| {
        args[2..]
            .iter()
            .map(|member| zset.score(records, member))
            .collect::<CommandResult<Vec<Option<f64>>>>()
    })?
    .unwrap_or_else(|| vec![None; args.len() - 2]))
}

/// Writes a score, or null for none.
fn write_score(ctx: &mut Ctx<'_>, score: Option<f64>) {
    match score {
        Some(score) => ctx.w.score(score),
        None => ctx.w.null(),
    }
}

/// ZSCORE.
pub(super) fn zscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let scores = scores_of(ctx, args)?;
    write_score(ctx, scores[0]);
    Ok(())
}

/// ZMSCORE.
pub(super) fn zmscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let scores = scores_of(ctx, args)?;
    ctx.w.array(scores.len());
    for score in scores {
        write_score(ctx, score);
    }
    Ok(())
}

/// ZCARD.
pub(super) fn zcard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let len = read_collection(ctx, zset_of, &args[1], |zset, _| Ok(zset.len()))?.unwrap_or(0);
    ctx.w.int(len as i64);
    Ok(())
}

/// ZCOUNT.
pub(super) fn zcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (min, max) = (parse_score_bound(&args[2])?, parse_score_bound(&args[3])?);
    let count = read_collection(ctx, zset_of, &args[1], |zset, records| {
        let (first, end) = score_ranks(&zset.order, records, min, max)?;
        Ok(end.saturating_sub(first))
    })?
    .unwrap_or(0);
    ctx.w.int(count as i64);
    Ok(())
}

/// ZRANK.
pub(super) fn zrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    rank(ctx, false, args)
}

/// ZREVRANK.
pub(super) fn zrevrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    rank(ctx, true, args)
}

/// ZRANK and, when `reverse`, ZREVRANK.
fn rank(ctx: &mut Ctx<'_>, reverse: bool, args: &[Bytes]) -> CommandResult {
    let rank =
        read_collection(ctx, zset_of, &args[1], |zset, records| {
            Ok(zset.rank(records, &args[2])?.map(|rank| {
                if reverse {
                    zset.len() - 1 - rank
                } else {
                    rank
                }
            }))
        })?
        .flatten();
    match rank {
        Some(rank) => ctx.w.int(rank as i64),
        None => ctx.w.null(),
    }
    Ok(())
}

/// ZRANGE.
pub(super) fn zrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    range_command(ctx, "zrange", args)
}

/// ZRANGEBYSCORE.
pub(super) fn zrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    range_command(ctx, "zrangebyscore", args)
}

/// ZREVRANGEBYSCORE.
pub(super) fn zrevrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    range_command(ctx, "zrevrangebyscore", args)
}

/// ZREVRANGE.
pub(super) fn zrevrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    range_command(ctx, "zrevrange", args)
}

/// ZRANGEBYLEX.
pub(super) fn zrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    range_command(ctx, "zrangebylex", args)
}

/// ZREVRANGEBYLEX.
pub(super) fn zrevrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    range_command(ctx, "zrevrangebylex", args)
}

/// The range reads: `form` is the command whose grammar [`parse_range`] applies.
fn range_command(ctx: &mut Ctx<'_>, form: &str, args: &[Bytes]) -> CommandResult {
    let query = parse_range(form, args)?;
    let entries = read_collection(ctx, zset_of, &args[1], |zset, records| {
        range_entries(zset, records, &query)
    })?
    .unwrap_or_default();
    write_entries(ctx, &entries, query.with_scores);
    Ok(())
}

/// ZLEXCOUNT.
pub(super) fn zlexcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (min, max) = (parse_lex_bound(&args[2])?, parse_lex_bound(&args[3])?);
    let count = read_collection(ctx, zset_of, &args[1], |zset, records| {
        let (first, end) = lex_ranks(&zset.order, records, &min, &max)?;
        Ok(end.saturating_sub(first))
    })?
    .unwrap_or(0);
    ctx.w.int(count as i64);
    Ok(())
}

/// ZREMRANGEBYRANK.
pub(super) fn zremrangebyrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let by = RangeBy::Rank(parse_int(&args[2])?, parse_int(&args[3])?);
    zremrange(ctx, by, args)
}

/// ZREMRANGEBYSCORE.
pub(super) fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let by = RangeBy::Score(parse_score_bound(&args[2])?, parse_score_bound(&args[3])?);
    zremrange(ctx, by, args)
}

/// ZREMRANGEBYLEX.
pub(super) fn zremrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let by = RangeBy::Lex(parse_lex_bound(&args[2])?, parse_lex_bound(&args[3])?);
    zremrange(ctx, by, args)
}

/// ZUNIONSTORE.
pub(super) fn zunionstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    setops::run(ctx, "zunionstore", args)
}

/// ZINTERSTORE.
pub(super) fn zinterstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    setops::run(ctx, "zinterstore", args)
}

/// ZDIFFSTORE.
pub(super) fn zdiffstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    setops::run(ctx, "zdiffstore", args)
}

/// ZUNION.
pub(super) fn zunion(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    setops::run(ctx, "zunion", args)
}

/// ZINTER.
pub(super) fn zinter(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    setops::run(ctx, "zinter", args)
}

/// ZDIFF.
pub(super) fn zdiff(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    setops::run(ctx, "zdiff", args)
}

/// ZINTERCARD.
pub(super) fn zintercard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    setops::run(ctx, "zintercard", args)
}

#[derive(Default)]
struct AddOptions {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

pub(super) fn zadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let mut options = AddOptions::default();
    let mut index = 2;
    while index < args.len() {
        // Compared in place, not lowered into a String: the first score ends this loop on
        // every ZADD.
        let word = &args[index][..];
        let flag = match () {
            _ if word.eq_ignore_ascii_case(b"nx") => &mut options.nx,
            _ if word.eq_ignore_ascii_case(b"xx") => &mut options.xx,
            _ if word.eq_ignore_ascii_case(b"gt") => &mut options.gt,
            _ if word.eq_ignore_ascii_case(b"lt") => &mut options.lt,
            _ if word.eq_ignore_ascii_case(b"ch") => &mut options.ch,
            _ if word.eq_ignore_ascii_case(b"incr") => &mut options.incr,
            _ => break,
        };
        *flag = true;
        index += 1;
    }
    let pairs = &args[index..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(CommandError::Syntax);
    }
    if options.nx && options.xx {
        return Err(CommandError::err(
            "XX and NX options at the same time are not compatible",
        ));
    }
    if (options.nx && (options.gt || options.lt)) || (options.gt && options.lt) {
        return Err(CommandError::err(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if options.incr && pairs.len() > 2 {
        return Err(CommandError::err(
            "INCR option supports a single increment-element pair",
        ));
    }
    let parsed: Vec<(f64, &[u8])> = pairs
        .chunks(2)
        .map(|pair| Ok((parse_float(&pair[0])?, &pair[1][..])))
        .collect::<CommandResult<_>>()?;
    let (changed, result) = add(ctx, &args[1], &options, &parsed)?;
    if options.incr {
        match result {
            Some(score) => ctx.w.score(score),
            None => ctx.w.null(),
        }
    } else {
        ctx.w.int(changed);
    }
    Ok(())
}

/// Applies ZADD's pairs; (members added, or added and changed with CH; the new score of the last
/// pair when INCR, `None` when the options refused it).
fn add(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    options: &AddOptions,
    pairs: &[(f64, &[u8])],
) -> CommandResult<(i64, Option<f64>)> {
    let db = ctx.db();
    let keyspace = &ctx.server.keyspace;
    let mut txn = keyspace.begin(ctx.session, db, &[key]);
    let found = zset_of(txn.get(db, key)?)?;
    if found.is_none() && options.xx {
        txn.commit()?;
        return Ok((0, None));
    }
    let (mut zset, expire) = found.unwrap_or_else(|| (ZSet::new(keyspace.new_object_id()), 0));
    let mut counted = 0;
    let mut last = None;
    let mut changed = false;
    let outcome = txn.with_records(db, key, |records| {
        for &(score, member) in pairs {
            let old = zset.score(records, member)?;
            if (old.is_some() && options.nx) || (old.is_none() && options.xx) {
                last = None;
                continue;
            }
            let mut new = score;
            if options.incr {
                new += old.unwrap_or(0.0);
                if new.is_nan() {
                    return Err(CommandError::err("resulting score is not a number (NaN)"));
                }
            }
            if let Some(old) = old {
                if (options.gt && new <= old) || (options.lt && new >= old) {
                    last = None;
                    continue;
                }
            }
            last = Some(new);
            if old == Some(new) {
                // Nothing changes: no write (and no keyspace event, as Redis).
                continue;
            }
            zset.set(records, member, old, new)?;
            changed = true;
            match old {
                None => counted += 1,
                Some(old) if options.ch && old != new => counted += 1,
                Some(_) => {}
            }
        }
        Ok(())
    });
    // Written back even after an error: it holds what succeeded (`crate::objects`).
    if changed {
        save_zset(&mut txn, db, key, &zset, expire)?;
    }
    outcome?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    Ok((counted, last))
}

/// One end of a score range.
#[derive(Clone, Copy, Debug)]
struct ScoreBound {
    score: f64,
    exclusive: bool,
}

fn parse_score_bound(argument: &[u8]) -> CommandResult<ScoreBound> {
    let (exclusive, text) = match argument.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, argument),
    };
    // Redis parses a bound with strtod and checks only that it consumed everything, so an empty
    // text (`(` or ``) is 0.
    let score = if text.is_empty() {
        0.0
    } else {
        parse_float(text).map_err(|_| CommandError::err("min or max is not a float"))?
    };
    Ok(ScoreBound { score, exclusive })
}

/// The key just above every entry with `score`'s key: the next 8-byte value (not necessarily a
/// score's; it only serves as a bound). `None` past the largest.
fn after_score(score: f64) -> Option<[u8; 8]> {
    u64::from_be_bytes(score_key(score))
        .checked_add(1)
        .map(u64::to_be_bytes)
}

/// The ranks `first..end` of the entries within [min, max].
fn score_ranks(
    order: &Tree,
    records: &mut impl Records,
    min: ScoreBound,
    max: ScoreBound,
) -> CommandResult<(u64, u64)> {
    let len = order.len();
    let bound = |records: &mut _, score: f64, after: bool| -> CommandResult<u64> {
        if !after {
            return order
                .lower_bound(records, &score_key(score))
                .map_err(CommandError::from);
        }
        match after_score(score) {
            Some(probe) => order
                .lower_bound(records, &probe)
                .map_err(CommandError::from),
            None => Ok(len),
        }
    };
    let first = bound(records, min.score, min.exclusive)?;
    let end = bound(records, max.score, !max.exclusive)?;
    Ok((first, end.max(first)))
}

/// One end of a lex range.
#[derive(Clone, Debug)]
enum LexBound {
    Min,
    Max,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

fn parse_lex_bound(argument: &[u8]) -> CommandResult<LexBound> {
    match argument.split_first() {
        Some((b'-', [])) => Ok(LexBound::Min),
        Some((b'+', [])) => Ok(LexBound::Max),
        Some((b'[', rest)) => Ok(LexBound::Inclusive(rest.to_vec())),
        Some((b'(', rest)) => Ok(LexBound::Exclusive(rest.to_vec())),
        _ => Err(CommandError::err("min or max not valid string range item")),
    }
}

/// The ranks `first..end` of the members within a lex range. Lex ranges assume every member has
/// the same score (as Redis documents); the first entry's score is used.
fn lex_ranks(
    order: &Tree,
    records: &mut impl Records,
    min: &LexBound,
    max: &LexBound,
) -> CommandResult<(u64, u64)> {
    let mut first_entry = Vec::new();
    if !order.get(records, 0, &mut first_entry)? {
        return Ok((0, 0));
    }
    let prefix = &first_entry[..8.min(first_entry.len())];
    let mut rank_of = |bound: &LexBound, lower_side: bool| -> CommandResult<u64> {
        let probe = |member: &[u8]| [prefix, member].concat();
        match bound {
            LexBound::Min => Ok(0),
            LexBound::Max => Ok(order.len()),
            LexBound::Inclusive(member) if lower_side => order.lower_bound(records, &probe(member)),
            LexBound::Inclusive(member) => order.upper_bound(records, &probe(member)),
            LexBound::Exclusive(member) if lower_side => order.upper_bound(records, &probe(member)),
            LexBound::Exclusive(member) => order.lower_bound(records, &probe(member)),
        }
        .map_err(CommandError::from)
    };
    let first = rank_of(min, true)?;
    let end = rank_of(max, false)?;
    Ok((first, end.max(first)))
}

enum RangeBy {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound, LexBound),
}

struct RangeQuery {
    by: RangeBy,
    rev: bool,
    limit: Option<(i64, i64)>,
    with_scores: bool,
}

/// Parses ZRANGE and its older forms into one query.
fn parse_range(name: &str, args: &[Bytes]) -> CommandResult<RangeQuery> {
    let (mut by_score, mut by_lex, mut rev) = (false, false, false);
    match name {
        "zrangebyscore" => by_score = true,
        "zrevrangebyscore" => (by_score, rev) = (true, true),
        "zrangebylex" => by_lex = true,
        "zrevrangebylex" => (by_lex, rev) = (true, true),
        "zrevrange" => rev = true,
        _ => {}
    }
    let (mut limit, mut with_scores) = (None, false);
    let mut index = 4;
    while index < args.len() {
        match lower(&args[index]).as_str() {
            "byscore" if name == "zrange" => by_score = true,
            "bylex" if name == "zrange" => by_lex = true,
            "rev" if name == "zrange" => rev = true,
            "withscores" if !matches!(name, "zrangebylex" | "zrevrangebylex") => with_scores = true,
            "limit" if index + 2 < args.len() && name != "zrevrange" => {
                limit = Some((parse_int(&args[index + 1])?, parse_int(&args[index + 2])?));
                index += 2;
            }
            _ => return Err(CommandError::Syntax),
        }
        index += 1;
    }
    if by_score && by_lex {
        return Err(CommandError::Syntax);
    }
    // Redis refuses only a LIMIT count other than -1 on a rank range (and then ignores LIMIT).
    if limit.is_some_and(|(_, count)| count != -1) && !by_score && !by_lex {
        return Err(CommandError::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && by_lex {
        return Err(CommandError::err(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    // With REV the score and lex forms take (max, min).
    let (low, high) = if rev && (by_score || by_lex) {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let by = if by_score {
        RangeBy::Score(parse_score_bound(low)?, parse_score_bound(high)?)
    } else if by_lex {
        RangeBy::Lex(parse_lex_bound(low)?, parse_lex_bound(high)?)
    } else {
        RangeBy::Rank(parse_int(&args[2])?, parse_int(&args[3])?)
    };
    Ok(RangeQuery {
        by,
        rev,
        limit,
        with_scores,
    })
}

/// The (member, score) entries a range query selects, in reply order.
fn range_entries(
    zset: &ZSet,
    records: &mut impl Records,
    query: &RangeQuery,
) -> CommandResult<Vec<(Vec<u8>, f64)>> {
    let len = zset.len();
    // `first..end` in ascending rank order.
    let (first, end) = match &query.by {
        RangeBy::Rank(start, stop) => {
            let (start, stop) = (*start, *stop);
            // Ranks count from the end of the reply order, so REV mirrors them.
            let normalize = |i: i64| if i < 0 { len as i64 + i } else { i };
            let (start, stop) = (normalize(start).max(0), normalize(stop).min(len as i64 - 1));
            if start > stop || start >= len as i64 {
                return Ok(Vec::new());
            }
            if query.rev {
                (len - 1 - stop as u64, len - start as u64)
            } else {
                (start as u64, stop as u64 + 1)
            }
        }
        RangeBy::Score(min, max) => score_ranks(&zset.order, records, *min, *max)?,
        RangeBy::Lex(min, max) => lex_ranks(&zset.order, records, min, max)?,
    };
    let limit = match query.by {
        RangeBy::Rank(..) => None,
        _ => query.limit,
    };
    let (offset, count) = match limit {
        // A negative offset selects nothing; a negative count means all.
        Some((offset, _)) if offset < 0 => return Ok(Vec::new()),
        Some((offset, count)) => (
            offset as u64,
            if count < 0 { u64::MAX } else { count as u64 },
        ),
        None => (0, u64::MAX),
    };
    let available = end.saturating_sub(first).saturating_sub(offset);
    let take = available.min(count);
    let mut entries = Vec::new();
    if take == 0 {
        return Ok(entries);
    }
    let mut failure = None;
    let mut collect = |_: u64, entry: &[u8]| match split_entry(entry) {
        Ok((score, member)) => {
            entries.push((member.to_vec(), score));
            if entries.len() as u64 >= take {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
        Err(damaged) => {
            failure = Some(damaged);
            ControlFlow::Break(())
        }
    };
    if query.rev {
        zset.order
            .range_rev(records, end - 1 - offset, &mut collect)?;
    } else {
        zset.order.range(records, first + offset, &mut collect)?;
    }
    match failure {
        Some(damaged) => Err(damaged),
        None => Ok(entries),
    }
}

fn write_entries(ctx: &mut Ctx<'_>, entries: &[(Vec<u8>, f64)], with_scores: bool) {
    let resp3 = ctx.w.encoder.protocol() == prefixkv_resp::Protocol::Resp3;
    match (with_scores, resp3) {
        (true, true) => {
            ctx.w.array(entries.len());
            for (member, score) in entries {
                ctx.w.array(2);
                ctx.w.bulk(member);
                ctx.w.score(*score);
            }
        }
        (true, false) => {
            ctx.w.array(entries.len() * 2);
            for (member, score) in entries {
                ctx.w.bulk(member);
                ctx.w.score(*score);
            }
        }
        (false, _) => {
            ctx.w.array(entries.len());
            for (member, _) in entries {
                ctx.w.bulk(member);
            }
        }
    }
}

/// ZREMRANGEBYRANK key start stop, ZREMRANGEBYSCORE key min max, ZREMRANGEBYLEX key min max.
/// The ZREMRANGEBY commands: removes the members `by` selects.
fn zremrange(ctx: &mut Ctx<'_>, by: RangeBy, args: &[Bytes]) -> CommandResult {
    let query = RangeQuery {
        by,
        rev: false,
        limit: None,
        with_scores: false,
    };
    let db = ctx.db();
    let key = &args[1][..];
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let mut removed = 0;
    if let Some((mut zset, expire)) = zset_of(txn.get(db, key)?)? {
        let outcome = txn.with_records(db, key, |records| {
            let doomed = range_entries(&zset, records, &query)?;
            for (member, _) in &doomed {
                zset.remove(records, member)?;
                removed += 1;
            }
            Ok::<(), CommandError>(())
        });
        // Written back even after an error: it holds what succeeded (`crate::objects`).
        if removed > 0 {
            save_zset(&mut txn, db, key, &zset, expire)?;
        }
        outcome?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(removed as i64);
    Ok(())
}

/// ZSCAN key cursor [MATCH pattern] [COUNT count]: member, score pairs.
pub(super) fn zscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let cursor = super::parse_cursor(&args[2])?;
    let options = super::parse_scan_options(&args[3..], false)?;
    let (next, entries) = read_collection(ctx, zset_of, &args[1], |zset, records| {
        super::sets::scan_table(
            &zset.members,
            records,
            cursor,
            options.count,
            |member, _| {
                options
                    .pattern
                    .as_ref()
                    .is_none_or(|p| crate::glob::matches(p, member, false))
            },
        )
    })?
    .unwrap_or((0, Vec::new()));
    ctx.w.array(2);
    ctx.w.bulk(next.to_string().as_bytes());
    ctx.w.array(entries.len() * 2);
    for (member, score) in &entries {
        ctx.w.bulk(member);
        let score = score
            .as_slice()
            .try_into()
            .map(f64::from_le_bytes)
            .map_err(|_| CommandError::damaged("a score is not 8 bytes"))?;
        ctx.w.bulk(format_score(score).as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_format_as_redis_7_0() {
        assert_eq!(format_score(1.1), "1.1000000000000001");
        assert_eq!(format_score(3.0), "3");
        assert_eq!(format_score(1e21), "1e+21");
        assert_eq!(format_score(0.1), "0.10000000000000001");
        assert_eq!(format_score(0.30000000000000004), "0.30000000000000004");
        assert_eq!(format_score(0.0), "0");
        assert_eq!(format_score(-2.5), "-2.5");
        assert_eq!(format_score(1.5e-7), "1.4999999999999999e-07");
        assert_eq!(format_score(f64::INFINITY), "inf");
        assert_eq!(format_score(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_score(123456789012345680.0), "1.2345678901234568e+17");
    }
}
