//! Which commands a D-Redis proxy refuses on a plain RESP connection, and why.
//!
//! Invariant: a refused command is never forwarded to Redis. The refused ones would change the
//! state of a *pooled* Redis connection shared with other clients (`SELECT`, `MULTI`,
//! `SUBSCRIBE`, `AUTH`, `HELLO` with options, ...), block it (`BLPOP`, `WAIT`, `XREAD BLOCK`, ...
//! would hold the shared latch and stall every commit), or interfere with the persistence and
//! process the proxy manages (`CONFIG`, `BGSAVE`, `SHUTDOWN`, ...).

use prefixkv_dpr::connection::encode_resp_error;
use prefixkv_resp::Command;

/// Why a command may not be sent on a plain RESP connection (None: it may).
fn refusal(command: &Command) -> Option<&'static str> {
    let name = command.name().to_ascii_uppercase();
    let argument = |i: usize| command.args.get(i).map(|a| a.to_ascii_uppercase());
    let pooled = "it would change the state of a pooled Redis connection shared with other clients";
    let blocking = "blocking commands would hold the shard's latch and stall its commits";
    let persistence = "the proxy manages Redis's persistence and process itself";
    Some(match &name[..] {
        b"SELECT" | b"MULTI" | b"EXEC" | b"DISCARD" | b"WATCH" | b"UNWATCH" | b"SUBSCRIBE"
        | b"PSUBSCRIBE" | b"SSUBSCRIBE" | b"UNSUBSCRIBE" | b"PUNSUBSCRIBE" | b"SUNSUBSCRIBE"
        | b"MONITOR" | b"RESET" | b"AUTH" | b"READONLY" | b"READWRITE" | b"ASKING" | b"SYNC"
        | b"PSYNC" | b"REPLCONF" | b"CLIENT" => pooled,
        b"HELLO" if command.args.len() > 2 => pooled,
        b"BLPOP" | b"BRPOP" | b"BRPOPLPUSH" | b"BLMOVE" | b"BLMPOP" | b"BZPOPMIN" | b"BZPOPMAX"
        | b"BZMPOP" | b"WAIT" | b"WAITAOF" => blocking,
        b"XREAD" | b"XREADGROUP"
            if (1..command.args.len()).any(|i| argument(i).as_deref() == Some(b"BLOCK")) =>
        {
            blocking
        }
        b"SAVE" | b"BGSAVE" | b"BGREWRITEAOF" | b"SHUTDOWN" | b"CONFIG" | b"DEBUG" | b"SLAVEOF"
        | b"REPLICAOF" | b"FAILOVER" | b"MODULE" => persistence,
        _ => return None,
    })
}

/// The error reply for a refused command (None: forward it).
pub(super) fn refusal_reply(command: &Command) -> Option<Vec<u8>> {
    let reason = refusal(command)?;
    let mut out = Vec::new();
    encode_resp_error(
        &mut out,
        &format!(
            "ERR D-Redis: {} is not supported on a plain RESP connection: {reason}",
            String::from_utf8_lossy(&command.name().to_ascii_uppercase())
        ),
    );
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn reply(args: &[&str]) -> Option<String> {
        let command = Command {
            args: args
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect(),
        };
        refusal_reply(&command).map(|bytes| String::from_utf8(bytes).unwrap())
    }

    #[test]
    fn refused_commands_say_why() {
        assert_eq!(reply(&["SET", "k", "v"]), None);
        assert_eq!(reply(&["ping"]), None);
        assert_eq!(reply(&["HELLO", "2"]), None);
        assert!(reply(&["select", "1"])
            .unwrap()
            .starts_with("-ERR D-Redis: SELECT is not supported"));
        assert!(reply(&["BLPOP", "k", "0"]).unwrap().contains("blocking"));
        assert!(reply(&["XREAD", "block", "0", "STREAMS", "s", "$"])
            .unwrap()
            .contains("blocking"));
        assert_eq!(reply(&["XREAD", "STREAMS", "s", "0"]), None);
        assert!(reply(&["CONFIG", "SET", "dbfilename", "x"])
            .unwrap()
            .contains("persistence"));
        assert!(reply(&["CLIENT", "KILL", "x"]).unwrap().contains("pooled"));
        assert!(reply(&["HELLO", "3", "AUTH", "a", "b"])
            .unwrap()
            .contains("pooled"));
    }
}
