//! XINFO STREAM [FULL [COUNT n]], XINFO GROUPS, XINFO CONSUMERS, XINFO HELP.
//!
//! `radix-tree-keys` and `radix-tree-nodes` describe Redis's rax of listpacks, which a stream
//! here does not have: they are reported as the number of 100-entry blocks the stream would
//! take there and one more (docs/server.md).

use std::ops::ControlFlow;

use bytes::Bytes;

use super::groups::{arity_fits, subcommand_syntax};
use super::ids::StreamId;
use super::object::{Consumer, Group, Stream, UNKNOWN_READ};
use super::{no_group_for_key, read, CommandError, CommandResult, Ctx, Writer};
use crate::commands::{lower, parse_int};

/// XINFO STREAM FULL's default COUNT (Redis's).
const FULL_DEFAULT_COUNT: u64 = 10;

fn subcommand_arity(name: &str) -> Option<i64> {
    Some(match name {
        "stream" => -3,
        "groups" => 3,
        "consumers" => 4,
        "help" => 2,
        _ => return None,
    })
}

/// XINFO subcommand ...
pub(in crate::commands) fn xinfo(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let sub = lower(&args[1]);
    let Some(arity) = subcommand_arity(&sub) else {
        return Err(CommandError::unknown_subcommand("XINFO", &args[1]));
    };
    if !arity_fits(arity, args.len()) {
        return Err(CommandError::arity(format!("xinfo|{sub}")));
    }
    if sub == "help" {
        ctx.w.help(&[
            "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CONSUMERS <key> <groupname>",
            "    Show consumers of <groupname>.",
            "GROUPS <key>",
            "    Show the stream consumer groups.",
            "STREAM <key> [FULL [COUNT <count>]",
            "    Show information about the stream.",
            "HELP",
            "    Prints this help.",
        ]);
        return Ok(());
    }
    let key = &args[2];
    let now = crate::keyspace::now_ms();
    let info = read(ctx, key, |stream, records| {
        Ok(match sub.as_str() {
            "consumers" => match stream.group(records, &args[3])? {
                Some(group) => Info::Consumers(Some(group.all_consumers(records)?)),
                None => Info::Consumers(None),
            },
            "groups" => {
                let first = stream.first_id(records)?;
                let groups = stream.all_groups(records)?;
                let mut rows = Vec::with_capacity(groups.len());
                for (name, group) in groups {
                    let consumers = group.consumers.len();
                    rows.push((name, group, consumers, stream.lag(first, &group)));
                }
                Info::Groups(rows)
            }
            _ => {
                let full = match args.len() {
                    3 => None,
                    4 if lower(&args[3]) == "full" => Some(FULL_DEFAULT_COUNT),
                    6 if lower(&args[3]) == "full" && lower(&args[4]) == "count" => {
                        match parse_int(&args[5])? {
                            n if n < 0 => Some(FULL_DEFAULT_COUNT),
                            n => Some(n as u64),
                        }
                    }
                    _ => return Err(subcommand_syntax("XINFO", &args[1])),
                };
                Info::Stream(Box::new(stream_info(stream, records, full)?))
            }
        })
    })?;
    let Some(info) = info else {
        return Err(CommandError::NoSuchKey);
    };
    let w = &mut ctx.w;
    match info {
        Info::Consumers(None) => return Err(no_group_for_key(key, &args[3])),
        Info::Consumers(Some(consumers)) => {
            w.array(consumers.len());
            for (name, consumer) in consumers {
                w.map(3);
                w.bulk(b"name");
                w.bulk(&name);
                w.bulk(b"pending");
                w.int(consumer.pel.len() as i64);
                w.bulk(b"idle");
                w.int(now.saturating_sub(consumer.seen_ms) as i64);
            }
        }
        Info::Groups(rows) => {
            w.array(rows.len());
            for (name, group, consumers, lag) in rows {
                w.map(6);
                w.bulk(b"name");
                w.bulk(&name);
                w.bulk(b"consumers");
                w.int(consumers as i64);
                w.bulk(b"pending");
                w.int(group.pel.len() as i64);
                w.bulk(b"last-delivered-id");
                w.stream_id(group.last_id);
                w.bulk(b"entries-read");
                entries_read(w, &group);
                w.bulk(b"lag");
                int_or_null(w, lag);
            }
        }
        Info::Stream(info) => write_stream_info(w, &info),
    }
    Ok(())
}

enum Info {
    Consumers(Option<Vec<(Vec<u8>, Consumer)>>),
    Groups(Vec<(Vec<u8>, Group, u64, Option<i64>)>),
    Stream(Box<StreamInfo>),
}

/// A group as XINFO STREAM FULL shows it.
struct FullGroup {
    name: Vec<u8>,
    group: Group,
    lag: Option<i64>,
    /// (id, consumer, delivery time, deliveries), at most COUNT.
    pending: Vec<(StreamId, Vec<u8>, u64, u64)>,
    consumers: Vec<FullConsumer>,
}

/// A consumer as XINFO STREAM FULL shows it: name, seen time, pending count, and its (id,
/// delivery time, deliveries) rows, at most COUNT.
type FullConsumer = (Vec<u8>, u64, u64, Vec<(StreamId, u64, u64)>);

