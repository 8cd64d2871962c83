//! Where a checkpoint's time goes, for profiling (not a benchmark: `prefixkv-bench cpr` is):
//! loads `keys` 8-byte keys with values of `VALUE_BYTES` (default 8; the server benchmark's dataset
//! has 1,000-byte values), then takes `checkpoints` checkpoints of `strategy` with no writers, and
//! reopens the store once (recovery). `LOG_PAGE_BYTES` sets the log page. Prints wall time, CPU
//! time and bytes of each step. Run under `perf record -g` or `valgrind --tool=callgrind`.
//! `cargo run --release -p prefixkv-engine --example checkpoint_cost -- [keys] [strategy] [checkpoints] [dir]`

use std::time::{Duration, Instant};

use prefixkv_engine::{Store, StoreConfig, Strategy};

/// CPU time of the whole process (all threads), from `getrusage`.
fn process_cpu() -> Duration {
    // SAFETY: getrusage writes into the struct we own.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let keys: u64 = arguments
        .get(1)
        .and_then(|text| text.parse().ok())
        .unwrap_or(1_000_000);
    let strategy: Strategy = arguments
        .get(2)
        .map_or(Strategy::Persian, |text| text.parse().unwrap());
    let checkpoints: usize = arguments
        .get(3)
        .and_then(|text| text.parse().ok())
        .unwrap_or(3);
    let dir = arguments.get(4).map_or_else(
        || std::env::temp_dir().join(format!("checkpoint-cost-{}", std::process::id())),
        std::path::PathBuf::from,
    );
    let _ = std::fs::remove_dir_all(&dir);
    let value_bytes: usize = std::env::var("VALUE_BYTES")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(8);
    let mut config = StoreConfig::new(&dir);
    config.index_buckets = (keys as usize / 4).next_power_of_two().max(1 << 10);
    config.log_memory_bytes = (keys * (64 + 2 * value_bytes as u64) * 4).max(64 << 20);
    if let Some(bytes) = std::env::var("LOG_PAGE_BYTES")
        .ok()
        .and_then(|t| t.parse().ok())
    {
        config.log_page_bytes = bytes;
    }
    let store = Store::open(config.clone()).unwrap();
    let started = (Instant::now(), process_cpu());
    {
        let mut session = store.start_session();
        let mut value = vec![0u8; value_bytes.max(8)];
        for key in 0..keys {
            value[..8].copy_from_slice(&key.wrapping_mul(31).to_le_bytes());
            session
                .upsert(&key.to_be_bytes(), &value[..value_bytes])
                .unwrap();
        }
    }
    println!(
        "load {keys} keys: {:?} wall, {:?} cpu",
        started.0.elapsed(),
        process_cpu() - started.1
    );
    for _ in 0..checkpoints {
        let started = (Instant::now(), process_cpu());
        let token = store.checkpoint(strategy).unwrap();
        let report = store
            .wait_for_commit(token, Duration::from_secs(600))
            .unwrap();
        let wall = started.0.elapsed();
        let cpu = process_cpu() - started.1;
        println!(
            "{strategy} v{}: {} records, {} bytes, {wall:?} wall, {cpu:?} cpu, {:.0} MB/s, {:.1} cpu ns/byte",
            report.version,
            report.records,
            report.bytes,
            report.bytes as f64 / wall.as_secs_f64() / 1e6,
            cpu.as_nanos() as f64 / report.bytes as f64
        );
    }
    drop(store);
    let started = (Instant::now(), process_cpu());
    let store = Store::open(config).unwrap();
    let info = store.recovery_info().unwrap();
    println!(
        "recover v{}: {} records, {:?} wall, {:?} cpu",
        info.version,
        info.records,
        started.0.elapsed(),
        process_cpu() - started.1
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
