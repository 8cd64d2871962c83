//! A checkpoint holds whole write transactions: never the first writes of a transaction without
//! its last ones, even when the checkpoint is requested while the transaction runs.
//!
//! Why it matters: in the `checkpoint` mode a crash recovers the checkpoint alone, and in
//! `everysec` it recovers the checkpoint plus whatever of the log reached the disk, so a
//! transaction cut by a checkpoint whose log record was lost would come back half applied (an
//! MSET with some keys set, a multi-record structure with one record new and one old).
//!
//! The oracle is the writers' own record of what they were acknowledged: each writer's
//! transaction `n` writes the same value `n` to the `KEYS_PER_TXN` keys of slot `n % SLOTS`, and
//! counts `n` as acknowledged once `commit` returned. After the crash (in `checkpoint` mode
//! dropping the store without a final checkpoint loses everything after the last one), each
//! writer's keys must be exactly the state after its transactions `1..=N` for one `N` that lies
//! between what it had been acknowledged before the last checkpoint was requested and the last
//! transaction it started: every key of slot `s` holds the newest `n <= N` with `n % SLOTS == s`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use prefixkv_store::{Durability, DurableStore, Options};

const WRITERS: u64 = 2;
const SLOTS: u64 = 64;
const KEYS_PER_TXN: u64 = 4;
const CHECKPOINTS: u32 = 60;

fn options(dir: &std::path::Path) -> Options {
    let mut options = Options::new(dir, Durability::Checkpoint);
    options.engine.index_buckets = 1 << 12;
    options.engine.log_memory_bytes = 64 << 20;
    options.engine.log_page_bytes = 64 << 10;
    options
}

fn key(writer: u64, slot: u64, index: u64) -> Vec<u8> {
    format!("w{writer}:s{slot}:k{index}").into_bytes()
}

/// What one writer was told, counted from its side.
#[derive(Default)]
struct Client {
    started: AtomicU64,
    acknowledged: AtomicU64,
}

fn run_writer(store: &Arc<DurableStore>, writer: u64, client: &Client, stop: &AtomicBool) {
    let mut session = store.session().unwrap();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let slot = n % SLOTS;
        let keys: Vec<Vec<u8>> = (0..KEYS_PER_TXN).map(|i| key(writer, slot, i)).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        client.started.store(n, Ordering::SeqCst);
        let mut txn = session.begin(&refs);
        for key in &keys {
            txn.put(key, &n.to_le_bytes()).unwrap();
            // A writer preempted between two writes of one transaction (as a server thread on
            // a busy machine is): the checkpoint's phases move on meanwhile.
            std::thread::yield_now();
        }
        txn.commit().unwrap().unwrap().wait().unwrap();
        client.acknowledged.store(n, Ordering::SeqCst);
    }
    session.suspend();
}

/// Checks one writer's recovered keys against its client-side counts; `Err` names the first key
/// that is not the state after a prefix of its transactions.
fn check_writer(
    state: &BTreeMap<Vec<u8>, u64>,
    writer: u64,
    acknowledged_before_request: u64,
    started: u64,
) -> Result<(), String> {
    let prefix = (0..SLOTS)
        .flat_map(|slot| (0..KEYS_PER_TXN).map(move |i| (slot, i)))
        .filter_map(|(slot, i)| state.get(&key(writer, slot, i)).copied())
        .max()
        .unwrap_or(0);
    if prefix < acknowledged_before_request || prefix > started {
        return Err(format!(
            "writer {writer}: recovered up to transaction {prefix}, but it had been acknowledged \
             {acknowledged_before_request} before the checkpoint was requested and started {started}"
        ));
    }
    for slot in 0..SLOTS {
        // The newest transaction n <= prefix with n % SLOTS == slot, if any.
        let newest = (prefix >= slot)
            .then(|| prefix - (prefix - slot) % SLOTS)
            .filter(|&n| n > 0);
        for i in 0..KEYS_PER_TXN {
            let found = state.get(&key(writer, slot, i)).copied();
            if found != newest {
                return Err(format!(
                    "writer {writer}: key {} holds {found:?}, but the state after its \
                     transactions 1..={prefix} has {newest:?} there (a transaction cut in two?)",
                    String::from_utf8_lossy(&key(writer, slot, i)),
                ));
            }
        }
    }
    Ok(())
}

fn read_all(store: &Arc<DurableStore>) -> BTreeMap<Vec<u8>, u64> {
    let mut session = store.session().unwrap();
    let mut state = BTreeMap::new();
    let mut cursor = 0;
    loop {
        cursor = session
            .scan(cursor, 256, |key, value| {
                let value = u64::from_le_bytes(value.try_into().expect("8-byte values"));
                state.insert(key.to_vec(), value);
            })
            .unwrap();
        if cursor == 0 {
            return state;
        }
    }
}

#[test]
fn a_checkpoint_requested_during_transactions_holds_each_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let clients: Vec<Client> = (0..WRITERS).map(|_| Client::default()).collect();
    let mut acknowledged_before_last_request = vec![0; WRITERS as usize];
    {
        let (store, _) = DurableStore::open(options(dir.path())).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for (writer, client) in clients.iter().enumerate() {
                let (store, stop) = (&store, &stop);
                scope.spawn(move || run_writer(store, writer as u64, client, stop));
            }
            // Wait until every writer runs, bounded.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while clients
                .iter()
                .any(|c| c.acknowledged.load(Ordering::SeqCst) < SLOTS)
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "writers never started"
                );
                std::thread::yield_now();
            }
            for _ in 0..CHECKPOINTS {
                for (slot, client) in acknowledged_before_last_request.iter_mut().zip(&clients) {
                    *slot = client.acknowledged.load(Ordering::SeqCst);
                }
                store.checkpoint().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        // Dropped without a final checkpoint: in this mode, a crash after the last checkpoint.
    }
    let (store, _) = DurableStore::open(options(dir.path())).unwrap();
    let state = read_all(&store);
    for (writer, client) in clients.iter().enumerate() {
        check_writer(
            &state,
            writer as u64,
            acknowledged_before_last_request[writer],
            client.started.load(Ordering::SeqCst),
        )
        .unwrap();
    }
}

/// The check is not vacuous: a state with one key of one transaction rolled back to its previous
/// value, or with an acknowledged transaction missing, fails it.
#[test]
fn the_check_catches_a_cut_transaction_and_a_lost_acknowledged_one() {
    let prefix = 3 * SLOTS + 5;
    let mut state = BTreeMap::new();
    for n in 1..=prefix {
        for i in 0..KEYS_PER_TXN {
            state.insert(key(0, n % SLOTS, i), n);
        }
    }
    check_writer(&state, 0, prefix, prefix).expect("the state after a prefix passes");
    let mut cut = state.clone();
    cut.insert(key(0, prefix % SLOTS, KEYS_PER_TXN - 1), prefix - SLOTS);
    let error = check_writer(&cut, 0, prefix, prefix).unwrap_err();
    assert!(error.contains("cut in two"), "{error}");
    let error = check_writer(&state, 0, prefix + 1, prefix + 1).unwrap_err();
    assert!(error.contains("acknowledged"), "{error}");
}
