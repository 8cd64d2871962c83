//! Bit commands on strings: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, with Redis 7.2's argument
//! rules and replies (bit 0 is the most significant bit of byte 0). Ranges are computed in bits:
//! a BYTE range `[s, e]` is the bit range `[8s, 8e + 7]`.
//!
//! Bounded: SETBIT refuses an offset whose byte is at or past `proto-max-bulk-len` before it
//! allocates anything, as Redis does; BITOP's result is at most its longest source.

use bytes::Bytes;

use super::{lower, parse_int, strings, CommandError, CommandResult, Ctx};
use crate::value::Kind;

/// Two checks answer it; one constructor keeps the wording in one place.
fn bit_offset_error() -> CommandError {
    CommandError::err("bit offset is not an integer or out of range")
}

/// GETBIT.
pub(super) fn getbit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let offset = bit_offset(ctx, &args[2])?;
    let value = strings::read_string(ctx, &args[1])?.unwrap_or_default();
    ctx.w.int(i64::from(bit_at(&value, offset)));
    Ok(())
}

/// Redis's bit offset: 0 ≤ offset and offset / 8 < proto-max-bulk-len.
fn bit_offset(ctx: &Ctx<'_>, argument: &[u8]) -> CommandResult<u64> {
    let offset = parse_int(argument).map_err(|_| bit_offset_error())?;
    let limit = ctx.server.settings.read().proto_max_bulk_len_bytes;
    if offset < 0 || (offset as u64 >> 3) >= limit {
        return Err(bit_offset_error());
    }
    Ok(offset as u64)
}

fn bit_at(value: &[u8], offset: u64) -> bool {
    let byte = (offset >> 3) as usize;
    byte < value.len() && value[byte] & (0x80 >> (offset & 7)) != 0
}

pub(super) fn setbit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let offset = bit_offset(ctx, &args[2])?;
    let on = match &args[3][..] {
        b"0" => false,
        b"1" => true,
        _ => return Err(CommandError::err("bit is not an integer or out of range")),
    };
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[&args[1]]);
    let (mut value, expire) = match txn.get(db, &args[1])? {
        Some(stored) if stored.kind != Kind::String => return Err(CommandError::WrongType),
        Some(stored) => (stored.payload, stored.expire_at_ms),
        None => (Vec::new(), 0),
    };
    let byte = (offset >> 3) as usize;
    // A new key or a longer value is a change even when the bit is already as asked.
    let mut dirty = value.is_empty() || value.len() <= byte;
    if value.len() <= byte {
        value.resize(byte + 1, 0);
    }
    let mask = 0x80u8 >> (offset & 7);
    let was = value[byte] & mask != 0;
    dirty |= was != on;
    if on {
        value[byte] |= mask;
    } else {
        value[byte] &= !mask;
    }
    // Unchanged: no write (and no keyspace event), as Redis 7.0.
    if dirty {
        txn.put(db, &args[1], Kind::String, expire, &value)?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(i64::from(was));
    Ok(())
}

/// Whether a range is in BITs (else BYTEs), from an optional `BYTE|BIT` argument.
fn unit_is_bit(argument: Option<&Bytes>) -> CommandResult<bool> {
    match argument.map(|a| lower(a)) {
        None => Ok(false),
        Some(word) if word == "byte" => Ok(false),
        Some(word) if word == "bit" => Ok(true),
        Some(_) => Err(CommandError::Syntax),
    }
}

/// Redis's range clamp over `total` units: negative indexes count from the end, then both are
/// clamped into the value; `None` when the range is empty.
fn clamp(start: i64, end: i64, total: i64) -> Option<(i64, i64)> {
    let start = if start < 0 { total + start } else { start }.max(0);
    let end = if end < 0 { total + end } else { end }
        .max(0)
        .min(total - 1);
    (start <= end).then_some((start, end))
}

