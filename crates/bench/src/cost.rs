//! What a checkpoint costs, in one place for `cpr` and `server`: per-row medians of the engine's
//! [`CheckpointBreakdown`], the cost figures of the summaries (`checkpoint_cycles_per_byte_estimated`,
//! `checkpoint_write_mb_per_s`), and the yardstick the write rate is compared with
//! (`checkpoint_write_over_raw`): what one thread gets writing the same number of bytes in large
//! writes followed by one `fdatasync`, with no scanning, encoding or checksums.
//!
//! Cycles are an estimate, not a count, hence the `_estimated` in the field names: the segment
//! threads' CPU time times the nominal clock `/proc/cpuinfo` reports (`Host::cpu_mhz`), because
//! the virtual machines we measure on expose no cycle counter; turbo, frequency scaling and steal
//! time all make it differ from the cycles really spent. A checkpoint's write rate is its bytes over
//! the image's wall time (segment threads started until the last segment fsynced), so the CPR
//! phase changes before and the publishing after are not in it; they are reported beside it.

use anyhow::{Context, Result};
use prefixkv_engine::CheckpointBreakdown;
use serde_json::{Map, Value};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use crate::report::Report;
use crate::stats::ratio;

/// One checkpoint's estimated cycles per byte: its segment threads' CPU time times the nominal
/// clock `cpu_mhz`, over its bytes (an estimate, see the module comment; never a counted figure).
pub fn cycles_per_byte(breakdown: &CheckpointBreakdown, bytes: u64, cpu_mhz: f64) -> f64 {
    breakdown.thread_cpu.as_secs_f64() * cpu_mhz * 1e6 / bytes.max(1) as f64
}

/// Bytes per second of the image, in MB/s (10^6).
pub fn write_mb_per_s(breakdown: &CheckpointBreakdown, bytes: u64) -> f64 {
    bytes as f64 / breakdown.image.as_secs_f64().max(1e-9) / 1e6
}

/// Adds the medians over `checkpoints` (breakdown, bytes) to a result row, and each checkpoint's
/// own parts in order as `checkpoint_each` (a trend across successive saves hides in a median).
pub fn insert_into(
    row: &mut Map<String, Value>,
    checkpoints: &[(CheckpointBreakdown, u64)],
    cpu_mhz: f64,
) {
    let names = CheckpointBreakdown::PART_NAMES;
    let each: Vec<Value> = checkpoints
        .iter()
        .map(|(breakdown, bytes)| {
            let mut parts = Map::new();
            for (name, part) in names.iter().zip(breakdown.parts()) {
                parts.insert(
                    format!("{name}_ms"),
                    Value::from(part.as_secs_f64() * 1000.0),
                );
            }
            parts.insert("bytes".into(), Value::from(*bytes));
            Value::Object(parts)
        })
        .collect();
    row.insert("checkpoint_each".into(), Value::Array(each));
    for (index, name) in names.iter().enumerate() {
        let values: Vec<f64> = checkpoints
            .iter()
            .map(|(b, _)| b.parts()[index].as_secs_f64() * 1000.0)
            .collect();
        insert_median(row, &format!("checkpoint_{name}_ms"), &values);
    }
    let cycles: Vec<f64> = checkpoints
        .iter()
        .map(|(b, bytes)| cycles_per_byte(b, *bytes, cpu_mhz))
        .collect();
    let rates: Vec<f64> = checkpoints
        .iter()
        .map(|(b, bytes)| write_mb_per_s(b, *bytes))
        .collect();
    if cpu_mhz > 0.0 {
        insert_median(row, "checkpoint_cycles_per_byte_estimated", &cycles);
    } else {
        row.insert("checkpoint_cycles_per_byte_estimated".into(), Value::Null);
    }
    insert_median(row, "checkpoint_write_mb_per_s", &rates);
    let bytes: Vec<f64> = checkpoints.iter().map(|(_, bytes)| *bytes as f64).collect();
    if !row.contains_key("checkpoint_bytes") {
        insert_median(row, "checkpoint_bytes", &bytes);
    }
}

/// The median of a per-checkpoint figure over the checkpoints a summary speaks for (how they
/// are pooled is the experiment's: `cpr` takes the median over rounds of each round's median).
pub type MedianOver<'a> = dyn Fn(&dyn Fn(&(CheckpointBreakdown, u64)) -> f64) -> f64 + 'a;

