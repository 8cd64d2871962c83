//! Pub/Sub through a raw client, as Redis answers: subscription replies and counts, messages and
//! pattern messages in publication order, RESP2's subscribed context, RESP3 push frames beside
//! ordinary replies, PUBSUB introspection, cleanup when a subscriber leaves, and a slow
//! subscriber cut off at client-output-buffer-limit instead of growing the server's memory.

mod common;

use common::{Raw, Server};
use prefixkv_resp::Reply;

fn frame(resp3: bool, items: Vec<Reply>) -> Reply {
    if resp3 {
        Reply::Push(items)
    } else {
        Reply::Array(items)
    }
}

fn b(text: &str) -> Reply {
    Reply::bulk(text)
}

fn int(value: i64) -> Reply {
    Reply::Integer(value)
}

/// Polls `PUBSUB NUMSUB channel` until it is `expected` (bounded).
fn wait_numsub(raw: &mut Raw, channel: &str, expected: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let reply = raw.call(&["PUBSUB", "NUMSUB", channel]);
        if reply == Reply::Array(vec![b(channel), int(expected)]) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "NUMSUB {channel}: {reply:?}, waited for {expected}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn subscribe_publish_and_unsubscribe_answer_as_redis_in_both_protocols() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut publisher = server.raw();
    for resp3 in [false, true] {
        let mut sub = server.raw();
        if resp3 {
            assert!(matches!(sub.call(&["HELLO", "3"]), Reply::Map(_)));
        }
        let f = |items| frame(resp3, items);
        assert_eq!(
            sub.call(&["SUBSCRIBE", "a", "b", "a"]),
            f(vec![b("subscribe"), b("a"), int(1)])
        );
        assert_eq!(sub.read(), Some(f(vec![b("subscribe"), b("b"), int(2)])));
        assert_eq!(sub.read(), Some(f(vec![b("subscribe"), b("a"), int(2)])));
        assert_eq!(
            sub.call(&["PSUBSCRIBE", "n*"]),
            f(vec![b("psubscribe"), b("n*"), int(3)])
        );

        assert_eq!(publisher.call(&["PUBLISH", "a", "one"]), int(1));
        assert_eq!(publisher.call(&["PUBLISH", "news", "two"]), int(1));
        assert_eq!(publisher.call(&["PUBLISH", "a", "three"]), int(1));
        assert_eq!(publisher.call(&["PUBLISH", "zzz", "x"]), int(0));
        assert_eq!(sub.read(), Some(f(vec![b("message"), b("a"), b("one")])));
        assert_eq!(
            sub.read(),
            Some(f(vec![b("pmessage"), b("n*"), b("news"), b("two")]))
        );
        assert_eq!(sub.read(), Some(f(vec![b("message"), b("a"), b("three")])));

        assert_eq!(
            publisher.call(&["PUBSUB", "CHANNELS"]),
            Reply::Array(vec![b("a"), b("b")])
        );
        assert_eq!(
            publisher.call(&["PUBSUB", "CHANNELS", "[ab]"]),
            Reply::Array(vec![b("a"), b("b")])
        );
        assert_eq!(
            publisher.call(&["PUBSUB", "NUMSUB", "a", "zzz"]),
            Reply::Array(vec![b("a"), int(1), b("zzz"), int(0)])
        );
        assert_eq!(publisher.call(&["PUBSUB", "NUMPAT"]), int(1));

        if resp3 {
            // RESP3: any command runs while subscribed; a message may come before its reply.
            assert_eq!(sub.call(&["SET", "k", "v"]), Reply::simple("OK"));
            assert_eq!(publisher.call(&["PUBLISH", "b", "four"]), int(1));
            assert_eq!(sub.read(), Some(f(vec![b("message"), b("b"), b("four")])));
            assert_eq!(sub.call(&["GET", "k"]), b("v"));
        } else {
            assert_eq!(
                sub.error(&["GET", "k"]),
                "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT \
                 / RESET are allowed in this context"
            );
            assert_eq!(sub.call(&["PING"]), Reply::Array(vec![b("pong"), b("")]));
            assert_eq!(
                sub.call(&["PING", "hi"]),
                Reply::Array(vec![b("pong"), b("hi")])
            );
        }

        assert_eq!(
            sub.call(&["UNSUBSCRIBE"]),
            f(vec![b("unsubscribe"), b("a"), int(2)])
        );
        assert_eq!(sub.read(), Some(f(vec![b("unsubscribe"), b("b"), int(1)])));
        assert_eq!(
            sub.call(&["PUNSUBSCRIBE", "n*", "other*"]),
            f(vec![b("punsubscribe"), b("n*"), int(0)])
        );
        assert_eq!(
            sub.read(),
            Some(f(vec![b("punsubscribe"), b("other*"), int(0)]))
        );
        let null = if resp3 {
            Reply::Null
        } else {
            Reply::NullBulkString
        };
        assert_eq!(
            sub.call(&["UNSUBSCRIBE"]),
            f(vec![b("unsubscribe"), null, int(0)])
        );
        // Out of the subscribed context: ordinary commands again, nothing delivered.
        assert_eq!(publisher.call(&["PUBLISH", "a", "late"]), int(0));
        assert_eq!(sub.call(&["PING"]), Reply::simple("PONG"));
        assert_eq!(publisher.call(&["PUBSUB", "NUMPAT"]), int(0));
    }
    let mut raw = server.raw();
    assert_eq!(raw.call(&["MULTI"]), Reply::simple("OK"));
    assert_eq!(
        raw.error(&["SUBSCRIBE", "a"]),
        "ERR Command not allowed inside a transaction"
    );
    assert_eq!(raw.call(&["DISCARD"]), Reply::simple("OK"));
}

