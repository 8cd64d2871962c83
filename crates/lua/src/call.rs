//! How the libraries' Rust functions behave like the Lua 5.1 C functions Redis registers.
//!
//! Invariants:
//! - A library function is a C closure (`outer`) whose first upvalue is an mlua Rust function
//!   (the "inner"). `outer` calls the inner and turns its status into what a C function does:
//!   results are returned as they are, and an error message is raised as a plain Lua string
//!   (`lua_error`), never as mlua's wrapped-error userdata. Scripts that `pcall` a library
//!   function get a string, as with Redis, and can concatenate or match it.
//! - Because `outer` is a C function, the Lua call stack looks as it does in Redis: a script's
//!   tail call `return cjson.decode(x)` keeps the caller's frame, so the "where" prefix
//!   (`user_script:1: `) and the function name in "bad argument #1 to 'decode'" are computed the
//!   same way: the inner is at level 0, `outer` at level 1 (its name is the one Lua's
//!   `luaL_argerror` would see), and the script calling it at level 2 (`luaL_where(L, 1)`).
//! - `outer` never holds Rust values with destructors when it raises (`lua_error` longjmps).
//! - Results never need one mlua reference each: more than [`INLINE_RESULTS`] results are
//!   handed over in one table that `outer` unpacks onto the Lua stack, so a function returning
//!   thousands of values (`cmsgpack.unpack`, `struct.unpack`) cannot exhaust mlua's reference
//!   stack (which, like any Lua 5.1 stack, holds at most 8000 slots).
//! - Arguments never need one mlua reference each either: a call with more than
//!   [`REF_ARGS_BUDGET`] arguments that are strings, tables, functions, userdata or threads
//!   reaches the inner as one table (read one argument at a time), so even the ~8000 arguments
//!   Lua allows cannot exhaust mlua's reference stack (which would panic).
//! - A function may declare a maximum argument count; beyond it `outer` does not hand the
//!   arguments to mlua at all but tells the inner how many there were, so it can raise the
//!   error Redis raises.
use std::ffi::{c_int, c_void};

use mlua::{ffi, Function, LightUserData, Lua, MultiValue, Table, Value};

/// Lua 5.1's `LUAI_MAXCSTACK`: the most stack slots a C function may use. Redis's libraries
/// fail with "stack overflow" where `lua_checkstack` would pass this, and we mirror the count.
pub(crate) const LUAI_MAXCSTACK: i64 = 8000;

/// Results returned directly; more are handed over in a table.
const INLINE_RESULTS: usize = 16;

const STATUS_OK: i64 = 0;
const STATUS_SPILLED: i64 = 1;
const STATUS_ERROR: i64 = 2;

/// Calls with more reference-typed arguments than this get them packed in one table.
const REF_ARGS_BUDGET: c_int = 256;

static TOO_MANY_MARKER: u8 = 0;
static PACKED_MARKER: u8 = 0;

fn marker() -> *mut c_void {
    std::ptr::addr_of!(TOO_MANY_MARKER) as *mut c_void
}

fn packed_marker() -> *mut c_void {
    std::ptr::addr_of!(PACKED_MARKER) as *mut c_void
}

/// Why a library function stops: a message raised as a Lua string (already carrying its
/// position prefix where Redis adds one), or an mlua error (memory, internal) passed through.
pub(crate) enum Raise {
    /// Raised with `lua_error` as a string.
    Msg(Vec<u8>),
    /// Passed through as mlua raises it.
    Lua(mlua::Error),
}

impl From<mlua::Error> for Raise {
    fn from(e: mlua::Error) -> Self {
        Raise::Lua(e)
    }
}

/// What a library function's Rust body returns.
pub(crate) type Outcome = Result<Returns, Raise>;

