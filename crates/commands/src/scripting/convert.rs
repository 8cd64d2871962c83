//! Redis's conversion rules between replies and Lua values, both directions.
//!
//! Reply -> Lua (what `redis.call` returns), by the script's protocol (`redis.setresp`):
//! integer -> number; bulk -> string; status -> `{ok=...}`; error -> `{err=...}` (raised by
//! `redis.call`, returned by `redis.pcall`); array -> table. RESP2 nulls -> `false`. RESP3 (after
//! `redis.setresp(3)`): null -> `nil`, map -> `{map={...}}`, set -> `{set={member=true}}`, double
//! -> `{double=n}`, boolean -> boolean, big number -> `{big_number="..."}`, verbatim string ->
//! `{verbatim_string={format=..., string=...}}`.
//!
//! Lua -> reply (what a script returns): string -> bulk; number -> integer (truncated towards
//! zero); boolean -> `:1` / null under RESP2 scripts, a RESP3 boolean under `setresp(3)`; a table
//! with a string `err` -> error, `ok` -> status, `double`, `big_number`, `map`, `set`,
//! `verbatim_string` -> those types; any other table -> array of its elements 1, 2, ... up to the
//! first nil; nil and anything else -> null.
//!
//! Invariant: the Lua -> reply walk is bounded: at most [`MAX_DEPTH`] nested tables (a table that
//! contains itself would otherwise never end), each table read only up to its first nil.

use bytes::Bytes;
use mlua::{Lua, Table, Value};
use prefixkv_resp::Reply;

/// The deepest nesting of tables a script's reply may have (Redis answers "reached lua stack
/// limit" where its C stack check fails).
pub const MAX_DEPTH: usize = 1000;

/// A Lua value as the reply a script answers with. `resp3` is the script's protocol.
pub fn lua_to_reply(value: &Value, resp3: bool) -> Reply {
    let mut depth_exceeded = false;
    let reply = to_reply(value, resp3, 0, &mut depth_exceeded);
    if depth_exceeded {
        return Reply::Error(Bytes::from_static(b"ERR reached lua stack limit"));
    }
    reply
}

fn to_reply(value: &Value, resp3: bool, depth: usize, exceeded: &mut bool) -> Reply {
    if depth > MAX_DEPTH {
        *exceeded = true;
        return Reply::Null;
    }
    match value {
        Value::String(text) => Reply::BulkString(Bytes::copy_from_slice(&text.as_bytes())),
        Value::Integer(number) => Reply::Integer(*number),
        Value::Number(number) => Reply::Integer(truncate(*number)),
        Value::Boolean(flag) if resp3 => Reply::Boolean(*flag),
        Value::Boolean(true) => Reply::Integer(1),
        Value::Table(table) => table_to_reply(table, resp3, depth, exceeded),
        _ => Reply::Null,
    }
}

/// A script's reply for a RESP2 caller: its doubles as the bulk strings Redis 7.0 writes for
/// them (`%.17g`: `0.10000000000000001`, `1e+20`; the encoder's RESP2 form of a double is the
/// shortest text).
pub fn resp2_doubles(reply: Reply) -> Reply {
    match reply {
        Reply::Double(number) => Reply::BulkString(Bytes::from(format_number(number))),
        Reply::Array(elements) => Reply::Array(elements.into_iter().map(resp2_doubles).collect()),
        Reply::Set(elements) => Reply::Set(elements.into_iter().map(resp2_doubles).collect()),
        Reply::Map(pairs) => Reply::Map(
            pairs
                .into_iter()
                .map(|(key, value)| (resp2_doubles(key), resp2_doubles(value)))
                .collect(),
        ),
        other => other,
    }
}

/// Lua number -> integer reply as Redis's `(long long)` cast on x86-64: towards zero, and
/// `i64::MIN` for NaN and anything out of range (what `cvttsd2si` gives).
fn truncate(number: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if number.is_nan() || !(-LIMIT..LIMIT).contains(&number) {
        i64::MIN
    } else {
        number as i64
    }
}

fn field(table: &Table, name: &str) -> Value {
    table.raw_get(name).unwrap_or(Value::Nil)
}

fn table_to_reply(table: &Table, resp3: bool, depth: usize, exceeded: &mut bool) -> Reply {
    if let Value::String(text) = field(table, "err") {
        return Reply::Error(Bytes::copy_from_slice(&text.as_bytes()));
    }
    if let Value::String(text) = field(table, "ok") {
        return Reply::SimpleString(Bytes::copy_from_slice(&text.as_bytes()));
    }
    match field(table, "double") {
        Value::Number(number) => return Reply::Double(number),
        Value::Integer(number) => return Reply::Double(number as f64),
        _ => {}
    }
    if let Value::String(text) = field(table, "big_number") {
        return Reply::BigNumber(Bytes::copy_from_slice(&text.as_bytes()));
    }
    if let Value::Table(map) = field(table, "map") {
        let mut pairs = Vec::new();
        for (key, value) in map.pairs::<Value, Value>().flatten() {
            pairs.push((
                to_reply(&key, resp3, depth + 1, exceeded),
                to_reply(&value, resp3, depth + 1, exceeded),
            ));
        }
        return Reply::Map(pairs);
    }
    if let Value::Table(set) = field(table, "set") {
        let mut members = Vec::new();
        for (key, _) in set.pairs::<Value, Value>().flatten() {
            members.push(to_reply(&key, resp3, depth + 1, exceeded));
        }
        return Reply::Set(members);
    }
    if let Value::Table(verbatim) = field(table, "verbatim_string") {
        if let (Value::String(text), Value::String(format)) =
            (field(&verbatim, "string"), field(&verbatim, "format"))
        {
            let format = format.as_bytes();
            if format.len() == 3 {
                return Reply::VerbatimString {
                    format: [format[0], format[1], format[2]],
                    text: Bytes::copy_from_slice(&text.as_bytes()),
                };
            }
        }
    }
    let mut elements = Vec::new();
    for index in 1.. {
        let element: Value = table.raw_get(index).unwrap_or(Value::Nil);
        if element.is_nil() || *exceeded {
            break;
        }
        elements.push(to_reply(&element, resp3, depth + 1, exceeded));
    }
    Reply::Array(elements)
}

