//! MULTI / EXEC / DISCARD: commands queued on the connection and run together by EXEC, with no
//! other client's command in between, reads included, and with their writes one oplog group that
//! recovery applies whole or not at all (see the exec gate in `keyspace`). As in Redis, a command
//! refused while queuing (unknown, wrong arity, not allowed in a transaction, over the size
//! limit) makes EXEC answer EXECABORT; an error *during* EXEC is one element of its reply and the
//! other commands still run. WATCH is Redis's optimistic locking (`crate::watch`): EXEC checks,
//! with no other write running, whether a watched key was written since WATCH, and if so runs
//! nothing and answers a null array.
//!
//! Invariants: the queue of one connection holds at most `client-query-buffer-limit` argument
//! bytes, and so do its watched keys, so a client cannot grow server memory without bound by
//! never sending EXEC. EXEC, DISCARD, UNWATCH and RESET (and closing the connection) forget every
//! watched key.

use bytes::Bytes;

use super::{execute, CommandError, CommandResult, Ctx, Flow, Transaction};

/// Commands that wait or change the connection in ways a queued batch cannot replay in place.
const NOT_IN_TRANSACTION: &[&str] = &[
    "save",
    "shutdown",
    "waitaof",
    "hello",
    "auth",
    "watch",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
];

/// Handles the transaction commands, and queues any other command while MULTI is open.
/// `None`: not a transaction matter; run the command normally.
pub(super) fn handle(ctx: &mut Ctx<'_>, name: &str, args: &[Bytes]) -> Option<Flow> {
    match name {
        "multi" => {
            if ctx.client.transaction.is_some() {
                ctx.w
                    .error(&CommandError::err("MULTI calls can not be nested"));
            } else {
                ctx.client.transaction = Some(Transaction::default());
                ctx.w.ok();
            }
        }
        "discard" => match ctx.client.transaction.take() {
            Some(_) => {
                ctx.client.watch.unwatch_all(&ctx.server.keyspace.watches);
                ctx.w.ok()
            }
            None => ctx.w.error(&CommandError::err("DISCARD without MULTI")),
        },
        "exec" => match ctx.client.transaction.take() {
            None => ctx.w.error(&CommandError::err("EXEC without MULTI")),
            Some(transaction) if transaction.failed => {
                ctx.client.watch.unwatch_all(&ctx.server.keyspace.watches);
                ctx.w.error(&CommandError::ExecAbort)
            }
            Some(transaction) => exec(ctx, transaction.queued),
        },
        "watch" if ctx.client.transaction.is_some() => {
            ctx.w
                .error(&CommandError::err("WATCH inside MULTI is not allowed"));
        }
        "watch" if args.len() < 2 => ctx.w.error(&CommandError::arity("watch")),
        "watch" => match watch(ctx, &args[1..]) {
            Ok(()) => ctx.w.ok(),
            Err(error) => ctx.w.error(&error),
        },
        // Inside MULTI it is queued, as in Redis (EXEC has forgotten the watches by then).
        "unwatch" if ctx.client.transaction.is_none() => {
            ctx.client.watch.unwatch_all(&ctx.server.keyspace.watches);
            ctx.w.ok()
        }
        // These act at once even inside MULTI (RESET also discards the transaction).
        "quit" | "reset" => return None,
        _ => {
            let transaction = ctx.client.transaction.as_mut()?;
            if NOT_IN_TRANSACTION.contains(&name) {
                transaction.failed = true;
                ctx.w.error(&CommandError::err(
                    "Command not allowed inside a transaction",
                ));
                return Some(Flow::Continue);
            }
            let bytes: u64 = args.iter().map(|argument| argument.len() as u64).sum();
            let limit = ctx.server.settings.read().client_query_buffer_limit_bytes;
            if transaction.queued_bytes + bytes > limit {
                transaction.failed = true;
                ctx.w.error(&CommandError::err(
                    "transaction too large: the queued commands exceed \
                     client-query-buffer-limit; EXEC will be refused, send DISCARD",
                ));
                return Some(Flow::Continue);
            }
            transaction.queued_bytes += bytes;
            transaction.queued.push(args.to_vec());
            ctx.w.simple("QUEUED");
        }
    }
    Some(Flow::Continue)
}

/// WATCH: registers the keys, after removing any already expired (an expiry before WATCH is no
/// write after it, as in Redis).
fn watch(ctx: &mut Ctx<'_>, keys: &[Bytes]) -> CommandResult {
    let database = ctx.db();
    for key in keys {
        ctx.server.keyspace.read(ctx.session, database, key)?;
    }
    let limit = ctx.server.settings.read().client_query_buffer_limit_bytes;
    let refs: Vec<&[u8]> = keys.iter().map(|key| key.as_ref()).collect();
    ctx.client
        .watch
        .watch(&ctx.server.keyspace.watches, database, &refs, limit)
}

/// Runs the queued commands under the exec gate; their replies form EXEC's array. If a watched
/// key was written since WATCH (or expired since: reading it now removes it, which marks it),
/// runs nothing and answers a null array.
fn exec(ctx: &mut Ctx<'_>, queued: Vec<Vec<Bytes>>) {
    let server = ctx.server;
    let encoder = ctx.w.encoder;
    let out = &mut *ctx.w.out;
    let reply_start = out.len();
    let logged = super::run_exclusive(server, ctx.client, ctx.session, |client, session| {
        if client.watch.is_watching() {
            let watched = client.watch.keys().to_vec();
            for (database, key) in &watched {
                // An error here (a damaged value) leaves the key as it is; EXEC goes on.
                let _ = server.keyspace.read(session, *database, key);
            }
            let dirty = client.watch.is_dirty();
            client.watch.unwatch_all(&server.keyspace.watches);
            if dirty {
                encoder.null_array(out);
                return;
            }
        }
        encoder.array_header(out, queued.len());
        client.in_exec = true;
        for command in &queued {
            match execute(server, client, session, command, out) {
                Flow::Continue => {}
                // Commands that close or wait are refused while queuing.
                Flow::Close | Flow::Async(_) => {
                    unreachable!("a command that closes or waits was queued")
                }
            }
        }
        client.in_exec = false;
    });
    if let Err(error) = logged {
        // The queued commands ran but their writes could not be logged: answer the error, not
        // replies that would read as acknowledged.
        out.truncate(reply_start);
        encoder.error(out, error.to_string().as_bytes());
    }
}