/// The arguments of one call, 1-based as in the Lua C API.
pub(crate) struct Args {
    vals: Vec<Value>,
    /// Arguments handed over in one table (see `REF_ARGS_BUDGET`), with their count.
    packed: Option<(Table, usize)>,
    /// Set when the caller passed more arguments than the function's maximum: their count.
    pub(crate) too_many: Option<i64>,
    /// When set, the slot just past the arguments reads as nil: `struct.pack` pushes a nil
    /// marker there, so Redis reports a missing argument as "got nil".
    nil_marker: std::cell::Cell<bool>,
    nil: Value,
}

impl Args {
    /// `lua_gettop`.
    pub(crate) fn top(&self) -> usize {
        match &self.packed {
            Some((_, n)) => *n,
            None => self.vals.len(),
        }
    }

    /// Argument `i` (1-based), `None` when absent (`lua_isnone`).
    pub(crate) fn get(&self, i: usize) -> Option<Value> {
        if self.nil_marker.get() && i == self.top() + 1 {
            return Some(self.nil.clone());
        }
        match &self.packed {
            // rawgeti on an array slot does not allocate, so it cannot fail.
            Some((t, n)) if (1..=*n).contains(&i) => Some(t.raw_get(i).unwrap_or(Value::Nil)),
            Some(_) => None,
            None => i.checked_sub(1).and_then(|j| self.vals.get(j)).cloned(),
        }
    }

    /// Makes the slot past the last argument read as nil (see `nil_marker`).
    pub(crate) fn push_nil_marker(&self) {
        self.nil_marker.set(true);
    }

    /// `lua_isnoneornil`.
    pub(crate) fn is_none_or_nil(&self, i: usize) -> bool {
        matches!(self.get(i), None | Some(Value::Nil))
    }
}

/// Collects a function's results; past [`INLINE_RESULTS`] they move into a Lua table so that
/// only one mlua reference is held however many there are.
pub(crate) struct Returns {
    inline: Vec<Value>,
    spill: Option<(Table, usize)>,
}

impl Returns {
    /// No results yet.
    pub(crate) fn new() -> Self {
        Returns {
            inline: Vec::new(),
            spill: None,
        }
    }

    /// A few results (at most [`INLINE_RESULTS`]).
    pub(crate) fn values(inline: Vec<Value>) -> Self {
        debug_assert!(inline.len() <= INLINE_RESULTS);
        Returns {
            inline,
            spill: None,
        }
    }

    /// One result.
    pub(crate) fn one(v: Value) -> Self {
        Returns {
            inline: vec![v],
            spill: None,
        }
    }

    /// Number of results so far.
    pub(crate) fn len(&self) -> usize {
        match &self.spill {
            Some((_, n)) => *n,
            None => self.inline.len(),
        }
    }

    /// Appends a result.
    pub(crate) fn push(&mut self, lua: &Lua, v: Value) -> mlua::Result<()> {
        if let Some((t, n)) = &mut self.spill {
            *n += 1;
            return t.raw_set(*n, v);
        }
        if self.inline.len() < INLINE_RESULTS {
            self.inline.push(v);
            return Ok(());
        }
        let t = lua.create_table()?;
        let mut n = 0;
        for x in self.inline.drain(..) {
            n += 1;
            t.raw_set(n, x)?;
        }
        n += 1;
        t.raw_set(n, v)?;
        self.spill = Some((t, n));
        Ok(())
    }

    /// Removes and returns the last result.
    pub(crate) fn pop(&mut self) -> mlua::Result<Option<Value>> {
        if let Some((t, n)) = &mut self.spill {
            if *n == 0 {
                return Ok(None);
            }
            let v: Value = t.raw_get(*n)?;
            t.raw_set(*n, Value::Nil)?;
            *n -= 1;
            return Ok(Some(v));
        }
        Ok(self.inline.pop())
    }

    /// The last result (a new reference to it).
    pub(crate) fn last(&self) -> mlua::Result<Option<Value>> {
        match &self.spill {
            Some((t, n)) if *n > 0 => Ok(Some(t.raw_get(*n)?)),
            Some(_) => Ok(None),
            None => Ok(self.inline.last().cloned()),
        }
    }

