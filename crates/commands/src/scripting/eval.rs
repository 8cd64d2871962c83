//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP: scripts named by
//! the SHA-1 of their body, kept in a bounded cache (see the module invariants in `mod.rs`), with
//! their flags from a `#!lua flags=...` shebang line.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use prefixkv_resp::Reply;
use prefixkv_store::StoreSession;

use super::vm::{self, Origin};
use super::{keys_and_args, reply_of, sha1, Caller};
use crate::commands::{lower, Client, CommandError, CommandResult, Ctx};
use crate::state::Server;

/// A script's flags (shebang `flags=`), as Redis 7.0 names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// The script starts with a shebang line (then only the listed flags hold; without one,
    /// Redis's legacy rules: writes allowed, OOM checked per write command).
    pub shebang: bool,
    /// `no-writes`: write commands are refused; EVAL_RO may run it.
    pub no_writes: bool,
    /// `allow-oom`: runs even when used memory is over maxmemory.
    pub allow_oom: bool,
}

/// Parses the flags of a script body (`#!lua flags=no-writes,allow-oom`). The names Redis knows
/// that mean nothing without replicas or a cluster (`allow-stale`, `no-cluster`,
/// `allow-cross-slot-keys`) are accepted.
pub fn parse_shebang(body: &[u8]) -> CommandResult<Flags> {
    let Some(rest) = body.strip_prefix(b"#!") else {
        return Ok(Flags::default());
    };
    let line = rest.split(|&b| b == b'\n').next().unwrap_or(b"");
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if engine != "lua" {
        return Err(CommandError::err(format!(
            "Unexpected engine in script shebang: #!{engine}"
        )));
    }
    let mut flags = Flags {
        shebang: true,
        ..Flags::default()
    };
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(CommandError::err(format!(
                "Unknown lua shebang option: {part}"
            )));
        };
        for flag in list.split(',').filter(|f| !f.is_empty()) {
            match flag {
                "no-writes" => flags.no_writes = true,
                "allow-oom" => flags.allow_oom = true,
                "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => {
                    return Err(CommandError::err(format!(
                        "Unexpected flag in script shebang: {other}"
                    )))
                }
            }
        }
    }
    Ok(flags)
}

/// The code Lua compiles: the body with its shebang line blanked (line numbers stay Redis's).
pub fn code_of(body: &Bytes) -> Bytes {
    if !body.starts_with(b"#!") {
        return body.clone();
    }
    match body.iter().position(|&b| b == b'\n') {
        Some(newline) => body.slice(newline..),
        None => Bytes::new(),
    }
}

/// A cached script.
pub struct Script {
    /// The body as sent.
    pub body: Bytes,
    /// Its flags.
    pub flags: Flags,
}

/// The script cache: SHA-1 -> script, oldest first, bounded in bytes.
#[derive(Default)]
pub struct Cache {
    scripts: HashMap<String, Arc<Script>>,
    order: VecDeque<String>,
    bytes: usize,
    /// SCRIPT FLUSH bumps it: VMs drop what they compiled before.
    pub generation: u64,
    /// Lua memory of the script thread's VM after its last run.
    pub vm_memory: u64,
}

impl Cache {
    /// Number of scripts.
    pub fn len(&self) -> usize {
        self.scripts.len()
    }

    /// Bytes of the cached bodies.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn get(&self, sha: &str) -> Option<Arc<Script>> {
        self.scripts.get(sha).cloned()
    }

    /// Adds a script, dropping the oldest ones while the bodies pass `limit` bytes.
    fn insert(&mut self, sha: String, script: Script, limit: usize) -> Arc<Script> {
        if let Some(existing) = self.scripts.get(&sha) {
            return existing.clone();
        }
        let script = Arc::new(script);
        self.bytes += script.body.len();
        self.scripts.insert(sha.clone(), script.clone());
        self.order.push_back(sha);
        while self.bytes > limit && self.order.len() > 1 {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(dropped) = self.scripts.remove(&oldest) {
                self.bytes -= dropped.body.len();
            }
        }
        script
    }

    fn flush(&mut self) {
        self.scripts.clear();
        self.order.clear();
        self.bytes = 0;
        self.generation += 1;
    }
}

/// Compiles `body` in this thread's VM (checking it) and caches it; its SHA-1.
fn load(server: &Server, body: &Bytes) -> Result<(String, Arc<Script>), CommandError> {
    let sha = sha1::hex(body);
    if let Some(script) = server.scripting.cache.lock().get(&sha) {
        return Ok((sha, script));
    }
    let flags = parse_shebang(body)?;
    let limit = memory_limit(server);
    if body.len() > limit {
        return Err(CommandError::err(format!(
            "script too large: {} bytes, lua-memory-limit is {limit}",
            body.len()
        )));
    }
    let scripting = &server.scripting;
    vm::with_vm(&scripting.shared, limit, |vm| {
        vm.compile(&code_of(body), Origin::Script).map(|_| ())
    })
    .map_err(|message| {
        CommandError::err(format!("Error compiling script (new function): {message}"))
    })?;
    let script = Script {
        body: body.clone(),
        flags,
    };
    let script = scripting.cache.lock().insert(sha.clone(), script, limit);
    Ok((sha, script))
}

