//! Hash commands. A hash is stored whole as one engine value (see `value`), so each write
//! rewrites it: fine for the YCSB-style records these commands serve (tens of fields).

use bytes::Bytes;

use super::{errors, parse_int, CommandResult, Ctx};
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
        _ => unreachable!("dispatch sends only hash commands here"),
    }
    Ok(())
}
