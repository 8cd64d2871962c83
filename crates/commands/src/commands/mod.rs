//! Command execution. `execute` runs one command synchronously on this thread's engine
//! session and encodes its reply; commands that must wait (SAVE, WAITAOF, SHUTDOWN) return an
//! [`AsyncOp`] that the connection loop awaits, in order.
//!
//! A command body returns a [`CommandResult`]: its `Err` is a typed [`CommandError`]
//! (`crate::error`, one variant per kind of Redis error), and the dispatcher writes that
//! error's line (`ERR ...`, `WRONGTYPE ...`, its `Display`) as the reply. Error lines are never
//! built as strings here: a new one is a variant, or `CommandError::err` for a one-off.

mod bits;
mod connection;
pub mod getkeys;
mod hashes;
mod keys;
mod lcs;
mod lists;
mod memory;
mod pubsub;
pub use pubsub::encode_message;
mod server;
mod sets;
mod sort;
pub(crate) mod streams;
mod strings;
pub mod table;
mod transaction;
mod zsets;

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use prefixkv_resp::{Encoder, Protocol};
use prefixkv_store::AppendTicket;
use prefixkv_store::StoreSession as Session;

pub use crate::error::{CommandError, CommandResult};
use crate::keyspace::WriteMark;
use crate::pubsub::ClientSubscriptions;
use crate::settings::Durability;
use crate::state::Server;
use crate::watch::ClientWatch;

/// What the connection loop does after a command.
pub enum Flow {
    /// Next command.
    Continue,
    /// Send the replies so far, then close (QUIT).
    Close,
    /// Await something, then continue.
    Async(AsyncOp),
}

/// Commands that wait.
pub enum AsyncOp {
    /// SAVE: a checkpoint, waited for.
    Save,
    /// WAITAOF: this connection's writes durable, within `timeout_ms` (0 = no limit).
    WaitAof {
        /// Give up after this many ms (then the reply is `[0, 0]`, as Redis on timeout).
        timeout_ms: u64,
    },
    /// SHUTDOWN: make durable (checkpoint if `save`), then exit.
    Shutdown {
        /// Take a checkpoint first.
        save: bool,
    },
    /// EVAL, EVALSHA, FCALL and their `_RO` forms: run on the script thread
    /// (`crate::scripting`), whose reply the connection awaits.
    Script(Box<crate::scripting::ScriptRequest>),
    /// A script of another client is running: wait until it ends or passes
    /// `busy-reply-threshold`, then run the same command again.
    AfterScript,
    /// A blocking list command found every key empty: wait for a push to one of `keys`, then
    /// run the same command again; at the deadline answer a null array (Redis does so for every
    /// blocking list command, BLMOVE included).
    Block {
        /// The database of `keys`.
        database: u8,
        /// The keys waited for.
        keys: Vec<Bytes>,
        /// Give up after this many ms (0 = wait forever).
        timeout_ms: u64,
        /// The kind of value waited for (a write of another kind at the key does not wake).
        kind: crate::value::Kind,
        /// The command to run again when woken, when it is not the one sent (XREAD's `$`
        /// stands for the last id at the time it blocked).
        rerun: Option<Vec<Bytes>>,
    },
}

