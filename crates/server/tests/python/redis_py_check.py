"""redis-py against a running prefixkv-server: `python3 redis_py_check.py <port>`.

Run by crates/server/tests/redis_py.rs. Exercises strings, MSET/MGET, INCR, DEL, EXPIRE/TTL,
pipelines, hashes, lists (BLPOP too), sets, sorted sets, HELLO, WATCH (Redis.transaction) and Pub/Sub with redis-py's default protocol (RESP3 since redis-py 8) and with
protocol=2 and protocol=3 explicitly, checking every result. Prints `ok <checks>` and exits 0, or
raises (non-zero exit) naming the failed check.
"""

import sys

import redis

checks = 0


def expect(what, got, want):
    global checks
    checks += 1
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def exercise(label, client, want_protocol):
    prefix = f"{label}:"
    client.flushdb()
    expect(f"{label} PING", client.ping(), True)

    # Strings.
    expect(f"{label} SET", client.set(prefix + "s", "hello"), True)
    expect(f"{label} GET", client.get(prefix + "s"), "hello")
    expect(f"{label} GET missing", client.get(prefix + "missing"), None)
    expect(f"{label} SET NX on existing", client.set(prefix + "s", "x", nx=True), None)
    expect(f"{label} SET GET", client.set(prefix + "s", "world", get=True), "hello")
    expect(f"{label} APPEND", client.append(prefix + "s", "!"), 6)
    expect(f"{label} STRLEN", client.strlen(prefix + "s"), 6)
    expect(f"{label} GETRANGE", client.getrange(prefix + "s", 0, 2), "wor")
    expect(f"{label} binary value", client.set(prefix + "bin", b"\x00\xff\r\n"), True)

    # MSET / MGET.
    expect(f"{label} MSET", client.mset({prefix + "a": "1", prefix + "b": "2"}), True)
    expect(
        f"{label} MGET",
        client.mget([prefix + "a", prefix + "b", prefix + "nope"]),
        ["1", "2", None],
    )
    expect(f"{label} MSETNX", client.msetnx({prefix + "a": "9", prefix + "c": "3"}), False)

    # INCR family.
    expect(f"{label} INCR", client.incr(prefix + "n"), 1)
    expect(f"{label} INCRBY", client.incrby(prefix + "n", 41), 42)
    expect(f"{label} DECR", client.decr(prefix + "n"), 41)
    expect(f"{label} INCRBYFLOAT", client.incrbyfloat(prefix + "f", 1.5), 1.5)
    try:
        client.incr(prefix + "s")
        raise AssertionError(f"{label} INCR on a string did not fail")
    except redis.ResponseError as error:
        expect(f"{label} INCR error", str(error), "value is not an integer or out of range")

    # DEL / EXISTS / TYPE.
    expect(f"{label} EXISTS", client.exists(prefix + "a", prefix + "b", prefix + "nope"), 2)
    expect(f"{label} TYPE", client.type(prefix + "a"), "string")
    expect(f"{label} DEL", client.delete(prefix + "a", prefix + "b", prefix + "nope"), 2)
    expect(f"{label} EXISTS after DEL", client.exists(prefix + "a"), 0)

    # EXPIRE / TTL.
    expect(f"{label} TTL without expiry", client.ttl(prefix + "s"), -1)
    expect(f"{label} TTL missing", client.ttl(prefix + "missing"), -2)
    expect(f"{label} EXPIRE", client.expire(prefix + "s", 100), True)
    ttl = client.ttl(prefix + "s")
    expect(f"{label} TTL in range", 0 < ttl <= 100, True)
    pttl = client.pttl(prefix + "s")
    expect(f"{label} PTTL in range", 0 < pttl <= 100_000, True)
    expect(f"{label} PERSIST", client.persist(prefix + "s"), True)
    expect(f"{label} TTL after PERSIST", client.ttl(prefix + "s"), -1)
    expect(f"{label} SET EX", client.set(prefix + "e", "v", ex=50), True)
    expect(f"{label} TTL of SET EX", 0 < client.ttl(prefix + "e") <= 50, True)
    expect(f"{label} PEXPIRE past deletes", client.pexpire(prefix + "e", -1), True)
    expect(f"{label} GET after past expiry", client.get(prefix + "e"), None)

    # Hashes.
    expect(f"{label} HSET", client.hset(prefix + "h", mapping={"f1": "v1", "f2": "v2"}), 2)
    expect(f"{label} HGET", client.hget(prefix + "h", "f1"), "v1")
    expect(f"{label} HGETALL", client.hgetall(prefix + "h"), {"f1": "v1", "f2": "v2"})
    expect(f"{label} HINCRBY", client.hincrby(prefix + "h", "n", 5), 5)
    expect(f"{label} HLEN", client.hlen(prefix + "h"), 3)
    expect(f"{label} HDEL", client.hdel(prefix + "h", "f1", "zz"), 1)

    # Lists, sets and sorted sets, directly and inside a MULTI/EXEC pipeline.
    expect(f"{label} RPUSH", client.rpush(prefix + "l", "a", "b", "c"), 3)
    expect(f"{label} LPUSH", client.lpush(prefix + "l", "z"), 4)
    expect(f"{label} LRANGE", client.lrange(prefix + "l", 0, -1), ["z", "a", "b", "c"])
    expect(f"{label} LPOP count", client.lpop(prefix + "l", 2), ["z", "a"])
    expect(f"{label} LMOVE", client.lmove(prefix + "l", prefix + "l2", "RIGHT", "LEFT"), "c")
    expect(f"{label} LPOS", client.lpos(prefix + "l", "b"), 0)
    # redis-py turns BLPOP's reply into a tuple in RESP2 and leaves a list in RESP3.
    expect(f"{label} BLPOP ready", list(client.blpop([prefix + "l"], timeout=1)), [prefix + "l", "b"])
    expect(f"{label} BLPOP timeout", client.blpop([prefix + "l"], timeout=0.05), None)
    expect(f"{label} SADD", client.sadd(prefix + "st", "x", "y", "z"), 3)
    expect(f"{label} SMEMBERS", client.smembers(prefix + "st"), {"x", "y", "z"})
    expect(f"{label} SISMEMBER", client.sismember(prefix + "st", "y"), True)
    expect(f"{label} SINTER", client.sinter(prefix + "st", prefix + "nope"), set())
    expect(f"{label} ZADD", client.zadd(prefix + "z", {"a": 1, "b": 2.5, "c": -1}), 3)
    expect(
        f"{label} ZRANGE WITHSCORES",
        # redis-py gives pairs as tuples in RESP2 and lists in RESP3 (against Redis too).
        [tuple(pair) for pair in client.zrange(prefix + "z", 0, -1, withscores=True)],
        [("c", -1.0), ("a", 1.0), ("b", 2.5)],
    )
    expect(f"{label} ZSCORE", client.zscore(prefix + "z", "b"), 2.5)
    expect(f"{label} ZRANK", client.zrank(prefix + "z", "b"), 2)
    expect(f"{label} ZINCRBY", client.zincrby(prefix + "z", 0.5, "a"), 1.5)
    expect(f"{label} ZRANGEBYSCORE", client.zrangebyscore(prefix + "z", "(0", "+inf"), ["a", "b"])
    # Without a count, RESP3 (Redis 7.0 too) answers one flat pair, which redis-py leaves flat.
    popped = client.zpopmin(prefix + "z")
    if popped and not isinstance(popped[0], (list, tuple)):
        popped = [popped]
    expect(f"{label} ZPOPMIN", [tuple(p) for p in popped], [("c", -1.0)])
    try:
        client.lpush(prefix + "st", "x")
        raise AssertionError(f"{label} LPUSH on a set did not fail")
    except redis.ResponseError as error:
        expect(f"{label} WRONGTYPE", str(error), "WRONGTYPE Operation against a key holding the wrong kind of value")
    pipe = client.pipeline()
    pipe.rpush(prefix + "ql", 1, 2).sadd(prefix + "qs", "m").zadd(prefix + "qz", {"m": 3})
    pipe.lrange(prefix + "ql", 0, -1).scard(prefix + "qs").zscore(prefix + "qz", "m")
    expect(f"{label} collections in MULTI/EXEC", pipe.execute(), [2, 1, 1, ["1", "2"], 1, 3.0])

    # Pipelines: the default one wraps the batch in MULTI/EXEC; a plain one does not.
    pipe = client.pipeline()
    pipe.set(prefix + "t1", "a").incr(prefix + "t2").incr(prefix + "t2").get(prefix + "t1")
    expect(f"{label} MULTI/EXEC pipeline", pipe.execute(), [True, 1, 2, "a"])
    pipe = client.pipeline()
    pipe.set(prefix + "t3", "x").incr(prefix + "t3").set(prefix + "t4", "y")
    failed = pipe.execute(raise_on_error=False)
    expect(f"{label} MULTI/EXEC error element", isinstance(failed[1], redis.ResponseError), True)
    expect(f"{label} MULTI/EXEC after error", client.get(prefix + "t4"), "y")
    pipe = client.pipeline(transaction=False)
    for i in range(100):
        pipe.set(f"{prefix}p{i}", i)
    for i in range(100):
        pipe.incr(f"{prefix}p{i}")
    pipe.get(prefix + "p99")
    results = pipe.execute()
    expect(f"{label} pipeline length", len(results), 201)
    expect(f"{label} pipeline SETs", all(r is True for r in results[:100]), True)
    expect(f"{label} pipeline INCRs", results[100:200], list(range(1, 101)))
    expect(f"{label} pipeline GET", results[200], "100")
    pipe = client.pipeline(transaction=False)
    pipe.set(prefix + "x", "1").incr(prefix + "s").get(prefix + "x")
    mixed = pipe.execute(raise_on_error=False)
    expect(f"{label} pipeline error in the middle", isinstance(mixed[1], redis.ResponseError), True)
    expect(f"{label} pipeline after error", mixed[2], "1")

    # Keys.
    keys = sorted(client.scan_iter(match=prefix + "p*", count=10))
    expect(f"{label} SCAN", len(keys), 100)
    expect(f"{label} DBSIZE", client.dbsize() >= 100, True)

    # HELLO and connection state.
    hello = client.execute_command("HELLO", want_protocol)
    if isinstance(hello, list):
        # RESP2 has no maps: HELLO answers a flat array of alternating names and values.
        hello = dict(zip(hello[::2], hello[1::2]))
    expect(f"{label} HELLO proto", hello["proto"], want_protocol)
    expect(f"{label} HELLO server", hello["server"], "redis")
    expect(f"{label} CLIENT SETNAME", client.client_setname("py-" + label), True)
    expect(f"{label} CLIENT GETNAME", client.client_getname(), "py-" + label)
    expect(f"{label} INFO", "redis_version" in client.info("server"), True)
    expect(f"{label} ECHO", client.echo("hi"), "hi")


