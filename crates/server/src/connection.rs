//! One client connection: read, parse every complete request, execute in order, write all
//! replies of the read with one write.
//!
//! Under `always` and `everysec`, replies of a batch are written only after the batch's newest
//! oplog record completed (synced under `always`, written to the file under `everysec`); LSNs
//! complete in order, so awaiting the newest covers the batch. If the oplog failed, the
//! connection is closed without sending those replies: nothing unlogged is acknowledged.
//!
//! A pipeline runs as batches (`run_batch`): the requests parsed from a read run, up to
//! `prefixkv_store::BATCH_MAX_COMMANDS` at a time, inside one hold of this thread's session and
//! one shared hold of the exec gate (`StoreSession::batch`), whose transactions keep a hot key's
//! stripe from one command to the next, with the engine told about the keys of the commands
//! ahead (`PREFETCH_INDEX_AHEAD`, `PREFETCH_RECORD_AHEAD`). A batch ends before a command that
//! must run alone (`commands::batchable`: it takes the gate exclusively, suspends, waits or acts
//! at once) and after one that blocks or answers asynchronously, so nothing waits inside a batch.
//! Replies, durability waits and output limits are those of commands run one by one: a batch
//! acknowledges nothing earlier.
//!
//! Scripts (EVAL, FCALL) run on the script thread (`prefixkv_commands::scripting`): the connection awaits
//! the answer, so its thread goes on serving its other connections. A run of script commands
//! back to back in one read (a pipeline of EVALSHAs) is handed over as one job (`run_scripts`),
//! replies still in request order. A command that meets another
//! client's running script awaits the script's end (or BUSY) and then runs again.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use prefixkv_resp::{Limits, RequestParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use prefixkv_commands::commands::{self, AsyncOp, Client, Flow};
use prefixkv_commands::error::CommandError;
use prefixkv_commands::keyspace;
use prefixkv_commands::state::{ClientInfo, Server};

const READ_CHUNK_BYTES: usize = 16 << 10;
/// How many commands ahead of the running one a batch loads the keys' index buckets (the
/// engine's batch hints pay off some 8 to 16 operations ahead)...
const PREFETCH_INDEX_AHEAD: usize = 8;
/// ... and, half as far ahead, their records.
const PREFETCH_RECORD_AHEAD: usize = 4;

/// Serves one connection to its end.
pub async fn serve(server: Arc<Server>, mut stream: TcpStream, addr: String) {
    let id = server.next_client_id.fetch_add(1, Ordering::Relaxed);
    let settings = server.settings.read().clone();
    let authenticated = settings.requirepass.is_none();
    let mut client = Client::new(id, authenticated, settings.durability);
    server.clients.lock().insert(
        id,
        ClientInfo {
            addr,
            name: String::new(),
            database: 0,
            created: client.created,
            lib_name: String::new(),
            lib_ver: String::new(),
            last_command: client.last_command.clone(),
            resp: 2,
        },
    );
    let _ = stream.set_nodelay(true);
    let result = serve_loop(&server, &mut stream, &mut client).await;
    client.forget_subscriptions_and_watches(&server);
    if let Err(error) = result {
        if error.kind() != std::io::ErrorKind::ConnectionReset
            && error.kind() != std::io::ErrorKind::BrokenPipe
        {
            tracing::debug!("client {id}: {error}");
        }
    }
    server.clients.lock().remove(&id);
    server.stats.connected.fetch_sub(1, Ordering::Relaxed);
}

