//! Client-library and application checks (`tests/go_redis.rs`, `tests/jedis.rs`,
//! `tests/apps.rs`): a program written against one client library or application, built once,
//! then run against a real redis-server and against prefixkv-server (client libraries in RESP2
//! and in RESP3). Passing against redis-server shows the program expects what Redis
//! answers; passing against prefixkv-server shows we answer the same.
//!
//! Invariants: every child process is bounded ([`BUILD_LIMIT`], [`RUN_LIMIT`]); a missing tool
//! fails the test with what to install (never a skip: `./scripts/test` checks for the tools, and
//! CI has them); build output goes under Cargo's `target/tmp`, never into the source tree.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::Server;

/// A build that downloads its dependencies the first time (Go modules, Maven artifacts).
pub const BUILD_LIMIT: Duration = Duration::from_secs(600);
/// One run of a check program against one server.
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Where a check program named `name` is built: under Cargo's `target/tmp`, ignored by git.
pub fn build_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Fails the test unless `program args` runs and exits 0; `install` says what to install.
pub fn require_tool(program: &str, args: &[&str], install: &str) {
    let mut command = Command::new(program);
    command.args(args);
    match prefixkv_testkit::child::output_within(command, Duration::from_secs(60)) {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "`{program} {}` failed ({}): {}\n{install}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        Err(error) => panic!("cannot run `{program}`: {error}\n{install}"),
    }
}

/// Runs a build step, bounded by [`BUILD_LIMIT`]; panics with its output when it fails.
pub fn build(what: &str, command: Command) {
    let started = Instant::now();
    let output = prefixkv_testkit::child::output_within(command, BUILD_LIMIT)
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}",
        output.status,
        printed(&output)
    );
    eprintln!("{what}: {:.1} s", started.elapsed().as_secs_f64());
}

fn printed(output: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout).trim(),
        String::from_utf8_lossy(&output.stderr).trim()
    )
}

/// Starts a prefixkv-server and a redis-server and runs `check(port, protocol)` against each in
/// RESP2 and RESP3 (the program flushes the database first, so the runs do not see each other's
/// keys). Each run must exit 0 and print a line starting with `ok `.
pub fn run_against_both(label: &str, mut check: impl FnMut(u16, u8) -> Command) {
    for_both_servers(|server, port| {
        for protocol in [2, 3] {
            run_check(
                &format!("{label} against {server} in RESP{protocol}"),
                check(port, protocol),
            );
        }
    });
}

/// Starts a redis-server and a prefixkv-server (its defaults but `appendfsync everysec`) and
/// calls `each(name, port)` for redis-server first: a failure there is a wrong expectation in
/// the program, not a server bug.
pub fn for_both_servers(mut each: impl FnMut(&str, u16)) {
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = Server::start_redis(redis_dir.path());
    each("redis-server", redis.port);
    drop(redis);
    let prefixkv_dir = tempfile::tempdir().unwrap();
    let prefixkv = Server::start(
        prefixkv_dir.path(),
        &["--appendfsync", "everysec", "--engine-memory", "64mb"],
    );
    each("prefixkv-server", prefixkv.port);
}

/// Runs one check program, bounded by [`RUN_LIMIT`]: it must exit 0 with a line of its
/// standard output starting with `ok `.
pub fn run_check(what: &str, command: Command) {
    let started = Instant::now();
    let output = prefixkv_testkit::child::output_within(command, RUN_LIMIT)
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let ok = stdout.lines().find(|line| line.starts_with("ok "));
    assert!(
        output.status.success() && ok.is_some(),
        "{what} failed ({}):\n{}",
        output.status,
        printed(&output)
    );
    eprintln!(
        "{what}: {} in {:.1} s",
        ok.unwrap_or_default(),
        started.elapsed().as_secs_f64()
    );
}
