//! `struct`: Roberto Ierusalimschy's struct library (v1.7) as Redis embeds it, on x86-64
//! sizes: `b/B` 1, `h/H` 2, `l/L` and `T` 8, `i/I` 4 by default, `i<n>` up to 32, `f` 4, `d` 8,
//! native byte order little-endian, default maximum alignment (`!`) 8.
//!
//! Invariants:
//! - The format is read up to its first NUL byte, as the C library reads a C string.
//! - Every allocation is bounded by the input: `pack` writes at most 32 bytes plus alignment
//!   per option (and `c<n>` only after checking the string holds `n` bytes); `unpack` checks
//!   that each item lies inside the data before reading it and copies at most the data; the
//!   result count is bounded by Lua's 8000-slot C stack as in Redis ("too many results").
//! - Numbers convert as the C code compiled for x86-64 converts them (truncation; out-of-range
//!   doubles give INT64_MIN's bits), integers wider than 8 bytes carry 8 bytes of value.
//! - Errors keep Redis's texts and argument numbers, including its quirk of naming the
//!   argument after a too-short string in `pack` ("bad argument #3 ... (string too short)").
use mlua::{Lua, Table, Value};

use crate::call::{self, num, Args, Outcome, Raise, Returns, LUAI_MAXCSTACK};

const MAXINTSIZE: usize = 32;
const MAXALIGN: usize = 8;

#[derive(Clone, Copy, PartialEq)]
enum Endian {
    Big,
    Little,
}

struct Header {
    endian: Endian,
    align: usize,
}

impl Header {
    fn new() -> Self {
        Header {
            endian: Endian::Little,
            align: 1,
        }
    }
}

/// The format string as C sees it (up to the first NUL), with a read position.
struct Fmt<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Fmt<'_> {
    fn peek(&self) -> u8 {
        self.bytes.get(self.pos).copied().unwrap_or(0)
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek();
        if c == 0 {
            None
        } else {
            self.pos += 1;
            Some(c)
        }
    }

    /// `getnum`: a decimal number at the current position, or `df`.
    fn getnum(&mut self, lua: &Lua, df: usize) -> Result<usize, Raise> {
        if !self.peek().is_ascii_digit() {
            return Ok(df);
        }
        let mut a: i32 = 0;
        while self.peek().is_ascii_digit() {
            let d = i32::from(self.peek() - b'0');
            if a > i32::MAX / 10 || a * 10 > i32::MAX - d {
                return Err(call::error(lua, "integral size overflow"));
            }
            a = a * 10 + d;
            self.pos += 1;
        }
        Ok(a as usize)
    }
}

fn optsize(lua: &Lua, opt: u8, fmt: &mut Fmt) -> Result<usize, Raise> {
    Ok(match opt {
        b'B' | b'b' => 1,
        b'H' | b'h' => 2,
        b'L' | b'l' | b'T' | b'd' => 8,
        b'f' => 4,
        b'x' => 1,
        b'c' => fmt.getnum(lua, 1)?,
        b'i' | b'I' => {
            let sz = fmt.getnum(lua, 4)?;
            if sz > MAXINTSIZE {
                let msg = format!("integral size {sz} is larger than limit of {MAXINTSIZE}");
                return Err(call::error(lua, msg));
            }
            sz
        }
        _ => 0,
    })
}

fn gettoalign(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    (size.wrapping_sub(len & (size - 1))) & (size - 1)
}

fn controloptions(lua: &Lua, opt: u8, fmt: &mut Fmt, h: &mut Header) -> Result<(), Raise> {
    match opt {
        b' ' => Ok(()),
        b'>' => {
            h.endian = Endian::Big;
            Ok(())
        }
        b'<' => {
            h.endian = Endian::Little;
            Ok(())
        }
        b'!' => {
            let a = fmt.getnum(lua, MAXALIGN)?;
            if a == 0 || a & (a - 1) != 0 {
                return Err(call::error(
                    lua,
                    format!("alignment {a} is not a power of 2"),
                ));
            }
            h.align = a;
            Ok(())
        }
        _ => {
            let mut msg = b"invalid format option '".to_vec();
            msg.push(opt);
            msg.push(b'\'');
            Err(call::arg_error(lua, 1, msg))
        }
    }
}

