// Command go-redis-check runs go-redis v9, unchanged, against a Redis-compatible server and
// checks every reply: `go-redis-check <port> <protocol 2|3>`.
//
// Run by crates/server/tests/go_redis.rs against prefixkv-server and against a real
// redis-server, so every expectation below is also checked against Redis itself. It covers
// strings (SET options, INCR, MSET/MGET, EXPIRE/TTL), keys (DEL, EXISTS, TYPE, SCAN, RENAME),
// hashes (large enough to leave the small encoding), lists (BLPOP served and timed out), sets,
// sorted sets (ZADD options, ZRANGE BYSCORE/REV/LIMIT), error lines, Pipeline, TxPipeline, an
// optimistic transaction whose first attempt another client spoils, and Pub/Sub.
//
// It flushes the selected database first: give it a server of its own. The first mismatch
// prints what was expected and what came back, and exits 1; success prints `ok <n> checks`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// checker holds the clients and counts the checks that passed.
type checker struct {
	ctx      context.Context
	rdb      *redis.Client
	other    *redis.Client // a second client: the "someone else" of WATCH and PUBLISH
	protocol int
	checks   int
}

// fail reports the first mismatch and ends the program: later checks would only repeat it.
func (c *checker) fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-redis check (RESP%d) failed: %s\n", c.protocol, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// noErr fails on an unexpected error.
func (c *checker) noErr(what string, err error) {
	if err != nil {
		c.fail("%s: unexpected error %q", what, err)
	}
}

// expect compares one reply with what Redis answers.
func expect[T comparable](c *checker, what string, got T, err error, want T) {
	c.noErr(what, err)
	if got != want {
		c.fail("%s: got %#v, want %#v", what, got, want)
	}
	c.checks++
}

// expectList compares a list reply in order.
func expectList[T comparable](c *checker, what string, got []T, err error, want []T) {
	c.noErr(what, err)
	if !slices.Equal(got, want) {
		c.fail("%s: got %#v, want %#v", what, got, want)
	}
	c.checks++
}

// expectSet compares a reply whose order Redis leaves to its hash tables.
func expectSet(c *checker, what string, got []string, err error, want []string) {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	expectList(c, what, got, err, want)
}

// expectNil checks a null reply (go-redis reports it as redis.Nil).
func expectNil(c *checker, what string, err error) {
	if !errors.Is(err, redis.Nil) {
		c.fail("%s: got error %v, want a null reply", what, err)
	}
	c.checks++
}

// expectError checks an error reply's whole line.
func expectError(c *checker, what string, err error, want string) {
	if err == nil || err.Error() != want {
		c.fail("%s: got error %v, want %q", what, err, want)
	}
	c.checks++
}

