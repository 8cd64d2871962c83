//! The command table: names, arity and flags as `COMMAND INFO` reports them, used for
//! dispatch checks (arity, write refusal under maxmemory, NOAUTH exemptions).

/// One command's static description.
pub struct Spec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: positive = exact argument count (name included), negative = at least.
    pub arity: i64,
    /// Writes data (refused under maxmemory).
    pub write: bool,
    /// First key position (0 = none).
    pub first_key: i64,
    /// Last key position (-1 = last argument).
    pub last_key: i64,
    /// Step between keys.
    pub step: i64,
    /// Command group for COMMAND DOCS.
    pub group: &'static str,
    /// One-line summary for COMMAND DOCS.
    pub summary: &'static str,
}

const fn c(
    name: &'static str,
    arity: i64,
    write: bool,
    keys: (i64, i64, i64),
    group: &'static str,
    summary: &'static str,
) -> Spec {
    Spec {
        name,
        arity,
        write,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        group,
        summary,
    }
}

const NONE: (i64, i64, i64) = (0, 0, 0);
const ONE: (i64, i64, i64) = (1, 1, 1);
const ALL: (i64, i64, i64) = (1, -1, 1);
const PAIRS: (i64, i64, i64) = (1, -1, 2);
const TWO: (i64, i64, i64) = (1, 2, 1);

