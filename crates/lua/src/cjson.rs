//! `cjson`: Lua CJSON 2.1.0 as Redis embeds it (`encode`, `decode`, `null`, `new` and the
//! configuration functions), in Rust.
//!
//! Invariants:
//! - Configuration is per module table (`cjson.new()` makes an independent one), with Redis's
//!   defaults: sparse arrays (convert off, ratio 2, safe 10), encode and decode depth 1000,
//!   number precision 14, keep buffer on, encode invalid numbers off, decode invalid numbers
//!   on. The configuration functions validate and answer as the C functions do, including
//!   their error texts ("expected integer between 1 and 14", "invalid option 'x'").
//! - `encode` and `decode` walk nesting with an explicit stack, not Rust recursion, and keep
//!   the tables of outer levels in a Lua scratch table, so deep nesting uses neither the Rust
//!   stack nor one mlua reference per level. Their depth limits are the configured maximum and
//!   Lua 5.1's 8000-slot C stack, counted as the C code uses it, so they fail where Redis fails.
//! - `encode`'s output is bounded by `Limits::max_output_bytes` (a self-referencing table
//!   nested to the depth limit can otherwise ask for exponential output); Redis has no such
//!   bound.
//! - `encode_keep_buffer` only records its setting: buffer reuse is an allocation strategy of
//!   the C code and has no visible effect.
use std::sync::{Arc, Mutex};

use mlua::{Lua, Table, Value};

use crate::call::{self, Args, Raise, Returns};

mod decode;
mod encode;

/// One cjson module's configuration (`json_config_t`).
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) sparse_convert: i32,
    pub(crate) sparse_ratio: i32,
    pub(crate) sparse_safe: i32,
    pub(crate) encode_max_depth: i32,
    pub(crate) decode_max_depth: i32,
    pub(crate) encode_invalid_numbers: i32,
    pub(crate) decode_invalid_numbers: i32,
    pub(crate) encode_keep_buffer: i32,
    pub(crate) encode_number_precision: i32,
    /// Not a Lua setting: `Limits::max_output_bytes`.
    pub(crate) max_output: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sparse_convert: 0,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: 1,
            encode_keep_buffer: 1,
            encode_number_precision: 14,
            max_output: crate::Limits::default().max_output_bytes,
        }
    }
}

type Shared = Arc<Mutex<Config>>;

fn snapshot(cfg: &Shared) -> Config {
    cfg.lock()
        .map(|c| c.clone())
        .unwrap_or_else(|p| p.into_inner().clone())
}

fn update(cfg: &Shared, f: impl FnOnce(&mut Config)) {
    match cfg.lock() {
        Ok(mut c) => f(&mut c),
        Err(p) => f(&mut p.into_inner()),
    }
}

/// `json_arg_init`: at most `n` arguments.
fn arg_init(lua: &Lua, args: &Args, n: usize) -> Result<(), Raise> {
    if args.top() > n {
        return Err(call::arg_error(
            lua,
            n as i64 + 1,
            "found too many arguments",
        ));
    }
    Ok(())
}

/// `json_integer_option`: sets `*setting` from argument `i` when given, returns the value.
fn integer_option(
    lua: &Lua,
    args: &Args,
    i: usize,
    setting: &mut i32,
    min: i32,
    max: i32,
) -> Result<Value, Raise> {
    if !args.is_none_or_nil(i) {
        // The C code stores lua_Integer into an int.
        let value = call::check_integer(lua, args, i)? as i32;
        if !(min <= value && value <= max) {
            return Err(call::arg_error(
                lua,
                1,
                format!("expected integer between {min} and {max}"),
            ));
        }
        *setting = value;
    }
    Ok(call::num(f64::from(*setting)))
}

/// `json_enum_option` with `bool_true` 1: booleans or one of `options` by name.
fn enum_option(
    lua: &Lua,
    args: &Args,
    i: usize,
    setting: &mut i32,
    options: &[&str],
) -> Result<Value, Raise> {
    match args.get(i) {
        None | Some(Value::Nil) => {}
        Some(Value::Boolean(b)) => *setting = i32::from(b),
        Some(_) => {
            let s = call::check_string(lua, args, i)?;
            let bytes = s.as_bytes();
            let name = &bytes[..bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len())];
            match options.iter().position(|o| o.as_bytes() == name) {
                Some(k) => *setting = k as i32,
                None => {
                    let mut msg = b"invalid option '".to_vec();
                    msg.extend_from_slice(name);
                    msg.push(b'\'');
                    return Err(call::arg_error(lua, i as i64, msg));
                }
            }
        }
    }
    if *setting == 0 || *setting == 1 {
        Ok(Value::Boolean(*setting == 1))
    } else {
        Ok(Value::String(
            lua.create_string(options[*setting as usize])?,
        ))
    }
}

