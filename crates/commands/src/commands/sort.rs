//! SORT and SORT_RO: the elements of a list, set or sorted set, sorted numerically or
//! byte-wise (ALPHA), optionally by values looked up through a pattern (BY), limited (LIMIT),
//! projected through patterns (GET) and stored as a list (STORE).
//!
//! The elements are read in one keyspace transaction on the source key; the BY and GET lookups
//! then read other keys without locks, one by one (Redis runs the whole command alone: a write
//! that lands between two lookups here can be seen by the later one only, documented in
//! docs/server.md); STORE writes the result in a transaction of its own. Memory is the source's
//! elements plus the reply, both sized by stored data; no client-given number sizes anything
//! (LIMIT is clipped to the elements).
//!
//! Numbers are read as Redis's strtod does for the cases clients use (leading blanks, `inf`,
//! exponents; an empty string is 0); hexadecimal floats are not accepted (docs/server.md).

use std::cmp::Ordering;
use std::ops::ControlFlow;

use bytes::Bytes;

use super::{lower, parse_int, CommandError, CommandResult, Ctx};
use crate::objects::{list_of, save_list, set_of, split_entry, zset_of};
use crate::value::Kind;

/// The parsed options.
struct Options {
    by: Option<Bytes>,
    dont_sort: bool,
    limit: Option<(i64, i64)>,
    gets: Vec<Bytes>,
    desc: bool,
    alpha: bool,
    store: Option<Bytes>,
}

fn parse_options(args: &[Bytes], read_only: bool) -> CommandResult<Options> {
    let mut options = Options {
        by: None,
        dont_sort: false,
        limit: None,
        gets: Vec::new(),
        desc: false,
        alpha: false,
        store: None,
    };
    let mut index = 2;
    while index < args.len() {
        let left = args.len() - index - 1;
        match lower(&args[index]).as_str() {
            "asc" => options.desc = false,
            "desc" => options.desc = true,
            "alpha" => options.alpha = true,
            "limit" if left >= 2 => {
                options.limit = Some((parse_int(&args[index + 1])?, parse_int(&args[index + 2])?));
                index += 2;
            }
            "store" if !read_only && left >= 1 => {
                options.store = Some(args[index + 1].clone());
                index += 1;
            }
            "by" if left >= 1 => {
                // A pattern without `*` names one key for every element: nothing to sort by.
                options.dont_sort = !args[index + 1].contains(&b'*');
                options.by = Some(args[index + 1].clone());
                index += 1;
            }
            "get" if left >= 1 => {
                options.gets.push(args[index + 1].clone());
                index += 1;
            }
            _ => return Err(CommandError::Syntax),
        }
        index += 1;
    }
    Ok(options)
}

/// SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
/// [STORE destination]; SORT_RO the same without STORE.
/// SORT.
pub(super) fn sort(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    run(ctx, false, args)
}

/// SORT_RO.
pub(super) fn sort_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    run(ctx, true, args)
}

/// SORT and, when `read_only`, SORT_RO (which refuses STORE).
fn run(ctx: &mut Ctx<'_>, read_only: bool, args: &[Bytes]) -> CommandResult {
    let mut options = parse_options(args, read_only)?;
    let (elements, kind) = source_elements(ctx, &args[1])?;
    if options.dont_sort && kind == Some(Kind::Set) && options.store.is_some() {
        // A stored result must not depend on a set's internal order: Redis sorts it then.
        (options.dont_sort, options.alpha, options.by) = (false, true, None);
    }
    let mut elements = elements;
    if options.dont_sort {
        if options.desc && matches!(kind, Some(Kind::List | Kind::ZSet)) {
            elements.reverse();
        }
    } else {
        elements = sorted(ctx, elements, &options)?;
    }
    let (start, end) = limit_range(options.limit, elements.len());
    let selected = &elements[start..end];
    let mut output: Vec<Option<Vec<u8>>> = Vec::new();
    for element in selected {
        if options.gets.is_empty() {
            output.push(Some(element.clone()));
        }
        for pattern in &options.gets {
            output.push(lookup(ctx, pattern, element)?);
        }
    }
    match options.store {
        Some(destination) => store(ctx, &destination, &output),
        None => {
            ctx.w.array(output.len());
            for value in &output {
                ctx.w.bulk_or_null(value.as_deref());
            }
            Ok(())
        }
    }
}

