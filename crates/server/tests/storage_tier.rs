//! `storage-tier yes`: data four times `engine-memory` is written and read back exactly, the
//! engine's log stays within its budget while its older pages sit in the page file
//! (`<dir>/log`), and a SHUTDOWN and restart with the same options reads every key back again,
//! having read a fraction of the page file to restart. Key counts after a crash come from the
//! checkpoint's cookie plus the replayed oplog.
//! The same workload without the tier runs out of engine memory (OOM), so the option is what
//! makes the difference; and a non-zero `engine-compact-dead-fraction` with the tier is refused
//! at start naming both options.

mod common;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{encode_request, Raw, Server};
use prefixkv_resp::Reply;

const MIB: u64 = 1 << 20;
/// The smallest `engine-memory` the server can run with: the engine wants at least 8 log pages
/// in its budget (`StoreConfig::validate`) and the server's pages are 4 MiB
/// (`persistence::store_options`).
const ENGINE_MEMORY: &str = "32mb";
const ENGINE_MEMORY_BYTES: u64 = 32 * MIB;
const VALUE_BYTES: usize = 100;
/// Enough keys that the values alone are four times `engine-memory` (the log holds more: each
/// record also has its header and key).
const KEYS: usize = (4 * ENGINE_MEMORY_BYTES as usize).div_ceil(VALUE_BYTES);
/// Requests per pipelined write.
const BATCH: usize = 4000;

fn key(i: usize) -> String {
    format!("tier:{i:08}")
}

/// A value no other key has: the key's number, then letters shifted by it.
fn value(i: usize) -> Vec<u8> {
    let mut value = format!("{i:08}:").into_bytes();
    while value.len() < VALUE_BYTES {
        value.push(b'a' + ((i + value.len()) % 26) as u8);
    }
    value
}

/// Connections the tiered test writes and reads through at once (the server runs 2 threads).
const CONNECTIONS: usize = 2;

/// The keys of connection `part` of `parts`, in order.
fn part_keys(part: usize, parts: usize) -> impl Iterator<Item = usize> {
    (part..KEYS).step_by(parts)
}

/// SETs the keys of `part` of `parts` in order, pipelined in batches of the size `batch` returns
/// before each batch; the first key whose reply is not `OK`, with the reply (the rest of its
/// batch is not read).
fn load(
    raw: &mut Raw,
    part: usize,
    parts: usize,
    mut batch: impl FnMut(&mut Raw) -> usize,
) -> Result<(), (usize, Reply)> {
    let mut keys = part_keys(part, parts).peekable();
    let mut request = Vec::new();
    let mut sent = Vec::new();
    while keys.peek().is_some() {
        request.clear();
        sent.clear();
        sent.extend(keys.by_ref().take(batch(raw).max(1)));
        for &i in &sent {
            encode_request(&mut request, &[b"SET", key(i).as_bytes(), &value(i)]);
        }
        raw.stream
            .write_all(&request)
            .expect("send a batch of SETs");
        for &i in &sent {
            match raw.read() {
                Some(Reply::SimpleString(ok)) if ok == "OK" => {}
                Some(other) => return Err((i, other)),
                None => {
                    panic!("no reply to the SET of key {i}: connection closed or read timed out")
                }
            }
        }
    }
    Ok(())
}

/// Every key through [`CONNECTIONS`] connections at once, each pipelined; panics naming the
/// first key that was not `OK`.
fn load_all(port: u16) {
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..CONNECTIONS)
            .map(|part| {
                scope.spawn(move || {
                    let mut raw = Raw::connect(port).expect("connect a writer");
                    load(&mut raw, part, CONNECTIONS, |_| BATCH)
                })
            })
            .collect();
        for writer in writers {
            if let Err((i, reply)) = writer.join().expect("a writer thread") {
                panic!("SET of key {i} of {KEYS} with the storage tier: {reply:?}");
            }
        }
    });
}

/// GETs the keys of `part` of `parts`, pipelined; the keys whose reply is not exactly the value
/// written, with the reply.
fn wrong_values(raw: &mut Raw, part: usize, parts: usize) -> Vec<(String, Reply)> {
    let mut wrong = Vec::new();
    let mut keys = part_keys(part, parts).peekable();
    let mut request = Vec::new();
    let mut sent = Vec::new();
    while keys.peek().is_some() {
        request.clear();
        sent.clear();
        sent.extend(keys.by_ref().take(BATCH));
        for &i in &sent {
            encode_request(&mut request, &[b"GET", key(i).as_bytes()]);
        }
        raw.stream
            .write_all(&request)
            .expect("send a batch of GETs");
        for &i in &sent {
            let reply = raw.read().expect("a GET reply");
            if reply != Reply::BulkString(value(i).into()) {
                wrong.push((key(i), reply));
            }
        }
    }
    wrong
}

