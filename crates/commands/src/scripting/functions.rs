//! FUNCTION LOAD|LIST|DELETE|FLUSH|DUMP|RESTORE|STATS|KILL|HELP and FCALL / FCALL_RO.
//!
//! Invariants:
//! - The registry (`Libraries`) changes only inside a store transaction on [`FUNCTIONS_KEY`]
//!   that writes the whole new set of libraries (the same payload as FUNCTION DUMP), so what is
//!   logged and checkpointed is always a registry the server had; a restart reads it back
//!   ([`restore`]). Lock order: the transaction (exec gate shared, then the record's stripe)
//!   before the registry lock, as the script thread takes the gate before reading the registry.
//! - Every library in the registry loaded in a VM once (FUNCTION LOAD runs it in a fresh VM,
//!   with a 500 ms limit, before anything changes); each thread's VM loads the libraries again
//!   when the registry's generation moves.
//! - The libraries' code is at most [`MAX_LIBRARY_BYTES`] in total, so the record fits one log
//!   page.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use prefixkv_resp::Reply;
use prefixkv_store::{DurableStore, StoreSession};

use super::vm::{self, Origin, Vm};
use super::{keys_and_args, reply_of, Caller, Scripting};
use crate::commands::{lower, Client, CommandError, CommandResult, Ctx};
use crate::state::Server;

/// The engine key of the function libraries: outside the databases (its first byte is not
/// 0..15) and not a collection record (whose first byte is 0xFF), so SCAN, KEYS, DBSIZE and
/// FLUSHALL never see it.
pub const FUNCTIONS_KEY: &[u8] = b"\xF0prefixkv:functions";

/// The most library code the server keeps, in bytes (all libraries together).
pub const MAX_LIBRARY_BYTES: usize = 2 << 20;

/// How long FUNCTION LOAD lets a library's top-level code run (Redis's limit).
const LOAD_TIMEOUT: Duration = Duration::from_millis(500);

const PAYLOAD_MAGIC: &[u8] = b"PKVFN1";

/// A registered function.
#[derive(Clone, Debug)]
pub struct FunctionMeta {
    /// Its name.
    pub name: String,
    /// Its flags (`no-writes`, `allow-oom`...).
    pub flags: Vec<String>,
    /// Its description.
    pub description: Option<String>,
}

/// A library.
#[derive(Clone, Debug)]
pub struct Library {
    /// The code, shebang line included.
    pub code: Bytes,
    /// Its functions, in registration order.
    pub functions: Vec<FunctionMeta>,
}

/// Every library.
#[derive(Default)]
pub struct Libraries {
    libraries: BTreeMap<String, Library>,
    /// Function name -> library name.
    functions: HashMap<String, String>,
    /// Bumped on every change.
    generation: u64,
}

impl Libraries {
    /// (libraries, functions).
    pub fn counts(&self) -> (usize, usize) {
        (self.libraries.len(), self.functions.len())
    }

    fn code_bytes(&self) -> usize {
        self.libraries.values().map(|l| l.code.len()).sum()
    }

    fn insert(&mut self, name: String, library: Library) {
        for function in &library.functions {
            self.functions.insert(function.name.clone(), name.clone());
        }
        self.libraries.insert(name, library);
    }

    fn remove(&mut self, name: &str) -> Option<Library> {
        let library = self.libraries.remove(name)?;
        for function in &library.functions {
            self.functions.remove(&function.name);
        }
        Some(library)
    }

