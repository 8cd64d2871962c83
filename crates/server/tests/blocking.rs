//! The blocking list commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH) through real connections: a
//! blocked client is woken by a push from another client and gets exactly the pushed element;
//! the timeout answers null; the replies before a blocking command arrive before it blocks and
//! the requests after it wait for it; a client that closes while blocked frees its registration;
//! inside MULTI the commands do not block. Waits are bounded by socket timeouts and deadlines on
//! conditions, never by sleeps that a slow machine could outrun.

mod common;

use std::time::{Duration, Instant};

use common::{send, small_server as server, wait_blocked, Raw, Server};
use prefixkv_resp::Reply;

#[test]
fn a_push_wakes_the_blocked_client_with_that_element() {
    let (_dir, server) = server();
    let mut blocked = server.raw();
    blocked
        .stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut other = server.raw();
    // A pipeline: PING's reply must arrive before BLPOP blocks, ECHO's only after it.
    send(&mut blocked, &["PING"]);
    send(&mut blocked, &["BLPOP", "q1", "q2", "0"]);
    send(&mut blocked, &["ECHO", "after"]);
    assert_eq!(blocked.read(), Some(Reply::simple("PONG")));
    wait_blocked(&mut other, 1);
    assert_eq!(other.call(&["RPUSH", "q2", "x", "y"]), Reply::Integer(2));
    assert_eq!(
        blocked.read(),
        Some(Reply::Array(vec![Reply::bulk("q2"), Reply::bulk("x")]))
    );
    assert_eq!(blocked.read(), Some(Reply::bulk("after")));
    assert_eq!(
        other.call(&["LRANGE", "q2", "0", "-1"]),
        Reply::Array(vec![Reply::bulk("y")])
    );
    wait_blocked(&mut other, 0);
}

#[test]
fn a_request_sent_while_blocked_runs_after_the_wake_without_more_input() {
    // The request after the blocking command arrives while it waits (not in the same read), and
    // the client sends nothing else: the server must answer it from what it already read.
    let (_dir, server) = server();
    // Reads of a `Raw` connection time out after 30 s: a missing reply fails, never hangs.
    let mut blocked = server.raw();
    let mut other = server.raw();
    send(&mut blocked, &["BLPOP", "q", "0"]);
    wait_blocked(&mut other, 1);
    // The ECHO is in the server's hands once the server counted its bytes: wait for that,
    // bounded, discounting the INFO requests the wait itself sends.
    let before = input_bytes(&mut other);
    let echo = ["ECHO", "sent while blocked"];
    send(&mut blocked, &echo);
    let deadline = Instant::now() + Duration::from_secs(30);
    for polls in 1.. {
        let read = input_bytes(&mut other) - before;
        if read >= polls * request_bytes(&["INFO", "stats"]) + request_bytes(&echo) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server never counted the bytes of the ECHO sent while blocked"
        );
    }
    assert_eq!(other.call(&["RPUSH", "q", "x"]), Reply::Integer(1));
    assert_eq!(
        blocked.read(),
        Some(Reply::Array(vec![Reply::bulk("q"), Reply::bulk("x")]))
    );
    assert_eq!(blocked.read(), Some(Reply::bulk("sent while blocked")));
}

#[test]
fn blmove_waits_and_moves() {
    let (_dir, server) = server();
    let mut blocked = server.raw();
    blocked
        .stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut other = server.raw();
    send(
        &mut blocked,
        &["BLMOVE", "src", "dst", "LEFT", "RIGHT", "0"],
    );
    wait_blocked(&mut other, 1);
    other.call(&["LPUSH", "src", "e"]);
    assert_eq!(blocked.read(), Some(Reply::bulk("e")));
    assert_eq!(
        other.call(&["LRANGE", "dst", "0", "-1"]),
        Reply::Array(vec![Reply::bulk("e")])
    );
    assert_eq!(other.call(&["EXISTS", "src"]), Reply::Integer(0));
}

#[test]
fn the_timeout_answers_null() {
    let (_dir, server) = server();
    let mut raw = server.raw();
    let started = Instant::now();
    assert_eq!(raw.call(&["BLPOP", "none", "0.2"]), Reply::NullArray);
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "answered before its timeout"
    );
    // Redis answers a null array to every timed-out blocking list command.
    assert_eq!(
        raw.call(&["BRPOPLPUSH", "none", "d", "0.05"]),
        Reply::NullArray
    );
    assert_eq!(raw.error(&["BLPOP", "k", "-1"]), "ERR timeout is negative");
    assert_eq!(
        raw.error(&["BLPOP", "k", "x"]),
        "ERR timeout is not a float or out of range"
    );
    raw.call(&["SET", "s", "v"]);
    assert_eq!(
        raw.error(&["BLPOP", "s", "0"]),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
}

