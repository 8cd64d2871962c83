//! The worker's shard as the server's command layer sees it: every command a worker runs goes
//! through `prefixkv_commands::commands::execute` over a [`DurableStore`] that wraps the worker's
//! engine ([`DurableStore::over_engine`]), with Redis Cluster's rules around it. This is the one
//! module of the cluster that uses the command layer.
//!
//! Invariants:
//! - **One version per batch.** A command runs on the batch's lent store session, on the batch's
//!   thread, and never waits for another batch while it holds the worker's latch: a command that
//!   would block (BLPOP on empty lists, XREAD BLOCK) is answered with an error naming its
//!   non-blocking form instead of waiting, and a script runs inline on the batch's session as an
//!   exclusive body (`commands::run_exclusive`, the store's exec gate held exclusively), not on
//!   the server's script thread, whose thread-local session would outlive a restore's store. So
//!   every command of a batch runs in the engine version the batch was admitted in.
//! - **Rebuilt with the store.** A [`Shard`] (the `Server`: key counts, function libraries,
//!   watches) belongs to one store wrapper; the state object builds a new wrapper at every
//!   restore, and the next batch builds a new shard over it, recounting keys from the engine's
//!   index and reloading the function libraries from the restored engine. Connection state
//!   ([`Client`]: an open MULTI, WATCHes) of the old shard is dropped with it.
//! - **Redis Cluster's rules.** Every key of one command hashes to one slot (checked before the
//!   command reaches here, by [`crate::topology`] with [`keys_of`]); the queued commands of a
//!   MULTI all hash to one slot (checked at EXEC, which then answers `-CROSSSLOT` and discards
//!   the transaction, as Redis Cluster); `SELECT` other than 0, `SWAPDB` and `MOVE` are refused
//!   as Redis Cluster refuses them, and so are SORT's `GET` and pattern `BY` and `COPY … DB n`
//!   (n ≠ 0), with Redis Cluster's errors, after the options Redis parses before them; the
//!   commands that checkpoint or wait for the server's own
//!   durability (SAVE, BGSAVE, BGREWRITEAOF, SHUTDOWN, WAITAOF) are refused, because DPR commits
//!   make a worker durable; Pub/Sub subscriptions are refused (a worker's plain RESP connection
//!   is request/reply). Keyless commands (KEYS, SCAN, DBSIZE, FLUSHDB, INFO, PUBLISH) run on
//!   this worker's own data.
//! - Bounded: one [`Client`] per open plain RESP connection (dropped when it closes); framed
//!   batches get a fresh one each.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use prefixkv_commands::commands::table::TXN_CONTROL;
use prefixkv_commands::commands::{self, getkeys, AsyncOp, Client, Flow};
use prefixkv_commands::host::Host;
use prefixkv_commands::keyspace;
use prefixkv_commands::settings::{Durability, Settings};
use prefixkv_commands::state::Server;
use prefixkv_store::{DurableStore, StoreSession};

/// The keys of a command, in order (`COMMAND GETKEYS`'s answer); `None` if it names none or
/// its keys cannot be found (a wrong arity, a bad `numkeys`): then it is not routed, and it gets
/// its own error where it runs.
pub fn keys_of(args: &[Bytes]) -> Option<Vec<&[u8]>> {
    getkeys::keys(args).ok().filter(|keys| !keys.is_empty())
}

/// The user key of an engine key written by the command layer (`[database] ++ key`); `None` for
/// the engine records that are no user key (a collection's records, the function libraries).
pub fn user_key(engine_key: &[u8]) -> Option<&[u8]> {
    let (&database, key) = engine_key.split_first()?;
    ((database as usize) < keyspace::DATABASES).then_some(key)
}

/// The command layer over one store wrapper (see the module docs).
pub(super) struct Shard {
    server: Arc<Server>,
    store: Arc<DurableStore>,
    generation: u64,
    /// Drives the waits of [`scripting::wait_turn`](prefixkv_commands::scripting::wait_turn)
    /// (a command that meets another batch's script waits for it, with its session suspended).
    waiter: tokio::runtime::Runtime,
}

