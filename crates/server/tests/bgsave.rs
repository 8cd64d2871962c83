//! BGSAVE as benchmark tools and clients observe it: `INFO persistence` shows
//! `rdb_bgsave_in_progress:1` from the BGSAVE reply until the checkpoint ends (as Redis, whose
//! fork happens before the reply), so a client polling for the end never mistakes "not started
//! yet" for "done"; `rdb_last_bgsave_status` and the checkpoint count follow.

mod common;

use std::time::{Duration, Instant};

use common::{Raw, Server};
use prefixkv_resp::Reply;
use prefixkv_testkit::env_count;

fn persistence_field(raw: &mut Raw, field: &str) -> String {
    raw.info_field("persistence", field)
}

#[test]
fn bgsave_is_in_progress_from_its_reply_until_it_ends() {
    let rounds = env_count("BGSAVE_ROUNDS", 20);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--appendfsync", "none", "--engine-memory", "64mb"],
    );
    let mut raw = server.raw();
    for round in 0..rounds {
        assert!(matches!(
            raw.call(&["SET", "k", &round.to_string()]),
            Reply::SimpleString(_)
        ));
        let before: u64 = persistence_field(&mut raw, "checkpoints_completed")
            .parse()
            .unwrap();
        match raw.call(&["BGSAVE"]) {
            Reply::SimpleString(text) => assert_eq!(text.as_ref(), b"Background saving started"),
            other => panic!("BGSAVE: {other:?}"),
        }
        // Right after the reply: either still running, or already finished and counted.
        let in_progress = persistence_field(&mut raw, "rdb_bgsave_in_progress");
        let completed: u64 = persistence_field(&mut raw, "checkpoints_completed")
            .parse()
            .unwrap();
        assert!(
            in_progress == "1" || completed > before,
            "round {round}: BGSAVE answered, but INFO shows neither a save in progress nor a finished one"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while persistence_field(&mut raw, "rdb_bgsave_in_progress") != "0" {
            assert!(Instant::now() < deadline, "BGSAVE did not end within 60 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        let completed: u64 = persistence_field(&mut raw, "checkpoints_completed")
            .parse()
            .unwrap();
        assert_eq!(
            completed,
            before + 1,
            "round {round}: exactly one checkpoint per BGSAVE"
        );
        assert_eq!(persistence_field(&mut raw, "rdb_last_bgsave_status"), "ok");
    }
}
