//! `cmsgpack.unpack`, `unpack_one`, `unpack_limit`: MessagePack to Lua values.
//!
//! Invariants: see the parent module. In particular every length read from the input is
//! compared with the bytes left before a string is made, the stack-slot count mirrors the C
//! decoder's (`top` is the number of Lua stack slots it would hold below the value being
//! decoded), and only the innermost open table is held as an mlua reference.
use mlua::{Lua, Table, Value};

use crate::call::{self, num, Args, Outcome, Raise, Returns, LUAI_MAXCSTACK};

enum Fail {
    Eof,
    BadFormat,
    Raise(Raise),
}

impl From<mlua::Error> for Fail {
    fn from(e: mlua::Error) -> Self {
        Fail::Raise(Raise::Lua(e))
    }
}

enum Frame {
    Array {
        remaining: u64,
        next: i64,
        base: i64,
    },
    Map {
        remaining: u64,
        has_key: bool,
        base: i64,
    },
}

struct Decoder<'a> {
    lua: &'a Lua,
    data: &'a [u8],
    pos: usize,
    frames: Vec<Frame>,
    cur: Option<Table>,
    key: Value,
    scratch: Option<Table>,
}

enum Header {
    Value(Value),
    Array(u64),
    Map(u64),
}

impl Decoder<'_> {
    fn left(&self) -> usize {
        self.data.len() - self.pos
    }

    fn need(&self, n: usize) -> Result<(), Fail> {
        if self.left() < n {
            Err(Fail::Eof)
        } else {
            Ok(())
        }
    }

    fn be(&self, from: usize, n: usize) -> u64 {
        self.data[self.pos + from..self.pos + from + n]
            .iter()
            .fold(0u64, |a, &b| (a << 8) | u64::from(b))
    }

    fn string(&mut self, hdr: usize, len: usize) -> Result<Header, Fail> {
        // The length is checked against the bytes present before anything is allocated.
        if len > self.left().saturating_sub(hdr) {
            return Err(Fail::Eof);
        }
        let s = self
            .lua
            .create_string(&self.data[self.pos + hdr..self.pos + hdr + len])?;
        self.pos += hdr + len;
        Ok(Header::Value(Value::String(s)))
    }

    fn scalar(&mut self, size: usize, v: f64) -> Header {
        self.pos += size;
        Header::Value(num(v))
    }

    /// Reads one item's header (a whole scalar or string, or a container's length).
    fn header(&mut self) -> Result<Header, Fail> {
        let b = self.data[self.pos];
        Ok(match b {
            0xcc | 0xd0 => {
                self.need(2)?;
                let x = self.data[self.pos + 1];
                self.scalar(
                    2,
                    if b == 0xcc {
                        f64::from(x)
                    } else {
                        f64::from(x as i8)
                    },
                )
            }
            0xcd | 0xd1 => {
                self.need(3)?;
                let x = self.be(1, 2) as u16;
                self.scalar(
                    3,
                    if b == 0xcd {
                        f64::from(x)
                    } else {
                        f64::from(x as i16)
                    },
                )
            }
            0xce | 0xd2 => {
                self.need(5)?;
                let x = self.be(1, 4) as u32;
                self.scalar(
                    5,
                    if b == 0xce {
                        f64::from(x)
                    } else {
                        f64::from(x as i32)
                    },
                )
            }
            // Both through lua_Integer: uint64 above 2^63 wraps negative as in Redis.
            0xcf | 0xd3 => {
                self.need(9)?;
                let x = self.be(1, 8);
                self.scalar(9, x as i64 as f64)
            }
            0xc0 => self.value(1, Value::Nil),
            0xc3 => self.value(1, Value::Boolean(true)),
            0xc2 => self.value(1, Value::Boolean(false)),
            0xca => {
                self.need(5)?;
                let f = f32::from_bits(self.be(1, 4) as u32);
                self.scalar(5, f64::from(f))
            }
            0xcb => {
                self.need(9)?;
                let d = f64::from_bits(self.be(1, 8));
                self.scalar(9, d)
            }
            0xd9 => {
                self.need(2)?;
                let l = self.be(1, 1) as usize;
                self.string(2, l)?
            }
            0xda => {
                self.need(3)?;
                let l = self.be(1, 2) as usize;
                self.string(3, l)?
            }
            0xdb => {
                self.need(5)?;
                let l = self.be(1, 4) as usize;
                self.string(5, l)?
            }
            0xdc | 0xde => {
                self.need(3)?;
                let l = self.be(1, 2);
                self.pos += 3;
                if b == 0xdc {
                    Header::Array(l)
                } else {
                    Header::Map(l)
                }
            }
            0xdd | 0xdf => {
                self.need(5)?;
                let l = self.be(1, 4);
                self.pos += 5;
                if b == 0xdd {
                    Header::Array(l)
                } else {
                    Header::Map(l)
                }
            }
            _ if b & 0x80 == 0 => self.scalar(1, f64::from(b)),
            _ if b & 0xe0 == 0xe0 => self.scalar(1, f64::from(b as i8)),
            _ if b & 0xe0 == 0xa0 => self.string(1, usize::from(b & 0x1f))?,
            _ if b & 0xf0 == 0x90 => {
                self.pos += 1;
                Header::Array(u64::from(b & 0xf))
            }
            _ if b & 0xf0 == 0x80 => {
                self.pos += 1;
                Header::Map(u64::from(b & 0xf))
            }
            _ => return Err(Fail::BadFormat),
        })
    }

    fn value(&mut self, size: usize, v: Value) -> Header {
        self.pos += size;
        Header::Value(v)
    }

    fn open(&mut self, frame: Frame) -> Result<(), Fail> {
        let t = self.lua.create_table()?;
        if let Some(cur) = self.cur.replace(t) {
            let d = self.frames.len() as i64;
            if self.scratch.is_none() {
                self.scratch = Some(self.lua.create_table()?);
            }
            if let Some(s) = &self.scratch {
                s.raw_set(2 * d - 1, cur)?;
                s.raw_set(2 * d, std::mem::replace(&mut self.key, Value::Nil))?;
            }
        }
        self.frames.push(frame);
        Ok(())
    }

    fn close(&mut self) -> Result<Value, Fail> {
        self.frames.pop();
        let done = self.cur.take().map(Value::Table).unwrap_or(Value::Nil);
        self.key = Value::Nil;
        let d = self.frames.len() as i64;
        if d > 0 {
            if let Some(s) = &self.scratch {
                self.cur = Some(s.raw_get(2 * d - 1)?);
                self.key = s.raw_get(2 * d)?;
                s.raw_set(2 * d - 1, Value::Nil)?;
                s.raw_set(2 * d, Value::Nil)?;
            }
        }
        Ok(done)
    }

    fn overflow(&self, what: &str) -> Fail {
        Fail::Raise(call::error(self.lua, format!("stack overflow ({what})")))
    }

    /// Decodes one top-level value; `top` counts the stack slots below it.
    fn one(&mut self, top: i64) -> Result<Value, Fail> {
        let mut top = top;
        'value: loop {
            self.need(1)?;
            if top + 1 > LUAI_MAXCSTACK {
                return Err(self.overflow(
                    "too many return values at once; use unpack_one or unpack_limit instead.",
                ));
            }
            let mut v = match self.header()? {
                Header::Value(v) => v,
                Header::Array(n) => {
                    if top + 2 > LUAI_MAXCSTACK {
                        return Err(self.overflow("in function mp_decode_to_lua_array"));
                    }
                    if n == 0 {
                        Value::Table(self.lua.create_table()?)
                    } else {
                        self.open(Frame::Array {
                            remaining: n,
                            next: 1,
                            base: top,
                        })?;
                        top += 2;
                        continue 'value;
                    }
                }
                Header::Map(n) => {
                    if n == 0 {
                        Value::Table(self.lua.create_table()?)
                    } else {
                        self.open(Frame::Map {
                            remaining: n,
                            has_key: false,
                            base: top,
                        })?;
                        top += 1;
                        continue 'value;
                    }
                }
            };
            loop {
                let Some(cur) = self.cur.clone() else {
                    return Ok(v);
                };
                match self.frames.last_mut() {
                    Some(Frame::Array {
                        remaining,
                        next,
                        base,
                    }) => {
                        cur.raw_set(*next, v)?;
                        *next += 1;
                        *remaining -= 1;
                        if *remaining > 0 {
                            top = *base + 2;
                            continue 'value;
                        }
                        v = self.close()?;
                    }
                    Some(Frame::Map {
                        remaining,
                        has_key,
                        base,
                    }) => {
                        if !*has_key {
                            *has_key = true;
                            top = *base + 2;
                            self.key = v;
                            continue 'value;
                        }
                        *has_key = false;
                        *remaining -= 1;
                        let more = *remaining > 0;
                        let base = *base;
                        let key = std::mem::replace(&mut self.key, Value::Nil);
                        match &key {
                            Value::Nil => {
                                return Err(Fail::Raise(Raise::Msg(b"table index is nil".to_vec())))
                            }
                            Value::Number(n) if n.is_nan() => {
                                return Err(Fail::Raise(Raise::Msg(
                                    b"table index is NaN".to_vec(),
                                )));
                            }
                            _ => {}
                        }
                        cur.raw_set(key, v)?;
                        if more {
                            top = base + 1;
                            continue 'value;
                        }
                        v = self.close()?;
                    }
                    None => return Ok(v),
                }
            }
        }
    }
}