/// A command's reply as the Lua value `redis.call` returns; `Err` holds an error reply's line
/// (raised by `redis.call`, returned as `{err=...}` by `redis.pcall`).
pub fn reply_to_lua(lua: &Lua, reply: Reply) -> mlua::Result<Result<Value, Bytes>> {
    Ok(Ok(match reply {
        Reply::Error(line) | Reply::BlobError(line) => return Ok(Err(line)),
        other => value_of(lua, other)?,
    }))
}

fn value_of(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Integer(number) => Value::Number(number as f64),
        Reply::BulkString(bytes) => Value::String(lua.create_string(&bytes)?),
        Reply::NullBulkString | Reply::NullArray => Value::Boolean(false),
        Reply::Null => Value::Nil,
        Reply::SimpleString(text) => {
            let table = lua.create_table()?;
            table.raw_set("ok", lua.create_string(&text)?)?;
            Value::Table(table)
        }
        Reply::Error(line) | Reply::BlobError(line) => {
            let table = lua.create_table()?;
            table.raw_set("err", lua.create_string(&line)?)?;
            Value::Table(table)
        }
        Reply::Array(elements) | Reply::Push(elements) => {
            let table = lua.create_table_with_capacity(elements.len(), 0)?;
            for (index, element) in elements.into_iter().enumerate() {
                table.raw_set(index + 1, value_of(lua, element)?)?;
            }
            Value::Table(table)
        }
        Reply::Map(pairs) => {
            let map = lua.create_table_with_capacity(0, pairs.len())?;
            for (key, value) in pairs {
                map.raw_set(value_of(lua, key)?, value_of(lua, value)?)?;
            }
            wrapped(lua, "map", Value::Table(map))?
        }
        Reply::Set(members) => {
            let set = lua.create_table_with_capacity(0, members.len())?;
            for member in members {
                set.raw_set(value_of(lua, member)?, true)?;
            }
            wrapped(lua, "set", Value::Table(set))?
        }
        Reply::Double(number) => wrapped(lua, "double", Value::Number(number))?,
        Reply::Boolean(flag) => Value::Boolean(flag),
        Reply::BigNumber(digits) => wrapped(
            lua,
            "big_number",
            Value::String(lua.create_string(&digits)?),
        )?,
        Reply::VerbatimString { format, text } => {
            let inner = lua.create_table()?;
            inner.raw_set("format", lua.create_string(format)?)?;
            inner.raw_set("string", lua.create_string(&text)?)?;
            wrapped(lua, "verbatim_string", Value::Table(inner))?
        }
    })
}

fn wrapped(lua: &Lua, name: &str, value: Value) -> mlua::Result<Value> {
    let table = lua.create_table()?;
    table.raw_set(name, value)?;
    Ok(Value::Table(table))
}

/// A Lua number as a command argument: C's `%.17g`, as Redis formats it (`0.1` is sent as
/// `0.10000000000000001`, `1e20` as `1e+20`).
pub fn format_number(number: f64) -> String {
    if number.is_nan() {
        return if number.is_sign_negative() {
            "-nan"
        } else {
            "nan"
        }
        .into();
    }
    if number.is_infinite() {
        return if number < 0.0 { "-inf" } else { "inf" }.into();
    }
    if number == 0.0 {
        return if number.is_sign_negative() { "-0" } else { "0" }.into();
    }
    const PRECISION: i32 = 17;
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, number);
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("a decimal exponent");
    if !(-4..PRECISION).contains(&exponent) {
        let mantissa = strip_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (PRECISION - 1 - exponent) as usize;
        strip_zeros(&format!("{number:.decimals$}")).to_string()
    }
}

fn strip_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::format_number;

    #[test]
    fn numbers_as_c_formats_them() {
        assert_eq!(format_number(3.5), "3.5");
        assert_eq!(format_number(3.0), "3");
        assert_eq!(format_number(0.1), "0.10000000000000001");
        assert_eq!(format_number(1.0 / 3.0), "0.33333333333333331");
        assert_eq!(format_number(1e20), "1e+20");
        assert_eq!(format_number(2f64.powi(53)), "9007199254740992");
        assert_eq!(format_number(-2.5e-7), "-2.4999999999999999e-07");
        assert_eq!(format_number(1e16), "10000000000000000");
        assert_eq!(format_number(1e17), "1e+17");
        assert_eq!(format_number(0.0001), "0.0001");
        assert_eq!(format_number(-7.0), "-7");
    }
}
