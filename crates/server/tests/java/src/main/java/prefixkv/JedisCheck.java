package prefixkv;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisPubSub;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.Protocol;
import redis.clients.jedis.RedisProtocol;
import redis.clients.jedis.Response;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.args.ListDirection;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.params.ScanParams;
import redis.clients.jedis.params.SetParams;
import redis.clients.jedis.params.ZAddParams;
import redis.clients.jedis.params.ZParams;
import redis.clients.jedis.params.ZRangeParams;
import redis.clients.jedis.resps.ScanResult;
import redis.clients.jedis.resps.Tuple;
import redis.clients.jedis.util.KeyValue;

/**
 * Jedis, unchanged, against a Redis-compatible server: {@code JedisCheck <port> <protocol 2|3>}.
 *
 * <p>Run by crates/server/tests/jedis.rs against prefixkv-server and against a real redis-server,
 * so every expectation below is also checked against Redis itself. It covers strings, keys,
 * hashes (large enough to leave the small encoding), lists (BLPOP served and timed out), sets,
 * sorted sets, error lines, {@link Pipeline}, {@link Transaction} with WATCH (the first attempt
 * spoiled by another client) and Pub/Sub with the subscriber on its own thread.
 *
 * <p>It flushes the selected database first: give it a server of its own. The first mismatch
 * prints what was expected and what came back and exits 1; success prints {@code ok <n> checks}.
 */
public final class JedisCheck {
  private final Jedis jedis;
  /** A second connection: the "someone else" of WATCH and PUBLISH. */
  private final Jedis other;
  private final HostAndPort address;
  private final DefaultJedisClientConfig config;
  private final int protocol;
  private int checks;

  private JedisCheck(HostAndPort address, int protocol) {
    this.address = address;
    this.protocol = protocol;
    this.config = DefaultJedisClientConfig.builder()
        .protocol(protocol == 3 ? RedisProtocol.RESP3 : RedisProtocol.RESP2)
        .socketTimeoutMillis(10_000)
        .build();
    this.jedis = new Jedis(address, config);
    this.other = new Jedis(address, config);
  }

  /** A mismatch: reported once, then the program ends (later checks would only repeat it). */
  private static final class Mismatch extends RuntimeException {
    Mismatch(String message) {
      super(message);
    }
  }

  private void expect(String what, Object got, Object want) {
    if (!Objects.equals(got, want)) {
      throw new Mismatch(what + ": got " + show(got) + ", want " + show(want));
    }
    checks++;
  }

  /** Compares a reply whose order Redis leaves to its hash tables. */
  private void expectSet(String what, Collection<String> got, Collection<String> want) {
    List<String> sortedGot = got == null ? null : new ArrayList<>(got);
    List<String> sortedWant = new ArrayList<>(want);
    if (sortedGot != null) {
      Collections.sort(sortedGot);
    }
    Collections.sort(sortedWant);
    expect(what, sortedGot, sortedWant);
  }

  /** Runs {@code command}, which must fail with exactly the error line {@code want}. */
  private void expectError(String what, Runnable command, String want) {
    try {
      command.run();
    } catch (JedisDataException error) {
      expect(what, error.getMessage(), want);
      return;
    }
    throw new Mismatch(what + ": no error, want " + show(want));
  }

  private void expectWithin(String what, long got, long low, long high) {
    if (got < low || got > high) {
      throw new Mismatch(what + ": got " + got + ", want within [" + low + ", " + high + "]");
    }
    checks++;
  }

  private static String show(Object value) {
    if (value instanceof String) {
      return "\"" + value + "\"";
    }
    return String.valueOf(value);
  }

