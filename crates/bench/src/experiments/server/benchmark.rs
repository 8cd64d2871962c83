//! Runs `redis-benchmark -t <test> -c <clients> -r <keyspace> -n <requests> -P <pipeline> --csv`
//! against one server, one test per run (so that the server's CPU time can be charged to the
//! test), and parses its CSV output. Tests redis-benchmark has no `-t` name for ([`command_of`]:
//! `evalsha`, `xadd`) run as a command line of their own.
//!
//! [`run_processes`] runs one such load as several redis-benchmark processes at once
//! (`--client-processes`), [`split`] dividing `-c` and `-n` among them so that the cell serves
//! the same requests as one process would, and [`combine`] joining their lines: rates summed,
//! p99 the largest (an upper bound), and the slowest process's wall time kept. [`run`] is the
//! one-process path, unchanged.
//!
//! The CSV shape (Redis 7): a header line
//! `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"`
//! then one quoted line per test. Older versions print only `"test","rps"`; the latency columns
//! are then absent (reported as null), and a missing `rps` is an error naming the output.

use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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
    let output = command_of_load(redis_benchmark, port, load)
        .output()
        .with_context(|| format!("running {}", redis_benchmark.display()))?;
    line_of_output(port, load, &output)
}

/// The redis-benchmark command line of `load` against `127.0.0.1:port`.
fn command_of_load(redis_benchmark: &Path, port: u16, load: &Load) -> Command {
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
    command
}

