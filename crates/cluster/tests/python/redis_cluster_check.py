"""redis-py's RedisCluster against a local prefixkv cluster (argument: one worker's port).

The client discovers the workers with CLUSTER SLOTS and the key positions with COMMAND, as it
does against a Redis Cluster, then routes by hash slot. RESP2 (protocol=2): plain RESP
connections on a worker speak RESP2 only (HELLO 3 is answered -NOPROTO).
Prints "ok <summary>" on success; any failure raises.
"""

import sys
import time

import redis
from redis.cluster import RedisCluster


def main():
    port = int(sys.argv[1])
    rc = RedisCluster(host="127.0.0.1", port=port, protocol=2, socket_timeout=30)
    primaries = rc.get_primaries()
    assert len(primaries) == 3, primaries

    keys = [f"key:{i}" for i in range(300)]
    for key in keys:
        assert rc.set(key, f"v-{key}") is True, key
    for key in keys:
        assert rc.get(key) == f"v-{key}".encode(), key
    owners = {rc.get_node_from_key(key).name for key in keys}
    assert len(owners) == 3, owners

    # Client-side and server-side slots agree with Redis Cluster's.
    assert rc.keyslot("foo") == 12182
    assert rc.cluster_keyslot("foo") == 12182
    assert rc.keyslot("{user1000}.following") == rc.keyslot("user1000")

    # Multi-key commands within one slot (hash tags) run; across slots the worker refuses.
    assert rc.mset({"{user1000}.a": "1", "{user1000}.b": "2"}) is True
    assert rc.mget("{user1000}.a", "{user1000}.b") == [b"1", b"2"]
    assert rc.delete("{user1000}.a", "{user1000}.b") == 2
    node = rc.get_node_from_key("foo")
    try:
        rc.execute_command("MGET", "foo", "bar", target_nodes=node)
        raise AssertionError("MGET across slots ran")
    except redis.exceptions.ClusterCrossSlotError:
        pass  # redis-py maps -CROSSSLOT to this class, as from Redis Cluster

    # A key sent straight to a worker that does not own it: -MOVED naming the owner.
    wrong = next(p for p in primaries if p.name != node.name)
    wrong.redis_connection.execute_command("PING")
    try:
        wrong.redis_connection.execute_command("GET", "foo")
        raise AssertionError("a foreign key ran")
    except redis.exceptions.MovedError as error:
        assert (int(error.slot_id), int(error.port)) == (12182, node.port), error

    info = rc.cluster_info(target_nodes=node)
    assert info["cluster_state"] == "ok", info

    # Each worker's connection is a DPR session: its commands become committed.
    committed = 0
    for primary in primaries:
        deadline = time.time() + 60
        while True:
            reply = primary.redis_connection.execute_command("PREFIXKV.COMMITPOINT")
            fields = dict(zip(reply[0::2], reply[1::2]))
            if fields[b"all_committed"] == 1:
                committed += fields[b"until_sequence"]
                break
            assert time.time() < deadline, fields
            time.sleep(0.02)

    print(f"ok redis-py {redis.__version__}: {len(keys)} keys over {len(owners)} workers, "
          f"{committed} commands committed")


if __name__ == "__main__":
    main()