  private void strings() {
    expect("SET", jedis.set("s:a", "hello"), "OK");
    expect("GET", jedis.get("s:a"), "hello");
    expect("GET missing", jedis.get("s:missing"), null);
    expect("SET NX on an existing key", jedis.set("s:a", "x", SetParams.setParams().nx()), null);
    expect("SET XX on an existing key", jedis.set("s:a", "world", SetParams.setParams().xx()), "OK");
    expect("SET GET", jedis.setGet("s:a", "again"), "world");
    expect("SET NX EX", jedis.set("s:b", "v", SetParams.setParams().nx().ex(100)), "OK");
    expect("SET KEEPTTL", jedis.set("s:b", "w", SetParams.setParams().keepTtl()), "OK");
    expectWithin("TTL kept by KEEPTTL", jedis.ttl("s:b"), 90, 100);
    expect("SETEX", jedis.setex("s:e", 10, "v"), "OK");
    expectWithin("TTL of SETEX", jedis.ttl("s:e"), 9, 10);

    expect("INCR", jedis.incr("s:n"), 1L);
    expect("INCRBY", jedis.incrBy("s:n", 41), 42L);
    expect("DECR", jedis.decr("s:n"), 41L);
    expect("INCRBYFLOAT", jedis.incrByFloat("s:f", 2.5), 2.5);
    expectError("INCR on a string", () -> jedis.incr("s:a"),
        "ERR value is not an integer or out of range");

    expect("MSET", jedis.mset("m:1", "a", "m:2", "b"), "OK");
    expect("MGET", jedis.mget("m:1", "m:2", "m:missing"), Arrays.asList("a", "b", null));

    expect("EXPIRE", jedis.expire("s:a", 100), 1L);
    expectWithin("TTL after EXPIRE", jedis.ttl("s:a"), 99, 100);
    expect("EXPIRE missing", jedis.expire("s:missing", 1), 0L);
    expect("TTL without expiry", jedis.ttl("m:1"), -1L);
    expect("TTL missing", jedis.ttl("s:missing"), -2L);
  }

  private void keys() {
    expect("DEL", jedis.del("s:n", "s:f", "s:missing"), 2L);
    expect("EXISTS", jedis.exists("m:1", "m:2", "m:missing"), 2L);
    expect("TYPE string", jedis.type("m:1"), "string");
    expect("TYPE missing", jedis.type("m:missing"), "none");
    expect("RENAME", jedis.rename("m:1", "m:renamed"), "OK");
    expect("GET renamed", jedis.get("m:renamed"), "a");
    expectError("RENAME missing", () -> jedis.rename("m:1", "m:x"), "ERR no such key");
    expectError("LPUSH on a string", () -> jedis.lpush("m:2", "x"),
        "WRONGTYPE Operation against a key holding the wrong kind of value");
    expectError("SET with a bad option",
        () -> jedis.sendCommand(Protocol.Command.SET, "k", "v", "BADOPT"), "ERR syntax error");
    ProtocolCommand unknown = () -> "NOSUCHCMD".getBytes(StandardCharsets.UTF_8);
    expectError("unknown command", () -> jedis.sendCommand(unknown, "a", "b"),
        "ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b' ");

    List<String> want = new ArrayList<>();
    for (int i = 0; i < 25; i++) {
      String key = String.format("scan:%02d", i);
      want.add(key);
      jedis.set(key, Integer.toString(i));
    }
    List<String> found = new ArrayList<>();
    ScanParams params = new ScanParams().match("scan:*").count(10);
    String cursor = ScanParams.SCAN_POINTER_START;
    for (int steps = 0; ; steps++) {
      ScanResult<String> step = jedis.scan(cursor, params);
      found.addAll(step.getResult());
      cursor = step.getCursor();
      if (step.isCompleteIteration()) {
        break;
      }
      if (steps > 1000) {
        throw new Mismatch("SCAN did not end after 1000 steps");
      }
    }
    expectSet("SCAN MATCH collects every key once", found, want);
  }