def next_message(pubsub):
    """The next Pub/Sub frame, waiting at most 10 s for it."""
    message = pubsub.get_message(timeout=10)
    if message is None:
        raise SystemExit("no Pub/Sub message within 10 s")
    return message


def exercise_watch_and_pubsub(label, port, protocol):
    """WATCH through Redis.transaction, and Pub/Sub, each over connections of their own."""
    prefix = f"{label}:w:"
    a = redis.Redis(port=port, decode_responses=True, protocol=protocol)
    b = redis.Redis(port=port, decode_responses=True, protocol=protocol)
    a.set(prefix + "n", 0)
    seen = []

    def add_ten(pipe):
        value = int(pipe.get(prefix + "n"))
        if not seen:
            # Another client writes between this read and EXEC: the first EXEC must abort.
            b.incr(prefix + "n")
        seen.append(value)
        pipe.multi()
        pipe.set(prefix + "n", value + 10)

    a.transaction(add_ten, prefix + "n")
    expect(f"{label} WATCH retried after another client's write", seen, [0, 1])
    expect(f"{label} WATCH result", a.get(prefix + "n"), "11")

    pubsub = a.pubsub()
    pubsub.subscribe(prefix + "ch")
    pubsub.psubscribe(prefix + "p*")
    expect(f"{label} subscribe frame", next_message(pubsub)["type"], "subscribe")
    expect(f"{label} psubscribe frame", next_message(pubsub)["type"], "psubscribe")
    expect(f"{label} PUBLISH count", b.publish(prefix + "ch", "hello"), 1)
    message = next_message(pubsub)
    expect(f"{label} message", (message["type"], message["data"]), ("message", "hello"))
    expect(f"{label} PUBLISH to a pattern", b.publish(prefix + "pq", "there"), 1)
    message = next_message(pubsub)
    expect(
        f"{label} pmessage",
        (message["type"], message["pattern"], message["channel"], message["data"]),
        ("pmessage", prefix + "p*", prefix + "pq", "there"),
    )
    expect(f"{label} PUBSUB NUMSUB", b.pubsub_numsub(prefix + "ch"), [(prefix + "ch", 1)])
    pubsub.close()
    a.close()
    b.close()


