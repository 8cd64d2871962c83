//! The commands a cluster worker runs on its engine, with Redis's replies.
//!
//! A worker owns keys, not a whole keyspace: every command here names its keys, and a multi-key
//! command runs only on the worker its first key routes to (clients route by the first key; no
//! cross-shard transactions, as in the DPR paper). The set is the string subset YCSB and the
//! cluster tests need; the full data-type server is `prefixkv-server`.
//!
//! Invariant: every command is one or more engine operations on the batch's session, so each
//! runs in the engine version the session is in (the worker reads that version after the batch).

use bytes::{Bytes, BytesMut};
use prefixkv_engine::{EngineError, Session};
use prefixkv_resp::{Encoder, Protocol};

/// Runs one command on `session`, appending its RESP2 reply to `out`. An engine failure is an
/// error (the batch is failed as a whole; the client treats its effect as unknown).
pub fn execute(
    session: &mut Session,
    args: &[Bytes],
    out: &mut BytesMut,
    scratch: &mut Vec<u8>,
) -> Result<(), EngineError> {
    let encoder = Encoder::new(Protocol::Resp2);
    let name = args[0].to_ascii_uppercase();
    let arity_error = |out: &mut BytesMut| {
        let text = format!(
            "ERR wrong number of arguments for '{}' command",
            String::from_utf8_lossy(&args[0]).to_lowercase()
        );
        encoder.error(out, text.as_bytes());
    };
    match (name.as_slice(), args.len()) {
        (b"PING", 1) => encoder.simple_string(out, b"PONG"),
        (b"PING", 2) | (b"ECHO", 2) => encoder.bulk_string(out, &args[1]),
        (b"GET", 2) => {
            scratch.clear();
            if session.read(&args[1], scratch)? {
                encoder.bulk_string(out, scratch);
            } else {
                encoder.null_bulk_string(out);
            }
        }
        (b"SET", 3) => {
            session.upsert(&args[1], &args[2])?;
            encoder.simple_string(out, b"OK");
        }
        (b"MSET", n) if n >= 3 && n % 2 == 1 => {
            for pair in args[1..].chunks(2) {
                session.upsert(&pair[0], &pair[1])?;
            }
            encoder.simple_string(out, b"OK");
        }
        (b"MGET", n) if n >= 2 => {
            encoder.array_header(out, n - 1);
            for key in &args[1..] {
                scratch.clear();
                if session.read(key, scratch)? {
                    encoder.bulk_string(out, scratch);
                } else {
                    encoder.null_bulk_string(out);
                }
            }
        }
        (b"DEL", n) if n >= 2 => {
            let mut deleted = 0;
            for key in &args[1..] {
                deleted += i64::from(session.delete(key)?);
            }
            encoder.integer(out, deleted);
        }
        (b"EXISTS", n) if n >= 2 => {
            let mut found = 0;
            for key in &args[1..] {
                scratch.clear();
                found += i64::from(session.read(key, scratch)?);
            }
            encoder.integer(out, found);
        }
        (b"STRLEN", 2) => {
            scratch.clear();
            let length = if session.read(&args[1], scratch)? {
                scratch.len() as i64
            } else {
                0
            };
            encoder.integer(out, length);
        }
        (b"APPEND", 3) => {
            let mut length = 0;
            session.rmw(&args[1], |old, new| {
                new.extend_from_slice(old.unwrap_or_default());
                new.extend_from_slice(&args[2]);
                length = new.len();
            })?;
            encoder.integer(out, length as i64);
        }
        (b"INCR", 2) | (b"DECR", 2) | (b"INCRBY", 3) | (b"DECRBY", 3) => {
            let delta = match args.get(2).map(|text| parse_i64(text)) {
                None => 1,
                Some(Some(delta)) => delta,
                Some(None) => {
                    encoder.error(out, b"ERR value is not an integer or out of range");
                    return Ok(());
                }
            };
            let delta = if name.starts_with(b"DECR") {
                delta.checked_neg()
            } else {
                Some(delta)
            };
            let mut result: Result<i64, &'static [u8]> =
                Err(b"ERR increment or decrement would overflow");
            if let Some(delta) = delta {
                session.rmw(&args[1], |old, new| {
                    let current = match old {
                        None => Some(0),
                        Some(bytes) => parse_i64(bytes),
                    };
                    result = match current {
                        None => Err(b"ERR value is not an integer or out of range"),
                        Some(current) => current
                            .checked_add(delta)
                            .ok_or(b"ERR increment or decrement would overflow".as_slice()),
                    };
                    // A failed increment writes the old value back unchanged.
                    match (&result, old) {
                        (Ok(value), _) => new.extend_from_slice(value.to_string().as_bytes()),
                        (Err(_), Some(bytes)) => new.extend_from_slice(bytes),
                        (Err(_), None) => new.extend_from_slice(b"0"),
                    }
                })?;
            }
            match result {
                Ok(value) => encoder.integer(out, value),
                Err(message) => encoder.error(out, message),
            }
        }
        (
            b"PING" | b"ECHO" | b"GET" | b"SET" | b"MSET" | b"MGET" | b"DEL" | b"EXISTS"
            | b"STRLEN" | b"APPEND" | b"INCR" | b"DECR" | b"INCRBY" | b"DECRBY",
            _,
        ) => arity_error(out),
        _ => {
            let text = format!(
                "ERR unknown command '{}' (a cluster worker runs PING ECHO GET SET MGET MSET DEL \
                 EXISTS STRLEN APPEND INCR INCRBY DECR DECRBY)",
                String::from_utf8_lossy(&args[0])
            );
            encoder.error(out, text.as_bytes());
        }
    }
    Ok(())
}

