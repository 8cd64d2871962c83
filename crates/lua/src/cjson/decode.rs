//! `cjson.decode`: JSON text to Lua values by Lua CJSON's rules.
//!
//! Invariants:
//! - The text is read as the C code reads a NUL-terminated string: a NUL byte ends the input
//!   (inside a string it is "unexpected end of string"), and a text whose first or second byte
//!   is NUL is refused as UTF-16/UTF-32.
//! - Tokens, numbers (C `strtod`, so hexadecimal, `inf`, `nan` and leading zeros are accepted
//!   while `decode_invalid_numbers` is on, as in Redis), escapes (`\uXXXX` with surrogate
//!   pairs to UTF-8) and the error texts "Expected <what> but found <token> at character <n>"
//!   follow the C parser exactly; `null` is `cjson.null` (a NULL light userdata).
//! - Nesting is parsed with an explicit frame stack, the tables of enclosing levels kept in a
//!   Lua scratch table (O(1) mlua references). The depth check counts the Lua stack slots the
//!   C parser would hold (1 for the argument, 1 per enclosing array, 2 per enclosing object)
//!   against 8000 and the configured maximum: "Found too many nested data structures (<d>) at
//!   character <n>".
//! - Allocation is bounded by the input: a string token is at most the input's length, and
//!   tables grow only by parsed members.
use mlua::{Lua, Table, Value};

use super::Config;
use crate::call::{self, Raise, LUAI_MAXCSTACK};
use crate::numconv;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str,
    Number,
    Boolean,
    Null,
    Colon,
    Comma,
    End,
    Error,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ObjBegin => "T_OBJ_BEGIN",
            Kind::ObjEnd => "T_OBJ_END",
            Kind::ArrBegin => "T_ARR_BEGIN",
            Kind::ArrEnd => "T_ARR_END",
            Kind::Str => "T_STRING",
            Kind::Number => "T_NUMBER",
            Kind::Boolean => "T_BOOLEAN",
            Kind::Null => "T_NULL",
            Kind::Colon => "T_COLON",
            Kind::Comma => "T_COMMA",
            Kind::End => "T_END",
            Kind::Error => "T_ERROR",
        }
    }
}

struct Token {
    kind: Kind,
    /// Byte offset of the token (for errors: where the error was found).
    index: usize,
    num: f64,
    boolean: bool,
    err: &'static str,
}

struct Parser<'a> {
    lua: &'a Lua,
    cfg: &'a Config,
    data: &'a [u8],
    ptr: usize,
    /// The decoded bytes of the last string token.
    tmp: Vec<u8>,
}

fn hexval(c: u8) -> Option<u32> {
    (c as char).to_digit(16)
}