/// The inclusive bit range `[start, end]` given in `bit` or byte units over `value`.
fn bit_range(value: &[u8], start: i64, end: i64, bit: bool) -> Option<(u64, u64)> {
    let bytes = value.len() as i64;
    if bit {
        clamp(start, end, bytes * 8).map(|(s, e)| (s as u64, e as u64))
    } else {
        clamp(start, end, bytes).map(|(s, e)| (s as u64 * 8, e as u64 * 8 + 7))
    }
}

/// The bits `first_bit..=last_bit` of `byte_index`'s byte, as a mask (bit 0 = 0x80).
fn byte_mask(byte_index: u64, first_bit: u64, last_bit: u64) -> u8 {
    let from = if byte_index == first_bit / 8 {
        0xffu8 >> (first_bit & 7)
    } else {
        0xff
    };
    let to = if byte_index == last_bit / 8 {
        0xffu8 << (7 - (last_bit & 7))
    } else {
        0xff
    };
    from & to
}

/// Ones among bits `first_bit..=last_bit` (within the value), a byte at a time.
fn count_ones(value: &[u8], first_bit: u64, last_bit: u64) -> u64 {
    (first_bit / 8..=last_bit / 8)
        .map(|index| {
            let byte = value.get(index as usize).copied().unwrap_or(0);
            u64::from((byte & byte_mask(index, first_bit, last_bit)).count_ones())
        })
        .sum()
}

/// The first bit equal to `wanted` among `first_bit..=last_bit`, skipping whole bytes that
/// cannot hold it.
fn find_bit(value: &[u8], wanted: bool, first_bit: u64, last_bit: u64) -> Option<u64> {
    (first_bit / 8..=last_bit / 8).find_map(|index| {
        let byte = value.get(index as usize).copied().unwrap_or(0);
        let mask = byte_mask(index, first_bit, last_bit);
        // The candidates of this byte, as ones.
        let candidates = if wanted { byte & mask } else { !byte & mask };
        (candidates != 0).then(|| index * 8 + u64::from(candidates.leading_zeros()))
    })
}

pub(super) fn bitcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let range = match args.len() {
        2 => None,
        4 | 5 => Some((
            parse_int(&args[2])?,
            parse_int(&args[3])?,
            unit_is_bit(args.get(4))?,
        )),
        _ => return Err(CommandError::Syntax),
    };
    let value = strings::read_string(ctx, &args[1])?.unwrap_or_default();
    let count = match range {
        None => value.iter().map(|byte| u64::from(byte.count_ones())).sum(),
        // Both counted from the end and crossed: empty before any clamping (Redis's rule, which
        // BITPOS does not share).
        Some((start, end, _)) if start < 0 && end < 0 && start > end => 0,
        Some((start, end, bit)) => bit_range(&value, start, end, bit)
            .map_or(0, |(first, last)| count_ones(&value, first, last)),
    };
    ctx.w.int(count as i64);
    Ok(())
}

pub(super) fn bitpos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let wanted = match parse_int(&args[2])? {
        0 => false,
        1 => true,
        _ => return Err(CommandError::err("The bit argument must be 1 or 0.")),
    };
    if args.len() > 6 {
        return Err(CommandError::Syntax);
    }
    let start = args.get(3).map(|a| parse_int(a)).transpose()?;
    let end = args.get(4).map(|a| parse_int(a)).transpose()?;
    let bit = unit_is_bit(args.get(5))?;
    let Some(value) = strings::read_string(ctx, &args[1])? else {
        // A missing key is an endless run of zero bits.
        ctx.w.int(if wanted { -1 } else { 0 });
        return Ok(());
    };
    let total = if bit {
        value.len() as i64 * 8
    } else {
        value.len() as i64
    };
    let range = bit_range(&value, start.unwrap_or(0), end.unwrap_or(total - 1), bit);
    let position = match range {
        None => -1,
        Some((first, last)) => match find_bit(&value, wanted, first, last) {
            Some(found) => found as i64,
            // Looking for a 0 with no end given: the string is taken as zero-padded on the right.
            None if !wanted && end.is_none() => last as i64 + 1,
            None => -1,
        },
    };
    ctx.w.int(position);
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    And,
    Or,
    Xor,
    Not,
}

