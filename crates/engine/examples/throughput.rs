//! Quick single-run throughput check (not the benchmark: that is `prefixkv-bench cpr`):
//! r90w10 over 8-byte keys and values, uniform, engine vs dashmap.
//! `cargo run --release -p prefixkv-engine --example throughput -- [threads] [seconds] [keys]`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prefixkv_engine::{Store, StoreConfig};

fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn run(
    threads: usize,
    seconds: f64,
    op: impl Fn(usize) -> Box<dyn FnMut(u64, bool) + Send> + Sync,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let mut body = op(thread);
            let (stop, total) = (stop.clone(), total.clone());
            scope.spawn(move || {
                let mut state = 0x9E3779B97F4A7C15u64 ^ ((thread as u64 + 1) * 7919);
                let mut count = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..1024 {
                        let random = next(&mut state);
                        body(random, random.is_multiple_of(10));
                    }
                    count += 1024;
                }
                total.fetch_add(count, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    total.load(Ordering::Relaxed) as f64 / seconds
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let threads: usize = arguments
        .get(1)
        .and_then(|text| text.parse().ok())
        .unwrap_or(2);
    let seconds: f64 = arguments
        .get(2)
        .and_then(|text| text.parse().ok())
        .unwrap_or(2.0);
    let keys: u64 = arguments
        .get(3)
        .and_then(|text| text.parse().ok())
        .unwrap_or(1 << 20);
    let dir = std::env::temp_dir().join(format!("prefixkv-throughput-{}", std::process::id()));
    let mut config = StoreConfig::new(&dir);
    config.index_buckets = (keys as usize / 2).next_power_of_two().max(1024);
    config.log_memory_bytes = 1 << 30;
    config.log_page_bytes = std::env::var("PAGE_BYTES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(1 << 20);
    let store = Store::open(config).unwrap();
    {
        let mut session = store.start_session();
        for key in 0..keys {
            session
                .upsert(&key.to_le_bytes(), &key.to_le_bytes())
                .unwrap();
        }
    }
    let map = Arc::new(dashmap::DashMap::<u64, u64>::new());
    for key in 0..keys {
        map.insert(key, key);
    }
    for round in 0..3 {
        let engine = run(threads, seconds, |_| {
            let mut session = store.start_session();
            let mut out = Vec::with_capacity(8);
            Box::new(move |random, write| {
                let key = (random >> 8) % keys;
                if write {
                    session
                        .upsert(&key.to_le_bytes(), &random.to_le_bytes())
                        .unwrap();
                } else {
                    session.read(&key.to_le_bytes(), &mut out).unwrap();
                }
            })
        });
        let dash = run(threads, seconds, |_| {
            let map = map.clone();
            Box::new(move |random, write| {
                let key = (random >> 8) % keys;
                if write {
                    map.insert(key, random);
                } else {
                    std::hint::black_box(map.get(&key).map(|value| *value));
                }
            })
        });
        println!(
            "round {round}: engine {:.2} Mops/s, dashmap {:.2} Mops/s, ratio {:.2}",
            engine / 1e6,
            dash / 1e6,
            engine / dash
        );
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