/// `lua-memory-limit` in bytes.
pub fn memory_limit(server: &Server) -> usize {
    server
        .settings
        .read()
        .lua_memory_limit_bytes
        .min(usize::MAX as u64) as usize
}

/// Whether a script may start now under maxmemory: one that may write evicts first, as any
/// write command (`crate::evict`), and is refused if memory is still over the limit and nothing
/// could be evicted, unless it has `allow-oom` (Redis's rule).
pub fn oom_refused(
    server: &Server,
    session: &mut StoreSession,
    may_write: bool,
    allow_oom: bool,
) -> CommandResult<bool> {
    if !may_write || allow_oom {
        return Ok(false);
    }
    let outcome = crate::evict::evict_for_command(server, session)?;
    Ok(outcome == crate::evict::Outcome::Refused)
}

/// EVAL and its siblings, on the script thread (or in EXEC), under the exec gate.
pub fn eval(
    server: &Server,
    session: &mut StoreSession,
    client: &mut Client,
    name: &str,
    args: &[Bytes],
) -> CommandResult<Reply> {
    let (keys, argv) = keys_and_args(args)?;
    let (sha, script) = if name.starts_with("evalsha") {
        let sha = lower(&args[1]);
        let found = server.scripting.cache.lock().get(&sha);
        (sha, found.ok_or(CommandError::NoScript)?)
    } else {
        load(server, &args[1])?
    };
    let read_only_command = name.ends_with("_ro");
    let flags = script.flags;
    if read_only_command && flags.shebang && !flags.no_writes {
        return Err(CommandError::err(
            "Can not execute a script with write flag using *_ro command.",
        ));
    }
    if flags.shebang && oom_refused(server, session, !flags.no_writes, flags.allow_oom)? {
        return Err(CommandError::OutOfMemory);
    }
    let scripting = &server.scripting;
    let generation = scripting.cache.lock().generation;
    let limit = memory_limit(server);
    client.allow_oom = flags.allow_oom;
    let mut caller = Caller {
        server,
        session,
        client,
        read_only: read_only_command || flags.no_writes,
        out: BytesMut::new(),
    };
    let outcome = vm::with_vm(&scripting.shared, limit, |vm| {
        if vm.cache_generation != generation {
            vm.compiled.clear();
            vm.cache_generation = generation;
        }
        let function = match vm.compiled.get(&sha) {
            Some(function) => function.clone(),
            None => {
                let function = vm
                    .compile(&code_of(&script.body), Origin::Script)
                    .map_err(|m| format!("ERR Error compiling script (new function): {m}"))?;
                vm.compiled.insert(sha.clone(), function.clone());
                function
            }
        };
        Ok(vm.run(
            &function,
            Origin::Script,
            keys,
            argv,
            |lua, arguments, resp| caller.call(lua, arguments, resp),
        ))
    });
    Ok(reply_of(outcome, &sha))
}

/// SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP.
pub fn script_command(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let sub = lower(&args[1]);
    match (sub.as_str(), args.len()) {
        ("load", 3) => {
            let (sha, _) = load(ctx.server, &args[2])?;
            ctx.w.bulk(sha.as_bytes());
        }
        ("exists", n) if n >= 3 => {
            let cache = ctx.server.scripting.cache.lock();
            let found: Vec<bool> = args[2..]
                .iter()
                .map(|sha| cache.get(&lower(sha)).is_some())
                .collect();
            drop(cache);
            ctx.w.array(found.len());
            for present in found {
                ctx.w.int(i64::from(present));
            }
        }
        ("flush", 2 | 3) => {
            if args.len() == 3 && !matches!(lower(&args[2]).as_str(), "async" | "sync") {
                return Err(CommandError::err(
                    "SCRIPT FLUSH only support SYNC|ASYNC option",
                ));
            }
            ctx.server.scripting.cache.lock().flush();
            ctx.w.ok();
        }
        ("kill", 2) => {
            ctx.server.scripting.running.request_kill(false)?;
            ctx.w.ok();
        }
        // The Lua debugger is not implemented: turning it off is the state it is always in.
        ("debug", 3) => match lower(&args[2]).as_str() {
            "no" => ctx.w.ok(),
            "yes" | "sync" => {
                return Err(CommandError::err(
                    "SCRIPT DEBUG YES|SYNC is not supported: this server has no Lua debugger",
                ))
            }
            _ => return Err(CommandError::err("Use SCRIPT DEBUG YES/SYNC/NO")),
        },
        ("help", 2) => ctx.w.help(&[
            "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache. Very dangerous on replicas.",
            "    When called without the optional mode argument, the behavior is determined by the",
            "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the scripts cache.",
            "    * SYNC: Synchronously flush the scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
            "HELP",
            "    Print this help.",
        ]),
        (sub @ ("load" | "exists" | "flush" | "kill" | "debug" | "help"), _) => {
            return Err(CommandError::arity(format!("script|{sub}")))
        }
        _ => return Err(CommandError::unknown_subcommand("SCRIPT", &args[1])),
    }
    Ok(())
}
