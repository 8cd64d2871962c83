//! `cjson.encode`: Lua values to JSON text by Lua CJSON's rules.
//!
//! Invariants:
//! - A table is an array when every key is a number >= 1 with no fraction, and it is not
//!   "excessively sparse" (max index > items * ratio and > safe, ratio > 0): that either fails
//!   ("excessively sparse array") or, with convert on, makes an object. Arrays are written for
//!   indexes 1..max (holes as `null`); an empty table is `{}`; object members come in `next`
//!   order; number keys are written as quoted numbers.
//! - Strings escape `"`, `\`, `/`, control characters (`\b \t \n \f \r`, others `\u00XX`) and
//!   0x7f; other bytes pass unchanged. Numbers use `%.<precision>g`.
//! - Nesting is walked with an explicit frame stack; the tables (and object keys) of all but
//!   the innermost level live in a Lua scratch table, so only O(1) mlua references are held.
//!   The depth check counts the Lua stack slots the C encoder would hold (1 for the argument,
//!   1 per enclosing array, 2 per enclosing object) and fails past 8000 as `lua_checkstack`
//!   does, or past the configured depth: "Cannot serialise, excessive nesting (<depth>)".
use mlua::{Function, LightUserData, Lua, Table, Value};

use super::Config;
use crate::call::{self, Raise, LUAI_MAXCSTACK};
use crate::numconv;

enum Frame {
    Array { len: i64, next: i64 },
    Object { first: bool },
}

struct Encoder<'a> {
    lua: &'a Lua,
    cfg: &'a Config,
    next: &'a Function,
    out: Vec<u8>,
    frames: Vec<Frame>,
    /// Lua stack slots the C encoder would hold for the open frames, plus its argument.
    slots: i64,
    cur: Option<Table>,
    key: Value,
    scratch: Option<Table>,
}

fn escape(c: u8) -> Option<&'static [u8]> {
    Some(match c {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        b'/' => b"\\/",
        0x08 => b"\\b",
        b'\t' => b"\\t",
        b'\n' => b"\\n",
        0x0c => b"\\f",
        b'\r' => b"\\r",
        _ => return None,
    })
}

pub(crate) fn append_string(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push(b'"');
    for &c in s {
        if let Some(e) = escape(c) {
            out.extend_from_slice(e);
        } else if c < 0x20 || c == 0x7f {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(c >> 4)]);
            out.push(HEX[usize::from(c & 15)]);
        } else {
            out.push(c);
        }
    }
    out.push(b'"');
}

fn value_type(v: &Value) -> &'static str {
    call::type_name(Some(v))
}