pub(super) fn bitop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let op = match lower(&args[1]).as_str() {
        "and" => Op::And,
        "or" => Op::Or,
        "xor" => Op::Xor,
        "not" => Op::Not,
        _ => return Err(CommandError::Syntax),
    };
    let (destination, sources) = (&args[2], &args[3..]);
    if op == Op::Not && sources.len() != 1 {
        return Err(CommandError::err(
            "BITOP NOT must be called with a single source key.",
        ));
    }
    let db = ctx.db();
    let mut keys: Vec<&[u8]> = vec![destination];
    keys.extend(sources.iter().map(|key| &key[..]));
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &keys);
    let mut values = Vec::with_capacity(sources.len());
    for source in sources {
        values.push(match txn.get(db, source)? {
            Some(stored) if stored.kind != Kind::String => return Err(CommandError::WrongType),
            Some(stored) => stored.payload,
            None => Vec::new(),
        });
    }
    let length = values.iter().map(Vec::len).max().unwrap_or(0);
    if length == 0 {
        txn.delete(db, destination)?;
    } else {
        let byte_of = |value: &Vec<u8>, index: usize| value.get(index).copied().unwrap_or(0);
        let result: Vec<u8> = (0..length)
            .map(|index| {
                let mut bytes = values.iter().map(|value| byte_of(value, index));
                let first = bytes.next().expect("at least one source");
                match op {
                    Op::And => bytes.fold(first, |acc, byte| acc & byte),
                    Op::Or => bytes.fold(first, |acc, byte| acc | byte),
                    Op::Xor => bytes.fold(first, |acc, byte| acc ^ byte),
                    Op::Not => !first,
                }
            })
            .collect();
        txn.put(db, destination, Kind::String, 0, &result)?;
    }
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    ctx.w.int(length as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_redis_clamping() {
        let value = [0xffu8, 0x0f, 0x00];
        assert_eq!(bit_range(&value, 0, -1, false), Some((0, 23)));
        assert_eq!(bit_range(&value, 1, 1, false), Some((8, 15)));
        assert_eq!(bit_range(&value, -2, -1, true), Some((22, 23)));
        assert_eq!(bit_range(&value, 5, 2, false), None);
        assert_eq!(bit_range(&value, 3, 10, false), None);
        assert_eq!(bit_range(&[], 0, -1, false), None);
        assert_eq!(count_ones(&value, 0, 23), 12);
        assert_eq!(count_ones(&value, 4, 11), 4);
        assert!(bit_at(&value, 0) && !bit_at(&value, 8) && bit_at(&value, 12));
        assert!(!bit_at(&value, 1_000));
        assert_eq!(find_bit(&value, false, 0, 23), Some(8));
        assert_eq!(find_bit(&value, true, 9, 23), Some(12));
        assert_eq!(find_bit(&value, true, 16, 23), None);
        assert_eq!(find_bit(&value, false, 3, 5), None);
        // Against the bit-by-bit definition, over every range of a patterned value.
        let value = [0b1010_0110u8, 0x00, 0xff, 0b0001_0000];
        for first in 0..32 {
            for last in first..32 {
                let ones = (first..=last).filter(|&b| bit_at(&value, b)).count() as u64;
                assert_eq!(count_ones(&value, first, last), ones, "{first}..={last}");
                for wanted in [false, true] {
                    let slow = (first..=last).find(|&b| bit_at(&value, b) == wanted);
                    assert_eq!(
                        find_bit(&value, wanted, first, last),
                        slow,
                        "{first}..={last}"
                    );
                }
            }
        }
    }
}