/// Every supported command.
pub static COMMANDS: &[Spec] = &[
    c("ping", -1, false, NONE, "connection", "Returns the server's liveliness response."),
    c("echo", 2, false, NONE, "connection", "Returns the given string."),
    c("hello", -1, false, NONE, "connection", "Handshakes with the server."),
    c("auth", -2, false, NONE, "connection", "Authenticates the connection."),
    c("select", 2, false, NONE, "connection", "Changes the selected database."),
    c("quit", -1, false, NONE, "connection", "Closes the connection."),
    c("reset", 1, false, NONE, "connection", "Resets the connection."),
    c("client", -2, false, NONE, "connection", "A container for client connection commands."),
    c("set", -3, true, ONE, "string", "Sets the string value of a key."),
    c("get", 2, false, ONE, "string", "Returns the string value of a key."),
    c("getset", 3, true, ONE, "string", "Returns the previous string value of a key after setting it to a new value."),
    c("getdel", 2, true, ONE, "string", "Returns the string value of a key after deleting the key."),
    c("getex", -2, true, ONE, "string", "Returns the string value of a key after setting its expiration time."),
    c("setnx", 3, true, ONE, "string", "Set the string value of a key only when the key doesn't exist."),
    c("setex", 4, true, ONE, "string", "Sets the string value and expiration time of a key."),
    c("psetex", 4, true, ONE, "string", "Sets both string value and expiration time in milliseconds of a key."),
    c("mset", -3, true, PAIRS, "string", "Atomically creates or modifies the string values of one or more keys."),
    c("msetnx", -3, true, PAIRS, "string", "Atomically modifies the string values of one or more keys only when all keys don't exist."),
    c("mget", -2, false, ALL, "string", "Atomically returns the string values of one or more keys."),
    c("incr", 2, true, ONE, "string", "Increments the integer value of a key by one."),
    c("decr", 2, true, ONE, "string", "Decrements the integer value of a key by one."),
    c("incrby", 3, true, ONE, "string", "Increments the integer value of a key by a number."),
    c("decrby", 3, true, ONE, "string", "Decrements a number from the integer value of a key."),
    c("incrbyfloat", 3, true, ONE, "string", "Increment the floating point value of a key by a number."),
    c("append", 3, true, ONE, "string", "Appends a string to the value of a key."),
    c("strlen", 2, false, ONE, "string", "Returns the length of a string value."),
    c("setrange", 4, true, ONE, "string", "Overwrites a part of a string value with another by an offset."),
    c("getrange", 4, false, ONE, "string", "Returns a substring of the string stored at a key."),
    c("del", -2, true, ALL, "generic", "Deletes one or more keys."),
    c("unlink", -2, true, ALL, "generic", "Asynchronously deletes one or more keys."),
    c("exists", -2, false, ALL, "generic", "Determines whether one or more keys exist."),
    c("type", 2, false, ONE, "generic", "Determines the type of value stored at a key."),
    c("touch", -2, false, ALL, "generic", "Returns the number of existing keys out of those specified after updating the time they were last accessed."),
    c("expire", -3, true, ONE, "generic", "Sets the expiration time of a key in seconds."),
    c("pexpire", -3, true, ONE, "generic", "Sets the expiration time of a key in milliseconds."),
    c("expireat", -3, true, ONE, "generic", "Sets the expiration time of a key to a Unix timestamp."),
    c("pexpireat", -3, true, ONE, "generic", "Sets the expiration time of a key to a Unix milliseconds timestamp."),
    c("ttl", 2, false, ONE, "generic", "Returns the expiration time in seconds of a key."),
    c("pttl", 2, false, ONE, "generic", "Returns the expiration time in milliseconds of a key."),
    c("expiretime", 2, false, ONE, "generic", "Returns the expiration time of a key as a Unix timestamp."),
    c("pexpiretime", 2, false, ONE, "generic", "Returns the expiration time of a key as a Unix milliseconds timestamp."),
    c("persist", 2, true, ONE, "generic", "Removes the expiration time of a key."),
    c("keys", 2, false, NONE, "generic", "Returns all key names that match a pattern."),
    c("scan", -2, false, NONE, "generic", "Iterates over the key names in the database."),
    c("rename", 3, true, TWO, "generic", "Renames a key and overwrites the destination."),
    c("renamenx", 3, true, TWO, "generic", "Renames a key only when the target key name doesn't exist."),
    c("randomkey", 1, false, NONE, "generic", "Returns a random key name from the database."),
    c("hset", -4, true, ONE, "hash", "Creates or modifies the value of a field in a hash."),
    c("hmset", -4, true, ONE, "hash", "Sets the values of multiple fields."),
    c("hget", 3, false, ONE, "hash", "Returns the value of a field in a hash."),
    c("hmget", -3, false, ONE, "hash", "Returns the values of all fields in a hash."),
    c("hgetall", 2, false, ONE, "hash", "Returns all fields and values in a hash."),
    c("hdel", -3, true, ONE, "hash", "Deletes one or more fields and their values from a hash."),
    c("hexists", 3, false, ONE, "hash", "Determines whether a field exists in a hash."),
    c("hlen", 2, false, ONE, "hash", "Returns the number of fields in a hash."),
    c("hincrby", 4, true, ONE, "hash", "Increments the integer value of a field in a hash by a number."),
    c("hkeys", 2, false, ONE, "hash", "Returns all fields in a hash."),
    c("hvals", 2, false, ONE, "hash", "Returns all values in a hash."),
    c("hsetnx", 4, true, ONE, "hash", "Sets the value of a field in a hash only when the field doesn't exist."),
    c("hstrlen", 3, false, ONE, "hash", "Returns the length of the value of a field."),
    c("info", -1, false, NONE, "server", "Returns information and statistics about the server."),
    c("config", -2, false, NONE, "server", "A container for server configuration commands."),
    c("command", -1, false, NONE, "server", "Returns detailed information about all commands."),
    c("dbsize", 1, false, NONE, "server", "Returns the number of keys in the database."),
    c("flushdb", -1, true, NONE, "server", "Remove all keys from the current database."),
    c("flushall", -1, true, NONE, "server", "Removes all keys from all databases."),
    c("function", -2, false, NONE, "scripting", "A container for function commands."),
    // The scripting commands' keys are counted by their `numkeys` argument: like Redis, COMMAND
    // INFO reports no fixed key positions (0, 0, 0) for them.
    c("eval", -3, false, NONE, "scripting", "Executes a server-side Lua script."),
    c("evalsha", -3, false, NONE, "scripting", "Executes a server-side Lua script by SHA1 digest."),
    c("eval_ro", -3, false, NONE, "scripting", "Executes a read-only server-side Lua script."),
    c("evalsha_ro", -3, false, NONE, "scripting", "Executes a read-only server-side Lua script by SHA1 digest."),
    c("fcall", -3, false, NONE, "scripting", "Invokes a function."),
    c("fcall_ro", -3, false, NONE, "scripting", "Invokes a read-only function."),
    c("script", -2, false, NONE, "scripting", "A container for Lua scripts management commands."),
    c("time", 1, false, NONE, "server", "Returns the server time."),
    c("multi", 1, false, NONE, "transactions", "Starts a transaction."),
    c("exec", 1, false, NONE, "transactions", "Executes all commands in a transaction."),
    c("discard", 1, false, NONE, "transactions", "Discards a transaction."),
    c("hincrbyfloat", 4, true, ONE, "hash", "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist."),
    c("hrandfield", -2, false, ONE, "hash", "Returns one or more random fields from a hash."),
    c("hscan", -3, false, ONE, "hash", "Iterates over fields and values of a hash."),
    c("slowlog", -2, false, NONE, "server", "A container for slow log commands."),
    c("copy", -3, true, TWO, "generic", "Copies the value of a key to a new key."),
    c("move", 3, true, ONE, "generic", "Moves a key to another database."),
    c("object", -2, false, NONE, "generic", "A container for object introspection commands."),
    c("swapdb", 3, true, NONE, "server", "Swaps two Redis databases."),
    c("sort", -2, true, ONE, "generic", "Sorts the elements in a list, a set, or a sorted set, optionally storing the result."),
    c("sort_ro", -2, false, ONE, "generic", "Returns the sorted elements of a list, a set, or a sorted set."),
    c("memory", -2, false, NONE, "server", "A container for memory diagnostics commands."),
    c("lcs", -3, false, TWO, "string", "Finds the longest common substring."),
    c("lpush", -3, true, ONE, "list", "Prepends one or more elements to a list. Creates the key if it doesn't exist."),
    c("rpush", -3, true, ONE, "list", "Appends one or more elements to a list. Creates the key if it doesn't exist."),
    c("lpushx", -3, true, ONE, "list", "Prepends one or more elements to a list only when the list exists."),
    c("rpushx", -3, true, ONE, "list", "Appends an element to a list only when the list exists."),
    c("lpop", -2, true, ONE, "list", "Returns the first elements in a list after removing it. Deletes the list if the last element was popped."),
    c("rpop", -2, true, ONE, "list", "Returns and removes the last elements of a list. Deletes the list if the last element was popped."),
    c("llen", 2, false, ONE, "list", "Returns the length of a list."),
    c("lrange", 4, false, ONE, "list", "Returns a range of elements from a list."),
    c("lindex", 3, false, ONE, "list", "Returns an element from a list by its index."),
    c("lset", 4, true, ONE, "list", "Sets the value of an element in a list by its index."),
    c("linsert", 5, true, ONE, "list", "Inserts an element before or after another element in a list."),
    c("lrem", 4, true, ONE, "list", "Removes elements from a list. Deletes the list if the last element was removed."),
    c("ltrim", 4, true, ONE, "list", "Removes elements from both ends a list. Deletes the list if all elements were trimmed."),
    c("lpos", -3, false, ONE, "list", "Returns the index of matching elements in a list."),
    c("lmove", 5, true, TWO, "list", "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved."),
    c("rpoplpush", 3, true, TWO, "list", "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped."),
    c("blpop", -3, true, (1, -2, 1), "list", "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped."),
    c("brpop", -3, true, (1, -2, 1), "list", "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped."),
    c("blmove", 6, true, TWO, "list", "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved."),
    c("brpoplpush", 4, true, TWO, "list", "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped."),
    c("sadd", -3, true, ONE, "set", "Adds one or more members to a set. Creates the key if it doesn't exist."),
    c("srem", -3, true, ONE, "set", "Removes one or more members from a set. Deletes the set if the last member was removed."),
    c("sismember", 3, false, ONE, "set", "Determines whether a member belongs to a set."),
    c("smismember", -3, false, ONE, "set", "Determines whether multiple members belong to a set."),
    c("scard", 2, false, ONE, "set", "Returns the number of members in a set."),
    c("smembers", 2, false, ONE, "set", "Returns all members of a set."),
    c("srandmember", -2, false, ONE, "set", "Get one or multiple random members from a set"),
    c("spop", -2, true, ONE, "set", "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped."),
    c("smove", 4, true, TWO, "set", "Moves a member from one set to another."),
    c("sinter", -2, false, ALL, "set", "Returns the intersect of multiple sets."),
    c("sunion", -2, false, ALL, "set", "Returns the union of multiple sets."),
    c("sdiff", -2, false, ALL, "set", "Returns the difference of multiple sets."),
    c("sinterstore", -3, true, ALL, "set", "Stores the intersect of multiple sets in a key."),
    c("sunionstore", -3, true, ALL, "set", "Stores the union of multiple sets in a key."),
    c("sdiffstore", -3, true, ALL, "set", "Stores the difference of multiple sets in a key."),
    c("sintercard", -3, false, NONE, "set", "Returns the number of members of the intersect of multiple sets."),
    c("sscan", -3, false, ONE, "set", "Iterates over members of a set."),
    c("zadd", -4, true, ONE, "sorted-set", "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist."),
    c("zincrby", 4, true, ONE, "sorted-set", "Increments the score of a member in a sorted set."),
    c("zrem", -3, true, ONE, "sorted-set", "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed."),
    c("zscore", 3, false, ONE, "sorted-set", "Returns the score of a member in a sorted set."),
    c("zmscore", -3, false, ONE, "sorted-set", "Returns the score of one or more members in a sorted set."),
    c("zcard", 2, false, ONE, "sorted-set", "Returns the number of members in a sorted set."),
    c("zcount", 4, false, ONE, "sorted-set", "Returns the count of members in a sorted set that have scores within a range."),
    c("zrank", 3, false, ONE, "sorted-set", "Returns the index of a member in a sorted set ordered by ascending scores."),
    c("zrevrank", 3, false, ONE, "sorted-set", "Returns the index of a member in a sorted set ordered by descending scores."),
    c("zrange", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a range of indexes."),
    c("zrangebyscore", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a range of scores."),
    c("zrevrangebyscore", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a range of scores in reverse order."),
    c("zrevrange", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a range of indexes in reverse order."),
    c("zrangebylex", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a lexicographical range."),
    c("zrevrangebylex", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a lexicographical range in reverse order."),
    c("zpopmin", -2, true, ONE, "sorted-set", "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped."),
    c("zpopmax", -2, true, ONE, "sorted-set", "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped."),
    c("zremrangebyrank", 4, true, ONE, "sorted-set", "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed."),
    c("zremrangebyscore", 4, true, ONE, "sorted-set", "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed."),
    c("zunionstore", -4, true, ONE, "sorted-set", "Stores the union of multiple sorted sets in a key."),
    c("zinterstore", -4, true, ONE, "sorted-set", "Stores the intersect of multiple sorted sets in a key."),
    c("zscan", -3, false, ONE, "sorted-set", "Iterates over members and scores of a sorted set."),
    c("lmpop", -4, true, NONE, "list", "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped."),
    c("blmpop", -5, true, NONE, "list", "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped."),
    c("bzpopmin", -3, true, (1, -2, 1), "sorted-set", "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped."),
    c("bzpopmax", -3, true, (1, -2, 1), "sorted-set", "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise.  Deletes the sorted set if the last element was popped."),
    c("zmpop", -4, true, NONE, "sorted-set", "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped."),
    c("bzmpop", -5, true, NONE, "sorted-set", "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped."),
    c("zunion", -3, false, NONE, "sorted-set", "Returns the union of multiple sorted sets."),
    c("zinter", -3, false, NONE, "sorted-set", "Returns the intersect of multiple sorted sets."),
    c("zdiff", -3, false, NONE, "sorted-set", "Returns the difference between multiple sorted sets."),
    c("zdiffstore", -4, true, ONE, "sorted-set", "Stores the difference of multiple sorted sets in a key."),
    c("zintercard", -3, false, NONE, "sorted-set", "Returns the number of members of the intersect of multiple sorted sets."),
    c("zlexcount", 4, false, ONE, "sorted-set", "Returns the number of members in a sorted set within a lexicographical range."),
    c("zremrangebylex", 4, true, ONE, "sorted-set", "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed."),
    c("zrangestore", -5, true, TWO, "sorted-set", "Stores a range of members from sorted set in a key."),
    c("zrandmember", -2, false, ONE, "sorted-set", "Returns one or more random members from a sorted set."),
    c("xadd", -5, true, ONE, "stream", "Appends a new message to a stream. Creates the key if it doesn't exist."),
    c("xrange", -4, false, ONE, "stream", "Returns the messages from a stream within a range of IDs."),
    c("xrevrange", -4, false, ONE, "stream", "Returns the messages from a stream within a range of IDs in reverse order."),
    c("xlen", 2, false, ONE, "stream", "Return the number of messages in a stream."),
    c("xdel", -3, true, ONE, "stream", "Returns the number of messages after removing them from a stream."),
    c("xtrim", -4, true, ONE, "stream", "Deletes messages from the beginning of a stream."),
    c("xsetid", -3, true, ONE, "stream", "An internal command for replicating stream values."),
    c("xread", -4, false, NONE, "stream", "Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a message is available otherwise."),
    c("xreadgroup", -7, true, NONE, "stream", "Returns new or historical messages from a stream for a consumer in a group. Blocks until a message is available otherwise."),
    c("xgroup", -2, true, (2, 2, 1), "stream", "A container for consumer groups commands."),
    c("xack", -4, true, ONE, "stream", "Returns the number of messages that were successfully acknowledged by the consumer group member of a stream."),
    c("xpending", -3, false, ONE, "stream", "Returns the information and entries from a stream consumer group's pending entries list."),
    c("xclaim", -6, true, ONE, "stream", "Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a consumer group member."),
    c("xautoclaim", -6, true, ONE, "stream", "Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered to as consumer group member."),
    c("xinfo", -2, false, (2, 2, 1), "stream", "A container for stream introspection commands."),
    c("setbit", 4, true, ONE, "bitmap", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist."),
    c("getbit", 3, false, ONE, "bitmap", "Returns a bit value by offset."),
    c("bitcount", -2, false, ONE, "bitmap", "Counts the number of set bits (population counting) in a string."),
    c("bitpos", -3, false, ONE, "bitmap", "Finds the first set (1) or clear (0) bit in a string."),
    c("bitop", -4, true, (2, -1, 1), "bitmap", "Performs bitwise operations on multiple strings, and stores the result."),
    c("subscribe", -2, false, NONE, "pubsub", "Listens for messages published to channels."),
    c("unsubscribe", -1, false, NONE, "pubsub", "Stops listening to messages posted to channels."),
    c("psubscribe", -2, false, NONE, "pubsub", "Listens for messages published to channels that match one or more patterns."),
    c("punsubscribe", -1, false, NONE, "pubsub", "Stops listening to messages published to channels that match one or more patterns."),
    c("publish", 3, false, NONE, "pubsub", "Posts a message to a channel."),
    c("pubsub", -2, false, NONE, "pubsub", "A container for Pub/Sub commands."),
    c("watch", -2, false, ALL, "transactions", "Monitors changes to keys to determine the execution of a transaction."),
    c("unwatch", 1, false, NONE, "transactions", "Forgets about watched keys of a transaction."),
    c("shutdown", -1, false, NONE, "server", "Synchronously saves the database(s) to disk and shuts down the server."),
    c("save", 1, false, NONE, "server", "Synchronously saves the database(s) to disk."),
    c("bgsave", -1, false, NONE, "server", "Asynchronously saves the database(s) to disk."),
    c("lastsave", 1, false, NONE, "server", "Returns the Unix timestamp of the last successful save to disk."),
    c("bgrewriteaof", 1, false, NONE, "server", "Asynchronously rewrites the append-only file to disk."),
    c("waitaof", 4, false, NONE, "generic", "Blocks until all of the preceding write commands sent by the connection are written to the append-only file."),
    c("prefixkv.commitpoint", 1, false, NONE, "server", "Returns this connection's write count and how many of those writes are durable."),
];

/// Looks a command up by its lower-case name.
pub fn find(name: &str) -> Option<&'static Spec> {
    find_indexed(name).map(|(_, spec)| spec)
}

/// A command's place in [`COMMANDS`] (its statistics slot) and its description: one hash lookup
/// (the table has some 200 names, so a linear search costs commands near its end more).
pub fn find_indexed(name: &str) -> Option<(usize, &'static Spec)> {
    static BY_NAME: std::sync::OnceLock<std::collections::HashMap<&'static str, usize>> =
        std::sync::OnceLock::new();
    let by_name = BY_NAME.get_or_init(|| {
        let map: std::collections::HashMap<&'static str, usize> = COMMANDS
            .iter()
            .enumerate()
            .map(|(index, spec)| (spec.name, index))
            .collect();
        assert_eq!(map.len(), COMMANDS.len(), "command names are unique");
        map
    });
    by_name.get(name).map(|&index| (index, &COMMANDS[index]))
}

/// Whether `argument_count` (name included) satisfies `arity`.
pub fn arity_ok(spec: &Spec, argument_count: usize) -> bool {
    let count = argument_count as i64;
    if spec.arity >= 0 {
        count == spec.arity
    } else {
        count >= -spec.arity
    }
}