impl Encoder<'_> {
    fn fail(&self, what: &str, reason: &str) -> Raise {
        call::error(self.lua, format!("Cannot serialise {what}: {reason}"))
    }

    fn check_size(&self) -> Result<(), Raise> {
        let max = self.cfg.max_output;
        if self.out.len() > max {
            return Err(call::error(
                self.lua,
                format!("Cannot serialise, output exceeds {max} bytes"),
            ));
        }
        Ok(())
    }

    fn number(&mut self, n: f64) -> Result<(), Raise> {
        match self.cfg.encode_invalid_numbers {
            0 if !n.is_finite() => return Err(self.fail("number", "must not be NaN or Inf")),
            1 if n.is_nan() => {
                self.out.extend_from_slice(b"nan");
                return Ok(());
            }
            2 if !n.is_finite() => {
                self.out.extend_from_slice(b"null");
                return Ok(());
            }
            _ => {}
        }
        let p = self.cfg.encode_number_precision.clamp(1, 14) as usize;
        self.out
            .extend_from_slice(numconv::format_g(n, p).as_bytes());
        Ok(())
    }

    /// `lua_array_length`: the array size, or -1 for an object.
    fn array_length(&self, t: &Table) -> Result<i64, Raise> {
        let mut max: i32 = 0;
        let mut items: i32 = 0;
        for pair in t.pairs::<Value, Value>() {
            let (k, _) = pair?;
            let k = match call::as_number(&k) {
                Some(k) if k != 0.0 => k,
                _ => return Ok(-1),
            };
            if k.floor() == k && k >= 1.0 {
                if k > f64::from(max) {
                    max = call::c_int(k);
                }
                items = items.wrapping_add(1);
                continue;
            }
            return Ok(-1);
        }
        let c = self.cfg;
        if c.sparse_ratio > 0 && max > items.wrapping_mul(c.sparse_ratio) && max > c.sparse_safe {
            if c.sparse_convert == 0 {
                return Err(self.fail("table", "excessively sparse array"));
            }
            return Ok(-1);
        }
        Ok(i64::from(max))
    }

    /// Opens `t` as the innermost frame, saving the current one in the scratch table.
    fn open(&mut self, t: Table, frame: Frame) -> Result<(), Raise> {
        if let Some(cur) = self.cur.take() {
            let d = self.frames.len() as i64;
            if self.scratch.is_none() {
                self.scratch = Some(self.lua.create_table()?);
            }
            if let Some(s) = &self.scratch {
                s.raw_set(2 * d - 1, cur)?;
                s.raw_set(2 * d, std::mem::replace(&mut self.key, Value::Nil))?;
            }
        }
        self.slots += match frame {
            Frame::Array { .. } => 1,
            Frame::Object { .. } => 2,
        };
        self.frames.push(frame);
        self.cur = Some(t);
        self.key = Value::Nil;
        Ok(())
    }

    fn close(&mut self) -> Result<(), Raise> {
        if let Some(f) = self.frames.pop() {
            self.slots -= match f {
                Frame::Array { .. } => 1,
                Frame::Object { .. } => 2,
            };
        }
        self.cur = None;
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
        Ok(())
    }

    fn value(&mut self, v: Value) -> Result<(), Raise> {
        match v {
            Value::String(s) => append_string(&mut self.out, &s.as_bytes()),
            Value::Integer(_) | Value::Number(_) => {
                self.number(call::as_number(&v).unwrap_or(0.0))?
            }
            Value::Boolean(b) => self
                .out
                .extend_from_slice(if b { b"true" } else { b"false" }),
            Value::Nil => self.out.extend_from_slice(b"null"),
            Value::LightUserData(LightUserData(p)) if p.is_null() => {
                self.out.extend_from_slice(b"null")
            }
            Value::Table(t) => {
                let depth = self.frames.len() as i64 + 1;
                if depth > i64::from(self.cfg.encode_max_depth) || self.slots + 3 > LUAI_MAXCSTACK {
                    return Err(call::error(
                        self.lua,
                        format!("Cannot serialise, excessive nesting ({depth})"),
                    ));
                }
                let len = self.array_length(&t)?;
                if len > 0 {
                    self.out.push(b'[');
                    self.open(t, Frame::Array { len, next: 1 })?;
                } else {
                    self.out.push(b'{');
                    self.open(t, Frame::Object { first: true })?;
                }
            }
            other => return Err(self.fail(value_type(&other), "type not supported")),
        }
        self.check_size()
    }

    /// Writes the next member of the innermost frame, or closes it.
    fn step(&mut self) -> Result<(), Raise> {
        let Some(cur) = self.cur.clone() else {
            return Ok(());
        };
        match self.frames.last_mut() {
            Some(Frame::Array { len, next }) => {
                if *next > *len {
                    self.out.push(b']');
                    return self.close();
                }
                let i = *next;
                *next += 1;
                if i > 1 {
                    self.out.push(b',');
                }
                let v: Value = cur.raw_get(i)?;
                self.value(v)
            }
            Some(Frame::Object { first }) => {
                let was_first = *first;
                let (k, v): (Value, Value) = self.next.call((cur, self.key.clone()))?;
                if k.is_nil() {
                    self.out.push(b'}');
                    return self.close();
                }
                if let Some(Frame::Object { first }) = self.frames.last_mut() {
                    *first = false;
                }
                if !was_first {
                    self.out.push(b',');
                }
                match &k {
                    Value::String(s) => {
                        append_string(&mut self.out, &s.as_bytes());
                        self.out.push(b':');
                    }
                    Value::Integer(_) | Value::Number(_) => {
                        self.out.push(b'"');
                        self.number(call::as_number(&k).unwrap_or(0.0))?;
                        self.out.extend_from_slice(b"\":");
                    }
                    other => {
                        return Err(
                            self.fail(value_type(other), "table key must be a number or string")
                        );
                    }
                }
                self.key = k;
                self.value(v)
            }
            None => Ok(()),
        }
    }
}

/// Encodes `root` as JSON.
pub(crate) fn encode(
    lua: &Lua,
    cfg: &Config,
    next: &Function,
    root: Value,
) -> Result<Vec<u8>, Raise> {
    let mut e = Encoder {
        lua,
        cfg,
        next,
        out: Vec::new(),
        frames: Vec::new(),
        slots: 1,
        cur: None,
        key: Value::Nil,
        scratch: None,
    };
    e.value(root)?;
    while !e.frames.is_empty() {
        e.step()?;
    }
    Ok(e.out)
}