/// Per-connection state.
pub struct Client {
    /// CLIENT ID.
    pub id: u64,
    /// Selected database.
    pub database: u8,
    /// RESP version in use.
    pub protocol: Protocol,
    /// Passed AUTH (or no password is set).
    pub authenticated: bool,
    /// CLIENT SETNAME.
    pub name: Option<String>,
    /// Write commands acknowledged on this connection.
    pub writes: u64,
    /// How many of them are known durable.
    pub durable_writes: u64,
    /// Writes not yet known durable, oldest first.
    pending: VecDeque<Pending>,
    /// The newest oplog ticket of the current batch (awaited before replying in logging modes).
    pub ticket: Option<AppendTicket>,
    /// Connection start.
    pub created: Instant,
    /// Durability mode (copied at connect).
    pub durability: Durability,
    /// Commands queued since MULTI, if a transaction is open.
    pub transaction: Option<Transaction>,
    /// Keys this connection WATCHes.
    pub watch: ClientWatch,
    /// Pub/Sub subscriptions, from the first SUBSCRIBE or PSUBSCRIBE on.
    pub subscriptions: Option<ClientSubscriptions>,
    /// EXEC is running this connection's queued commands (blocking commands do not wait).
    pub in_exec: bool,
    /// CLIENT REPLY OFF: no reply is sent until CLIENT REPLY ON.
    pub reply_off: bool,
    /// CLIENT REPLY SKIP: the next command's reply is not sent.
    pub skip_next_reply: bool,
    /// A blocked command runs again after a wake-up: a key of another type reads as empty
    /// (Redis leaves the client blocked) instead of answering WRONGTYPE.
    pub unblocking: bool,
    /// The last command's index in the command table, shared with CLIENT LIST's view of this
    /// connection (`usize::MAX` before the first).
    pub last_command: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// (serial, lsn) of the newest write recorded (a script's stand-in client hands it to the
    /// caller as the script's one write).
    last_write: Option<(u64, Option<u64>)>,
    /// A script with the `allow-oom` flag runs this stand-in client: its writes are not refused
    /// over maxmemory.
    pub allow_oom: bool,
}

/// A write acknowledged on a connection and not yet known durable.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The serial of the write in the session that made it.
    pub serial: u64,
    /// The LSN of its log record (its group's last), in the logging modes.
    pub lsn: Option<u64>,
    /// The session that made it, when not the connection's own (a script runs on the script
    /// thread's session): its serials are that session's, so its commit point decides.
    pub by: Option<prefixkv_engine::CommitWatch>,
}

impl Pending {
    /// Where it stands, for the store's durability rule.
    pub fn position(&self) -> prefixkv_store::WritePosition {
        prefixkv_store::WritePosition {
            serial: self.serial,
            lsn: self.lsn,
        }
    }
}

/// An open MULTI: the commands queued for EXEC.
#[derive(Default)]
pub struct Transaction {
    queued: Vec<Vec<Bytes>>,
    /// Argument bytes queued so far, bounded by `client-query-buffer-limit`.
    queued_bytes: u64,
    /// A command was refused while queuing: EXEC answers EXECABORT.
    failed: bool,
}

impl Client {
    /// A new connection's state.
    pub fn new(id: u64, authenticated: bool, durability: Durability) -> Client {
        Client {
            id,
            database: 0,
            protocol: Protocol::Resp2,
            authenticated,
            name: None,
            writes: 0,
            durable_writes: 0,
            pending: VecDeque::new(),
            ticket: None,
            created: Instant::now(),
            durability,
            transaction: None,
            watch: ClientWatch::default(),
            subscriptions: None,
            in_exec: false,
            unblocking: false,
            reply_off: false,
            skip_next_reply: false,
            last_command: std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX)),
            last_write: None,
            allow_oom: false,
        }
    }

    /// The mark of the newest write this (stand-in) client recorded, with its oplog ticket: a
    /// script's writes as one acknowledged write of its caller.
    pub fn take_script_mark(&mut self) -> Option<WriteMark> {
        let (serial, lsn) = self.last_write.take()?;
        Some(WriteMark {
            serial,
            lsn,
            ticket: self.ticket.take(),
            acknowledge_after_sync: false,
        })
    }

    /// Records an acknowledged write (made by this connection's session).
    pub fn note_write(&mut self, mark: Option<WriteMark>) {
        self.note_write_by(mark, None);
    }

    /// Records an acknowledged write that the session `by` watches made on this connection's
    /// behalf (`None`: this connection's own session).
    pub fn note_write_by(
        &mut self,
        mark: Option<WriteMark>,
        by: Option<prefixkv_engine::CommitWatch>,
    ) {
        let Some(mark) = mark else { return };
        self.writes += 1;
        self.last_write = Some((mark.serial, mark.lsn));
        if self.durability != Durability::None {
            self.pending.push_back(Pending {
                serial: mark.serial,
                lsn: mark.lsn,
                by,
            });
        }
        if let Some(ticket) = mark.ticket {
            self.ticket = Some(ticket);
        }
    }

    /// Acknowledges the writes of an exclusive body with the body's mark: the writes noted since
    /// the session's serial was `serial_before` carry no log position of their own (their log
    /// group is appended at the body's end), so they become durable with the group's last record.
    pub fn note_group(&mut self, serial_before: u64, mark: Option<WriteMark>) {
        let Some(mark) = mark else { return };
        // Only this session's writes belong to the body (a script run elsewhere has its own).
        for entry in self.pending.iter_mut().rev().filter(|e| e.by.is_none()) {
            if entry.serial <= serial_before {
                break;
            }
            if entry.lsn.is_none() {
                entry.lsn = mark.lsn;
            }
        }
        if let Some(ticket) = mark.ticket {
            self.ticket = Some(ticket);
        }
    }

    /// Moves writes that became durable (the store decides: `DurableStore::is_durable`) out of
    /// `pending`; returns (writes, durable writes).
    pub fn commit_point(&mut self, server: &Server, session: &Session) -> (u64, u64) {
        let own = session.commit_watch();
        while let Some(entry) = self.pending.front() {
            // The session that made the write: a script thread's, or this connection's own.
            let made_by = entry.by.as_ref().unwrap_or(&own);
            if server.keyspace.store.is_durable(entry.position(), made_by) {
                self.pending.pop_front();
                self.durable_writes += 1;
            } else {
                break;
            }
        }
        (self.writes, self.durable_writes)
    }

    /// Whether the connection holds a Pub/Sub subscription.
    pub fn is_subscribed(&self) -> bool {
        self.subscriptions.as_ref().is_some_and(|s| s.count() > 0)
    }

    /// Drops every subscription and watch (RESET; the connection closing).
    pub fn forget_subscriptions_and_watches(&mut self, server: &Server) {
        if let Some(subscriptions) = self.subscriptions.as_mut() {
            subscriptions.unsubscribe_all(&server.pubsub);
        }
        self.watch.unwatch_all(&server.keyspace.watches);
    }

    /// The newest pending write.
    pub fn newest_pending(&self) -> Option<Pending> {
        self.pending.back().cloned()
    }
}