    /// Puts `v` before all results.
    pub(crate) fn push_front(&mut self, lua: &Lua, v: Value) -> mlua::Result<()> {
        if self.spill.is_none() && self.inline.len() < INLINE_RESULTS {
            self.inline.insert(0, v);
            return Ok(());
        }
        // Rare (unpack_one/unpack_limit with many results): rebuild with `v` first.
        let old = std::mem::replace(self, Returns::new());
        self.push(lua, v)?;
        match old.spill {
            Some((t, n)) => {
                for i in 1..=n {
                    let x: Value = t.raw_get(i)?;
                    self.push(lua, x)?;
                }
            }
            None => {
                for x in old.inline {
                    self.push(lua, x)?;
                }
            }
        }
        Ok(())
    }
}

/// The C function every library function is. Upvalue 1: the inner mlua function; upvalue 2:
/// the maximum argument count (0: none).
unsafe extern "C-unwind" fn outer(l: *mut ffi::lua_State) -> c_int {
    let max = ffi::lua_tointeger(l, ffi::lua_upvalueindex(2));
    let nargs = ffi::lua_gettop(l);
    if max > 0 && i64::from(nargs) > max {
        ffi::lua_settop(l, 0);
        ffi::lua_pushinteger(l, nargs as ffi::lua_Integer);
        ffi::lua_pushlightuserdata(l, marker());
    }
    let mut n = ffi::lua_gettop(l);
    let mut refs = 0;
    for i in 1..=n {
        let t = ffi::lua_type(l, i);
        if !matches!(
            t,
            ffi::LUA_TNIL | ffi::LUA_TBOOLEAN | ffi::LUA_TNUMBER | ffi::LUA_TLIGHTUSERDATA
        ) {
            refs += 1;
        }
    }
    if refs > REF_ARGS_BUDGET {
        // (args...) -> (table of args, count, marker); lua_createtable raises on no memory.
        ffi::lua_createtable(l, n, 0);
        for i in 1..=n {
            ffi::lua_pushvalue(l, i);
            ffi::lua_rawseti(l, -2, i as _);
        }
        ffi::lua_insert(l, 1);
        ffi::lua_settop(l, 1);
        ffi::lua_pushinteger(l, n as ffi::lua_Integer);
        ffi::lua_pushlightuserdata(l, packed_marker());
        n = 3;
    }
    ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
    ffi::lua_insert(l, 1);
    ffi::lua_call(l, n, ffi::LUA_MULTRET);
    match ffi::lua_tointeger(l, 1) {
        STATUS_OK => {
            ffi::lua_remove(l, 1);
            ffi::lua_gettop(l)
        }
        STATUS_SPILLED => {
            let count = ffi::lua_tointeger(l, 3);
            ffi::lua_settop(l, 2);
            ffi::lua_remove(l, 1);
            // The producers bound their result counts below LUAI_MAXCSTACK, as Redis does.
            if !(0..LUAI_MAXCSTACK).contains(&count) || ffi::lua_checkstack(l, count as c_int) == 0
            {
                ffi::lua_settop(l, 0);
                ffi::lua_pushstring(l, c"stack overflow (too many results)".as_ptr());
                ffi::lua_error(l);
            }
            for i in 1..=count {
                ffi::lua_rawgeti(l, 1, i);
            }
            ffi::lua_remove(l, 1);
            count as c_int
        }
        _ => {
            ffi::lua_settop(l, 2);
            ffi::lua_error(l)
        }
    }
}

