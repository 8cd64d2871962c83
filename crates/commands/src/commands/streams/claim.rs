//! XCLAIM and XAUTOCLAIM: moving pending entries to another consumer.
//!
//! Both drop the pending entries whose stream entry was deleted meanwhile (Redis 7.0), and
//! create the claiming consumer only when they claim something. XAUTOCLAIM examines at most ten
//! times COUNT pending entries per call (Redis's bound), so a call costs O(COUNT log n) records
//! however long the list is.

use bytes::Bytes;
use prefixkv_collections::Records;

use super::ids::{parse_bound, parse_id, Missing, StreamId};
use super::object::{Entry, Nack, Stream};
use super::pel::Loaded;
use super::{edit, no_key_or_group, CommandError, CommandResult, Ctx};
use crate::commands::{lower, parse_int};

/// XAUTOCLAIM examines at most this many pending entries per entry of COUNT (Redis's).
const ATTEMPTS_FACTOR: u64 = 10;
/// The largest COUNT XAUTOCLAIM takes (Redis: `LONG_MAX / 16`).
const MAX_AUTOCLAIM_COUNT: i64 = i64::MAX / 16;

/// What a claim answers for one entry.
enum Claimed {
    Id(StreamId),
    Entry(Entry),
}

fn reply_claimed(ctx: &mut Ctx<'_>, claimed: &[Claimed]) {
    ctx.w.array(claimed.len());
    for item in claimed {
        match item {
            Claimed::Id(id) => ctx.w.stream_id(*id),
            Claimed::Entry(entry) => ctx.w.stream_entry(entry),
        }
    }
}

/// The entry of a claimed id, or the id alone with JUSTID.
fn claimed_item(
    stream: &Stream,
    records: &mut impl Records,
    id: StreamId,
    justid: bool,
) -> CommandResult<Claimed> {
    if justid {
        return Ok(Claimed::Id(id));
    }
    stream
        .get(records, id)?
        .map(Claimed::Entry)
        .ok_or_else(|| CommandError::damaged("a claimed entry vanished"))
}

/// Parsed XCLAIM options.
struct ClaimOptions {
    ids: Vec<StreamId>,
    delivered_ms: Option<i64>,
    retry_count: Option<i64>,
    force: bool,
    justid: bool,
    last_id: StreamId,
}