const BOOL_OPTIONS: &[&str] = &["off", "on"];

/// Builds one cjson module table with its own configuration.
pub(crate) fn create(lua: &Lua, limits: crate::Limits) -> mlua::Result<Table> {
    let cfg: Shared = Arc::new(Mutex::new(Config {
        max_output: limits.max_output_bytes,
        ..Config::default()
    }));
    let next = call::next_function(lua)?;
    let t = lua.create_table()?;

    let c = cfg.clone();
    t.raw_set(
        "encode",
        call::function(lua, 0, move |lua, args| {
            if args.top() != 1 {
                return Err(call::arg_error(lua, 1, "expected 1 argument"));
            }
            let conf = snapshot(&c);
            let out = encode::encode(lua, &conf, &next, args.get(1).unwrap_or(Value::Nil))?;
            Ok(Returns::one(Value::String(lua.create_string(out)?)))
        })?,
    )?;
    let c = cfg.clone();
    t.raw_set(
        "decode",
        call::function(lua, 0, move |lua, args| {
            if args.top() != 1 {
                return Err(call::arg_error(lua, 1, "expected 1 argument"));
            }
            let conf = snapshot(&c);
            let s = call::check_string(lua, args, 1)?;
            Ok(Returns::one(decode::decode(lua, &conf, &s.as_bytes())?))
        })?,
    )?;
    let c = cfg.clone();
    t.raw_set(
        "encode_sparse_array",
        call::function(lua, 0, move |lua, args| {
            arg_init(lua, args, 3)?;
            let mut conf = snapshot(&c);
            let a = enum_option(lua, args, 1, &mut conf.sparse_convert, BOOL_OPTIONS)?;
            let b = integer_option(lua, args, 2, &mut conf.sparse_ratio, 0, i32::MAX);
            // The C code stores each option as it goes: keep what was set before an error.
            let b = match b {
                Ok(b) => b,
                Err(e) => {
                    update(&c, |x| *x = conf.clone());
                    return Err(e);
                }
            };
            let d = integer_option(lua, args, 3, &mut conf.sparse_safe, 0, i32::MAX);
            update(&c, |x| *x = conf.clone());
            Ok(Returns::values(vec![a, b, d?]))
        })?,
    )?;
    type Field = fn(&mut Config) -> &mut i32;
    let ints: [(&str, Field, i32, i32); 3] = [
        ("encode_max_depth", |c| &mut c.encode_max_depth, 1, i32::MAX),
        ("decode_max_depth", |c| &mut c.decode_max_depth, 1, i32::MAX),
        (
            "encode_number_precision",
            |c| &mut c.encode_number_precision,
            1,
            14,
        ),
    ];
    for (name, field, min, max) in ints {
        let c = cfg.clone();
        t.raw_set(
            name,
            call::function(lua, 0, move |lua, args| {
                arg_init(lua, args, 1)?;
                let mut conf = snapshot(&c);
                let v = integer_option(lua, args, 1, field(&mut conf), min, max)?;
                update(&c, |x| *x = conf.clone());
                Ok(Returns::one(v))
            })?,
        )?;
    }
    let enums: [(&str, Field, &'static [&'static str]); 3] = [
        (
            "encode_keep_buffer",
            |c| &mut c.encode_keep_buffer,
            BOOL_OPTIONS,
        ),
        (
            "encode_invalid_numbers",
            |c| &mut c.encode_invalid_numbers,
            &["off", "on", "null"],
        ),
        (
            "decode_invalid_numbers",
            |c| &mut c.decode_invalid_numbers,
            BOOL_OPTIONS,
        ),
    ];
    for (name, field, options) in enums {
        let c = cfg.clone();
        t.raw_set(
            name,
            call::function(lua, 0, move |lua, args| {
                arg_init(lua, args, 1)?;
                let mut conf = snapshot(&c);
                let v = enum_option(lua, args, 1, field(&mut conf), options)?;
                update(&c, |x| *x = conf.clone());
                Ok(Returns::one(v))
            })?,
        )?;
    }
    t.raw_set(
        "new",
        call::function(lua, 0, move |lua, _| {
            Ok(Returns::one(Value::Table(create(lua, limits)?)))
        })?,
    )?;
    t.raw_set("null", Value::NULL)?;
    t.raw_set("_NAME", "cjson")?;
    t.raw_set("_VERSION", "2.1.0")?;
    Ok(t)
}
