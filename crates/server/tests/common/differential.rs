//! The differential cases, shared by `crates/server/tests/differential.rs` (prefixkv-server
//! against a plain redis-server) and `crates/cluster/tests/differential.rs` (a one-worker
//! prefixkv cluster against a redis-server in cluster mode), which includes this file and
//! [`super::generators`] by path.
//!
//! A case sends the same commands to both sides and compares every reply exactly (values,
//! integers, nulls, array shapes and error lines), after sorting the replies whose order Redis
//! leaves to its hash tables ([`normalized`]). Redis is the reference.
//!
//! Invariants:
//! - Both sides always get the same command: an [`Adapt`] rewrites a generated command (the
//!   cluster gives its keys a hash tag) or skips it, and whatever it returns goes to both.
//! - The single-server test adapts nothing ([`as_generated`]), so it runs exactly the commands
//!   the generators make.
//! - A failure names its seed, step, both replies and the commands before it.

use prefixkv_resp::Reply;
use prefixkv_testkit::rng::{env_count, Rng};

use super::generators::{collection_command, command, newer_command};

/// One side of a comparison: a connection that sends a command and reads its reply.
pub trait Endpoint {
    /// Sends `args` as one multibulk request and reads the reply.
    fn call(&mut self, args: &[&str]) -> Reply;
}

/// How a generated command is sent to both sides: `Some` (maybe rewritten) or `None` to skip it.
pub type Adapt = dyn Fn(Vec<String>) -> Option<Vec<String>>;

/// `args` sent to redis-server and then to ours: their replies.
pub fn on_both(redis: &mut dyn Endpoint, ours: &mut dyn Endpoint, args: &[&str]) -> [Reply; 2] {
    [redis.call(args), ours.call(args)]
}

/// The single server's adaptation: every command as generated.
pub fn as_generated(args: Vec<String>) -> Option<Vec<String>> {
    Some(args)
}

/// A command generator of [`super::generators`].
pub type Generator = fn(&mut Rng) -> Vec<String>;

/// Replies whose order Redis leaves to its hash tables, sorted so both servers compare: the
/// elements of a set-like reply, the (field, value) pairs of HGETALL.
pub fn normalized(args: &[String], reply: Reply) -> Reply {
    let name = args[0].to_ascii_uppercase();
    let sort = |mut items: Vec<Reply>| {
        items.sort_by_key(|item| format!("{item:?}"));
        items
    };
    match (name.as_str(), reply) {
        (
            "SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "HKEYS" | "HVALS" | "ZRANDMEMBER",
            Reply::Array(items),
        ) => Reply::Array(sort(items)),
        ("HGETALL", Reply::Array(items)) => {
            let mut pairs: Vec<Vec<Reply>> = items.chunks(2).map(|p| p.to_vec()).collect();
            pairs.sort_by_key(|pair| format!("{pair:?}"));
            Reply::Array(pairs.concat())
        }
        (_, reply) => reply,
    }
}

/// Runs `steps` commands of `generate` from `seed` against both sides (after FLUSHALL on each);
/// the first differing reply fails. `tamper` sees each of our replies with its step before the
/// comparison (identity in the real cases).
pub fn run_generated(
    redis: &mut dyn Endpoint,
    ours: &mut dyn Endpoint,
    adapt: &Adapt,
    seed: u64,
    steps: u64,
    generate: Generator,
    tamper: &dyn Fn(u64, Reply) -> Reply,
) {
    for reply in on_both(redis, ours, &["FLUSHALL"]) {
        assert_eq!(reply, Reply::simple("OK"));
    }
    let mut rng = Rng::new(seed);
    let mut history: Vec<Vec<String>> = Vec::new();
    for step in 0..steps {
        // The generator is always drawn from, so a skipped command does not shift the rest.
        let Some(args) = adapt(generate(&mut rng)) else {
            continue;
        };
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let expected = normalized(&args, redis.call(&refs));
        let got = normalized(&args, tamper(step, ours.call(&refs)));
        history.push(args);
        if expected != got {
            let recent: Vec<String> = history
                .iter()
                .rev()
                .take(12)
                .rev()
                .map(|args| args.join(" "))
                .collect();
            panic!(
                "seed {seed} step {step}: {:?}\n  redis-server: {expected:?}\n  prefixkv:     \
                 {got:?}\n  last commands:\n    {}",
                history.last().unwrap(),
                recent.join("\n    ")
            );
        }
    }
}

fn seeds_and_steps() -> (u64, u64) {
    (
        env_count("DIFFERENTIAL_SEEDS", 4),
        env_count("DIFFERENTIAL_STEPS", 2_500),
    )
}

fn identity(_step: u64, reply: Reply) -> Reply {
    reply
}

/// Strings, hashes, bitmaps and keyspace commands ([`command`]), seeds 0…
pub fn random_command_sequences(redis: &mut dyn Endpoint, ours: &mut dyn Endpoint, adapt: &Adapt) {
    let (seeds, steps) = seeds_and_steps();
    for seed in 0..seeds {
        run_generated(redis, ours, adapt, seed, steps, command, &identity);
    }
}

/// Lists, sets, sorted sets and hashes grown into tables ([`collection_command`]), seeds 1000…
pub fn collection_sequences(redis: &mut dyn Endpoint, ours: &mut dyn Endpoint, adapt: &Adapt) {
    // Small hashes become tables after 2 fields, so the record-stored hash is compared too.
    let set = ["CONFIG", "SET", "hash-max-listpack-entries", "2"];
    for reply in on_both(redis, ours, &set) {
        assert_eq!(reply, Reply::simple("OK"));
    }
    let (seeds, steps) = seeds_and_steps();
    for seed in 0..seeds {
        let seed = 1000 + seed;
        run_generated(
            redis,
            ours,
            adapt,
            seed,
            steps,
            collection_command,
            &identity,
        );
    }
}