/// Reply encoding into the batch buffer.
pub struct Writer<'a> {
    encoder: Encoder,
    /// The output buffer.
    pub out: &'a mut BytesMut,
}

impl Writer<'_> {
    /// `+OK`.
    pub fn ok(&mut self) {
        self.encoder.simple_string(self.out, b"OK");
    }
    /// A simple string.
    pub fn simple(&mut self, text: &str) {
        self.encoder.simple_string(self.out, text.as_bytes());
    }
    /// An error reply: the error's line.
    pub fn error(&mut self, error: &CommandError) {
        self.encoder.error(self.out, error.to_string().as_bytes());
    }
    /// An integer.
    pub fn int(&mut self, value: i64) {
        self.encoder.integer(self.out, value);
    }
    /// A bulk string.
    pub fn bulk(&mut self, bytes: &[u8]) {
        self.encoder.bulk_string(self.out, bytes);
    }
    /// A null bulk (`$-1` / `_`).
    pub fn null(&mut self) {
        self.encoder.null_bulk_string(self.out);
    }
    /// A null array (`*-1` / `_`).
    pub fn null_array(&mut self) {
        self.encoder.null_array(self.out);
    }
    /// Array header.
    pub fn array(&mut self, len: usize) {
        self.encoder.array_header(self.out, len);
    }
    /// Map header (RESP2: array of 2*pairs).
    pub fn map(&mut self, pairs: usize) {
        self.encoder.map_header(self.out, pairs);
    }
    /// Set header (RESP2: array).
    pub fn set(&mut self, len: usize) {
        self.encoder.set_header(self.out, len);
    }
    /// A verbatim text (RESP2: bulk string).
    pub fn verbatim(&mut self, text: &[u8]) {
        self.encoder.verbatim_string(self.out, *b"txt", text);
    }
    /// A HELP reply: one simple string per line.
    pub fn help(&mut self, lines: &[&str]) {
        self.array(lines.len());
        for line in lines {
            self.simple(line);
        }
    }
    /// Optional bulk.
    pub fn bulk_or_null(&mut self, bytes: Option<&[u8]>) {
        match bytes {
            Some(b) => self.bulk(b),
            None => self.null(),
        }
    }
}