func (c *checker) strings() {
	ctx, r := c.ctx, c.rdb
	set := r.Set(ctx, "s:a", "hello", 0)
	expect(c, "SET", set.Val(), set.Err(), "OK")
	get := r.Get(ctx, "s:a")
	expect(c, "GET", get.Val(), get.Err(), "hello")
	expectNil(c, "GET missing", r.Get(ctx, "s:missing").Err())
	nx := r.SetNX(ctx, "s:a", "other", 0)
	expect(c, "SET NX on an existing key", nx.Val(), nx.Err(), false)
	xx := r.SetXX(ctx, "s:a", "world", 0)
	expect(c, "SET XX on an existing key", xx.Val(), xx.Err(), true)
	old := r.SetArgs(ctx, "s:a", "again", redis.SetArgs{Get: true})
	expect(c, "SET GET", old.Val(), old.Err(), "world")
	expectNil(c, "SET NX refused", r.SetArgs(ctx, "s:a", "x", redis.SetArgs{Mode: "NX"}).Err())
	ex := r.SetArgs(ctx, "s:b", "v", redis.SetArgs{Mode: "NX", TTL: 100 * time.Second})
	expect(c, "SET NX EX", ex.Val(), ex.Err(), "OK")
	keep := r.SetArgs(ctx, "s:b", "w", redis.SetArgs{KeepTTL: true})
	expect(c, "SET KEEPTTL", keep.Val(), keep.Err(), "OK")
	c.ttlWithin("TTL kept by KEEPTTL", "s:b", 90*time.Second, 100*time.Second)
	expiring := r.Set(ctx, "s:e", "v", 10*time.Second)
	expect(c, "SET with expiration", expiring.Val(), expiring.Err(), "OK")
	c.ttlWithin("TTL of SET EX", "s:e", 9*time.Second, 10*time.Second)

	incr := r.Incr(ctx, "s:n")
	expect(c, "INCR", incr.Val(), incr.Err(), int64(1))
	by := r.IncrBy(ctx, "s:n", 41)
	expect(c, "INCRBY", by.Val(), by.Err(), int64(42))
	decr := r.Decr(ctx, "s:n")
	expect(c, "DECR", decr.Val(), decr.Err(), int64(41))
	float := r.IncrByFloat(ctx, "s:f", 2.5)
	expect(c, "INCRBYFLOAT", float.Val(), float.Err(), 2.5)
	expectError(c, "INCR on a string", r.Incr(ctx, "s:a").Err(),
		"ERR value is not an integer or out of range")

	mset := r.MSet(ctx, "m:1", "a", "m:2", "b")
	expect(c, "MSET", mset.Val(), mset.Err(), "OK")
	mget := r.MGet(ctx, "m:1", "m:2", "m:missing")
	expectList(c, "MGET", mget.Val(), mget.Err(), []any{"a", "b", nil})

	expire := r.Expire(ctx, "s:a", 100*time.Second)
	expect(c, "EXPIRE", expire.Val(), expire.Err(), true)
	c.ttlWithin("TTL after EXPIRE", "s:a", 99*time.Second, 100*time.Second)
	missing := r.Expire(ctx, "s:missing", time.Second)
	expect(c, "EXPIRE missing", missing.Val(), missing.Err(), false)
	// go-redis reports TTL's -1 and -2 as those many nanoseconds.
	none := r.TTL(ctx, "m:1")
	expect(c, "TTL without expiry", none.Val(), none.Err(), time.Duration(-1))
	gone := r.TTL(ctx, "s:missing")
	expect(c, "TTL missing", gone.Val(), gone.Err(), time.Duration(-2))
}

// ttlWithin checks a TTL that passing time may have lowered a little.
func (c *checker) ttlWithin(what, key string, low, high time.Duration) {
	ttl, err := c.rdb.TTL(c.ctx, key).Result()
	c.noErr(what, err)
	if ttl < low || ttl > high {
		c.fail("%s: got %v, want within [%v, %v]", what, ttl, low, high)
	}
	c.checks++
}

func (c *checker) keys() {
	ctx, r := c.ctx, c.rdb
	del := r.Del(ctx, "s:n", "s:f", "s:missing")
	expect(c, "DEL", del.Val(), del.Err(), int64(2))
	exists := r.Exists(ctx, "m:1", "m:2", "m:missing")
	expect(c, "EXISTS", exists.Val(), exists.Err(), int64(2))
	kind := r.Type(ctx, "m:1")
	expect(c, "TYPE string", kind.Val(), kind.Err(), "string")
	absent := r.Type(ctx, "m:missing")
	expect(c, "TYPE missing", absent.Val(), absent.Err(), "none")
	rename := r.Rename(ctx, "m:1", "m:renamed")
	expect(c, "RENAME", rename.Val(), rename.Err(), "OK")
	renamed := r.Get(ctx, "m:renamed")
	expect(c, "GET renamed", renamed.Val(), renamed.Err(), "a")
	expectError(c, "RENAME missing", r.Rename(ctx, "m:1", "m:x").Err(), "ERR no such key")
	expectError(c, "LPUSH on a string", r.LPush(ctx, "m:2", "x").Err(),
		"WRONGTYPE Operation against a key holding the wrong kind of value")
	expectError(c, "SET with a bad option", r.Do(ctx, "SET", "k", "v", "BADOPT").Err(),
		"ERR syntax error")
	expectError(c, "unknown command", r.Do(ctx, "NOSUCHCMD", "a", "b").Err(),
		"ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b' ")

	var want []string
	for i := range 25 {
		key := fmt.Sprintf("scan:%02d", i)
		want = append(want, key)
		c.noErr("SET for SCAN", r.Set(ctx, key, i, 0).Err())
	}
	var found []string
	var cursor uint64
	for steps := 0; ; steps++ {
		keys, next, err := r.Scan(ctx, cursor, "scan:*", 10).Result()
		c.noErr("SCAN", err)
		found = append(found, keys...)
		if cursor = next; cursor == 0 {
			break
		}
		if steps > 1000 {
			c.fail("SCAN did not end after 1000 steps")
		}
	}
	expectSet(c, "SCAN MATCH collects every key once", found, nil, want)
}

