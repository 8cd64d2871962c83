//! Hash commands. A small hash is stored whole in its key's value (Redis's listpack encoding,
//! `Kind::Hash`); once it passes `hash-max-listpack-entries` fields or a field or value passes
//! `hash-max-listpack-value` bytes it moves into a linear-hashing table of records
//! (`Kind::HashTable`, `prefixkv_collections::hash`), where HSET and HDEL cost O(1) records
//! whatever the size. Like Redis, a hash never moves back.

use std::collections::HashSet;

use bytes::Bytes;
use prefixkv_collections::hash::Hash;
use prefixkv_collections::Records;

use super::{lower, parse_float, parse_int, strings, CommandError, CommandResult, Ctx};
use crate::keyspace::Txn;
use crate::objects::save_hash;
use crate::value::{decode_hash, encode_hash, Kind, Stored};

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A hash's fields: in the value, or in records.
enum Table {
    Inline(Pairs),
    Records(Hash),
}

/// A hash read from its key under the key's lock.
struct HashValue {
    table: Table,
    expire: u64,
}

impl HashValue {
    fn load(stored: Option<Stored>) -> CommandResult<Option<HashValue>> {
        let Some(stored) = stored else {
            return Ok(None);
        };
        let table = match stored.kind {
            Kind::Hash => Table::Inline(
                decode_hash(&stored.payload)
                    .map_err(|m| CommandError::err(format!("stored hash is damaged: {}", m.0)))?,
            ),
            Kind::HashTable => Table::Records(Hash::decode(&mut &stored.payload[..])?),
            _ => return Err(CommandError::WrongType),
        };
        Ok(Some(HashValue {
            table,
            expire: stored.expire_at_ms,
        }))
    }

    fn empty() -> HashValue {
        HashValue {
            table: Table::Inline(Vec::new()),
            expire: 0,
        }
    }

    fn len(&self) -> u64 {
        match &self.table {
            Table::Inline(pairs) => pairs.len() as u64,
            Table::Records(hash) => hash.len(),
        }
    }

    fn get(&self, records: &mut impl Records, field: &[u8]) -> CommandResult<Option<Vec<u8>>> {
        match &self.table {
            Table::Inline(pairs) => Ok(pairs
                .iter()
                .find(|(f, _)| f[..] == *field)
                .map(|(_, v)| v.clone())),
            Table::Records(hash) => {
                let mut out = Vec::new();
                Ok(hash.get(records, field, &mut out)?.then_some(out))
            }
        }
    }

    /// Sets a field; whether it is new.
    fn set(
        &mut self,
        records: &mut impl Records,
        field: &[u8],
        value: &[u8],
    ) -> CommandResult<bool> {
        match &mut self.table {
            Table::Inline(pairs) => match pairs.iter_mut().find(|(f, _)| f[..] == *field) {
                Some((_, old)) => {
                    *old = value.to_vec();
                    Ok(false)
                }
                None => {
                    pairs.push((field.to_vec(), value.to_vec()));
                    Ok(true)
                }
            },
            Table::Records(hash) => hash
                .insert(records, field, value)
                .map_err(CommandError::from),
        }
    }

    /// Removes a field; whether it existed.
    fn remove(&mut self, records: &mut impl Records, field: &[u8]) -> CommandResult<bool> {
        match &mut self.table {
            Table::Inline(pairs) => {
                let before = pairs.len();
                pairs.retain(|(f, _)| f[..] != *field);
                Ok(pairs.len() != before)
            }
            Table::Records(hash) => hash.remove(records, field).map_err(CommandError::from),
        }
    }

    /// Every (field, value), in insertion order for a small hash, bucket order for a table.
    fn pairs(&self, records: &mut impl Records) -> CommandResult<Pairs> {
        match &self.table {
            Table::Inline(pairs) => Ok(pairs.clone()),
            Table::Records(hash) => {
                let mut pairs = Vec::new();
                hash.for_each(records, |f, v| pairs.push((f.to_vec(), v.to_vec())))?;
                Ok(pairs)
            }
        }
    }

