//! `cmsgpack`: lua-cmsgpack 0.4.0 as Redis embeds it (`pack`, `unpack`, `unpack_one`,
//! `unpack_limit`), for Lua 5.1's double-only numbers.
//!
//! Invariants:
//! - Packing: a number that is an exact int64 becomes the smallest MessagePack integer, else a
//!   float32 when the conversion is exact (infinities too), else a float64 (NaN). A table whose
//!   keys are exactly 1..n is an array (the empty table too), any other a map (keys and values
//!   in `next` order). Strings use fixstr/str8/str16/str32. Nil, functions, userdata and
//!   threads pack as nil, and a table nested 16 levels deep packs as nil (cycles end there).
//!   `pack` takes 1 to 4000 arguments, as Redis (`lua_checkstack(L, nargs)`), and concatenates.
//! - Unpacking: integers become numbers (uint64 above 2^63 wraps negative, as Redis's
//!   `lua_pushinteger` does), floats and doubles numbers, str8/16/32 and fixstr strings,
//!   arrays and maps tables (nil values leave holes; a nil or NaN key is Lua's "table index
//!   is nil"/"table index is NaN"); bin, ext and 0xc1 are "Bad data format in input.";
//!   truncated input "Missing bytes in input.".
//! - Bounded: lengths read from the input are checked against the bytes present before any
//!   string is made, and tables grow only by decoded elements. Nesting and result counts are
//!   limited by Lua 5.1's 8000-slot C stack, counted as the C decoder uses it, so the same
//!   inputs fail with the same "stack overflow (...)" errors. Decoding walks nesting with an
//!   explicit stack and keeps enclosing tables in a Lua scratch table (O(1) mlua references).
//! - `pack`'s output is bounded by `Limits::max_output_bytes` (nested self-references up to
//!   the 16 levels can ask for exponential output); Redis has no such bound.
use mlua::{Lua, Table, Value};

use crate::call::{self, Args, Outcome, Raise, Returns, LUAI_MAXCSTACK};

const MAX_NESTING: u32 = 16;

struct Packer<'a> {
    lua: &'a Lua,
    out: Vec<u8>,
    max: usize,
}

fn header(out: &mut Vec<u8>, n: usize, fix: u8, b16: u8, b32: u8) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn pack_int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_number(out: &mut Vec<u8>, n: f64) {
    if !n.is_infinite() && call::c_i64(n) as f64 == n {
        pack_int(out, call::c_i64(n));
        return;
    }
    let f = n as f32;
    if f64::from(f) == n {
        out.push(0xca);
        out.extend_from_slice(&f.to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

impl Packer<'_> {
    fn overflow(&self, what: &str) -> Raise {
        call::error(self.lua, format!("stack overflow (in function {what})"))
    }

    /// Packs `v`; `top` counts the Lua stack slots the C encoder holds with `v` on top.
    fn value(&mut self, v: &Value, level: u32, top: i64) -> Result<(), Raise> {
        match v {
            Value::Table(_) if level == MAX_NESTING => self.out.push(0xc0),
            Value::String(s) => {
                let b = s.as_bytes();
                let len = b.len();
                if len < 32 {
                    self.out.push(0xa0 | len as u8);
                } else if len <= 0xff {
                    self.out.extend_from_slice(&[0xd9, len as u8]);
                } else if len <= 0xffff {
                    self.out.push(0xda);
                    self.out.extend_from_slice(&(len as u16).to_be_bytes());
                } else {
                    self.out.push(0xdb);
                    self.out.extend_from_slice(&(len as u32).to_be_bytes());
                }
                self.out.extend_from_slice(&b);
            }
            Value::Boolean(b) => self.out.push(if *b { 0xc3 } else { 0xc2 }),
            Value::Integer(_) | Value::Number(_) => {
                pack_number(&mut self.out, call::as_number(v).unwrap_or(0.0))
            }
            Value::Table(t) => self.table(t, level, top)?,
            _ => self.out.push(0xc0),
        }
        if self.out.len() > self.max {
            let msg = format!("MessagePack pack output exceeds {} bytes", self.max);
            return Err(call::error(self.lua, msg));
        }
        Ok(())
    }

    fn table(&mut self, t: &Table, level: u32, top: i64) -> Result<(), Raise> {
        if top + 2 > LUAI_MAXCSTACK {
            return Err(self.overflow("table_is_an_array"));
        }
        let (mut count, mut max) = (0i64, 0i64);
        let mut array = true;
        for pair in t.pairs::<Value, Value>() {
            let (k, _) = pair?;
            match call::as_number(&k) {
                Some(n) if n > 0.0 && !n.is_infinite() && f64::from(call::c_int(n)) == n => {
                    max = max.max(n as i64);
                    count += 1;
                }
                _ => {
                    array = false;
                    break;
                }
            }
        }
        if array && max == count {
            if top + 1 > LUAI_MAXCSTACK {
                return Err(self.overflow("mp_encode_lua_table_as_array"));
            }
            header(&mut self.out, count as usize, 0x90, 0xdc, 0xdd);
            for j in 1..=count {
                let v: Value = t.raw_get(j)?;
                self.value(&v, level + 1, top + 1)?;
            }
            return Ok(());
        }
        if top + 3 > LUAI_MAXCSTACK {
            return Err(self.overflow("mp_encode_lua_table_as_map"));
        }
        let mut len = 0usize;
        for pair in t.pairs::<Value, Value>() {
            pair?;
            len += 1;
        }
        header(&mut self.out, len, 0x80, 0xde, 0xdf);
        for pair in t.pairs::<Value, Value>() {
            let (k, v) = pair?;
            self.value(&k, level + 1, top + 3)?;
            self.value(&v, level + 1, top + 2)?;
        }
        Ok(())
    }
}

fn pack(lua: &Lua, args: &Args, max: usize) -> Outcome {
    let nargs = args.too_many.unwrap_or(args.top() as i64);
    if nargs == 0 {
        return Err(call::arg_error(lua, 0, "MessagePack pack needs input."));
    }
    if args.too_many.is_some() {
        return Err(call::arg_error(
            lua,
            0,
            "Too many arguments for MessagePack pack.",
        ));
    }
    let mut p = Packer {
        lua,
        max,
        out: Vec::new(),
    };
    for i in 1..=args.top() {
        let v = args.get(i).unwrap_or(Value::Nil);
        p.value(&v, 0, nargs + i as i64)?;
    }
    Ok(Returns::one(Value::String(lua.create_string(&p.out)?)))
}

mod unpack;

/// Builds the `cmsgpack` table.
pub(crate) fn create(lua: &Lua, limits: crate::Limits) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    // Redis refuses more than 4000 arguments (lua_checkstack(L, nargs) within 8000 slots).
    let max = limits.max_output_bytes;
    t.raw_set(
        "pack",
        call::function(lua, LUAI_MAXCSTACK / 2, move |l, a| pack(l, a, max))?,
    )?;
    t.raw_set("unpack", call::function(lua, 0, unpack::unpack)?)?;
    t.raw_set("unpack_one", call::function(lua, 0, unpack::unpack_one)?)?;
    t.raw_set(
        "unpack_limit",
        call::function(lua, 0, unpack::unpack_limit)?,
    )?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}