/// Makes a library function from its Rust body. `max_args` (0: unlimited) is the most
/// arguments handed to `body`; a call with more gets `Args::too_many` set and no arguments.
pub(crate) fn function<F>(lua: &Lua, max_args: i64, body: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, &Args) -> Outcome + 'static,
{
    let inner = lua.create_function(move |lua, mv: MultiValue| {
        let mut vals: Vec<Value> = mv.into_iter().collect();
        let mut too_many = None;
        let mut packed = None;
        if vals.len() == 3 {
            if let (Value::Table(t), Value::LightUserData(LightUserData(p))) = (&vals[0], &vals[2])
            {
                if *p == packed_marker() {
                    let n = as_number(&vals[1]).unwrap_or(0.0) as usize;
                    packed = Some((t.clone(), n));
                    vals.clear();
                }
            }
        }
        if vals.len() == 2 {
            if let Value::LightUserData(LightUserData(p)) = vals[1] {
                if p == marker() {
                    too_many = match vals[0] {
                        Value::Integer(n) => Some(n),
                        Value::Number(n) => Some(n as i64),
                        _ => None,
                    };
                    vals.clear();
                }
            }
        }
        let args = Args {
            vals,
            packed,
            too_many,
            nil_marker: std::cell::Cell::new(false),
            nil: Value::Nil,
        };
        let mut out = MultiValue::new();
        match body(lua, &args) {
            Ok(r) => match r.spill {
                Some((t, n)) => {
                    out.push_back(Value::Integer(STATUS_SPILLED));
                    out.push_back(Value::Table(t));
                    out.push_back(Value::Integer(n as i64));
                }
                None => {
                    out.push_back(Value::Integer(STATUS_OK));
                    out.extend(r.inline);
                }
            },
            Err(Raise::Msg(m)) => {
                out.push_back(Value::Integer(STATUS_ERROR));
                out.push_back(Value::String(lua.create_string(m)?));
            }
            Err(Raise::Lua(e)) => return Err(e),
        }
        Ok(out)
    })?;
    // SAFETY: the closure pops the two pushed upvalues and pushes one C closure, which
    // exec_raw returns as a Function.
    unsafe {
        lua.exec_raw::<Function>((inner, max_args), |state| {
            ffi::lua_pushcclosure(state, outer, 2);
        })
    }
}

/// A raw `next(t, k)` for tables (Lua's `lua_next`), independent of the globals a sandbox
/// may remove. Returns the next key and value, or a single nil at the end.
unsafe extern "C-unwind" fn raw_next(l: *mut ffi::lua_State) -> c_int {
    ffi::lua_settop(l, 2);
    if ffi::lua_next(l, 1) != 0 {
        2
    } else {
        ffi::lua_pushnil(l);
        1
    }
}

/// Creates the raw `next` function used to walk tables without holding a Rust iterator.
pub(crate) fn next_function(lua: &Lua) -> mlua::Result<Function> {
    // SAFETY: raw_next only uses the two arguments and is only called with a table first.
    unsafe { lua.create_c_function(raw_next) }
}

/// `luaL_where(L, 1)` as seen from a library C function: "chunk:line: " of its caller, or "".
pub(crate) fn where_prefix(lua: &Lua) -> Vec<u8> {
    lua.inspect_stack(2, |d| {
        let line = d.current_line().unwrap_or(0);
        if line > 0 {
            let src = d
                .source()
                .short_src
                .map(|s| s.into_owned())
                .unwrap_or_default();
            format!("{src}:{line}: ").into_bytes()
        } else {
            Vec::new()
        }
    })
    .unwrap_or_default()
}

/// `luaL_error`: the message with the caller's position.
pub(crate) fn error(lua: &Lua, msg: impl AsRef<[u8]>) -> Raise {
    let mut m = where_prefix(lua);
    m.extend_from_slice(msg.as_ref());
    Raise::Msg(m)
}

/// `luaL_argerror`: "bad argument #n to 'name' (extramsg)", with the method adjustment.
pub(crate) fn arg_error(lua: &Lua, narg: i64, extramsg: impl AsRef<[u8]>) -> Raise {
    let names = lua.inspect_stack(1, |d| {
        let n = d.names();
        (n.name.map(|s| s.into_owned()), n.name_what)
    });
    let extra = extramsg.as_ref();
    let Some((name, what)) = names else {
        let mut m = format!("bad argument #{narg} (").into_bytes();
        m.extend_from_slice(extra);
        m.push(b')');
        return error(lua, m);
    };
    let mut narg = narg;
    if what == Some("method") {
        narg -= 1;
        if narg == 0 {
            let mut m =
                format!("calling '{}' on bad self (", name.unwrap_or_default()).into_bytes();
            m.extend_from_slice(extra);
            m.push(b')');
            return error(lua, m);
        }
    }
    let name = name.unwrap_or_else(|| "?".to_string());
    let mut m = format!("bad argument #{narg} to '{name}' (").into_bytes();
    m.extend_from_slice(extra);
    m.push(b')');
    error(lua, m)
}