/// Redis's integer syntax: optional minus, digits, no leading `+`, no spaces, fits an i64.
fn parse_i64(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > 20 || text[0] == b'+' {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prefixkv_engine::{Store, StoreConfig};

    fn run(session: &mut Session, args: &[&str]) -> String {
        let args: Vec<Bytes> = args
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        let mut out = BytesMut::new();
        execute(session, &args, &mut out, &mut Vec::new()).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn replies_match_redis() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::new(dir.path());
        config.index_buckets = 1 << 10;
        config.log_memory_bytes = 64 << 20;
        let store = Store::open(config).unwrap();
        let mut session = store.start_session();
        assert_eq!(run(&mut session, &["PING"]), "+PONG\r\n");
        assert_eq!(run(&mut session, &["get", "k"]), "$-1\r\n");
        assert_eq!(run(&mut session, &["SET", "k", "v"]), "+OK\r\n");
        assert_eq!(run(&mut session, &["GET", "k"]), "$1\r\nv\r\n");
        assert_eq!(run(&mut session, &["APPEND", "k", "w"]), ":2\r\n");
        assert_eq!(run(&mut session, &["INCR", "n"]), ":1\r\n");
        assert_eq!(run(&mut session, &["INCRBY", "n", "41"]), ":42\r\n");
        assert_eq!(run(&mut session, &["DECRBY", "n", "2"]), ":40\r\n");
        assert!(run(&mut session, &["INCR", "k"]).starts_with("-ERR value is not an integer"));
        assert_eq!(run(&mut session, &["GET", "k"]), "$2\r\nvw\r\n");
        assert_eq!(
            run(&mut session, &["SET", "m", &i64::MAX.to_string()]),
            "+OK\r\n"
        );
        assert!(run(&mut session, &["INCR", "m"]).starts_with("-ERR increment"));
        assert_eq!(run(&mut session, &["EXISTS", "k", "n", "x"]), ":2\r\n");
        assert_eq!(run(&mut session, &["MSET", "a", "1", "b", "2"]), "+OK\r\n");
        assert_eq!(
            run(&mut session, &["MGET", "a", "b", "c"]),
            "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n"
        );
        assert_eq!(run(&mut session, &["DEL", "a", "b", "c"]), ":2\r\n");
        assert_eq!(run(&mut session, &["STRLEN", "k"]), ":2\r\n");
        assert!(run(&mut session, &["GET"]).starts_with("-ERR wrong number of arguments for 'get'"));
        assert!(run(&mut session, &["FLUSHALL"]).starts_with("-ERR unknown command 'FLUSHALL'"));
    }
}