#[test]
fn a_client_closing_while_blocked_is_forgotten() {
    let (_dir, server) = server();
    let mut other = server.raw();
    {
        let mut blocked = server.raw();
        send(&mut blocked, &["BRPOP", "q", "0"]);
        wait_blocked(&mut other, 1);
    }
    // The closed client is no longer blocked, and a push is not taken by it.
    wait_blocked(&mut other, 0);
    other.call(&["RPUSH", "q", "kept"]);
    assert_eq!(other.call(&["LLEN", "q"]), Reply::Integer(1));
}

#[test]
fn inside_exec_they_do_not_block() {
    let (_dir, server) = server();
    let mut raw = server.raw();
    assert_eq!(raw.call(&["MULTI"]), Reply::simple("OK"));
    assert_eq!(raw.call(&["BLPOP", "empty", "0"]), Reply::simple("QUEUED"));
    assert_eq!(raw.call(&["RPUSH", "full", "a"]), Reply::simple("QUEUED"));
    assert_eq!(raw.call(&["BRPOP", "full", "0"]), Reply::simple("QUEUED"));
    assert_eq!(
        raw.call(&["EXEC"]),
        Reply::Array(vec![
            Reply::NullArray,
            Reply::Integer(1),
            Reply::Array(vec![Reply::bulk("full"), Reply::bulk("a")]),
        ])
    );
}