    /// Moves a small hash that outgrew the thresholds into records (object `new_id()`).
    fn grow_if_needed(
        &mut self,
        records: &mut impl Records,
        (max_entries, max_value_bytes): (i64, i64),
        new_id: impl FnOnce() -> u64,
    ) -> CommandResult {
        let Table::Inline(pairs) = &self.table else {
            return Ok(());
        };
        let small = pairs.len() as i64 <= max_entries
            && pairs.iter().all(|(f, v)| {
                f.len() as i64 <= max_value_bytes && v.len() as i64 <= max_value_bytes
            });
        if small {
            return Ok(());
        }
        let mut hash = Hash::new(new_id());
        for (field, value) in pairs {
            if let Err(failure) = hash.insert(records, field, value) {
                // The hash stays small; the table built so far is not left behind.
                let _ = hash.clear(records);
                return Err(failure.into());
            }
        }
        self.table = Table::Records(hash);
        Ok(())
    }

    /// Writes the hash back under `key` (deletes the key when it became empty).
    fn save(&self, txn: &mut Txn<'_>, db: u8, key: &[u8]) -> CommandResult {
        match &self.table {
            Table::Inline(pairs) if pairs.is_empty() => {
                txn.delete(db, key)?;
                Ok(())
            }
            Table::Inline(pairs) => {
                txn.put_object(db, key, Kind::Hash, self.expire, &encode_hash(pairs))
            }
            Table::Records(hash) => save_hash(txn, db, key, Kind::HashTable, hash, self.expire),
        }
    }
}

/// The thresholds past which a small hash becomes a table.
fn thresholds(ctx: &Ctx<'_>) -> (i64, i64) {
    let settings = ctx.server.settings.read();
    (
        settings.encoding_threshold("hash-max-listpack-entries"),
        settings.encoding_threshold("hash-max-listpack-value"),
    )
}

/// Runs `body` on the hash at `key` (`None` when there is none) under the key's lock, with its
/// records; then commits (a read writes nothing unless the key had expired).
fn with_hash<R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    body: impl FnOnce(Option<&HashValue>, &mut prefixkv_collections::Owned<'_, '_>) -> CommandResult<R>,
) -> CommandResult<R> {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let hash = HashValue::load(txn.get(db, key)?)?;
    let result = txn.with_records(db, key, |records| body(hash.as_ref(), records))?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    Ok(result)
}

/// The value of `field` in the hash at `key`; `None` for no key, no field, or another type
/// (SORT's BY and GET patterns read those as missing, as Redis does).
pub(super) fn field_value(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    field: &[u8],
) -> CommandResult<Option<Vec<u8>>> {
    let found = with_hash(ctx, key, |hash, records| match hash {
        Some(hash) => hash.get(records, field),
        None => Ok(None),
    });
    match found {
        Err(CommandError::WrongType) => Ok(None),
        other => other,
    }
}

/// Changes the hash at `key` with `body` (which gets it, or an empty one, and answers its result
/// and whether it changed anything), grows it into records if it passed the thresholds, writes it
/// back and commits.
fn update_hash<R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    body: impl FnOnce(
        &mut HashValue,
        &mut prefixkv_collections::Owned<'_, '_>,
    ) -> CommandResult<(R, bool)>,
) -> CommandResult<R> {
    let db = ctx.db();
    let limits = thresholds(ctx);
    let keyspace = &ctx.server.keyspace;
    let mut txn = keyspace.begin(ctx.session, db, &[key]);
    let mut hash = HashValue::load(txn.get(db, key)?)?.unwrap_or_else(HashValue::empty);
    let before = hash.len();
    let outcome = txn.with_records(db, key, |records| {
        let (result, changed) = body(&mut hash, records)?;
        if changed {
            hash.grow_if_needed(records, limits, || keyspace.new_object_id())?;
        }
        Ok::<(R, bool), CommandError>((result, changed))
    });
    // Written back after an error too: a table's header describes its records after a failed
    // step, and holds the steps that succeeded (`crate::objects`); a small hash changed nothing
    // stored yet, and a table that failed to grow out of it is discarded with its records.
    let save = match &outcome {
        Ok((_, changed)) => *changed,
        Err(_) => matches!(hash.table, Table::Records(_)) && hash.len() != before,
    };
    if save {
        hash.save(&mut txn, db, key)?;
    }
    let (result, _) = outcome?;
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    Ok(result)
}