#[test]
fn a_subscriber_that_leaves_or_resets_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", "64mb"]);
    let mut observer = server.raw();
    let mut leaving = server.raw();
    leaving.call(&["SUBSCRIBE", "gone"]);
    leaving.call(&["PSUBSCRIBE", "g*"]);
    wait_numsub(&mut observer, "gone", 1);
    drop(leaving);
    wait_numsub(&mut observer, "gone", 0);
    assert_eq!(observer.call(&["PUBSUB", "NUMPAT"]), int(0));
    assert_eq!(observer.call(&["PUBLISH", "gone", "x"]), int(0));

    let mut resetting = server.raw();
    resetting.call(&["SUBSCRIBE", "r"]);
    assert_eq!(resetting.call(&["RESET"]), Reply::simple("RESET"));
    assert_eq!(resetting.call(&["GET", "k"]), Reply::NullBulkString);
    wait_numsub(&mut observer, "r", 0);
}

/// A subscriber that never reads: once the messages queued for it pass
/// client-output-buffer-limit, a publish no longer reaches it (PUBLISH counts 0) and the server
/// closes its connection; the messages it was sent before that arrive whole and in order.
#[test]
fn a_slow_subscriber_is_cut_off_at_the_output_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--engine-memory",
            "64mb",
            "--client-output-buffer-limit",
            "64kb",
        ],
    );
    let mut slow = server.raw();
    slow.call(&["SUBSCRIBE", "flood"]);
    let mut publisher = server.raw();
    let payload = "x".repeat(1000);
    let mut delivered = 0;
    // The socket buffers absorb some; the queue then fills. Bounded: 100 MB of messages.
    for _ in 0..100_000 {
        match publisher.call(&["PUBLISH", "flood", &payload]) {
            Reply::Integer(1) => delivered += 1,
            Reply::Integer(0) => break,
            other => panic!("PUBLISH: {other:?}"),
        }
    }
    assert!(delivered < 100_000, "the subscriber was never cut off");
    wait_numsub(&mut publisher, "flood", 0);
    let mut received = 0;
    while let Some(reply) = slow.read() {
        assert_eq!(
            reply,
            Reply::Array(vec![b("message"), b("flood"), b(&payload)])
        );
        received += 1;
    }
    assert!(
        received <= delivered,
        "{received} received, {delivered} published to it"
    );
}