    /// The FUNCTION DUMP payload: magic, each library's code (u32 length, bytes), CRC32C.
    fn payload(&self) -> Vec<u8> {
        let mut out = PAYLOAD_MAGIC.to_vec();
        for library in self.libraries.values() {
            out.extend_from_slice(&(library.code.len() as u32).to_le_bytes());
            out.extend_from_slice(&library.code);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// The library codes of a payload; `None` when it is not one (wrong magic or checksum).
fn parse_payload(payload: &[u8]) -> Option<Vec<Bytes>> {
    let (body, crc) = payload.split_at_checked(payload.len().checked_sub(4)?)?;
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return None;
    }
    let mut rest = body.strip_prefix(PAYLOAD_MAGIC)?;
    let mut codes = Vec::new();
    while !rest.is_empty() {
        let (length, after) = rest.split_at_checked(4)?;
        let length = u32::from_le_bytes(length.try_into().ok()?) as usize;
        let (code, after) = after.split_at_checked(length)?;
        codes.push(Bytes::copy_from_slice(code));
        rest = after;
    }
    Some(codes)
}

/// The library name of `#!lua name=<name>`.
fn library_name(code: &[u8]) -> CommandResult<String> {
    let Some(rest) = code.strip_prefix(b"#!") else {
        return Err(CommandError::err("Missing library metadata"));
    };
    let line = rest.split(|&b| b == b'\n').next().unwrap_or(b"");
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(CommandError::err(format!("Engine '{engine}' not found")));
    }
    let mut name = None;
    for part in parts {
        match part.strip_prefix("name=") {
            Some(_) if name.is_some() => {
                return Err(CommandError::err(
                    "Invalid metadata value, name argument was given multiple times",
                ))
            }
            Some(value) => name = Some(value.to_string()),
            None => {
                return Err(CommandError::err(format!(
                    "Invalid metadata value given: {part}"
                )))
            }
        }
    }
    let name = name.ok_or_else(|| CommandError::err("Library name was not given"))?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(CommandError::err(
            "Library names can only contain letters, numbers, or underscores(_) and must be at \
             least one character long",
        ));
    }
    Ok(name)
}

/// Runs a library's code in a fresh VM (at most [`LOAD_TIMEOUT`]): its name and functions.
fn check_library(
    scripting: &Scripting,
    code: &Bytes,
    limit: usize,
) -> CommandResult<(String, Library)> {
    let name = library_name(code)?;
    // Its own kill flag (SCRIPT KILL does not reach a load) and Redis's 500 ms deadline.
    let shared = vm::Shared {
        kill: Arc::default(),
        random: scripting.shared.random.clone(),
        deadline: Some(Instant::now() + LOAD_TIMEOUT),
    };
    let vm = Vm::new(&shared, limit)
        .map_err(|e| CommandError::err(format!("Error creating a Lua VM: {e}")))?;
    let body = vm
        .compile(&super::eval::code_of(code), Origin::Library)
        .map_err(|m| CommandError::err(format!("Error compiling function: {m}")))?;
    let registered = vm
        .load_library(&body)
        .map_err(|line| CommandError::err(format!("Error registering functions: {line}")))?;
    if registered.is_empty() {
        return Err(CommandError::err("No functions registered"));
    }
    let functions = registered
        .into_iter()
        .map(|f| FunctionMeta {
            name: f.name,
            flags: f.flags,
            description: f.description,
        })
        .collect();
    Ok((
        name,
        Library {
            code: code.clone(),
            functions,
        },
    ))
}

/// Writes the registry after `change` (which may refuse) in one store transaction.
fn change_libraries(
    ctx: &mut Ctx<'_>,
    change: impl FnOnce(&mut Libraries) -> CommandResult,
) -> CommandResult {
    let scripting = &ctx.server.scripting;
    let mut txn = ctx.session.begin(&[FUNCTIONS_KEY]);
    let mut libraries = scripting.libraries.write();
    let mut updated = Libraries {
        libraries: libraries.libraries.clone(),
        functions: libraries.functions.clone(),
        generation: libraries.generation + 1,
    };
    change(&mut updated)?;
    if updated.code_bytes() > MAX_LIBRARY_BYTES {
        return Err(CommandError::err(format!(
            "function libraries too large: at most {MAX_LIBRARY_BYTES} bytes of code in total"
        )));
    }
    if !updated.libraries.is_empty() {
        txn.put(FUNCTIONS_KEY, &updated.payload())?;
    } else if !libraries.libraries.is_empty() {
        txn.delete(FUNCTIONS_KEY)?;
    }
    // (Nothing stored and nothing to store, as FUNCTION FLUSH of no libraries: no write.)
    *libraries = updated;
    drop(libraries);
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    Ok(())
}