/// A connection's state, with the slots its open MULTI has queued commands for.
pub(super) struct ShardClient {
    generation: u64,
    client: Client,
    /// The slot of the queued commands' keys so far, and whether they span several.
    queued_slot: Option<u16>,
    queued_cross: bool,
}

/// The current shard and the plain RESP connections' state.
pub(super) struct Shards {
    current: Mutex<Option<Arc<Shard>>>,
    clients: Mutex<HashMap<u64, ShardClient>>,
    generation: AtomicU64,
    next_client_id: AtomicU64,
    settings: Settings,
    host: Arc<WorkerHost>,
}

impl Shards {
    /// The command layer for a worker in `dir` listening on `port`: Redis's default settings
    /// (the store's mode, `none`, overrides the durability setting).
    pub(super) fn new(dir: &Path, port: u16) -> Result<Shards, String> {
        Ok(Shards {
            current: Mutex::new(None),
            clients: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            next_client_id: AtomicU64::new(1),
            settings: Settings::default(),
            host: Arc::new(WorkerHost {
                dir: dir.to_string_lossy().into_owned(),
                port,
                started_unix: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |elapsed| elapsed.as_secs()),
            }),
        })
    }

    /// The shard over `store`, built if the store wrapper changed (a restore).
    pub(super) fn get(&self, store: &Arc<DurableStore>) -> Result<Arc<Shard>, String> {
        let mut current = self.current.lock();
        if let Some(shard) = current.as_ref().filter(|s| Arc::ptr_eq(&s.store, store)) {
            return Ok(Arc::clone(shard));
        }
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let shard = Arc::new(Shard::build(
            Arc::clone(store),
            &self.settings,
            Arc::clone(&self.host) as Arc<dyn Host>,
            generation,
        )?);
        *current = Some(Arc::clone(&shard));
        Ok(shard)
    }

    /// Drops the current shard (before a restore replaces the engine's contents, so that no
    /// `Server` holds the old store).
    pub(super) fn forget(&self) {
        self.current.lock().take();
    }

    /// The state of connection `key` (`None`: a framed batch, which gets a fresh one).
    pub(super) fn take_client(&self, key: Option<u64>, shard: &Shard) -> ShardClient {
        key.and_then(|key| self.clients.lock().remove(&key))
            .filter(|client| client.generation == shard.generation)
            .unwrap_or_else(|| ShardClient {
                generation: shard.generation,
                client: Client::new(
                    self.next_client_id.fetch_add(1, Ordering::Relaxed),
                    true,
                    Durability::None,
                ),
                queued_slot: None,
                queued_cross: false,
            })
    }

    /// Keeps connection `key`'s state for its next batch.
    pub(super) fn put_client(&self, key: Option<u64>, client: ShardClient) {
        if let Some(key) = key {
            self.clients.lock().insert(key, client);
        }
    }

    /// Connection `key` closed.
    pub(super) fn closed(&self, key: u64) {
        if let Some(mut gone) = self.clients.lock().remove(&key) {
            if let Some(shard) = self.current.lock().clone() {
                if gone.generation == shard.generation {
                    gone.client.forget_subscriptions_and_watches(&shard.server);
                }
            }
        }
    }
}

