//! MEMORY USAGE, MEMORY STATS, MEMORY DOCTOR, MEMORY HELP.
//!
//! MEMORY USAGE is an estimate of the bytes a key costs in the engine, computed from what is
//! stored (docs/server.md says the same): every engine record costs [`RECORD_OVERHEAD`] bytes of
//! header and index entry plus its key and value. A string or small hash is one record (the
//! key's record). A collection stored as records adds, per element, the mean size of up to
//! SAMPLES sampled elements (5 by default, 0 = all, as Redis's option) plus its per-element
//! record cost: a list packs 128 elements per record, a set or large hash has one record per
//! member (field and value), a sorted set two (member -> score, and the score-ordered entry).
//! Sampling reads at most SAMPLES elements, so the command costs O(SAMPLES) records.

use bytes::Bytes;
use prefixkv_collections::hash::Hash;

use super::{lower, parse_int, read_collection, CommandError, CommandResult, Ctx};
use crate::objects::{list_of, zset_of};
use crate::value::{Kind, Stored};

/// Bytes an engine record costs beyond its key and value (record header, hash index entry).
pub const RECORD_OVERHEAD: u64 = 32;
/// Bytes of collection record key prefix (object id) per element record.
const ELEMENT_KEY_BYTES: u64 = 12;

/// MEMORY USAGE | STATS | DOCTOR | HELP ....
pub(super) fn memory(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let sub = lower(&args[1]);
    match sub.as_str() {
        "usage" if args.len() >= 3 => usage(ctx, args),
        "stats" if args.len() == 2 => {
            stats(ctx);
            Ok(())
        }
        "doctor" if args.len() == 2 => {
            let text = "Sam, I have no memory problems to report: prefixkv keeps data in its \
                        engine's fixed-size memory and log, so allocator fragmentation and \
                        peak-versus-current warnings do not apply.\n";
            ctx.w.verbatim(text.as_bytes());
            Ok(())
        }
        "help" if args.len() == 2 => {
            ctx.w.help(&[
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return memory problems reports.",
                "STATS",
                "    Return information about the memory usage of the server.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value (an estimate: see",
                "    docs/server.md). SAMPLES sets how many elements of a collection are",
                "    sampled (5 by default, 0 for all).",
                "HELP",
                "    Print this help.",
            ]);
            Ok(())
        }
        "usage" | "stats" | "doctor" | "help" => Err(CommandError::arity(format!("memory|{sub}"))),
        _ => Err(CommandError::unknown_subcommand("MEMORY", &args[1])),
    }
}

/// MEMORY USAGE key [SAMPLES count].
fn usage(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let mut samples: u64 = 5;
    let mut index = 3;
    while index < args.len() {
        if lower(&args[index]) == "samples" && index + 1 < args.len() {
            let n = parse_int(&args[index + 1])?;
            if n < 0 {
                return Err(CommandError::Syntax);
            }
            samples = if n == 0 { u64::MAX } else { n as u64 };
            index += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let key = &args[2];
    // As Redis, MEMORY USAGE does not count as an access.
    let Some(stored) = ctx.server.keyspace.read_quiet(ctx.session, ctx.db(), key)? else {
        ctx.w.null();
        return Ok(());
    };
    let root = RECORD_OVERHEAD + 1 + key.len() as u64 + 9 + stored.payload.len() as u64;
    let elements = match stored.kind {
        Kind::String | Kind::Hash => 0,
        _ => element_bytes(ctx, key, &stored, samples)?,
    };
    ctx.w.int((root + elements) as i64);
    Ok(())
}

/// The estimated bytes of a collection's element records (see the module docs).
fn element_bytes(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    stored: &Stored,
    samples: u64,
) -> CommandResult<u64> {
    let (len, sampled, bytes, records_per_element) = match stored.kind {
        Kind::List => read_collection(ctx, list_of, key, |list, records| {
            let take = list.len().min(samples);
            let mut bytes = 0;
            let mut out = Vec::new();
            for rank in 0..take {
                list.get(records, rank, &mut out)?;
                // Each element carries a small length prefix in its chunk.
                bytes += out.len() as u64 + 2;
            }
            Ok((list.len(), take, bytes, 1.0 / 128.0))
        })?,
        Kind::ZSet => read_collection(ctx, zset_of, key, |zset, records| {
            let take = zset.len().min(samples);
            let mut bytes = 0;
            let mut out = Vec::new();
            for rank in 0..take {
                zset.order.get(records, rank, &mut out)?;
                // The entry holds score and member; the member table holds member and score.
                bytes += 2 * out.len() as u64;
            }
            Ok((zset.len(), take, bytes, 2.0))
        })?,
        Kind::Set | Kind::HashTable => read_collection(ctx, table_of, key, |table, records| {
            let (_, entries) = super::sets::scan_table(
                table,
                records,
                0,
                samples.min(1 << 20) as usize,
                |_, _| true,
            )?;
            let take = entries.len() as u64;
            let bytes = entries
                .iter()
                .map(|(f, v)| (f.len() + v.len()) as u64)
                .sum();
            Ok((table.len(), take, bytes, 1.0))
        })?,
        // Entries only: consumer groups and their pending lists are not counted.
        Kind::Stream => read_collection(ctx, super::streams::stream_of, key, |stream, records| {
            let take = stream.len().min(samples);
            let mut bytes = 0;
            let mut out = Vec::new();
            for rank in 0..take {
                stream.entries.get(records, rank, &mut out)?;
                bytes += out.len() as u64;
            }
            Ok((stream.len(), take, bytes, 1.0))
        })?,
        Kind::String | Kind::Hash => None,
    }
    .unwrap_or((0, 0, 0, 0.0));
    if sampled == 0 {
        return Ok(0);
    }
    let mean = bytes as f64 / sampled as f64;
    let per_record = (RECORD_OVERHEAD + ELEMENT_KEY_BYTES) as f64;
    Ok((len as f64 * (mean + records_per_element * per_record)).ceil() as u64)
}

/// The member table of a set or a large hash (the two share one layout).
fn table_of(stored: Option<Stored>) -> CommandResult<Option<(Hash, u64)>> {
    match stored {
        None => Ok(None),
        Some(s) if matches!(s.kind, Kind::Set | Kind::HashTable) => {
            let hash = Hash::decode(&mut &s.payload[..])?;
            Ok(Some((hash, s.expire_at_ms)))
        }
        Some(_) => Err(CommandError::WrongType),
    }
}

/// MEMORY STATS: the figures prefixkv has, under Redis's names where one fits.
fn stats(ctx: &mut Ctx<'_>) {
    let keyspace = &ctx.server.keyspace;
    let memory = crate::evict::memory(ctx.server);
    let keys: u64 = (0..crate::keyspace::DATABASES as u8)
        .map(|db| keyspace.dbsize(db))
        .sum();
    let fields: [(&str, u64); 7] = [
        ("peak.allocated", memory.peak),
        ("total.allocated", memory.used),
        ("overhead.total", memory.overhead),
        ("dataset.bytes", memory.dataset),
        ("keys.count", keys),
        (
            "keys.bytes-per-key",
            memory.used.checked_div(keys).unwrap_or(0),
        ),
        (
            "engine.memory",
            ctx.server.settings.read().engine_memory_bytes,
        ),
    ];
    ctx.w.map(fields.len());
    for (name, value) in fields {
        ctx.w.bulk(name.as_bytes());
        ctx.w.int(value as i64);
    }
}
