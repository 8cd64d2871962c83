//! XADD, XRANGE, XREVRANGE, XLEN, XDEL, XTRIM, XSETID.
//!
//! Argument checks come in Redis's order (options before the key; XDEL's ids after it), so
//! the same bad command gets the same error line.

use bytes::Bytes;

use super::ids::{
    exhausted, parse_add_id, parse_bound, parse_id, resolve_add_id, AddId, Missing, StreamId,
};
use super::object::Trim;
use super::{edit, parse_count, read, CommandError, CommandResult, Ctx};
use crate::commands::{lower, parse_int};

/// Entries `~` trims at most per call unless LIMIT says otherwise (Redis: 100 times
/// `stream-node-max-entries`, whose default is 100).
const APPROX_TRIM_LIMIT: u64 = 100 * 100;

/// Parsed trimming options of XADD and XTRIM.
#[derive(Debug, Default)]
pub struct TrimArgs {
    /// What to trim to.
    pub trim: Option<Trim>,
    /// `~` was given.
    pub approx: bool,
    /// Most entries to remove (0 = no limit).
    pub limit: u64,
    /// XADD's NOMKSTREAM.
    pub no_mkstream: bool,
}

/// Parses XADD's or XTRIM's options from `args[from..]`; for XADD also stops at the id and
/// returns its index (`args.len()` when there is none).
fn parse_trim_args(args: &[Bytes], from: usize, xadd: bool) -> CommandResult<(TrimArgs, usize)> {
    let mut parsed = TrimArgs::default();
    let mut limit: Option<i64> = None;
    let mut i = from;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = lower(&args[i]);
        match option.as_str() {
            "*" if xadd => break,
            "maxlen" | "minid" if more > 0 => {
                if parsed.trim.is_some() {
                    return Err(CommandError::err(
                        "syntax error, MAXLEN and MINID options at the same time are not compatible",
                    ));
                }
                parsed.approx = false;
                if more >= 2 && (&args[i + 1][..] == b"~" || &args[i + 1][..] == b"=") {
                    parsed.approx = &args[i + 1][..] == b"~";
                    i += 1;
                }
                let value = &args[i + 1];
                parsed.trim = Some(if option == "maxlen" {
                    let max = parse_int(value)?;
                    if max < 0 {
                        return Err(CommandError::err("The MAXLEN argument must be >= 0."));
                    }
                    Trim::MaxLen(max as u64)
                } else {
                    Trim::MinId(parse_id(value, Missing::SeqZero, true)?)
                });
                i += 2;
            }
            "limit" if more > 0 => {
                let value = parse_int(&args[i + 1])?;
                if value < 0 {
                    return Err(CommandError::err("The LIMIT argument must be >= 0."));
                }
                limit = Some(value);
                i += 2;
            }
            "nomkstream" if xadd => {
                parsed.no_mkstream = true;
                i += 1;
            }
            _ if xadd => break,
            _ => return Err(CommandError::Syntax),
        }
    }
    if limit.is_some_and(|l| l > 0) && parsed.trim.is_none() {
        return Err(CommandError::err(
            "syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && parsed.trim.is_none() {
        return Err(CommandError::err(
            "syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if parsed.approx {
        parsed.limit = limit.map_or(APPROX_TRIM_LIMIT, |l| l as u64);
    } else if limit.is_some() {
        return Err(CommandError::err(
            "syntax error, LIMIT cannot be used without the special ~ option",
        ));
    }
    Ok((parsed, i))
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value ...
pub(in crate::commands) fn xadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (trim, id_at) = parse_trim_args(args, 2, true)?;
    // Redis reads the id with the options, before it counts the fields.
    let Some(wanted) = args.get(id_at).map(|id| parse_add_id(id)).transpose()? else {
        return Err(CommandError::arity("xadd"));
    };
    let fields_at = id_at + 1;
    if args.len() - fields_at < 2 || (args.len() - fields_at) % 2 == 1 {
        return Err(CommandError::arity("xadd"));
    }
    if wanted == AddId::Explicit(StreamId::MIN) {
        return Err(CommandError::err(
            "The ID specified in XADD must be greater than 0-0",
        ));
    }
    let key = &args[1];
    let db = ctx.db();
    let keyspace = &ctx.server.keyspace;
    let added = edit(ctx, key, !trim.no_mkstream, |edit, records| {
        exhausted_check(&edit.stream)?;
        let id = resolve_add_id(wanted, edit.stream.last_id, edit.now_ms)?;
        edit.stream.append(records, id, &args[fields_at..])?;
        keyspace
            .blocked
            .ready_kind(db, key, crate::value::Kind::Stream);
        if let Some(how) = trim.trim {
            if edit.stream.trim(records, how, trim.limit, trim.approx)? > 0 {
                crate::notify::note_stream(crate::notify::STREAM_TRIMMED);
            }
        }
        Ok(id)
    })?;
    match added {
        Some(id) => ctx.w.stream_id(id),
        None => ctx.w.null(),
    }
    Ok(())
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]
pub(in crate::commands) fn xtrim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (trim, _) = parse_trim_args(args, 2, false)?;
    let removed = edit(ctx, &args[1], false, |edit, records| {
        let how = trim.trim.expect("XTRIM's options always name a strategy");
        edit.stream.trim(records, how, trim.limit, trim.approx)
    })?;
    ctx.w.int(removed.unwrap_or(0) as i64);
    Ok(())
}

/// XRANGE / XREVRANGE key start end [COUNT count]
pub(super) fn xrange(ctx: &mut Ctx<'_>, args: &[Bytes], rev: bool) -> CommandResult {
    let (start_arg, end_arg) = if rev {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let start = parse_bound(start_arg, true)?;
    let end = parse_bound(end_arg, false)?;
    let mut count = None;
    let mut i = 4;
    while i < args.len() {
        if lower(&args[i]) == "count" && i + 1 < args.len() {
            count = Some(parse_count(&args[i + 1])?);
            i += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let entries = read(ctx, &args[1], |stream, records| {
        if count == Some(0) {
            return Ok(None);
        }
        stream
            .range(records, start, end, count.unwrap_or(0), rev)
            .map(Some)
    })?;
    match entries {
        None => ctx.w.array(0),
        Some(None) => ctx.w.null_array(),
        Some(Some(entries)) => ctx.w.stream_entries(&entries),
    }
    Ok(())
}

/// XLEN key
pub(in crate::commands) fn xlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let len = read(ctx, &args[1], |stream, _| Ok(stream.len()))?;
    ctx.w.int(len.unwrap_or(0) as i64);
    Ok(())
}

/// XDEL key id [id ...]
pub(in crate::commands) fn xdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let deleted = edit(ctx, &args[1], false, |edit, records| {
        // Redis checks every id (after the key) before deleting any.
        let ids = args[2..]
            .iter()
            .map(|a| parse_id(a, Missing::SeqZero, true))
            .collect::<CommandResult<Vec<_>>>()?;
        let mut deleted = 0;
        for id in &ids {
            if edit.stream.delete(records, *id)? {
                deleted += 1;
            }
        }
        Ok(deleted)
    })?;
    ctx.w.int(deleted.unwrap_or(0));
    Ok(())
}

/// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]
pub(in crate::commands) fn xsetid(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let id = parse_id(&args[2], Missing::SeqZero, true)?;
    let mut entries_added = None;
    let mut max_deleted = StreamId::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        match lower(&args[i]).as_str() {
            "entriesadded" if more => {
                let n = parse_int(&args[i + 1])?;
                if n < 0 {
                    return Err(CommandError::err("entries_added must be positive"));
                }
                entries_added = Some(n as u64);
            }
            "maxdeletedid" if more => {
                max_deleted = parse_id(&args[i + 1], Missing::SeqZero, true)?;
                if id < max_deleted {
                    return Err(CommandError::err(
                        "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                    ));
                }
            }
            _ => return Err(CommandError::Syntax),
        }
        i += 2;
    }
    let done = edit(ctx, &args[1], false, |edit, records| {
        let stream = &mut edit.stream;
        if id < stream.max_deleted {
            return Err(CommandError::err(
                "The ID specified in XSETID is smaller than current max_deleted_entry_id",
            ));
        }
        if let Some(top) = stream.last_entry_id(records)? {
            if id < top {
                return Err(CommandError::err(
                    "The ID specified in XSETID is smaller than the target stream top item",
                ));
            }
            if entries_added.is_some_and(|n| n < stream.len()) {
                return Err(CommandError::err(
                    "The entries_added specified in XSETID is smaller than the target stream length",
                ));
            }
        }
        stream.last_id = id;
        if let Some(n) = entries_added {
            stream.entries_added = n;
        }
        if !max_deleted.is_zero() {
            stream.max_deleted = max_deleted;
        }
        Ok(())
    })?;
    match done {
        Some(()) => ctx.w.ok(),
        None => return Err(CommandError::NoSuchKey),
    }
    Ok(())
}

/// XADD on a stream whose last id is the largest there is.
fn exhausted_check(stream: &super::object::Stream) -> CommandResult {
    if stream.last_id == StreamId::MAX {
        return Err(exhausted());
    }
    Ok(())
}
