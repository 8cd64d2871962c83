//! MULTI / EXEC / DISCARD: commands queued on the connection and run together by EXEC, with no
//! other client's write in between (see the exec gate in `keyspace`). As in Redis, a command
//! refused while queuing (unknown, wrong arity, not allowed in a transaction, over the size
//! limit) makes EXEC answer EXECABORT; an error *during* EXEC is one element of its reply and the
//! other commands still run. WATCH (optimistic locking) is not supported and says so.
//!
//! Invariant: the queue of one connection holds at most `client-query-buffer-limit` argument
//! bytes, so a client cannot grow server memory without bound by never sending EXEC.

use bytes::Bytes;

use super::{execute, Ctx, Flow, Transaction};

/// Commands that wait or change the connection in ways a queued batch cannot replay in place.
const NOT_IN_TRANSACTION: &[&str] = &["save", "shutdown", "waitaof", "hello", "auth", "watch"];

/// Handles the transaction commands, and queues any other command while MULTI is open.
/// `None`: not a transaction matter; run the command normally.
pub(super) fn handle(ctx: &mut Ctx<'_>, name: &str, args: &[Bytes]) -> Option<Flow> {
    match name {
        "multi" => {
            if ctx.client.transaction.is_some() {
                ctx.w.error("ERR MULTI calls can not be nested");
            } else {
                ctx.client.transaction = Some(Transaction::default());
                ctx.w.ok();
            }
        }
        "discard" => match ctx.client.transaction.take() {
            Some(_) => ctx.w.ok(),
            None => ctx.w.error("ERR DISCARD without MULTI"),
        },
        "exec" => match ctx.client.transaction.take() {
            None => ctx.w.error("ERR EXEC without MULTI"),
            Some(transaction) if transaction.failed => ctx
                .w
                .error("EXECABORT Transaction discarded because of previous errors."),
            Some(transaction) => exec(ctx, transaction.queued),
        },
        "watch" if ctx.client.transaction.is_some() => {
            ctx.w.error("ERR WATCH inside MULTI is not allowed");
        }
        "watch" => ctx.w.error(
            "ERR WATCH is not supported by prefixkv-server (no optimistic locking); MULTI/EXEC \
             without WATCH runs isolated from other clients' writes",
        ),
        // Nothing is ever watched, so there is nothing to forget.
        "unwatch" => ctx.w.ok(),
        // These act at once even inside MULTI (RESET also discards the transaction).
        "quit" | "reset" => return None,
        _ => {
            let transaction = ctx.client.transaction.as_mut()?;
            if NOT_IN_TRANSACTION.contains(&name) {
                transaction.failed = true;
                ctx.w.error("ERR Command not allowed inside a transaction");
                return Some(Flow::Continue);
            }
            let bytes: u64 = args.iter().map(|argument| argument.len() as u64).sum();
            let limit = ctx.server.settings.read().client_query_buffer_limit_bytes;
            if transaction.queued_bytes + bytes > limit {
                transaction.failed = true;
                ctx.w.error(
                    "ERR transaction too large: the queued commands exceed \
                     client-query-buffer-limit; EXEC will be refused, send DISCARD",
                );
                return Some(Flow::Continue);
            }
            transaction.queued_bytes += bytes;
            transaction.queued.push(args.to_vec());
            ctx.w.simple("QUEUED");
        }
    }
    Some(Flow::Continue)
}

/// Runs the queued commands under the exec gate; their replies form EXEC's array.
fn exec(ctx: &mut Ctx<'_>, queued: Vec<Vec<Bytes>>) {
    ctx.w.array(queued.len());
    let server = ctx.server;
    let client = &mut *ctx.client;
    let out = &mut *ctx.w.out;
    server.keyspace.exclusive(ctx.session, |session| {
        for command in &queued {
            match execute(server, client, session, command, out) {
                Flow::Continue => {}
                // Commands that close or wait are refused while queuing.
                Flow::Close | Flow::Async(_) => {
                    unreachable!("a command that closes or waits was queued")
                }
            }
        }
    });
}
