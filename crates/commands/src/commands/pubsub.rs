//! SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH and PUBSUB (the registry and its
//! invariants are in `crate::pubsub`). Replies follow Redis: one `subscribe`/`unsubscribe` push
//! per name with the connection's subscription count after it (RESP3 push frames, RESP2 arrays);
//! a connection in RESP2 with a subscription accepts only the subscription commands, PING, QUIT
//! and RESET (the rows flagged `table::SUBSCRIBED_OK`).

use bytes::{Bytes, BytesMut};
use prefixkv_resp::Encoder;

use super::{lower, CommandError, CommandResult, Ctx};
use crate::pubsub::{ClientSubscriptions, Kind, Message};

/// SUBSCRIBE.
pub(super) fn subscribe_channels(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    subscribe(ctx, Kind::Channel, &args[1..])
}

/// PSUBSCRIBE.
pub(super) fn subscribe_patterns(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    subscribe(ctx, Kind::Pattern, &args[1..])
}

/// UNSUBSCRIBE.
pub(super) fn unsubscribe_channels(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    unsubscribe(ctx, Kind::Channel, &args[1..]);
    Ok(())
}

/// PUNSUBSCRIBE.
pub(super) fn unsubscribe_patterns(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    unsubscribe(ctx, Kind::Pattern, &args[1..]);
    Ok(())
}

/// PUBLISH.
pub(super) fn publish(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let received = ctx.server.pubsub.publish(&args[1], &args[2]);
    ctx.w.int(received as i64);
    Ok(())
}

fn kind_words(kind: Kind) -> (&'static [u8], &'static [u8]) {
    match kind {
        Kind::Channel => (b"subscribe", b"unsubscribe"),
        Kind::Pattern => (b"psubscribe", b"punsubscribe"),
    }
}

fn subscribe(ctx: &mut Ctx<'_>, kind: Kind, names: &[Bytes]) -> CommandResult {
    let (output_limit, name_limit) = {
        let settings = ctx.server.settings.read();
        (
            settings.client_output_buffer_limit_bytes,
            settings.client_query_buffer_limit_bytes,
        )
    };
    let subscriptions = ctx
        .client
        .subscriptions
        .get_or_insert_with(|| ClientSubscriptions::new(output_limit));
    for name in names {
        let count = subscriptions.subscribe(&ctx.server.pubsub, kind, name.clone(), name_limit)?;
        ctx.w.encoder.push_header(ctx.w.out, 3);
        ctx.w.bulk(kind_words(kind).0);
        ctx.w.bulk(name);
        ctx.w.int(count as i64);
    }
    Ok(())
}

fn unsubscribe(ctx: &mut Ctx<'_>, kind: Kind, names: &[Bytes]) {
    let word = kind_words(kind).1;
    let Some(subscriptions) = ctx.client.subscriptions.as_mut() else {
        // Nothing subscribed: Redis still answers once, with a null name and count 0.
        ctx.w.encoder.push_header(ctx.w.out, 3);
        ctx.w.bulk(word);
        ctx.w.null();
        ctx.w.int(0);
        return;
    };
    let names = if names.is_empty() {
        subscriptions.names(kind)
    } else {
        names.to_vec()
    };
    if names.is_empty() {
        ctx.w.encoder.push_header(ctx.w.out, 3);
        ctx.w.bulk(word);
        ctx.w.null();
        ctx.w.int(subscriptions.count() as i64);
        return;
    }
    for name in &names {
        let count = subscriptions.unsubscribe(&ctx.server.pubsub, kind, name);
        ctx.w.encoder.push_header(ctx.w.out, 3);
        ctx.w.bulk(word);
        ctx.w.bulk(name);
        ctx.w.int(count as i64);
    }
}

pub(super) fn pubsub(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let registry = &ctx.server.pubsub;
    match (lower(&args[1]).as_str(), args.len()) {
        ("channels", 2 | 3) => {
            let names = registry.channels(args.get(2).map(|p| p.as_ref()));
            ctx.w.array(names.len());
            for name in &names {
                ctx.w.bulk(name);
            }
        }
        ("numsub", _) => {
            ctx.w.array((args.len() - 2) * 2);
            for channel in &args[2..] {
                ctx.w.bulk(channel);
                ctx.w.int(registry.subscribers(channel) as i64);
            }
        }
        ("numpat", 2) => ctx.w.int(registry.pattern_count() as i64),
        ("help", 2) => {
            let lines = [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels.",
                "HELP",
                "    Print this help.",
            ];
            ctx.w.help(&lines);
        }
        ("channels" | "numpat" | "help", _) => {
            return Err(CommandError::arity(format!("pubsub|{}", lower(&args[1]))))
        }
        _ => return Err(CommandError::unknown_subcommand("PUBSUB", &args[1])),
    }
    Ok(())
}

/// PING on a RESP2 connection that holds subscriptions: `["pong", message or ""]`, as Redis.
pub(super) fn subscribed_ping(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    if args.len() > 2 {
        return Err(CommandError::arity("ping"));
    }
    ctx.w.array(2);
    ctx.w.bulk(b"pong");
    ctx.w.bulk(args.get(1).map_or(&b""[..], |m| m.as_ref()));
    Ok(())
}

/// Encodes one delivered message: `message channel payload` or `pmessage pattern channel
/// payload`, a push frame in RESP3 and an array in RESP2.
pub fn encode_message(encoder: Encoder, out: &mut BytesMut, message: &Message) {
    match &message.pattern {
        None => {
            encoder.push_header(out, 3);
            encoder.bulk_string(out, b"message");
        }
        Some(pattern) => {
            encoder.push_header(out, 4);
            encoder.bulk_string(out, b"pmessage");
            encoder.bulk_string(out, pattern);
        }
    }
    encoder.bulk_string(out, &message.channel);
    encoder.bulk_string(out, &message.payload);
}