/// Reads the stored libraries at start.
pub fn restore(
    scripting: &Scripting,
    store: &Arc<DurableStore>,
    memory_limit: usize,
) -> anyhow::Result<usize> {
    let mut payload = Vec::new();
    let found =
        crate::keyspace::with_session(store, |session| session.read(FUNCTIONS_KEY, &mut payload))?;
    crate::keyspace::end_thread_session();
    if !found {
        return Ok(0);
    }
    let codes = parse_payload(&payload)
        .ok_or_else(|| anyhow::anyhow!("the stored function libraries are damaged"))?;
    let mut libraries = scripting.libraries.write();
    for code in codes {
        match check_library(scripting, &code, memory_limit) {
            Ok((name, library)) => libraries.insert(name, library),
            Err(error) => anyhow::bail!("a stored function library does not load: {error}"),
        }
    }
    libraries.generation += 1;
    Ok(libraries.libraries.len())
}

/// FCALL / FCALL_RO, on the script thread (or in EXEC), under the exec gate.
pub fn fcall(
    server: &Server,
    session: &mut StoreSession,
    client: &mut Client,
    name: &str,
    args: &[Bytes],
) -> CommandResult<Reply> {
    let (keys, argv) = keys_and_args(args)?;
    let function_name = String::from_utf8_lossy(&args[1]).into_owned();
    let scripting = &server.scripting;
    let libraries = scripting.libraries.read();
    let library = libraries
        .functions
        .get(&function_name)
        .and_then(|library| libraries.libraries.get(library))
        .ok_or_else(|| CommandError::err("Function not found"))?;
    let meta = library
        .functions
        .iter()
        .find(|f| f.name == function_name)
        .expect("the index names the library's functions");
    let no_writes = meta.flags.iter().any(|f| f == "no-writes");
    let allow_oom = meta.flags.iter().any(|f| f == "allow-oom");
    if name == "fcall_ro" && !no_writes {
        return Err(CommandError::err(
            "Can not execute a script with write flag using *_ro command.",
        ));
    }
    if super::eval::oom_refused(server, session, !no_writes, allow_oom)? {
        return Err(CommandError::OutOfMemory);
    }
    let generation = libraries.generation;
    let codes: Vec<Bytes> = libraries
        .libraries
        .values()
        .map(|l| l.code.clone())
        .collect();
    drop(libraries);
    let limit = super::eval::memory_limit(server);
    client.allow_oom = allow_oom;
    let mut caller = Caller {
        server,
        session,
        client,
        read_only: name == "fcall_ro" || no_writes,
        out: BytesMut::new(),
    };
    let outcome = vm::with_vm(&scripting.shared, limit, |vm| {
        if vm.library_generation != generation {
            load_all(vm, &codes);
            vm.library_generation = generation;
        }
        let Some(callback) = vm.functions.get(&function_name).cloned() else {
            return Err("ERR Function not found".to_string());
        };
        Ok(vm.run(
            &callback,
            Origin::Library,
            keys,
            argv,
            |lua, arguments, resp| caller.call(lua, arguments, resp),
        ))
    });
    Ok(reply_of(outcome, &function_name))
}

/// Loads every library in `vm` (they all loaded when FUNCTION LOAD checked them; one that fails
/// now, e.g. for memory, leaves its functions out: FCALL answers "Function not found").
fn load_all(vm: &mut Vm, codes: &[Bytes]) {
    vm.functions.clear();
    for code in codes {
        let Ok(body) = vm.compile(&super::eval::code_of(code), Origin::Library) else {
            continue;
        };
        match vm.load_library(&body) {
            Ok(registered) => {
                for function in registered {
                    vm.functions.insert(function.name, function.callback);
                }
            }
            Err(error) => tracing::warn!("a function library did not load in a VM: {error}"),
        }
    }
}

