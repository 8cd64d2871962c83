//! The result file every experiment writes, in the shape `docs/benchmarks.md` describes.
//!
//! Invariants: field names are stable (scripts read them); units live in field names.
//!
//! `verified` is earned, never assumed: it is `null` until a check runs, `true` only when at least
//! one check ran and every check passed, `false` as soon as one failed. Each check is listed in
//! `checks` with what it compared and against what, so a reader can tell a recovered state
//! compared with what clients were acknowledged from a count compared with itself. A check that
//! runs more than once (one per round or cell) is folded into one entry: `n` adds up, `passed`
//! is the conjunction.

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Facts about the machine a run happened on, stored beside every result.
#[derive(Debug, Clone, Serialize)]
pub struct Host {
    /// Logical CPUs visible to the process.
    pub cpus: usize,
    /// Physical memory in bytes (from `/proc/meminfo`).
    pub memory_bytes: u64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// The first CPU's nominal clock in MHz (`/proc/cpuinfo`), or 0. Cycle figures
    /// (`*_cycles_per_byte_estimated`) are CPU time times this clock, estimates: virtual machines
    /// often have no cycle counter to read.
    pub cpu_mhz: f64,
}

impl Host {
    /// Reads the host facts; missing facts become 0 / "unknown" rather than failing a run.
    pub fn detect() -> Host {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|line| line.starts_with("MemTotal:"))
                    .and_then(|line| line.split_whitespace().nth(1))
                    .and_then(|kib| kib.parse::<u64>().ok())
            })
            .map_or(0, |kib| kib * 1024);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let cpu_mhz = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|line| line.starts_with("cpu MHz"))
                    .and_then(|line| line.split(':').nth(1))
                    .and_then(|mhz| mhz.trim().parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        Host {
            cpus,
            memory_bytes,
            kernel,
            cpu_mhz,
        }
    }
}

/// One experiment's results: config, one row per (variant, parameter point), named summary ratios.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The experiment's name, also the result file's stem (`results/<experiment>.json`).
    pub experiment: String,
    /// Version of this JSON shape.
    pub version: u32,
    /// Short commit hash of the code that ran, or "unknown".
    pub git_commit: String,
    /// The machine.
    pub host: Host,
    /// Everything that shaped the run (sizes, durations, durability settings of every contender).
    pub config: Map<String, Value>,
    /// One object per (variant, parameter point): medians plus `_min`/`_max` of the headline metric.
    pub rows: Vec<Map<String, Value>>,
    /// The ratios the experiment exists to show.
    pub summary: Map<String, Value>,
    /// `Some(true)` only if at least one check ran and all passed; `None` (`null`) if none ran.
    pub verified: Option<bool>,
    /// Every check the run performed, folded by (`what`, `against`).
    pub checks: Vec<Check>,
    /// Where the run had to scale down from the seed's experiment, in words.
    pub notes: Vec<String>,
}

/// One kind of check a run performed, in words a reader of the JSON can judge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked, e.g. "every key of the recovered server".
    pub what: String,
    /// The reference it was compared with, e.g. "each writer's last acknowledged value".
    pub against: String,
    /// How many items (keys, images, operations, cells) were compared, summed over every run.
    pub n: u64,
    /// True only if every run of this check passed.
    pub passed: bool,
}