/// Everything a command body needs.
pub struct Ctx<'a> {
    /// Shared state.
    pub server: &'a Server,
    /// This connection.
    pub client: &'a mut Client,
    /// This thread's engine session.
    pub session: &'a mut Session,
    /// Reply output.
    pub w: Writer<'a>,
}

impl Ctx<'_> {
    /// Selected database.
    pub fn db(&self) -> u8 {
        self.client.database
    }
}

/// Lower-cases an argument as a string (lossy for non-UTF-8, which never names a command).
pub fn lower(argument: &[u8]) -> String {
    String::from_utf8_lossy(argument).to_ascii_lowercase()
}

/// Parses an integer argument as Redis does: optional `-`, no `+`, no leading zeros, no `-0`.
pub fn parse_int(argument: &[u8]) -> CommandResult<i64> {
    std::str::from_utf8(argument)
        .ok()
        .filter(|text| {
            let digits = text.strip_prefix('-').unwrap_or(text);
            let canonical = if digits.starts_with('0') {
                *text == "0"
            } else {
                !digits.is_empty()
            };
            canonical && digits.bytes().all(|b| b.is_ascii_digit())
        })
        .and_then(|text| text.parse::<i64>().ok())
        .ok_or(CommandError::NotInteger)
}

/// Parses a float argument (no NaN).
pub fn parse_float(argument: &[u8]) -> CommandResult<f64> {
    let text = std::str::from_utf8(argument).map_err(|_| CommandError::NotFloat)?;
    let lowered = text.to_ascii_lowercase();
    let value = match lowered.as_str() {
        "inf" | "+inf" | "infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ if text.is_empty() || text.trim() != text => return Err(CommandError::NotFloat),
        _ => text.parse::<f64>().map_err(|_| CommandError::NotFloat)?,
    };
    if value.is_nan() {
        return Err(CommandError::NotFloat);
    }
    Ok(value)
}

/// A SCAN-family cursor: an unsigned integer, else Redis's `ERR invalid cursor`.
pub fn parse_cursor(argument: &[u8]) -> CommandResult<u64> {
    std::str::from_utf8(argument)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or(CommandError::InvalidCursor)
}

/// The options of a SCAN-family command after its cursor.
pub struct ScanOptions {
    /// MATCH pattern.
    pub pattern: Option<Bytes>,
    /// COUNT (at least 1; 10 when not given).
    pub count: usize,
    /// TYPE name, lower-cased (SCAN only).
    pub kind: Option<String>,
}

/// Parses `MATCH p`, `COUNT n` and, when `allow_type`, `TYPE t` pairs, as Redis does: a missing
/// value, a COUNT below 1 or an unknown option is a syntax error.
pub fn parse_scan_options(options: &[Bytes], allow_type: bool) -> CommandResult<ScanOptions> {
    let mut parsed = ScanOptions {
        pattern: None,
        count: 10,
        kind: None,
    };
    for pair in options.chunks(2) {
        let [name, value] = pair else {
            return Err(CommandError::Syntax);
        };
        match lower(name).as_str() {
            "match" => parsed.pattern = Some(value.clone()),
            "count" => match parse_int(value)? {
                n if n < 1 => return Err(CommandError::Syntax),
                n => parsed.count = n as usize,
            },
            "type" if allow_type => parsed.kind = Some(lower(value)),
            _ => return Err(CommandError::Syntax),
        }
    }
    Ok(parsed)
}

/// Reads a collection under its key's lock: `of` takes the key's value apart (`None` for no key,
/// WRONGTYPE for another type: `crate::objects::list_of` and its siblings), `body` runs with the
/// structure and its records; `None` when there is no such collection. Then commits: a read
/// writes nothing, unless the key had expired and was removed.
pub fn read_collection<T, R>(
    ctx: &mut Ctx<'_>,
    of: impl FnOnce(Option<crate::value::Stored>) -> CommandResult<Option<(T, u64)>>,
    key: &[u8],
    body: impl FnOnce(&T, &mut prefixkv_collections::Owned<'_, '_>) -> CommandResult<R>,
) -> CommandResult<Option<R>> {
    let db = ctx.db();
    let mut txn = ctx.server.keyspace.begin(ctx.session, db, &[key]);
    let result = match of(txn.get(db, key)?)? {
        Some((structure, _)) => {
            Some(txn.with_records(db, key, |records| body(&structure, records))?)
        }
        None => None,
    };
    let mark = txn.commit()?;
    ctx.client.note_write(mark);
    Ok(result)
}