/// HSET: how many fields are new.
pub(super) fn hset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let added = set_fields(ctx, args, "hset")?;
    ctx.w.int(added);
    Ok(())
}

/// HMSET: OK.
pub(super) fn hmset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    set_fields(ctx, args, "hmset")?;
    ctx.w.ok();
    Ok(())
}

/// HSET and HMSET (`name` for the arity error): sets every pair, counts the new fields.
fn set_fields(ctx: &mut Ctx<'_>, args: &[Bytes], name: &str) -> CommandResult<i64> {
    if !args.len().is_multiple_of(2) {
        return Err(CommandError::arity(name.to_string()));
    }
    update_hash(ctx, &args[1], |hash, records| {
        let mut added = 0;
        for pair in args[2..].chunks(2) {
            added += i64::from(hash.set(records, &pair[0], &pair[1])?);
        }
        Ok((added, true))
    })
}

/// HSETNX.
pub(super) fn hsetnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let added = update_hash(ctx, &args[1], |hash, records| {
        if hash.get(records, &args[2])?.is_some() {
            return Ok((0, false));
        }
        let added = i64::from(hash.set(records, &args[2], &args[3])?);
        Ok((added, true))
    })?;
    ctx.w.int(added);
    Ok(())
}

/// The value of the field `args[2]` of the hash at `args[1]`.
fn one_field(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Option<Vec<u8>>> {
    with_hash(ctx, &args[1], |hash, records| match hash {
        Some(hash) => hash.get(records, &args[2]),
        None => Ok(None),
    })
}

/// HGET.
pub(super) fn hget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let value = one_field(ctx, args)?;
    ctx.w.bulk_or_null(value.as_deref());
    Ok(())
}

/// HSTRLEN.
pub(super) fn hstrlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let value = one_field(ctx, args)?;
    ctx.w.int(value.map_or(0, |v| v.len() as i64));
    Ok(())
}

/// HEXISTS.
pub(super) fn hexists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let value = one_field(ctx, args)?;
    ctx.w.int(i64::from(value.is_some()));
    Ok(())
}

/// HMGET.
pub(super) fn hmget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let values = with_hash(ctx, &args[1], |hash, records| {
        args[2..]
            .iter()
            .map(|field| match hash {
                Some(hash) => hash.get(records, field),
                None => Ok(None),
            })
            .collect::<CommandResult<Vec<_>>>()
    })?;
    ctx.w.array(values.len());
    for value in &values {
        ctx.w.bulk_or_null(value.as_deref());
    }
    Ok(())
}

/// HGETALL.
pub(super) fn hgetall(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let pairs = read_pairs(ctx, &args[1])?;
    ctx.w.map(pairs.len());
    for (field, value) in &pairs {
        ctx.w.bulk(field);
        ctx.w.bulk(value);
    }
    Ok(())
}

/// HKEYS.
pub(super) fn hkeys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let pairs = read_pairs(ctx, &args[1])?;
    ctx.w.array(pairs.len());
    for (field, _) in &pairs {
        ctx.w.bulk(field);
    }
    Ok(())
}

/// HVALS.
pub(super) fn hvals(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let pairs = read_pairs(ctx, &args[1])?;
    ctx.w.array(pairs.len());
    for (_, value) in &pairs {
        ctx.w.bulk(value);
    }
    Ok(())
}