/// The elements of the list, set or sorted set at `key` (sorted sets in score order) and its
/// kind; nothing for a missing key, WRONGTYPE for another type.
fn source_elements(ctx: &mut Ctx<'_>, key: &[u8]) -> CommandResult<(Vec<Vec<u8>>, Option<Kind>)> {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let stored = txn.get(db, key)?;
    let kind = stored.as_ref().map(|s| s.kind);
    let mut elements = Vec::new();
    let mut failure = None;
    match kind {
        None => {}
        Some(Kind::List) => {
            let (list, _) = list_of(stored)?.expect("checked kind");
            txn.with_records(db, key, |records| {
                list.range(records, 0, |_, element| {
                    elements.push(element.to_vec());
                    ControlFlow::Continue(())
                })
            })?;
        }
        Some(Kind::Set) => {
            let (set, _) = set_of(stored)?.expect("checked kind");
            txn.with_records(db, key, |records| {
                set.for_each(records, |member, _| elements.push(member.to_vec()))
            })?;
        }
        Some(Kind::ZSet) => {
            let (zset, _) = zset_of(stored)?.expect("checked kind");
            txn.with_records(db, key, |records| {
                zset.order
                    .range(records, 0, |_, entry| match split_entry(entry) {
                        Ok((_, member)) => {
                            elements.push(member.to_vec());
                            ControlFlow::Continue(())
                        }
                        Err(damaged) => {
                            failure = Some(damaged);
                            ControlFlow::Break(())
                        }
                    })
            })?;
        }
        Some(_) => return Err(CommandError::WrongType),
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    failure.map_or(Ok((elements, kind)), Err)
}

/// What an element is compared by.
enum Weight {
    Score(f64),
    Text(Option<Vec<u8>>),
}

/// The elements in SORT's order: by score (numeric) or bytes (ALPHA), of the element or of its
/// BY value; equal scores fall back to the element's bytes, as in Redis.
fn sorted(
    ctx: &mut Ctx<'_>,
    elements: Vec<Vec<u8>>,
    options: &Options,
) -> CommandResult<Vec<Vec<u8>>> {
    let mut weighted = Vec::with_capacity(elements.len());
    let mut conversion_error = false;
    for element in elements {
        let value = match &options.by {
            Some(pattern) => lookup(ctx, pattern, &element)?,
            None => Some(element.clone()),
        };
        let weight = if options.alpha {
            Weight::Text(value)
        } else {
            match value.as_deref().map(strtod) {
                None => Weight::Score(0.0),
                Some(Some(score)) => Weight::Score(score),
                Some(None) => {
                    conversion_error = true;
                    Weight::Score(0.0)
                }
            }
        };
        weighted.push((weight, element));
    }
    if conversion_error {
        return Err(CommandError::err(
            "One or more scores can't be converted into double",
        ));
    }
    weighted.sort_by(|(a, x), (b, y)| {
        let order = match (a, b) {
            (Weight::Score(a), Weight::Score(b)) => a
                .partial_cmp(b)
                .unwrap_or(Ordering::Equal)
                .then_with(|| x.cmp(y)),
            // Without BY the text is the element itself; a missing BY value sorts first.
            (Weight::Text(a), Weight::Text(b)) => a.cmp(b),
            _ => Ordering::Equal,
        };
        if options.desc {
            order.reverse()
        } else {
            order
        }
    });
    Ok(weighted.into_iter().map(|(_, element)| element).collect())
}

/// Redis's strtod acceptance: the whole text a number, leading blanks allowed, no NaN; an
/// empty text is 0.
fn strtod(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        return Some(0.0);
    }
    let text = std::str::from_utf8(text).ok()?;
    let trimmed = text.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    trimmed.parse::<f64>().ok().filter(|value| !value.is_nan())
}