def collection_steps(p):
    """Every list, set and sorted-set command through redis-py's own method, on keys under `p`.
    Each step takes a client or a pipeline; the results are compared run against run."""
    return [
        lambda c: c.rpush(p + "l", "a", "b", "c", "b"),
        lambda c: c.lpush(p + "l", "z"),
        lambda c: c.lpushx(p + "l", "y"),
        lambda c: c.rpushx(p + "none", "x"),
        lambda c: c.llen(p + "l"),
        lambda c: c.lrange(p + "l", 0, -1),
        lambda c: c.lindex(p + "l", -1),
        lambda c: c.lset(p + "l", 0, "Y"),
        lambda c: c.linsert(p + "l", "BEFORE", "c", "bc"),
        lambda c: c.lpos(p + "l", "b"),
        lambda c: c.lpos(p + "l", "b", rank=-1, count=2),
        lambda c: c.lrem(p + "l", 1, "b"),
        lambda c: c.ltrim(p + "l", 0, 4),
        lambda c: c.lpop(p + "l"),
        lambda c: c.rpop(p + "l", 2),
        lambda c: c.lmove(p + "l", p + "l2", "LEFT", "RIGHT"),
        lambda c: c.rpoplpush(p + "l", p + "l2"),
        lambda c: c.blpop([p + "none", p + "l2"], timeout=1),
        lambda c: c.brpop([p + "l2"], timeout=1),
        lambda c: c.rpush(p + "l3", "q"),
        lambda c: c.blmove(p + "l3", p + "l4", 1, "LEFT", "LEFT"),
        lambda c: c.brpoplpush(p + "l4", p + "l3", 1),
        lambda c: c.lrange(p + "l3", 0, -1),
        lambda c: c.sadd(p + "s", "a", "b", "c"),
        lambda c: c.sadd(p + "t", "b", "c", "d"),
        lambda c: c.srem(p + "s", "a", "zz"),
        lambda c: c.sismember(p + "s", "b"),
        lambda c: c.smismember(p + "s", ["b", "q"]),
        lambda c: c.scard(p + "s"),
        lambda c: c.smembers(p + "t"),
        lambda c: c.srandmember(p + "s", 5),
        lambda c: c.smove(p + "t", p + "s", "d"),
        lambda c: c.sinter([p + "s", p + "t"]),
        lambda c: c.sunion([p + "s", p + "t"]),
        lambda c: c.sdiff([p + "s", p + "t"]),
        lambda c: c.sinterstore(p + "si", [p + "s", p + "t"]),
        lambda c: c.sunionstore(p + "su", [p + "s", p + "t"]),
        lambda c: c.sdiffstore(p + "sd", [p + "s", p + "t"]),
        lambda c: c.sintercard(2, [p + "s", p + "t"], limit=1),
        lambda c: c.sadd(p + "one", "only"),
        lambda c: c.spop(p + "one"),
        lambda c: c.zadd(p + "z", {"a": 1, "b": 2, "c": 3, "d": 4}),
        lambda c: c.zadd(p + "z", {"a": 5}, xx=True, ch=True),
        lambda c: c.zadd(p + "z", {"b": 1}, gt=True),
        lambda c: c.zadd(p + "z", {"e": 2}, nx=True),
        lambda c: c.zincrby(p + "z", 2.5, "b"),
        lambda c: c.zrem(p + "z", "e", "nope"),
        lambda c: c.zscore(p + "z", "c"),
        lambda c: c.zmscore(p + "z", ["c", "nope"]),
        lambda c: c.zcard(p + "z"),
        lambda c: c.zcount(p + "z", "(1", "+inf"),
        lambda c: c.zrank(p + "z", "b"),
        lambda c: c.zrevrank(p + "z", "b"),
        lambda c: c.zrange(p + "z", 0, -1, withscores=True),
        lambda c: c.zrange(p + "z", 3, 5, byscore=True, offset=0, num=1),
        lambda c: c.zrange(p + "z", 0, 1, desc=True),
        lambda c: c.zrangebyscore(p + "z", 2, "+inf", withscores=True),
        lambda c: c.zrevrange(p + "z", 0, 0),
        lambda c: c.zadd(p + "lex", {"a": 0, "b": 0, "c": 0}),
        lambda c: c.zrangebylex(p + "lex", "[b", "+"),
        lambda c: c.zpopmin(p + "z"),
        lambda c: c.zpopmax(p + "z", 1),
        lambda c: c.zunionstore(p + "zu", [p + "z", p + "lex"], aggregate="MAX"),
        lambda c: c.zinterstore(p + "zi", {p + "z": 2, p + "zu": 1}),
        lambda c: c.zremrangebyrank(p + "zu", 0, 0),
        lambda c: c.zremrangebyscore(p + "zu", "-inf", 0),
        lambda c: c.hset(p + "h", mapping={f"f{i}": str(i) for i in range(600)}),
        lambda c: c.hlen(p + "h"),
        lambda c: c.hget(p + "h", "f550"),
        lambda c: c.hincrbyfloat(p + "h", "f1", 0.5),
        lambda c: c.hdel(p + "h", "f2", "nope"),
        lambda c: c.object("encoding", p + "h"),
        lambda c: c.type(p + "z"),
    ]