/// HLEN.
pub(super) fn hlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let len = with_hash(ctx, &args[1], |hash, _| Ok(hash.map_or(0, HashValue::len)))?;
    ctx.w.int(len as i64);
    Ok(())
}

/// HDEL.
pub(super) fn hdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let removed = update_hash(ctx, &args[1], |hash, records| {
        let mut removed = 0;
        for field in &args[2..] {
            removed += i64::from(hash.remove(records, field)?);
        }
        Ok((removed, removed > 0))
    })?;
    ctx.w.int(removed);
    Ok(())
}

/// HINCRBY.
pub(super) fn hincrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let delta = parse_int(&args[3])?;
    let result = update_hash(ctx, &args[1], |hash, records| {
        let current = match hash.get(records, &args[2])? {
            Some(text) => {
                parse_int(&text).map_err(|_| CommandError::err("hash value is not an integer"))?
            }
            None => 0,
        };
        let result = current.checked_add(delta).ok_or(CommandError::Overflow)?;
        hash.set(records, &args[2], result.to_string().as_bytes())?;
        Ok((result, true))
    })?;
    ctx.w.int(result);
    Ok(())
}

/// HINCRBYFLOAT.
pub(super) fn hincrbyfloat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let delta = parse_float(&args[3])?;
    let text = update_hash(ctx, &args[1], |hash, records| {
        let current = match hash.get(records, &args[2])? {
            Some(text) => {
                parse_float(&text).map_err(|_| CommandError::err("hash value is not a float"))?
            }
            None => 0.0,
        };
        let result = current + delta;
        if !result.is_finite() {
            return Err(CommandError::NotFinite);
        }
        let text = strings::format_float(result).into_bytes();
        hash.set(records, &args[2], &text)?;
        Ok((text, true))
    })?;
    ctx.w.bulk(&text);
    Ok(())
}

/// HRANDFIELD key [count [WITHVALUES]]: a positive count picks distinct fields, a negative one
/// may repeat them. A repeating count is bounded: its reply must fit client-output-buffer-limit
/// (at least 16 bytes a field), so a client cannot make the server build an unbounded reply.
pub(super) fn hrandfield(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let count = args.get(2).map(|c| parse_int(c)).transpose()?;
    let with_values = match args.get(3) {
        None => false,
        Some(word) if args.len() == 4 && lower(word) == "withvalues" => true,
        Some(_) => return Err(CommandError::Syntax),
    };
    let limit = ctx.server.settings.read().client_output_buffer_limit_bytes;
    if count.is_some_and(|count| count.unsigned_abs() > (limit / 16).max(1)) {
        return Err(CommandError::ReplyTooLarge { limit_bytes: limit });
    }
    let mut rng = Xorshift::new(ctx.client.id);
    let chosen = with_hash(ctx, &args[1], |hash, records| match hash {
        None => Ok(Vec::new()),
        Some(hash) => pick_random(hash, records, count.unwrap_or(1), &mut rng),
    })?;
    let Some(count) = count else {
        ctx.w
            .bulk_or_null(chosen.first().map(|(field, _)| &field[..]));
        return Ok(());
    };
    debug_assert!(count < 0 || chosen.len() as u64 <= count as u64);
    let resp3 = ctx.w.encoder.protocol() == prefixkv_resp::Protocol::Resp3;
    match (with_values, resp3) {
        (true, true) => {
            ctx.w.array(chosen.len());
            for (field, value) in &chosen {
                ctx.w.array(2);
                ctx.w.bulk(field);
                ctx.w.bulk(value);
            }
        }
        (true, false) => {
            ctx.w.array(chosen.len() * 2);
            for (field, value) in &chosen {
                ctx.w.bulk(field);
                ctx.w.bulk(value);
            }
        }
        (false, _) => {
            ctx.w.array(chosen.len());
            for (field, _) in &chosen {
                ctx.w.bulk(field);
            }
        }
    }
    Ok(())
}

