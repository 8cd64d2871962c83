//! One Lua 5.1 VM per thread that runs scripts (the script thread, and a connection thread whose
//! EXEC runs an EVAL), built with Redis 7.0's environment (`prelude.lua`): the `redis` table,
//! Redis's `math.random`, read-only globals, no `os`, `io`, `debug`, `print`, `dofile`,
//! `loadfile`, `require`, `module`, `getfenv`/`setfenv`, `newproxy`; and the libraries of
//! `prefixkv_lua` (`cjson`, `cmsgpack`, `bit`, `struct`).
//!
//! Invariants:
//! - The VM's heap is bounded by `lua-memory-limit` (mlua's allocator limit): an allocation past it
//!   fails the script with "not enough memory" and the VM stays usable. After a run that left it
//!   over three quarters full, compiled scripts are dropped and, if that is not enough, the VM is
//!   rebuilt.
//! - Nothing a script does survives it in the VM's globals: the globals proxy refuses writes, and
//!   whatever a script stored in it with `rawset` (and `KEYS`/`ARGV`) is removed after the run.
//! - `redis.call`/`redis.pcall` are created once per VM, but reach the keyspace only while a run
//!   is in progress: they call the run's callback through the VM's [`RunSlot`], which [`Vm::run`]
//!   fills for the run's duration and empties before it returns (also on unwind), so a function
//!   kept by a script cannot reach the keyspace later (it fails, "not inside a script run").
//! - A run is one call into Lua (`run` of `prelude.lua`): it sets KEYS/ARGV, runs the script
//!   under the error handler and empties the globals proxy before it returns; if that call itself
//!   fails (killed or out of memory while clearing), the globals are cleared from Rust.
//! - A hook runs every [`HOOK_INSTRUCTIONS`] instructions, in the main coroutine and in every
//!   coroutine a script creates (Lua 5.1 hooks are per coroutine, so `coroutine.create` and
//!   `coroutine.wrap` are Rust's), and fails the script once the kill flag is set (SCRIPT KILL /
//!   FUNCTION KILL) or the VM's deadline passed (FUNCTION LOAD); the sandbox's `pcall`, `xpcall`
//!   and `coroutine.resume` raise that error again, so catching it does not keep a script alive.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use mlua::{
    chunk::ChunkMode, Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value,
    VmState,
};
use prefixkv_resp::Reply;

use super::convert;

/// Instructions between two checks of the kill flag.
pub const HOOK_INSTRUCTIONS: u32 = 10_000;

/// The message a killed script fails with (Redis's).
pub const KILLED: &str = "Script killed by user with SCRIPT KILL...";

const PRELUDE: &str = include_str!("prelude.lua");

fn kill_triggers() -> HookTriggers {
    HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS)
}

/// The hook that fails a script once it must stop (see [`Shared::stop_reason`]).
fn kill_hook(shared: &Shared) -> impl Fn(&Lua, &mlua::debug::Debug) -> mlua::Result<VmState> {
    let shared = shared.clone();
    move |_, _| match shared.stop_reason() {
        Some(reason) => Err(mlua::Error::RuntimeError(reason.into())),
        None => Ok(VmState::Continue),
    }
}

/// What every VM of the server shares.
#[derive(Clone)]
pub struct Shared {
    /// Set by SCRIPT KILL / FUNCTION KILL.
    pub kill: Arc<AtomicBool>,
    /// Redis's rand48 state for `math.random` (one sequence for the server, as Redis has).
    pub random: Arc<AtomicU64>,
    /// A VM that must stop at a time (FUNCTION LOAD's 500 ms): its code fails after it.
    pub deadline: Option<std::time::Instant>,
}

impl Shared {
    /// Why the running code must stop: SCRIPT KILL / FUNCTION KILL set the kill flag, or the
    /// VM's deadline passed.
    pub fn stop_reason(&self) -> Option<&'static str> {
        if self.kill.load(Ordering::Relaxed) {
            Some(KILLED)
        } else if self.deadline.is_some_and(|d| std::time::Instant::now() > d) {
            Some("FUNCTION LOAD timeout")
        } else {
            None
        }
    }
}

/// rand48's initial state (Redis's `x[] = {X0, X1, X2}`).
pub const RAND48_INITIAL: u64 = 0x1234_ABCD_330E;