#[test]
fn each_push_serves_one_of_several_blocked_clients() {
    let (_dir, server) = server();
    let mut other = server.raw();
    let mut clients: Vec<Raw> = (0..4).map(|_| server.raw()).collect();
    for client in &mut clients {
        client
            .stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        send(client, &["BLPOP", "jobs", "0"]);
    }
    wait_blocked(&mut other, 4);
    for job in 0..4 {
        other.call(&["RPUSH", "jobs", &format!("job{job}")]);
    }
    let mut served: Vec<String> = clients
        .iter_mut()
        .map(|client| match client.read() {
            Some(Reply::Array(items)) => match &items[1] {
                Reply::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    served.sort();
    assert_eq!(served, ["job0", "job1", "job2", "job3"], "every job once");
    assert_eq!(other.call(&["EXISTS", "jobs"]), Reply::Integer(0));
}

/// Both servers, Redis first: each ordering test below runs against redis-server (the
/// reference for what is expected) and then prefixkv-server.
fn both() -> Vec<(tempfile::TempDir, Server)> {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    vec![(redis_dir, redis), server()]
}

/// A connection whose reads give up after 30 s (a hang fails the test instead of stalling it).
fn client(server: &Server) -> Raw {
    let raw = server.raw();
    raw.stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    raw
}

fn bulks(items: &[&str]) -> Reply {
    Reply::Array(items.iter().map(|item| Reply::bulk(*item)).collect())
}

/// Three clients block on one key in order; three pushes land (pipelined, before any woken
/// client runs): each client gets the element of its turn, for lists and sorted sets.
#[test]
fn blocked_clients_are_served_in_blocking_order() {
    for (_dir, server) in both() {
        let mut control = client(&server);
        let mut waiters: Vec<Raw> = (0..3).map(|_| client(&server)).collect();
        for (i, waiter) in waiters.iter_mut().enumerate() {
            send(waiter, &["BLPOP", "q", "0"]);
            wait_blocked(&mut control, i as u64 + 1);
        }
        let pushes: Vec<Vec<u8>> = ["x1", "x2", "x3"]
            .iter()
            .map(|x| {
                let mut out = Vec::new();
                common::encode_request(&mut out, &[b"RPUSH", b"q", x.as_bytes()]);
                out
            })
            .collect();
        control.send_bytes(&pushes.concat()).unwrap();
        for (waiter, expected) in waiters.iter_mut().zip(["x1", "x2", "x3"]) {
            assert_eq!(waiter.read(), Some(bulks(&["q", expected])));
        }
        for _ in 0..3 {
            assert!(matches!(control.read(), Some(Reply::Integer(_))));
        }
        // Sorted sets: one ZADD of three members, three BZPOPMIN waiters in order.
        for (i, waiter) in waiters.iter_mut().enumerate() {
            send(waiter, &["BZPOPMIN", "z", "0"]);
            wait_blocked(&mut control, i as u64 + 1);
        }
        send(&mut control, &["ZADD", "z", "1", "a", "2", "b", "3", "c"]);
        assert_eq!(control.read(), Some(Reply::Integer(3)));
        for (waiter, (member, score)) in
            waiters.iter_mut().zip([("a", "1"), ("b", "2"), ("c", "3")])
        {
            assert_eq!(waiter.read(), Some(bulks(&["z", member, score])));
        }
    }
}

/// Pushes inside MULTI wake the blocked client once, at EXEC: it sees the final list.
#[test]
fn a_push_inside_multi_wakes_once_at_exec() {
    for (_dir, server) in both() {
        let mut control = client(&server);
        let mut waiter = client(&server);
        send(&mut waiter, &["BLPOP", "l", "0"]);
        wait_blocked(&mut control, 1);
        assert_eq!(control.call(&["MULTI"]), Reply::simple("OK"));
        for element in ["a", "b", "c"] {
            assert_eq!(
                control.call(&["LPUSH", "l", element]),
                Reply::simple("QUEUED")
            );
        }
        assert!(matches!(control.call(&["EXEC"]), Reply::Array(_)));
        assert_eq!(waiter.read(), Some(bulks(&["l", "c"])));
        assert_eq!(
            control.call(&["LRANGE", "l", "0", "-1"]),
            bulks(&["b", "a"])
        );
    }
}

/// A key pushed, deleted and re-created with another type inside one EXEC does not wake a list
/// waiter; the next real push does.
#[test]
fn a_type_change_before_the_unblock_does_not_wake() {
    for (_dir, server) in both() {
        let mut control = client(&server);
        let mut waiter = client(&server);
        send(&mut waiter, &["BLPOP", "l", "0"]);
        wait_blocked(&mut control, 1);
        assert_eq!(control.call(&["MULTI"]), Reply::simple("OK"));
        for command in [
            &["LPUSH", "l", "a"][..],
            &["DEL", "l"],
            &["SET", "l", "foo"],
        ] {
            assert_eq!(control.call(command), Reply::simple("QUEUED"));
        }
        assert!(matches!(control.call(&["EXEC"]), Reply::Array(_)));
        // Still blocked: the server still counts it (a wake would have answered or errored).
        wait_blocked(&mut control, 1);
        assert_eq!(control.call(&["DEL", "l"]), Reply::Integer(1));
        assert_eq!(control.call(&["LPUSH", "l", "b"]), Reply::Integer(1));
        assert_eq!(waiter.read(), Some(bulks(&["l", "b"])));
    }
}

/// A waiter behind another one still times out on time; the one ahead keeps its place; the
/// blocking MPOP forms time out with a null array too.
#[test]
fn a_queued_waiter_never_hangs_past_its_timeout() {
    for (_dir, server) in both() {
        let mut control = client(&server);
        let mut first = client(&server);
        let mut second = client(&server);
        send(&mut first, &["BLPOP", "k", "0"]);
        wait_blocked(&mut control, 1);
        let started = Instant::now();
        send(&mut second, &["BLPOP", "k", "0.2"]);
        assert_eq!(second.read(), Some(Reply::NullArray));
        assert!(started.elapsed() >= Duration::from_millis(200));
        for command in [
            &["BZPOPMAX", "zz", "0.1"][..],
            &["BZMPOP", "0.1", "1", "zz", "MIN"],
            &["BLMPOP", "0.1", "2", "k2", "k3", "LEFT"],
        ] {
            assert_eq!(second.call(command), Reply::NullArray, "{command:?}");
        }
        assert_eq!(control.call(&["RPUSH", "k", "v"]), Reply::Integer(1));
        assert_eq!(first.read(), Some(bulks(&["k", "v"])));
    }
}

/// BLMPOP and BZMPOP wait, then pop up to COUNT from the key that got data.
#[test]
fn the_mpop_forms_wait_and_pop_a_count() {
    for (_dir, server) in both() {
        let mut control = client(&server);
        let mut waiter = client(&server);
        send(
            &mut waiter,
            &["BLMPOP", "0", "2", "l1", "l2", "RIGHT", "COUNT", "2"],
        );
        wait_blocked(&mut control, 1);
        assert_eq!(
            control.call(&["RPUSH", "l2", "a", "b", "c"]),
            Reply::Integer(3)
        );
        assert_eq!(
            waiter.read(),
            Some(Reply::Array(vec![Reply::bulk("l2"), bulks(&["c", "b"])]))
        );
        send(&mut waiter, &["BZMPOP", "0", "1", "z", "MAX", "COUNT", "5"]);
        wait_blocked(&mut control, 1);
        assert_eq!(
            control.call(&["ZADD", "z", "1", "a", "2", "b"]),
            Reply::Integer(2)
        );
        let pair = |m: &str, s: &str| bulks(&[m, s]);
        assert_eq!(
            waiter.read(),
            Some(Reply::Array(vec![
                Reply::bulk("z"),
                Reply::Array(vec![pair("b", "2"), pair("a", "1")])
            ]))
        );
    }
}

/// Bytes of `args` as one request, as `send` writes it.
fn request_bytes(args: &[&str]) -> u64 {
    let mut out = Vec::new();
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    common::encode_request(&mut out, &args);
    out.len() as u64
}

/// The server's `total_net_input_bytes` (the INFO request's own bytes included).
fn input_bytes(connection: &mut Raw) -> u64 {
    connection
        .info_field("stats", "total_net_input_bytes")
        .parse()
        .expect("a byte count")
}