/// The commands issue 29 added ([`newer_command`]), seeds 2000…, in each of `protocols` (`"2"`,
/// `"3"`: RESP3 answers scores as doubles and nests pairs), switched with HELLO.
pub fn newer_command_sequences(
    redis: &mut dyn Endpoint,
    ours: &mut dyn Endpoint,
    adapt: &Adapt,
    protocols: &[&str],
) {
    let (seeds, steps) = seeds_and_steps();
    for &protocol in protocols {
        for reply in on_both(redis, ours, &["HELLO", protocol]) {
            assert!(
                matches!(reply, Reply::Map(_) | Reply::Array(_)),
                "{reply:?}"
            );
        }
        for seed in 0..seeds {
            let seed = 2000 + seed;
            run_generated(redis, ours, adapt, seed, steps, newer_command, &identity);
        }
    }
}

/// The comparison is not vacuous: one reply changed on its way to the test (an integer off by
/// one, a bulk string with a byte more, a null for a value) fails the run at that step.
pub fn a_differing_reply_is_caught(
    redis: &mut dyn Endpoint,
    ours: &mut dyn Endpoint,
    adapt: &Adapt,
) {
    let tampers: [fn(Reply) -> Reply; 3] = [
        |reply| match reply {
            Reply::Integer(n) => Reply::Integer(n + 1),
            other => other,
        },
        |reply| match reply {
            Reply::BulkString(bytes) => Reply::bulk([&bytes[..], b"!"].concat()),
            other => other,
        },
        |reply| match reply {
            Reply::BulkString(_) => Reply::NullBulkString,
            other => other,
        },
    ];
    for tamper in tampers {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_generated(
                &mut *redis,
                &mut *ours,
                adapt,
                1,
                400,
                command,
                &|step, reply| {
                    if step >= 200 {
                        tamper(reply)
                    } else {
                        reply
                    }
                },
            )
        }));
        let message = *result
            .expect_err("a tampered reply must fail the comparison")
            .downcast::<String>()
            .unwrap();
        assert!(message.contains("seed 1 step 2"), "{message}");
    }
}

/// `COMMAND GETKEYS` for one command of each key-spec shape, and its errors. The keys need not share a slot: GETKEYS runs nothing.
pub const GETKEYS_CASES: &[&[&str]] = &[
    // Fixed positions: the first key, first and last of a range with a step.
    &["GET", "k"],
    &["SET", "k", "v", "EX", "10"],
    &["LMOVE", "src", "dst", "LEFT", "RIGHT"],
    // All arguments are keys.
    &["MGET", "a", "b", "c"],
    &["DEL", "a", "b"],
    // Key-value pairs.
    &["MSET", "a", "1", "b", "2", "c", "3"],
    // A numkeys argument.
    &["EVAL", "return 1", "2", "a", "b", "argv"],
    &["EVAL", "return 1", "0", "argv"],
    &["FCALL", "f", "1", "a", "argv"],
    &["ZUNIONSTORE", "dst", "2", "a", "b", "WEIGHTS", "1", "2"],
    &["ZINTER", "2", "a", "b", "WITHSCORES"],
    &["LMPOP", "2", "a", "b", "LEFT", "COUNT", "2"],
    &["BLMPOP", "1", "2", "a", "b", "RIGHT"],
    &["SINTERCARD", "3", "a", "b", "c", "LIMIT", "1"],
    // The keys after a keyword.
    &["XREAD", "COUNT", "2", "STREAMS", "s1", "s2", "0", "0"],
    &[
        "XREADGROUP",
        "GROUP",
        "g",
        "c",
        "STREAMS",
        "s1",
        "s2",
        ">",
        ">",
    ],
    // SORT's STORE destination.
    &["SORT", "k", "BY", "w_*", "LIMIT", "0", "1", "STORE", "dst"],
    &["SORT", "k"],
    // A script's numkeys beyond its arguments or not a number: no keys, and no error (EVAL may
    // name none).
    &["EVAL", "return 1", "3", "a"],
    &["EVALSHA", "0123", "x"],
    // Errors: a command with no keys, a numkeys beyond the arguments, a wrong arity, an unknown
    // command, a wrong inner arity.
    &["PING", "x"],
    &["ECHO", "x"],
    &["OBJECT", "HELP"],
    &["LMPOP", "5", "a", "LEFT"],
    &["ZUNIONSTORE", "dst", "0"],
    &["NOSUCHCOMMAND", "k"],
    &["SET", "k"],
    &["MEMORY", "USAGE"],
    &["OBJECT", "ENCODING"],
    &["OBJECT", "ENCODING", "k", "extra"],
    &["OBJECT", "ENCODING", "k"],
    &["MEMORY", "USAGE", "k", "SAMPLES", "5"],
    // A command name alone is GETKEYS's own arity error (its arity is -4 in Redis 7.0).
    &["PING"],
    &["GET"],
    &["NOSUCHCOMMAND"],
];

/// Compares `COMMAND GETKEYS` of each of [`GETKEYS_CASES`], then the bare and empty forms.
pub fn getkeys_cases(redis: &mut dyn Endpoint, ours: &mut dyn Endpoint) {
    for case in GETKEYS_CASES {
        let mut args = vec!["COMMAND", "GETKEYS"];
        args.extend_from_slice(case);
        assert_eq!(ours.call(&args), redis.call(&args), "{args:?}");
    }
    for args in [&["COMMAND", "GETKEYS"][..], &["COMMAND", "GETKEYS", ""]] {
        assert_eq!(ours.call(args), redis.call(args), "{args:?}");
    }
}
