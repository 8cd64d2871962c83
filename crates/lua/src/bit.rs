//! `bit`: LuaBitOp 1.0.2 as Redis embeds it, 32-bit operations on Lua 5.1 numbers.
//!
//! Invariants:
//! - An argument becomes 32 bits as LuaBitOp does it: add 2^52+2^51 to the double and take the
//!   low 32 bits of its representation (so 2^32+1 -> 1, -1 -> 0xffffffff, 1.5 -> 2 rounding
//!   to even). Non-numbers are 0, and a 0 from a non-number (`lua_isnumber` false) is the
//!   error "number expected, got <type>"; numeric strings are numbers.
//! - Results are signed 32-bit values returned as Lua numbers; shift counts use their low 5
//!   bits.
//! - `band`/`bor`/`bxor` read argument 1 first, then the others from the last to the second,
//!   so the error names the same argument Redis names.
//! - Difference from Redis 7.0.15: `bit.tohex(x, -2147483648)` returns 8 upper-case digits, as
//!   Redis 7.0.16+ does after CVE-2024-31449; 7.0.15 reads past a stack buffer there.
use mlua::{Lua, Table};

use crate::call::{self, num, Args, Outcome, Raise, Returns};

/// LuaBitOp's `barg`.
fn barg(lua: &Lua, args: &Args, i: usize) -> Result<u32, Raise> {
    let n = call::to_number(lua, args.get(i).as_ref())?;
    let b = (n.unwrap_or(0.0) + 6_755_399_441_055_744.0).to_bits() as u32;
    if b == 0 && n.is_none() {
        return Err(call::type_error(lua, args, i, "number"));
    }
    Ok(b)
}

fn ret(b: u32) -> Outcome {
    Ok(Returns::one(num(f64::from(b as i32))))
}

fn fold(lua: &Lua, args: &Args, op: fn(u32, u32) -> u32) -> Outcome {
    let mut b = barg(lua, args, 1)?;
    let mut i = args.top();
    while i > 1 {
        b = op(b, barg(lua, args, i)?);
        i -= 1;
    }
    ret(b)
}

fn shift(lua: &Lua, args: &Args, op: fn(u32, u32) -> u32) -> Outcome {
    let b = barg(lua, args, 1)?;
    let n = barg(lua, args, 2)? & 31;
    ret(op(b, n))
}

fn tohex(lua: &Lua, args: &Args) -> Outcome {
    let mut b = barg(lua, args, 1)?;
    let mut n: i32 = if args.get(2).is_none() {
        8
    } else {
        barg(lua, args, 2)? as i32
    };
    let mut digits = b"0123456789abcdef";
    if n == i32::MIN {
        n = i32::MIN + 1;
    }
    if n < 0 {
        n = -n;
        digits = b"0123456789ABCDEF";
    }
    let n = n.min(8) as usize;
    let mut buf = [0u8; 8];
    for i in (0..n).rev() {
        buf[i] = digits[(b & 15) as usize];
        b >>= 4;
    }
    Ok(Returns::one(mlua::Value::String(
        lua.create_string(&buf[..n])?,
    )))
}

/// Builds the `bit` table.
pub(crate) fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("tobit", call::function(lua, 0, |l, a| ret(barg(l, a, 1)?))?)?;
    t.raw_set("bnot", call::function(lua, 0, |l, a| ret(!barg(l, a, 1)?))?)?;
    t.raw_set(
        "band",
        call::function(lua, 0, |l, a| fold(l, a, |x, y| x & y))?,
    )?;
    t.raw_set(
        "bor",
        call::function(lua, 0, |l, a| fold(l, a, |x, y| x | y))?,
    )?;
    t.raw_set(
        "bxor",
        call::function(lua, 0, |l, a| fold(l, a, |x, y| x ^ y))?,
    )?;
    t.raw_set(
        "lshift",
        call::function(lua, 0, |l, a| shift(l, a, |b, n| b << n))?,
    )?;
    t.raw_set(
        "rshift",
        call::function(lua, 0, |l, a| shift(l, a, |b, n| b >> n))?,
    )?;
    t.raw_set(
        "arshift",
        call::function(lua, 0, |l, a| shift(l, a, |b, n| ((b as i32) >> n) as u32))?,
    )?;
    t.raw_set(
        "rol",
        call::function(lua, 0, |l, a| shift(l, a, u32::rotate_left))?,
    )?;
    t.raw_set(
        "ror",
        call::function(lua, 0, |l, a| shift(l, a, u32::rotate_right))?,
    )?;
    t.raw_set(
        "bswap",
        call::function(lua, 0, |l, a| ret(barg(l, a, 1)?.swap_bytes()))?,
    )?;
    t.raw_set("tohex", call::function(lua, 0, tohex)?)?;
    Ok(t)
}
