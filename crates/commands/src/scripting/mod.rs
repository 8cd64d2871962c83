//! Scripting as Redis 7.0 has it: EVAL/EVALSHA/EVAL_RO/EVALSHA_RO, SCRIPT, FUNCTION, FCALL and
//! FCALL_RO, on Lua 5.1 (mlua, vendored) with Redis's environment (`vm.rs`, `prelude.lua`) and
//! conversion rules (`convert.rs`).
//!
//! Where scripts run: on one *script thread* (its own engine session), to which a connection
//! hands the command ([`AsyncOp::Script`](crate::commands::AsyncOp)) and whose answer it awaits,
//! so the connection's thread keeps serving its other clients (who then get BUSY, or send SCRIPT
//! KILL). An EVAL or FCALL inside EXEC runs in place, on the connection's thread (the EXEC already
//! holds the exec gate).
//!
//! The hand-off (a channel send, a wake-up of the script thread, a oneshot answer waking the
//! connection's runtime) costs more than a short script, so a connection hands a run of script
//! commands that follow each other in one read (a pipeline of EVALSHAs) over as one job
//! ([`Scripting::submit_all`], at most [`MAX_SCRIPTS_PER_JOB`]): one hand-off for the run. Each
//! script of a job still runs as it would alone (next invariants), so batching changes no
//! outcome. Scripts are not run inline on a request thread: that thread's other clients could
//! then not be answered BUSY nor send SCRIPT KILL while a long script runs.
//!
//! Invariants:
//! - Atomic: a script runs inside `Keyspace::exclusive` (the exec gate held exclusively, as EXEC),
//!   so no other client's write interleaves with it, and `busy.rs` holds every other client's
//!   command until it ends or passes `busy-reply-threshold`. Each script of a job has its own
//!   exclusive hold and its own running state: between two, other clients' commands may run.
//! - One acknowledged write, one log group: the commands a script calls run as a stand-in client
//!   of the caller (same id, the caller's database); the script's writes are one oplog group
//!   (`Keyspace::exclusive`: recovery applies all of them or none), and the caller records one
//!   write (`Client::note_write`) with the group's mark, if the script wrote. Inside EXEC the
//!   script's writes join the EXEC's group.
//! - Bounded: each VM's heap by `lua-memory-limit`; the script cache's bodies by
//!   `lua-memory-limit` bytes in total (the oldest scripts are dropped first: EVALSHA of a dropped
//!   script answers NOSCRIPT, which clients answer with EVAL); function libraries by
//!   [`functions::MAX_LIBRARY_BYTES`] of code in total; a script's reply by `convert::MAX_DEPTH`.
//! - Functions are data (`functions.rs`): every change to the libraries is written, in the same
//!   store transaction that the in-memory registry changes under, to one reserved engine record
//!   outside the 16 databases (logged and checkpointed like any write); the server reads it back at
//!   start. The script cache is not stored: it is empty after a restart, as in Redis.

mod busy;
mod convert;
mod eval;
mod functions;
mod sha1;
mod vm;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use prefixkv_resp::{Encoder, Protocol, Reply};
use prefixkv_store::StoreSession;

pub use busy::{Check, RunInfo, Running};
pub use eval::script_command;
pub use functions::{function_command, FUNCTIONS_KEY, MAX_LIBRARY_BYTES};

use crate::commands::table::{self, Spec};
use crate::commands::{AsyncOp, Client, CommandError, CommandResult, Ctx, Flow};
use crate::keyspace::WriteMark;
use crate::settings::Durability;
use crate::state::Server;

/// The server's scripting state.
pub struct Scripting {
    cache: Mutex<eval::Cache>,
    libraries: parking_lot::RwLock<functions::Libraries>,
    /// The running script (BUSY, SCRIPT KILL).
    pub running: Running,
    shared: vm::Shared,
    jobs: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
}

impl Default for Scripting {
    fn default() -> Self {
        let running = Running::default();
        // The VMs' hook reads the flag SCRIPT KILL sets: one flag.
        let kill = running.kill.clone();
        Scripting {
            cache: Mutex::new(eval::Cache::default()),
            libraries: parking_lot::RwLock::new(functions::Libraries::default()),
            running,
            shared: vm::Shared {
                kill,
                random: Arc::new(AtomicU64::new(vm::RAND48_INITIAL)),
                deadline: None,
            },
            jobs: Mutex::new(None),
        }
    }
}

