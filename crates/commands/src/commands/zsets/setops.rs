//! Sorted-set algebra: ZUNION, ZINTER, ZDIFF (with WITHSCORES), their STORE forms, and
//! ZINTERCARD. Sources may be sorted sets or sets (a set member scores 1), as in Redis.
//!
//! Every source is read, and the destination written, in one keyspace transaction over all the
//! keys, so the result is one consistent view and the store is atomic. A result is as large as
//! its sources (no client-given number sizes anything but the argument list itself).

use std::collections::HashMap;
use std::ops::ControlFlow;

use bytes::Bytes;

use super::{write_entries, CommandError, CommandResult, Ctx, Entries};
use crate::commands::{lower, parse_float, parse_int};
use crate::keyspace::Txn;
use crate::objects::{save_zset, set_of, split_entry, zset_of, ZSet};
use crate::value::{Kind, Stored};

/// Which operation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
}

/// How scores of one member in several sources combine.
#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    fn combine(self, a: f64, b: f64) -> f64 {
        let value = match self {
            Aggregate::Min => a.min(b),
            Aggregate::Max => a.max(b),
            Aggregate::Sum => a + b,
        };
        // inf + -inf: Redis stores 0.
        if value.is_nan() {
            0.0
        } else {
            value
        }
    }
}

/// The parsed command: which keys, what to do, where to put it.
struct Request<'a> {
    op: Op,
    destination: Option<&'a [u8]>,
    sources: &'a [Bytes],
    cardinality_only: bool,
}

/// Options after the source keys.
struct Options {
    weights: Vec<f64>,
    aggregate: Aggregate,
    with_scores: bool,
    limit: u64,
}

/// ZUNION/ZINTER/ZDIFF numkeys key ... [options], ZUNIONSTORE/ZINTERSTORE/ZDIFFSTORE destination
/// numkeys key ... [options], ZINTERCARD numkeys key ... [LIMIT limit].
/// ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD: `name` picks the operation, the
/// argument layout and the error text.
pub(super) fn run(ctx: &mut Ctx<'_>, name: &str, args: &[Bytes]) -> CommandResult {
    let op = match name {
        "zunion" | "zunionstore" => Op::Union,
        "zinter" | "zinterstore" | "zintercard" => Op::Inter,
        _ => Op::Diff,
    };
    let store = name.ends_with("store");
    let numkeys_index = if store { 2 } else { 1 };
    let count = parse_int(&args[numkeys_index])?;
    if count < 1 {
        return Err(CommandError::err(format!(
            "at least 1 input key is needed for '{name}' command"
        )));
    }
    let first = numkeys_index + 1;
    let count = usize::try_from(count)
        .ok()
        .filter(|count| *count <= args.len() - first)
        .ok_or(CommandError::Syntax)?;
    let request = Request {
        op,
        destination: store.then(|| &args[1][..]),
        sources: &args[first..first + count],
        cardinality_only: name == "zintercard",
    };
    combine(ctx, &request, &args[first + count..])
}

fn combine(ctx: &mut Ctx<'_>, request: &Request<'_>, options: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut keys: Vec<&[u8]> = request.sources.iter().map(|k| &k[..]).collect();
    keys.extend(request.destination);
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &keys);
    // Redis checks the sources' types before it reads the options.
    let mut values = Vec::with_capacity(request.sources.len());
    for source in request.sources {
        let stored = txn.get(db, source)?;
        if stored
            .as_ref()
            .is_some_and(|s| !matches!(s.kind, Kind::ZSet | Kind::Set))
        {
            return Err(CommandError::WrongType);
        }
        values.push(stored);
    }
    let options = parse_options(options, request)?;
    let mut inputs = Vec::with_capacity(values.len());
    for (i, (source, stored)) in request.sources.iter().zip(values).enumerate() {
        inputs.push((
            weighted_members(&mut txn, db, source, stored)?,
            options.weights[i],
        ));
    }
    if request.op != Op::Diff {
        // Redis combines the sources from the smallest up: the order float sums take.
        inputs.sort_by_key(|(members, _)| members.len());
    }
    let result = combine_inputs(request.op, options.aggregate, inputs);
    if request.cardinality_only {
        txn.commit()?;
        let len = result.len() as u64;
        let reply = if options.limit > 0 {
            len.min(options.limit)
        } else {
            len
        };
        ctx.w.int(reply as i64);
        return Ok(());
    }
    let mut entries: Vec<(Vec<u8>, f64)> = result.into_iter().collect();
    // Redis builds the result as a sorted set: score order, then member bytes.
    entries.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let Some(destination) = request.destination else {
        txn.commit()?;
        write_entries(ctx, &entries, options.with_scores);
        return Ok(());
    };
    store_entries(&mut txn, db, destination, &entries)?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(entries.len() as i64);
    Ok(())
}