/// `luaL_typename`: Lua 5.1's name for the type of an argument ("no value" when absent).
pub(crate) fn type_name(v: Option<&Value>) -> &'static str {
    match v {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Integer(_)) | Some(Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(_) => "userdata",
    }
}

/// `luaL_typerror`: "<expected> expected, got <type>".
pub(crate) fn type_error(lua: &Lua, args: &Args, narg: usize, expected: &str) -> Raise {
    let msg = format!(
        "{expected} expected, got {}",
        type_name(args.get(narg).as_ref())
    );
    arg_error(lua, narg as i64, msg)
}

/// The number in a Lua value (Lua 5.1 numbers are doubles).
pub(crate) fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// `lua_tonumber` (numbers and numeric strings; `None` for the rest).
pub(crate) fn to_number(lua: &Lua, v: Option<&Value>) -> mlua::Result<Option<f64>> {
    match v {
        Some(Value::String(_)) => lua.coerce_number(v.cloned().unwrap_or(Value::Nil)),
        Some(v) => Ok(as_number(v)),
        None => Ok(None),
    }
}

/// `luaL_checknumber`.
pub(crate) fn check_number(lua: &Lua, args: &Args, narg: usize) -> Result<f64, Raise> {
    match to_number(lua, args.get(narg).as_ref())? {
        Some(n) => Ok(n),
        None => Err(type_error(lua, args, narg, "number")),
    }
}

/// C's `(int64_t)d` as x86-64 computes it: truncation, and INT64_MIN when out of range.
pub(crate) fn c_i64(d: f64) -> i64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if (-TWO63..TWO63).contains(&d) {
        d as i64
    } else {
        i64::MIN
    }
}

/// C's `(uint64_t)d` as GCC compiles it for x86-64 (cvttsd2si, with the 2^63 adjustment).
pub(crate) fn c_u64(d: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if d >= TWO63 {
        (c_i64(d - TWO63) as u64) ^ (1 << 63)
    } else {
        c_i64(d) as u64
    }
}

/// C's `(int)d` on x86-64: truncation, INT_MIN when out of range.
pub(crate) fn c_int(d: f64) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&d) {
        d as i32
    } else {
        i32::MIN
    }
}

/// `luaL_checkinteger` (Lua 5.1: `lua_tointeger` truncates).
pub(crate) fn check_integer(lua: &Lua, args: &Args, narg: usize) -> Result<i64, Raise> {
    Ok(c_i64(check_number(lua, args, narg)?))
}

/// `luaL_optinteger`.
pub(crate) fn opt_integer(lua: &Lua, args: &Args, narg: usize, def: i64) -> Result<i64, Raise> {
    if args.is_none_or_nil(narg) {
        Ok(def)
    } else {
        check_integer(lua, args, narg)
    }
}

/// `luaL_checklstring`: strings, and numbers converted as Lua converts them.
pub(crate) fn check_string(lua: &Lua, args: &Args, narg: usize) -> Result<mlua::LuaString, Raise> {
    match args.get(narg) {
        Some(Value::String(s)) => Ok(s),
        Some(v @ (Value::Integer(_) | Value::Number(_))) => match lua.coerce_string(v)? {
            Some(s) => Ok(s),
            None => Err(type_error(lua, args, narg, "string")),
        },
        _ => Err(type_error(lua, args, narg, "string")),
    }
}

/// A Lua number value.
pub(crate) fn num(n: f64) -> Value {
    Value::Number(n)
}