/// `mp_unpack_full`.
fn unpack_full(lua: &Lua, args: &Args, limit: i64, offset: i64, base: i64) -> Outcome {
    let s = call::check_string(lua, args, 1)?;
    let data = s.as_bytes();
    let len = data.len();
    let decode_all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        let msg = format!(
            "Invalid request to unpack with offset of {} and limit of {}.",
            offset as i32, len as i32
        );
        return Err(call::error(lua, msg));
    }
    if offset as u64 > len as u64 {
        let msg = format!(
            "Start offset {} greater than input length {}.",
            offset as i32, len as i32
        );
        return Err(call::error(lua, msg));
    }
    let limit = if decode_all {
        i64::from(i32::MAX)
    } else {
        limit
    };
    let mut d = Decoder {
        lua,
        data: &data,
        pos: offset as usize,
        frames: Vec::new(),
        cur: None,
        key: Value::Nil,
        scratch: None,
    };
    let mut res = Returns::new();
    let mut cnt: i64 = 0;
    while d.left() > 0 && cnt < limit {
        match d.one(base + cnt) {
            Ok(v) => res.push(lua, v)?,
            Err(Fail::Eof) => return Err(call::error(lua, "Missing bytes in input.")),
            Err(Fail::BadFormat) => return Err(call::error(lua, "Bad data format in input.")),
            Err(Fail::Raise(r)) => return Err(r),
        }
        cnt += 1;
    }
    if !decode_all {
        if base + cnt + 1 > LUAI_MAXCSTACK {
            return Err(call::error(
                lua,
                "stack overflow (in function mp_unpack_full)",
            ));
        }
        let next = if d.left() == 0 {
            -1
        } else {
            (len - d.left()) as i64
        };
        res.push_front(lua, num(next as f64))?;
    }
    Ok(res)
}

/// `cmsgpack.unpack(s)`: every value in `s`.
pub(super) fn unpack(lua: &Lua, args: &Args) -> Outcome {
    unpack_full(lua, args, 0, 0, args.top() as i64)
}

/// `cmsgpack.unpack_one(s [, offset])`: the next offset (-1 at the end) and one value.
pub(super) fn unpack_one(lua: &Lua, args: &Args) -> Outcome {
    let offset = call::opt_integer(lua, args, 2, 0)?;
    unpack_full(lua, args, 1, offset, 1)
}

/// `cmsgpack.unpack_limit(s, limit [, offset])`: the next offset and up to `limit` values.
pub(super) fn unpack_limit(lua: &Lua, args: &Args) -> Outcome {
    let limit = call::check_integer(lua, args, 2)?;
    let offset = call::opt_integer(lua, args, 3, 0)?;
    unpack_full(lua, args, limit, offset, 1)
}