def normalize(value, own, reference):
    """A result with the key prefix `own` written as `reference`; tuples as lists (redis-py gives
    tuples in some replies and lists in others depending on the path it parsed them through)."""
    if isinstance(value, str):
        return value.replace(own, reference)
    if isinstance(value, (list, tuple)):
        return [normalize(v, own, reference) for v in value]
    if isinstance(value, set):
        return {normalize(v, own, reference) for v in value}
    if isinstance(value, dict):
        return {normalize(k, own, reference): normalize(v, own, reference) for k, v in value.items()}
    return value


def exercise_collections(label, client):
    """Every collection command directly, then the same steps in one MULTI/EXEC pipeline and in
    a plain pipeline on fresh keys: all three runs must give the same results."""
    direct_prefix, multi_prefix, plain_prefix = f"{label}:cd:", f"{label}:cm:", f"{label}:cp:"
    direct = [step(client) for step in collection_steps(direct_prefix)]
    expect(f"{label} collections LRANGE", direct[5], ["y", "z", "a", "b", "c", "b"])
    expect(f"{label} collections ZMSCORE", direct[48], [3.0, None])
    expect(f"{label} collections hash encoding", direct[-2], "hashtable")
    for prefix, transaction in ((multi_prefix, True), (plain_prefix, False)):
        pipe = client.pipeline(transaction=transaction)
        for step in collection_steps(prefix):
            step(pipe)
        results = pipe.execute()
        expect(
            f"{label} collections through a pipeline (transaction={transaction})",
            normalize(results, prefix, direct_prefix),
            normalize(direct, direct_prefix, direct_prefix),
        )


def main():
    port = int(sys.argv[1])
    # single_connection_client keeps CLIENT SETNAME and HELLO on the connection they checked.
    default = redis.Redis(port=port, decode_responses=True, single_connection_client=True)
    hello = default.execute_command("HELLO")
    # redis-py 8 defaults to RESP3; older versions to RESP2. Whatever it chose must work.
    default_protocol = hello["proto"]
    exercise("default", default, default_protocol)
    exercise(
        "resp2",
        redis.Redis(port=port, decode_responses=True, protocol=2, single_connection_client=True),
        2,
    )
    exercise(
        "resp3",
        redis.Redis(port=port, decode_responses=True, protocol=3, single_connection_client=True),
        3,
    )
    for protocol in (2, 3):
        exercise_watch_and_pubsub(f"wp{protocol}", port, protocol)
        exercise_collections(
            f"coll{protocol}",
            redis.Redis(port=port, decode_responses=True, protocol=protocol),
        )
    print(f"ok {checks} checks (redis-py {redis.__version__}, default protocol {default_protocol})")


if __name__ == "__main__":
    main()