/// Asserts that the server holds exactly the keys written, each with its value (read through
/// [`CONNECTIONS`] connections at once).
fn check_all(port: u16, when: &str) {
    let mut raw = Raw::connect(port).expect("connect");
    assert_eq!(
        raw.call(&["DBSIZE"]),
        Reply::Integer(KEYS as i64),
        "{when}: DBSIZE"
    );
    let wrong: Vec<(String, Reply)> = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..CONNECTIONS)
            .map(|part| {
                scope.spawn(move || {
                    let mut raw = Raw::connect(port).expect("connect a reader");
                    wrong_values(&mut raw, part, CONNECTIONS)
                })
            })
            .collect();
        readers
            .into_iter()
            .flat_map(|reader| reader.join().expect("a reader thread"))
            .collect()
    });
    assert!(
        wrong.is_empty(),
        "{when}: {} of {KEYS} keys read back wrong, the first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// Bytes of the files in the storage tier's directory, `<dir>/log` (the server's data
/// directory is the engine's).
fn page_file_bytes(dir: &Path) -> u64 {
    files_named(&dir.join("log"), "").into_iter().sum()
}

/// Sizes of the files under `dir` (recursively) whose name is `name` (any name if empty).
fn files_named(dir: &Path, name: &str) -> Vec<u64> {
    let mut sizes = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
    {
        let entry = entry.unwrap();
        let metadata = entry.metadata().unwrap();
        if metadata.is_dir() {
            sizes.extend(files_named(&entry.path(), name));
        } else if name.is_empty() || entry.file_name() == name {
            sizes.push(metadata.len());
        }
    }
    sizes
}

/// Bytes process `pid` has read so far (`rchar` of `/proc/PID/io`: files and sockets).
fn read_chars(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("/proc/PID/io");
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .expect("rchar in /proc/PID/io")
        .parse()
        .expect("a number")
}

fn info_number(raw: &mut Raw, field: &str) -> u64 {
    raw.info_field("memory", field).parse().unwrap()
}

/// What every check of the tier's memory and page file expects after the whole dataset was
/// written (or recovered): the log within its budget, and the rest of the data in the file.
fn check_tiered_layout(raw: &mut Raw, dir: &Path, when: &str) {
    let values = (KEYS * VALUE_BYTES) as u64;
    let in_use = info_number(raw, "engine_log_memory_in_use");
    assert!(
        in_use <= ENGINE_MEMORY_BYTES,
        "{when}: engine_log_memory_in_use {in_use} is over engine-memory {ENGINE_MEMORY_BYTES}"
    );
    // The log holds at least the values; at most `engine-memory` of it is in memory.
    let on_disk = page_file_bytes(dir);
    assert!(
        on_disk >= values - ENGINE_MEMORY_BYTES,
        "{when}: the page file holds {on_disk} bytes, expected at least {} (values {values} \
         minus engine-memory)",
        values - ENGINE_MEMORY_BYTES
    );
    // INFO's figure for the page file: its data segments, held to the same bound.
    let reported = info_number(raw, "engine_page_file_bytes");
    assert!(
        reported >= values - ENGINE_MEMORY_BYTES && reported <= on_disk,
        "{when}: INFO engine_page_file_bytes {reported}, the directory holds {on_disk} (data and \
         sums), the values need at least {}",
        values - ENGINE_MEMORY_BYTES
    );
    // `used_memory` (what maxmemory limits) counts the live records wherever they are.
    let dataset = info_number(raw, "used_memory_dataset");
    assert!(
        dataset >= values,
        "{when}: used_memory_dataset {dataset} is below the values' {values} bytes"
    );
    println!("{when}: log in memory {in_use}, page file {on_disk}, dataset {dataset}");
}

/// The tiered server's flags. Durability stays `everysec` (so the restart loads a checkpoint and
/// replays the oplog over it); checkpoints every 5 s instead of every second, so that one or two
/// run while the writers evict without the whole growing dataset being rewritten every second
/// (disk and CPU that the test machines' 2 shared cores lack). The page file goes through the
/// page cache (`checkpoint-direct-io no`): the test reads every key back twice, and with direct
/// I/O each cold GET is a device read (about 0.6 ms on the CI machine: over a minute per pass).
fn tier_args() -> Vec<&'static str> {
    vec![
        "--storage-tier",
        "yes",
        "--engine-memory",
        ENGINE_MEMORY,
        "--checkpoint-interval",
        "5000",
        "--checkpoint-direct-io",
        "no",
    ]
}