impl Report {
    /// Starts an empty report for `experiment`; `verified` starts `null` and is set by
    /// [`Report::check`].
    pub fn new(experiment: &str) -> Report {
        Report {
            experiment: experiment.to_string(),
            version: 1,
            git_commit: git_commit(),
            host: Host::detect(),
            config: Map::new(),
            rows: Vec::new(),
            summary: Map::new(),
            verified: None,
            checks: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Records that a check ran: `what` was compared with `against` over `n` items and
    /// `passed` or not. Folds into an existing entry with the same `what` and `against`.
    pub fn check(&mut self, what: &str, against: &str, n: u64, passed: bool) {
        assert!(
            !what.is_empty() && !against.is_empty(),
            "a check says what it compared"
        );
        self.verified = Some(self.verified.unwrap_or(true) && passed);
        match self
            .checks
            .iter_mut()
            .find(|c| c.what == what && c.against == against)
        {
            Some(check) => {
                check.n += n;
                check.passed &= passed;
            }
            None => self.checks.push(Check {
                what: what.to_string(),
                against: against.to_string(),
                n,
                passed,
            }),
        }
    }

    /// True when a check ran and one failed; a run with no check has not failed.
    pub fn failed(&self) -> bool {
        self.verified == Some(false)
    }

    /// The verdict as JSON: `true`, `false` or `null`.
    pub fn verified_json(&self) -> Value {
        self.verified.map_or(Value::Null, Value::from)
    }

    /// Sets a config entry.
    pub fn config(&mut self, key: &str, value: impl Into<Value>) {
        self.config.insert(key.to_string(), value.into());
    }

    /// Sets a summary entry. Non-finite ratios (a zero denominator) are stored as `null`, so the
    /// JSON stays valid and a reader sees that the ratio could not be formed.
    pub fn summary(&mut self, key: &str, value: f64) {
        let value = if value.is_finite() {
            Value::from(value)
        } else {
            Value::Null
        };
        self.summary.insert(key.to_string(), value);
    }

    /// Writes `<out>/<experiment>.json` and a copy named with a UTC timestamp; returns the path.
    pub fn write(&self, out_dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(out_dir)
            .with_context(|| format!("creating the results directory {}", out_dir.display()))?;
        let text = serde_json::to_string_pretty(self)?;
        let path = out_dir.join(format!("{}.json", self.experiment));
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        let stamped = out_dir.join(format!("{}-{}.json", self.experiment, utc_timestamp()));
        std::fs::write(&stamped, &text)
            .with_context(|| format!("writing {}", stamped.display()))?;
        Ok(path)
    }
}

/// Builds a JSON row from `(name, value)` pairs.
pub fn row<I, K, V>(fields: I) -> Map<String, Value>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<Value>,
{
    fields
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// `YYYYMMDDTHHMMSSZ` for the current UTC time, computed without a date crate.
fn utc_timestamp() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's civil-from-days algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_are_right() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
    }

    #[test]
    fn report_round_trips_and_nulls_non_finite_ratios() {
        let dir = tempfile::tempdir().unwrap();
        let mut report = Report::new("unit");
        report.summary("ratio", 2.0);
        report.summary("broken", f64::NAN);
        report
            .rows
            .push(row([("variant", Value::from("a")), ("x", Value::from(1))]));
        report.check("a", "b", 1, false);
        let path = report.write(dir.path()).unwrap();
        let parsed: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(parsed["summary"]["ratio"], 2.0);
        assert!(parsed["summary"]["broken"].is_null());
        assert_eq!(parsed["verified"], false);
        assert_eq!(parsed["checks"][0]["passed"], false);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_run_with_no_checks_is_not_verified_but_null() {
        let dir = tempfile::tempdir().unwrap();
        let report = Report::new("unit");
        assert_eq!(report.verified, None);
        assert!(!report.failed());
        let path = report.write(dir.path()).unwrap();
        let parsed: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(parsed["verified"].is_null());
        assert_eq!(parsed["checks"], Value::Array(Vec::new()));
    }

    #[test]
    fn checks_fold_by_what_and_against_and_one_failure_fails_the_run() {
        let mut report = Report::new("unit");
        report.check("keys", "acks", 10, true);
        report.check("keys", "acks", 5, true);
        assert_eq!(report.verified, Some(true));
        report.check("images", "replay", 3, true);
        report.check("keys", "acks", 1, false);
        assert_eq!(report.verified, Some(false));
        assert!(report.failed());
        assert_eq!(report.checks.len(), 2);
        assert_eq!(report.checks[0].n, 16);
        assert!(!report.checks[0].passed);
        assert!(report.checks[1].passed);
    }
}