/// LIMIT offset count over `len` elements, as Redis clips it: the selected `start..end`.
fn limit_range(limit: Option<(i64, i64)>, len: usize) -> (usize, usize) {
    let Some((offset, count)) = limit else {
        return (0, len);
    };
    let len = len as i64;
    let start = offset.max(0);
    let mut end = if count < 0 {
        len - 1
    } else {
        start.saturating_add(count) - 1
    };
    if start >= len {
        return (0, 0);
    }
    if end >= len {
        end = len - 1;
    }
    if end < start {
        return (0, 0);
    }
    (start as usize, end as usize + 1)
}

/// The value a BY or GET pattern names for `element`: `#` is the element; the first `*` is
/// replaced by it; `key->field` reads a hash field. Missing keys, fields, patterns without `*`
/// and keys of another type read as `None`.
fn lookup(ctx: &mut Ctx<'_>, pattern: &[u8], element: &[u8]) -> CommandResult<Option<Vec<u8>>> {
    if pattern == b"#" {
        return Ok(Some(element.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else {
        return Ok(None);
    };
    let arrow = pattern[star + 1..]
        .windows(2)
        .position(|w| w == b"->")
        .map(|at| star + 1 + at)
        .filter(|at| at + 2 < pattern.len());
    let key_end = arrow.unwrap_or(pattern.len());
    let key = [&pattern[..star], element, &pattern[star + 1..key_end]].concat();
    match arrow {
        Some(at) => super::hashes::field_value(ctx, &key, &pattern[at + 2..]),
        None => {
            let found = ctx.server.keyspace.read(ctx.session, ctx.db(), &key)?;
            Ok(found
                .filter(|s| s.kind == Kind::String)
                .map(|s| s.payload.to_vec()))
        }
    }
}

/// STORE: the output as a list at `destination` (a missing GET value stored as an empty
/// string; the key deleted when the output is empty); its length.
fn store(ctx: &mut Ctx<'_>, destination: &[u8], output: &[Option<Vec<u8>>]) -> CommandResult {
    let db = ctx.db();
    let keyspace = &ctx.server.keyspace;
    let mut txn = keyspace.begin(ctx.session, db, &[destination]);
    txn.delete(db, destination)?;
    if !output.is_empty() {
        let mut list = prefixkv_collections::list::List::new(keyspace.new_object_id());
        let pushed = txn.with_records(db, destination, |records| {
            output.iter().try_for_each(|value| {
                list.insert_at(records, list.len(), value.as_deref().unwrap_or_default())
            })
        });
        // Written back even after an error: it holds what succeeded (`crate::objects`).
        save_list(&mut txn, db, destination, &list, 0)?;
        pushed?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(output.len() as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_clips_as_redis() {
        assert_eq!(limit_range(None, 5), (0, 5));
        assert_eq!(limit_range(Some((0, 2)), 5), (0, 2));
        assert_eq!(limit_range(Some((-3, 2)), 5), (0, 2));
        assert_eq!(limit_range(Some((3, -1)), 5), (3, 5));
        assert_eq!(limit_range(Some((5, 1)), 5), (0, 0));
        assert_eq!(limit_range(Some((1, 0)), 5), (0, 0));
        assert_eq!(limit_range(Some((1, i64::MAX)), 5), (1, 5));
    }

    #[test]
    fn numbers_read_as_strtod() {
        assert_eq!(strtod(b""), Some(0.0));
        assert_eq!(strtod(b" 1.5"), Some(1.5));
        assert_eq!(strtod(b"1e3"), Some(1000.0));
        assert_eq!(strtod(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(strtod(b"1 "), None);
        assert_eq!(strtod(b"nan"), None);
        assert_eq!(strtod(b"abc"), None);
    }
}
