//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT.

use bytes::Bytes;
use prefixkv_resp::Protocol;

use super::{lower, parse_int, CommandError, CommandResult, Ctx, Flow};
use crate::keyspace::DATABASES;
use crate::state::ClientInfo;

/// PING (outside a RESP2 subscription: `pubsub::subscribed_ping` there).
pub(super) fn ping(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    match args.len() {
        1 => ctx.w.simple("PONG"),
        2 => ctx.w.bulk(&args[1]),
        _ => return Err(CommandError::arity("ping")),
    }
    Ok(())
}

/// ECHO.
pub(super) fn echo(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    ctx.w.bulk(&args[1]);
    Ok(())
}

/// QUIT: OK, then the connection closes.
pub(super) fn quit(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult<Flow> {
    ctx.w.ok();
    Ok(Flow::Close)
}

/// RESET: the connection as it was at connect.
pub(super) fn reset(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CommandResult {
    ctx.client.transaction = None;
    ctx.client.forget_subscriptions_and_watches(ctx.server);
    ctx.client.database = 0;
    ctx.client.protocol = Protocol::Resp2;
    ctx.client.name = None;
    ctx.client.authenticated = ctx.server.settings.read().requirepass.is_none();
    update_info(ctx, |info| {
        info.database = 0;
        info.name.clear();
        info.resp = 2;
    });
    ctx.w.simple("RESET");
    Ok(())
}

fn update_info(ctx: &Ctx<'_>, change: impl FnOnce(&mut ClientInfo)) {
    if let Some(info) = ctx.server.clients.lock().get_mut(&ctx.client.id) {
        change(info);
    }
}

fn check_password(ctx: &mut Ctx<'_>, user: &[u8], password: &[u8]) -> CommandResult {
    let required = ctx.server.settings.read().requirepass.clone();
    let good = match &required {
        Some(expected) => user == b"default" && password == expected.as_bytes(),
        None => user == b"default",
    };
    if good {
        ctx.client.authenticated = true;
        Ok(())
    } else {
        Err(CommandError::WrongPass)
    }
}

pub(super) fn auth(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let (user, password) = match args.len() {
        2 => (&b"default"[..], &args[1][..]),
        3 => (&args[1][..], &args[2][..]),
        _ => return Err(CommandError::Syntax),
    };
    if args.len() == 2 && ctx.server.settings.read().requirepass.is_none() {
        return Err(CommandError::err(
            "AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ));
    }
    check_password(ctx, user, password)?;
    ctx.w.ok();
    Ok(())
}

fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

pub(super) fn hello(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let mut protocol = ctx.client.protocol;
    let mut index = 1;
    if args.len() > 1 {
        let version = parse_int(&args[1])
            .map_err(|_| CommandError::err("Protocol version is not an integer or out of range"))?;
        protocol = match version {
            2 => Protocol::Resp2,
            3 => Protocol::Resp3,
            _ => {
                return Err(CommandError::other(
                    "NOPROTO",
                    "unsupported protocol version",
                ))
            }
        };
        index = 2;
    }
    let mut setname = None;
    while index < args.len() {
        match lower(&args[index]).as_str() {
            "auth" if index + 2 < args.len() => {
                check_password(ctx, &args[index + 1], &args[index + 2])?;
                index += 3;
            }
            "setname" if index + 1 < args.len() => {
                if !valid_name(&args[index + 1]) {
                    return Err(CommandError::InvalidClientName);
                }
                setname = Some(String::from_utf8_lossy(&args[index + 1]).into_owned());
                index += 2;
            }
            _ => {
                return Err(CommandError::err(format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[index])
                )))
            }
        }
    }
    if !ctx.client.authenticated {
        return Err(CommandError::other(
            "NOAUTH",
            "HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time",
        ));
    }
    ctx.client.protocol = protocol;
    if let Some(name) = setname {
        ctx.client.name = if name.is_empty() {
            None
        } else {
            Some(name.clone())
        };
        update_info(ctx, |info| info.name = name);
    }
    let resp = if protocol == Protocol::Resp3 { 3 } else { 2 };
    update_info(ctx, |info| info.resp = resp);
    // The encoder was made for the old protocol; HELLO's reply uses the new one.
    let mut w = super::Writer {
        encoder: prefixkv_resp::Encoder::new(protocol),
        out: ctx.w.out,
    };
    w.map(7);
    w.bulk(b"server");
    w.bulk(b"redis");
    w.bulk(b"version");
    w.bulk(crate::REDIS_VERSION.as_bytes());
    w.bulk(b"proto");
    w.int(resp as i64);
    w.bulk(b"id");
    w.int(ctx.client.id as i64);
    w.bulk(b"mode");
    w.bulk(b"standalone");
    w.bulk(b"role");
    w.bulk(b"master");
    w.bulk(b"modules");
    w.array(0);
    Ok(())
}

pub(super) fn select(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let index = parse_int(&args[1])?;
    if !(0..DATABASES as i64).contains(&index) {
        return Err(CommandError::DbIndexOutOfRange);
    }
    ctx.client.database = index as u8;
    update_info(ctx, |info| info.database = index as u8);
    ctx.w.ok();
    Ok(())
}

/// One CLIENT LIST line (without the newline).
pub(super) fn client_line(id: u64, info: &ClientInfo) -> String {
    let age = info.created.elapsed().as_secs();
    format!(
        "id={id} addr={} laddr=? fd=-1 name={} age={age} idle=0 flags=N db={} sub=0 psub=0 ssub=0 multi=-1 \
         qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user=default \
         redir=-1 resp={} lib-name={} lib-ver={}",
        info.addr,
        info.name,
        info.database,
        super::table::COMMANDS
            .get(info.last_command.load(std::sync::atomic::Ordering::Relaxed))
            .map_or("NULL", |spec| spec.name),
        info.resp,
        info.lib_name,
        info.lib_ver
    )
}

pub(super) fn client(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let sub = lower(&args[1]);
    match (sub.as_str(), args.len()) {
        ("id", 2) => ctx.w.int(ctx.client.id as i64),
        ("setname", 3) => {
            if !valid_name(&args[2]) {
                return Err(CommandError::InvalidClientName);
            }
            let name = String::from_utf8_lossy(&args[2]).into_owned();
            ctx.client.name = if name.is_empty() {
                None
            } else {
                Some(name.clone())
            };
            update_info(ctx, |info| info.name = name);
            ctx.w.ok();
        }
        ("getname", 2) => {
            let name = ctx.client.name.clone();
            ctx.w.bulk_or_null(name.as_deref().map(str::as_bytes));
        }
        ("setinfo", 4) => {
            let attribute = lower(&args[2]);
            if !valid_name(&args[3]) {
                return Err(CommandError::err(format!(
                    "{attribute} cannot contain spaces, newlines or special characters."
                )));
            }
            let value = String::from_utf8_lossy(&args[3]).into_owned();
            match attribute.as_str() {
                "lib-name" => update_info(ctx, |info| info.lib_name = value),
                "lib-ver" => update_info(ctx, |info| info.lib_ver = value),
                _ => {
                    return Err(CommandError::err(format!(
                        "Unrecognized option '{}'",
                        String::from_utf8_lossy(&args[2])
                    )))
                }
            }
            ctx.w.ok();
        }
        ("reply", 3) => match lower(&args[2]).as_str() {
            "on" => {
                ctx.client.reply_off = false;
                ctx.w.ok();
            }
            // OFF and SKIP answer nothing themselves (`execute` drops their reply).
            "off" => ctx.client.reply_off = true,
            "skip" => ctx.client.skip_next_reply = true,
            _ => return Err(CommandError::Syntax),
        },
        ("list", _) => {
            let mut text = String::new();
            for (id, info) in ctx.server.clients.lock().iter() {
                text.push_str(&client_line(*id, info));
                text.push('\n');
            }
            ctx.w.verbatim(text.as_bytes());
        }
        ("info", 2) => {
            let line = ctx
                .server
                .clients
                .lock()
                .get(&ctx.client.id)
                .map(|info| client_line(ctx.client.id, info));
            let mut text = line.unwrap_or_default();
            text.push('\n');
            ctx.w.verbatim(text.as_bytes());
        }
        ("id" | "setname" | "getname" | "setinfo" | "info" | "reply", _) => {
            return Err(CommandError::arity(format!("client|{sub}")))
        }
        _ => return Err(CommandError::unknown_subcommand("CLIENT", &args[1])),
    }
    Ok(())
}