func (c *checker) hashes() {
	ctx, r := c.ctx, c.rdb
	// 600 fields: past hash-max-listpack-entries (512, the default), so the large form is exercised too.
	fields := map[string]any{}
	want := map[string]string{}
	for i := range 600 {
		field, value := fmt.Sprintf("f%03d", i), fmt.Sprintf("v%d", i)
		fields[field], want[field] = value, value
	}
	added := r.HSet(ctx, "h:big", fields)
	expect(c, "HSET 600 fields", added.Val(), added.Err(), int64(600))
	length := r.HLen(ctx, "h:big")
	expect(c, "HLEN", length.Val(), length.Err(), int64(600))
	encoding := r.ObjectEncoding(ctx, "h:big")
	expect(c, "OBJECT ENCODING of a 600-field hash", encoding.Val(), encoding.Err(), "hashtable")
	all, err := r.HGetAll(ctx, "h:big").Result()
	c.noErr("HGETALL", err)
	if len(all) != len(want) {
		c.fail("HGETALL: %d fields, want %d", len(all), len(want))
	}
	for field, value := range want {
		if all[field] != value {
			c.fail("HGETALL %s: got %q, want %q", field, all[field], value)
		}
	}
	c.checks++

	seen := map[string]string{}
	var cursor uint64
	for steps := 0; ; steps++ {
		pairs, next, err := r.HScan(ctx, "h:big", cursor, "f1*", 20).Result()
		c.noErr("HSCAN", err)
		for i := 0; i+1 < len(pairs); i += 2 {
			seen[pairs[i]] = pairs[i+1]
		}
		if cursor = next; cursor == 0 {
			break
		}
		if steps > 1000 {
			c.fail("HSCAN did not end after 1000 steps")
		}
	}
	if len(seen) != 100 || seen["f150"] != "v150" {
		c.fail("HSCAN MATCH f1*: %d fields (f150 = %q), want 100 (f150 = \"v150\")", len(seen), seen["f150"])
	}
	c.checks++

	small := r.HSet(ctx, "h:small", "name", "prefixkv", "price", "10.5")
	expect(c, "HSET pairs", small.Val(), small.Err(), int64(2))
	price := r.HIncrByFloat(ctx, "h:small", "price", 0.25)
	expect(c, "HINCRBYFLOAT", price.Val(), price.Err(), 10.75)
	name := r.HGet(ctx, "h:small", "name")
	expect(c, "HGET", name.Val(), name.Err(), "prefixkv")
	expectError(c, "HINCRBYFLOAT on a non-float", r.HIncrByFloat(ctx, "h:small", "name", 1).Err(),
		"ERR hash value is not a float")
}

func (c *checker) lists() {
	ctx, r := c.ctx, c.rdb
	pushed := r.RPush(ctx, "l", "a", "b", "c")
	expect(c, "RPUSH", pushed.Val(), pushed.Err(), int64(3))
	front := r.LPush(ctx, "l", "z")
	expect(c, "LPUSH", front.Val(), front.Err(), int64(4))
	all := r.LRange(ctx, "l", 0, -1)
	expectList(c, "LRANGE", all.Val(), all.Err(), []string{"z", "a", "b", "c"})
	popped := r.LPopCount(ctx, "l", 2)
	expectList(c, "LPOP count", popped.Val(), popped.Err(), []string{"z", "a"})
	expectNil(c, "LPOP count on a missing key", r.LPopCount(ctx, "l:missing", 2).Err())
	moved := r.LMove(ctx, "l", "l2", "LEFT", "RIGHT")
	expect(c, "LMOVE", moved.Val(), moved.Err(), "b")
	target := r.LRange(ctx, "l2", 0, -1)
	expectList(c, "LRANGE after LMOVE", target.Val(), target.Err(), []string{"b"})
	served := r.BLPop(ctx, time.Second, "l:empty", "l")
	expectList(c, "BLPOP with data", served.Val(), served.Err(), []string{"l", "c"})
	started := time.Now()
	expectNil(c, "BLPOP timing out", r.BLPop(ctx, time.Second, "l:empty").Err())
	if waited := time.Since(started); waited < 900*time.Millisecond {
		c.fail("BLPOP timing out: answered after %v, want about 1 s", waited)
	}
	c.checks++
}

