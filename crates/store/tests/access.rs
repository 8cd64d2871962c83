//! The eviction API through the durable store: touches and samples are pass-throughs to the
//! engine (not logged: a replayed log restores values, not access words), and `live_bytes`
//! follows deletes at once while `used_memory_bytes` (log pages) does not.

use prefixkv_store::{Durability, DurableStore, Options};

fn options(dir: &std::path::Path) -> Options {
    let mut options = Options::new(dir, Durability::EverySec);
    options.engine.index_buckets = 1 << 10;
    options.engine.log_memory_bytes = 8 << 20;
    options.engine.log_page_bytes = 64 << 10;
    options
}

#[test]
fn touches_samples_and_live_bytes_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = DurableStore::open(options(dir.path())).unwrap();
    let index_bytes = store.engine().index_bytes();
    assert_eq!(index_bytes, (1 << 10) * 64, "main buckets only");
    assert_eq!(store.live_bytes(), index_bytes, "no live records yet");
    store.set_access_stamp(42);
    let mut session = store.session().unwrap();
    {
        let mut txn = session.begin(&[b"a", b"b"]);
        txn.put(b"a", b"1").unwrap();
        txn.put(b"b", b"2").unwrap();
        let mut out = Vec::new();
        assert!(txn.get_touch(b"a", &mut out, |old| old + 1).unwrap());
        assert_eq!(out, b"1");
        txn.commit().unwrap();
    }
    assert_eq!(session.access_of(b"a").unwrap(), Some(43));
    assert_eq!(session.access_of(b"b").unwrap(), Some(42));
    assert_eq!(session.access_of(b"c").unwrap(), None);
    assert!(session.touch(b"b", |_| 7).unwrap());
    let mut out = Vec::new();
    assert!(session.read_touch(b"b", &mut out, |old| old * 3).unwrap());
    assert_eq!(session.access_of(b"b").unwrap(), Some(21));
    let mut sampled = Vec::new();
    session.sample(0, 10, &mut sampled).unwrap();
    sampled.sort_by(|x, y| x.key.cmp(&y.key));
    let found: Vec<(Vec<u8>, u32)> = sampled.into_iter().map(|s| (s.key, s.access)).collect();
    assert_eq!(found, vec![(b"a".to_vec(), 43), (b"b".to_vec(), 21)]);

    let record = store.engine().record_bytes(1, 1) as u64;
    assert_eq!(store.live_bytes(), index_bytes + 2 * record);
    let pages = store.used_memory_bytes();
    {
        let mut txn = session.begin(&[b"a"]);
        txn.delete(b"a").unwrap();
        txn.commit().unwrap();
    }
    assert_eq!(
        store.live_bytes(),
        index_bytes + record,
        "a delete frees at once"
    );
    assert_eq!(store.used_memory_bytes(), pages, "the log keeps its pages");
}