fn rand48_next(state: &AtomicU64) -> i64 {
    const MASK: u64 = (1 << 48) - 1;
    let mut current = state.load(Ordering::Relaxed);
    loop {
        let next = current.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB) & MASK;
        match state.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return (next >> 17) as i64,
            Err(seen) => current = seen,
        }
    }
}

fn rand48_seed(state: &AtomicU64, seed: i32) {
    let seed = seed as u32 as u64;
    state.store(((seed & 0xFFFF_FFFF) << 16) | 0x330E, Ordering::Relaxed);
}

/// Where a chunk's code comes from: its chunk name (Redis's) and the environment it runs in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An EVAL script: `@user_script`, the script globals.
    Script,
    /// A function library: `@user_function`, the library globals.
    Library,
}

/// A thread's VM.
pub struct Vm {
    /// The Lua state.
    pub lua: Lua,
    env: Table,
    library_env: Table,
    runner: Function,
    run_script: Function,
    bridge: Table,
    slot: Rc<RunSlot>,
    /// Compiled EVAL scripts by SHA-1.
    pub compiled: HashMap<String, Function>,
    /// The script cache generation `compiled` belongs to (SCRIPT FLUSH bumps it).
    pub cache_generation: u64,
    /// The function registry generation `functions` was loaded from (`u64::MAX`: never).
    pub library_generation: u64,
    /// Callbacks of the loaded functions by name.
    pub functions: HashMap<String, Function>,
    memory_limit: usize,
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's VM, built on first use (or rebuilt for a new memory limit).
pub fn with_vm<R>(
    shared: &Shared,
    memory_limit: usize,
    f: impl FnOnce(&mut Vm) -> Result<R, String>,
) -> Result<R, String> {
    VM.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot
            .as_ref()
            .is_none_or(|vm| vm.memory_limit != memory_limit)
        {
            *slot = None;
            *slot = Some(Vm::new(shared, memory_limit).map_err(|e| e.to_string())?);
        }
        let vm = slot.as_mut().expect("built above");
        let result = f(vm);
        if vm.over_budget() {
            vm.compiled.clear();
            vm.functions.clear();
            vm.library_generation = u64::MAX;
            let _ = vm.lua.gc_collect();
            if vm.over_budget() {
                *slot = None;
            }
        }
        result
    })
}

/// Lua memory of this thread's VM, if it has one (INFO `used_memory_lua`).
pub fn used_memory() -> usize {
    VM.with(|cell| {
        cell.try_borrow()
            .ok()
            .and_then(|slot| slot.as_ref().map(|vm| vm.lua.used_memory()))
            .unwrap_or(0)
    })
}

