//! XREAD BLOCK and XREADGROUP BLOCK through real connections: a blocked reader is woken by an
//! XADD from another client and gets exactly the entries added after it blocked (`$` is the
//! last id when it blocked, not when it wakes); a reader of several streams gets the one that
//! grew; a timeout answers null; XGROUP DESTROY and DEL wake a group reader with Redis's errors;
//! inside MULTI
//! nothing blocks. Waits are bounded (socket timeouts, deadlines on conditions), never sleeps.

mod common;

use std::time::Duration;

use common::{send, small_server as server, wait_blocked, Raw, Server};
use prefixkv_resp::Reply;

fn blocking_client(server: &Server) -> Raw {
    let raw = server.raw();
    raw.stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    raw
}

fn entry(id: &str, fields: &[&str]) -> Reply {
    Reply::Array(vec![
        Reply::bulk(id),
        Reply::Array(fields.iter().map(|f| Reply::bulk(*f)).collect()),
    ])
}

fn served(key: &str, entries: Vec<Reply>) -> Reply {
    Reply::Array(vec![Reply::bulk(key), Reply::Array(entries)])
}

#[test]
fn xadd_wakes_xread_with_the_entries_after_dollar() {
    let (_dir, server) = server();
    let mut blocked = blocking_client(&server);
    let mut other = server.raw();
    other.call(&["XADD", "s", "1-0", "old", "x"]);
    send(&mut blocked, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
    wait_blocked(&mut other, 1);
    assert_eq!(
        other.call(&["XADD", "s", "2-0", "f", "v"]),
        Reply::bulk("2-0")
    );
    assert_eq!(
        blocked.read(),
        Some(Reply::Array(vec![served(
            "s",
            vec![entry("2-0", &["f", "v"])]
        )]))
    );
    wait_blocked(&mut other, 0);
    // `$` on a missing key means 0-0: the first entry wakes it.
    send(
        &mut blocked,
        &[
            "XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "new", "s", "$", "$",
        ],
    );
    wait_blocked(&mut other, 1);
    other.call(&["XADD", "new", "5-1", "a", "b"]);
    assert_eq!(
        blocked.read(),
        Some(Reply::Array(vec![served(
            "new",
            vec![entry("5-1", &["a", "b"])]
        )]))
    );
}

#[test]
fn xadd_wakes_xreadgroup_and_the_entry_becomes_pending() {
    let (_dir, server) = server();
    let mut blocked = blocking_client(&server);
    let mut other = server.raw();
    assert_eq!(
        other.call(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]),
        Reply::simple("OK")
    );
    send(
        &mut blocked,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "0",
            "STREAMS",
            "s",
            ">",
        ],
    );
    wait_blocked(&mut other, 1);
    other.call(&["XADD", "s", "3-0", "f", "v"]);
    assert_eq!(
        blocked.read(),
        Some(Reply::Array(vec![served(
            "s",
            vec![entry("3-0", &["f", "v"])]
        )]))
    );
    assert_eq!(
        other.call(&["XPENDING", "s", "g"]),
        Reply::Array(vec![
            Reply::Integer(1),
            Reply::bulk("3-0"),
            Reply::bulk("3-0"),
            Reply::Array(vec![Reply::Array(vec![
                Reply::bulk("alice"),
                Reply::bulk("1")
            ])]),
        ])
    );
    // Destroying the group wakes a blocked reader, which then answers NOGROUP (Redis 7.0).
    send(
        &mut blocked,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "bob",
            "BLOCK",
            "0",
            "STREAMS",
            "s",
            ">",
        ],
    );
    wait_blocked(&mut other, 1);
    assert_eq!(
        other.call(&["XGROUP", "DESTROY", "s", "g"]),
        Reply::Integer(1)
    );
    assert_eq!(
        blocked.read(),
        Some(Reply::Error(
            b"NOGROUP the consumer group this client was blocked on no longer exists"
                .to_vec()
                .into()
        ))
    );
    // So does deleting the stream: UNBLOCKED.
    other.call(&["XGROUP", "CREATE", "s", "g", "$"]);
    send(
        &mut blocked,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "bob",
            "BLOCK",
            "0",
            "STREAMS",
            "s",
            ">",
        ],
    );
    wait_blocked(&mut other, 1);
    assert_eq!(other.call(&["DEL", "s"]), Reply::Integer(1));
    assert_eq!(
        blocked.read(),
        Some(Reply::Error(
            b"UNBLOCKED the stream key no longer exists".to_vec().into()
        ))
    );
}

#[test]
fn timeouts_answer_null_and_multi_does_not_block() {
    let (_dir, server) = server();
    let mut raw = blocking_client(&server);
    raw.call(&["XADD", "s", "1-0", "f", "v"]);
    assert_eq!(
        raw.call(&["XREAD", "BLOCK", "20", "STREAMS", "s", "$"]),
        Reply::NullArray
    );
    raw.call(&["XGROUP", "CREATE", "s", "g", "$"]);
    assert_eq!(
        raw.call(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "20",
            "STREAMS",
            "s",
            ">"
        ]),
        Reply::NullArray
    );
    assert_eq!(
        raw.error(&["XREAD", "BLOCK", "-1", "STREAMS", "s", "$"]),
        "ERR timeout is negative"
    );
    assert_eq!(raw.call(&["MULTI"]), Reply::simple("OK"));
    assert_eq!(
        raw.call(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]),
        Reply::simple("QUEUED")
    );
    assert_eq!(raw.call(&["EXEC"]), Reply::Array(vec![Reply::NullArray]));
    // History reads never block, even with nothing pending.
    assert_eq!(
        raw.call(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "0",
            "STREAMS",
            "s",
            "0"
        ]),
        Reply::Array(vec![served("s", vec![])])
    );
}

#[test]
fn a_stream_overwritten_by_another_type_unblocks_group_readers_only() {
    let (_dir, server) = server();
    let mut blocked = blocking_client(&server);
    let mut other = server.raw();
    other.call(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    send(
        &mut blocked,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "0",
            "STREAMS",
            "s",
            ">",
        ],
    );
    wait_blocked(&mut other, 1);
    other.call(&["SET", "s", "x"]);
    assert_eq!(
        blocked.read(),
        Some(Reply::Error(
            b"UNBLOCKED the stream key no longer exists".to_vec().into()
        ))
    );
    // A plain XREAD waits on through the overwrite and is served by the next stream there.
    other.call(&["DEL", "s"]);
    other.call(&["XADD", "s", "1-1", "f", "v"]);
    send(&mut blocked, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
    wait_blocked(&mut other, 1);
    other.call(&["SET", "s", "x"]);
    other.call(&["DEL", "s"]);
    other.call(&["XADD", "s", "2-1", "f", "w"]);
    assert_eq!(
        blocked.read(),
        Some(Reply::Array(vec![served(
            "s",
            vec![entry("2-1", &["f", "w"])]
        )]))
    );
}