async fn serve_loop(
    server: &Arc<Server>,
    stream: &mut TcpStream,
    client: &mut Client,
) -> std::io::Result<()> {
    let limits = Limits {
        proto_max_bulk_len: server
            .settings
            .read()
            .proto_max_bulk_len_bytes
            .min(usize::MAX as u64) as usize,
        ..Limits::default()
    };
    let mut parser = RequestParser::new(limits);
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut output = BytesMut::with_capacity(READ_CHUNK_BYTES);
    // The requests parsed from one read (bounded by client-query-buffer-limit, which bounds the
    // read), kept across reads for its capacity.
    let mut requests: Vec<Vec<bytes::Bytes>> = Vec::new();
    // Argument lists of requests already run, reused by the parser (`parse_into`): no
    // allocation per request once a connection has run a read's worth.
    let mut spare: Vec<Vec<bytes::Bytes>> = Vec::new();
    // Requests that arrived while a blocked command waited (`wait_unblocked` reads them into
    // `input`) are parsed before the next read: a client may send nothing more until they are
    // answered, so a read first would wait for it forever.
    let mut unparsed_input = false;
    loop {
        if input.capacity() - input.len() < READ_CHUNK_BYTES / 4 {
            input.reserve(READ_CHUNK_BYTES);
        }
        if !std::mem::take(&mut unparsed_input) {
            match read_or_deliver(server, stream, client, &mut input, &mut output).await? {
                Wait::Read => {}
                Wait::Delivered => continue,
                Wait::Closed => return Ok(()),
            }
        }
        let (query_limit, output_limit) = {
            let settings = server.settings.read();
            (
                settings.client_query_buffer_limit_bytes,
                settings.client_output_buffer_limit_bytes,
            )
        };
        if input.len() as u64 > query_limit {
            tracing::info!("closing client {}: query buffer over client-query-buffer-limit ({query_limit} bytes)", client.id);
            return Ok(());
        }
        let mut close = false;
        let mut parse_error = None;
        recycle(&mut requests, &mut spare);
        loop {
            let mut args = spare.pop().unwrap_or_default();
            match parser.parse_into(&mut input, &mut args) {
                Ok(true) => requests.push(args),
                Ok(false) => {
                    spare.push(args);
                    break;
                }
                Err(error) => {
                    // Answered after the requests before it, then the connection closes.
                    parse_error = Some(error);
                    break;
                }
            }
        }
        let mut next = 0;
        while next < requests.len() {
            let (ran, mut flow) =
                run_batch(server, client, &requests[next..], &mut output, output_limit);
            next += ran;
            // The command that ended the batch.
            let args = &requests[next - 1];
            // A script of another client runs: wait for it (or for BUSY), then run again.
            while matches!(flow, Flow::Async(AsyncOp::AfterScript)) {
                prefixkv_commands::scripting::wait_turn(server, client.id).await;
                flow = keyspace::with_session(&server.keyspace.store, |session| {
                    commands::execute(server, client, session, args, &mut output)
                });
            }
            match flow {
                Flow::Continue => {}
                Flow::Close => {
                    close = true;
                    break;
                }
                Flow::Async(AsyncOp::Block {
                    database,
                    keys,
                    timeout_ms,
                    kind,
                    rerun,
                }) => {
                    if !await_ticket(client).await
                        || !flush(server, stream, &mut output, client).await?
                    {
                        return Ok(());
                    }
                    let wait = BlockedWait {
                        args: rerun.as_deref().unwrap_or(args),
                        database,
                        keys: &keys,
                        timeout_ms,
                        kind,
                    };
                    if !wait_unblocked(server, stream, client, &mut input, &mut output, wait)
                        .await?
                    {
                        return Ok(());
                    }
                    unparsed_input = !input.is_empty();
                }
                // A script needs nothing of the earlier replies' durability: the batch's last
                // await covers its writes with the rest (oplog records complete in order).
                Flow::Async(AsyncOp::Script(request)) => {
                    let (consumed, closing) =
                        run_scripts(server, client, &requests[next..], &mut output, *request).await;
                    next += consumed;
                    if closing {
                        close = true;
                        break;
                    }
                }
                Flow::Async(operation) => {
                    if !await_ticket(client).await {
                        return Ok(());
                    }
                    run_async(server, client, operation, &mut output).await;
                }
            }
            if output.len() as u64 > output_limit {
                tracing::info!("closing client {}: reply over client-output-buffer-limit ({output_limit} bytes)", client.id);
                return Ok(());
            }
        }
        if let (false, Some(error)) = (close, parse_error) {
            output.extend_from_slice(b"-");
            output.extend_from_slice(error.to_string().as_bytes());
            output.extend_from_slice(b"\r\n");
            close = true;
        }
        if !await_ticket(client).await {
            return Ok(());
        }
        deliver_queued(client, &mut output);
        if !flush(server, stream, &mut output, client).await? || close {
            return Ok(());
        }
    }
}

/// What waiting for a connection's next input gave.
enum Wait {
    /// Bytes were appended to the input buffer.
    Read,
    /// Pub/Sub messages were written instead: wait again.
    Delivered,
    /// The client closed (or must be closed: a publisher dropped a message for it).
    Closed,
}

