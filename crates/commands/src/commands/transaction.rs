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

use super::table::{self, Spec};
use super::{execute, CommandError, CommandResult, Ctx, Flow, Transaction};

/// Queues the command while MULTI is open (or refuses it: `table::NO_MULTI`, the size limit);
/// runs the transaction commands (`table::TXN_CONTROL`) at once. `None`: not a transaction
/// matter; run the command normally.
pub(super) fn handle(ctx: &mut Ctx<'_>, spec: &Spec, args: &[Bytes]) -> Option<Flow> {
    if spec.has(table::TXN_CONTROL) {
        return Some(super::run_handler(ctx, spec, args));
    }
    if spec.has(table::AT_ONCE) {
        return None;
    }
    let transaction = ctx.client.transaction.as_mut()?;
    if spec.has(table::NO_MULTI) {
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
    Some(Flow::Continue)
}

/// MULTI.
pub(super) fn multi(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    if ctx.client.transaction.is_some() {
        return Err(CommandError::err("MULTI calls can not be nested"));
    }
    ctx.client.transaction = Some(Transaction::default());
    ctx.w.ok();
    Ok(())
}

/// DISCARD.
pub(super) fn discard(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    if ctx.client.transaction.take().is_none() {
        return Err(CommandError::err("DISCARD without MULTI"));
    }
    ctx.client.watch.unwatch_all(&ctx.server.keyspace.watches);
    ctx.w.ok();
    Ok(())
}

/// EXEC.
pub(super) fn exec(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    match ctx.client.transaction.take() {
        None => Err(CommandError::err("EXEC without MULTI")),
        Some(transaction) if transaction.failed => {
            ctx.client.watch.unwatch_all(&ctx.server.keyspace.watches);
            Err(CommandError::ExecAbort)
        }
        Some(transaction) => {
            run_queued(ctx, transaction.queued);
            Ok(())
        }
    }
}

/// WATCH key [key ...] (refused inside MULTI, without failing the transaction, as in Redis).
pub(super) fn watch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    if ctx.client.transaction.is_some() {
        return Err(CommandError::err("WATCH inside MULTI is not allowed"));
    }
    watch_keys(ctx, &args[1..])?;
    ctx.w.ok();
    Ok(())
}

/// UNWATCH (inside MULTI it is queued, as in Redis: EXEC has forgotten the watches by then).
pub(super) fn unwatch(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    ctx.client.watch.unwatch_all(&ctx.server.keyspace.watches);
    ctx.w.ok();
    Ok(())
}

/// WATCH: registers the keys, after removing any already expired (an expiry before WATCH is no
/// write after it, as in Redis).
fn watch_keys(ctx: &mut Ctx<'_>, keys: &[Bytes]) -> CommandResult {
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
fn run_queued(ctx: &mut Ctx<'_>, queued: Vec<Vec<Bytes>>) {
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
