//! Runs `redis-benchmark -t <tests> -c <clients> -r <keyspace> -n <requests> -P <pipeline> --csv`
//! against one server and parses its CSV output.
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

/// What to run.
#[derive(Debug, Clone)]
pub struct Load {
    /// `-t`: redis-benchmark's test names, lower case (`set`, `lpush`, ...).
    pub tests: Vec<String>,
    /// `-c`.
    pub clients: usize,
    /// `-r`.
    pub keyspace: u64,
    /// `-n`.
    pub requests: u64,
    /// `-P`.
    pub pipeline: usize,
}

/// Runs redis-benchmark against `127.0.0.1:port` and returns a line per test.
pub fn run(redis_benchmark: &Path, port: u16, load: Load) -> Result<Vec<Line>> {
    let tests = load.tests.join(",");
    let output = Command::new(redis_benchmark)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", &tests])
        .args(["-c", &load.clients.to_string()])
        .args(["-r", &load.keyspace.to_string()])
        .args(["-n", &load.requests.to_string()])
        .args(["-P", &load.pipeline.to_string()])
        .arg("--csv")
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
    let lines = parse_csv(&stdout)?;
    for wanted in &load.tests {
        let wanted = wanted.to_ascii_uppercase();
        if !lines.iter().any(|line| line.test == wanted) {
            bail!(
                "redis-benchmark printed no {wanted} line: {}",
                stdout.trim()
            );
        }
    }
    Ok(lines)
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
}