impl Parser<'_> {
    fn at(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    fn hex4(&self, i: usize) -> Option<u32> {
        let mut v = 0;
        for k in 0..4 {
            v = (v << 4) | hexval(self.at(i + k))?;
        }
        Some(v)
    }

    fn error_token(&self, index: usize, err: &'static str) -> Token {
        Token {
            kind: Kind::Error,
            index,
            num: 0.0,
            boolean: false,
            err,
        }
    }

    fn token(&self, kind: Kind, index: usize) -> Token {
        Token {
            kind,
            index,
            num: 0.0,
            boolean: false,
            err: "",
        }
    }

    /// `json_append_unicode_escape` at `\u`: appends UTF-8, advances; false on a bad escape.
    fn unicode_escape(&mut self) -> bool {
        let Some(mut cp) = self.hex4(self.ptr + 2) else {
            return false;
        };
        let mut len = 6;
        if cp & 0xF800 == 0xD800 {
            if cp & 0x400 != 0 {
                return false;
            }
            if self.at(self.ptr + 6) != b'\\' || self.at(self.ptr + 7) != b'u' {
                return false;
            }
            let Some(low) = self.hex4(self.ptr + 8) else {
                return false;
            };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            cp = (((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            len = 12;
        }
        let mut buf = [0u8; 4];
        let s = char::from_u32(cp).map(|c| c.encode_utf8(&mut buf).len());
        match s {
            Some(n) => self.tmp.extend_from_slice(&buf[..n]),
            // Surrogates cannot reach here; anything else is within U+10FFFF.
            None => return false,
        }
        self.ptr += len;
        true
    }

    fn string_token(&mut self) -> Token {
        let start = self.ptr;
        self.ptr += 1;
        self.tmp.clear();
        loop {
            let ch = self.at(self.ptr);
            if ch == b'"' {
                break;
            }
            if ch == 0 {
                return self.error_token(self.ptr, "unexpected end of string");
            }
            let mut out = ch;
            if ch == b'\\' {
                out = match self.at(self.ptr + 1) {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 0x08,
                    b't' => b'\t',
                    b'n' => b'\n',
                    b'f' => 0x0c,
                    b'r' => b'\r',
                    b'u' => {
                        if self.unicode_escape() {
                            continue;
                        }
                        return self.error_token(self.ptr, "invalid unicode escape code");
                    }
                    _ => return self.error_token(self.ptr, "invalid escape code"),
                };
                self.ptr += 1;
            }
            self.tmp.push(out);
            self.ptr += 1;
        }
        self.ptr += 1;
        self.token(Kind::Str, start)
    }

    /// `json_is_invalid_number`: text strtod accepts that strict JSON does not.
    fn is_invalid_number(&self) -> bool {
        let mut p = self.ptr;
        if self.at(p) == b'+' {
            return true;
        }
        if self.at(p) == b'-' {
            p += 1;
        }
        let c = self.at(p);
        if c == b'0' {
            let c2 = self.at(p + 1);
            return (c2 | 0x20) == b'x' || c2.is_ascii_digit();
        } else if c <= b'9' {
            return false;
        }
        let rest = &self.data[p.min(self.data.len())..];
        let ci = |w: &[u8]| rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(w);
        ci(b"inf") || ci(b"nan")
    }

    fn number_token(&mut self) -> Token {
        let rest = &self.data[self.ptr.min(self.data.len())..];
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        let (v, used) = numconv::strtod(&rest[..end]);
        if used == 0 {
            return self.error_token(self.ptr, "invalid number");
        }
        let t = Token {
            kind: Kind::Number,
            index: self.ptr,
            num: v,
            boolean: false,
            err: "",
        };
        self.ptr += used;
        t
    }

    fn next_token(&mut self) -> Token {
        while matches!(self.at(self.ptr), b' ' | b'\t' | b'\n' | b'\r') {
            self.ptr += 1;
        }
        let index = self.ptr;
        let ch = self.at(index);
        let single = match ch {
            b'{' => Some(Kind::ObjBegin),
            b'}' => Some(Kind::ObjEnd),
            b'[' => Some(Kind::ArrBegin),
            b']' => Some(Kind::ArrEnd),
            b',' => Some(Kind::Comma),
            b':' => Some(Kind::Colon),
            _ => None,
        };
        if let Some(k) = single {
            self.ptr += 1;
            return self.token(k, index);
        }
        if ch == 0 {
            return self.token(Kind::End, index);
        }
        if !matches!(
            ch,
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'"' | b'+' | b'-' | b'0'..=b'9'
        ) {
            return self.error_token(index, "invalid token");
        }
        let invalid_ok = self.cfg.decode_invalid_numbers != 0;
        let data = self.data;
        let starts = |w: &[u8]| data.len() >= index + w.len() && &data[index..index + w.len()] == w;
        if ch == b'"' {
            self.string_token()
        } else if ch == b'-' || ch.is_ascii_digit() {
            if !invalid_ok && self.is_invalid_number() {
                return self.error_token(index, "invalid number");
            }
            self.number_token()
        } else if starts(b"true") {
            self.ptr += 4;
            Token {
                kind: Kind::Boolean,
                index,
                num: 0.0,
                boolean: true,
                err: "",
            }
        } else if starts(b"false") {
            self.ptr += 5;
            Token {
                kind: Kind::Boolean,
                index,
                num: 0.0,
                boolean: false,
                err: "",
            }
        } else if starts(b"null") {
            self.ptr += 4;
            self.token(Kind::Null, index)
        } else if invalid_ok && self.is_invalid_number() {
            self.number_token()
        } else {
            self.error_token(index, "invalid token")
        }
    }

    fn parse_error(&self, expected: &str, t: &Token) -> Raise {
        let found = if t.kind == Kind::Error {
            t.err
        } else {
            t.kind.name()
        };
        call::error(
            self.lua,
            format!(
                "Expected {expected} but found {found} at character {}",
                t.index + 1
            ),
        )
    }
}

enum Frame {
    Array { next: i64 },
    Object { key: Vec<u8> },
}

/// The open containers: the innermost table in Rust, the others in a scratch Lua table.
struct Open<'a> {
    lua: &'a Lua,
    frames: Vec<Frame>,
    cur: Option<Table>,
    scratch: Option<Table>,
    slots: i64,
}

impl Open<'_> {
    fn push(&mut self, frame: Frame) -> Result<(), Raise> {
        let t = self.lua.create_table()?;
        if let Some(cur) = self.cur.replace(t) {
            if self.scratch.is_none() {
                self.scratch = Some(self.lua.create_table()?);
            }
            if let Some(s) = &self.scratch {
                s.raw_set(self.frames.len() as i64, cur)?;
            }
        }
        self.slots += match frame {
            Frame::Array { .. } => 1,
            Frame::Object { .. } => 2,
        };
        self.frames.push(frame);
        Ok(())
    }

    /// Closes the innermost container and returns its table.
    fn pop(&mut self) -> Result<Value, Raise> {
        if let Some(f) = self.frames.pop() {
            self.slots -= match f {
                Frame::Array { .. } => 1,
                Frame::Object { .. } => 2,
            };
        }
        let done = self.cur.take().map(Value::Table).unwrap_or(Value::Nil);
        let d = self.frames.len() as i64;
        if d > 0 {
            if let Some(s) = &self.scratch {
                self.cur = Some(s.raw_get(d)?);
                s.raw_set(d, Value::Nil)?;
            }
        }
        Ok(done)
    }
}

fn descend(p: &Parser, open: &Open, needed: i64) -> Result<(), Raise> {
    let depth = open.frames.len() as i64 + 1;
    if depth <= i64::from(p.cfg.decode_max_depth) && open.slots + needed <= LUAI_MAXCSTACK {
        return Ok(());
    }
    Err(call::error(
        p.lua,
        format!(
            "Found too many nested data structures ({depth}) at character {}",
            p.ptr
        ),
    ))
}

/// Reads an object key and its colon, leaving the parser at the value's first token.
fn object_key(p: &mut Parser, t: &Token) -> Result<Vec<u8>, Raise> {
    if t.kind != Kind::Str {
        return Err(p.parse_error("object key string", t));
    }
    let key = std::mem::take(&mut p.tmp);
    let c = p.next_token();
    if c.kind != Kind::Colon {
        return Err(p.parse_error("colon", &c));
    }
    Ok(key)
}

/// Decodes one JSON text.
pub(crate) fn decode(lua: &Lua, cfg: &Config, data: &[u8]) -> Result<Value, Raise> {
    if data.len() >= 2 && (data[0] == 0 || data[1] == 0) {
        return Err(call::error(
            lua,
            "JSON parser does not support UTF-16 or UTF-32",
        ));
    }
    let mut p = Parser {
        lua,
        cfg,
        data,
        ptr: 0,
        tmp: Vec::new(),
    };
    let mut open = Open {
        lua,
        frames: Vec::new(),
        cur: None,
        scratch: None,
        slots: 1,
    };
    let mut t = p.next_token();
    let result = 'value: loop {
        // `t` is the first token of a value.
        let mut v = match t.kind {
            Kind::Str => Value::String(lua.create_string(&p.tmp)?),
            Kind::Number => call::num(t.num),
            Kind::Boolean => Value::Boolean(t.boolean),
            Kind::Null => Value::NULL,
            Kind::ObjBegin => {
                descend(&p, &open, 3)?;
                let n = p.next_token();
                if n.kind == Kind::ObjEnd {
                    Value::Table(lua.create_table()?)
                } else {
                    let key = object_key(&mut p, &n)?;
                    open.push(Frame::Object { key })?;
                    t = p.next_token();
                    continue 'value;
                }
            }
            Kind::ArrBegin => {
                descend(&p, &open, 2)?;
                let n = p.next_token();
                if n.kind == Kind::ArrEnd {
                    Value::Table(lua.create_table()?)
                } else {
                    open.push(Frame::Array { next: 1 })?;
                    t = n;
                    continue 'value;
                }
            }
            _ => return Err(p.parse_error("value", &t)),
        };
        // Store the finished value in its container, closing containers that end here.
        loop {
            let Some(cur) = open.cur.clone() else {
                break 'value v;
            };
            match open.frames.last_mut() {
                Some(Frame::Array { next }) => {
                    cur.raw_set(*next, v)?;
                    *next += 1;
                    let n = p.next_token();
                    if n.kind == Kind::ArrEnd {
                        v = open.pop()?;
                        continue;
                    }
                    if n.kind != Kind::Comma {
                        return Err(p.parse_error("comma or array end", &n));
                    }
                    t = p.next_token();
                    continue 'value;
                }
                Some(Frame::Object { key }) => {
                    cur.raw_set(lua.create_string(&*key)?, v)?;
                    let n = p.next_token();
                    if n.kind == Kind::ObjEnd {
                        v = open.pop()?;
                        continue;
                    }
                    if n.kind != Kind::Comma {
                        return Err(p.parse_error("comma or object end", &n));
                    }
                    let k = p.next_token();
                    let key = object_key(&mut p, &k)?;
                    if let Some(Frame::Object { key: slot }) = open.frames.last_mut() {
                        *slot = key;
                    }
                    t = p.next_token();
                    continue 'value;
                }
                None => break 'value v,
            }
        }
    };
    let end = p.next_token();
    if end.kind != Kind::End {
        return Err(p.parse_error("the end", &end));
    }
    Ok(result)
}