#[test]
fn data_four_times_engine_memory_reads_back_before_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut server = Server::start(dir.path(), &tier_args());
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["CONFIG", "GET", "storage-tier"]),
        Reply::Array(vec![
            Reply::BulkString("storage-tier".into()),
            Reply::BulkString("yes".into()),
        ])
    );
    // The tier turns garbage compaction off (the engine refuses both).
    assert_eq!(
        raw.call(&["CONFIG", "GET", "engine-compact-dead-fraction"]),
        Reply::Array(vec![
            Reply::BulkString("engine-compact-dead-fraction".into()),
            Reply::BulkString("0".into()),
        ])
    );
    assert_eq!(
        raw.error(&["CONFIG", "SET", "storage-tier", "no"]),
        "ERR CONFIG SET failed (possibly related to argument 'storage-tier') - can't set \
         immutable config"
    );
    load_all(server.port);
    println!("loaded {KEYS} keys in {:?}", started.elapsed());
    check_all(server.port, "after loading");
    check_tiered_layout(&mut raw, dir.path(), "after loading");
    println!("read back in {:?}", started.elapsed());

    raw.send(&[b"SHUTDOWN"]);
    assert_eq!(raw.read(), None, "SHUTDOWN closes the connection");
    let status = server
        .wait_exit(Duration::from_secs(120))
        .expect("the server exits after SHUTDOWN");
    assert!(status.success(), "SHUTDOWN exit status {status:?}");
    println!("shut down after {:?}", started.elapsed());

    let server = Server::start(dir.path(), &tier_args());
    // The restart loaded the incremental checkpoint's index copy (read twice: its CRC is
    // checked when the checkpoint is selected, then it is loaded) and the oplog, and took the
    // key counts from the checkpoint's cookie: it read a small part of the page file at most
    // (counting keys by a scan reads all of it).
    let read_bytes = read_chars(server.pid());
    let on_disk = page_file_bytes(dir.path());
    let index = files_named(&dir.path().join("checkpoints"), "INDEX")
        .into_iter()
        .max()
        .expect("the incremental checkpoint's index copy");
    let oplog: u64 = files_named(&dir.path().join("oplog"), "").into_iter().sum();
    println!(
        "the restart read {read_bytes} bytes; index copy {index}, oplog {oplog}, page file \
         {on_disk}"
    );
    assert!(
        read_bytes < 2 * index + oplog + on_disk / 4,
        "the restart read {read_bytes} bytes (index copy {index}, oplog {oplog}, page file \
         {on_disk}): it read the data"
    );
    let mut raw = server.raw();
    println!("restarted after {:?}", started.elapsed());
    check_all(server.port, "after the restart");
    // Recovery loads the checkpoint into the log and evicts as it loads.
    check_tiered_layout(&mut raw, dir.path(), "after the restart");
    println!("done in {:?}", started.elapsed());
}

#[test]
fn without_the_tier_the_same_data_runs_out_of_engine_memory() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--engine-memory", ENGINE_MEMORY]);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["CONFIG", "GET", "storage-tier"]),
        Reply::Array(vec![
            Reply::BulkString("storage-tier".into()),
            Reply::BulkString("no".into()),
        ])
    );
    assert_eq!(info_number(&mut raw, "engine_page_file_bytes"), 0);
    // A write at the budget waits for compaction (the engine's `memory_wait_limit`, 30 s)
    // before it fails: longer than the harness's read timeout. And the server answers a
    // pipelined batch at its end, so every write after the first OOM in a batch would wait as
    // long: pipelined batches only while the log is well below the writers' budget (6 of the 8
    // pages, the rest is compaction's reserve), then one SET at a time. `engine_log_memory_in_use`
    // only times the switch; a batch is at most 4000 records (about 0.6 MB of log).
    raw.stream
        .set_read_timeout(Some(Duration::from_secs(90)))
        .unwrap();
    let mut one_at_a_time = false;
    let batch = |raw: &mut Raw| {
        one_at_a_time = one_at_a_time || info_number(raw, "engine_log_memory_in_use") >= 16 * MIB;
        if one_at_a_time {
            1
        } else {
            BATCH
        }
    };
    let (i, reply) = match load(&mut raw, 0, 1, batch) {
        Ok(()) => {
            panic!("{KEYS} keys of {VALUE_BYTES} bytes fit in {ENGINE_MEMORY} of engine memory")
        }
        Err(failure) => failure,
    };
    assert_eq!(
        reply,
        Reply::Error("OOM command not allowed when used memory > 'maxmemory'.".into()),
        "key {i}"
    );
    // It failed at the budget: the values written before it fit in it.
    assert!(
        (i * VALUE_BYTES) as u64 <= ENGINE_MEMORY_BYTES,
        "the first OOM came at key {i}, after more values than engine-memory holds"
    );
    println!("without the tier: OOM at key {i} of {KEYS}");
}