impl Vm {
    /// A VM with Redis's environment, its heap bounded by `memory_limit` bytes.
    pub fn new(shared: &Shared, memory_limit: usize) -> mlua::Result<Vm> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        prefixkv_lua::load_libraries(&lua)?;
        let rust = lua.create_table()?;
        let bridge = lua.create_table()?;
        let slot = Rc::new(RunSlot::default());
        register_helpers(&lua, &rust, &slot)?;
        register_calls(&lua, &rust, &slot)?;
        let random = shared.random.clone();
        rust.set(
            "rand48",
            lua.create_function(move |_, ()| Ok(rand48_next(&random) as f64))?,
        )?;
        let random = shared.random.clone();
        rust.set(
            "srand48",
            lua.create_function(move |_, seed: f64| {
                rand48_seed(&random, seed as i64 as i32);
                Ok(())
            })?,
        )?;
        rust.set("handler", lua.create_function(error_handler)?)?;
        // false, or the message of why the script must stop (killed, past its deadline).
        let stopping = shared.clone();
        rust.set(
            "killed",
            lua.create_function(move |_, ()| Ok(stopping.stop_reason()))?,
        )?;
        let for_coroutines = shared.clone();
        rust.set(
            "coroutine",
            lua.create_function(move |lua, function: Function| {
                let thread = lua.create_thread(function)?;
                thread.set_hook(kill_triggers(), kill_hook(&for_coroutines))?;
                Ok(thread)
            })?,
        )?;
        rust.set(
            "error_value",
            lua.create_function(|lua, value: Value| error_value(lua, value))?,
        )?;
        rust.set("version", crate::REDIS_VERSION)?;
        rust.set("version_num", version_number(crate::REDIS_VERSION))?;
        let (env, library_env, runner, run_script): (Table, Table, Function, Function) = lua
            .load(PRELUDE)
            .set_name("=prefixkv")
            .set_mode(ChunkMode::Text)
            .call((bridge.clone(), rust))?;
        // What scripts must not reach, removed from the real globals too (loadstring'd code
        // runs in the proxy, but nothing should be left to find).
        let real = lua.globals();
        for name in [
            "print", "dofile", "loadfile", "require", "module", "getfenv", "setfenv", "newproxy",
        ] {
            real.raw_set(name, Value::Nil)?;
        }
        lua.set_hook(kill_triggers(), kill_hook(shared))?;
        lua.set_memory_limit(memory_limit)?;
        Ok(Vm {
            lua,
            env,
            library_env,
            runner,
            run_script,
            bridge,
            slot,
            compiled: HashMap::new(),
            cache_generation: u64::MAX,
            library_generation: u64::MAX,
            functions: HashMap::new(),
            memory_limit,
        })
    }

    fn over_budget(&self) -> bool {
        self.lua.used_memory() > self.memory_limit / 4 * 3
    }

    /// Compiles `code` as a script or a library body; `Err` is Lua's message
    /// (`user_script:1: unexpected symbol near '+'`).
    pub fn compile(&self, code: &[u8], origin: Origin) -> Result<Function, String> {
        let (name, env) = match origin {
            Origin::Script => ("@user_script", &self.env),
            Origin::Library => ("@user_function", &self.library_env),
        };
        self.lua
            .load(code)
            .set_name(name)
            .set_mode(ChunkMode::Text)
            .set_environment(env.clone())
            .into_function()
            .map_err(|error| match error {
                mlua::Error::SyntaxError { message, .. } => message,
                other => message_of(&other),
            })
    }

    /// Runs a library body with `redis.register_function` available; returns the functions it
    /// registered (name, callback, flags, description) in order, or the error line.
    pub fn load_library(&self, body: &Function) -> Result<Vec<Registered>, String> {
        let registered = self.lua.create_table().map_err(|e| e.to_string())?;
        let set = |key: &str, value: Value| self.bridge.raw_set(key, value);
        set("registered", Value::Table(registered.clone())).map_err(|e| e.to_string())?;
        set("loading", Value::Boolean(true)).map_err(|e| e.to_string())?;
        let result = self
            .runner
            .call::<MultiValue>(body.clone())
            .map_err(|e| message_of(&e));
        let _ = set("registered", Value::Nil);
        let _ = set("loading", Value::Nil);
        let mut values = result?.into_iter();
        if !matches!(values.next(), Some(Value::Boolean(true))) {
            return Err(error_line(values.next().unwrap_or(Value::Nil)).0);
        }
        let mut out = Vec::new();
        for index in 1..=registered.raw_len() {
            let name: String = registered.raw_get(index).map_err(|e| e.to_string())?;
            let entry: Table = registered
                .raw_get(name.as_str())
                .map_err(|e| e.to_string())?;
            let flags: Vec<String> = entry
                .raw_get::<Table>("flags")
                .and_then(|t| t.sequence_values().collect())
                .map_err(|e| e.to_string())?;
            out.push(Registered {
                name,
                callback: entry.raw_get("callback").map_err(|e| e.to_string())?,
                flags,
                description: entry.raw_get("description").map_err(|e| e.to_string())?,
            });
        }
        Ok(out)
    }

    /// Runs `function` (a compiled script with `keys`/`args` as KEYS/ARGV, or a function's
    /// callback with them as its two arguments) with `call` behind `redis.call`/`redis.pcall`:
    /// `call(lua, arguments, resp)` answers the value or an error line.
    /// Returns the reply, or a failed script's error line and `source:line`.
    pub fn run(
        &self,
        function: &Function,
        origin: Origin,
        keys: &[Bytes],
        args: &[Bytes],
        mut call: impl FnMut(&Lua, MultiValue, u8) -> mlua::Result<Result<Value, String>>,
    ) -> Result<Reply, (String, Option<String>)> {
        let lua = &self.lua;
        // One call into Lua: the function, whether it is a library's, the number of keys, and
        // the keys and arguments (the Lua side builds KEYS/ARGV from them).
        let arguments = (|| -> mlua::Result<MultiValue> {
            let mut arguments = MultiValue::with_capacity(3 + keys.len() + args.len());
            arguments.push_back(Value::Function(function.clone()));
            arguments.push_back(Value::Boolean(origin == Origin::Library));
            arguments.push_back(Value::Integer(keys.len() as i64));
            for item in keys.iter().chain(args) {
                arguments.push_back(Value::String(lua.create_string(item)?));
            }
            Ok(arguments)
        })()
        .map_err(|e| (format!("ERR {}", message_of(&e)), None))?;
        self.slot.resp.set(2);
        let result = {
            let _installed = Installed::new(&self.slot, &mut call);
            self.run_script.call::<MultiValue>(arguments)
        };
        let resp3 = self.slot.resp.get() == 3;
        let values = match result {
            Ok(values) => {
                self.collect_if_needed();
                values
            }
            Err(error) => {
                // The Lua side did not finish (killed or out of memory while clearing).
                self.clear_globals();
                return Err((format!("ERR {}", message_of(&error)), None));
            }
        };
        let mut values = values.into_iter();
        match values.next() {
            Some(Value::Boolean(true)) => Ok(convert::lua_to_reply(
                &values.next().unwrap_or(Value::Nil),
                resp3,
            )),
            _ => Err(error_line(values.next().unwrap_or(Value::Nil))),
        }
    }

    /// Removes whatever a script left in the globals proxy (KEYS, ARGV, rawset values).
    fn clear_globals(&self) {
        let keys: Vec<Value> = self
            .env
            .clone()
            .pairs::<Value, Value>()
            .filter_map(|pair| pair.ok().map(|(key, _)| key))
            .collect();
        for key in keys {
            let _ = self.env.raw_set(key, Value::Nil);
        }
        self.collect_if_needed();
    }

    fn collect_if_needed(&self) {
        // Lua 5.1 does not collect before failing an allocation: keep room for the next script
        // (a full collection only when half the limit is in use, so short scripts stay cheap).
        if self.lua.used_memory() > self.memory_limit / 2 {
            let _ = self.lua.gc_collect();
        }
    }
}

