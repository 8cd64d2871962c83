//! ZRANDMEMBER and ZRANGESTORE.

use std::collections::HashSet;

use bytes::Bytes;

use super::{parse_range, range_entries, setops, write_entries, CommandError, CommandResult, Ctx};
use crate::commands::{lower, parse_int, read_collection};
use crate::objects::{split_entry, zset_of, ZSet};

/// The next value of a xorshift64 sequence (the picks need spread, not unpredictability).
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// ZRANDMEMBER key [count [WITHSCORES]]: a positive count picks distinct members, a negative one
/// may repeat them. A count is bounded: its reply must fit client-output-buffer-limit (at least
/// 16 bytes a member), so a client cannot make the server build an unbounded reply.
pub(in crate::commands) fn zrandmember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    if args.len() > 4 {
        return Err(CommandError::Syntax);
    }
    let count = args.get(2).map(|c| parse_int(c)).transpose()?;
    if count == Some(i64::MIN) {
        return Err(CommandError::err(
            "value is out of range, value must between -9223372036854775807 and \
             9223372036854775807",
        ));
    }
    let with_scores = match args.get(3) {
        None => false,
        Some(word) if lower(word) == "withscores" => true,
        Some(_) => return Err(CommandError::Syntax),
    };
    let limit = ctx.server.settings.read().client_output_buffer_limit_bytes;
    if count.is_some_and(|count| count.unsigned_abs() > (limit / 16).max(1)) {
        return Err(CommandError::ReplyTooLarge { limit_bytes: limit });
    }
    let mut state = super::super::hashes::random_seed(ctx.client.id) | 1;
    let picked = read_collection(ctx, zset_of, &args[1], |zset, records| {
        let len = zset.len();
        let ranks: Vec<u64> = match count.unwrap_or(1) {
            0 => Vec::new(),
            n if n < 0 => (0..n.unsigned_abs())
                .map(|_| next_random(&mut state) % len)
                .collect(),
            n if n as u64 >= len => (0..len).collect(),
            n if n as u64 > len / 2 => {
                // Most of the set: shuffle all ranks and keep the first `n`.
                let mut all: Vec<u64> = (0..len).collect();
                for i in 0..n as usize {
                    let j = i + (next_random(&mut state) % (len - i as u64)) as usize;
                    all.swap(i, j);
                }
                all.truncate(n as usize);
                all
            }
            n => {
                let mut chosen = HashSet::with_capacity(n as usize);
                let mut ranks = Vec::with_capacity(n as usize);
                while ranks.len() < n as usize {
                    let rank = next_random(&mut state) % len;
                    if chosen.insert(rank) {
                        ranks.push(rank);
                    }
                }
                ranks
            }
        };
        entries_at(zset, records, &ranks)
    })?;
    let Some(count) = count else {
        let first = picked.as_ref().and_then(|p| p.first());
        ctx.w.bulk_or_null(first.map(|(member, _)| &member[..]));
        return Ok(());
    };
    debug_assert!(
        count < 0
            || picked
                .as_ref()
                .is_none_or(|p| p.len() as u64 <= count as u64)
    );
    write_entries(ctx, &picked.unwrap_or_default(), with_scores);
    Ok(())
}

/// The (member, score) entries at `ranks` of `zset`.
fn entries_at(
    zset: &ZSet,
    records: &mut prefixkv_collections::Owned<'_, '_>,
    ranks: &[u64],
) -> CommandResult<Vec<(Vec<u8>, f64)>> {
    let mut entry = Vec::new();
    ranks
        .iter()
        .map(|&rank| {
            zset.order.get(records, rank, &mut entry)?;
            let (score, member) = split_entry(&entry)?;
            Ok((member.to_vec(), score))
        })
        .collect()
}

/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]: ZRANGE's selection
/// stored as a sorted set at `dst` (deleted when the selection is empty); its size.
pub(in crate::commands) fn zrangestore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    if args[5..].iter().any(|a| lower(a) == "withscores") {
        return Err(CommandError::Syntax);
    }
    // ZRANGE's parser over `zrange src min max options...`.
    let mut as_zrange = vec![Bytes::from_static(b"zrange")];
    as_zrange.extend_from_slice(&args[2..]);
    let query = parse_range("zrange", &as_zrange)?;
    let (destination, source) = (&args[1][..], &args[2][..]);
    let db = ctx.db();
    let mut txn = ctx
        .server
        .keyspace
        .begin(ctx.session, db, &[source, destination]);
    let entries = match zset_of(txn.get(db, source)?)? {
        Some((zset, _)) => {
            txn.with_records(db, source, |records| range_entries(&zset, records, &query))?
        }
        None => Vec::new(),
    };
    setops::store_entries(&mut txn, db, destination, &entries)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(entries.len() as i64);
    Ok(())
}