func (c *checker) sets() {
	ctx, r := c.ctx, c.rdb
	added := r.SAdd(ctx, "set:1", "a", "b", "c", "d")
	expect(c, "SADD", added.Val(), added.Err(), int64(4))
	again := r.SAdd(ctx, "set:1", "a")
	expect(c, "SADD existing", again.Val(), again.Err(), int64(0))
	other := r.SAdd(ctx, "set:2", "c", "d", "e")
	expect(c, "SADD second", other.Val(), other.Err(), int64(3))
	members := r.SMembers(ctx, "set:1")
	expectSet(c, "SMEMBERS", members.Val(), members.Err(), []string{"a", "b", "c", "d"})
	inter := r.SInter(ctx, "set:1", "set:2")
	expectSet(c, "SINTER", inter.Val(), inter.Err(), []string{"c", "d"})
	is := r.SIsMember(ctx, "set:2", "e")
	expect(c, "SISMEMBER", is.Val(), is.Err(), true)

	var want []string
	for i := range 50 {
		want = append(want, "m"+strconv.Itoa(i))
	}
	c.noErr("SADD 50", r.SAdd(ctx, "set:big", want).Err())
	var found []string
	var cursor uint64
	for steps := 0; ; steps++ {
		members, next, err := r.SScan(ctx, "set:big", cursor, "", 10).Result()
		c.noErr("SSCAN", err)
		found = append(found, members...)
		if cursor = next; cursor == 0 {
			break
		}
		if steps > 1000 {
			c.fail("SSCAN did not end after 1000 steps")
		}
	}
	expectSet(c, "SSCAN collects every member once", found, nil, want)
}

func (c *checker) sortedSets() {
	ctx, r := c.ctx, c.rdb
	z := []redis.Z{{Score: 1, Member: "a"}, {Score: 2, Member: "b"}, {Score: 3, Member: "c"}, {Score: 4, Member: "d"}}
	added := r.ZAdd(ctx, "z", z...)
	expect(c, "ZADD", added.Val(), added.Err(), int64(4))
	nx := r.ZAddNX(ctx, "z", redis.Z{Score: 10, Member: "a"})
	expect(c, "ZADD NX on a member", nx.Val(), nx.Err(), int64(0))
	xx := r.ZAddXX(ctx, "z", redis.Z{Score: 5, Member: "e"})
	expect(c, "ZADD XX on a new member", xx.Val(), xx.Err(), int64(0))
	expectNil(c, "ZSCORE of the member XX refused", r.ZScore(ctx, "z", "e").Err())
	gt := r.ZAddArgs(ctx, "z", redis.ZAddArgs{GT: true, Ch: true, Members: []redis.Z{
		{Score: 0.5, Member: "a"}, {Score: 6, Member: "b"},
	}})
	expect(c, "ZADD GT CH", gt.Val(), gt.Err(), int64(1))
	incr := r.ZAddArgsIncr(ctx, "z", redis.ZAddArgs{Members: []redis.Z{{Score: 1.5, Member: "c"}}})
	expect(c, "ZADD INCR", incr.Val(), incr.Err(), 4.5)

	byScore := r.ZRangeArgs(ctx, redis.ZRangeArgs{Key: "z", Start: 1, Stop: 5, ByScore: true})
	expectList(c, "ZRANGE BYSCORE", byScore.Val(), byScore.Err(), []string{"a", "d", "c"})
	// go-redis v9.23 sends Start and Stop as given: with Rev, Start is the high bound.
	rev := r.ZRangeArgs(ctx, redis.ZRangeArgs{Key: "z", Start: 10, Stop: 1, ByScore: true, Rev: true, Count: 2})
	expectList(c, "ZRANGE BYSCORE REV LIMIT", rev.Val(), rev.Err(), []string{"b", "c"})
	limited := r.ZRangeByScore(ctx, "z", &redis.ZRangeBy{Min: "(1", Max: "+inf", Offset: 1, Count: 2})
	expectList(c, "ZRANGEBYSCORE LIMIT", limited.Val(), limited.Err(), []string{"c", "b"})
	top := r.ZRevRange(ctx, "z", 0, 0)
	expectList(c, "ZREVRANGE", top.Val(), top.Err(), []string{"b"})
	scored := r.ZRangeWithScores(ctx, "z", 0, -1)
	expectList(c, "ZRANGE WITHSCORES", scored.Val(), scored.Err(), []redis.Z{
		{Score: 1, Member: "a"}, {Score: 4, Member: "d"}, {Score: 4.5, Member: "c"}, {Score: 6, Member: "b"},
	})
	rank := r.ZRank(ctx, "z", "d")
	expect(c, "ZRANK", rank.Val(), rank.Err(), int64(1))
	expectNil(c, "ZRANK of a non-member", r.ZRank(ctx, "z", "nobody").Err())
	popped := r.ZPopMin(ctx, "z", 2)
	expectList(c, "ZPOPMIN count", popped.Val(), popped.Err(), []redis.Z{
		{Score: 1, Member: "a"}, {Score: 4, Member: "d"},
	})

	c.noErr("ZADD other", r.ZAdd(ctx, "z:other", redis.Z{Score: 1, Member: "c"}, redis.Z{Score: 2, Member: "x"}).Err())
	union := r.ZUnionStore(ctx, "z:union", &redis.ZStore{Keys: []string{"z", "z:other"}, Weights: []float64{2, 1}})
	expect(c, "ZUNIONSTORE WEIGHTS", union.Val(), union.Err(), int64(3))
	stored := r.ZRangeWithScores(ctx, "z:union", 0, -1)
	expectList(c, "ZUNIONSTORE result", stored.Val(), stored.Err(), []redis.Z{
		{Score: 2, Member: "x"}, {Score: 10, Member: "c"}, {Score: 12, Member: "b"},
	})
}