/// Runs `body` as an exclusive body (EXEC's queued commands, a script): no other client's command
/// runs meanwhile, and its writes are one oplog group that recovery applies whole or not at all.
/// The writes inside are acknowledged with the group's mark (noted on `client`, so the connection
/// awaits the group's record in `always`). An `Err` says the group could not be logged (the oplog
/// failed): the writes were applied, their outcome is uncertain, and the caller answers the error
/// instead of `body`'s replies.
pub fn run_exclusive<R>(
    server: &Server,
    client: &mut Client,
    session: &mut Session,
    body: impl FnOnce(&mut Client, &mut Session) -> R,
) -> CommandResult<R> {
    let serial_before = session.serial();
    let (value, mark) = server
        .keyspace
        .exclusive(session, |session| body(client, session));
    client.note_group(serial_before, mark?);
    Ok(value)
}

/// A refused command inside MULTI makes the whole transaction fail at EXEC, as in Redis.
fn refuse_in_transaction(client: &mut Client) {
    if let Some(transaction) = client.transaction.as_mut() {
        transaction.failed = true;
    }
}

/// How a command ended, for its statistics.
enum Outcome {
    /// It ran (its reply may be an error).
    Executed(Flow),
    /// It was refused before running (arity, authentication, OOM, subscribed context).
    Rejected,
    /// MULTI queued it, or it was a transaction command handled on the way.
    Queued(Flow),
}

/// Runs one command and keeps its statistics (`INFO commandstats`, `latencystats`, SLOWLOG).
pub fn execute(
    server: &Server,
    client: &mut Client,
    session: &mut Session,
    args: &[Bytes],
    out: &mut BytesMut,
) -> Flow {
    server.stats.commands.fetch_add(1, Ordering::Relaxed);
    execute_batched(server, client, session, args, lookup(args), out, &mut None)
}

