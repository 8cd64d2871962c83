//! The snapshot oracle against a real `prefixkv-server`: a small dataset is loaded and written by
//! owner-partitioned writers, then SAVE, SIGKILL, restart, and every key is checked. The
//! untampered run passes; values changed behind the writers' backs, a key deleted, a stray key,
//! and a data directory put back to an older SAVE each fail, naming the key.
//!
//! The server binary is the workspace's debug build next to this test executable
//! (`target/debug/prefixkv-server`, which `cargo test --workspace` builds for the server's own
//! integration tests). Without it the tests fail, unless `PREFIXKV_TEST_ALLOW_SKIP` lists
//! `prefixkv-server`. No timing is asserted; every wait is the bounded start-up wait of
//! [`ServerProcess::start`].

use super::client::Client;
use super::oracle::{self, fill_value, key, Acks, Finding};
use super::processes::{Binaries, Durability, Kind, ServerProcess};
use super::snapshot::{launch, load, verify_with, Plan, Writer};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The debug `prefixkv-server` beside this test binary (`target/debug/deps/..`), or `None` after
/// [`prefixkv_testkit::skip::unavailable`] allowed skipping.
fn binaries() -> Option<Binaries> {
    let exe = std::env::current_exe().expect("this test's executable");
    let server = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("prefixkv-server"))
        .filter(|path| path.is_file());
    let Some(server) = server else {
        prefixkv_testkit::skip::unavailable(
            "prefixkv-server",
            "target/debug/prefixkv-server is not built: run `cargo build -p prefixkv-server` \
             (or `cargo test --workspace`, which builds it)",
        );
        return None;
    };
    Some(Binaries {
        prefixkv_server: server,
        // Only our server runs here.
        redis_server: PathBuf::from("redis-server"),
        redis_benchmark: PathBuf::from("redis-benchmark"),
    })
}

fn plan() -> Plan {
    Plan {
        keys: 2_000,
        value_bytes: 64,
        writers: 3,
        pipeline: 8,
        warmup: Duration::ZERO,
        gap: Duration::ZERO,
        bgsaves: 1,
        bgsave_timeout: Duration::from_secs(60),
        durability: Durability::None,
        prefixkv_args: vec!["--threads".into(), "2".into()],
    }
}

/// `batches` pipelined batches from every writer in turn, recorded in `acks`.
fn write(port: u16, plan: &Plan, acks: &mut Acks, batches: usize) -> Result<()> {
    let mut shards = Vec::new();
    for (w, owned) in acks.take_shards().into_iter().enumerate() {
        let mut writer = Writer::connect(port, w, owned, plan)?;
        for _ in 0..batches {
            writer.batch()?;
        }
        shards.push(writer.into_keys());
    }
    acks.restore(shards);
    Ok(())
}

/// Untampered: both checks pass over every key. Then, on the restarted server, one value is
/// replaced by a version no writer was acknowledged for, one key is deleted and a stray key is
/// added: the check fails and names each.
#[test]
fn every_key_passes_untampered_and_fails_on_changes_behind_the_writers() {
    let Some(binaries) = binaries() else { return };
    let temp = tempfile::tempdir().unwrap();
    let plan = plan();
    let launch = launch(Kind::Prefixkv, &plan, &temp.path().join("data"));
    let mut server = ServerProcess::start(&binaries, &launch, Duration::from_secs(60)).unwrap();
    load(server.port, &plan).unwrap();
    let mut acks = Acks::new(plan.keys, plan.writers);
    write(server.port, &plan, &mut acks, 20).unwrap();
    assert!(
        (0..plan.keys).any(|i| acks.expected(i) != 0),
        "writes were recorded"
    );

    let checked = verify_with(&binaries, &launch, &mut server, &plan, &acks, || Ok(())).unwrap();
    assert!(checked.after_save.passed(), "{}", checked.after_save);
    assert!(checked.after_restart.passed(), "{}", checked.after_restart);
    assert_eq!(checked.after_save.keys, plan.keys);
    assert_eq!(checked.after_restart.keys, plan.keys);

    let mut client = Client::connect(server.port).unwrap();
    let mut value = Vec::new();
    fill_value(7, 1, &mut value, plan.value_bytes);
    client.queue(&[b"SET", &key(7), &value]);
    client.queue(&[b"SET", b"stray", b"x"]);
    client.flush().unwrap();
    client.read_ok(2).unwrap();
    client.call(&["DEL", "key:000000000008"]).unwrap();

    let verdict = oracle::check_every_key(&mut client, &acks, plan.value_bytes).unwrap();
    assert!(!verdict.passed());
    assert_eq!((verdict.missing, verdict.wrong, verdict.extra), (1, 1, 1));
    let text = verdict.to_string();
    for named in [
        format!(
            "key:000000000007 holds version 1, acknowledged version {}",
            acks.expected(7)
        ),
        "key:000000000008 missing".to_string(),
        "stray was never written".to_string(),
    ] {
        assert!(text.contains(&named), "{text} does not name {named:?}");
    }
    server.kill();
}

/// The data directory saved after a first round of writes is put back in place of the one saved
/// after a second round: the server restarts fine and its DBSIZE is right, but the keys written in
/// the second round hold older versions than their writers were acknowledged for, and the check
/// after the restart fails on them (the check after the SAVE, before the tampering, passes).
#[test]
fn an_older_checkpoint_put_back_fails_the_check_after_restart() {
    let Some(binaries) = binaries() else { return };
    let temp = tempfile::tempdir().unwrap();
    let plan = plan();
    let data = temp.path().join("data");
    let older = temp.path().join("older");
    let launch = launch(Kind::Prefixkv, &plan, &data);
    let mut server = ServerProcess::start(&binaries, &launch, Duration::from_secs(60)).unwrap();
    load(server.port, &plan).unwrap();
    let mut acks = Acks::new(plan.keys, plan.writers);
    write(server.port, &plan, &mut acks, 10).unwrap();
    let first = verify_with(&binaries, &launch, &mut server, &plan, &acks, || {
        Ok(prefixkv_testkit::fs::copy_dir(&data, &older)?)
    })
    .unwrap();
    assert!(first.after_restart.passed(), "{}", first.after_restart);

    write(server.port, &plan, &mut acks, 10).unwrap();
    let second = verify_with(&binaries, &launch, &mut server, &plan, &acks, || {
        std::fs::remove_dir_all(&data)?;
        Ok(prefixkv_testkit::fs::copy_dir(&older, &data)?)
    })
    .unwrap();
    assert!(second.after_save.passed(), "{}", second.after_save);
    assert_eq!(second.dbsize_after_restart, plan.keys, "DBSIZE cannot tell");
    let verdict = &second.after_restart;
    assert!(!verdict.passed(), "the older image passed: {verdict}");
    assert!(verdict.wrong > 0 && verdict.missing == 0 && verdict.extra == 0);
    assert!(
        verdict.examples.iter().all(|finding| matches!(
            finding,
            Finding::Wrong { expected, found: Some(found), .. } if found < expected
        )),
        "each lost write shows as an older acknowledged version: {verdict}"
    );
    assert!(verdict.to_string().contains("key:"), "{verdict}");
    server.kill();
}
