//! Fixed-count r90w10 loop for instruction counting under `valgrind --tool=cachegrind`:
//! `pathcost engine|dashmap <ops>`; run once with 0 ops to subtract the preload. Environment:
//! `KEYS` (default 65536), `PER_BUCKET` (keys per index bucket, default 6).

use prefixkv_engine::{Store, StoreConfig};

fn keys() -> u64 {
    std::env::var("KEYS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(65536)
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let mode = arguments
        .get(1)
        .map_or("engine", String::as_str)
        .to_string();
    let keys = keys();
    let ops: u64 = arguments
        .get(2)
        .and_then(|text| text.parse().ok())
        .unwrap_or(1_000_000);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    if mode == "engine" {
        let dir = std::env::temp_dir().join(format!("prefixkv-pathcost-{}", std::process::id()));
        let mut config = StoreConfig::new(&dir);
        // Keys per bucket (the docs advise at most 6); `PER_BUCKET=2` reproduces the runs before
        // the compact record format.
        let per_bucket: usize = std::env::var("PER_BUCKET")
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(6);
        config.index_buckets = (keys as usize / per_bucket).next_power_of_two();
        let store = Store::open(config).unwrap();
        let mut session = store.start_session();
        for key in 0..keys {
            session
                .upsert(&key.to_le_bytes(), &key.to_le_bytes())
                .unwrap();
        }
        let mut out = Vec::with_capacity(8);
        for _ in 0..ops {
            let random = next();
            let key = (random >> 8) % keys;
            if random.is_multiple_of(10) {
                session
                    .upsert(&key.to_le_bytes(), &random.to_le_bytes())
                    .unwrap();
            } else {
                session.read(&key.to_le_bytes(), &mut out).unwrap();
            }
        }
        drop(session);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        let map = dashmap::DashMap::<u64, u64>::new();
        for key in 0..keys {
            map.insert(key, key);
        }
        for _ in 0..ops {
            let random = next();
            let key = (random >> 8) % keys;
            if random.is_multiple_of(10) {
                map.insert(key, random);
            } else {
                std::hint::black_box(map.get(&key).map(|value| *value));
            }
        }
    }
}