/// Reads the next bytes of requests into `input`; a connection with subscriptions (or messages
/// still queued) takes a request or a message, whichever comes first (both are cancel safe: the
/// loser takes nothing), and a message is delivered at once.
async fn read_or_deliver(
    server: &Server,
    stream: &mut TcpStream,
    client: &mut Client,
    input: &mut BytesMut,
    output: &mut BytesMut,
) -> std::io::Result<Wait> {
    let encoder = prefixkv_resp::Encoder::new(client.protocol);
    let read = match client.subscriptions.as_mut() {
        Some(subscriptions) if subscriptions.count() > 0 || subscriptions.has_queued() => {
            tokio::select! {
                read = stream.read_buf(input) => read?,
                message = subscriptions.next() => {
                    if let Some(message) = message {
                        commands::encode_message(encoder, output, &message);
                    }
                    deliver_queued(client, output);
                    return Ok(if flush(server, stream, output, client).await? {
                        Wait::Delivered
                    } else {
                        Wait::Closed
                    });
                }
            }
        }
        _ => stream.read_buf(input).await?,
    };
    if read == 0 {
        return Ok(Wait::Closed);
    }
    server
        .stats
        .input_bytes
        .fetch_add(read as u64, Ordering::Relaxed);
    Ok(Wait::Read)
}

/// Argument lists kept for reuse at most; each holds at most this many arguments' room.
const SPARE_ARGUMENT_LISTS: usize = 1024;
const SPARE_ARGUMENT_CAPACITY: usize = 64;

/// Moves the argument lists of the requests that ran to `spare`, emptied (releasing their
/// arguments' hold on the read buffer), keeping at most [`SPARE_ARGUMENT_LISTS`] small ones: a
/// read of many requests or one huge MSET pins no memory beyond that.
fn recycle(requests: &mut Vec<Vec<bytes::Bytes>>, spare: &mut Vec<Vec<bytes::Bytes>>) {
    for mut args in requests.drain(..) {
        if spare.len() < SPARE_ARGUMENT_LISTS && args.capacity() <= SPARE_ARGUMENT_CAPACITY {
            args.clear();
            spare.push(args);
        }
    }
}

/// Runs the first of `requests` and, while they may (`commands::batchable`), the ones after it
/// as one batch (module docs); returns how many ran and the last one's flow. A batch ends after
/// a command whose flow is not `Continue` and once the replies pass client-output-buffer-limit,
/// so the caller handles both exactly as for a command run alone.
fn run_batch(
    server: &Arc<Server>,
    client: &mut Client,
    requests: &[Vec<bytes::Bytes>],
    output: &mut BytesMut,
    output_limit: u64,
) -> (usize, Flow) {
    const LIMIT: usize = prefixkv_store::BATCH_MAX_COMMANDS;
    let store = &server.keyspace.store;
    let first = commands::lookup(&requests[0]);
    if requests.len() < 2 || !commands::batchable(first) {
        return (1, run_alone(server, client, &requests[0], output));
    }
    let requests = &requests[..requests.len().min(LIMIT)];
    // Each request's row, looked up once for the checks, the hints and the run.
    let mut found: [commands::Found; LIMIT] = [None; LIMIT];
    for (slot, request) in found.iter_mut().zip(requests) {
        *slot = commands::lookup(request);
    }
    let running = &server.scripting.running;
    let client_id = client.id;
    let batched = keyspace::with_session(store, |session| {
        session.batch(
            || running.held_by_other(client_id),
            |session| {
                let database = client.database;
                for (ahead, &row) in requests.iter().zip(&found).take(PREFETCH_INDEX_AHEAD) {
                    commands::prefetch(session, database, ahead, row, false);
                }
                let mut ran = 0;
                let mut clock = None;
                loop {
                    let database = client.database;
                    let ahead = ran + PREFETCH_INDEX_AHEAD;
                    if let Some(request) = requests.get(ahead) {
                        commands::prefetch(session, database, request, found[ahead], false);
                    }
                    let ahead = ran + PREFETCH_RECORD_AHEAD;
                    if let Some(request) = requests.get(ahead) {
                        commands::prefetch(session, database, request, found[ahead], true);
                    }
                    let flow = commands::execute_batched(
                        server,
                        client,
                        session,
                        &requests[ran],
                        found[ran],
                        output,
                        &mut clock,
                    );
                    ran += 1;
                    if !matches!(flow, Flow::Continue)
                        || ran == requests.len()
                        || output.len() as u64 > output_limit
                        || !commands::batchable(found[ran])
                    {
                        // The batch's commands, counted once (`commands::execute_batched`).
                        server
                            .stats
                            .commands
                            .fetch_add(ran as u64, Ordering::Relaxed);
                        return (ran, flow);
                    }
                }
            },
        )
    });
    // A script of another client holds the gate: the first command alone meets it (and awaits
    // its end as any command does).
    batched.unwrap_or_else(|| (1, run_alone(server, client, &requests[0], output)))
}