fn format_bytes(s: &mlua::LuaString) -> Vec<u8> {
    let b = s.as_bytes();
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    b[..end].to_vec()
}

fn putinteger(
    lua: &Lua,
    args: &Args,
    out: &mut Vec<u8>,
    arg: usize,
    h: &Header,
    size: usize,
) -> Result<(), Raise> {
    let n = call::check_number(lua, args, arg)?;
    let mut value: u64 = if n < 0.0 {
        call::c_i64(n) as u64
    } else {
        call::c_u64(n)
    };
    let mut buf = [0u8; MAXINTSIZE];
    let buf = &mut buf[..size];
    if h.endian == Endian::Little {
        for b in buf.iter_mut() {
            // Past 8 bytes the value has been shifted out: zeros, as in C.
            *b = value as u8;
            value >>= 8;
        }
    } else {
        for b in buf.iter_mut().rev() {
            *b = value as u8;
            value >>= 8;
        }
    }
    out.extend_from_slice(buf);
    Ok(())
}

fn pack(lua: &Lua, args: &Args) -> Outcome {
    let fmt_s = call::check_string(lua, args, 1)?;
    let fmt_bytes = format_bytes(&fmt_s);
    // b_pack pushes a nil after its arguments before reading them.
    args.push_nil_marker();
    let mut fmt = Fmt {
        bytes: &fmt_bytes,
        pos: 0,
    };
    let mut h = Header::new();
    let mut arg = 2usize;
    let mut total: usize = 0;
    let mut out: Vec<u8> = Vec::new();
    while let Some(opt) = fmt.next() {
        let mut size = optsize(lua, opt, &mut fmt)?;
        let toalign = gettoalign(total, &h, opt, size);
        total += toalign;
        out.resize(out.len() + toalign, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                putinteger(lua, args, &mut out, arg, &h, size)?;
                arg += 1;
            }
            b'x' => out.push(0),
            b'f' => {
                let f = call::check_number(lua, args, arg)? as f32;
                arg += 1;
                match h.endian {
                    Endian::Little => out.extend_from_slice(&f.to_le_bytes()),
                    Endian::Big => out.extend_from_slice(&f.to_be_bytes()),
                }
            }
            b'd' => {
                let d = call::check_number(lua, args, arg)?;
                arg += 1;
                match h.endian {
                    Endian::Little => out.extend_from_slice(&d.to_le_bytes()),
                    Endian::Big => out.extend_from_slice(&d.to_be_bytes()),
                }
            }
            b'c' | b's' => {
                let s = call::check_string(lua, args, arg)?;
                arg += 1;
                let bytes = s.as_bytes();
                if size == 0 {
                    size = bytes.len();
                }
                if bytes.len() < size {
                    return Err(call::arg_error(lua, arg as i64, "string too short"));
                }
                out.extend_from_slice(&bytes[..size]);
                if opt == b's' {
                    out.push(0);
                    size += 1;
                }
            }
            _ => controloptions(lua, opt, &mut fmt, &mut h)?,
        }
        total += size;
    }
    Ok(Returns::one(Value::String(lua.create_string(&out)?)))
}