/// The members of `inputs` (each with its weight) combined by `op`: member -> score.
fn combine_inputs(
    op: Op,
    aggregate: Aggregate,
    inputs: Vec<(Entries, f64)>,
) -> HashMap<Vec<u8>, f64> {
    let mut result: HashMap<Vec<u8>, (f64, usize)> = HashMap::new();
    for (i, (members, weight)) in inputs.into_iter().enumerate() {
        if i > 0 && result.is_empty() && op != Op::Union {
            break;
        }
        if op == Op::Diff && i > 0 {
            for (member, _) in members {
                result.remove(&member);
            }
            continue;
        }
        for (member, score) in members {
            let weighted = if op == Op::Diff {
                score
            } else {
                score * weight
            };
            let weighted = if weighted.is_nan() { 0.0 } else { weighted };
            match result.get_mut(&member) {
                Some((total, seen)) => {
                    *total = aggregate.combine(*total, weighted);
                    *seen += 1;
                }
                // A member absent from the first source never enters an intersection.
                None if op == Op::Inter && i > 0 => {}
                None => {
                    result.insert(member, (weighted, 1));
                }
            }
        }
        if op == Op::Inter && i > 0 {
            result.retain(|_, (_, seen)| *seen == i + 1);
        }
    }
    result
        .into_iter()
        .map(|(member, (score, _))| (member, score))
        .collect()
}

/// Replaces `destination` with a sorted set of `entries` (deletes it when they are none).
pub(super) fn store_entries(
    txn: &mut Txn<'_>,
    db: u8,
    destination: &[u8],
    entries: &[(Vec<u8>, f64)],
) -> CommandResult {
    txn.delete(db, destination)?;
    if entries.is_empty() {
        return Ok(());
    }
    let mut zset = ZSet::new(txn.keyspace().new_object_id());
    let outcome = txn.with_records(db, destination, |records| {
        entries.iter().try_for_each(|(member, score)| {
            // A new sorted set: no member has a score yet.
            zset.set(records, member, None, *score)
        })
    });
    // Written back even after an error: it holds what succeeded (`crate::objects`).
    save_zset(txn, db, destination, &zset, 0)?;
    outcome
}

/// The options after the keys, as Redis 7.0 parses them: WEIGHTS and AGGREGATE not for ZDIFF
/// nor ZINTERCARD, WITHSCORES not for a STORE form nor ZINTERCARD, LIMIT only for ZINTERCARD.
fn parse_options(options: &[Bytes], request: &Request<'_>) -> CommandResult<Options> {
    let count = request.sources.len();
    let mut parsed = Options {
        weights: vec![1.0; count],
        aggregate: Aggregate::Sum,
        with_scores: false,
        limit: 0,
    };
    let algebra = request.op != Op::Diff && !request.cardinality_only;
    let mut index = 0;
    while index < options.len() {
        let remaining = options.len() - index;
        match lower(&options[index]).as_str() {
            "weights" if algebra && remaining > count => {
                for (i, weight) in parsed.weights.iter_mut().enumerate() {
                    *weight = parse_float(&options[index + 1 + i])
                        .map_err(|_| CommandError::err("weight value is not a float"))?;
                }
                index += 1 + count;
            }
            "aggregate" if algebra && remaining >= 2 => {
                parsed.aggregate = match lower(&options[index + 1]).as_str() {
                    "sum" => Aggregate::Sum,
                    "min" => Aggregate::Min,
                    "max" => Aggregate::Max,
                    _ => return Err(CommandError::Syntax),
                };
                index += 2;
            }
            "withscores" if request.destination.is_none() && !request.cardinality_only => {
                parsed.with_scores = true;
                index += 1;
            }
            "limit" if request.cardinality_only && remaining >= 2 => {
                parsed.limit = parse_int(&options[index + 1])
                    .ok()
                    .and_then(|limit| u64::try_from(limit).ok())
                    .ok_or_else(|| CommandError::err("LIMIT can't be negative"))?;
                index += 2;
            }
            _ => return Err(CommandError::Syntax),
        }
    }
    Ok(parsed)
}

/// The (member, score) pairs of a sorted set or a set (score 1) at `key`, whose value the caller
/// read under the lock (`stored`); empty when missing.
fn weighted_members(
    txn: &mut Txn<'_>,
    db: u8,
    key: &[u8],
    stored: Option<Stored>,
) -> CommandResult<Vec<(Vec<u8>, f64)>> {
    match stored.as_ref().map(|s| s.kind) {
        None => Ok(Vec::new()),
        Some(Kind::ZSet) => {
            let (zset, _) = zset_of(stored)?.expect("checked kind");
            txn.with_records(db, key, |records| {
                let mut members = Vec::new();
                let mut failure = None;
                if !zset.is_empty() {
                    zset.order
                        .range(records, 0, |_, entry| match split_entry(entry) {
                            Ok((score, member)) => {
                                members.push((member.to_vec(), score));
                                ControlFlow::Continue(())
                            }
                            Err(damaged) => {
                                failure = Some(damaged);
                                ControlFlow::Break(())
                            }
                        })?;
                }
                failure.map_or(Ok(members), Err)
            })
        }
        Some(Kind::Set) => {
            let (set, _) = set_of(stored)?.expect("checked kind");
            txn.with_records(db, key, |records| {
                let mut members = Vec::new();
                set.for_each(records, |member, _| members.push((member.to_vec(), 1.0)))?;
                Ok(members)
            })
        }
        Some(_) => Err(CommandError::WrongType),
    }
}
