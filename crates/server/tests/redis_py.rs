//! redis-py against the real server: `tests/python/redis_py_check.py` runs with redis-py's default
//! protocol (RESP3 since redis-py 8) and with `protocol=2` and `protocol=3`, checking strings,
//! MSET/MGET, INCR, DEL, EXPIRE/TTL, hashes, pipelines and HELLO.
//!
//! The test fails (never skips) when python3 or the `redis` module is missing: `./scripts/test`
//! installs the module, so a missing one means the environment is not the one the suite expects.

mod common;

use std::path::Path;
use std::process::Command;

use common::Server;

/// The interpreter: `$PYTHON` if set, else `python3` on PATH.
fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn redis_py_works_in_resp2_and_resp3() {
    let interpreter = python();
    let probe = Command::new(&interpreter)
        .args(["-c", "import redis; print(redis.__version__)"])
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run {interpreter} ({error}): the redis-py test needs python3 with the `redis` \
                 module; ./scripts/test installs it (python3 -m pip install 'redis>=5')"
            )
        });
    assert!(
        probe.status.success(),
        "{interpreter} has no `redis` module ({}): ./scripts/test installs it \
         (python3 -m pip install 'redis>=5')",
        String::from_utf8_lossy(&probe.stderr).trim()
    );

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--appendfsync", "everysec", "--engine-memory", "64mb"],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/redis_py_check.py");
    let mut command = Command::new(&interpreter);
    command.arg(&script).arg(server.port.to_string());
    let output =
        prefixkv_testkit::child::output_within(command, std::time::Duration::from_secs(300))
            .expect("run the redis-py script");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{} failed ({}):\n{stdout}\n{stderr}",
        script.display(),
        output.status
    );
    assert!(stdout.starts_with("ok "), "unexpected output: {stdout}");
    eprintln!("redis-py: {}", stdout.trim());
}