impl Shard {
    fn build(
        store: Arc<DurableStore>,
        settings: &Settings,
        host: Arc<dyn Host>,
        generation: u64,
    ) -> Result<Shard, String> {
        let counts = keyspace::Keyspace::counting();
        let mut session = store.session().map_err(|e| e.to_string())?;
        let mut cursor = 0;
        let mut foreign = 0u64;
        loop {
            cursor = session
                .scan(cursor, keyspace::MAX_BUCKETS_PER_STEP, |key, value| {
                    if counts.count_loaded(key, value).is_err() {
                        foreign += 1;
                    }
                })
                .map_err(|e| format!("counting the keys failed: {e}"))?;
            if cursor == 0 {
                break;
            }
        }
        drop(session);
        if foreign > 0 {
            tracing::warn!(foreign, "engine records that are no command-layer key");
        }
        let keyspace = Arc::new(counts.with_store(Arc::clone(&store)));
        // The host never checkpoints (SAVE and the rest are refused before they reach it): the
        // DPR state object owns checkpoints.
        let server = Server::new(settings.clone(), keyspace, host);
        let loaded = server
            .scripting
            .restore(&server.keyspace.store, settings.lua_memory_limit_bytes);
        // `restore` read through this thread's session: end it, it belongs to this store.
        keyspace::end_thread_session();
        loaded.map_err(|e| format!("loading the function libraries failed: {e:#}"))?;
        let waiter = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Shard {
            server,
            store,
            generation,
            waiter,
        })
    }

    /// Runs one command of a batch (its keys already checked against the slots this worker
    /// owns), appending its one reply to `out`.
    pub(super) fn run(
        &self,
        state: &mut ShardClient,
        session: &mut StoreSession,
        args: &[Bytes],
        out: &mut BytesMut,
    ) {
        let name = commands::lower(&args[0]);
        if let Some(refusal) = refusal(&name, args) {
            out.extend_from_slice(b"-");
            out.extend_from_slice(refusal.as_bytes());
            out.extend_from_slice(b"\r\n");
            return;
        }
        let in_multi = state.client.transaction.is_some();
        if in_multi && name == "exec" && state.queued_cross {
            // Redis Cluster checks the queued commands' slots at EXEC and discards them.
            let mut discarded = BytesMut::new();
            let discard = [Bytes::from_static(b"DISCARD")];
            commands::execute(
                &self.server,
                &mut state.client,
                session,
                &discard,
                &mut discarded,
            );
            out.extend_from_slice(b"-CROSSSLOT Keys in request don't hash to the same slot\r\n");
            return;
        }
        let mut flow = commands::execute(&self.server, &mut state.client, session, args, out);
        while matches!(flow, Flow::Async(AsyncOp::AfterScript)) {
            // Another batch's script holds the exec gate: wait for it, not holding up its
            // epoch (the latch stays shared, so no version switch happens meanwhile).
            session.suspend();
            let client_id = state.client.id;
            self.waiter
                .block_on(prefixkv_commands::scripting::wait_turn(
                    &self.server,
                    client_id,
                ));
            flow = commands::execute(&self.server, &mut state.client, session, args, out);
        }
        self.note_queued(state, in_multi, &name, args);
        match flow {
            Flow::Continue | Flow::Close => {}
            Flow::Async(AsyncOp::Script(_)) => {
                // Inline, as inside EXEC: one exclusive body on this batch's session.
                let server = &self.server;
                let ran = commands::run_exclusive(server, &mut state.client, session, |c, s| {
                    c.in_exec = true;
                    let flow = commands::execute(server, c, s, args, out);
                    c.in_exec = false;
                    flow
                });
                if let Err(error) = ran {
                    out.extend_from_slice(format!("-{error}\r\n").as_bytes());
                }
            }
            Flow::Async(AsyncOp::Block { .. }) => {
                let text = format!(
                    "-ERR {} would block, and a cluster worker cannot wait inside a DPR batch \
                     (it would hold up the worker's commits): use {}\r\n",
                    name.to_ascii_uppercase(),
                    non_blocking_form(&name)
                );
                out.extend_from_slice(text.as_bytes());
            }
            Flow::Async(_) => {
                // SAVE, WAITAOF and SHUTDOWN are refused before they run.
                out.extend_from_slice(b"-ERR not available on a cluster worker\r\n");
            }
        }
    }

    /// The serialized whole value (`prefixkv_commands::dump`) of the user key stored under
    /// engine key `engine_key`, at most `limit` bytes; None if it has none or it expired. Only
    /// reads (a frozen slot is exported without a write to it).
    pub(super) fn dump_key(
        &self,
        session: &mut StoreSession,
        engine_key: &[u8],
        limit: usize,
    ) -> Result<Option<Vec<u8>>, String> {
        self.with_key(session, engine_key, |txn, database, key| {
            prefixkv_commands::dump::dump(txn, database, key, limit)
        })
    }

    /// Writes a value serialized by [`Shard::dump_key`] under engine key `engine_key`,
    /// replacing what it held (collections' records included); whether it wrote (an expired
    /// form writes nothing).
    pub(super) fn restore_key(
        &self,
        session: &mut StoreSession,
        engine_key: &[u8],
        form: &[u8],
    ) -> Result<bool, String> {
        self.with_key(session, engine_key, |txn, database, key| {
            prefixkv_commands::dump::restore(txn, database, key, form, true)
        })
    }

    /// Deletes the user key under engine key `engine_key` with the records of the collection
    /// it holds (the command layer's delete, as DEL); whether it existed.
    pub(super) fn delete_key(
        &self,
        session: &mut StoreSession,
        engine_key: &[u8],
    ) -> Result<bool, String> {
        self.with_key(session, engine_key, |txn, database, key| {
            txn.delete(database, key)
        })
    }

    /// Runs `body` in a keyspace transaction over the user key of `engine_key`, as a command
    /// runs (the store's exec gate held shared, so no MULTI or script body is half done).
    fn with_key<R>(
        &self,
        session: &mut StoreSession,
        engine_key: &[u8],
        body: impl FnOnce(
            &mut keyspace::Txn<'_>,
            u8,
            &[u8],
        ) -> prefixkv_commands::error::CommandResult<R>,
    ) -> Result<R, String> {
        let key = user_key(engine_key).ok_or("not a user key")?;
        let database = engine_key[0];
        let keyspace = &self.server.keyspace;
        session.shared(|session| {
            let mut txn = keyspace.begin(session, database, &[key]);
            let result = body(&mut txn, database, key);
            // Commit even after an error: the store's transaction releases its locks there, and
            // what a failed restore wrote it has cleared (`prefixkv_commands::dump`).
            let committed = txn.commit();
            let value = result.map_err(|e| e.to_string())?;
            committed.map_err(|e| e.to_string())?;
            Ok(value)
        })
    }

    /// Tracks the slots of the commands a MULTI queued (see the module docs).
    fn note_queued(&self, state: &mut ShardClient, was_in_multi: bool, name: &str, args: &[Bytes]) {
        if state.client.transaction.is_none() {
            state.queued_slot = None;
            state.queued_cross = false;
            return;
        }
        // The transaction commands run at once and are never queued (the table's flag).
        let control = commands::table::find(name).is_some_and(|spec| spec.has(TXN_CONTROL));
        if !was_in_multi || control {
            return;
        }
        for key in keys_of(args).unwrap_or_default() {
            let slot = prefixkv_dprnet::slots::key_slot(key);
            match state.queued_slot {
                None => state.queued_slot = Some(slot),
                Some(seen) if seen != slot => state.queued_cross = true,
                Some(_) => {}
            }
        }
    }
}