/// HRANDFIELD's picks: `count` distinct fields (all when `count` passes the size), or with a
/// negative count `-count` fields that may repeat.
fn pick_random(
    hash: &HashValue,
    records: &mut impl Records,
    count: i64,
    rng: &mut Xorshift,
) -> CommandResult<Pairs> {
    let len = hash.len();
    if len == 0 || count == 0 {
        return Ok(Vec::new());
    }
    match &hash.table {
        Table::Inline(pairs) if count < 0 => Ok((0..count.unsigned_abs())
            .map(|_| pairs[rng.below(pairs.len())].clone())
            .collect()),
        Table::Inline(pairs) => {
            // Distinct: a partial Fisher-Yates shuffle of the indexes.
            let mut indexes: Vec<usize> = (0..pairs.len()).collect();
            let take = (count as usize).min(pairs.len());
            for i in 0..take {
                let j = i + rng.below(pairs.len() - i);
                indexes.swap(i, j);
            }
            Ok(indexes[..take].iter().map(|&i| pairs[i].clone()).collect())
        }
        Table::Records(_) if count > 0 && count as u64 >= len => hash.pairs(records),
        Table::Records(table) => {
            let mut picked = Vec::new();
            let mut seen = HashSet::new();
            while (picked.len() as u64) < count.unsigned_abs() {
                let Some(pair) = table.random(records, rng.next())? else {
                    break;
                };
                if count > 0 && !seen.insert(pair.0.clone()) {
                    continue;
                }
                picked.push(pair);
            }
            Ok(picked)
        }
    }
}

/// Every (field, value) of the hash at `key` (empty when there is none).
fn read_pairs(ctx: &mut Ctx<'_>, key: &[u8]) -> CommandResult<Pairs> {
    with_hash(ctx, key, |hash, records| match hash {
        Some(hash) => hash.pairs(records),
        None => Ok(Vec::new()),
    })
}

/// A seed for the random picks of one command (SRANDMEMBER, SPOP).
pub(super) fn random_seed(salt: u64) -> u64 {
    Xorshift::new(salt).next()
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]: a small hash is one stored value, so one step
/// returns every matching field with its value and cursor 0 (as Redis does for its small
/// hashes); a table is scanned a few buckets per step.
pub(super) fn hscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    // Redis's order: the cursor, then the key (a missing key is an empty scan whatever the
    // options), then its type, then the options.
    let cursor = super::parse_cursor(&args[2])?;
    let options = super::parse_scan_options(&args[3..], false);
    let (next, matching) = with_hash(ctx, &args[1], |hash, records| {
        let Some(hash) = hash else {
            return Ok((0, Vec::new()));
        };
        let options = options?;
        let keep = |field: &[u8], _: &[u8]| {
            options
                .pattern
                .as_ref()
                .is_none_or(|p| crate::glob::matches(p, field, false))
        };
        match &hash.table {
            Table::Inline(pairs) => Ok((
                0,
                pairs.iter().filter(|(f, v)| keep(f, v)).cloned().collect(),
            )),
            Table::Records(table) => {
                super::sets::scan_table(table, records, cursor, options.count, keep)
            }
        }
    })?;
    ctx.w.array(2);
    ctx.w.bulk(next.to_string().as_bytes());
    ctx.w.array(matching.len() * 2);
    for (field, value) in &matching {
        ctx.w.bulk(field);
        ctx.w.bulk(value);
    }
    Ok(())
}

/// A small random source for HRANDFIELD (not for anything that needs unpredictability).
struct Xorshift(u64);

impl Xorshift {
    fn new(salt: u64) -> Xorshift {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Xorshift((time ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }

    /// The next 64 random bits.
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-enough in `0..bound` (bound > 0).
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}