/// What `redis.call` runs: the current run's callback, erased to `'static` while installed.
type CallFn<'a> = dyn FnMut(&Lua, MultiValue, u8) -> mlua::Result<Result<Value, String>> + 'a;

/// The per-VM slot through which the VM's one `redis.call`/`redis.pcall` reach the run in
/// progress (none outside a run), and the run's protocol (`redis.setresp`).
#[derive(Default)]
struct RunSlot {
    call: Cell<Option<NonNull<CallFn<'static>>>>,
    resp: Cell<u8>,
}

impl RunSlot {
    /// Calls the installed callback; taken out of the slot for the call, so a nested call (none
    /// can happen: scripts cannot call scripts) finds the slot empty instead of aliasing it.
    fn call(&self, lua: &Lua, arguments: MultiValue) -> mlua::Result<Result<Value, String>> {
        let Some(mut call) = self.call.take() else {
            return raise("redis.call is only available while a script runs");
        };
        // SAFETY: `Installed::new` put this pointer here from a `&mut` that outlives the
        // `Installed` guard, whose drop empties the slot before that borrow ends (also on
        // unwind); the slot is per VM and a VM is used by one thread only (`Lua` is not `Send`
        // here, and the VM is thread-local), and the pointer is out of the slot while we use it,
        // so this is the only live reference to the callback.
        let outcome = unsafe { call.as_mut() }(lua, arguments, self.resp.get());
        self.call.set(Some(call));
        outcome
    }
}

/// Keeps a run's callback in the slot for the guard's lifetime.
struct Installed<'s> {
    slot: &'s RunSlot,
}

impl<'s> Installed<'s> {
    fn new<'a: 's>(slot: &'s RunSlot, call: &'s mut CallFn<'a>) -> Installed<'s> {
        let pointer: NonNull<CallFn<'a>> = NonNull::from(call);
        // SAFETY: only the trait object's lifetime bound changes (same layout); the pointer is
        // used only while this guard lives (see `RunSlot::call`), within `'s`.
        let pointer: NonNull<CallFn<'static>> = unsafe { std::mem::transmute(pointer) };
        slot.call.set(Some(pointer));
        Installed { slot }
    }
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        self.slot.call.set(None);
    }
}