/// Why a worker refuses `name` (an error line without its `-`), or `None`.
fn refusal(name: &str, args: &[Bytes]) -> Option<String> {
    match name {
        "select" if args.len() == 2 && &args[1][..] != b"0" => {
            Some("ERR SELECT is not allowed in cluster mode".into())
        }
        "swapdb" | "move" => Some(format!(
            "ERR {} is not allowed in cluster mode",
            name.to_ascii_uppercase()
        )),
        "save" | "bgsave" | "bgrewriteaof" | "shutdown" | "waitaof" => Some(format!(
            "ERR {} is not available on a cluster worker: DPR commits make it durable (ask \
             PREFIXKV.COMMITPOINT which of your writes are)",
            name.to_ascii_uppercase()
        )),
        "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" => Some(format!(
            "ERR {} is not available on a cluster worker (its connections are request/reply)",
            name.to_ascii_uppercase()
        )),
        "sort" | "sort_ro" => sort_refusal(name == "sort_ro", args),
        "copy" => copy_refusal(args),
        _ => None,
    }
}

/// Redis Cluster refuses SORT's `BY` with a pattern and any `GET` (their keys could be in other
/// slots). Its option loop is followed so that an earlier option's error stays the command's
/// own (`None`: the command layer answers it).
fn sort_refusal(read_only: bool, args: &[Bytes]) -> Option<String> {
    let mut i = 2;
    while i < args.len() {
        let option = &args[i][..];
        let left = args.len() - i - 1;
        let is = |word: &[u8]| option.eq_ignore_ascii_case(word);
        if is(b"asc") || is(b"desc") || is(b"alpha") {
        } else if is(b"limit") && left >= 2 {
            if !redis_integer(&args[i + 1]) || !redis_integer(&args[i + 2]) {
                return None;
            }
            i += 2;
        } else if is(b"store") && !read_only && left >= 1 {
            i += 1;
        } else if is(b"by") && left >= 1 {
            if args[i + 1].contains(&b'*') {
                return Some("ERR BY option of SORT denied in Cluster mode.".into());
            }
            i += 1;
        } else if is(b"get") && left >= 1 {
            return Some("ERR GET option of SORT denied in Cluster mode.".into());
        } else {
            return None;
        }
        i += 1;
    }
    None
}