/// FUNCTION and its subcommands.
pub fn function_command(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let sub = lower(&args[1]);
    match (sub.as_str(), args.len()) {
        ("load", 3 | 4) => {
            let replace = match args.len() {
                4 if lower(&args[2]) == "replace" => true,
                4 => {
                    return Err(CommandError::err(format!(
                        "Unknown option given: {}",
                        String::from_utf8_lossy(&args[2])
                    )))
                }
                _ => false,
            };
            let code = args[args.len() - 1].clone();
            let limit = super::eval::memory_limit(ctx.server);
            let (name, library) = check_library(&ctx.server.scripting, &code, limit)?;
            let reply_name = name.clone();
            change_libraries(ctx, |libraries| {
                if libraries.libraries.contains_key(&name) {
                    if !replace {
                        return Err(CommandError::err(format!(
                            "Library '{name}' already exists"
                        )));
                    }
                    libraries.remove(&name);
                }
                for function in &library.functions {
                    if libraries.functions.contains_key(&function.name) {
                        return Err(CommandError::err(format!(
                            "Function {} already exists",
                            function.name
                        )));
                    }
                }
                libraries.insert(name, library);
                Ok(())
            })?;
            ctx.w.bulk(reply_name.as_bytes());
        }
        ("list", _) => list(ctx, &args[2..])?,
        ("delete", 3) => {
            let name = String::from_utf8_lossy(&args[2]).into_owned();
            change_libraries(ctx, |libraries| {
                libraries
                    .remove(&name)
                    .map(|_| ())
                    .ok_or_else(|| CommandError::err("Library not found"))
            })?;
            ctx.w.ok();
        }
        ("flush", 2 | 3) => {
            if args.len() == 3 && !matches!(lower(&args[2]).as_str(), "async" | "sync") {
                return Err(CommandError::err(
                    "FUNCTION FLUSH only supports SYNC|ASYNC option",
                ));
            }
            change_libraries(ctx, |libraries| {
                *libraries = Libraries {
                    generation: libraries.generation,
                    ..Libraries::default()
                };
                Ok(())
            })?;
            ctx.w.ok();
        }
        ("dump", 2) => {
            let payload = ctx.server.scripting.libraries.read().payload();
            ctx.w.bulk(&payload);
        }
        ("restore", 3 | 4) => restore_command(ctx, args)?,
        ("stats", 2) => stats(ctx),
        ("kill", 2) => {
            ctx.server.scripting.running.request_kill(true)?;
            ctx.w.ok();
        }
        ("help", 2) => ctx.w.help(&[
            "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "LOAD [REPLACE] <FUNCTION CODE>",
            "    Create a new library with the given library name and code.",
            "DELETE <LIBRARY NAME>",
            "    Delete the given library.",
            "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
            "    Return general information on all the libraries:",
            "    * Library name",
            "    * The engine used to run the Library",
            "    * Library description",
            "    * Functions list",
            "    * Library code (if WITHCODE is given)",
            "    It also possible to get only function that matches a pattern using LIBRARYNAME",
            "    argument.",
            "STATS",
            "    Return information about the current function running:",
            "    * Function name",
            "    * Command used to run the function",
            "    * Duration in MS that the function is running",
            "    If no function is running, return nil",
            "    In addition, returns a list of available engines.",
            "KILL",
            "    Kill the current running function.",
            "FLUSH [ASYNC|SYNC]",
            "    Delete all the libraries.",
            "    When called without the optional mode argument, the behavior is determined by the",
            "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the libraries.",
            "    * SYNC: Synchronously flush the libraries.",
            "DUMP",
            "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
            "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
            "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
            "    control how to handle existing libraries (default APPEND):",
            "    * FLUSH: delete all existing libraries.",
            "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
            "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
            "      libraries with the new libraries (notice that even on this option there is a chance of failure",
            "      in case of functions name collision with another library).",
            "HELP",
            "    Print this help.",
        ]),
        (sub @ ("load" | "delete" | "flush" | "dump" | "restore" | "stats" | "kill" | "help"), _) => {
            return Err(CommandError::arity(format!("function|{sub}")))
        }
        _ => return Err(CommandError::unknown_subcommand("FUNCTION", &args[1])),
    }
    Ok(())
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
fn list(ctx: &mut Ctx<'_>, options: &[Bytes]) -> CommandResult {
    let mut pattern: Option<Bytes> = None;
    let mut with_code = false;
    let mut index = 0;
    while index < options.len() {
        match lower(&options[index]).as_str() {
            "withcode" if !with_code => with_code = true,
            "libraryname" if pattern.is_none() => {
                let value = options
                    .get(index + 1)
                    .ok_or_else(|| CommandError::err("library name argument was not given"))?;
                pattern = Some(value.clone());
                index += 1;
            }
            _ => {
                return Err(CommandError::err(format!(
                    "Unknown argument {}",
                    String::from_utf8_lossy(&options[index])
                )))
            }
        }
        index += 1;
    }
    let libraries = ctx.server.scripting.libraries.read();
    let chosen: Vec<(&String, &Library)> = libraries
        .libraries
        .iter()
        .filter(|(name, _)| {
            pattern
                .as_ref()
                .is_none_or(|p| crate::glob::matches(p, name.as_bytes(), false))
        })
        .collect();
    ctx.w.array(chosen.len());
    for (name, library) in chosen {
        ctx.w.map(if with_code { 4 } else { 3 });
        ctx.w.bulk(b"library_name");
        ctx.w.bulk(name.as_bytes());
        ctx.w.bulk(b"engine");
        ctx.w.bulk(b"LUA");
        ctx.w.bulk(b"functions");
        ctx.w.array(library.functions.len());
        for function in &library.functions {
            ctx.w.map(3);
            ctx.w.bulk(b"name");
            ctx.w.bulk(function.name.as_bytes());
            ctx.w.bulk(b"description");
            ctx.w
                .bulk_or_null(function.description.as_deref().map(str::as_bytes));
            ctx.w.bulk(b"flags");
            ctx.w.set(function.flags.len());
            for flag in &function.flags {
                ctx.w.simple(flag);
            }
        }
        if with_code {
            ctx.w.bulk(b"library_code");
            ctx.w.bulk(&library.code);
        }
    }
    Ok(())
}

/// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE].
fn restore_command(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    #[derive(PartialEq)]
    enum Policy {
        Flush,
        Append,
        Replace,
    }
    let policy = match args.get(3).map(|a| lower(a)).as_deref() {
        None | Some("append") => Policy::Append,
        Some("flush") => Policy::Flush,
        Some("replace") => Policy::Replace,
        Some(_) => {
            return Err(CommandError::err(
                "Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            ))
        }
    };
    let codes = parse_payload(&args[2])
        .ok_or_else(|| CommandError::err("DUMP payload version or checksum are wrong"))?;
    let limit = super::eval::memory_limit(ctx.server);
    let mut restored = Vec::with_capacity(codes.len());
    for code in &codes {
        restored.push(check_library(&ctx.server.scripting, code, limit)?);
    }
    change_libraries(ctx, |libraries| {
        if policy == Policy::Flush {
            *libraries = Libraries {
                generation: libraries.generation,
                ..Libraries::default()
            };
        }
        for (name, library) in restored {
            if libraries.libraries.contains_key(&name) {
                if policy != Policy::Replace {
                    return Err(CommandError::err(format!("Library {name} already exists")));
                }
                libraries.remove(&name);
            }
            for function in &library.functions {
                if libraries.functions.contains_key(&function.name) {
                    return Err(CommandError::err(format!(
                        "Function {} already exists",
                        function.name
                    )));
                }
            }
            libraries.insert(name, library);
        }
        Ok(())
    })?;
    ctx.w.ok();
    Ok(())
}

/// FUNCTION STATS.
fn stats(ctx: &mut Ctx<'_>) {
    let running = ctx
        .server
        .scripting
        .running
        .current()
        .filter(|r| r.function);
    let (library_count, function_count) = ctx.server.scripting.function_counts();
    ctx.w.map(2);
    ctx.w.bulk(b"running_script");
    match running {
        None => ctx.w.null(),
        Some(info) => {
            ctx.w.map(3);
            ctx.w.bulk(b"name");
            ctx.w.bulk(info.name.as_bytes());
            ctx.w.bulk(b"command");
            ctx.w.array(info.args.len());
            for argument in &info.args {
                ctx.w.bulk(argument);
            }
            ctx.w.bulk(b"duration_ms");
            ctx.w.int(info.started.elapsed().as_millis() as i64);
        }
    }
    ctx.w.bulk(b"engines");
    ctx.w.map(1);
    ctx.w.bulk(b"LUA");
    ctx.w.map(2);
    ctx.w.bulk(b"libraries_count");
    ctx.w.int(library_count as i64);
    ctx.w.bulk(b"functions_count");
    ctx.w.int(function_count as i64);
}