/// `redis.call` (raises a command's error) and `redis.pcall` (returns it as `{err=...}`):
/// created once per VM, calling the run in progress through `slot`.
fn register_calls(lua: &Lua, rust: &Table, slot: &Rc<RunSlot>) -> mlua::Result<()> {
    let raising = slot.clone();
    rust.set(
        "call",
        lua.create_function(move |lua, arguments: MultiValue| {
            raising
                .call(lua, arguments)?
                .map_err(|line| mlua::Error::external(CallError(line)))
        })?,
    )?;
    let returning = slot.clone();
    rust.set(
        "pcall",
        lua.create_function(move |lua, arguments: MultiValue| {
            match returning.call(lua, arguments)? {
                Ok(value) => Ok(value),
                Err(line) => {
                    let table = lua.create_table()?;
                    table.raw_set("err", line)?;
                    Ok(Value::Table(table))
                }
            }
        })?,
    )
}

/// A function registered by a library.
pub struct Registered {
    /// Its name.
    pub name: String,
    /// Its callback.
    pub callback: Function,
    /// Its flags.
    pub flags: Vec<String>,
    /// Its description.
    pub description: Option<String>,
}

/// The error line and `source:line` of a failed run's error value: an error table from the
/// handler (`{err=..., source=..., line=...}`), or a bare value (a memory error skips the
/// handler in Lua 5.1).
fn error_line(value: Value) -> (String, Option<String>) {
    match value {
        Value::Table(table) => {
            let line = match table.raw_get::<Value>("err") {
                Ok(Value::String(text)) => text.to_string_lossy(),
                _ => "ERR unknown error".to_string(),
            };
            let source: Option<String> = table.raw_get("source").ok().flatten();
            let at: Option<i64> = table.raw_get("line").ok().flatten();
            (line, source.map(|s| format!("{s}:{}", at.unwrap_or(0))))
        }
        other => (format!("ERR {}", value_message(&other)), None),
    }
}

fn value_message(value: &Value) -> String {
    match value {
        Value::String(text) => text.to_string_lossy(),
        Value::Error(error) => message_of(error),
        Value::Nil => "nil".into(),
        other => format!("{other:?}"),
    }
}