func (c *checker) pipelines() {
	ctx, r := c.ctx, c.rdb
	var incrs []*redis.IntCmd
	var failing *redis.IntCmd
	cmds, err := r.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range 50 {
			pipe.Set(ctx, fmt.Sprintf("p:%d", i), i, 0)
			incrs = append(incrs, pipe.Incr(ctx, fmt.Sprintf("p:%d", i)))
		}
		// An error in the middle of a pipeline fails that command only.
		failing = pipe.Incr(ctx, "s:a")
		pipe.Get(ctx, "p:49")
		return nil
	})
	expectError(c, "Pipelined reports the first error", err, "ERR value is not an integer or out of range")
	if len(cmds) != 102 {
		c.fail("Pipelined: %d replies, want 102", len(cmds))
	}
	for i, incr := range incrs {
		expect(c, fmt.Sprintf("pipelined INCR p:%d", i), incr.Val(), incr.Err(), int64(i+1))
	}
	expectError(c, "pipelined INCR on a string", failing.Err(), "ERR value is not an integer or out of range")
	last := cmds[101].(*redis.StringCmd)
	expect(c, "pipelined GET after the error", last.Val(), last.Err(), "50")

	var incr *redis.IntCmd
	var expire *redis.BoolCmd
	var get *redis.StringCmd
	_, err = r.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		incr = pipe.Incr(ctx, "tx:counter")
		expire = pipe.Expire(ctx, "tx:counter", time.Hour)
		get = pipe.Get(ctx, "tx:counter")
		return nil
	})
	c.noErr("TxPipelined", err)
	expect(c, "MULTI/EXEC INCR", incr.Val(), incr.Err(), int64(1))
	expect(c, "MULTI/EXEC EXPIRE", expire.Val(), expire.Err(), true)
	expect(c, "MULTI/EXEC GET", get.Val(), get.Err(), "1")
}