/// Redis Cluster refuses `COPY … DB n` for n ≠ 0 once the options parse (their errors stay the
/// command's own).
fn copy_refusal(args: &[Bytes]) -> Option<String> {
    let mut database = 0;
    let mut i = 3;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"replace") {
        } else if args[i].eq_ignore_ascii_case(b"db") && i + 1 < args.len() {
            let index = Some(&args[i + 1][..])
                .filter(|text| redis_integer(text))
                .and_then(|text| std::str::from_utf8(text).ok()?.parse::<usize>().ok())
                .filter(|&index| index < keyspace::DATABASES)?;
            database = index;
            i += 1;
        } else {
            return None;
        }
        i += 1;
    }
    (database != 0).then(|| "ERR Copying to another database is not allowed in cluster mode".into())
}

/// Whether `text` is an integer as Redis reads one (an optional `-`, digits, no leading zero
/// or `+`), within an i64.
fn redis_integer(text: &[u8]) -> bool {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    let canonical = match digits {
        [] => false,
        [b'0'] => text.len() == 1,
        [first, ..] => *first != b'0' && digits.iter().all(u8::is_ascii_digit),
    };
    canonical
        && std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .is_some()
}

/// What to send instead of a blocking command that would block.
fn non_blocking_form(name: &str) -> &'static str {
    match name {
        "blpop" => "LPOP",
        "brpop" => "RPOP",
        "blmove" => "LMOVE",
        "brpoplpush" => "RPOPLPUSH",
        "blmpop" => "LMPOP",
        "bzpopmin" => "ZPOPMIN",
        "bzpopmax" => "ZPOPMAX",
        "bzmpop" => "ZMPOP",
        "xread" => "XREAD without BLOCK",
        "xreadgroup" => "XREADGROUP without BLOCK",
        _ => "its non-blocking form",
    }
}

/// The worker as the command layer's host: it never saves (a worker is made durable by DPR
/// commits; the commands that would save are refused before they run, `refusal`), and it
/// reports its directory and port.
struct WorkerHost {
    dir: String,
    port: u16,
    started_unix: u64,
}

impl Host for WorkerHost {
    fn save(&self) -> Result<(), String> {
        Err("a cluster worker is made durable by DPR commits, not by SAVE".into())
    }
    fn start_background_save(&self) -> bool {
        false
    }
    fn last_save_unix(&self) -> u64 {
        self.started_unix
    }
    fn shutdown(&self, _save: bool) -> Result<(), String> {
        Err("a cluster worker is stopped by its launcher or a signal, not by SHUTDOWN".into())
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn threads(&self) -> usize {
        1
    }
    fn info_persistence(&self, text: &mut String) {
        text.push_str("dpr_worker:1\r\n");
    }
    fn parameters(&self) -> Vec<(&'static str, String)> {
        vec![("dir", self.dir.clone()), ("port", self.port.to_string())]
    }
}