/// The innermost message of an mlua error (a callback's own text, without mlua's wrapping).
pub fn message_of(error: &mlua::Error) -> String {
    match error {
        mlua::Error::CallbackError { cause, .. } => message_of(cause),
        mlua::Error::RuntimeError(message) => message.clone(),
        mlua::Error::MemoryError(_) => "not enough memory (lua-memory-limit)".into(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// An error raised as Redis raises from its C helpers: `{err=line}` for the script.
fn raise<T>(message: &str) -> mlua::Result<T> {
    Err(mlua::Error::external(CallError(format!("ERR {message}"))))
}

/// The `redis` helpers that check their arguments and raise (Rust functions, so a tail call to
/// them keeps the script's frame, and its line, in the error).
fn register_helpers(lua: &Lua, rust: &Table, slot: &Rc<RunSlot>) -> mlua::Result<()> {
    rust.set(
        "sha1hex",
        lua.create_function(|lua, arguments: MultiValue| {
            if arguments.len() != 1 {
                return raise("wrong number of arguments");
            }
            let text = match &arguments[0] {
                Value::String(text) => text.as_bytes().to_vec(),
                number @ (Value::Integer(_) | Value::Number(_)) => lua
                    .coerce_string(number.clone())?
                    .map(|s| s.as_bytes().to_vec())
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            Ok(super::sha1::hex(&text))
        })?,
    )?;
    rust.set(
        "log",
        lua.create_function(|lua, arguments: MultiValue| {
            if arguments.len() < 2 {
                return raise("redis.log() requires two arguments or more.");
            }
            let level = match &arguments[0] {
                Value::Integer(level) => *level as f64,
                Value::Number(level) => *level,
                _ => return raise("First argument must be a number."),
            };
            if !(0.0..=3.0).contains(&level) {
                return raise("Invalid debug level.");
            }
            let mut parts = Vec::new();
            for part in arguments.iter().skip(1) {
                if let Some(text) = lua.coerce_string(part.clone())? {
                    parts.push(text.to_string_lossy());
                }
            }
            let text = parts.join(" ");
            match level as i64 {
                3 => tracing::warn!("script: {text}"),
                2 => tracing::info!("script: {text}"),
                _ => tracing::debug!("script: {text}"),
            }
            Ok(())
        })?,
    )?;
    let resp = slot.clone();
    rust.set(
        "setresp",
        lua.create_function(move |_, arguments: MultiValue| {
            if arguments.len() != 1 {
                return raise("redis.setresp() requires one argument.");
            }
            let version = match &arguments[0] {
                Value::Integer(v) => *v as f64,
                Value::Number(v) => *v,
                _ => 0.0,
            };
            if version != 2.0 && version != 3.0 {
                return raise("RESP version must be 2 or 3.");
            }
            resp.resp.set(version as u8);
            Ok(())
        })?,
    )?;
    rust.set(
        "set_repl",
        lua.create_function(|_, arguments: MultiValue| {
            if arguments.len() != 1 {
                return raise("redis.set_repl() requires one argument.");
            }
            let flags = match &arguments[0] {
                Value::Integer(v) => *v as f64,
                Value::Number(v) => *v,
                _ => -1.0,
            };
            if !(0.0..=3.0).contains(&flags) {
                return raise(
                    "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                );
            }
            Ok(())
        })?,
    )?;
    rust.set(
        "acl_check_cmd",
        lua.create_function(|_, arguments: MultiValue| {
            let known = match arguments.front() {
                Some(Value::String(name)) => {
                    let name = name.to_string_lossy().to_ascii_lowercase();
                    crate::commands::table::find(&name).is_some()
                }
                _ => false,
            };
            if !known {
                return raise("Invalid command passed to redis.acl_check_cmd()");
            }
            // No ACLs: every user may run every command.
            Ok(true)
        })?,
    )?;
    Ok(())
}

/// The error `redis.call` raises: the command's error line. Scripts see it as Redis's
/// `{err=line}` table (`error_value`, through the sandbox's `pcall`/`xpcall` and the handler).
#[derive(Debug)]
struct CallError(String);

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CallError {}

/// A raised Rust error as the value a script sees: `{err=line}` for a failed `redis.call`, the
/// message (a string) for any other.
fn error_value(lua: &Lua, value: Value) -> mlua::Result<Value> {
    match value {
        Value::Error(error) => match error.downcast_ref::<CallError>() {
            Some(CallError(line)) => {
                let table = lua.create_table()?;
                table.raw_set("err", line.as_str())?;
                Ok(Value::Table(table))
            }
            None => Ok(Value::String(lua.create_string(message_of(&error))?)),
        },
        other => Ok(other),
    }
}

/// The message handler of every run (Redis's `__redis__err__handler`): makes the error a table
/// `{err=...}` ("ERR " before a plain message) and records where in the user's code it was
/// raised: the innermost frame of `@user_script` or `@user_function` code.
fn error_handler(lua: &Lua, error: Value) -> mlua::Result<Table> {
    let table = match error_value(lua, error)? {
        Value::Table(table) => table,
        other => {
            let table = lua.create_table()?;
            table.raw_set("err", format!("ERR {}", value_message(&other)))?;
            table
        }
    };
    for level in 0..200 {
        let frame = lua.inspect_stack(level, |debug| {
            let source = debug.source().source.map(|s| s.into_owned());
            (source, debug.current_line())
        });
        let Some((source, line)) = frame else { break };
        if let Some(source) = source.filter(|s| s.starts_with("@user_")) {
            table.raw_set("source", source)?;
            table.raw_set("line", line.unwrap_or(0) as i64)?;
            break;
        }
    }
    Ok(table)
}

/// `REDIS_VERSION_NUM`: 0x00MMmmpp of "M.m.p".
fn version_number(version: &str) -> i64 {
    let mut parts = version.split('.').map(|p| p.parse::<i64>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    let patch = parts.next().unwrap_or(0);
    (major << 16) | (minor << 8) | patch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rand48_matches_redis() {
        // redis-server 7.0.15, fresh: EVAL "return math.random(1000000)" 0 three times.
        let state = AtomicU64::new(RAND48_INITIAL);
        let draw = |state: &AtomicU64| {
            let r = (rand48_next(state) % 2147483647) as f64 / 2147483647.0;
            (r * 1_000_000.0).floor() as i64 + 1
        };
        assert_eq!(
            [draw(&state), draw(&state), draw(&state)],
            [396465, 840486, 353337]
        );
        rand48_seed(&state, 7);
        assert_eq!(draw(&state), 266445);
    }

    fn test_vm() -> Vm {
        let shared = Shared {
            kill: Arc::new(AtomicBool::new(false)),
            random: Arc::new(AtomicU64::new(RAND48_INITIAL)),
            deadline: None,
        };
        Vm::new(&shared, 1 << 24).expect("a VM")
    }

    fn keys(names: &[&'static str]) -> Vec<Bytes> {
        names
            .iter()
            .map(|n| Bytes::from_static(n.as_bytes()))
            .collect()
    }

    /// A `redis.call` stand-in that answers its first argument back, and the protocol.
    fn echo(lua: &Lua, arguments: MultiValue, resp: u8) -> mlua::Result<Result<Value, String>> {
        match arguments.front() {
            Some(Value::String(s)) if s.as_bytes().starts_with(b"fail") => {
                Ok(Err("ERR failed".into()))
            }
            Some(first) => {
                let text = format!(
                    "{}:{resp}",
                    lua.coerce_string(first.clone())?
                        .map(|s| s.to_string_lossy())
                        .unwrap_or_default()
                );
                Ok(Ok(Value::String(lua.create_string(text)?)))
            }
            None => Ok(Ok(Value::Nil)),
        }
    }

    fn run_script(
        vm: &Vm,
        code: &str,
        keys: &[Bytes],
        args: &[Bytes],
    ) -> Result<Reply, (String, Option<String>)> {
        let function = vm
            .compile(code.as_bytes(), Origin::Script)
            .expect("compiles");
        vm.run(&function, Origin::Script, keys, args, echo)
    }

    fn bulk(text: &str) -> Reply {
        Reply::BulkString(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn nothing_of_a_run_reaches_the_next() {
        let vm = test_vm();
        let changed = "rawset(_G, 'leaked', 'yes') KEYS[1] = 'changed' ARGV[1] = 'changed' \
                       rawset(_G, 'KEYS', {'other'}) return 1";
        assert_eq!(
            run_script(&vm, changed, &keys(&["a"]), &keys(&["x"])),
            Ok(Reply::Integer(1))
        );
        let reads = "return {KEYS[1], ARGV[1], tostring(rawget(_G, 'leaked')), #KEYS, #ARGV}";
        assert_eq!(
            run_script(&vm, reads, &keys(&["b", "c"]), &keys(&["y"])),
            Ok(Reply::Array(vec![
                bulk("b"),
                bulk("y"),
                bulk("nil"),
                Reply::Integer(2),
                Reply::Integer(1)
            ]))
        );
        // A failed run leaves nothing either.
        let failing = "rawset(_G, 'leaked', 'yes') error('boom')";
        assert!(run_script(&vm, failing, &keys(&["a"]), &[]).is_err());
        assert_eq!(
            run_script(&vm, "return tostring(rawget(_G, 'leaked'))", &[], &[]),
            Ok(bulk("nil"))
        );
        // setresp lasts for its run only.
        assert_eq!(
            run_script(&vm, "redis.setresp(3) return redis.call('a')", &[], &[]),
            Ok(bulk("a:3"))
        );
        assert_eq!(
            run_script(&vm, "return redis.call('a')", &[], &[]),
            Ok(bulk("a:2"))
        );
    }

    #[test]
    fn redis_call_reaches_only_the_run_in_progress() {
        let vm = test_vm();
        assert_eq!(
            run_script(&vm, "return redis.pcall('fail')", &[], &[]),
            Ok(Reply::Error(Bytes::from_static(b"ERR failed")))
        );
        let raised = run_script(&vm, "return redis.call('fail')", &[], &[]);
        assert_eq!(
            raised.map_err(|(line, _)| line),
            Err("ERR failed".to_string())
        );
        // The same `redis.call` outside a run fails instead of reaching a callback.
        let function = vm
            .compile(b"return redis.call('ping')", Origin::Script)
            .expect("compiles");
        let outside = function.call::<Value>(()).expect_err("no run in progress");
        assert!(
            message_of(&outside).contains("only available while a script runs"),
            "{outside}"
        );
    }

    #[test]
    fn version_numbers() {
        assert_eq!(version_number("7.0.15"), 458767);
    }
}