struct StreamInfo {
    stream: Stream,
    first: StreamId,
    first_entry: Option<super::object::Entry>,
    last_entry: Option<super::object::Entry>,
    /// FULL: the entries (at most COUNT) and the groups.
    full: Option<(Vec<super::object::Entry>, Vec<FullGroup>)>,
}

fn stream_info(
    stream: &Stream,
    records: &mut impl prefixkv_collections::Records,
    full: Option<u64>,
) -> CommandResult<StreamInfo> {
    let first = stream.first_id(records)?;
    let (first_entry, last_entry) = stream.edges(records)?;
    let full = match full {
        None => None,
        Some(count) => {
            let entries = stream.range(records, StreamId::MIN, StreamId::MAX, count, false)?;
            let mut groups = Vec::new();
            for (name, group) in stream.all_groups(records)? {
                let mut pending = Vec::new();
                group.walk_pel(records, StreamId::MIN, |nack| {
                    pending.push((nack.id, nack.consumer, nack.delivered_ms, nack.deliveries));
                    if count != 0 && pending.len() as u64 >= count {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })?;
                let mut consumers = Vec::new();
                for (consumer_name, consumer) in group.all_consumers(records)? {
                    let ids =
                        consumer.pending_from(records, StreamId::MIN, StreamId::MAX, count)?;
                    let mut rows = Vec::with_capacity(ids.len());
                    for id in ids {
                        if let Some((_, nack)) = group.nack(records, id)? {
                            rows.push((id, nack.delivered_ms, nack.deliveries));
                        }
                    }
                    consumers.push((consumer_name, consumer.seen_ms, consumer.pel.len(), rows));
                }
                groups.push(FullGroup {
                    lag: stream.lag(first, &group),
                    name,
                    group,
                    pending,
                    consumers,
                });
            }
            Some((entries, groups))
        }
    };
    Ok(StreamInfo {
        stream: *stream,
        first,
        first_entry,
        last_entry,
        full,
    })
}

fn int_or_null(w: &mut Writer<'_>, value: Option<i64>) {
    match value {
        Some(n) => w.int(n),
        None => w.null(),
    }
}

fn entries_read(w: &mut Writer<'_>, group: &Group) {
    if group.entries_read == UNKNOWN_READ {
        w.null();
    } else {
        w.int(group.entries_read);
    }
}

fn write_stream_info(w: &mut Writer<'_>, info: &StreamInfo) {
    let stream = &info.stream;
    w.map(if info.full.is_some() { 9 } else { 10 });
    let blocks = stream.len().div_ceil(100);
    w.bulk(b"length");
    w.int(stream.len() as i64);
    w.bulk(b"radix-tree-keys");
    w.int(blocks as i64);
    w.bulk(b"radix-tree-nodes");
    w.int(blocks as i64 + 1);
    w.bulk(b"last-generated-id");
    w.stream_id(stream.last_id);
    w.bulk(b"max-deleted-entry-id");
    w.stream_id(stream.max_deleted);
    w.bulk(b"entries-added");
    w.int(stream.entries_added as i64);
    w.bulk(b"recorded-first-entry-id");
    w.stream_id(info.first);
    let Some((entries, groups)) = &info.full else {
        w.bulk(b"groups");
        w.int(stream.groups.len() as i64);
        for (name, entry) in [
            ("first-entry", &info.first_entry),
            ("last-entry", &info.last_entry),
        ] {
            w.bulk(name.as_bytes());
            match entry {
                Some(entry) => w.stream_entry(entry),
                None => w.null(),
            }
        }
        return;
    };
    w.bulk(b"entries");
    w.stream_entries(entries);
    w.bulk(b"groups");
    w.array(groups.len());
    for group in groups {
        w.map(7);
        w.bulk(b"name");
        w.bulk(&group.name);
        w.bulk(b"last-delivered-id");
        w.stream_id(group.group.last_id);
        w.bulk(b"entries-read");
        entries_read(w, &group.group);
        w.bulk(b"lag");
        int_or_null(w, group.lag);
        w.bulk(b"pel-count");
        w.int(group.group.pel.len() as i64);
        w.bulk(b"pending");
        w.array(group.pending.len());
        for (id, consumer, delivered, deliveries) in &group.pending {
            w.array(4);
            w.stream_id(*id);
            w.bulk(consumer);
            w.int(*delivered as i64);
            w.int(*deliveries as i64);
        }
        w.bulk(b"consumers");
        w.array(group.consumers.len());
        for (name, seen, pel_count, rows) in &group.consumers {
            w.map(4);
            w.bulk(b"name");
            w.bulk(name);
            w.bulk(b"seen-time");
            w.int(*seen as i64);
            w.bulk(b"pel-count");
            w.int(*pel_count as i64);
            w.bulk(b"pending");
            w.array(rows.len());
            for (id, delivered, deliveries) in rows {
                w.array(3);
                w.stream_id(*id);
                w.int(*delivered as i64);
                w.int(*deliveries as i64);
            }
        }
    }
}
