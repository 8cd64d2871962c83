//! The StateObject contract on a real redis-server: commit = BGSAVE kept as a versioned,
//! checksummed RDB; restore(v) brings exactly that state back; a corrupted RDB is refused with an
//! error naming the file, and nothing is loaded from it.

use std::sync::mpsc;
use std::time::Duration;

use prefixkv_dpr::state_object::{StateObject, StateObjectError};
use prefixkv_dprnet::connection::encode_command;
use prefixkv_dredis::manifest::rdb_path;
use prefixkv_dredis::redis::RedisServerConfig;
use prefixkv_dredis::state_object::{RedisStateConfig, RedisStateObject};

const WAIT: Duration = Duration::from_secs(60);

fn set(key: &str) -> Vec<u8> {
    let mut out = Vec::new();
    encode_command(&mut out, &[b"SET", key.as_bytes(), b"v"]);
    out
}

fn exists(key: &str) -> Vec<u8> {
    let mut out = Vec::new();
    encode_command(&mut out, &[b"EXISTS", key.as_bytes()]);
    out
}

fn commit(state: &mut RedisStateObject, version: u64) {
    let (done, persisted) = mpsc::channel();
    state
        .commit(
            version,
            b"meta".to_vec(),
            Box::new(move |r| done.send(r.map_err(|e| e.to_string())).unwrap()),
        )
        .unwrap();
    assert_eq!(persisted.recv_timeout(WAIT).unwrap(), Ok(version));
}

#[test]
fn commit_restore_and_a_corrupt_rdb() {
    let directory = tempfile::tempdir().unwrap();
    let versions = directory.path().join("versions");
    let mut state = RedisStateObject::open(RedisStateConfig {
        server: RedisServerConfig {
            executable: "redis-server".into(),
            // Below the kernel's ephemeral range: no other test's probe of port 0 takes it.
            port: prefixkv_testkit::net::free_port(),
            directory: directory.path().join("redis"),
            start_timeout_ms: 10_000,
        },
        versions_directory: versions.clone(),
        save_timeout_ms: 30_000,
    })
    .unwrap();
    state.execute(1, &[set("a")]).unwrap();
    commit(&mut state, 1);
    state.execute(2, &[set("b")]).unwrap();
    commit(&mut state, 2);
    state.execute(3, &[set("c")]).unwrap();
    assert_eq!(state.persisted_versions().unwrap(), vec![1, 2]);

    assert_eq!(state.restore(1).unwrap(), b"meta".to_vec());
    let present = state
        .execute(4, &[exists("a"), exists("b"), exists("c")])
        .unwrap();
    assert_eq!(
        present,
        vec![b":1\r\n".to_vec(), b":0\r\n".to_vec(), b":0\r\n".to_vec()]
    );
    // Versions above the restored one belong to the abandoned world-line.
    assert_eq!(state.persisted_versions().unwrap(), vec![1]);

    let rdb = rdb_path(&versions, 1);
    let mut bytes = std::fs::read(&rdb).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&rdb, &bytes).unwrap();
    match state.restore(1) {
        Err(StateObjectError::Corrupt { path, .. }) => assert_eq!(path, rdb),
        other => panic!("a corrupt RDB must be refused, got {other:?}"),
    }
    assert!(
        rdb.exists(),
        "the corrupt file is left in place for inspection"
    );
    assert!(matches!(
        state.restore(7),
        Err(StateObjectError::NoSuchVersion { version: 7, .. })
    ));

    state.restore(0).unwrap();
    assert_eq!(
        state.execute(5, &[exists("a")]).unwrap(),
        vec![b":0\r\n".to_vec()]
    );
    state.prune(2).unwrap();
    assert!(state.persisted_versions().unwrap().is_empty());
}