/// Runs one command outside any batch.
fn run_alone(
    server: &Arc<Server>,
    client: &mut Client,
    args: &[bytes::Bytes],
    output: &mut BytesMut,
) -> Flow {
    keyspace::with_session(&server.keyspace.store, |session| {
        commands::execute(server, client, session, args, output)
    })
}

/// A script whose reply is awaited, and whether CLIENT REPLY SKIP dropped it.
struct AwaitedScript {
    request: prefixkv_commands::scripting::ScriptRequest,
    skipped: bool,
}

/// Runs the script command `first` and the script commands that directly follow it among the
/// read's parsed requests (`following`: a pipeline of EVALSHAs) as one job of the script
/// thread: one hand-off and one wake-up for the run instead of one per script. Each following
/// command is executed as any command is (admission, MULTI queuing, arity, stats); the run ends
/// before the first command that is not a script (left for the serve loop), after one not
/// handed over (its reply goes after the scripts'), or at `MAX_SCRIPTS_PER_JOB`. Replies are
/// appended to `output` in order. Returns how many of `following` it consumed and whether the
/// connection must close.
async fn run_scripts(
    server: &Arc<Server>,
    client: &mut Client,
    following: &[Vec<bytes::Bytes>],
    output: &mut BytesMut,
    first: prefixkv_commands::scripting::ScriptRequest,
) -> (usize, bool) {
    use prefixkv_commands::scripting;
    // SKIP before a script: taken now, before the next script's command runs (it would take
    // the flag `execute` left for this one).
    let mut scripts = vec![AwaitedScript {
        request: first,
        skipped: std::mem::take(&mut client.skip_next_reply),
    }];
    // The reply of the command that ended the run, sent after the scripts'.
    let mut tail = BytesMut::new();
    let mut close = false;
    let mut consumed = 0;
    while scripts.len() < scripting::MAX_SCRIPTS_PER_JOB {
        let Some(args) = following.get(consumed) else {
            break;
        };
        if !args
            .first()
            .is_some_and(|name| scripting::is_script_command(name))
        {
            break;
        }
        consumed += 1;
        let mut flow = keyspace::with_session(&server.keyspace.store, |session| {
            commands::execute(server, client, session, args, &mut tail)
        });
        while matches!(flow, Flow::Async(AsyncOp::AfterScript)) {
            scripting::wait_turn(server, client.id).await;
            flow = keyspace::with_session(&server.keyspace.store, |session| {
                commands::execute(server, client, session, args, &mut tail)
            });
        }
        match flow {
            Flow::Async(AsyncOp::Script(request)) => scripts.push(AwaitedScript {
                request: *request,
                skipped: std::mem::take(&mut client.skip_next_reply),
            }),
            Flow::Continue => break,
            Flow::Close => {
                close = true;
                break;
            }
            // EVAL*, FCALL* answer at once (an error, QUEUED), close, wait for another
            // client's script (handled above) or hand a script over: nothing else.
            Flow::Async(_) => unreachable!("a script command neither blocks nor saves"),
        }
    }
    let args: Vec<Vec<bytes::Bytes>> = scripts.iter().map(|s| s.request.args.clone()).collect();
    let (requests, skipped): (Vec<_>, Vec<_>) =
        scripts.into_iter().map(|s| (s.request, s.skipped)).unzip();
    let outcomes = server.scripting.submit_all(server, requests).await;
    let now = std::time::Instant::now();
    for ((outcome, args), skipped) in outcomes.into_iter().zip(&args).zip(skipped) {
        let failed = outcome.reply.first() == Some(&b'-');
        let started = now.checked_sub(outcome.ran_for).unwrap_or(now);
        commands::record_script(server, client.id, args, started, failed);
        // CLIENT REPLY OFF, or SKIP before the script: no reply.
        if !skipped && !client.reply_off {
            output.extend_from_slice(&outcome.reply);
        }
        client.note_write_by(outcome.mark, outcome.by);
    }
    output.extend_from_slice(&tail);
    (consumed, close)
}