/// A script command handed to the script thread.
pub struct ScriptRequest {
    /// The caller's id (the stand-in client has it too).
    pub client_id: u64,
    /// The caller's database.
    pub database: u8,
    /// The caller's protocol (the reply's encoding).
    pub protocol: Protocol,
    /// The caller's durability mode.
    pub durability: Durability,
    /// The command, name first.
    pub args: Vec<Bytes>,
}

/// What a script command answered.
pub struct ScriptOutcome {
    /// The encoded reply.
    pub reply: BytesMut,
    /// The mark of the script's writes (its log group), if it wrote.
    pub mark: Option<WriteMark>,
    /// The script thread's session, whose commit point decides when the mark is durable in the
    /// modes without a log (`None` when the script ran on the caller's session, inside EXEC).
    pub by: Option<prefixkv_engine::CommitWatch>,
    /// How long the script ran on the script thread (its command statistics and slowlog).
    pub ran_for: Duration,
}

/// The most script commands one job carries: a pipeline's longer run of scripts is handed over
/// in several jobs (bounds the job, and how long other connections' scripts queue behind it).
pub const MAX_SCRIPTS_PER_JOB: usize = 64;

/// Whether `name` (as sent, any case) is a command that hands a script to the script thread.
pub fn is_script_command(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 6] = [
        b"eval",
        b"evalsha",
        b"eval_ro",
        b"evalsha_ro",
        b"fcall",
        b"fcall_ro",
    ];
    NAMES.iter().any(|known| known.eq_ignore_ascii_case(name))
}

/// Script commands of one connection, run in order by the script thread.
struct Job {
    requests: Vec<ScriptRequest>,
    answer: Answer,
}

/// The outcomes of a job's scripts so far, sent when the job ends, however it ends: if a
/// script panics (the thread ends), the scripts before it are still answered with their own
/// replies, and only the rest with an error.
struct Answer {
    outcomes: Vec<ScriptOutcome>,
    sender: Option<tokio::sync::oneshot::Sender<Vec<ScriptOutcome>>>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            let _ = sender.send(std::mem::take(&mut self.outcomes));
        }
    }
}

impl Scripting {
    /// Reads the function libraries stored by an earlier run (at start, before clients), each
    /// loaded in a VM of at most `memory_limit` bytes; how many there are.
    pub fn restore(
        &self,
        store: &Arc<prefixkv_store::DurableStore>,
        memory_limit: u64,
    ) -> anyhow::Result<usize> {
        functions::restore(self, store, memory_limit.min(usize::MAX as u64) as usize)
    }

    /// Number of function libraries and of functions (INFO).
    pub fn function_counts(&self) -> (usize, usize) {
        self.libraries.read().counts()
    }

    /// Number of scripts in the cache (INFO `number_of_cached_scripts`).
    pub fn cached_scripts(&self) -> usize {
        self.cache.lock().len()
    }

    /// Bytes of the cached scripts' bodies (counted in `used_memory`, `crate::evict::memory`).
    pub fn cache_bytes(&self) -> u64 {
        self.cache.lock().bytes() as u64
    }

    /// Lua memory of the script thread's VM as last measured (INFO `used_memory_lua`).
    pub fn used_memory_lua(&self) -> u64 {
        self.cache.lock().vm_memory
    }

    /// Runs `requests` (script commands of one connection, in its order, at most
    /// [`MAX_SCRIPTS_PER_JOB`]) on the script thread as one job: one hand-off and one wake-up
    /// for all of them. Each runs as it would alone (its own exclusive hold of the exec gate,
    /// its own log group and mark, its own BUSY/KILL state); the answers come in the same order.
    pub async fn submit_all(
        &self,
        server: &Arc<Server>,
        requests: Vec<ScriptRequest>,
    ) -> Vec<ScriptOutcome> {
        debug_assert!(requests.len() <= MAX_SCRIPTS_PER_JOB);
        let protocols: Vec<Protocol> = requests.iter().map(|r| r.protocol).collect();
        let (sender, answered) = tokio::sync::oneshot::channel();
        let job = Job {
            answer: Answer {
                outcomes: Vec::with_capacity(requests.len()),
                sender: Some(sender),
            },
            requests,
        };
        let sent = {
            let mut jobs = self.jobs.lock();
            let sender = jobs.get_or_insert_with(|| start_thread(server.clone()));
            match sender.send(job) {
                Ok(()) => true,
                Err(std::sync::mpsc::SendError(job)) => {
                    // The thread ended (a panic): start another for this and later scripts.
                    let sender = start_thread(server.clone());
                    let sent = sender.send(job).is_ok();
                    *jobs = Some(sender);
                    sent
                }
            }
        };
        let mut outcomes = match (sent, answered.await) {
            (true, Ok(outcomes)) => outcomes,
            _ => Vec::new(),
        };
        // The scripts a failed thread did not answer.
        for protocol in protocols.into_iter().skip(outcomes.len()) {
            let mut reply = BytesMut::new();
            Encoder::new(protocol).error(&mut reply, b"ERR the script thread failed");
            outcomes.push(ScriptOutcome {
                reply,
                mark: None,
                by: None,
                ran_for: Duration::ZERO,
            });
        }
        outcomes
    }
}