/// The test's line in a finished redis-benchmark's output, or why there is none.
fn line_of_output(port: u16, load: &Load, output: &Output) -> Result<Line> {
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

/// Most redis-benchmark processes one cell runs at once (`--client-processes`): the machine
/// has 2 cores, so more than a few only adds scheduling noise, and each process holds its own
/// connections and buffers.
pub const MAX_CLIENT_PROCESSES: usize = 8;

/// `processes` if it is in `1..=`[`MAX_CLIENT_PROCESSES`], else an error naming the bound.
pub fn check_client_processes(processes: usize) -> Result<usize> {
    if !(1..=MAX_CLIENT_PROCESSES).contains(&processes) {
        bail!("--client-processes must be between 1 and {MAX_CLIENT_PROCESSES}, not {processes}");
    }
    Ok(processes)
}

/// `load` divided among `processes` redis-benchmark processes: `-n` split with the remainder
/// going one each to the first processes (so the parts sum to `load.requests` exactly), and
/// `-c` split the same way but at least 1 each (so with fewer clients than processes the total
/// is `processes`, not `load.clients`). Fewer requests than processes is an error: a process
/// with `-n 0` would measure nothing.
pub fn split(load: &Load, processes: usize) -> Result<Vec<Load>> {
    let processes = check_client_processes(processes)?;
    if load.requests < processes as u64 {
        bail!(
            "{} requests cannot be divided among {processes} client processes",
            load.requests
        );
    }
    let n = processes as u64;
    Ok((0..processes)
        .map(|index| {
            let requests = load.requests / n + u64::from((index as u64) < load.requests % n);
            let clients = load.clients / processes + usize::from(index < load.clients % processes);
            Load {
                clients: clients.max(1),
                requests,
                ..load.clone()
            }
        })
        .collect())
}

/// One cell's result over the client processes that ran it together.
#[derive(Debug, Clone, PartialEq)]
pub struct Combined {
    /// The test, the summed rate and the largest p99 ([`combine`]).
    pub line: Line,
    /// Wall time of the slowest process, from the start of the first, in seconds: with the
    /// total requests it shows a skewed run (one process left running alone at the end).
    pub slowest_wall_s: f64,
}

/// Combines the lines of processes started together against one server, each with its wall
/// time. The rate is the sum of the processes' rates: they run over the same interval (started
/// together, waited for together), so their requests per second add up like those of one
/// process's clients; a process that finishes early makes the sum an overestimate, which the
/// slowest wall time exposes. The p99 is the largest of their p99s, an upper bound of the p99
/// over all their requests: at most 1 % of each process's requests lie above its own p99, so
/// above the largest, so at most 1 % of all requests do (the merged histogram is not printed).
/// It is `None` if any process printed none.
pub fn combine(parts: &[(Line, Duration)]) -> Result<Combined> {
    let (first, _) = parts
        .first()
        .ok_or_else(|| anyhow!("no client process to combine"))?;
    if let Some((other, _)) = parts.iter().find(|(line, _)| line.test != first.test) {
        bail!(
            "client processes ran different tests: {} and {}",
            first.test,
            other.test
        );
    }
    let p99 = parts
        .iter()
        .map(|(line, _)| line.p99_latency_ms)
        .collect::<Option<Vec<f64>>>()
        .map(|p99s| p99s.into_iter().fold(f64::NEG_INFINITY, f64::max));
    Ok(Combined {
        line: Line {
            test: first.test.clone(),
            requests_per_s: parts.iter().map(|(line, _)| line.requests_per_s).sum(),
            p99_latency_ms: p99,
        },
        slowest_wall_s: parts
            .iter()
            .map(|(_, wall)| wall.as_secs_f64())
            .fold(0.0, f64::max),
    })
}

/// Runs `load` split among `processes` redis-benchmark processes ([`split`]) against
/// `127.0.0.1:port`, all started before any is waited for, and waits for all of them (one
/// thread each, so that each one's end is timed when it happens); then [`combine`]s their lines.
/// A process that fails fails the cell, after the others have finished.
pub fn run_processes(
    redis_benchmark: &Path,
    port: u16,
    load: &Load,
    processes: usize,
) -> Result<Combined> {
    let loads = split(load, processes)?;
    let start = Instant::now();
    let mut children: Vec<Child> = Vec::with_capacity(loads.len());
    for part in &loads {
        let spawned = command_of_load(redis_benchmark, port, part)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Ok(child) => children.push(child),
            Err(error) => {
                // Those already started are killed and reaped, not left running.
                for mut child in children {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                return Err(error)
                    .with_context(|| format!("running {}", redis_benchmark.display()));
            }
        }
    }
    let finished: Vec<Result<(Output, Duration)>> = std::thread::scope(|scope| {
        let waiters: Vec<_> = children
            .into_iter()
            .map(|child| {
                scope.spawn(move || -> Result<(Output, Duration)> {
                    let output = child
                        .wait_with_output()
                        .context("waiting for redis-benchmark")?;
                    Ok((output, start.elapsed()))
                })
            })
            .collect();
        waiters
            .into_iter()
            .map(|waiter| {
                waiter
                    .join()
                    .unwrap_or_else(|_| Err(anyhow!("a redis-benchmark waiter panicked")))
            })
            .collect()
    });
    let mut parts = Vec::with_capacity(loads.len());
    for (result, part) in finished.into_iter().zip(&loads) {
        let (output, wall) = result?;
        parts.push((line_of_output(port, part, &output)?, wall));
    }
    combine(&parts)
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

    fn load(clients: usize, requests: u64) -> Load {
        Load {
            test: "set".into(),
            command: None,
            clients,
            keyspace: 1000,
            requests,
            pipeline: 16,
        }
    }

    fn line(requests_per_s: f64, p99_latency_ms: Option<f64>) -> Line {
        Line {
            test: "SET".into(),
            requests_per_s,
            p99_latency_ms,
        }
    }

    #[test]
    fn splits_requests_and_clients_with_the_remainder_first() {
        let parts = split(&load(50, 1_000_003), 3).unwrap();
        let requests: Vec<u64> = parts.iter().map(|p| p.requests).collect();
        assert_eq!(requests, [333_335, 333_334, 333_334]);
        let clients: Vec<usize> = parts.iter().map(|p| p.clients).collect();
        assert_eq!(clients, [17, 17, 16]);
        assert!(parts
            .iter()
            .all(|p| p.test == "set" && p.pipeline == 16 && p.keyspace == 1000));
        // One process is the load itself.
        let one = split(&load(50, 100), 1).unwrap();
        assert_eq!((one[0].clients, one[0].requests), (50, 100));
        // Fewer clients than processes: one each.
        let few = split(&load(2, 100), 4).unwrap();
        assert_eq!(
            few.iter().map(|p| p.clients).collect::<Vec<_>>(),
            [1, 1, 1, 1]
        );
        // Fewer requests than processes: an error, not a process with -n 0.
        assert!(split(&load(50, 3), 4).is_err());
        assert_eq!(split(&load(50, 4), 4).unwrap().len(), 4);
    }

    #[test]
    fn client_processes_are_bounded() {
        assert!(check_client_processes(0).is_err());
        assert_eq!(check_client_processes(1).unwrap(), 1);
        assert_eq!(check_client_processes(MAX_CLIENT_PROCESSES).unwrap(), 8);
        let error = check_client_processes(9).unwrap_err().to_string();
        assert!(error.contains("between 1 and 8"), "{error}");
        assert!(split(&load(50, 100), 0).is_err());
        assert!(split(&load(50, 100), 9).is_err());
    }

    #[test]
    fn combines_rates_by_sum_and_p99_by_max() {
        let combined = combine(&[
            (line(100_000.0, Some(2.5)), Duration::from_millis(900)),
            (line(150_000.0, Some(4.0)), Duration::from_millis(1500)),
            (line(50_000.0, Some(1.0)), Duration::from_millis(1200)),
        ])
        .unwrap();
        assert_eq!(combined.line.test, "SET");
        assert_eq!(combined.line.requests_per_s, 300_000.0);
        assert_eq!(combined.line.p99_latency_ms, Some(4.0));
        assert_eq!(combined.slowest_wall_s, 1.5);
        // A process without a p99 leaves no bound.
        let partial = combine(&[
            (line(1.0, Some(2.0)), Duration::from_secs(1)),
            (line(2.0, None), Duration::from_secs(1)),
        ])
        .unwrap();
        assert_eq!(partial.line.p99_latency_ms, None);
        assert_eq!(partial.line.requests_per_s, 3.0);
        assert!(combine(&[]).is_err());
        let mut get = line(1.0, None);
        get.test = "GET".into();
        assert!(combine(&[(line(1.0, None), Duration::ZERO), (get, Duration::ZERO)]).is_err());
    }
}