fn getinteger(buf: &[u8], endian: Endian, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let size = buf.len();
    let mut add = |b: u8| {
        l = (l << 8) | u64::from(b);
    };
    match endian {
        Endian::Big => buf.iter().for_each(|&b| add(b)),
        Endian::Little => buf.iter().rev().for_each(|&b| add(b)),
    }
    if !signed {
        return l as f64;
    }
    // `~0 << (size*8 - 1)` with x86's shift-count masking (size 0 and sizes above 8 included).
    let shift = ((size * 8) as u32).wrapping_sub(1) & 63;
    let mask = u64::MAX << shift;
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

fn data_fits(size: usize, pos: usize, ld: usize) -> bool {
    size <= ld && pos <= ld - size
}

fn unpack(lua: &Lua, args: &Args) -> Outcome {
    let fmt_s = call::check_string(lua, args, 1)?;
    let data_s = call::check_string(lua, args, 2)?;
    let pos = call::opt_integer(lua, args, 3, 1)? as u64 as usize;
    if pos == 0 {
        return Err(call::arg_error(lua, 3, "offset must be 1 or greater"));
    }
    let mut pos = pos - 1;
    let fmt_bytes = format_bytes(&fmt_s);
    let data = data_s.as_bytes();
    let ld = data.len();
    let mut fmt = Fmt {
        bytes: &fmt_bytes,
        pos: 0,
    };
    let mut h = Header::new();
    let mut res = Returns::new();
    let base = args.top() as i64;
    while let Some(opt) = fmt.next() {
        let mut size = optsize(lua, opt, &mut fmt)?;
        pos = pos.wrapping_add(gettoalign(pos, &h, opt, size));
        if !data_fits(size, pos, ld) {
            return Err(call::arg_error(lua, 2, "data string too short"));
        }
        if base + res.len() as i64 + 2 > LUAI_MAXCSTACK {
            return Err(call::error(lua, "stack overflow (too many results)"));
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let v = getinteger(&data[pos..pos + size], h.endian, opt.is_ascii_lowercase());
                res.push(lua, num(v))?;
            }
            b'x' => {}
            b'f' => {
                let mut b = [0u8; 4];
                b.copy_from_slice(&data[pos..pos + 4]);
                let f = match h.endian {
                    Endian::Little => f32::from_le_bytes(b),
                    Endian::Big => f32::from_be_bytes(b),
                };
                res.push(lua, num(f64::from(f)))?;
            }
            b'd' => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&data[pos..pos + 8]);
                let d = match h.endian {
                    Endian::Little => f64::from_le_bytes(b),
                    Endian::Big => f64::from_be_bytes(b),
                };
                res.push(lua, num(d))?;
            }
            b'c' => {
                if size == 0 {
                    let prev = res.last()?;
                    let n = match &prev {
                        Some(v) => call::to_number(lua, Some(v))?,
                        None => None,
                    };
                    let Some(n) = n else {
                        return Err(call::error(lua, "format 'c0' needs a previous size"));
                    };
                    size = call::c_u64(n) as usize;
                    res.pop()?;
                    if !data_fits(size, pos, ld) {
                        return Err(call::arg_error(lua, 2, "data string too short"));
                    }
                }
                res.push(
                    lua,
                    Value::String(lua.create_string(&data[pos..pos + size])?),
                )?;
            }
            b's' => {
                let Some(e) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err(call::error(lua, "unfinished string in data"));
                };
                size = e + 1;
                res.push(lua, Value::String(lua.create_string(&data[pos..pos + e])?))?;
            }
            _ => controloptions(lua, opt, &mut fmt, &mut h)?,
        }
        pos = pos.wrapping_add(size);
    }
    res.push(lua, num(pos.wrapping_add(1) as i64 as f64))?;
    Ok(res)
}

fn size(lua: &Lua, args: &Args) -> Outcome {
    let fmt_s = call::check_string(lua, args, 1)?;
    let fmt_bytes = format_bytes(&fmt_s);
    let mut fmt = Fmt {
        bytes: &fmt_bytes,
        pos: 0,
    };
    let mut h = Header::new();
    let mut pos: usize = 0;
    while let Some(opt) = fmt.next() {
        let size = optsize(lua, opt, &mut fmt)?;
        pos = pos.wrapping_add(gettoalign(pos, &h, opt, size));
        if opt == b's' {
            return Err(call::arg_error(lua, 1, "option 's' has no fixed size"));
        } else if opt == b'c' && size == 0 {
            return Err(call::arg_error(lua, 1, "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            controloptions(lua, opt, &mut fmt, &mut h)?;
        }
        pos = pos.wrapping_add(size);
    }
    Ok(Returns::one(num(pos as i64 as f64)))
}

/// Builds the `struct` table.
pub(crate) fn create(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", call::function(lua, 0, pack)?)?;
    t.raw_set("unpack", call::function(lua, 0, unpack)?)?;
    t.raw_set("size", call::function(lua, 0, size)?)?;
    Ok(t)
}