// optimisticTransaction runs go-redis's WATCH retry loop; between the first attempt's read and
// its EXEC the other client writes the key, so that EXEC must abort and the retry see 100.
func (c *checker) optimisticTransaction() {
	ctx, key := c.ctx, "watched"
	c.noErr("SET watched", c.rdb.Set(ctx, key, 1, 0).Err())
	attempts := 0
	increment := func(tx *redis.Tx) error {
		attempts++
		n, err := tx.Get(ctx, key).Int()
		if err != nil {
			return err
		}
		if attempts == 1 {
			if err := c.other.Set(ctx, key, 100, 0).Err(); err != nil {
				return err
			}
		}
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, key, n+1, 0)
			return nil
		})
		return err
	}
	var results []string
	for range 3 {
		err := c.rdb.Watch(ctx, increment, key)
		if err == nil {
			results = append(results, "committed")
			break
		}
		if !errors.Is(err, redis.TxFailedErr) {
			c.fail("WATCH transaction: %v", err)
		}
		results = append(results, "aborted")
	}
	expectList(c, "WATCH: the spoiled attempt aborts, the retry commits", results, nil,
		[]string{"aborted", "committed"})
	value := c.rdb.Get(ctx, key)
	expect(c, "WATCH: the retry read the other client's write", value.Val(), value.Err(), "101")
}

func (c *checker) pubSub() {
	ctx := c.ctx
	sub := c.rdb.Subscribe(ctx, "news")
	defer sub.Close()
	confirmation, err := sub.Receive(ctx)
	c.noErr("SUBSCRIBE", err)
	subscribed, isSubscription := confirmation.(*redis.Subscription)
	if !isSubscription || subscribed.Kind != "subscribe" || subscribed.Channel != "news" || subscribed.Count != 1 {
		c.fail("SUBSCRIBE: got %#v, want subscribe news 1", confirmation)
	}
	c.checks++
	c.noErr("PSUBSCRIBE", sub.PSubscribe(ctx, "ne*"))
	// Its confirmation, read before publishing, so the publish reaches both subscriptions.
	confirmation, err = sub.Receive(ctx)
	c.noErr("PSUBSCRIBE confirmation", err)
	subscribed, isSubscription = confirmation.(*redis.Subscription)
	if !isSubscription || subscribed.Kind != "psubscribe" || subscribed.Channel != "ne*" || subscribed.Count != 2 {
		c.fail("PSUBSCRIBE: got %#v, want psubscribe ne* 2", confirmation)
	}
	c.checks++
	received := c.other.Publish(ctx, "news", "hello")
	expect(c, "PUBLISH receivers", received.Val(), received.Err(), int64(2))
	var got []string
	for range 2 {
		wait, cancel := context.WithTimeout(ctx, 5*time.Second)
		message, err := sub.ReceiveMessage(wait)
		cancel()
		c.noErr("receive the published message", err)
		got = append(got, fmt.Sprintf("%s|%s|%s", message.Pattern, message.Channel, message.Payload))
	}
	expectSet(c, "messages of the channel and the pattern", got, nil,
		[]string{"|news|hello", "ne*|news|hello"})
}

// hello checks that the connection speaks the protocol asked for: HELLO without arguments
// answers the current one (an array of pairs in RESP2, a map in RESP3).
func (c *checker) hello() {
	reply, err := c.rdb.Do(c.ctx, "HELLO").Result()
	c.noErr("HELLO", err)
	var proto any
	switch fields := reply.(type) {
	case map[any]any:
		proto = fields["proto"]
	case []any:
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "proto" {
				proto = fields[i+1]
			}
		}
	}
	expect(c, "HELLO proto", proto, nil, any(int64(c.protocol)))
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go-redis-check <port> <protocol 2|3>")
		os.Exit(2)
	}
	protocol, err := strconv.Atoi(os.Args[2])
	if err != nil || (protocol != 2 && protocol != 3) {
		fmt.Fprintf(os.Stderr, "protocol must be 2 or 3, not %q\n", os.Args[2])
		os.Exit(2)
	}
	options := func() *redis.Options {
		return &redis.Options{Addr: "127.0.0.1:" + os.Args[1], Protocol: protocol}
	}
	c := &checker{
		ctx:      context.Background(),
		rdb:      redis.NewClient(options()),
		other:    redis.NewClient(options()),
		protocol: protocol,
	}
	defer c.rdb.Close()
	defer c.other.Close()
	c.noErr("FLUSHDB", c.rdb.FlushDB(c.ctx).Err())
	c.hello()
	c.strings()
	c.keys()
	c.hashes()
	c.lists()
	c.sets()
	c.sortedSets()
	c.pipelines()
	c.optimisticTransaction()
	c.pubSub()
	fmt.Printf("ok %d checks (go-redis, RESP%d)\n", c.checks, protocol)
}