  private void hashes() {
    // 600 fields: past hash-max-listpack-entries (512, the default), so the large form is exercised too.
    Map<String, String> fields = new HashMap<>();
    for (int i = 0; i < 600; i++) {
      fields.put(String.format("f%03d", i), "v" + i);
    }
    expect("HSET 600 fields", jedis.hset("h:big", fields), 600L);
    expect("HLEN", jedis.hlen("h:big"), 600L);
    expect("OBJECT ENCODING of a 600-field hash", jedis.objectEncoding("h:big"), "hashtable");
    expect("HGETALL", jedis.hgetAll("h:big"), fields);

    Map<String, String> seen = new HashMap<>();
    ScanParams params = new ScanParams().match("f1*").count(20);
    String cursor = ScanParams.SCAN_POINTER_START;
    for (int steps = 0; ; steps++) {
      ScanResult<Map.Entry<String, String>> step = jedis.hscan("h:big", cursor, params);
      step.getResult().forEach(entry -> seen.put(entry.getKey(), entry.getValue()));
      cursor = step.getCursor();
      if (step.isCompleteIteration()) {
        break;
      }
      if (steps > 1000) {
        throw new Mismatch("HSCAN did not end after 1000 steps");
      }
    }
    Map<String, String> wantSeen = new HashMap<>();
    fields.forEach((field, value) -> {
      if (field.startsWith("f1")) {
        wantSeen.put(field, value);
      }
    });
    expect("HSCAN MATCH f1*", seen, wantSeen);

    Map<String, String> small = new LinkedHashMap<>();
    small.put("name", "prefixkv");
    small.put("price", "10.5");
    expect("HSET pairs", jedis.hset("h:small", small), 2L);
    expect("HINCRBYFLOAT", jedis.hincrByFloat("h:small", "price", 0.25), 10.75);
    expect("HGET", jedis.hget("h:small", "name"), "prefixkv");
    expectError("HINCRBYFLOAT on a non-float", () -> jedis.hincrByFloat("h:small", "name", 1),
        "ERR hash value is not a float");
  }

  private void lists() {
    expect("RPUSH", jedis.rpush("l", "a", "b", "c"), 3L);
    expect("LPUSH", jedis.lpush("l", "z"), 4L);
    expect("LRANGE", jedis.lrange("l", 0, -1), List.of("z", "a", "b", "c"));
    expect("LPOP count", jedis.lpop("l", 2), List.of("z", "a"));
    expect("LPOP count on a missing key", jedis.lpop("l:missing", 2), null);
    expect("LMOVE", jedis.lmove("l", "l2", ListDirection.LEFT, ListDirection.RIGHT), "b");
    expect("LRANGE after LMOVE", jedis.lrange("l2", 0, -1), List.of("b"));
    expect("BLPOP with data", jedis.blpop(1.0, "l:empty", "l"), new KeyValue<>("l", "c"));
    long started = System.nanoTime();
    expect("BLPOP timing out", jedis.blpop(0.5, "l:empty"), null);
    long waitedMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
    expectWithin("BLPOP's wait in ms", waitedMillis, 450, 5_000);
  }

  private void sets() {
    expect("SADD", jedis.sadd("set:1", "a", "b", "c", "d"), 4L);
    expect("SADD existing", jedis.sadd("set:1", "a"), 0L);
    expect("SADD second", jedis.sadd("set:2", "c", "d", "e"), 3L);
    expectSet("SMEMBERS", jedis.smembers("set:1"), List.of("a", "b", "c", "d"));
    expectSet("SINTER", jedis.sinter("set:1", "set:2"), List.of("c", "d"));
    expect("SISMEMBER", jedis.sismember("set:2", "e"), true);

    List<String> want = new ArrayList<>();
    for (int i = 0; i < 50; i++) {
      want.add("m" + i);
    }
    jedis.sadd("set:big", want.toArray(new String[0]));
    List<String> found = new ArrayList<>();
    ScanParams params = new ScanParams().count(10);
    String cursor = ScanParams.SCAN_POINTER_START;
    for (int steps = 0; ; steps++) {
      ScanResult<String> step = jedis.sscan("set:big", cursor, params);
      found.addAll(step.getResult());
      cursor = step.getCursor();
      if (step.isCompleteIteration()) {
        break;
      }
      if (steps > 1000) {
        throw new Mismatch("SSCAN did not end after 1000 steps");
      }
    }
    expectSet("SSCAN collects every member once", found, want);
  }

  private static List<Tuple> tuples(Object... memberScorePairs) {
    List<Tuple> out = new ArrayList<>();
    for (int i = 0; i < memberScorePairs.length; i += 2) {
      out.add(new Tuple((String) memberScorePairs[i], (Double) memberScorePairs[i + 1]));
    }
    return out;
  }