/// A command's place in the table and its row (`None`: no such command), looked up once by a
/// batch for [`batchable`], [`prefetch`] and [`execute_batched`].
pub type Found = Option<(usize, &'static table::Spec)>;

/// Looks the command `args` up in the table (its name in any case).
pub fn lookup(args: &[Bytes]) -> Found {
    table::find_indexed_ci(args.first()?)
}

/// [`execute`] for a command of a batch, which counts its commands in `stats.commands` itself
/// (once per batch, not one shared atomic add per command) and chains the clock: `clock` holds
/// the time the command starts when the caller has it (the previous command's end, read when
/// its duration was recorded), and is left holding this command's end (or `None` when no clock
/// was read at its end), so a run of commands reads the clock once per command.
pub fn execute_batched(
    server: &Server,
    client: &mut Client,
    session: &mut Session,
    args: &[Bytes],
    found: Found,
    out: &mut BytesMut,
    clock: &mut Option<Instant>,
) -> Flow {
    let started = clock.take();
    let encoder = Encoder::new(client.protocol);
    let mut ctx = Ctx {
        server,
        client,
        session,
        w: Writer { encoder, out },
    };
    let Some((index, spec)) = found else {
        refuse_in_transaction(ctx.client);
        ctx.w.error(&CommandError::unknown_command(args));
        return Flow::Continue;
    };
    // The row's name is the lowered name the client sent (the lookup matched it).
    let name = spec.name;
    ctx.client.last_command.store(index, Ordering::Relaxed);
    let started = started.unwrap_or_else(Instant::now);
    let reply_start = ctx.w.out.len();
    let counters = server.command_stats.command(index);
    // CLIENT REPLY: a SKIP before this command drops its reply; so does OFF (the command may be
    // CLIENT REPLY ON, which clears it first); OFF and SKIP themselves send nothing.
    let skipped = std::mem::take(&mut ctx.client.skip_next_reply);
    let notifier = &server.keyspace.notifier;
    if notifier.active() {
        // Touches left by an earlier command that ran with notifications off are not ours.
        crate::notify::take_touched();
    }
    let outcome = run_command(&mut ctx, spec, name, args);
    if notifier.active() {
        let zero = ctx.w.out.get(reply_start..) == Some(&b":0\r\n"[..]);
        // These answer how many elements changed: 0 means nothing did, and Redis sends nothing.
        let unchanged = zero && spec.has(table::QUIET_ON_ZERO)
            || (zero
                && name == "xgroup"
                && args.get(1).is_some_and(|sub| {
                    sub.eq_ignore_ascii_case(b"createconsumer")
                        || sub.eq_ignore_ascii_case(b"destroy")
                }));
        if unchanged {
            crate::notify::take_touched();
        } else {
            notify_command(server, ctx.client.database, name, args);
        }
        notifier.flush(&server.pubsub);
    }
    let is_skip = ctx.client.skip_next_reply;
    if skipped || is_skip || ctx.client.reply_off {
        ctx.w.out.truncate(reply_start);
    }
    let answered_later = matches!(
        outcome,
        Outcome::Executed(Flow::Async(AsyncOp::Block { .. } | AsyncOp::Script(_)))
            | Outcome::Queued(Flow::Async(AsyncOp::AfterScript))
    );
    if skipped && answered_later {
        // A skipped command answered later (a blocking command's retry or its timeout's null,
        // a script's answer, a command run again after another client's script): the
        // connection drops that reply while this is set.
        ctx.client.skip_next_reply = true;
    }
    match outcome {
        // A script handed to the script thread is counted when it ends (`record_script`).
        Outcome::Executed(flow @ Flow::Async(AsyncOp::Script(_))) => flow,
        Outcome::Executed(flow) => {
            // Every reply that starts with '-' is an error line.
            let failed = ctx.w.out.get(reply_start) == Some(&b'-');
            *clock = Some(record(server, ctx.client.id, index, args, started, failed));
            flow
        }
        Outcome::Rejected => {
            counters.rejected_calls.fetch_add(1, Ordering::Relaxed);
            Flow::Continue
        }
        Outcome::Queued(flow) => flow,
    }
}

/// Queues the keyspace events of the command that just ran (`crate::notify`), keys in the order
/// the command names them (a source before its destination).
fn notify_command(server: &Server, database: u8, name: &str, args: &[Bytes]) {
    let stream_facts = crate::notify::take_stream_facts();
    let mut touched = crate::notify::take_touched();
    if touched.is_empty() {
        return;
    }
    if matches!(name, "mset" | "msetnx") {
        // One `set` per pair, a key named twice included, as Redis (`new` before a key's
        // first `set` when MSET created it).
        let notifier = &server.keyspace.notifier;
        let mut announced: Vec<&[u8]> = Vec::new();
        for pair in args[1..].chunks(2) {
            let created = touched.iter().any(|t| t.created && t.key == pair[0]);
            if created && !announced.contains(&&pair[0][..]) {
                notifier.notify(crate::notify::NEW, "new", database, &pair[0]);
                announced.push(&pair[0]);
            }
            notifier.notify(crate::notify::STRING, "set", database, &pair[0]);
        }
        return;
    }
    let position = |key: &[u8]| args.iter().skip(1).position(|a| &a[..] == key);
    touched.sort_by_key(|t| {
        (
            position(&t.key).unwrap_or(usize::MAX),
            t.database != database,
        )
    });
    let notifier = &server.keyspace.notifier;
    if matches!(name, "rename" | "renamenx" | "move" | "copy") {
        // Redis adds the destination anew (after deleting an old one): `new` comes first.
        for touch in touched.iter_mut().filter(|t| t.present) {
            notifier.notify(crate::notify::NEW, "new", touch.database, &touch.key);
            touch.created = false;
        }
    }
    for touch in touched {
        let (db, key) = (touch.database, &touch.key);
        if touch.created && name != "swapdb" {
            notifier.notify(crate::notify::NEW, "new", db, key);
        }
        let in_source_db = db == database;
        for (class, event) in crate::notify::command_events(
            name,
            args,
            key,
            in_source_db,
            touch.present,
            stream_facts,
        ) {
            notifier.notify(class, event, db, key);
        }
    }
}

/// Counts a command that ran (`INFO commandstats`, `latencystats`, SLOWLOG); the time it ended.
fn record(
    server: &Server,
    client_id: u64,
    index: usize,
    args: &[Bytes],
    started: Instant,
    failed: bool,
) -> Instant {
    let ended = Instant::now();
    let duration_us = ended.saturating_duration_since(started).as_micros() as u64;
    server.command_stats.record(index, duration_us, failed, || {
        let info = server.clients.lock().get(&client_id).cloned();
        (
            args.iter().map(|a| a.to_vec()).collect(),
            info.as_ref().map_or_else(String::new, |i| i.addr.clone()),
            info.map_or_else(String::new, |i| i.name),
        )
    });
    ended
}

/// Counts a script command the script thread ran, from `started` (its hand-off) to its answer,
/// so a slow script shows in SLOWLOG and `INFO commandstats` as in Redis.
pub fn record_script(
    server: &Server,
    client_id: u64,
    args: &[Bytes],
    started: Instant,
    failed: bool,
) {
    if let Some((index, _)) = table::find_indexed_ci(&args[0]) {
        let _ended = record(server, client_id, index, args, started, failed);
    }
}

/// Whether the command `found` may run inside a batch (`prefixkv_store::StoreSession::batch`: the
/// exec gate held shared across several commands of one connection, stripes kept between them).
/// Not those that take the gate exclusively (EXCLUSIVE, EXEC and the other TXN_CONTROL commands),
/// suspend the session to walk without the engine (SUSPEND), wait or change the connection
/// (NO_MULTI: SAVE, WAITAOF, SUBSCRIBE, AUTH...), act at once (AT_ONCE: QUIT, RESET), run while a
/// script is busy (BUSY_OK), nor unknown names: each runs alone, as before batches. A command that
/// blocks or answers asynchronously (BLPOP, EVAL) may start in a batch: the batch ends after it,
/// before the connection waits.
pub fn batchable(found: Found) -> bool {
    const ALONE: u16 = table::EXCLUSIVE
        | table::SUSPEND
        | table::NO_MULTI
        | table::AT_ONCE
        | table::TXN_CONTROL
        | table::BUSY_OK;
    found.is_some_and(|(_, spec)| spec.flags & ALONE == 0)
}

/// Hints the engine about the keys the command `args` names in the table (`first_key`,
/// `last_key`, `step`), in `database`: their index buckets, and with `record` their records
/// too. A hint changes nothing but timing; a command with no key positions gets none.
pub fn prefetch(session: &Session, database: u8, args: &[Bytes], found: Found, record: bool) {
    let Some((_, spec)) = found else {
        return;
    };
    if spec.first_key <= 0 || spec.step <= 0 {
        return;
    }
    let count = args.len() as i64;
    let last = if spec.last_key < 0 {
        count + spec.last_key
    } else {
        spec.last_key.min(count - 1)
    };
    let mut position = spec.first_key;
    // A few keys suffice for a hint (an MSET of thousands gains nothing from more).
    let mut hinted = 0;
    while position <= last && hinted < 4 {
        let engine_key = crate::keyspace::StackKey::new(database, &args[position as usize]);
        if record {
            session.prefetch_record(&engine_key);
        } else {
            session.prefetch_index(&engine_key);
        }
        position += spec.step;
        hinted += 1;
    }
}

/// The checks before a command runs, then the command.
fn run_command(ctx: &mut Ctx<'_>, spec: &table::Spec, name: &str, args: &[Bytes]) -> Outcome {
    let server = ctx.server;
    if !ctx.client.authenticated && !spec.has(table::NO_AUTH) {
        refuse_in_transaction(ctx.client);
        ctx.w.error(&CommandError::NoAuth);
        return Outcome::Rejected;
    }
    if !table::arity_ok(spec, args.len()) {
        refuse_in_transaction(ctx.client);
        ctx.w.error(&CommandError::arity(spec.name));
        return Outcome::Rejected;
    }
    let subscribed_resp2 = ctx.client.protocol == Protocol::Resp2 && ctx.client.is_subscribed();
    if subscribed_resp2 && !spec.has(table::SUBSCRIBED_OK) {
        ctx.w.error(&CommandError::SubscribedContext {
            command: name.to_string(),
        });
        return Outcome::Rejected;
    }
    if let Some(flow) = crate::scripting::admission(ctx, spec, args) {
        return match flow {
            Flow::Continue => Outcome::Rejected,
            waiting => Outcome::Queued(waiting),
        };
    }
    let queuing = ctx.client.transaction.is_some() && !spec.has(table::ENDS_TXN);
    if let Some(flow) = transaction::handle(ctx, spec, args) {
        return if queuing {
            Outcome::Queued(flow)
        } else {
            Outcome::Executed(flow)
        };
    }
    if subscribed_resp2 && name == "ping" {
        if let Err(error) = pubsub::subscribed_ping(ctx, args) {
            ctx.w.error(&error);
        }
        return Outcome::Executed(Flow::Continue);
    }
    if spec.write
        && !ctx.client.allow_oom
        && !spec.has(table::MAY_FREE)
        && !streams::allowed_over_maxmemory(name, args)
        && crate::evict::over_maxmemory(server)
    {
        // Over maxmemory, the policy evicts first (`crate::evict`), under the exec gate like
        // the command itself; a write it cannot make room for is refused. Under it (the usual
        // case) the write takes the gate once, for itself.
        let running = &server.scripting.running;
        let client_id = ctx.client.id;
        let evicted = ctx.session.shared_unless(
            || running.held_by_other(client_id),
            |session| crate::evict::evict_for_command(server, session),
        );
        match evicted {
            None => return Outcome::Queued(Flow::Async(AsyncOp::AfterScript)),
            Some(Err(error)) => {
                ctx.w.error(&error);
                return Outcome::Rejected;
            }
            Some(Ok(crate::evict::Outcome::Refused)) => {
                ctx.w.error(&CommandError::OutOfMemory);
                return Outcome::Rejected;
            }
            Some(Ok(_)) => {}
        }
    }
    match dispatch_shared(ctx, spec, args) {
        Some(flow) => Outcome::Executed(flow),
        // A script of another client holds the gate: wait for it without holding this thread.
        None => Outcome::Queued(Flow::Async(AsyncOp::AfterScript)),
    }
}

/// Runs the command whole while no exclusive body (EXEC, a script) is half done: the exec gate
/// is held shared around it (inside an exclusive body this is a no-op), so readers, too, see a
/// body entirely or not at all (`keyspace` invariants). A command that waits (a blocking pop, SAVE)
/// returns before it waits, releasing the gate.
fn dispatch_shared(ctx: &mut Ctx<'_>, spec: &table::Spec, args: &[Bytes]) -> Option<Flow> {
    // `table::EXCLUSIVE` commands take the gate exclusively themselves; those Redis serves while
    // a script is busy (SCRIPT KILL, SHUTDOWN NOSAVE, ...) touch no data and must not wait for
    // the script.
    if spec.has(table::EXCLUSIVE) || crate::scripting::allowed_while_busy(spec, args) {
        return Some(dispatch(ctx, spec, args));
    }
    let Ctx {
        server,
        client,
        session,
        w,
    } = ctx;
    let encoder = w.encoder;
    let running = &server.scripting.running;
    let client_id = client.id;
    session.shared_unless(
        || running.held_by_other(client_id),
        |session| {
            let mut inner = Ctx {
                server,
                client,
                session,
                w: Writer {
                    encoder,
                    out: &mut *w.out,
                },
            };
            dispatch(&mut inner, spec, args)
        },
    )
}

/// Runs a command that passed its checks.
fn dispatch(ctx: &mut Ctx<'_>, spec: &table::Spec, args: &[Bytes]) -> Flow {
    if spec.has(table::SUSPEND) {
        ctx.session.suspend();
    }
    run_handler(ctx, spec, args)
}

/// Calls the row's handler; an error becomes the reply.
fn run_handler(ctx: &mut Ctx<'_>, spec: &table::Spec, args: &[Bytes]) -> Flow {
    let result = match spec.handler {
        table::Handler::Reply(handler) => handler(ctx, args).map(|()| Flow::Continue),
        table::Handler::Flow(handler) => handler(ctx, args),
    };
    result.unwrap_or_else(|error| {
        ctx.w.error(&error);
        Flow::Continue
    })
}