fn parse_claim(args: &[Bytes], now: i64) -> CommandResult<ClaimOptions> {
    let mut options = ClaimOptions {
        ids: Vec::new(),
        delivered_ms: None,
        retry_count: None,
        force: false,
        justid: false,
        last_id: StreamId::MIN,
    };
    let mut j = 5;
    while j < args.len() {
        match parse_id(&args[j], Missing::SeqZero, true) {
            Ok(id) => options.ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    while j < args.len() {
        let more = j + 1 < args.len();
        let option = lower(&args[j]);
        let number = |what: &str| {
            parse_int(&args[j + 1]).map_err(|_| {
                CommandError::err(format!("Invalid {what} option argument for XCLAIM"))
            })
        };
        match option.as_str() {
            "force" => options.force = true,
            "justid" => options.justid = true,
            "idle" if more => {
                options.delivered_ms = Some(now.saturating_sub(number("IDLE")?));
                j += 1;
            }
            "time" if more => {
                options.delivered_ms = Some(number("TIME")?);
                j += 1;
            }
            "retrycount" if more => {
                options.retry_count = Some(number("RETRYCOUNT")?);
                j += 1;
            }
            "lastid" if more => {
                options.last_id = parse_id(&args[j + 1], Missing::SeqZero, true)?;
                j += 1;
            }
            _ => {
                return Err(CommandError::err(format!(
                    "Unrecognized XCLAIM option '{}'",
                    String::from_utf8_lossy(&args[j])
                )))
            }
        }
        j += 1;
    }
    Ok(options)
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-ms]
/// [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]
pub(in crate::commands) fn xclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (key, group, consumer) = (&args[1], &args[2], &args[3]);
    let keyspace = &ctx.server.keyspace;
    let claimed = edit(ctx, key, false, |edit, records| {
        let now = edit.now_ms;
        let Some(mut loaded) = Loaded::load(&edit.stream, records, group, keyspace, now)? else {
            return Err(no_key_or_group(key, group));
        };
        let min_idle = parse_int(&args[4])
            .map_err(|_| CommandError::err("Invalid min-idle-time argument for XCLAIM"))?
            .max(0) as u64;
        let options = parse_claim(args, now as i64)?;
        if options.last_id > loaded.group.last_id {
            loaded.group.last_id = options.last_id;
            edit.dirty = true;
        }
        let delivered_ms = match options.delivered_ms {
            Some(at) if at >= 0 && (at as u64) <= now => at as u64,
            _ => now,
        };
        let mut claimed = Vec::new();
        let result = (|| -> CommandResult {
            let mut touched = false;
            for &id in &options.ids {
                let existing = loaded.group.nack(records, id)?;
                if !edit.stream.contains(records, id)? {
                    if existing.is_some() {
                        loaded.ack(records, id)?;
                        edit.dirty = true;
                    }
                    continue;
                }
                let (rank, nack) = match existing {
                    Some((rank, nack)) => {
                        let idle = now.saturating_sub(nack.delivered_ms);
                        if min_idle > 0 && idle < min_idle {
                            continue;
                        }
                        (Some(rank), nack)
                    }
                    None if options.force => (
                        None,
                        Nack {
                            id,
                            delivered_ms: now,
                            deliveries: 1,
                            consumer: consumer.to_vec(),
                        },
                    ),
                    None => continue,
                };
                if !touched {
                    loaded.touch_consumer(records, consumer)?;
                    touched = true;
                }
                edit.dirty = true;
                let updated = Nack {
                    id,
                    delivered_ms,
                    deliveries: match options.retry_count {
                        // A negative RETRYCOUNT counts as none given (Redis).
                        Some(count) if count >= 0 => count as u64,
                        _ if !options.justid => nack.deliveries + 1,
                        _ => nack.deliveries,
                    },
                    consumer: consumer.to_vec(),
                };
                match rank {
                    Some(rank) => loaded.update(records, rank, &nack, &updated)?,
                    None => loaded.insert(records, &updated)?,
                }
                claimed.push(claimed_item(&edit.stream, records, id, options.justid)?);
            }
            Ok(())
        })();
        if edit.dirty || result.is_err() {
            let saved = loaded.save(records, &mut edit.stream);
            result?;
            saved?;
        } else {
            result?;
        }
        Ok(claimed)
    })?;
    match claimed {
        Some(claimed) => reply_claimed(ctx, &claimed),
        None => return Err(no_key_or_group(key, group)),
    }
    Ok(())
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]
pub(in crate::commands) fn xautoclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (key, group, consumer) = (&args[1], &args[2], &args[3]);
    let min_idle = parse_int(&args[4])
        .map_err(|_| CommandError::err("Invalid min-idle-time argument for XAUTOCLAIM"))?
        .max(0) as u64;
    let start = parse_bound(&args[5], true)?;
    let mut count = 100u64;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        match lower(&args[j]).as_str() {
            "count" if j + 1 < args.len() => {
                count = parse_int(&args[j + 1])
                    .ok()
                    .filter(|n| (1..=MAX_AUTOCLAIM_COUNT).contains(n))
                    .ok_or_else(|| CommandError::err("COUNT must be > 0"))?
                    as u64;
                j += 1;
            }
            "justid" => justid = true,
            _ => return Err(CommandError::Syntax),
        }
        j += 1;
    }
    let keyspace = &ctx.server.keyspace;
    let done = edit(ctx, key, false, |edit, records| {
        let now = edit.now_ms;
        let Some(mut loaded) = Loaded::load(&edit.stream, records, group, keyspace, now)? else {
            return Err(no_key_or_group(key, group));
        };
        let mut claimed = Vec::new();
        let mut deleted = Vec::new();
        let mut cursor = StreamId::MIN;
        let result = (|| -> CommandResult {
            let mut attempts = count.saturating_mul(ATTEMPTS_FACTOR);
            let mut left = count;
            let mut rank = loaded.group.pel.lower_bound(records, &start.key())?;
            let mut touched = false;
            let mut buf = Vec::new();
            while attempts > 0 && left > 0 {
                attempts -= 1;
                if !loaded.group.pel.get(records, rank, &mut buf)? {
                    break;
                }
                let nack = Nack::decode(&buf)?;
                if !edit.stream.contains(records, nack.id)? {
                    loaded.ack(records, nack.id)?;
                    edit.dirty = true;
                    deleted.push(nack.id);
                    left -= 1;
                    continue;
                }
                if min_idle > 0 && now.saturating_sub(nack.delivered_ms) < min_idle {
                    rank += 1;
                    continue;
                }
                if !touched {
                    loaded.touch_consumer(records, consumer)?;
                    touched = true;
                }
                edit.dirty = true;
                let updated = Nack {
                    id: nack.id,
                    delivered_ms: now,
                    deliveries: nack.deliveries + u64::from(!justid),
                    consumer: consumer.to_vec(),
                };
                loaded.update(records, rank, &nack, &updated)?;
                claimed.push(claimed_item(&edit.stream, records, nack.id, justid)?);
                rank += 1;
                left -= 1;
            }
            if loaded.group.pel.get(records, rank, &mut buf)? {
                cursor = StreamId::from_key(&buf)
                    .ok_or_else(|| CommandError::damaged("pending entry cut short"))?;
            }
            Ok(())
        })();
        if edit.dirty || result.is_err() {
            let saved = loaded.save(records, &mut edit.stream);
            result?;
            saved?;
        } else {
            result?;
        }
        Ok((cursor, claimed, deleted))
    })?;
    let Some((cursor, claimed, deleted)) = done else {
        return Err(no_key_or_group(key, group));
    };
    ctx.w.array(3);
    ctx.w.stream_id(cursor);
    reply_claimed(ctx, &claimed);
    ctx.w.array(deleted.len());
    for id in deleted {
        ctx.w.stream_id(id);
    }
    Ok(())
}