fn start_thread(server: Arc<Server>) -> std::sync::mpsc::Sender<Job> {
    let (sender, jobs) = std::sync::mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("prefixkv-script".into())
        .spawn(move || {
            while let Ok(Job {
                requests,
                mut answer,
            }) = jobs.recv()
            {
                for request in &requests {
                    let outcome = run_one(&server, request);
                    answer.outcomes.push(outcome);
                }
                crate::keyspace::suspend_thread_session();
                server.scripting.cache.lock().vm_memory = vm::used_memory() as u64;
                drop(answer);
            }
            crate::keyspace::end_thread_session();
        })
        .expect("spawning the script thread");
    sender
}

/// Runs one script command on the script thread: marked running, in its own exclusive hold of
/// the exec gate (its writes one log group, acknowledged with the group's mark).
fn run_one(server: &Server, request: &ScriptRequest) -> ScriptOutcome {
    let started = std::time::Instant::now();
    // Marked running before it asks for the gate: a command that then finds the gate held
    // waits for the script without holding its thread (`held_by_other`).
    let running = server.scripting.running.start(run_info(request));
    let (mut outcome, group) = crate::keyspace::with_session(&server.keyspace.store, |session| {
        server
            .keyspace
            .exclusive(session, |session| execute(server, session, request))
    });
    match group {
        // The script's writes are one log group: the caller is acknowledged with the group's
        // mark (its log position), once, whatever the script called.
        Ok(mark) => {
            outcome.by = mark.as_ref().and_then(|_| {
                crate::keyspace::with_session(&server.keyspace.store, |session| {
                    Some(session.commit_watch())
                })
            });
            outcome.mark = mark;
        }
        Err(error) => {
            // Applied but not logged: answer the error, not a reply that would read as
            // acknowledged (as EXEC does).
            outcome.reply.clear();
            Encoder::new(request.protocol).error(&mut outcome.reply, error.to_string().as_bytes());
            outcome.mark = None;
        }
    }
    drop(running);
    outcome.ran_for = started.elapsed();
    outcome
}

/// What [`Running`] shows while `request` runs.
fn run_info(request: &ScriptRequest) -> RunInfo {
    let name = crate::commands::lower(&request.args[0]);
    let (function, script) = match name.as_str() {
        "fcall" | "fcall_ro" => (true, String::from_utf8_lossy(&request.args[1]).into_owned()),
        "evalsha" | "evalsha_ro" => (false, crate::commands::lower(&request.args[1])),
        _ => (false, sha1::hex(&request.args[1])),
    };
    RunInfo {
        client_id: request.client_id,
        started: std::time::Instant::now(),
        function,
        name: script,
        args: request.args.clone(),
    }
}

/// Runs a script command under the exec gate (held by the caller, who marked it running) and
/// encodes its reply.
fn execute(server: &Server, session: &mut StoreSession, request: &ScriptRequest) -> ScriptOutcome {
    let mut stand_in = Client::new(request.client_id, true, request.durability);
    stand_in.database = request.database;
    stand_in.in_exec = true;
    let name = crate::commands::lower(&request.args[0]);
    let reply = match name.as_str() {
        "fcall" | "fcall_ro" => {
            functions::fcall(server, session, &mut stand_in, &name, &request.args)
        }
        _ => eval::eval(server, session, &mut stand_in, &name, &request.args),
    };
    let mut out = BytesMut::new();
    let encoder = Encoder::new(request.protocol);
    match reply {
        Ok(reply) if request.protocol == Protocol::Resp2 => {
            encoder.reply(&mut out, &convert::resp2_doubles(reply))
        }
        Ok(reply) => encoder.reply(&mut out, &reply),
        Err(error) => encoder.error(&mut out, error.to_string().as_bytes()),
    }
    ScriptOutcome {
        reply: out,
        mark: stand_in.take_script_mark(),
        by: None,
        ran_for: Duration::ZERO,
    }
}

/// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL and FCALL_RO: handed to the script thread, whose
/// answer the connection awaits; inside EXEC (which holds the exec gate) run here.
pub fn call(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult<Flow> {
    if !ctx.client.in_exec {
        return Ok(Flow::Async(AsyncOp::Script(Box::new(request_of(
            ctx, args,
        )))));
    }
    let request = request_of(ctx, args);
    let _running = ctx.server.scripting.running.start(run_info(&request));
    let outcome = execute(ctx.server, ctx.session, &request);
    ctx.w.out.extend_from_slice(&outcome.reply);
    ctx.client.note_write(outcome.mark);
    Ok(Flow::Continue)
}

fn request_of(ctx: &Ctx<'_>, args: &[Bytes]) -> ScriptRequest {
    ScriptRequest {
        client_id: ctx.client.id,
        database: ctx.client.database,
        protocol: ctx.client.protocol,
        durability: ctx.client.durability,
        args: args.to_vec(),
    }
}

/// Commands Redis serves while a script is busy (`CMD_ALLOW_BUSY`).
pub(crate) fn allowed_while_busy(spec: &Spec, args: &[Bytes]) -> bool {
    let sub = || {
        args.get(1)
            .map(|a| crate::commands::lower(a))
            .unwrap_or_default()
    };
    if spec.has(table::BUSY_OK) {
        return true;
    }
    // The subcommands that touch no data.
    match spec.name {
        "script" => sub() == "kill",
        "function" => matches!(sub().as_str(), "kill" | "stats"),
        "shutdown" => args[1..]
            .iter()
            .any(|a| crate::commands::lower(a) == "nosave"),
        _ => false,
    }
}

/// Before a command runs: `None` lets it run; `Some(flow)` when a script of another client runs
/// (the command waits for it, or was answered BUSY).
pub fn admission(ctx: &mut Ctx<'_>, spec: &Spec, args: &[Bytes]) -> Option<Flow> {
    let threshold = busy_threshold(ctx.server);
    match ctx.server.scripting.running.check(ctx.client.id, threshold) {
        Check::Free => None,
        // A script command queues behind the running script on the script thread, which runs
        // one script at a time: it need not wait here. (Waiting would starve it: while
        // pipelines keep the script thread busy, a script of another client runs nearly always.)
        Check::Wait if is_script_command(spec.name.as_bytes()) => None,
        Check::Wait => Some(Flow::Async(AsyncOp::AfterScript)),
        Check::Busy { .. } if allowed_while_busy(spec, args) => None,
        Check::Busy { function } => {
            ctx.w.error(&CommandError::Busy { function });
            Some(Flow::Continue)
        }
    }
}

/// `busy-reply-threshold`.
pub fn busy_threshold(server: &Server) -> Duration {
    Duration::from_millis(server.settings.read().busy_reply_threshold_ms)
}

/// Waits until the script of another client ends or passes the threshold (then the command runs
/// again and is answered, BUSY or not).
pub async fn wait_turn(server: &Server, client_id: u64) {
    server
        .scripting
        .running
        .wait(client_id, busy_threshold(server))
        .await;
}

/// The reply of a script or function named `name` run in a VM (`vm::with_vm` around `Vm::run`):
/// its value; its failure as Redis words it, `<error> script: <name>, on <source>:<line>.`; or
/// the VM's own error line (compiling, a missing function).
fn reply_of(outcome: Result<Result<Reply, (String, Option<String>)>, String>, name: &str) -> Reply {
    match outcome {
        Ok(Ok(reply)) => reply,
        Ok(Err((line, Some(at)))) => {
            Reply::Error(Bytes::from(format!("{line} script: {name}, on {at}.")))
        }
        Ok(Err((line, None))) => Reply::Error(Bytes::from(format!("{line} script: {name}"))),
        Err(line) => Reply::Error(Bytes::from(line)),
    }
}

/// Parses `numkeys key... arg...` (from `args[2]`): the keys and the arguments.
fn keys_and_args(args: &[Bytes]) -> Result<(&[Bytes], &[Bytes]), CommandError> {
    let numkeys = crate::commands::parse_int(&args[2])?;
    if numkeys < 0 {
        return Err(CommandError::err("Number of keys can't be negative"));
    }
    let rest = &args[3..];
    if numkeys as u64 > rest.len() as u64 {
        return Err(CommandError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    Ok(rest.split_at(numkeys as usize))
}

/// Commands a script may not call (Redis's `noscript` flag).
const NOT_FROM_SCRIPT: &[&str] = &[
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
    "script",
    "function",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "save",
    "bgsave",
    "bgrewriteaof",
    "shutdown",
    "waitaof",
    "blpop",
    "brpop",
    "blmove",
    "brpoplpush",
    "bzpopmin",
    "bzpopmax",
    "auth",
    "hello",
    "quit",
    "reset",
    "client",
    "config",
    "slowlog",
    "monitor",
];

/// How a script's `redis.call` runs commands.
struct Caller<'a> {
    server: &'a Server,
    session: &'a mut StoreSession,
    client: &'a mut Client,
    /// EVAL_RO, FCALL_RO, or the `no-writes` flag: write commands are refused.
    read_only: bool,
    /// The called command's encoded reply, reused by the script's calls.
    out: BytesMut,
}

impl Caller<'_> {
    /// `redis.call(...)` / `redis.pcall(...)`: the reply as a Lua value, or its error line.
    fn call(
        &mut self,
        lua: &mlua::Lua,
        arguments: mlua::MultiValue,
        resp: u8,
    ) -> mlua::Result<Result<mlua::Value, String>> {
        let refuse = |line: &str| Ok(Err(line.to_string()));
        if arguments.is_empty() {
            return refuse("ERR Please specify at least one argument for this redis lib call");
        }
        let mut args = Vec::with_capacity(arguments.len());
        for argument in arguments {
            match argument {
                mlua::Value::String(text) => args.push(Bytes::copy_from_slice(&text.as_bytes())),
                mlua::Value::Integer(number) => args.push(Bytes::from(number.to_string())),
                mlua::Value::Number(number) => {
                    args.push(Bytes::from(convert::format_number(number)))
                }
                _ => {
                    return refuse(
                        "ERR Lua redis lib command arguments must be strings or integers",
                    )
                }
            }
        }
        // Found without lowering the name into a new string (one per call otherwise).
        let Some((_, spec)) = crate::commands::table::find_indexed_ci(&args[0]) else {
            return refuse("ERR Unknown Redis command called from script");
        };
        let name = spec.name;
        if !crate::commands::table::arity_ok(spec, args.len()) {
            return refuse("ERR Wrong number of args calling Redis command from script");
        }
        if NOT_FROM_SCRIPT.contains(&name) {
            return refuse("ERR This Redis command is not allowed from script");
        }
        // XREAD and XREADGROUP may be called, but never to wait (BLMPOP and BZMPOP run as if
        // their timeout had passed, as inside EXEC).
        if matches!(name, "xread" | "xreadgroup")
            && args.iter().any(|a| a.eq_ignore_ascii_case(b"block"))
        {
            return refuse(&format!(
                "ERR {name} command is not allowed with BLOCK option from scripts"
            ));
        }
        if spec.write {
            if self.read_only {
                return refuse("ERR Write commands are not allowed from read-only scripts.");
            }
            // From here the script is not killable (its writes cannot be taken back).
            self.server
                .scripting
                .running
                .wrote
                .store(true, Ordering::SeqCst);
        }
        self.client.protocol = if resp == 3 {
            Protocol::Resp3
        } else {
            Protocol::Resp2
        };
        let out = &mut self.out;
        out.clear();
        crate::commands::execute(self.server, self.client, self.session, &args, out);
        let limits = prefixkv_resp::Limits {
            proto_max_bulk_len: usize::MAX,
            max_multibulk_len: usize::MAX,
            max_nesting_depth: 1024,
            ..prefixkv_resp::Limits::default()
        };
        let reply = match prefixkv_resp::parse_reply(out, limits) {
            Ok(Some(reply)) => reply,
            _ => return refuse("ERR the command's reply could not be read"),
        };
        Ok(convert::reply_to_lua(lua, reply)?
            .map_err(|line| String::from_utf8_lossy(&line).into_owned()))
    }
}
