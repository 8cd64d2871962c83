//! Runs `redis-benchmark -t <test> -c <clients> -r <keyspace> -n <requests> -P <pipeline> --csv`
//! against one server, one test per run (so that the server's CPU time can be charged to the
//! test), and parses its CSV output. Tests redis-benchmark has no `-t` name for ([`command_of`]:
//! `evalsha`, `xadd`) run as a command line of their own.
//!
//! The CSV shape (Redis 7): a header line
//! `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"`
//! then one quoted line per test. Older versions print only `"test","rps"`; the latency columns
//! are then absent (reported as null), and a missing `rps` is an error naming the output.

use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// One test's result line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The test's name as redis-benchmark prints it (`SET`, `GET`, `LPUSH`, ...).
    pub test: String,
    /// Requests per second.
    pub requests_per_s: f64,
    /// p99 latency, if the version prints it.
    pub p99_latency_ms: Option<f64>,
}

/// The rate limiter's script of the `evalsha` test, as such libraries write it: count a request
/// in a fixed window and start the window's expiry with the first one.
pub const RATE_LIMIT_SCRIPT: &str = "local n = redis.call('INCR', KEYS[1]) \
     if n == 1 then redis.call('EXPIRE', KEYS[1], 60) end return n";

/// The command line of a test that redis-benchmark has no `-t` name for (`None`: a `-t` test).
/// `evalsha` needs the SHA1 of [`RATE_LIMIT_SCRIPT`] as loaded on the server (`SCRIPT LOAD`).
pub fn command_of(test: &str, script_sha: &str) -> Option<Vec<String>> {
    let words: &[&str] = match test {
        // A rate limiter keyed by user: __rand_int__ is below `-r`.
        "evalsha" => &["EVALSHA", script_sha, "1", "ratelimit:__rand_int__"],
        // One event stream that every client appends to, capped as BullMQ caps its own.
        "xadd" => &[
            "XADD",
            "bench:events",
            "MAXLEN",
            "~",
            "10000",
            "*",
            "field",
            "value",
        ],
        _ => return None,
    };
    Some(words.iter().map(|w| w.to_string()).collect())
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Load {
    /// The test, lower case: a `-t` name (`set`, `lpush`, ...) or one of [`command_of`]'s.
    pub test: String,
    /// The command line, for a test run as one ([`command_of`]).
    pub command: Option<Vec<String>>,
    /// `-c`.
    pub clients: usize,
    /// `-r`.
    pub keyspace: u64,
    /// `-n`.
    pub requests: u64,
    /// `-P`.
    pub pipeline: usize,
}

/// Runs redis-benchmark against `127.0.0.1:port` and returns its line for the test (named by
/// the test in upper case, whatever redis-benchmark calls a command-line test).
pub fn run(redis_benchmark: &Path, port: u16, load: &Load) -> Result<Line> {
    let mut command = Command::new(redis_benchmark);
    command.args(["-h", "127.0.0.1", "-p", &port.to_string()]);
    if load.command.is_none() {
        command.args(["-t", &load.test]);
    }
    command
        .args(["-c", &load.clients.to_string()])
        .args(["-r", &load.keyspace.to_string()])
        .args(["-n", &load.requests.to_string()])
        .args(["-P", &load.pipeline.to_string()])
        .arg("--csv");
    if let Some(words) = &load.command {
        command.args(words);
    }
    let output = command
        .output()
        .with_context(|| format!("running {}", redis_benchmark.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "redis-benchmark against port {port} failed ({}): {} {}",
            output.status,
            stdout.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let wanted = load.test.to_ascii_uppercase();
    let mut lines = parse_csv(&stdout)?;
    if load.command.is_some() && lines.len() == 1 {
        // A command-line test's line is named by its command line.
        lines[0].test = wanted.clone();
    }
    lines
        .into_iter()
        .find(|line| line.test == wanted)
        .ok_or_else(|| {
            anyhow!(
                "redis-benchmark printed no {wanted} line: {}",
                stdout.trim()
            )
        })
}

/// CPU time (user + system, every thread) the process `pid` has used so far, in microseconds,
/// from `/proc/<pid>/stat` (clock-tick resolution: 10 ms at the usual 100 Hz).
pub fn cpu_time_us(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    cpu_ticks_of_stat(&stat)
        .map(|ticks| ticks * 1_000_000 / clock_ticks_per_s())
        .ok_or_else(|| anyhow!("/proc/{pid}/stat has no utime/stime: {stat}"))
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line; the command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its last `)`.
fn cpu_ticks_of_stat(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
    }
}

/// Parses redis-benchmark's `--csv` output.
pub fn parse_csv(text: &str) -> Result<Vec<Line>> {
    let mut columns: Vec<String> = Vec::new();
    let mut lines = Vec::new();
    for raw in text.lines().map(str::trim).filter(|l| l.starts_with('"')) {
        let cells: Vec<String> = raw
            .split(',')
            .map(|cell| cell.trim().trim_matches('"').to_string())
            .collect();
        if cells.first().map(String::as_str) == Some("test") {
            columns = cells;
            continue;
        }
        if columns.is_empty() {
            // Versions without a header print `"SET","12345.00"`.
            columns = vec!["test".into(), "rps".into()];
        }
        let field = |name: &str| -> Option<&str> {
            let index = columns.iter().position(|c| c == name)?;
            cells.get(index).map(String::as_str)
        };
        let test = field("test")
            .ok_or_else(|| anyhow!("redis-benchmark line without a test name: {raw}"))?;
        let requests_per_s: f64 = field("rps")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("redis-benchmark line without a numeric rps: {raw}"))?;
        lines.push(Line {
            test: test.to_string(),
            requests_per_s,
            p99_latency_ms: field("p99_latency_ms").and_then(|v| v.parse().ok()),
        });
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_7_csv() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                    \"SET\",\"84033.61\",\"9.024\",\"0.296\",\"4.103\",\"14.959\",\"99.391\",\"99.647\"\n\
                    \"GET\",\"100000.00\",\"6.908\",\"0.376\",\"3.975\",\"29.151\",\"39.871\",\"40.159\"\n";
        let lines = parse_csv(text).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].test, "SET");
        assert_eq!(lines[0].requests_per_s, 84033.61);
        assert_eq!(lines[1].p99_latency_ms, Some(39.871));
    }

    #[test]
    fn parses_headerless_csv_and_rejects_garbage() {
        let lines = parse_csv("\"SET\",\"1000.00\"\n").unwrap();
        assert_eq!(lines[0].requests_per_s, 1000.0);
        assert_eq!(lines[0].p99_latency_ms, None);
        assert!(parse_csv("\"test\",\"rps\"\n\"SET\",\"fast\"\n").is_err());
    }

    #[test]
    fn reads_cpu_ticks_after_a_name_with_spaces() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        let stat = "42 (prefixkv (x) y) S 1 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 9";
        assert_eq!(cpu_ticks_of_stat(stat), Some(300));
        assert_eq!(cpu_ticks_of_stat("42 (short"), None);
        assert!(cpu_time_us(std::process::id()).is_ok());
    }

    #[test]
    fn command_tests_have_command_lines() {
        let evalsha = command_of("evalsha", "abc").unwrap();
        assert_eq!(&evalsha[..3], ["EVALSHA", "abc", "1"]);
        assert!(command_of("xadd", "").is_some());
        assert!(command_of("set", "").is_none());
    }
}