#[test]
fn the_tier_with_garbage_compaction_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let text = common::failed_start(
        &[
            "--port",
            "0",
            "--storage-tier",
            "yes",
            "--engine-compact-dead-fraction",
            "0.5",
        ],
        dir.path(),
    );
    assert!(
        text.contains("engine-compact-dead-fraction 0.5 cannot be combined with storage-tier yes"),
        "{text}"
    );
    let text = common::failed_start(&["--port", "0", "--storage-tier", "maybe"], dir.path());
    assert!(text.contains("--storage-tier"), "{text}");
}

/// A tiered restart takes DBSIZE, the keys with an expiry and the next collection object id from
/// the incremental checkpoint's cookie (counts taken with no write running), then counts the
/// oplog's writes on top: after a SIGKILL the counts match what the client was told, and a
/// collection created after the restart gets an id no recovered collection has.
#[test]
fn a_tiered_restart_counts_keys_from_the_checkpoint_and_the_oplog() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--storage-tier",
        "yes",
        "--engine-memory",
        ENGINE_MEMORY,
        "--appendfsync",
        "always",
        "--checkpoint-interval",
        "3600000",
    ];
    let mut server = Server::start(dir.path(), &args);
    let mut raw = server.raw();
    let mut model: std::collections::BTreeMap<String, String> = Default::default();
    for i in 0..1000 {
        let key = format!("k{i}");
        assert_eq!(
            raw.call(&["SET", &key, "v"]),
            Reply::SimpleString("OK".into())
        );
        model.insert(key, "v".into());
    }
    for i in 0..10 {
        assert_eq!(
            raw.call(&["EXPIRE", &format!("k{i}"), "100000"]),
            Reply::Integer(1)
        );
    }
    assert_eq!(
        raw.call(&["HSET", "h:old", "a", "1", "b", "2"]),
        Reply::Integer(2)
    );
    assert_eq!(raw.call(&["SAVE"]), Reply::SimpleString("OK".into()));
    // After the checkpoint: in the oplog only.
    for i in 990..1000 {
        assert_eq!(raw.call(&["DEL", &format!("k{i}")]), Reply::Integer(1));
        model.remove(&format!("k{i}"));
    }
    for i in 0..7 {
        let key = format!("new{i}");
        assert_eq!(
            raw.call(&["SET", &key, "w"]),
            Reply::SimpleString("OK".into())
        );
        model.insert(key, "w".into());
    }
    assert_eq!(raw.call(&["HSET", "h:mid", "c", "3"]), Reply::Integer(1));
    let keys = model.len() as i64 + 2;
    assert_eq!(raw.call(&["DBSIZE"]), Reply::Integer(keys));
    server.kill();

    let server = Server::start(dir.path(), &args);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["DBSIZE"]),
        Reply::Integer(keys),
        "DBSIZE after the restart"
    );
    // (`expires` is the expiry sweep's estimate, kept as it was at the checkpoint.)
    let keyspace = raw.info_field("keyspace", "db0");
    assert!(
        keyspace.starts_with(&format!("keys={keys},")),
        "INFO keyspace after the restart: {keyspace}"
    );
    for i in 0..10 {
        assert!(
            matches!(raw.call(&["TTL", &format!("k{i}")]), Reply::Integer(ttl) if ttl > 0),
            "k{i} kept its expiry"
        );
    }
    for (key, value) in &model {
        assert_eq!(
            raw.call(&["GET", key]),
            Reply::BulkString(value.clone().into()),
            "{key}"
        );
    }
    // A collection made now must not take the id of one recovered.
    assert_eq!(raw.call(&["HSET", "h:new", "z", "9"]), Reply::Integer(1));
    let fields = |raw: &mut Raw, key: &str| match raw.call(&["HGETALL", key]) {
        Reply::Array(items) => items.len(),
        other => panic!("HGETALL {key}: {other:?}"),
    };
    assert_eq!(
        fields(&mut raw, "h:old"),
        4,
        "h:old after a new hash was created"
    );
    assert_eq!(fields(&mut raw, "h:mid"), 2);
    assert_eq!(fields(&mut raw, "h:new"), 2);
    assert_eq!(raw.call(&["DBSIZE"]), Reply::Integer(keys + 1));
}
