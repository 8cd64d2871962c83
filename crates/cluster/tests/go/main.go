// go-redis's ClusterClient against a local prefixkv cluster (argument: one worker's address).
//
// The client discovers the workers with CLUSTER SLOTS and routes by hash slot, as against a
// Redis Cluster. Default options: go-redis first sends HELLO 3, which a worker answers -NOPROTO,
// and continues in RESP2. Prints "ok <summary>" on success; exits 1 with a reason otherwise.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{os.Args[1]}})
	defer client.Close()

	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("go:%d", i)
		if err := client.Set(ctx, keys[i], "v-"+keys[i], 0).Err(); err != nil {
			fail("SET %s: %v", keys[i], err)
		}
	}
	owners := map[string]bool{}
	for _, key := range keys {
		value, err := client.Get(ctx, key).Result()
		if err != nil || value != "v-"+key {
			fail("GET %s: %q %v", key, value, err)
		}
		node, err := client.MasterForKey(ctx, key)
		if err != nil {
			fail("MasterForKey %s: %v", key, err)
		}
		owners[node.Options().Addr] = true
	}
	if len(owners) != 3 {
		fail("keys reached %d workers: %v", len(owners), owners)
	}
	slots, err := client.ClusterSlots(ctx).Result()
	if err != nil || len(slots) != 3 {
		fail("CLUSTER SLOTS: %v %v", slots, err)
	}
	if slot, err := client.ClusterKeySlot(ctx, "foo").Result(); err != nil || slot != 12182 {
		fail("CLUSTER KEYSLOT foo: %d %v", slot, err)
	}
	if err := client.MSet(ctx, "{user1000}.a", "1", "{user1000}.b", "2").Err(); err != nil {
		fail("MSET with a hash tag: %v", err)
	}
	values, err := client.MGet(ctx, "{user1000}.a", "{user1000}.b").Result()
	if err != nil || values[0] != "1" || values[1] != "2" {
		fail("MGET with a hash tag: %v %v", values, err)
	}
	if err := client.MGet(ctx, "foo", "bar").Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
		fail("MGET across slots: %v", err)
	}
	fmt.Printf("ok go-redis: %d keys over %d workers\n", len(keys), len(owners))
}
