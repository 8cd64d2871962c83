//! Hash commands. A hash is stored whole as one engine value (see `value`), so each write
//! rewrites it: fine for the YCSB-style records these commands serve (tens of fields).

use bytes::Bytes;

use super::{errors, lower, parse_float, parse_int, strings, CommandResult, Ctx};
use crate::keyspace::WRONGTYPE;
use crate::value::{decode_hash, encode_hash, Kind, Stored};

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn pairs_of(stored: Option<Stored>) -> Result<Option<(Pairs, u64)>, String> {
    match stored {
        Some(s) if s.kind != Kind::Hash => Err(WRONGTYPE.into()),
        Some(s) => {
            let pairs = decode_hash(&s.payload)
                .map_err(|m| format!("ERR stored hash is damaged: {}", m.0))?;
            Ok(Some((pairs, s.expire_at_ms)))
        }
        None => Ok(None),
    }
}

fn read_pairs(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Pairs, String> {
    let stored = ctx
        .server
        .keyspace
        .read(ctx.session, ctx.client.database, key)?;
    Ok(pairs_of(stored)?.map(|(p, _)| p).unwrap_or_default())
}

pub(super) fn run(ctx: &mut Ctx<'_>, name: &str, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let key = &args[1][..];
    match name {
        "hset" | "hmset" | "hsetnx" => {
            if name != "hsetnx" && !args.len().is_multiple_of(2) {
                return Err(super::arity_error(name));
            }
            let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
            let (mut pairs, expire) = pairs_of(txn.get(db, key)?)?.unwrap_or_default();
            let mut added = 0;
            for pair in args[2..].chunks(2) {
                match pairs.iter_mut().find(|(f, _)| f[..] == pair[0][..]) {
                    Some(_) if name == "hsetnx" => {
                        drop(txn);
                        ctx.w.int(0);
                        return Ok(());
                    }
                    Some((_, value)) => *value = pair[1].to_vec(),
                    None => {
                        pairs.push((pair[0].to_vec(), pair[1].to_vec()));
                        added += 1;
                    }
                }
            }
            txn.put(db, key, Kind::Hash, expire, &encode_hash(&pairs))?;
            let mark = txn.commit()?;
            ctx.client.note_write(mark);
            match name {
                "hmset" => ctx.w.ok(),
                "hsetnx" => ctx.w.int(1),
                _ => ctx.w.int(added),
            }
        }
        "hget" => {
            let pairs = read_pairs(ctx, key)?;
            let value = pairs
                .iter()
                .find(|(f, _)| f[..] == args[2][..])
                .map(|(_, v)| &v[..]);
            ctx.w.bulk_or_null(value);
        }
        "hmget" => {
            let pairs = read_pairs(ctx, key)?;
            ctx.w.array(args.len() - 2);
            for field in &args[2..] {
                let value = pairs
                    .iter()
                    .find(|(f, _)| f[..] == field[..])
                    .map(|(_, v)| &v[..]);
                ctx.w.bulk_or_null(value);
            }
        }
        "hgetall" => {
            let pairs = read_pairs(ctx, key)?;
            ctx.w.map(pairs.len());
            for (field, value) in &pairs {
                ctx.w.bulk(field);
                ctx.w.bulk(value);
            }
        }
        "hkeys" | "hvals" => {
            let pairs = read_pairs(ctx, key)?;
            ctx.w.array(pairs.len());
            for (field, value) in &pairs {
                ctx.w.bulk(if name == "hkeys" { field } else { value });
            }
        }
        "hlen" => {
            let pairs = read_pairs(ctx, key)?;
            ctx.w.int(pairs.len() as i64);
        }
        "hexists" => {
            let pairs = read_pairs(ctx, key)?;
            ctx.w
                .int(pairs.iter().any(|(f, _)| f[..] == args[2][..]) as i64);
        }
        "hstrlen" => {
            let pairs = read_pairs(ctx, key)?;
            let length = pairs
                .iter()
                .find(|(f, _)| f[..] == args[2][..])
                .map_or(0, |(_, v)| v.len());
            ctx.w.int(length as i64);
        }
        "hdel" => {
            let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
            let Some((mut pairs, expire)) = pairs_of(txn.get(db, key)?)? else {
                drop(txn);
                ctx.w.int(0);
                return Ok(());
            };
            let before = pairs.len();
            pairs.retain(|(f, _)| !args[2..].iter().any(|a| a[..] == f[..]));
            let removed = before - pairs.len();
            if removed > 0 {
                if pairs.is_empty() {
                    txn.delete(db, key)?;
                } else {
                    txn.put(db, key, Kind::Hash, expire, &encode_hash(&pairs))?;
                }
            }
            let mark = txn.commit()?;
            ctx.client.note_write(mark);
            ctx.w.int(removed as i64);
        }
        "hincrby" => {
            let delta = parse_int(&args[3])?;
            let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
            let (mut pairs, expire) = pairs_of(txn.get(db, key)?)?.unwrap_or_default();
            let position = pairs.iter().position(|(f, _)| f[..] == args[2][..]);
            let current = match position {
                Some(i) => parse_int(&pairs[i].1)
                    .map_err(|_| "ERR hash value is not an integer".to_string())?,
                None => 0,
            };
            let result = current
                .checked_add(delta)
                .ok_or_else(|| errors::OVERFLOW.to_string())?;
            let text = result.to_string().into_bytes();
            match position {
                Some(i) => pairs[i].1 = text,
                None => pairs.push((args[2].to_vec(), text)),
            }
            txn.put(db, key, Kind::Hash, expire, &encode_hash(&pairs))?;
            let mark = txn.commit()?;
            ctx.client.note_write(mark);
            ctx.w.int(result);
        }
        "hincrbyfloat" => {
            let delta = parse_float(&args[3])?;
            let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
            let (mut pairs, expire) = pairs_of(txn.get(db, key)?)?.unwrap_or_default();
            let position = pairs.iter().position(|(f, _)| f[..] == args[2][..]);
            let current = match position {
                Some(i) => parse_float(&pairs[i].1)
                    .map_err(|_| "ERR hash value is not a float".to_string())?,
                None => 0.0,
            };
            let result = current + delta;
            if !result.is_finite() {
                return Err("ERR increment would produce NaN or Infinity".into());
            }
            let text = strings::format_float(result).into_bytes();
            match position {
                Some(i) => pairs[i].1 = text.clone(),
                None => pairs.push((args[2].to_vec(), text.clone())),
            }
            txn.put(db, key, Kind::Hash, expire, &encode_hash(&pairs))?;
            let mark = txn.commit()?;
            ctx.client.note_write(mark);
            ctx.w.bulk(&text);
        }
        "hrandfield" => hrandfield(ctx, args)?,
        "hscan" => hscan(ctx, args)?,
        _ => unreachable!("dispatch sends only hash commands here"),
    }
    Ok(())
}

/// HRANDFIELD key [count [WITHVALUES]]: a positive count picks distinct fields, a negative one
/// may repeat them. A repeating count is bounded: its reply must fit client-output-buffer-limit
/// (at least 16 bytes a field), so a client cannot make the server build an unbounded reply.
fn hrandfield(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let Some(count_argument) = args.get(2) else {
        let pairs = read_pairs(ctx, &args[1])?;
        let mut rng = Xorshift::new(ctx.client.id);
        let pick = (!pairs.is_empty()).then(|| &pairs[rng.below(pairs.len())].0[..]);
        ctx.w.bulk_or_null(pick);
        return Ok(());
    };
    let count = parse_int(count_argument)?;
    let with_values = match args.get(3) {
        None => false,
        Some(word) if args.len() == 4 && lower(word) == "withvalues" => true,
        Some(_) => return Err(errors::SYNTAX.into()),
    };
    let limit = ctx.server.settings.read().client_output_buffer_limit_bytes;
    if count.unsigned_abs() > (limit / 16).max(1) {
        return Err(format!(
            "ERR count is out of range: its reply would exceed client-output-buffer-limit \
             ({limit} bytes)"
        ));
    }
    let pairs = read_pairs(ctx, &args[1])?;
    let mut rng = Xorshift::new(ctx.client.id);
    let chosen: Vec<usize> = if pairs.is_empty() || count == 0 {
        Vec::new()
    } else if count < 0 {
        (0..count.unsigned_abs())
            .map(|_| rng.below(pairs.len()))
            .collect()
    } else {
        // Distinct: a partial Fisher-Yates shuffle of the indexes.
        let mut indexes: Vec<usize> = (0..pairs.len()).collect();
        let take = (count as usize).min(pairs.len());
        for i in 0..take {
            let j = i + rng.below(pairs.len() - i);
            indexes.swap(i, j);
        }
        indexes.truncate(take);
        indexes
    };
    let resp3 = ctx.w.encoder.protocol() == prefixkv_resp::Protocol::Resp3;
    match (with_values, resp3) {
        (true, true) => {
            ctx.w.array(chosen.len());
            for &i in &chosen {
                ctx.w.array(2);
                ctx.w.bulk(&pairs[i].0);
                ctx.w.bulk(&pairs[i].1);
            }
        }
        (true, false) => {
            ctx.w.array(chosen.len() * 2);
            for &i in &chosen {
                ctx.w.bulk(&pairs[i].0);
                ctx.w.bulk(&pairs[i].1);
            }
        }
        (false, _) => {
            ctx.w.array(chosen.len());
            for &i in &chosen {
                ctx.w.bulk(&pairs[i].0);
            }
        }
    }
    Ok(())
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]: a hash is one stored value, so one step
/// returns every matching field with its value and cursor 0 (as Redis does for its small
/// hashes).
fn hscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    // Redis's order: the cursor, then the key (a missing key is an empty scan whatever the
    // options), then its type, then the options.
    super::parse_cursor(&args[2])?;
    let pairs = read_pairs(ctx, &args[1])?;
    if pairs.is_empty() {
        ctx.w.array(2);
        ctx.w.bulk(b"0");
        ctx.w.array(0);
        return Ok(());
    }
    let pattern = super::parse_scan_options(&args[3..], false)?.pattern;
    let matching: Vec<&(Vec<u8>, Vec<u8>)> = pairs
        .iter()
        .filter(|(field, _)| {
            pattern
                .as_ref()
                .is_none_or(|p| crate::glob::matches(p, field, false))
        })
        .collect();
    ctx.w.array(2);
    ctx.w.bulk(b"0");
    ctx.w.array(matching.len() * 2);
    for (field, value) in matching {
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

    /// Uniform-enough in `0..bound` (bound > 0).
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound as u64) as usize
    }
}