/// Adds the summary's cost fields: `checkpoint_cycles_per_byte_estimated` (CPU time times the
/// nominal clock, an estimate; null when the host clock is unknown), `checkpoint_write_mb_per_s`, and, measured now in `dir` with as many bytes as the
/// median checkpoint, `raw_write_mb_per_s` and `checkpoint_write_over_raw`.
pub fn summarise(report: &mut Report, dir: &Path, median: &MedianOver) -> Result<()> {
    let cpu_mhz = report.host.cpu_mhz;
    let cycles = median(&|(b, bytes)| cycles_per_byte(b, *bytes, cpu_mhz));
    report.summary(
        "checkpoint_cycles_per_byte_estimated",
        if cpu_mhz > 0.0 { cycles } else { f64::NAN },
    );
    let write_mb_per_s = median(&|(b, bytes)| write_mb_per_s(b, *bytes));
    report.summary("checkpoint_write_mb_per_s", write_mb_per_s);
    let bytes = median(&|(_, bytes)| *bytes as f64);
    if bytes.is_finite() && bytes > 0.0 {
        let raw_mb_per_s = raw_write_bytes_per_s(dir, bytes as u64)? / 1e6;
        report.summary("raw_write_mb_per_s", raw_mb_per_s);
        report.summary(
            "checkpoint_write_over_raw",
            ratio(write_mb_per_s, raw_mb_per_s),
        );
    }
    Ok(())
}

fn insert_median(row: &mut Map<String, Value>, name: &str, values: &[f64]) {
    let median = crate::stats::median(values);
    row.insert(
        name.into(),
        if median.is_finite() {
            Value::from(median)
        } else {
            Value::Null
        },
    );
}

/// Bytes per `write` call of the yardstick: as large as a checkpoint's segment writer hands the file.
const CHUNK_BYTES: usize = 1 << 20;

/// Writes `bytes` (rounded up to a whole chunk) to a new file in `dir`, fdatasyncs it, deletes it,
/// and returns the rate in bytes per second (the fdatasync included).
pub fn raw_write_bytes_per_s(dir: &Path, bytes: u64) -> Result<f64> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let path = dir.join("raw-write-yardstick.tmp");
    // Not all zeros, so that no layer below can take a shortcut for an all-zero page.
    let chunk: Vec<u8> = (0..CHUNK_BYTES).map(|i| (i * 131 % 251) as u8).collect();
    let chunks = bytes.div_ceil(CHUNK_BYTES as u64).max(1);
    let started = Instant::now();
    let mut file =
        std::fs::File::create(&path).with_context(|| format!("create {}", path.display()))?;
    for _ in 0..chunks {
        file.write_all(&chunk)
            .with_context(|| format!("write {}", path.display()))?;
    }
    file.sync_data()
        .with_context(|| format!("fdatasync {}", path.display()))?;
    let elapsed_s = started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
    Ok((chunks * CHUNK_BYTES as u64) as f64 / elapsed_s.max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn cost_figures() {
        let breakdown = CheckpointBreakdown {
            image: Duration::from_millis(500),
            thread_cpu: Duration::from_secs(1),
            ..Default::default()
        };
        // 1 s of CPU at 2000 MHz over 1e9 bytes: 2 cycles per byte; 1e9 bytes in 0.5 s: 2000 MB/s.
        assert!((cycles_per_byte(&breakdown, 1_000_000_000, 2000.0) - 2.0).abs() < 1e-9);
        assert!((write_mb_per_s(&breakdown, 1_000_000_000) - 2000.0).abs() < 1e-6);
        let mut row = Map::new();
        insert_into(&mut row, &[(breakdown, 1_000_000_000)], 0.0);
        assert_eq!(row["checkpoint_cycles_per_byte_estimated"], Value::Null);
        assert_eq!(row["checkpoint_image_ms"], Value::from(500.0));
        assert_eq!(row["checkpoint_each"][0]["image_ms"], Value::from(500.0));
        assert_eq!(
            row["checkpoint_each"][0]["bytes"],
            Value::from(1_000_000_000u64)
        );
    }

    #[test]
    fn measures_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let rate = raw_write_bytes_per_s(dir.path(), 3 << 20).unwrap();
        assert!(rate > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