  private void sortedSets() {
    Map<String, Double> members = new LinkedHashMap<>();
    members.put("a", 1.0);
    members.put("b", 2.0);
    members.put("c", 3.0);
    members.put("d", 4.0);
    expect("ZADD", jedis.zadd("z", members), 4L);
    expect("ZADD NX on a member", jedis.zadd("z", 10, "a", ZAddParams.zAddParams().nx()), 0L);
    expect("ZADD XX on a new member", jedis.zadd("z", 5, "e", ZAddParams.zAddParams().xx()), 0L);
    expect("ZSCORE of the member XX refused", jedis.zscore("z", "e"), null);
    Map<String, Double> raise = new LinkedHashMap<>();
    raise.put("a", 0.5);
    raise.put("b", 6.0);
    expect("ZADD GT CH", jedis.zadd("z", raise, ZAddParams.zAddParams().gt().ch()), 1L);
    expect("ZADD INCR", jedis.zaddIncr("z", 1.5, "c", ZAddParams.zAddParams()), 4.5);

    expect("ZRANGE BYSCORE", jedis.zrange("z", ZRangeParams.zrangeByScoreParams(1, 5)),
        List.of("a", "d", "c"));
    // With REV, ZRANGE takes the high bound first; Jedis passes the bounds as given.
    expect("ZRANGE BYSCORE REV LIMIT",
        jedis.zrange("z", ZRangeParams.zrangeByScoreParams(10, 1).rev().limit(0, 2)),
        List.of("b", "c"));
    expect("ZRANGE BYSCORE exclusive LIMIT",
        jedis.zrange("z", new ZRangeParams(Protocol.Keyword.BYSCORE, "(1", "+inf").limit(1, 2)),
        List.of("c", "b"));
    expect("ZREVRANGE", jedis.zrevrange("z", 0, 0), List.of("b"));
    expect("ZRANGE WITHSCORES", jedis.zrangeWithScores("z", 0, -1),
        tuples("a", 1.0, "d", 4.0, "c", 4.5, "b", 6.0));
    expect("ZRANK", jedis.zrank("z", "d"), 1L);
    expect("ZRANK of a non-member", jedis.zrank("z", "nobody"), null);
    expect("ZPOPMIN count", jedis.zpopmin("z", 2), tuples("a", 1.0, "d", 4.0));

    Map<String, Double> otherMembers = new LinkedHashMap<>();
    otherMembers.put("c", 1.0);
    otherMembers.put("x", 2.0);
    jedis.zadd("z:other", otherMembers);
    expect("ZUNIONSTORE WEIGHTS",
        jedis.zunionstore("z:union", new ZParams().weights(2, 1), "z", "z:other"), 3L);
    expect("ZUNIONSTORE result", jedis.zrangeWithScores("z:union", 0, -1),
        tuples("x", 2.0, "c", 10.0, "b", 12.0));
  }

  private void pipelines() {
    List<Response<Long>> incrs = new ArrayList<>();
    Response<Long> failing;
    Response<String> last;
    try (Pipeline pipe = jedis.pipelined()) {
      for (int i = 0; i < 50; i++) {
        pipe.set("p:" + i, Integer.toString(i));
        incrs.add(pipe.incr("p:" + i));
      }
      // An error in the middle of a pipeline fails that command only.
      failing = pipe.incr("s:a");
      last = pipe.get("p:49");
      pipe.sync();
    }
    for (int i = 0; i < incrs.size(); i++) {
      expect("pipelined INCR p:" + i, incrs.get(i).get(), (long) i + 1);
    }
    expectError("pipelined INCR on a string", failing::get,
        "ERR value is not an integer or out of range");
    expect("pipelined GET after the error", last.get(), "50");

    Transaction multi = jedis.multi();
    Response<Long> incr = multi.incr("tx:counter");
    Response<Long> expire = multi.expire("tx:counter", 3600);
    Response<String> get = multi.get("tx:counter");
    expect("EXEC replies", multi.exec().size(), 3);
    expect("MULTI/EXEC INCR", incr.get(), 1L);
    expect("MULTI/EXEC EXPIRE", expire.get(), 1L);
    expect("MULTI/EXEC GET", get.get(), "1");
  }

  /**
   * WATCH, read, MULTI, EXEC, retried while EXEC aborts; between the first attempt's read and its
   * EXEC the other connection writes the key, so that EXEC must abort and the retry see 100.
   */
  private void optimisticTransaction() {
    String key = "watched";
    jedis.set(key, "1");
    List<String> outcomes = new ArrayList<>();
    for (int attempt = 1; attempt <= 3; attempt++) {
      jedis.watch(key);
      long value = Long.parseLong(jedis.get(key));
      if (attempt == 1) {
        other.set(key, "100");
      }
      Transaction transaction = jedis.multi();
      transaction.set(key, Long.toString(value + 1));
      if (transaction.exec() == null) {
        outcomes.add("aborted");
        continue;
      }
      outcomes.add("committed");
      break;
    }
    expect("WATCH: the spoiled attempt aborts, the retry commits", outcomes,
        List.of("aborted", "committed"));
    expect("WATCH: the retry read the other connection's write", jedis.get(key), "101");
  }

