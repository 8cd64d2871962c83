//! The command table: every command once, with its arity, flags and key positions as `COMMAND
//! INFO` reports them, and its handler. Dispatch is a lookup here (`find_indexed`); the checks
//! before a command runs (authentication, arity, maxmemory, MULTI, the exec gate) read the row's
//! flags, not lists of names.
//!
//! Invariants: names are unique and lower-case (`find_indexed` asserts it when it builds its
//! index); a row's index is its statistics slot (`crate::command_stats`), so rows are only
//! appended or moved together with nothing that stores indexes across restarts (nothing does).

use bytes::Bytes;

use super::{
    bits, connection, hashes, keys, lcs, lists, memory, pubsub, server, sets, sort, streams,
    strings, transaction, zsets, CommandResult, Ctx, Flow,
};

/// How a command runs once its checks passed.
#[derive(Clone, Copy)]
pub enum Handler {
    /// Writes its reply; an `Err` is written as the error reply instead.
    Reply(fn(&mut Ctx<'_>, &[Bytes]) -> CommandResult),
    /// May also close the connection or hand it something to await ([`Flow`]); an `Err` is
    /// written as the error reply and the connection continues.
    Flow(fn(&mut Ctx<'_>, &[Bytes]) -> CommandResult<Flow>),
}

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
    /// What runs it.
    pub handler: Handler,
    /// The dispatch rules it is subject to: a union of the flag constants below.
    pub flags: u16,
}

impl Spec {
    /// Whether the row has every flag of `flags`.
    pub fn has(&self, flags: u16) -> bool {
        self.flags & flags == flags
    }

    /// The row with `flags` added.
    const fn with(mut self, flags: u16) -> Spec {
        self.flags |= flags;
        self
    }
}

/// Runs before AUTH (the handshake and leaving commands).
pub const NO_AUTH: u16 = 1 << 0;
/// Runs as an exclusive body itself (`super::run_exclusive`), so it must not be dispatched under
/// the shared exec gate, which it would wait for.
pub const EXCLUSIVE: u16 = 1 << 1;
/// Walks the registry stripes without the engine: the session is suspended first, so it never
/// waits on a stripe mutex while protected (see `Keyspace::lock_stripe`).
pub const SUSPEND: u16 = 1 << 2;
/// A write that frees memory: allowed over maxmemory without evicting first.
pub const MAY_FREE: u16 = 1 << 3;
/// Refused inside MULTI: it waits, or changes the connection in ways a queued batch cannot
/// replay in place (`super::transaction`).
pub const NO_MULTI: u16 = 1 << 4;
/// Acts at once even inside MULTI (RESET also discards the transaction).
pub const AT_ONCE: u16 = 1 << 5;
/// A transaction command that runs at once, never queued (MULTI, EXEC, DISCARD, WATCH).
pub const TXN_CONTROL: u16 = 1 << 6;
/// Ends an open transaction (EXEC, DISCARD): counted as executed, not queued.
pub const ENDS_TXN: u16 = 1 << 7;
/// Allowed on a RESP2 connection that holds a subscription.
pub const SUBSCRIBED_OK: u16 = 1 << 8;
/// Served while another client's script is busy (it touches no data); SCRIPT KILL, FUNCTION
/// KILL|STATS and SHUTDOWN NOSAVE are too, by subcommand (`crate::scripting`).
pub const BUSY_OK: u16 = 1 << 9;
/// Answers how many elements changed: its `:0` means nothing did, and sends no keyspace event.
pub const QUIET_ON_ZERO: u16 = 1 << 10;

/// A handler that writes its reply.
#[allow(non_snake_case)]
const fn R(handler: fn(&mut Ctx<'_>, &[Bytes]) -> CommandResult) -> Handler {
    Handler::Reply(handler)
}

/// A handler that may close the connection or hand it something to await.
#[allow(non_snake_case)]
const fn F(handler: fn(&mut Ctx<'_>, &[Bytes]) -> CommandResult<Flow>) -> Handler {
    Handler::Flow(handler)
}

const fn c(
    name: &'static str,
    arity: i64,
    write: bool,
    keys: (i64, i64, i64),
    group: &'static str,
    summary: &'static str,
    handler: Handler,
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
        handler,
        flags: 0,
    }
}

const NONE: (i64, i64, i64) = (0, 0, 0);
const ONE: (i64, i64, i64) = (1, 1, 1);
const ALL: (i64, i64, i64) = (1, -1, 1);
const PAIRS: (i64, i64, i64) = (1, -1, 2);
const TWO: (i64, i64, i64) = (1, 2, 1);

/// Every supported command.
pub static COMMANDS: &[Spec] = &[
    c("ping", -1, false, NONE, "connection", "Returns the server's liveliness response.", R(connection::ping)).with(SUBSCRIBED_OK),
    c("echo", 2, false, NONE, "connection", "Returns the given string.", R(connection::echo)),
    c("hello", -1, false, NONE, "connection", "Handshakes with the server.", R(connection::hello)).with(NO_AUTH | NO_MULTI | BUSY_OK),
    c("auth", -2, false, NONE, "connection", "Authenticates the connection.", R(connection::auth)).with(NO_AUTH | NO_MULTI | BUSY_OK),
    c("select", 2, false, NONE, "connection", "Changes the selected database.", R(connection::select)),
    c("quit", -1, false, NONE, "connection", "Closes the connection.", F(connection::quit)).with(NO_AUTH | AT_ONCE | SUBSCRIBED_OK | BUSY_OK),
    c("reset", 1, false, NONE, "connection", "Resets the connection.", R(connection::reset)).with(NO_AUTH | AT_ONCE | SUBSCRIBED_OK | BUSY_OK),
    c("client", -2, false, NONE, "connection", "A container for client connection commands.", R(connection::client)),
    c("set", -3, true, ONE, "string", "Sets the string value of a key.", R(strings::set)),
    c("get", 2, false, ONE, "string", "Returns the string value of a key.", R(strings::get)),
    c("getset", 3, true, ONE, "string", "Returns the previous string value of a key after setting it to a new value.", R(strings::getset)),
    c("getdel", 2, true, ONE, "string", "Returns the string value of a key after deleting the key.", R(strings::getdel)).with(MAY_FREE),
    c("getex", -2, true, ONE, "string", "Returns the string value of a key after setting its expiration time.", R(strings::getex)),
    c("setnx", 3, true, ONE, "string", "Set the string value of a key only when the key doesn't exist.", R(strings::setnx)),
    c("setex", 4, true, ONE, "string", "Sets the string value and expiration time of a key.", R(strings::setex)),
    c("psetex", 4, true, ONE, "string", "Sets both string value and expiration time in milliseconds of a key.", R(strings::psetex)),
    c("mset", -3, true, PAIRS, "string", "Atomically creates or modifies the string values of one or more keys.", R(strings::mset)),
    c("msetnx", -3, true, PAIRS, "string", "Atomically modifies the string values of one or more keys only when all keys don't exist.", R(strings::msetnx)),
    c("mget", -2, false, ALL, "string", "Atomically returns the string values of one or more keys.", R(strings::mget)),
    c("incr", 2, true, ONE, "string", "Increments the integer value of a key by one.", R(strings::incr)),
    c("decr", 2, true, ONE, "string", "Decrements the integer value of a key by one.", R(strings::decr)),
    c("incrby", 3, true, ONE, "string", "Increments the integer value of a key by a number.", R(strings::incrby)),
    c("decrby", 3, true, ONE, "string", "Decrements a number from the integer value of a key.", R(strings::decrby)),
    c("incrbyfloat", 3, true, ONE, "string", "Increment the floating point value of a key by a number.", R(strings::incr_by_float)),
    c("append", 3, true, ONE, "string", "Appends a string to the value of a key.", R(strings::append)),
    c("strlen", 2, false, ONE, "string", "Returns the length of a string value.", R(strings::strlen)),
    c("setrange", 4, true, ONE, "string", "Overwrites a part of a string value with another by an offset.", R(strings::setrange)),
    c("getrange", 4, false, ONE, "string", "Returns a substring of the string stored at a key.", R(strings::getrange)),
    c("del", -2, true, ALL, "generic", "Deletes one or more keys.", R(keys::del)).with(MAY_FREE),
    c("unlink", -2, true, ALL, "generic", "Asynchronously deletes one or more keys.", R(keys::del)).with(MAY_FREE),
    c("exists", -2, false, ALL, "generic", "Determines whether one or more keys exist.", R(keys::exists)),
    c("type", 2, false, ONE, "generic", "Determines the type of value stored at a key.", R(keys::type_of)),
    c("touch", -2, false, ALL, "generic", "Returns the number of existing keys out of those specified after updating the time they were last accessed.", R(keys::touch)),
    c("expire", -3, true, ONE, "generic", "Sets the expiration time of a key in seconds.", R(keys::expire)),
    c("pexpire", -3, true, ONE, "generic", "Sets the expiration time of a key in milliseconds.", R(keys::pexpire)),
    c("expireat", -3, true, ONE, "generic", "Sets the expiration time of a key to a Unix timestamp.", R(keys::expireat)),
    c("pexpireat", -3, true, ONE, "generic", "Sets the expiration time of a key to a Unix milliseconds timestamp.", R(keys::pexpireat)),
    c("ttl", 2, false, ONE, "generic", "Returns the expiration time in seconds of a key.", R(keys::ttl)),
    c("pttl", 2, false, ONE, "generic", "Returns the expiration time in milliseconds of a key.", R(keys::pttl)),
    c("expiretime", 2, false, ONE, "generic", "Returns the expiration time of a key as a Unix timestamp.", R(keys::expiretime)),
    c("pexpiretime", 2, false, ONE, "generic", "Returns the expiration time of a key as a Unix milliseconds timestamp.", R(keys::pexpiretime)),
    c("persist", 2, true, ONE, "generic", "Removes the expiration time of a key.", R(keys::persist)),
    c("keys", 2, false, NONE, "generic", "Returns all key names that match a pattern.", R(keys::keys)).with(SUSPEND),
    c("scan", -2, false, NONE, "generic", "Iterates over the key names in the database.", R(keys::scan)).with(SUSPEND),
    c("rename", 3, true, TWO, "generic", "Renames a key and overwrites the destination.", R(keys::rename)),
    c("renamenx", 3, true, TWO, "generic", "Renames a key only when the target key name doesn't exist.", R(keys::renamenx)),
    c("randomkey", 1, false, NONE, "generic", "Returns a random key name from the database.", R(keys::randomkey)).with(SUSPEND),
    c("hset", -4, true, ONE, "hash", "Creates or modifies the value of a field in a hash.", R(hashes::hset)),
    c("hmset", -4, true, ONE, "hash", "Sets the values of multiple fields.", R(hashes::hmset)),
    c("hget", 3, false, ONE, "hash", "Returns the value of a field in a hash.", R(hashes::hget)),
    c("hmget", -3, false, ONE, "hash", "Returns the values of all fields in a hash.", R(hashes::hmget)),
    c("hgetall", 2, false, ONE, "hash", "Returns all fields and values in a hash.", R(hashes::hgetall)),
    c("hdel", -3, true, ONE, "hash", "Deletes one or more fields and their values from a hash.", R(hashes::hdel)).with(QUIET_ON_ZERO),
    c("hexists", 3, false, ONE, "hash", "Determines whether a field exists in a hash.", R(hashes::hexists)),
    c("hlen", 2, false, ONE, "hash", "Returns the number of fields in a hash.", R(hashes::hlen)),
    c("hincrby", 4, true, ONE, "hash", "Increments the integer value of a field in a hash by a number.", R(hashes::hincrby)),
    c("hkeys", 2, false, ONE, "hash", "Returns all fields in a hash.", R(hashes::hkeys)),
    c("hvals", 2, false, ONE, "hash", "Returns all values in a hash.", R(hashes::hvals)),
    c("hsetnx", 4, true, ONE, "hash", "Sets the value of a field in a hash only when the field doesn't exist.", R(hashes::hsetnx)),
    c("hstrlen", 3, false, ONE, "hash", "Returns the length of the value of a field.", R(hashes::hstrlen)),
    c("info", -1, false, NONE, "server", "Returns information and statistics about the server.", R(server::info)).with(SUSPEND),
    c("config", -2, false, NONE, "server", "A container for server configuration commands.", R(server::config)),
    c("command", -1, false, NONE, "server", "Returns detailed information about all commands.", R(server::command)),
    c("dbsize", 1, false, NONE, "server", "Returns the number of keys in the database.", R(server::dbsize)).with(SUSPEND),
    c("flushdb", -1, true, NONE, "server", "Remove all keys from the current database.", R(server::flushdb)).with(MAY_FREE),
    c("flushall", -1, true, NONE, "server", "Removes all keys from all databases.", R(server::flushall)).with(MAY_FREE),
    c("function", -2, false, NONE, "scripting", "A container for function commands.", R(crate::scripting::function_command)),
    // The scripting commands' keys are counted by their `numkeys` argument: like Redis, COMMAND
    // INFO reports no fixed key positions (0, 0, 0) for them.
    c("eval", -3, false, NONE, "scripting", "Executes a server-side Lua script.", F(crate::scripting::call)),
    c("evalsha", -3, false, NONE, "scripting", "Executes a server-side Lua script by SHA1 digest.", F(crate::scripting::call)),
    c("eval_ro", -3, false, NONE, "scripting", "Executes a read-only server-side Lua script.", F(crate::scripting::call)),
    c("evalsha_ro", -3, false, NONE, "scripting", "Executes a read-only server-side Lua script by SHA1 digest.", F(crate::scripting::call)),
    c("fcall", -3, false, NONE, "scripting", "Invokes a function.", F(crate::scripting::call)),
    c("fcall_ro", -3, false, NONE, "scripting", "Invokes a read-only function.", F(crate::scripting::call)),
    c("script", -2, false, NONE, "scripting", "A container for Lua scripts management commands.", R(crate::scripting::script_command)),
    c("time", 1, false, NONE, "server", "Returns the server time.", R(server::time)),
    c("multi", 1, false, NONE, "transactions", "Starts a transaction.", R(transaction::multi)).with(TXN_CONTROL | BUSY_OK),
    c("exec", 1, false, NONE, "transactions", "Executes all commands in a transaction.", R(transaction::exec)).with(TXN_CONTROL | ENDS_TXN),
    c("discard", 1, false, NONE, "transactions", "Discards a transaction.", R(transaction::discard)).with(TXN_CONTROL | ENDS_TXN | BUSY_OK),
    c("hincrbyfloat", 4, true, ONE, "hash", "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.", R(hashes::hincrbyfloat)),
    c("hrandfield", -2, false, ONE, "hash", "Returns one or more random fields from a hash.", R(hashes::hrandfield)),
    c("hscan", -3, false, ONE, "hash", "Iterates over fields and values of a hash.", R(hashes::hscan)),
    c("slowlog", -2, false, NONE, "server", "A container for slow log commands.", R(server::slowlog)),
    c("copy", -3, true, TWO, "generic", "Copies the value of a key to a new key.", R(keys::copy)),
    c("move", 3, true, ONE, "generic", "Moves a key to another database.", R(keys::move_key)),
    c("object", -2, false, NONE, "generic", "A container for object introspection commands.", R(keys::object)),
    c("swapdb", 3, true, NONE, "server", "Swaps two Redis databases.", R(keys::swapdb)).with(EXCLUSIVE),
    c("sort", -2, true, ONE, "generic", "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.", R(sort::sort)),
    c("sort_ro", -2, false, ONE, "generic", "Returns the sorted elements of a list, a set, or a sorted set.", R(sort::sort_ro)),
    c("memory", -2, false, NONE, "server", "A container for memory diagnostics commands.", R(memory::memory)),
    c("lcs", -3, false, TWO, "string", "Finds the longest common substring.", R(lcs::lcs)),
    c("lpush", -3, true, ONE, "list", "Prepends one or more elements to a list. Creates the key if it doesn't exist.", R(lists::lpush)),
    c("rpush", -3, true, ONE, "list", "Appends one or more elements to a list. Creates the key if it doesn't exist.", R(lists::rpush)),
    c("lpushx", -3, true, ONE, "list", "Prepends one or more elements to a list only when the list exists.", R(lists::lpushx)),
    c("rpushx", -3, true, ONE, "list", "Appends an element to a list only when the list exists.", R(lists::rpushx)),
    c("lpop", -2, true, ONE, "list", "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.", R(lists::lpop)),
    c("rpop", -2, true, ONE, "list", "Returns and removes the last elements of a list. Deletes the list if the last element was popped.", R(lists::rpop)),
    c("llen", 2, false, ONE, "list", "Returns the length of a list.", R(lists::llen)),
    c("lrange", 4, false, ONE, "list", "Returns a range of elements from a list.", R(lists::lrange)),
    c("lindex", 3, false, ONE, "list", "Returns an element from a list by its index.", R(lists::lindex)),
    c("lset", 4, true, ONE, "list", "Sets the value of an element in a list by its index.", R(lists::lset)),
    c("linsert", 5, true, ONE, "list", "Inserts an element before or after another element in a list.", R(lists::linsert)),
    c("lrem", 4, true, ONE, "list", "Removes elements from a list. Deletes the list if the last element was removed.", R(lists::lrem)).with(QUIET_ON_ZERO),
    c("ltrim", 4, true, ONE, "list", "Removes elements from both ends a list. Deletes the list if all elements were trimmed.", R(lists::ltrim)),
    c("lpos", -3, false, ONE, "list", "Returns the index of matching elements in a list.", R(lists::lpos)),
    c("lmove", 5, true, TWO, "list", "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.", R(lists::lmove_command)),
    c("rpoplpush", 3, true, TWO, "list", "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.", R(lists::rpoplpush)),
    c("blpop", -3, true, (1, -2, 1), "list", "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", F(lists::blpop)),
    c("brpop", -3, true, (1, -2, 1), "list", "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", F(lists::brpop)),
    c("blmove", 6, true, TWO, "list", "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.", F(lists::blmove)),
    c("brpoplpush", 4, true, TWO, "list", "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.", F(lists::brpoplpush)),
    c("sadd", -3, true, ONE, "set", "Adds one or more members to a set. Creates the key if it doesn't exist.", R(sets::sadd)).with(QUIET_ON_ZERO),
    c("srem", -3, true, ONE, "set", "Removes one or more members from a set. Deletes the set if the last member was removed.", R(sets::srem)).with(QUIET_ON_ZERO),
    c("sismember", 3, false, ONE, "set", "Determines whether a member belongs to a set.", R(sets::sismember)),
    c("smismember", -3, false, ONE, "set", "Determines whether multiple members belong to a set.", R(sets::smismember)),
    c("scard", 2, false, ONE, "set", "Returns the number of members in a set.", R(sets::scard)),
    c("smembers", 2, false, ONE, "set", "Returns all members of a set.", R(sets::smembers)),
    c("srandmember", -2, false, ONE, "set", "Get one or multiple random members from a set", R(sets::srandmember)),
    c("spop", -2, true, ONE, "set", "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.", R(sets::spop)),
    c("smove", 4, true, TWO, "set", "Moves a member from one set to another.", R(sets::smove)).with(QUIET_ON_ZERO),
    c("sinter", -2, false, ALL, "set", "Returns the intersect of multiple sets.", R(sets::sinter)),
    c("sunion", -2, false, ALL, "set", "Returns the union of multiple sets.", R(sets::sunion)),
    c("sdiff", -2, false, ALL, "set", "Returns the difference of multiple sets.", R(sets::sdiff)),
    c("sinterstore", -3, true, ALL, "set", "Stores the intersect of multiple sets in a key.", R(sets::sinterstore)),
    c("sunionstore", -3, true, ALL, "set", "Stores the union of multiple sets in a key.", R(sets::sunionstore)),
    c("sdiffstore", -3, true, ALL, "set", "Stores the difference of multiple sets in a key.", R(sets::sdiffstore)),
    c("sintercard", -3, false, NONE, "set", "Returns the number of members of the intersect of multiple sets.", R(sets::sintercard)),
    c("sscan", -3, false, ONE, "set", "Iterates over members of a set.", R(sets::sscan)),
    c("zadd", -4, true, ONE, "sorted-set", "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.", R(zsets::zadd)),
    c("zincrby", 4, true, ONE, "sorted-set", "Increments the score of a member in a sorted set.", R(zsets::zincrby)),
    c("zrem", -3, true, ONE, "sorted-set", "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.", R(zsets::zrem)).with(QUIET_ON_ZERO),
    c("zscore", 3, false, ONE, "sorted-set", "Returns the score of a member in a sorted set.", R(zsets::zscore)),
    c("zmscore", -3, false, ONE, "sorted-set", "Returns the score of one or more members in a sorted set.", R(zsets::zmscore)),
    c("zcard", 2, false, ONE, "sorted-set", "Returns the number of members in a sorted set.", R(zsets::zcard)),
    c("zcount", 4, false, ONE, "sorted-set", "Returns the count of members in a sorted set that have scores within a range.", R(zsets::zcount)),
    c("zrank", 3, false, ONE, "sorted-set", "Returns the index of a member in a sorted set ordered by ascending scores.", R(zsets::zrank)),
    c("zrevrank", 3, false, ONE, "sorted-set", "Returns the index of a member in a sorted set ordered by descending scores.", R(zsets::zrevrank)),
    c("zrange", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a range of indexes.", R(zsets::zrange)),
    c("zrangebyscore", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a range of scores.", R(zsets::zrangebyscore)),
    c("zrevrangebyscore", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a range of scores in reverse order.", R(zsets::zrevrangebyscore)),
    c("zrevrange", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a range of indexes in reverse order.", R(zsets::zrevrange)),
    c("zrangebylex", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a lexicographical range.", R(zsets::zrangebylex)),
    c("zrevrangebylex", -4, false, ONE, "sorted-set", "Returns members in a sorted set within a lexicographical range in reverse order.", R(zsets::zrevrangebylex)),
    c("zpopmin", -2, true, ONE, "sorted-set", "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", R(zsets::zpopmin)),
    c("zpopmax", -2, true, ONE, "sorted-set", "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", R(zsets::zpopmax)),
    c("zremrangebyrank", 4, true, ONE, "sorted-set", "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.", R(zsets::zremrangebyrank)),
    c("zremrangebyscore", 4, true, ONE, "sorted-set", "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.", R(zsets::zremrangebyscore)),
    c("zunionstore", -4, true, ONE, "sorted-set", "Stores the union of multiple sorted sets in a key.", R(zsets::zunionstore)),
    c("zinterstore", -4, true, ONE, "sorted-set", "Stores the intersect of multiple sorted sets in a key.", R(zsets::zinterstore)),
    c("zscan", -3, false, ONE, "sorted-set", "Iterates over members and scores of a sorted set.", R(zsets::zscan)),
    c("lmpop", -4, true, NONE, "list", "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped.", R(lists::lmpop)),
    c("blmpop", -5, true, NONE, "list", "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", F(lists::blmpop)),
    c("bzpopmin", -3, true, (1, -2, 1), "sorted-set", "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", F(zsets::bzpopmin)),
    c("bzpopmax", -3, true, (1, -2, 1), "sorted-set", "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise.  Deletes the sorted set if the last element was popped.", F(zsets::bzpopmax)),
    c("zmpop", -4, true, NONE, "sorted-set", "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.", R(zsets::zmpop)),
    c("bzmpop", -5, true, NONE, "sorted-set", "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", F(zsets::bzmpop)),
    c("zunion", -3, false, NONE, "sorted-set", "Returns the union of multiple sorted sets.", R(zsets::zunion)),
    c("zinter", -3, false, NONE, "sorted-set", "Returns the intersect of multiple sorted sets.", R(zsets::zinter)),
    c("zdiff", -3, false, NONE, "sorted-set", "Returns the difference between multiple sorted sets.", R(zsets::zdiff)),
    c("zdiffstore", -4, true, ONE, "sorted-set", "Stores the difference of multiple sorted sets in a key.", R(zsets::zdiffstore)),
    c("zintercard", -3, false, NONE, "sorted-set", "Returns the number of members of the intersect of multiple sorted sets.", R(zsets::zintercard)),
    c("zlexcount", 4, false, ONE, "sorted-set", "Returns the number of members in a sorted set within a lexicographical range.", R(zsets::zlexcount)),
    c("zremrangebylex", 4, true, ONE, "sorted-set", "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed.", R(zsets::zremrangebylex)),
    c("zrangestore", -5, true, TWO, "sorted-set", "Stores a range of members from sorted set in a key.", R(zsets::zrangestore)),
    c("zrandmember", -2, false, ONE, "sorted-set", "Returns one or more random members from a sorted set.", R(zsets::zrandmember)),
    c("xadd", -5, true, ONE, "stream", "Appends a new message to a stream. Creates the key if it doesn't exist.", R(streams::xadd)),
    c("xrange", -4, false, ONE, "stream", "Returns the messages from a stream within a range of IDs.", R(streams::xrange)),
    c("xrevrange", -4, false, ONE, "stream", "Returns the messages from a stream within a range of IDs in reverse order.", R(streams::xrevrange)),
    c("xlen", 2, false, ONE, "stream", "Return the number of messages in a stream.", R(streams::xlen)),
    c("xdel", -3, true, ONE, "stream", "Returns the number of messages after removing them from a stream.", R(streams::xdel)).with(QUIET_ON_ZERO | MAY_FREE),
    c("xtrim", -4, true, ONE, "stream", "Deletes messages from the beginning of a stream.", R(streams::xtrim)).with(QUIET_ON_ZERO | MAY_FREE),
    c("xsetid", -3, true, ONE, "stream", "An internal command for replicating stream values.", R(streams::xsetid)),
    c("xread", -4, false, NONE, "stream", "Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a message is available otherwise.", F(streams::xread)),
    c("xreadgroup", -7, true, NONE, "stream", "Returns new or historical messages from a stream for a consumer in a group. Blocks until a message is available otherwise.", F(streams::xreadgroup)).with(MAY_FREE),
    c("xgroup", -2, true, (2, 2, 1), "stream", "A container for consumer groups commands.", R(streams::xgroup)),
    c("xack", -4, true, ONE, "stream", "Returns the number of messages that were successfully acknowledged by the consumer group member of a stream.", R(streams::xack)).with(MAY_FREE),
    c("xpending", -3, false, ONE, "stream", "Returns the information and entries from a stream consumer group's pending entries list.", R(streams::xpending)),
    c("xclaim", -6, true, ONE, "stream", "Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a consumer group member.", R(streams::xclaim)).with(MAY_FREE),
    c("xautoclaim", -6, true, ONE, "stream", "Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered to as consumer group member.", R(streams::xautoclaim)).with(MAY_FREE),
    c("xinfo", -2, false, (2, 2, 1), "stream", "A container for stream introspection commands.", R(streams::xinfo)),
    c("setbit", 4, true, ONE, "bitmap", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.", R(bits::setbit)),
    c("getbit", 3, false, ONE, "bitmap", "Returns a bit value by offset.", R(bits::getbit)),
    c("bitcount", -2, false, ONE, "bitmap", "Counts the number of set bits (population counting) in a string.", R(bits::bitcount)),
    c("bitpos", -3, false, ONE, "bitmap", "Finds the first set (1) or clear (0) bit in a string.", R(bits::bitpos)),
    c("bitop", -4, true, (2, -1, 1), "bitmap", "Performs bitwise operations on multiple strings, and stores the result.", R(bits::bitop)),
    c("subscribe", -2, false, NONE, "pubsub", "Listens for messages published to channels.", R(pubsub::subscribe_channels)).with(NO_MULTI | SUBSCRIBED_OK),
    c("unsubscribe", -1, false, NONE, "pubsub", "Stops listening to messages posted to channels.", R(pubsub::unsubscribe_channels)).with(NO_MULTI | SUBSCRIBED_OK),
    c("psubscribe", -2, false, NONE, "pubsub", "Listens for messages published to channels that match one or more patterns.", R(pubsub::subscribe_patterns)).with(NO_MULTI | SUBSCRIBED_OK),
    c("punsubscribe", -1, false, NONE, "pubsub", "Stops listening to messages published to channels that match one or more patterns.", R(pubsub::unsubscribe_patterns)).with(NO_MULTI | SUBSCRIBED_OK),
    c("publish", 3, false, NONE, "pubsub", "Posts a message to a channel.", R(pubsub::publish)),
    c("pubsub", -2, false, NONE, "pubsub", "A container for Pub/Sub commands.", R(pubsub::pubsub)),
    c("watch", -2, false, ALL, "transactions", "Monitors changes to keys to determine the execution of a transaction.", R(transaction::watch)).with(NO_MULTI | TXN_CONTROL),
    c("unwatch", 1, false, NONE, "transactions", "Forgets about watched keys of a transaction.", R(transaction::unwatch)),
    c("shutdown", -1, false, NONE, "server", "Synchronously saves the database(s) to disk and shuts down the server.", F(server::shutdown)).with(NO_MULTI),
    c("save", 1, false, NONE, "server", "Synchronously saves the database(s) to disk.", F(server::save)).with(NO_MULTI),
    c("bgsave", -1, false, NONE, "server", "Asynchronously saves the database(s) to disk.", R(server::bgsave)),
    c("lastsave", 1, false, NONE, "server", "Returns the Unix timestamp of the last successful save to disk.", R(server::lastsave)),
    c("bgrewriteaof", 1, false, NONE, "server", "Asynchronously rewrites the append-only file to disk.", R(server::bgrewriteaof)),
    c("waitaof", 4, false, NONE, "generic", "Blocks until all of the preceding write commands sent by the connection are written to the append-only file.", F(server::waitaof)).with(NO_MULTI),
    c("prefixkv.commitpoint", 1, false, NONE, "server", "Returns this connection's write count and how many of those writes are durable.", R(server::commitpoint)),
];

/// Looks a command up by its lower-case name.
pub fn find(name: &str) -> Option<&'static Spec> {
    find_indexed(name).map(|(_, spec)| spec)
}

/// A command's place in [`COMMANDS`] (its statistics slot) and its description: one hash lookup
/// (the table has some 200 names, so a linear search costs commands near its end more).
pub fn find_indexed(name: &str) -> Option<(usize, &'static Spec)> {
    by_name()
        .get(name.as_bytes())
        .map(|&index| (index, &COMMANDS[index]))
}

/// The name index of [`COMMANDS`], built on first use.
fn by_name() -> &'static NameMap {
    static BY_NAME: std::sync::OnceLock<NameMap> = std::sync::OnceLock::new();
    BY_NAME.get_or_init(|| {
        let map: NameMap = COMMANDS
            .iter()
            .enumerate()
            .map(|(index, spec)| (spec.name.as_bytes(), index))
            .collect();
        assert_eq!(map.len(), COMMANDS.len(), "command names are unique");
        map
    })
}

/// The longest command name in [`COMMANDS`] fits in this many bytes (a test checks it).
const MAX_NAME_BYTES: usize = 32;

/// [`find_indexed`] for a name as the client sent it, in any case, without allocating: the name
/// is lowered into a stack buffer (a name longer than every command's, or not UTF-8, is no
/// command).
pub fn find_indexed_ci(name: &[u8]) -> Option<(usize, &'static Spec)> {
    let mut lowered = [0u8; MAX_NAME_BYTES];
    let lowered = lowered.get_mut(..name.len())?;
    for (to, from) in lowered.iter_mut().zip(name) {
        *to = from.to_ascii_lowercase();
    }
    // Byte keys: every name is ASCII, so a name that is not UTF-8 simply matches none.
    by_name()
        .get(&*lowered)
        .map(|&index| (index, &COMMANDS[index]))
}

/// The name index: FNV-1a instead of the default SipHash, since the keys are the table's own
/// fixed names (nothing a client can pick to collide them beyond looking up a miss) and every
/// command looks its name up, a batch several times.
type NameMap =
    std::collections::HashMap<&'static [u8], usize, std::hash::BuildHasherDefault<NameHasher>>;

/// FNV-1a over the bytes written (see [`NameMap`]).
struct NameHasher(u64);

impl Default for NameHasher {
    fn default() -> Self {
        NameHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for NameHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_fits_the_case_insensitive_lookup() {
        for (index, spec) in COMMANDS.iter().enumerate() {
            assert!(spec.name.len() <= MAX_NAME_BYTES, "{}", spec.name);
            let upper = spec.name.to_ascii_uppercase();
            assert_eq!(
                find_indexed_ci(upper.as_bytes()).map(|(i, _)| i),
                Some(index)
            );
            assert_eq!(
                find_indexed_ci(spec.name.as_bytes()).map(|(i, _)| i),
                Some(index)
            );
        }
        assert!(find_indexed_ci(b"nosuchcommand").is_none());
        assert!(find_indexed_ci(&[b'g'; MAX_NAME_BYTES + 1]).is_none());
        assert!(find_indexed_ci(b"g\xffet").is_none());
        assert!(find_indexed_ci(b"").is_none());
    }
}