/// A blocking command waiting for a push.
struct BlockedWait<'a> {
    args: &'a [bytes::Bytes],
    database: u8,
    keys: &'a [bytes::Bytes],
    timeout_ms: u64,
    kind: prefixkv_commands::value::Kind,
}

/// Waits until the blocked command in `wait` completes (a push to one of its keys let it run)
/// or its deadline passes (then answers null). Requests that arrive meanwhile stay in `input`
/// for after it, as Redis leaves a blocked client's pipeline; false when the client closed.
async fn wait_unblocked(
    server: &Arc<Server>,
    stream: &mut TcpStream,
    client: &mut Client,
    input: &mut BytesMut,
    output: &mut BytesMut,
    wait: BlockedWait<'_>,
) -> std::io::Result<bool> {
    let deadline = (wait.timeout_ms > 0)
        .then(|| tokio::time::Instant::now() + std::time::Duration::from_millis(wait.timeout_ms));
    let notify = Arc::new(tokio::sync::Notify::new());
    let _registration = server.keyspace.blocked.register_for(
        client.id,
        wait.database,
        wait.keys,
        wait.kind,
        &notify,
    );
    server.stats.blocked_clients.fetch_add(1, Ordering::Relaxed);
    /// Counts the client as blocked however the wait ends.
    struct Unblock<'a>(&'a Server);
    impl Drop for Unblock<'_> {
        fn drop(&mut self) {
            self.0.stats.blocked_clients.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let _unblock = Unblock(server);
    let query_limit = server.settings.read().client_query_buffer_limit_bytes;
    loop {
        // Run again now that the registration exists: a push from before it is seen here, one
        // after it leaves a permit in `notify`.
        client.unblocking = true;
        let flow = keyspace::with_session(&server.keyspace.store, |session| {
            commands::execute(server, client, session, wait.args, output)
        });
        client.unblocking = false;
        if matches!(flow, Flow::Async(AsyncOp::AfterScript)) {
            prefixkv_commands::scripting::wait_turn(server, client.id).await;
            continue;
        }
        if !matches!(flow, Flow::Async(AsyncOp::Block { .. })) {
            return Ok(true);
        }
        loop {
            let expired = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = notify.notified() => break,
                () = expired => {
                    // CLIENT REPLY OFF, or SKIP before the blocked command: no reply.
                    let skipped = std::mem::take(&mut client.skip_next_reply);
                    if !skipped && !client.reply_off {
                        prefixkv_resp::Encoder::new(client.protocol).null_array(output);
                    }
                    return Ok(true);
                }
                read = stream.read_buf(input) => {
                    let read = read?;
                    if read == 0 || input.len() as u64 > query_limit {
                        return Ok(false);
                    }
                    server.stats.input_bytes.fetch_add(read as u64, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Appends every Pub/Sub message queued for this connection to `output`.
fn deliver_queued(client: &mut Client, output: &mut BytesMut) {
    let encoder = prefixkv_resp::Encoder::new(client.protocol);
    if let Some(subscriptions) = client.subscriptions.as_mut() {
        while let Some(message) = subscriptions.try_next() {
            commands::encode_message(encoder, output, &message);
        }
    }
}

/// Writes `output` to the client; false when the connection must close instead: a publisher
/// dropped a message for it because its queue passed client-output-buffer-limit (as Redis
/// closes a slow Pub/Sub client; the messages it did get were delivered in order).
async fn flush(
    server: &Server,
    stream: &mut TcpStream,
    output: &mut BytesMut,
    client: &Client,
) -> std::io::Result<bool> {
    if !output.is_empty() {
        match client.subscriptions.as_ref() {
            // A client that subscribes and stops reading would hold this write forever.
            Some(subscriptions) => tokio::select! {
                written = stream.write_all(output) => written?,
                () = subscriptions.overflow_notified() => {}
            },
            None => stream.write_all(output).await?,
        }
        server
            .stats
            .output_bytes
            .fetch_add(output.len() as u64, Ordering::Relaxed);
        output.clear();
    }
    if client
        .subscriptions
        .as_ref()
        .is_some_and(|s| s.overflowed())
    {
        tracing::info!(
            "closing client {}: Pub/Sub messages over client-output-buffer-limit",
            client.id
        );
        return Ok(false);
    }
    Ok(true)
}

/// Waits for the batch's newest oplog record; false if the oplog failed.
async fn await_ticket(client: &mut Client) -> bool {
    // The store hands out tickets only in the logging modes (`always`: the ticket completes
    // once the record is synced; `everysec`: once it is written), so a ticket is always awaited.
    let Some(ticket) = client.ticket.take() else {
        return true;
    };
    match ticket.await {
        Ok(_) => true,
        Err(error) => {
            tracing::error!(
                "closing client {} without acknowledging: oplog failed: {error}",
                client.id
            );
            false
        }
    }
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work)
        .await
        .expect("blocking persistence task panicked")
}

async fn run_async(
    server: &Arc<Server>,
    client: &mut Client,
    operation: AsyncOp,
    output: &mut BytesMut,
) {
    let encoder = prefixkv_resp::Encoder::new(client.protocol);
    match operation {
        AsyncOp::Save => {
            let host = server.host.clone();
            match blocking(move || host.save()).await {
                Ok(_) => encoder.simple_string(output, b"OK"),
                Err(error) => write_error(encoder, output, &CommandError::persistence(&error)),
            }
        }
        AsyncOp::WaitAof { timeout_ms } => {
            let result = if timeout_ms == 0 {
                Some(wait_durable(server, client).await)
            } else {
                tokio::time::timeout(
                    std::time::Duration::from_millis(timeout_ms),
                    wait_durable(server, client),
                )
                .await
                .ok()
            };
            match result {
                Some(Ok(())) => {
                    encoder.array_header(output, 2);
                    encoder.integer(output, 1);
                    encoder.integer(output, 0);
                }
                None => {
                    // Timed out: like Redis, report how many acknowledged (none).
                    encoder.array_header(output, 2);
                    encoder.integer(output, 0);
                    encoder.integer(output, 0);
                }
                Some(Err(error)) => {
                    write_error(encoder, output, &CommandError::persistence(&error))
                }
            }
        }
        AsyncOp::Shutdown { save } => {
            let host = server.host.clone();
            match blocking(move || host.shutdown(save)).await {
                Ok(()) => {
                    tracing::info!("SHUTDOWN (save: {save}); exiting");
                    std::process::exit(0);
                }
                Err(error) => {
                    tracing::error!("SHUTDOWN failed: {error}");
                    let error = CommandError::err("Errors trying to SHUTDOWN. Check logs.");
                    write_error(encoder, output, &error);
                }
            }
        }
        AsyncOp::Block { .. } | AsyncOp::AfterScript | AsyncOp::Script(_) => {
            unreachable!("the serve loop waits for blocked commands and scripts itself")
        }
    }
}

/// Encodes `error` as the reply.
fn write_error(encoder: prefixkv_resp::Encoder, output: &mut BytesMut, error: &CommandError) {
    encoder.error(output, error.to_string().as_bytes());
}

/// Returns once every earlier write of this connection is durable: the store's
/// `DurableStore::wait_durable` on the newest (writes become durable in order), which syncs the
/// log or takes checkpoints (through `Persistence`, which records them) as the mode requires.
async fn wait_durable(server: &Arc<Server>, client: &mut Client) -> Result<(), String> {
    let Some(newest) = client.newest_pending() else {
        return Ok(());
    };
    let store = server.keyspace.store.clone();
    // The session that made it: a script thread's on this connection's behalf, or this thread's.
    let made_by = match newest.by.clone() {
        Some(watch) => watch,
        None => keyspace::with_session(&store, |session| session.commit_watch()),
    };
    let host = server.host.clone();
    blocking(move || {
        store.wait_durable(newest.position(), &made_by, || {
            host.save().map_err(prefixkv_store::StoreError::Storage)
        })
    })
    .await
    .map_err(|error| error.to_string())
}