  /** A subscriber on its own connection and thread, as Jedis's blocking subscribe wants. */
  private void pubSub() throws InterruptedException {
    List<String> events = Collections.synchronizedList(new ArrayList<>());
    CountDownLatch subscribed = new CountDownLatch(1);
    CountDownLatch patternSubscribed = new CountDownLatch(1);
    CountDownLatch received = new CountDownLatch(2);
    JedisPubSub listener = new JedisPubSub() {
      @Override
      public void onSubscribe(String channel, int count) {
        events.add("subscribe " + channel + " " + count);
        subscribed.countDown();
      }

      @Override
      public void onPSubscribe(String pattern, int count) {
        events.add("psubscribe " + pattern + " " + count);
        patternSubscribed.countDown();
      }

      @Override
      public void onMessage(String channel, String message) {
        events.add("message |" + channel + "|" + message);
        received.countDown();
      }

      @Override
      public void onPMessage(String pattern, String channel, String message) {
        events.add("message " + pattern + "|" + channel + "|" + message);
        received.countDown();
      }
    };
    List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
    Thread thread = new Thread(() -> {
      try (Jedis subscriber = new Jedis(address, config)) {
        subscriber.subscribe(listener, "news");
      } catch (Throwable failure) {
        failures.add(failure);
        subscribed.countDown();
      }
    });
    thread.start();
    await("SUBSCRIBE confirmed", subscribed);
    listener.psubscribe("ne*");
    await("PSUBSCRIBE confirmed", patternSubscribed);
    expect("PUBLISH receivers", other.publish("news", "hello"), 2L);
    await("both messages received", received);
    listener.unsubscribe();
    listener.punsubscribe();
    thread.join(5_000);
    expect("subscriber thread failures", failures, List.of());
    expect("subscriber thread ended after unsubscribing", thread.isAlive(), false);
    List<String> got;
    synchronized (events) {
      got = new ArrayList<>(events);
    }
    expect("Pub/Sub events (2 confirmations, 2 messages)", got.size(), 4);
    expect("subscription confirmations", got.subList(0, 2),
        List.of("subscribe news 1", "psubscribe ne* 2"));
    expectSet("messages of the channel and the pattern", got.subList(2, 4),
        List.of("message |news|hello", "message ne*|news|hello"));
  }

  private static void await(String what, CountDownLatch latch) throws InterruptedException {
    if (!latch.await(5, TimeUnit.SECONDS)) {
      throw new Mismatch(what + ": not within 5 s");
    }
  }

  private void run() throws InterruptedException {
    expect("FLUSHDB", jedis.flushDB(), "OK");
    strings();
    keys();
    hashes();
    lists();
    sets();
    sortedSets();
    pipelines();
    optimisticTransaction();
    pubSub();
  }

  /** Entry point: {@code <port> <protocol 2|3>}. */
  public static void main(String[] args) throws InterruptedException {
    if (args.length != 2 || !(args[1].equals("2") || args[1].equals("3"))) {
      System.err.println("usage: JedisCheck <port> <protocol 2|3>");
      System.exit(2);
    }
    int protocol = Integer.parseInt(args[1]);
    JedisCheck check = new JedisCheck(new HostAndPort("127.0.0.1", Integer.parseInt(args[0])),
        protocol);
    try {
      check.run();
    } catch (Mismatch mismatch) {
      System.err.println("Jedis check (RESP" + protocol + ") failed: " + mismatch.getMessage());
      System.exit(1);
    } catch (RuntimeException unexpected) {
      // A reply Jedis could not take (or an error reply where none belongs): also a failure.
      System.err.println("Jedis check (RESP" + protocol + ") failed after " + check.checks
          + " checks: unexpected " + unexpected);
      unexpected.printStackTrace();
      System.exit(1);
    } finally {
      check.jedis.close();
      check.other.close();
    }
    System.out.println("ok " + check.checks + " checks (Jedis, RESP" + protocol + ")");
  }
}
